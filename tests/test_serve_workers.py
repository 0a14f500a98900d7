"""`proctor serve --workers N` sizes admission, the verifier pool and the sandbox pool per host: the split
arithmetic, the workers' slot locks, and a real two-worker server scored through, counted and stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from proctor.api import server
from proctor.api.budget import HOST_SETTINGS, budget_report, setting_minimum, split_budget, worker_budget
from proctor.api.server import SLOTS_ENV, claim_slot
from proctor.settings import Settings
from tests.conftest import REPO_ROOT, free_port, server_env

# -- the split ---------------------------------------------------------------------------------------------


def test_split_adds_up_and_differs_by_at_most_one() -> None:
    for parts in range(1, 9):
        for total in range(parts, 60):
            shares = split_budget(total, parts, minimum=1)
            assert len(shares) == parts
            assert sum(shares) == total
            assert max(shares) - min(shares) <= 1
            assert shares == sorted(shares, reverse=True)  # the remainder goes to the first slots


def test_split_spreads_the_remainder() -> None:
    assert split_budget(64, 2) == [32, 32]
    assert split_budget(3, 2, minimum=1) == [2, 1]
    assert split_budget(7, 3) == [3, 2, 2]
    assert split_budget(10, 4) == [3, 3, 2, 2]


def test_split_never_goes_below_the_minimum() -> None:
    # Fewer than one per worker: each worker still gets one (the host runs `parts`); a queue may get 0.
    assert split_budget(1, 2, minimum=1) == [1, 1]
    assert split_budget(2, 4, minimum=1) == [1, 1, 1, 1]
    assert split_budget(1, 2, minimum=0) == [1, 0]
    assert split_budget(0, 3, minimum=0) == [0, 0, 0]


@pytest.mark.parametrize(("total", "parts", "minimum"), [(4, 0, 1), (-1, 2, 0), (4, 2, -1)])
def test_split_refuses_nonsense(total: int, parts: int, minimum: int) -> None:
    with pytest.raises(ValueError):
        split_budget(total, parts, minimum)


def test_minimums_are_the_settings_own() -> None:
    assert {name: setting_minimum(name) for name in HOST_SETTINGS} == {
        "max_concurrency": 1,
        "max_queue": 0,
        "max_inline_concurrency": 1,
        "max_inline_queue": 0,
        "pool_workers": 1,
        "pool_queue": 1,
        "sandbox_workers": 1,
        "sandbox_queue": 0,
    }


def test_worker_shares_add_up_to_the_host() -> None:
    host = Settings(
        workers=3,
        max_concurrency=10,
        max_queue=1,
        max_inline_concurrency=256,
        max_inline_queue=1024,
        pool_workers=4,
        pool_queue=4096,
        sandbox_workers=2,
        sandbox_queue=0,
    )
    budgets = [worker_budget(host, slot) for slot in range(3)]
    for name in HOST_SETTINGS:
        shares = [budget.share[name] for budget in budgets]
        assert min(shares) >= setting_minimum(name)
        if getattr(host, name) >= 3 * setting_minimum(name):
            assert sum(shares) == getattr(host, name), name
    assert [budget.share["pool_workers"] for budget in budgets] == [2, 1, 1]
    assert [budget.share["sandbox_workers"] for budget in budgets] == [1, 1, 1]  # 2 < 3 workers: one each
    assert [budget.share["max_queue"] for budget in budgets] == [1, 0, 0]
    assert all(budget.host["pool_workers"] == 4 and budget.workers == 3 for budget in budgets)
    # Every share is a valid setting value (the worker's Settings are built from them).
    for budget in budgets:
        Settings(**budget.share)
    # A worker that found no free slot takes the smallest share; an out-of-range slot is an error.
    assert worker_budget(host, None).share == budgets[-1].share
    with pytest.raises(ValueError):
        worker_budget(host, 3)


def test_one_worker_keeps_the_whole_budget() -> None:
    host = Settings(workers=1, pool_workers=5, max_concurrency=7)
    budget = worker_budget(host, 0)
    assert dict(budget.share) == dict(budget.host)
    assert budget_report(host)["share"]["pool_workers"] == 5


# -- slots -------------------------------------------------------------------------------------------------


@pytest.fixture
def held_slots(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The descriptors this test's claims hold, closed (their locks dropped) afterwards."""
    held: list[int] = []
    monkeypatch.setattr(server, "_held_slot", held)
    yield held
    for fd in held:
        os.close(fd)


CLAIM_AND_WAIT = (
    "import sys, time\n"
    "from proctor.api.server import claim_slot\n"
    "print(claim_slot(sys.argv[1], int(sys.argv[2])), flush=True)\n"
    "time.sleep(60)\n"
)


