"""POST /run_code over real HTTP under real nsjail: SandboxFusion's shapes, verl's payload, 504, sandbox health.

verl's client (volcengine/verl at b178a3c, `verl/utils/reward_score/sandbox_fusion/utils.py`) POSTs the JSON
body built by `verl_body` below with `Content-Type: application/json` and `Accept: application/json`, and
turns the answer into a per-test result; `verl_outcome` states those rules so each test checks what verl
would conclude: True (right), False (wrong answer), -1 (API or sandbox error), -2 (runtime error),
-3 (timeout), -4 (compile error).
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from proctor.api.run_code import to_response
from proctor.sandboxes.job import CommandResult, Result, RunVerdict
from tests.conftest import ServerProcess, free_port, server_env

RESPONSE_FIELDS = {"status", "message", "compile_result", "run_result", "executor_pod_name", "files"}
COMMAND_FIELDS = {"status", "execution_time", "return_code", "stdout", "stderr"}
VERL_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}
HTTP_TIMEOUT_S = 60.0  # hang detection; the machine is shared

SUM = "a, b = map(int, input().split())\nprint(a + b)\n"
CPP_SUM = (
    "#include <iostream>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << std::endl; }\n"
)


def verl_body(
    code: str, stdin: str | None, language: str = "python", timeout: int = 10, memory_mb: int = 1024
) -> str:
    """The request body verl's call_sandbox_api sends (its compute_score default: timeout 10, 1024 MB)."""
    return json.dumps(
        {
            "compile_timeout": timeout,
            "run_timeout": timeout,
            "code": code,
            "stdin": stdin,
            "memory_limit_MB": memory_mb,
            "language": language,
            "files": {},
            "fetch_files": [],
        }
    )


def verl_outcome(answer: dict[str, Any], expected_output: str) -> bool | int:
    """What verl's _process_single_case concludes from a 200 answer."""
    compile_result, run_result = answer.get("compile_result"), answer.get("run_result")
    status = answer.get("status")
    if status == "SandboxError":
        return -1
    if status == "Failed":
        if compile_result and (
            compile_result["status"] in ("Error", "TimeLimitExceeded")
            or (compile_result["status"] == "Finished" and compile_result["return_code"] != 0)
        ):
            return -4
        if run_result:
            if run_result["status"] == "TimeLimitExceeded":
                return -3
            if run_result["status"] == "Error" or (
                run_result["status"] == "Finished" and run_result["return_code"] != 0
            ):
                return -2
        return -1
    if status == "Success" and run_result and run_result["status"] == "Finished":
        return str(run_result["stdout"] or "").rstrip("\n") == expected_output.rstrip("\n")
    return -1


