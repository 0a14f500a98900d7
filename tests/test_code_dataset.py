"""The code set (datasets/code/problems.jsonl): well-formed, its solutions checked without the verifier, and
Proctor's `code` verifier agreeing with it.

The solutions are validated independently of verifiers/code so the data can be trusted on its own: stdio
programs run in the real sandbox (nsjail by default) through `Submission`, and their output is compared here;
call and assert-script problems run in a `Submission` whose harness loads the solution (a Python or JavaScript
module; Go through reflection) and prints plain JSON (call) or a completion line after the script's asserts
(assert_script). These harnesses are written here, apart from the verifier's own (verifiers/code/harness.py); they
trust the candidate's process, which is sound for this set's honest solutions only; the verifier's job is to
be sound for hostile ones.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from proctor.sandboxes.job import CommandResult, File, RunLimits, RunVerdict
from proctor.sandboxes.languages import LANGUAGES
from proctor.sandboxes.program import Submission

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "code" / "problems.jsonl"
ROW_KEYS = {"id", "language", "prompt", "reference", "correct", "wrong"}
REFERENCE_KEYS = {"language", "tests", "limits", "reference_solution"}
FORMAT_KEYS = {
    "stdio": ({"format", "cases"}, {"compare", "checker"}),
    "call": ({"format", "entry_point", "cases"}, {"method_of"}),
    "assert_script": ({"format", "entry_point", "script"}, {"setup", "candidate_names"}),
}
COMPARES = {"tokens", "lines", "exact", "float"}
MIN_PROBLEMS = 30
MIN_STDIO_LANGUAGES = 3
MAX_CASES = 10
FLOAT_TOLERANCE = 1e-6
DEFAULT_CPU_S = 2.0
DEFAULT_MEMORY_MB = 1024
FENCE = re.compile(r"```([A-Za-z0-9+#-]*)[^\n]*\n(.*?)```", re.DOTALL)
PASSED_LINE = "ALL-ASSERTS-PASSED"

CALL_HARNESS = """\
import json
import sys

import solution

spec = json.loads(sys.stdin.read())
for args in spec["args"]:
    owner = getattr(solution, spec["method_of"])() if spec["method_of"] else solution
    try:
        line = json.dumps({"value": getattr(owner, spec["entry_point"])(*args)}, sort_keys=True)
    except Exception as exc:  # a raising or non-JSON answer is this case's failure, not the harness's
        line = json.dumps({"error": type(exc).__name__})
    print(line)
