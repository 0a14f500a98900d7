"""The fast testbench verdict: the gate folded into the simulation's compile (fastgate.py) and warm tool jails
(jails.py). Every verdict the fold gives must be the one the full gate and its simulation give, and a design
that leans on anything outside itself must never get the fold's pass; a warm jail must start each job from
the state a fresh one has."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from proctor.contract import Status, Verdict
from proctor.sandboxes.backends import resolve_backend
from proctor.sandboxes.job import Command, File, Job, RunLimits, RunVerdict
from proctor.verifiers.verilog import fastgate, jails
from proctor.verifiers.verilog import verifier as V
from proctor.verifiers.verilog.harness import Port
from proctor.verifiers.verilog.verifier import SPEC

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "verilog" / "problems.jsonl"
ROWS = {row["id"]: row for row in map(json.loads, DATASET.read_text().splitlines())}
COUNTER = ROWS["counter4_async_reset"]
HEADER = "module TopModule (input clk, input areset, input en, output reg [3:0] q);\n"
STUCK = "  always @(posedge clk) q <= 4'd3;\n"

# A counter problem whose testbench holds a task, a function and a named block that a candidate could reach
# by a simple name (Verilog resolves tasks, functions and blocks upwards through the instance tree): the lone
# elaboration rejects such a candidate, so the fold must leave it to the gate.
TB_WITH_SCOPES = COUNTER["reference"]["testbench"].replace(
    "  wire tb_match;",
    "  function [3:0] ref_q(input [3:0] x); ref_q = q_ref; endfunction\n"
    "  task quiet; errors = 0; endtask\n"
    "  initial begin : watch #2000000 ; end\n"
    "  wire tb_match;",
)
SCOPED = {**COUNTER["reference"], "testbench": TB_WITH_SCOPES}


def score(source: str, reference: dict[str, Any], checks: tuple[str, ...] = ("testbench",)) -> Verdict:
    """Score a fenced response."""
    return SPEC.score(
        f"```verilog\n{source}```",
        SPEC.parse_reference(reference),
        SPEC.parse_options({"checks": list(checks)}),
    )


def gate_only(source: str, reference: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Verdict:
    """The verdict without the fold: the full gate, then the simulation job."""
    with monkeypatch.context() as patch:
        patch.setattr(V, "folded_testbench", lambda *args, **kwargs: None)
        return score(source, reference)


def folded(source: str, reference: dict[str, Any]) -> bool:
    """Whether the fold gives this candidate's verdict itself (not handing it to the gate)."""
    ref = SPEC.parse_reference(reference)
    options = SPEC.parse_options({"checks": ["testbench"]})
    info = V.reference_info(ref, options, ["testbench"])
    token = V._budget.set(V.request_budget(None))
    try:
        return isinstance(
            V.folded_testbench(V.extract_verilog(f"```verilog\n{source}```")[0], ref, info, options),
            V.CheckResult,
        )
    finally:
        V._budget.reset(token)


def same(a: Verdict, b: Verdict) -> tuple:
    return (a.status, a.reward, a.reason, a.components.get("compiles"))