def call_verl(base: str, code: str, stdin: str | None, **kwargs: Any) -> dict[str, Any]:
    """POST verl's exact body and headers to /run_code; the JSON answer (must be 200, as verl requires)."""
    response = httpx.post(
        f"{base}/run_code",
        content=verl_body(code, stdin, **kwargs),
        headers=VERL_HEADERS,
        timeout=HTTP_TIMEOUT_S,
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    check_shape(answer)
    return answer


def check_shape(answer: dict[str, Any]) -> None:
    """SandboxFusion's RunCodeResponse and CommandRunResult fields, statuses and types, exactly."""
    assert set(answer) == RESPONSE_FIELDS, answer
    assert answer["status"] in ("Success", "Failed", "SandboxError")
    assert isinstance(answer["message"], str)
    assert isinstance(answer["files"], dict)
    assert answer["executor_pod_name"] is None or isinstance(answer["executor_pod_name"], str)
    for key in ("compile_result", "run_result"):
        result = answer[key]
        if result is None:
            continue
        assert set(result) == COMMAND_FIELDS, result
        assert result["status"] in ("Finished", "TimeLimitExceeded", "Error")
        assert isinstance(result["execution_time"], float) and result["execution_time"] >= 0
        assert result["return_code"] is None or isinstance(result["return_code"], int)
        assert isinstance(result["stdout"], str) and isinstance(result["stderr"], str)


def post(base: str, body: dict[str, Any]) -> httpx.Response:
    """POST a JSON body to /run_code."""
    return httpx.post(f"{base}/run_code", json=body, timeout=HTTP_TIMEOUT_S)


def assert_error(response: httpx.Response, status: int, field: str | None) -> str:
    """Proctor's one error shape; the message."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["status"] == status and error["field"] == field, error
    return error["message"]


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of one Prometheus sample with these labels (None if absent)."""
    for line in text.splitlines():
        if line.startswith("#") or not (line.startswith(name + "{") or line.split(" ")[0] == name):
            continue
        sample, _, value = line.rpartition(" ")
        if all(f'{key}="{val}"' in sample for key, val in labels.items()):
            return float(value)
    return None


def wait_for(predicate: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Poll until predicate() holds (hang detection, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def start(tmp: Path, **overrides: str | int) -> ServerProcess:
    """A real server on a free port with these settings."""
    port = free_port()
    server = ServerProcess(server_env(port, **overrides), tmp / f"server-{port}.log")
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server on the default backend (nsjail) with two sandbox workers, for this module."""
    process = start(
        tmp_path_factory.mktemp("run-code"), PROCTOR_SANDBOX_WORKERS=2, PROCTOR_SANDBOX_BACKEND="nsjail"
    )
    yield process.base_url
    process.stop()


@pytest.fixture
def background() -> Iterator[ThreadPoolExecutor]:
    """Threads for requests that stay in flight while the test talks to the server."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        yield pool


# -- verl's payload and SandboxFusion's answers -------------------------------------------------------


def test_correct_python_program_is_success(server: str) -> None:
    answer = call_verl(server, SUM, "1 2\n")
    assert answer["status"] == "Success" and answer["message"] == ""
    assert answer["compile_result"] is None  # SandboxFusion has no compile step for Python
    run = answer["run_result"]
    assert (run["status"], run["return_code"], run["stdout"], run["stderr"]) == ("Finished", 0, "3\n", "")
    assert answer["files"] == {}
    assert verl_outcome(answer, "3") is True


def test_wrong_answer_is_success_with_other_output(server: str) -> None:
    answer = call_verl(server, "print(int(input().split()[0]) - 1)", "1 2\n")
    assert answer["status"] == "Success"
    assert answer["run_result"]["stdout"] == "0\n"
    assert verl_outcome(answer, "3") is False


def test_null_stdin_as_verl_may_send_it(server: str) -> None:
    answer = call_verl(server, "import sys; print(repr(sys.stdin.read()))", None)
    assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "''\n"


def test_cpu_spin_is_time_limit_exceeded(server: str) -> None:
    answer = call_verl(server, "while True:\n    pass\n", "", timeout=1)
    assert answer["status"] == "Failed"
    run = answer["run_result"]
    assert run["status"] == "TimeLimitExceeded" and run["return_code"] is None
    assert "time_limit" in answer["message"]
    assert verl_outcome(answer, "") == -3


def test_sleeper_is_stopped_by_the_wall_backstop(server: str) -> None:
    answer = call_verl(server, "import time\ntime.sleep(3600)\n", "", timeout=1)
    assert answer["status"] == "Failed" and answer["run_result"]["status"] == "TimeLimitExceeded"
    assert verl_outcome(answer, "") == -3


def test_runtime_error_is_failed_with_its_return_code(server: str) -> None:
    answer = call_verl(server, "print('partial')\nraise ValueError('boom')\n", "")
    assert answer["status"] == "Failed"
    run = answer["run_result"]
    assert run["status"] == "Finished" and run["return_code"] == 1
    assert run["stdout"] == "partial\n" and "ValueError: boom" in run["stderr"]
    assert verl_outcome(answer, "partial") == -2


def test_memory_bomb_is_failed_not_a_sandbox_error(server: str) -> None:
    answer = call_verl(server, "x = bytearray(1 << 30)\nprint(len(x))\n", "", memory_mb=128)
    assert answer["status"] == "Failed", answer
    run = answer["run_result"]
    assert run["status"] == "Finished" and run["return_code"] != 0
    assert "memory_limit" in answer["message"]
    assert verl_outcome(answer, "") == -2


def test_cpp_compile_error_has_no_run(server: str) -> None:
    answer = call_verl(server, "int main() { return undefined_name; }\n", "", language="cpp")
    assert answer["status"] == "Failed"
    compiled = answer["compile_result"]
    assert compiled["status"] == "Finished" and compiled["return_code"] != 0
    assert "undefined_name" in compiled["stderr"]
    assert answer["run_result"] is None
    assert answer["message"].startswith("compile: compile_error")
    assert verl_outcome(answer, "") == -4


def test_cpp_program_compiles_and_runs(server: str) -> None:
    answer = call_verl(server, CPP_SUM, "20 22\n", language="cpp")
    assert answer["status"] == "Success", answer
    assert answer["compile_result"]["status"] == "Finished" and answer["compile_result"]["return_code"] == 0
    assert answer["run_result"]["stdout"] == "42\n"
    assert verl_outcome(answer, "42") is True


SUMS = {
    "nodejs": "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(' ').map(Number);\n"
    "console.log(a + b);\n",
    "java": "import java.util.Scanner;\npublic class Main { public static void main(String[] args) {\n"
    "  Scanner in = new Scanner(System.in); System.out.println(in.nextLong() + in.nextLong()); } }\n",
    "go": 'package main\nimport "fmt"\nfunc main() { var a, b int; fmt.Scan(&a, &b); fmt.Println(a + b) }\n',
    "rust": "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s)"
    ".unwrap();\n  let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n"
    '  println!("{}", v[0] + v[1]); }\n',
    "c": '#include <stdio.h>\nint main(void) { long a, b; scanf("%ld %ld", &a, &b); printf("%ld\\n", a + b); }\n',
}


@pytest.mark.parametrize("language", list(SUMS))
def test_sandboxfusion_language_names_run(server: str, language: str) -> None:
    answer = call_verl(server, SUMS[language], "20 22\n", language=language)
    assert answer["status"] == "Success", answer
    assert answer["run_result"]["stdout"] == "42\n"
    assert (answer["compile_result"] is None) == (language == "nodejs")
    assert verl_outcome(answer, "42") is True


def test_run_timeout_is_cpu_time_so_a_short_sleep_passes(server: str) -> None:
    # SandboxFusion would call this a timeout (1.5 s of wall time > run_timeout 1); it uses no CPU, so it
    # passes here: only the wall-clock backstop (2 x 1 + 1 s) stops sleepers.
    answer = call_verl(server, "import time\ntime.sleep(1.5)\nprint('awake')\n", "", timeout=1)
    assert answer["status"] == "Success", answer
    assert answer["run_result"]["stdout"] == "awake\n"
    assert answer["run_result"]["execution_time"] >= 1.5


def test_files_are_placed_and_fetched_as_base64(server: str) -> None:
    body = {
        "code": "text = open('data/in.txt').read()\nopen('out.txt', 'w').write(text.upper())\nprint('ok')\n",
        "language": "python",
        "files": {"data/in.txt": base64.b64encode(b"hello").decode(), "skipped.txt": None},
        "fetch_files": ["out.txt", "missing.txt"],
    }
    answer = post(server, body).json()
    check_shape(answer)
    assert answer["status"] == "Success", answer
    assert answer["files"] == {"out.txt": base64.b64encode(b"HELLO").decode()}


def test_machinery_failure_is_sandbox_error_never_failed(tmp_path: Path) -> None:
    # A real failure of the machinery: the docker backend pointed at a daemon that is not there.
    process = start(
        tmp_path, PROCTOR_SANDBOX_BACKEND="docker", PROCTOR_DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock"
    )
    try:
        answer = call_verl(process.base_url, SUM, "1 2\n")
        assert answer["status"] == "SandboxError"
        assert "docker" in answer["message"] and "unavailable" in answer["message"]
        assert answer["run_result"] is None and answer["compile_result"] is None
        assert verl_outcome(answer, "3") == -1  # an error to verl, not a wrong answer
        sandbox = httpx.get(f"{process.base_url}/healthz", timeout=HTTP_TIMEOUT_S).json()["sandbox"]
        assert sandbox["backend"] == "docker" and "no-docker.sock" in sandbox["unavailable"]
        assert sandbox["pool"] is None
    finally:
        process.stop()


# -- bad requests --------------------------------------------------------------------------------------


def test_unknown_language_is_422_naming_language(server: str) -> None:
    message = assert_error(post(server, {"code": "x", "language": "cobol"}), 422, "language")
    assert "cobol" in message and "python" in message
    assert_error(post(server, {"code": "x", "language": "php"}), 422, "language")  # SandboxFusion's, not ours


def test_bad_fields_are_422_naming_them(server: str) -> None:
    assert_error(post(server, {"language": "python"}), 422, "code")
    assert_error(post(server, {"code": "", "language": "python", "run_timeout": 0}), 422, "run_timeout")
    assert_error(
        post(server, {"code": "", "language": "python", "memory_limit_MB": 8}), 422, "memory_limit_MB"
    )
    escape = {"code": "", "language": "python", "files": {"../x": base64.b64encode(b"x").decode()}}
    assert_error(post(server, escape), 422, "files.../x")
    garbage = {"code": "", "language": "python", "files": {"a.txt": "not base64!"}}
    assert_error(post(server, garbage), 422, "files.a.txt")
    fetch = {"code": "", "language": "python", "fetch_files": ["/etc/passwd"]}
    assert_error(post(server, fetch), 422, "fetch_files.0")


# -- health and metrics --------------------------------------------------------------------------------


def test_healthz_and_metrics_report_the_sandbox(server: str) -> None:
    call_verl(server, "print(1)", "")
    call_verl(server, "raise SystemExit(2)", "")
    health = httpx.get(f"{server}/healthz", timeout=HTTP_TIMEOUT_S).json()
    sandbox = health["sandbox"]
    assert sandbox["backend"] == "nsjail" and sandbox["unavailable"] is None
    pool = sandbox["pool"]
    assert (pool["workers"], pool["queue"]) == (2, 64)
    assert pool["completed"] >= 2 and pool["verdicts"]["ok"] >= 1 and pool["verdicts"]["runtime_error"] >= 1
    text = httpx.get(f"{server}/metrics", timeout=HTTP_TIMEOUT_S).text
    assert metric_value(text, "proctor_sandbox", field="workers") == 2
    assert metric_value(text, "proctor_sandbox", field="running") is not None
    assert metric_value(text, "proctor_sandbox_jobs_total", verdict="ok") >= 1
    assert metric_value(text, "proctor_sandbox_jobs_total", verdict="runtime_error") >= 1
    assert metric_value(text, "proctor_sandbox_jobs_total", verdict="sandbox_error") == 0


def test_healthz_detail_reports_toolchains_and_caches_them(server: str) -> None:
    plain = httpx.get(f"{server}/healthz", timeout=HTTP_TIMEOUT_S).json()["sandbox"]
    detail = httpx.get(f"{server}/healthz", params={"detail": "true"}, timeout=120).json()["sandbox"]
    doctor = detail["doctor"]
    assert doctor is not None, detail
    assert plain["doctor"] in (None, doctor)
    again = httpx.get(f"{server}/healthz", timeout=HTTP_TIMEOUT_S).json()["sandbox"]
    assert again["doctor"] == doctor  # cached: a plain /healthz never runs the toolchains


def test_a_service_that_never_runs_code_never_starts_the_pool(tmp_path: Path) -> None:
    process = start(tmp_path)
    try:
        httpx.post(
            f"{process.base_url}/v1/score",
            json={"verifier": "text.match", "response": "Answer: 1", "reference": "1"},
            timeout=HTTP_TIMEOUT_S,
        )
        sandbox = httpx.get(f"{process.base_url}/healthz", timeout=HTTP_TIMEOUT_S).json()["sandbox"]
        assert sandbox["pool"] is None and sandbox["doctor"] is None
    finally:
        process.stop()


# -- load: back-pressure, then 504, and a responsive service ------------------------------------------


def test_full_sandbox_queue_waits_then_answers_504_with_retry_after(
    tmp_path: Path, background: ThreadPoolExecutor
) -> None:
    """verl retries 504 and nothing else, so /run_code never answers a full queue with 429."""
    process = start(
        tmp_path,
        PROCTOR_SANDBOX_WORKERS=1,
        PROCTOR_SANDBOX_QUEUE=0,
        PROCTOR_RETRY_AFTER_S=3,
        PROCTOR_RUN_CODE_QUEUE_WAIT_S=1,
    )
    base = process.base_url
    try:
        busy: Future = background.submit(call_verl, base, "import time\ntime.sleep(3600)\n", "", timeout=4)

        def running() -> bool:
            pool = httpx.get(f"{base}/healthz", timeout=HTTP_TIMEOUT_S).json()["sandbox"]["pool"]
            return pool is not None and pool["running"] == 1

        wait_for(running, "the sleeper to hold the only sandbox worker")
        started = time.monotonic()
        rejected = httpx.post(
            f"{base}/run_code",
            content=verl_body("print(1)", ""),
            headers=VERL_HEADERS,
            timeout=HTTP_TIMEOUT_S,
        )
        assert time.monotonic() - started >= 1.0  # it waited PROCTOR_RUN_CODE_QUEUE_WAIT_S first
        assert "did not start within 1 s" in assert_error(rejected, 504, None)
        assert rejected.headers["Retry-After"] == "3"
        text = httpx.get(f"{base}/metrics", timeout=HTTP_TIMEOUT_S).text
        assert metric_value(text, "proctor_rejected_total", reason="sandbox_wait") == 1
        assert metric_value(text, "proctor_rejected_total", reason="sandbox_full") in (None, 0)
        assert metric_value(text, "proctor_sandbox", field="running") == 1
        assert busy.result(timeout=HTTP_TIMEOUT_S)["run_result"]["status"] == "TimeLimitExceeded"
        assert call_verl(base, "print(1)", "")["status"] == "Success"  # room again
    finally:
        process.stop()


ABUSIVE = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "spinners": "import os\nfor _ in range(16):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n",
    "memory bomb": "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n",
    "output flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
}


def test_service_answers_while_sandboxes_run_abusive_programs(
    server: str, background: ThreadPoolExecutor
) -> None:
    floods = {
        name: background.submit(call_verl, server, code, "", timeout=2) for name, code in ABUSIVE.items()
    }
    wait_for(
        lambda: (
            (httpx.get(f"{server}/healthz", timeout=HTTP_TIMEOUT_S).json()["sandbox"]["pool"] or {}).get(
                "running", 0
            )
            > 0
        ),
        "an abusive program to be running",
    )
    for _ in range(3):  # the 10 s client timeouts only detect a service stuck behind its sandboxes
        assert httpx.get(f"{server}/healthz", timeout=10).status_code == 200
        score = httpx.post(
            f"{server}/v1/score",
            json={"verifier": "text.match", "response": "Answer: 7", "reference": "7"},
            timeout=10,
        ).json()
        assert score["status"] == "ok" and score["reward"] == 1.0
    for name, future in floods.items():
        answer = future.result(timeout=HTTP_TIMEOUT_S)
        assert answer["status"] == "Failed", (name, answer)
        assert verl_outcome(answer, "") in (-2, -3), (name, answer)


# -- the mapping from sandbox results to SandboxFusion's answer (pure data, no server) -------------------


def test_a_sandbox_error_in_any_command_is_sandbox_error() -> None:
    compiled = CommandResult(name="compile", verdict=RunVerdict.ok, exit_code=0)
    broken = CommandResult(name="run", verdict=RunVerdict.sandbox_error, detail="nsjail could not mount /usr")
    answer = to_response(Result(backend="nsjail", commands=[compiled, broken])).model_dump(mode="json")
    check_shape(answer)
    assert answer["status"] == "SandboxError" and "could not mount" in answer["message"]
    assert answer["run_result"]["status"] == "Error" and answer["run_result"]["return_code"] is None
    assert verl_outcome(answer, "") == -1
    failed_compile = CommandResult(name="compile", verdict=RunVerdict.sandbox_error, detail="no cgroup")
    answer = to_response(Result(backend="nsjail", commands=[failed_compile])).model_dump(mode="json")
    assert answer["status"] == "SandboxError" and answer["compile_result"]["status"] == "Error"
    assert verl_outcome(answer, "") == -1


def test_a_limit_never_reads_as_return_code_zero() -> None:
    # A tree stopped at its memory limit whose first process still exited 0 is not a clean exit.
    stopped = CommandResult(
        name="run", verdict=RunVerdict.memory_limit, exit_code=0, detail="memory limit 64 MB"
    )
    answer = to_response(Result(backend="nsjail", commands=[stopped])).model_dump(mode="json")
    assert answer["status"] == "Failed" and answer["run_result"]["return_code"] == -9
    assert verl_outcome(answer, "") == -2


def test_no_run_result_without_a_failure_is_a_sandbox_error() -> None:
    compiled = CommandResult(name="compile", verdict=RunVerdict.ok, exit_code=0)
    answer = to_response(Result(backend="nsjail", commands=[compiled])).model_dump(mode="json")
    assert answer["status"] == "SandboxError" and answer["run_result"] is None


# -- operator maxima, bounded files, runtime out-of-memory, clean shutdown (issue 14) ------------------


def test_limits_above_the_operator_maxima_are_422_naming_the_field(server: str) -> None:
    host_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    base = {"code": "print(1)", "language": "python"}
    # The defaults: half the host's memory, 60 CPU seconds.
    message = assert_error(
        post(server, {**base, "memory_limit_MB": min(65536, host_mb)}), 422, "memory_limit_MB"
    )
    assert "maximum" in message
    assert_error(post(server, {**base, "run_timeout": 61}), 422, "run_timeout")
    assert_error(post(server, {**base, "language": "cpp", "compile_timeout": 600}), 422, "compile_timeout")
    assert (
        post(server, {**base, "run_timeout": 60, "memory_limit_MB": host_mb // 4}).json()["status"]
        == "Success"
    )


def test_operator_maxima_are_settings(tmp_path: Path) -> None:
    process = start(tmp_path, PROCTOR_SANDBOX_MAX_CPU_S=2, PROCTOR_SANDBOX_MAX_MEMORY_MB=512)
    try:
        base = {"code": "print(1)", "language": "python"}
        assert_error(post(process.base_url, {**base, "run_timeout": 3}), 422, "run_timeout")
        assert_error(post(process.base_url, {**base, "memory_limit_MB": 513}), 422, "memory_limit_MB")
        # Defaults the request left out (10 s, 1024 MB) are lowered to the maxima rather than refused.
        answer = post(process.base_url, base).json()
        assert answer["status"] == "Success", answer
    finally:
        process.stop()


def test_a_file_count_bomb_is_failed_with_output_limit(server: str) -> None:
    # 20,000 empty files: twice PROCTOR_SANDBOX_MAX_FILES' default, in well under a CPU second.
    code = "import os\nfor i in range(20_000):\n    open(f'f{i}', 'w').close()\nprint('done')\n"
    answer = call_verl(server, code, "")
    assert answer["status"] == "Failed", answer
    assert answer["message"].startswith("run: output_limit"), answer["message"]
    assert answer["run_result"]["return_code"] != 0
    assert verl_outcome(answer, "done") == -2


def test_java_out_of_memory_error_is_memory_limit(server: str) -> None:
    code = (
        "import java.util.*;\npublic class Main { public static void main(String[] a) {\n"
        "  List<long[]> keep = new ArrayList<>(); while (true) keep.add(new long[1 << 20]); } }\n"
    )
    answer = call_verl(server, code, "", language="java", memory_mb=256)
    assert answer["status"] == "Failed", answer
    assert "java.lang.OutOfMemoryError" in answer["run_result"]["stderr"]
    assert answer["message"].startswith("run: memory_limit"), answer["message"]


def test_sigterm_leaves_no_sandbox_directories_mounts_or_cgroups(tmp_path: Path) -> None:
    from proctor.sandboxes.backends.runner import work_base
    from proctor.sandboxes.cgroups import Cgroups

    process = start(tmp_path, PROCTOR_SANDBOX_WORKERS=1)
    pid = process.process.pid
    try:
        assert call_verl(process.base_url, "print(1)", "")["status"] == "Success"
        assert list(work_base().glob(f"proctor-*-{pid}-*")) != []  # warm slots and the jail's /etc
    finally:
        process.stop()  # SIGTERM
    assert process.process.returncode in (0, -15)
    assert list(work_base().glob(f"proctor-*-{pid}-*")) == []
    assert [
        line for line in Path("/proc/self/mountinfo").read_text().splitlines() if f"-{pid}-" in line
    ] == []
    assert [c for parent in Cgroups().parent_dirs() if parent.is_dir() for c in parent.glob(f"{pid}-*")] == []