def test_slots_are_taken_once_and_freed_when_the_holder_dies(tmp_path: Path, held_slots: list[int]) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", CLAIM_AND_WAIT, str(tmp_path), "2"], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "0"
        assert claim_slot(str(tmp_path), 2) == 1  # slot 0 is held by the other process
        assert claim_slot(str(tmp_path), 2) is None  # every slot held: a rolling restart's newcomer
        assert not os.get_inheritable(held_slots[0])  # a pool worker or sandbox never inherits the lock
        assert (tmp_path / "worker-1.lock").read_text() == str(os.getpid())
        holder.kill()  # as a crashed uvicorn worker: its replacement takes the slot it held
        holder.wait(timeout=10)
        assert claim_slot(str(tmp_path), 2) == 0
    finally:
        holder.kill()
        holder.wait(timeout=10)


# -- a real `proctor serve --workers 2` --------------------------------------------------------------------

HOST = {"PROCTOR_POOL_WORKERS": 3, "PROCTOR_SANDBOX_WORKERS": 3, "PROCTOR_MAX_CONCURRENCY": 5}
READY_TIMEOUT_S = 60.0


def metric_series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of metric `name` in a Prometheus text exposition, with its labels."""
    samples = []
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        labels_text, value = line[len(name) + 1 :].rsplit("} ", 1)
        labels = dict(part.split("=", 1) for part in labels_text.split(",") if part)
        samples.append(({key: raw.strip('"') for key, raw in labels.items()}, float(value)))
    return samples


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the one sample of `name` with exactly these labels, or None."""
    for found, value in metric_series(text, name):
        if found == labels:
            return value
    return None


class Serve:
    """`python -m proctor serve --workers 2` in its own session, its output in a log file."""

    def __init__(self, tmp_path: Path):
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = tmp_path / "serve.log"
        env = server_env(port, **HOST)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "proctor", "serve", "--workers", "2", "--port", str(port)],
            cwd=REPO_ROOT,
            env=env,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.root = psutil.Process(self.process.pid)

    def output(self) -> str:
        """What the server printed."""
        return self.log_path.read_text(errors="replace")

    def workers(self) -> list[psutil.Process]:
        """The uvicorn worker processes (multiprocessing spawn children of the parent)."""
        return [
            child for child in self.root.children() if any("spawn_main" in part for part in _cmdline(child))
        ]

    def stop(self) -> None:
        """SIGTERM (SIGKILL to its session if it hangs), as a service manager would."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []


def pool_children(worker: psutil.Process) -> list[psutil.Process]:
    """The verifier pool's worker processes (`python -m proctor.worker`) of one uvicorn worker."""
    try:
        children = worker.children()
    except psutil.NoSuchProcess:
        return []
    return [child for child in children if "proctor.worker" in _cmdline(child)]


def fresh_post(base: str, path: str, body: dict[str, Any]) -> httpx.Response:
    """POST on a new connection, so the kernel may hand it to either uvicorn worker."""
    with httpx.Client(timeout=60) as client:
        return client.post(f"{base}{path}", json=body)


TEXT = {"verifier": "text.match", "response": "Answer: 42", "reference": "42"}
MATH = {"verifier": "math", "response": "So the answer is \\boxed{\\frac{1}{2}}", "reference": "0.5"}
CODE = {
    "verifier": "code",
    "response": "```python\nimport sys\na, b = map(int, sys.stdin.read().split())\nprint(a + b)\n```",
    "reference": {
        "language": "python",
        "tests": {"format": "stdio", "cases": [{"stdin": "1 2\n", "stdout": "3\n"}]},
    },
}
RUN_CODE = {"code": "print(6 * 7)", "language": "python"}


def score_round(base: str) -> None:
    """One inline, two pool and one /run_code request, at once, each on its own connection; all answered right."""
    with ThreadPoolExecutor(max_workers=4) as threads:
        text, math, code, run = threads.map(
            lambda call: fresh_post(base, *call),
            [("/v1/score", TEXT), ("/v1/score", MATH), ("/v1/score", CODE), ("/run_code", RUN_CODE)],
        )
    for answer in (text, math, code):
        assert answer.status_code == 200, answer.text
        assert (answer.json()["status"], answer.json()["reward"]) == ("ok", 1.0), answer.text
    assert run.status_code == 200, run.text
    assert run.json()["status"] == "Success" and run.json()["run_result"]["stdout"] == "42\n", run.text