@pytest.mark.parametrize(
    "problem", ["counter4_async_reset", "add8_carry", "detect_1011", "mux4_nibble", "regfile4x8"]
)
def test_the_fold_gives_the_gates_verdict_on_the_dataset(problem: str, monkeypatch: pytest.MonkeyPatch):
    row = ROWS[problem]
    for source in (row["correct"], row["wrong"], *([row["trap"]] if row["trap"] else [])):
        assert folded(source, row["reference"])
        fast, slow = score(source, row["reference"]), gate_only(source, row["reference"], monkeypatch)
        assert same(fast, slow) == same(slow, slow), (problem, fast.details, slow.details)
        assert fast.components.get("mismatch_fraction") == slow.components.get("mismatch_fraction")


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("calls the testbench's function", "  always @(posedge clk) q <= ref_q(q);\n"),
        ("calls the testbench's task", STUCK + "  always @(negedge clk) quiet;\n"),
        ("disables the testbench's block", STUCK + "  initial disable watch;\n"),
        ("instantiates RefModule", "  RefModule r (.clk(clk), .areset(areset), .en(en), .q(q));\n"),
        ("instantiates it escaped", "  \\RefModule  r (.clk(clk), .areset(areset), .en(en), .q(q));\n"),
        (
            "instantiates the stimulus",
            STUCK + "  wire a, e;\n  stimulus_gen s (.clk(clk), .areset(a), .en(e));\n",
        ),
    ],
)
def test_a_design_leaning_on_the_testbench_gets_the_gates_verdict(
    name: str, body: str, monkeypatch: pytest.MonkeyPatch
):
    source = HEADER + body + "endmodule\n"
    assert not folded(source, SCOPED), name
    fast, slow = score(source, SCOPED), gate_only(source, SCOPED, monkeypatch)
    assert same(fast, slow) == same(slow, slow), (name, fast.details, slow.details)
    assert fast.reward == 0.0 and fast.reason == "compile_error", (name, fast.details)


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("a macro", "`define Q q\n" + HEADER + "  always @(posedge clk) `Q <= 4'd3;\nendmodule\n"),
        ("a conditional", "`ifdef X\n`endif\n" + HEADER + STUCK + "endmodule\n"),
        ("a control character", HEADER + STUCK + "\x01 endmodule\n"),
        ("non-ASCII text", HEADER + STUCK + "// é\nendmodule\n"),
    ],
)
def test_only_sources_the_preprocessor_leaves_alone_skip_it(
    name: str, source: str, monkeypatch: pytest.MonkeyPatch
):
    assert not fastgate.plain_source(source), name
    assert not folded(source, COUNTER["reference"])
    fast, slow = score(source, COUNTER["reference"]), gate_only(source, COUNTER["reference"], monkeypatch)
    assert same(fast, slow) == same(slow, slow), (name, fast.details, slow.details)
    assert fast.reward == 0.0


def test_plain_sources_and_the_directives_they_may_hold():
    assert fastgate.plain_source("`timescale 1ns/1ps\n`default_nettype none\nmodule m; endmodule\n")
    assert not fastgate.plain_source("`timescale 1ns/1ps `define X\n")
    assert not fastgate.plain_source("module m; wire `X; endmodule\n")
    assert not fastgate.plain_source('`include "x.v"\n')


def test_a_forbidden_construct_or_missing_top_is_rejected_as_the_gate_would(monkeypatch: pytest.MonkeyPatch):
    reference = COUNTER["reference"]
    for source in (
        HEADER + STUCK + "  initial force tb.errors = 0;\nendmodule\n",
        HEADER + "  always @(*) q = tb.good1.q;\nendmodule\n",
        HEADER + STUCK + "  initial $finish;\nendmodule\n",
        HEADER.replace("TopModule", "Other") + STUCK + "endmodule\n",
    ):
        fast, slow = score(source, reference), gate_only(source, reference, monkeypatch)
        assert same(fast, slow) == same(slow, slow), (fast.details, slow.details)
        assert fast.reason in ("forbidden_construct", "interface_mismatch")


@pytest.mark.parametrize(
    "header",
    [
        "module TopModule (input clk, input areset, input en, output reg [4:0] q);\n",  # width
        "module TopModule (input clk, input areset, input en, input extra, output reg [3:0] q);\n",  # extra port
        "module TopModule (input clk, input areset, output reg [3:0] q);\n",  # a port missing
    ],
)
def test_wrong_ports_are_an_interface_mismatch_as_the_gate_says(header: str, monkeypatch: pytest.MonkeyPatch):
    source = header + STUCK + "endmodule\n"
    fast, slow = score(source, COUNTER["reference"]), gate_only(source, COUNTER["reference"], monkeypatch)
    assert same(fast, slow) == same(slow, slow), (fast.details, slow.details)
    assert fast.reason == "interface_mismatch"


def test_problems_that_do_not_allow_the_fold():
    tb, ref = COUNTER["reference"]["testbench"], COUNTER["reference"]["reference_module"]
    assert fastgate.problem_allows(tb, ref, "TopModule")
    assert not fastgate.problem_allows("function f; endfunction\n" + tb, ref, "TopModule")
    assert not fastgate.problem_allows(tb, "localparam W = 4;\n" + ref, "TopModule")
    assert not fastgate.problem_allows(
        tb.replace("wire tb_match;", "`define W 4\n  wire tb_match;"), ref, "TopModule"
    )
    assert not fastgate.problem_allows(
        tb.replace("TopModule top_module1", "TopModule #(4) top_module1"), ref, "TopModule"
    )
    assert not fastgate.problem_allows(
        tb.replace("wire tb_match;", "defparam top_module1.W = 3; wire tb_match;"), ref, "TopModule"
    )