"""


# JavaScript: the solution becomes a module exporting the entry point (and the class, LeetCode style).
JS_CALL_HARNESS = """\
const solution = require("./solution.js");
const spec = JSON.parse(require("fs").readFileSync(0, "utf8"));
for (const args of spec.args) {
  const owner = spec.method_of ? new solution[spec.method_of]() : solution;
  let line;
  try {
    line = JSON.stringify({ value: owner[spec.entry_point](...args) });
  } catch (error) {
    line = JSON.stringify({ error: String(error) });
  }
  console.log(line);
}
"""
# Go: the solution's file joined with a main that calls the entry point through reflection, decoding each
# argument as JSON into the parameter's own type.
GO_CALL_MAIN = """
func main() {
\tdata, _ := hio.ReadAll(hos.Stdin)
\tvar spec [][]hjson.RawMessage
\tif err := hjson.Unmarshal(data, &spec); err != nil {
\t\tpanic(err)
\t}
\tf := hreflect.ValueOf(ENTRY)
\tfor _, args := range spec {
\t\tin := []hreflect.Value{}
\t\tfor i, raw := range args {
\t\t\tp := hreflect.New(f.Type().In(i))
\t\t\tif err := hjson.Unmarshal(raw, p.Interface()); err != nil {
\t\t\t\tpanic(err)
\t\t\t}
\t\t\tin = append(in, p.Elem())
\t\t}
\t\tb, _ := hjson.Marshal(map[string]interface{}{"value": f.Call(in)[0].Interface()})
\t\thos.Stdout.Write(append(b, '\\n'))
\t}
}
"""
GO_IMPORTS = 'import (\n\thjson "encoding/json"\n\thio "io"\n\thos "os"\n\threflect "reflect"\n)\n'
DEFINES = {"python": "def {}(", "javascript": "{}(", "go": "func {}("}


def load_rows() -> list[dict[str, Any]]:
    """The problems, parsed."""
    with DATASET.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


ROWS = load_rows()
BY_FORMAT = {fmt: [r for r in ROWS if r["reference"]["tests"]["format"] == fmt] for fmt in FORMAT_KEYS}


def code_of(response: str) -> tuple[str, str]:
    """The last fenced block of a response: (its info string, its code)."""
    blocks = FENCE.findall(response)
    assert blocks, "no fenced code block"
    return blocks[-1]


def limits_of(reference: dict[str, Any]) -> RunLimits:
    """The reference's limits, or the issue's defaults (2 s CPU, 1 GiB)."""
    given = reference.get("limits") or {}
    return RunLimits(
        cpu_s=given.get("cpu_s", DEFAULT_CPU_S), memory_mb=given.get("memory_mb", DEFAULT_MEMORY_MB)
    )


def same_output(got: str, expected: str, compare: str) -> bool:
    """Whether a program's stdout matches the expected output under the named comparison."""
    if compare == "exact":
        return got == expected
    if compare == "lines":
        return [line.rstrip() for line in got.rstrip("\n").split("\n")] == [
            line.rstrip() for line in expected.rstrip("\n").split("\n")
        ]
    got_tokens, want_tokens = got.split(), expected.split()
    if compare == "tokens":
        return got_tokens == want_tokens
    if len(got_tokens) != len(want_tokens):
        return False
    for have, want in zip(got_tokens, want_tokens, strict=True):
        try:
            a, b = float(have), float(want)
        except ValueError:
            if have != want:
                return False
            continue
        if abs(a - b) > FLOAT_TOLERANCE * max(1.0, abs(b)):
            return False
    return True


def run_python(main: str, solution: str, stdin: str, limits: RunLimits) -> CommandResult:
    """Run a harness `main` next to `solution.py` in a Python sandbox."""
    files = [File(path="solution.py", content=solution)]
    with Submission("python", main, limits=limits, files=files) as submission:
        outcome = submission.compile()
        if not outcome.ok:
            return CommandResult(name="load", verdict=RunVerdict.runtime_error, detail=outcome.message)
        return submission.run(stdin)


def stdio_passes(row: dict[str, Any], response: str) -> tuple[bool, str]:
    """Run a stdio solution on every case; (all cases passed, why not)."""
    reference = row["reference"]
    tests = reference["tests"]
    compare = tests.get("compare", "tokens")
    _, code = code_of(response)
    with Submission(reference["language"], code, limits=limits_of(reference)) as submission:
        outcome = submission.compile()
        if not outcome.ok:
            return False, f"{outcome.status}: {outcome.message[:300]}"
        results = submission.run_many([case["stdin"] for case in tests["cases"]])
    for index, (case, result) in enumerate(zip(tests["cases"], results, strict=True)):
        if result.verdict is not RunVerdict.ok:
            return False, f"case {index}: {result.verdict.value} {result.detail} {result.stderr[-300:]}"
        if not same_output(result.stdout, case["stdout"], compare):
            return False, f"case {index}: got {result.stdout[:200]!r}, want {case['stdout'][:200]!r}"
    return True, ""


def run_call(row: dict[str, Any], code: str, spec: dict[str, Any]) -> CommandResult:
    """Run the solution's entry point on every case's arguments in one sandboxed process (JSON lines out)."""
    reference = row["reference"]
    language = reference["language"]
    limits = limits_of(reference)
    if language == "python":
        return run_python(CALL_HARNESS, code, json.dumps(spec), limits)
    if language == "javascript":
        names = [spec["method_of"] or spec["entry_point"]]
        exports = "\nmodule.exports = {" + ", ".join(f"{n}: {n}" for n in names) + "};\n"
        files = [File(path="solution.js", content=code + exports)]
        program = JS_CALL_HARNESS
    else:
        assert language == "go", language
        body = re.sub(r"^package\s+\w+", "", code.strip(), count=1, flags=re.M)
        program = "package main\n" + GO_IMPORTS + body + GO_CALL_MAIN.replace("ENTRY", spec["entry_point"])
        files = []
    with Submission(language, program, limits=limits, files=files) as submission:
        outcome = submission.compile()
        if not outcome.ok:
            return CommandResult(name="load", verdict=RunVerdict.runtime_error, detail=outcome.message)
        return submission.run(json.dumps(spec["args"] if language == "go" else spec))