def test_two_workers_share_one_host_budget(tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    try:
        _check_two_workers(serve)
    except BaseException:
        print(serve.output())
        raise
    finally:
        tree = _tree(serve.root)
        dirs = _serve_dirs(serve)
        serve.stop()
    assert serve.process.returncode is not None
    # Nothing the server started outlives it: uvicorn workers, pool workers, sandboxes (warm ones included).
    deadline = time.monotonic() + 15
    left = tree
    while left and time.monotonic() < deadline:
        left = [process for process in left if _still_running(process)]
        time.sleep(0.2)
    assert not left, [(_cmdline(process), process.pid) for process in left]
    assert dirs and not any(Path(directory).exists() for directory in dirs), dirs


def _check_two_workers(serve: Serve) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        assert serve.process.poll() is None, serve.output()
        try:
            if httpx.get(f"{serve.base}/healthz", timeout=2).status_code == 200 and len(serve.workers()) == 2:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the server did not come up"
        time.sleep(0.2)
    workers = serve.workers()
    # Score until both workers have started their verifier pools and sandbox pools (the kernel picks which
    # worker accepts each connection, so a few rounds may land on one of them).
    while True:
        score_round(serve.base)
        text = httpx.get(f"{serve.base}/metrics", timeout=10).text
        started = [
            metric(text, "proctor_pool", field="workers"),
            metric(text, "proctor_sandbox", field="workers"),
        ]
        counts = sorted(len(pool_children(worker)) for worker in workers)
        if 0 not in counts and started == [3, 3]:
            break
        assert time.monotonic() < deadline, f"both workers did not start their pools: {counts}, {started}"
        time.sleep(0.5)  # each worker refreshes its gauges every second
    # The host runs PROCTOR_POOL_WORKERS=3 pool processes, 2 under one worker and 1 under the other (not 3 each).
    assert counts == [1, 2]
    assert len(serve.workers()) == 2  # no worker died along the way

    text = httpx.get(f"{serve.base}/metrics", timeout=10).text
    assert metric(text, "proctor_host_budget", setting="workers") == 2
    for name, total in HOST.items():
        setting = name.removeprefix("PROCTOR_").lower()
        assert metric(text, "proctor_host_budget", setting=setting) == total
        shares = {
            labels["pid"]: value
            for labels, value in metric_series(text, "proctor_worker_budget")
            if labels["setting"] == setting
        }
        assert set(shares) == {str(worker.pid) for worker in workers}, shares
        assert sorted(shares.values()) == sorted(split_budget(total, 2, 1)), (setting, shares)

    seen: dict[int, dict[str, Any]] = {}
    for _ in range(40):
        with httpx.Client(timeout=10) as client:
            health = client.get(f"{serve.base}/healthz").json()
        seen[health["budget"]["slot"]] = health
        if len(seen) == 2:
            break
    assert set(seen) == {0, 1}, "healthz never answered from both workers"
    for slot, health in seen.items():
        budget = health["budget"]
        assert budget["workers"] == 2 and budget["host"]["pool_workers"] == 3
        assert budget["share"]["pool_workers"] == [2, 1][slot]
        assert budget["share"]["max_concurrency"] == [3, 2][slot]
        assert health["pool"]["workers"] == [2, 1][slot]
        assert health["sandbox"]["pool"]["workers"] == [2, 1][slot]

    # A worker that dies (SIGKILL: no clean-up of its own) takes its pool processes with it; uvicorn's replacement
    # takes its slot, and /metrics stops counting the dead worker's share and pool.
    dead = next(worker for worker in workers if len(pool_children(worker)) == 1)
    orphans = pool_children(dead)
    dead.kill()
    survivor = next(worker for worker in workers if worker.pid != dead.pid)
    while True:
        assert time.monotonic() < deadline + 30, "uvicorn did not replace the killed worker"
        alive = serve.workers()
        if len(alive) == 2 and dead.pid not in {worker.pid for worker in alive}:
            with httpx.Client(timeout=10) as client:
                text = client.get(f"{serve.base}/metrics").text
            pids = {labels["pid"] for labels, _ in metric_series(text, "proctor_worker_budget")}
            if pids == {str(worker.pid) for worker in alive}:
                break
        time.sleep(0.2)
    assert not [orphan for orphan in orphans if _still_running(orphan)]
    replacement = next(worker for worker in alive if worker.pid != survivor.pid)
    assert metric(text, "proctor_worker_budget", pid=str(replacement.pid), setting="pool_workers") == 1
    # Only the survivor's pool is live until the replacement scores its first pool item.
    assert metric(text, "proctor_pool", field="workers") == 2


def _tree(root: psutil.Process) -> list[psutil.Process]:
    """The server's process and every descendant now (pool workers, sandboxes, uvicorn's resource tracker)."""
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return [root]


def _still_running(process: psutil.Process) -> bool:
    """Whether this very process (not a new one with its pid) still runs (a zombie does not)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _serve_dirs(serve: Serve) -> list[str]:
    """The metrics and slot directories serve() made for its workers, read from a worker's environment."""
    for worker in serve.workers():
        try:
            environ = worker.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        return [environ[key] for key in ("PROMETHEUS_MULTIPROC_DIR", SLOTS_ENV) if key in environ]
    return []