def test_the_compiled_designs_checks():
    compiled = "\n".join(
        [
            'S_0x1 .scope module, "tb" "tb" 3 19;',
            'S_0x2 .scope module, "top_module1" "proctor_c_TopModule" 3 30, 5 1 0, S_0x1;',
            '    .port_info 0 /INPUT 1 "a";',
            '    .port_info 1 /OUTPUT 4 "q";',
            'S_0x3 .scope module, "u" "proctor_c_sub" 5 5, 5 7 0, S_0x2;',
            'S_0x4 .scope begin, "blk\\"x" "blk\\"x" 5 3, 5 3 0, S_0x3;',
        ]
    )
    ports = [Port("a", "input", 1), Port("q", "output", 4)]
    assert fastgate.check_compiled(compiled, "proctor_c_TopModule", "proctor_c_", ports)
    assert not fastgate.check_compiled(compiled, "proctor_c_TopModule", "proctor_c_", ports[:1])
    assert not fastgate.check_compiled(compiled, "proctor_c_Other", "proctor_c_", ports)
    foreign = compiled + '\nS_0x5 .scope module, "r" "RefModule" 5 6, 4 1 0, S_0x4;'
    assert not fastgate.check_compiled(foreign, "proctor_c_TopModule", "proctor_c_", ports)
    assert not fastgate.check_compiled(
        compiled + "\nS_0x6 garbage", "proctor_c_TopModule", "proctor_c_", ports
    )
    assert fastgate.outside_names(compiled) is None  # an escaped name: the problem keeps the gate


# -- warm jails ---------------------------------------------------------------------------------------------

LIMITS = V.TOOL_LIMITS.model_copy(update={"cpu_s": 5.0})


def sh(script: str, name: str = "run", limits: RunLimits = LIMITS) -> Command:
    return Command(argv=["/bin/sh", "-c", script], name=name, limits=limits)


def test_a_warm_jail_starts_every_job_from_a_clean_slate():
    pool = jails.JailPool(max_idle=1)
    backend = resolve_backend(None)
    try:
        first = pool.run(
            backend,
            Job(
                files=[File(path="a.txt", content="one")],
                commands=[
                    sh(
                        "cat a.txt; echo LEFTOVER > ../left.txt; echo t > /tmp/t; mkdir -p keep; echo KEPT > keep/k"
                    )
                ],
                keep_going=True,
            ),
        )
        assert first is not None and first.commands[0].stdout == "one"
        second = pool.run(
            backend,
            Job(
                files=[File(path="b.txt", content="two")],
                commands=[
                    sh("ls -A; ls -A /box | wc -l; ls -A /tmp | wc -l; cat ../left.txt keep/k 2>&1 || true")
                ],
                fetch=["b.txt", "missing.txt"],
                keep_going=True,
            ),
        )
        assert second is not None
        lines = second.commands[0].stdout.split("\n")
        assert lines[:3] == ["b.txt", "1", "0"], lines  # its own files; nothing else in /box or /tmp
        assert (
            "LEFTOVER" not in second.commands[0].stdout
            and "KEPT" not in second.commands[0].stdout
            and "No such file" in second.commands[0].stdout
        )
        assert set(second.files) == {"b.txt"}
        assert pool.idle == 1
    finally:
        pool.close()


def test_a_warm_jail_keeps_each_runs_limits():
    pool = jails.JailPool(max_idle=1)
    backend = resolve_backend(None)
    small = LIMITS.model_copy(update={"memory_mb": 64, "cpu_s": 1.0, "output_bytes": 1000})
    try:
        hog = "/usr/bin/python3 -c 'b = bytearray(200 << 20); print(len(b))'"
        result = pool.run(
            backend,
            Job(
                commands=[
                    sh(hog, "hog", small),
                    sh("while :; do :; done", "spin", small),
                    sh("yes", "loud", small),
                ],
                keep_going=True,
            ),
        )
        assert result is not None
        verdicts = [c.verdict for c in result.commands]
        assert verdicts == [RunVerdict.memory_limit, RunVerdict.time_limit, RunVerdict.output_limit], result
        assert "passed 1 s" in result.commands[1].detail
    finally:
        pool.close()