def call_passes(row: dict[str, Any], response: str) -> tuple[bool, str]:
    """Call the solution's entry point on every case in one sandboxed process; compare the JSON here."""
    reference = row["reference"]
    tests = reference["tests"]
    _, code = code_of(response)
    spec = {
        "entry_point": tests["entry_point"],
        "method_of": tests.get("method_of"),
        "args": [case["args"] for case in tests["cases"]],
    }
    result = run_call(row, code, spec)
    if result.verdict is not RunVerdict.ok:
        return False, f"{result.verdict.value} {result.detail} {result.stderr[-300:]}"
    lines = result.stdout.splitlines()
    if len(lines) != len(tests["cases"]):
        return False, f"{len(lines)} answers for {len(tests['cases'])} cases"
    for index, (case, line) in enumerate(zip(tests["cases"], lines, strict=True)):
        answer = json.loads(line)
        want = json.dumps({"value": case["expected"]}, sort_keys=True)
        if "error" in answer or json.dumps(answer, sort_keys=True) != want:
            return False, f"case {index}: got {line[:200]}, want {want[:200]}"
    return True, ""


def assert_script_passes(row: dict[str, Any], response: str) -> tuple[bool, str]:
    """Run the script's asserts against the solution (HumanEval's `check(candidate)` when it defines one)."""
    reference = row["reference"]
    tests = reference["tests"]
    _, code = code_of(response)
    # As the verifier does: the script sees the entry point, the reference's candidate_names and its own setup,
    # never every name of the solution (`from solution import *` would let a solution's `abs` replace the
    # builtin the asserts use).
    names = [tests["entry_point"], *tests.get("candidate_names", [])]
    main = (
        "import solution\n"
        + "".join(f"{name} = getattr(solution, {name!r})\n" for name in names)
        + (tests.get("setup") or "")
        + "\n"
        + tests["script"]
        + "\nif callable(globals().get('check')):\n"
        + f"    check(getattr(solution, {tests['entry_point']!r}))\n"
        + f"print({PASSED_LINE!r})\n"
    )
    result = run_python(main, code, "", limits_of(reference))
    if result.verdict is not RunVerdict.ok or result.stdout.strip() != PASSED_LINE:
        return False, f"{result.verdict.value} {result.detail} {result.stderr[-300:]}"
    return True, ""


JUDGES = {"stdio": stdio_passes, "call": call_passes, "assert_script": assert_script_passes}


# -- well-formedness -------------------------------------------------------------------------------


def test_rows_are_well_formed() -> None:
    """Every row has exactly the row keys, a unique id, a known language and a reference of a known format."""
    assert len(ROWS) >= MIN_PROBLEMS
    ids = [row["id"] for row in ROWS]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    for row in ROWS:
        assert set(row) == ROW_KEYS, row["id"]
        reference = row["reference"]
        assert set(reference) <= REFERENCE_KEYS, row["id"]
        assert reference["language"] == row["language"] in LANGUAGES, row["id"]
        assert row["prompt"].strip(), row["id"]
        tests = reference["tests"]
        required, optional = FORMAT_KEYS[tests["format"]]
        assert required <= set(tests) <= required | optional, row["id"]
        if "limits" in reference:
            assert set(reference["limits"]) <= {"cpu_s", "memory_mb"}, row["id"]
        if tests["format"] == "stdio":
            assert tests.get("compare", "tokens") in COMPARES, row["id"]
            assert 1 <= len(tests["cases"]) <= MAX_CASES, row["id"]
            for case in tests["cases"]:
                assert set(case) == {"stdin", "stdout"} and case["stdout"].strip(), row["id"]
        elif tests["format"] == "call":
            assert 1 <= len(tests["cases"]) <= MAX_CASES, row["id"]
            for case in tests["cases"]:
                assert set(case) == {"args", "expected"} and isinstance(case["args"], list), row["id"]
        else:
            assert "assert" in tests["script"], row["id"]