def test_a_failed_set_up_is_never_a_verdict(monkeypatch: pytest.MonkeyPatch):
    # A jail that cannot put the job's files in place (a full disk, a broken jail) prints no marker: the job
    # goes to a fresh jail, then to a cold one; the candidate's verdict is the cold jail's.
    pool = jails.JailPool(max_idle=1)
    monkeypatch.setattr(jails, "archive", lambda directory, files: "not a tar archive")
    try:
        assert pool.run(resolve_backend(None), Job(commands=[sh("true")])) is None
        assert pool.idle == 0
    finally:
        pool.close()
    monkeypatch.setattr(jails, "POOL", pool)
    row = ROWS["counter4_async_reset"]
    assert score(row["correct"], row["reference"]).reward == 1.0
    assert score(row["wrong"], row["reference"]).reward == 0.0


def test_warm_and_cold_jails_agree(monkeypatch: pytest.MonkeyPatch):
    row = ROWS["counter4_async_reset"]
    wide = HEADER.replace("[3:0]", "[4:0]") + STUCK + "endmodule\n"
    sources = [row["correct"], row["wrong"], wide, HEADER + STUCK + "  wire x = y;\nendmodule\n"]
    warm = [score(s, row["reference"]) for s in sources]
    monkeypatch.setattr(jails, "warm_usable", lambda backend: False)
    cold = [score(s, row["reference"]) for s in sources]
    assert [same(v, v) for v in warm] == [same(v, v) for v in cold]
    assert [v.reason for v in warm] == [None, "mismatch", "interface_mismatch", "compile_error"]
    assert warm[0].status is Status.ok


def test_a_forked_child_does_not_share_the_parents_warm_jails():
    # Two processes talking to one warm server would garble its frames: a forked child starts with none.
    backend = resolve_backend(None)
    assert jails.POOL.run(backend, Job(commands=[sh("true")])) is not None
    assert jails.POOL.idle >= 1
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, str(jails.POOL.idle).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 16) == b"0" and status == 0
    os.close(read)
    again = jails.POOL.run(backend, Job(commands=[sh("echo still")]))
    assert again is not None and again.commands[0].stdout == "still\n"


@pytest.mark.skipif(not jails._HOST_READS, reason="the sandbox reads no files on the host")
def test_a_job_whose_files_vanish_is_never_read_as_missing_output():
    # Read back on the host, a job directory without the job's own files means the jail was replaced under
    # the job: a machinery failure (the job goes to a fresh jail, then cold), never "the tool wrote nothing".
    pool = jails.JailPool(max_idle=1)
    backend = resolve_backend(None)
    try:
        job = Job(
            files=[File(path="in.v", content="x")],
            commands=[sh("echo out > out.txt; rm -f in.v")],
            fetch=["out.txt"],
            keep_going=True,
        )
        assert pool.run(backend, job) is None
        kept = Job(files=job.files, commands=[sh("echo out > out.txt")], fetch=["out.txt"], keep_going=True)
        result = pool.run(backend, kept)
        assert result is not None and base64.b64decode(result.files["out.txt"]) == b"out\n"
    finally:
        pool.close()


# -- direct jobs: files put on the host, runs spawned in the job's folder, one exchange ------------------------

LEAVES = """module leaves;
  integer f;
  initial begin
    f = $fopen("cand.txt", "w"); $fwrite(f, "mine"); $fclose(f);
    f = $fopen("/tmp/cand_tmp", "w"); $fclose(f);
    f = $fopen("../cand_box", "w"); $fclose(f);
    $display("ran");
    $finish;
  end
endmodule
"""


def tool(argv: list[str], name: str = "run") -> Command:
    return Command(argv=argv, name=name, limits=LIMITS)


@pytest.mark.skipif(not jails.DIRECT, reason="the sandbox cannot set a job up on the host")
def test_a_direct_job_starts_from_a_clean_slate(monkeypatch: pytest.MonkeyPatch):
    # No shell or tar in the jail (archive is never called), and neither the tools' files (trusted: kept for
    # the job's later runs) nor the candidate's (vvp: removed after its run) reach the next job.
    monkeypatch.setattr(jails, "archive", lambda directory, files: pytest.fail("a direct job used tar"))
    pool = jails.JailPool(max_idle=1)
    backend = resolve_backend(None)
    tool_leaves = "open('../tool_box', 'w'); open('/tmp/tool_tmp', 'w'); open('tool.txt', 'w')"
    try:
        first = pool.run(
            backend,
            Job(
                files=[File(path="leaves.v", content=LEAVES)],
                commands=[
                    tool(["/usr/bin/iverilog", "-g2012", "-o", "leaves.vvp", "leaves.v"], "compile"),
                    tool(["/usr/bin/python3", "-c", tool_leaves], "tool"),
                    tool(["/usr/bin/vvp", "-n", "leaves.vvp"], "simulate"),
                    tool(["/usr/bin/ls", "-A", "/box", "/box/job", "/tmp"], "look"),
                ],
                fetch=["leaves.vvp", "cand.txt"],
                keep_going=True,
            ),
        )
        assert first is not None, "the direct job did not run warm"
        assert [c.verdict for c in first.commands] == [RunVerdict.ok] * 4, first.commands
        assert first.commands[2].stdout.startswith("ran")
        # the tool's files stay for the job; the candidate's are gone once its run ends
        look = first.commands[3].stdout
        assert (
            look == "/box:\njob\ntool_box\n\n/box/job:\nleaves.v\nleaves.vvp\ntool.txt\n\n/tmp:\ntool_tmp\n"
        ), look
        assert set(first.files) == {"leaves.vvp"}
        jail = pool._idle[0]
        second = pool.run(
            backend,
            Job(
                files=[File(path="b.txt", content="two")],
                commands=[tool(["/usr/bin/ls", "-A", "/box", "/box/job", "/tmp"])],
                keep_going=True,
            ),
        )
        assert second is not None and pool._idle[0] is jail  # the same jail, set up afresh
        assert second.commands[0].stdout == "/box:\njob\n\n/box/job:\nb.txt\n\n/tmp:\n", second.commands
    finally:
        pool.close()


@pytest.mark.skipif(not jails.DIRECT, reason="the sandbox cannot set a job up on the host")
@pytest.mark.parametrize("failure", [OSError("gone"), ValueError("too large")])
def test_a_direct_job_that_cannot_be_set_up_is_never_a_verdict(
    monkeypatch: pytest.MonkeyPatch, failure: Exception
):
    # put_files refused or failed: a fresh jail, then the job goes cold; the verdict is the cold jail's.
    def refuse(self: object, files: object, folder: str, *, clear: bool = True) -> str:
        raise failure

    pool = jails.JailPool(max_idle=1)
    monkeypatch.setattr(jails.WarmPython, "put_files", refuse)
    try:
        assert pool.run(resolve_backend(None), Job(commands=[tool(["/usr/bin/true"])])) is None
        assert pool.idle == 0
    finally:
        pool.close()
    monkeypatch.setattr(jails, "POOL", pool)
    row = ROWS["counter4_async_reset"]
    assert score(row["correct"], row["reference"]).reward == 1.0
    assert score(row["wrong"], row["reference"]).reward == 0.0


@pytest.mark.skipif(not jails.DIRECT, reason="the sandbox cannot set a job up on the host")
def test_direct_and_shell_jobs_agree(monkeypatch: pytest.MonkeyPatch):
    row = ROWS["counter4_async_reset"]
    wide = HEADER.replace("[3:0]", "[4:0]") + STUCK + "endmodule\n"
    sources = [row["correct"], row["wrong"], wide, HEADER + STUCK + "  wire x = y;\nendmodule\n"]
    direct = [same(v, v) for v in (score(s, row["reference"]) for s in sources)]
    monkeypatch.setattr(jails, "DIRECT", False)
    shell = [same(v, v) for v in (score(s, row["reference"]) for s in sources)]
    assert direct == shell