def test_responses_hold_one_program_each_in_the_task_language() -> None:
    """Correct and wrong responses have prose and a fenced block tagged with the language, and differ."""
    for row in ROWS:
        blocks = []
        for kind in ("correct", "wrong"):
            response = row[kind]
            info, code = code_of(response)
            assert info == row["language"], (row["id"], kind, info)
            assert response.split("```")[0].strip(), (row["id"], kind, "no prose")
            blocks.append(code.strip())
        assert blocks[0] != blocks[1], row["id"]
        if row["reference"]["tests"]["format"] != "stdio":
            entry = row["reference"]["tests"]["entry_point"]
            assert all(DEFINES[row["language"]].format(entry) in block for block in blocks), row["id"]


def test_the_set_covers_formats_and_languages() -> None:
    """All three formats; stdio in Python, C++ and at least one more language; call in Python and at least two
    more languages; assert scripts in Python."""
    for fmt, rows in BY_FORMAT.items():
        assert len(rows) >= 5, fmt
    stdio_languages = {row["language"] for row in BY_FORMAT["stdio"]}
    assert {"python", "cpp"} <= stdio_languages
    assert len(stdio_languages) >= MIN_STDIO_LANGUAGES
    call_languages = Counter(row["language"] for row in BY_FORMAT["call"])
    assert call_languages["python"] >= 5 and len(call_languages) >= 3, call_languages
    assert all(count >= 2 for count in call_languages.values()), call_languages
    assert {row["language"] for row in BY_FORMAT["assert_script"]} == {"python"}
    assert any("method_of" in row["reference"]["tests"] for row in BY_FORMAT["call"])
    scripts = [row["reference"]["tests"]["script"] for row in BY_FORMAT["assert_script"]]
    assert any("def check(candidate)" in s for s in scripts) and any("def check" not in s for s in scripts)


# -- the solutions, judged without the verifier ----------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_correct_solution_passes_every_case(row: dict[str, Any]) -> None:
    """The correct response passes all of its problem's tests."""
    passed, why = JUDGES[row["reference"]["tests"]["format"]](row, row["correct"])
    assert passed, why


@pytest.mark.parametrize("row", ROWS, ids=[row["id"] for row in ROWS])
def test_wrong_solution_fails_a_case(row: dict[str, Any]) -> None:
    """The wrong response fails at least one test."""
    passed, _ = JUDGES[row["reference"]["tests"]["format"]](row, row["wrong"])
    assert not passed


# -- Proctor's verifier agrees ---------------------------------------------------------------------


CODE_MODULE = "proctor.verifiers.code"


def test_code_verifier_agrees_with_the_set() -> None:
    """One batch: reward 1 with status ok for every correct response, reward 0 for every wrong one."""
    from proctor.contract import Score, Status
    from proctor.engine import Engine
    from proctor.settings import Settings

    items = [
        {
            "id": f"{row['id']}:{kind}",
            "verifier": "code",
            "response": row[kind],
            "reference": row["reference"],
        }
        for row in ROWS
        for kind in ("correct", "wrong")
    ]
    # The plugin setting reaches the pool workers too, whether or not the family is built in yet.
    engine = Engine(Settings(cache_size=0, plugins=CODE_MODULE))
    try:
        results = engine.score_batch(items)
    finally:
        engine.close()
    disagreements = []
    for item, result in zip(items, results, strict=True):
        want = 1.0 if item["id"].endswith(":correct") else 0.0
        if not isinstance(result, Score) or result.status is not Status.ok or result.reward != want:
            disagreements.append(f"{item['id']}: want {want}, got {result!r}"[:600])
    assert not disagreements, "\n".join(disagreements)
