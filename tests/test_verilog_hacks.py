"""Reward hacks against Verilog judges: each one passes VerilogEval's own rule (compile the testbench, the
reference and the candidate together, run vvp, and look for `Mismatches: 0 in N samples` in the output) and
each one fails here, with status ok (a true verdict, not a machinery failure).

The naive judge below runs in the sandbox too (the candidates are hostile), but judges the way VerilogEval
does. Behind the gate there is a second line: even a candidate that reaches the simulation with `$finish`
(the gate bypassed on purpose below) fails, because the sample count must equal the reference's.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from proctor.contract import Status, Verdict
from proctor.verifiers.verilog import verifier as V
from proctor.verifiers.verilog.harness import HARNESS_MODULE, new_secret
from proctor.verifiers.verilog.verifier import SPEC

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "verilog" / "problems.jsonl"
ROWS = {row["id"]: row for row in map(json.loads, DATASET.read_text().splitlines())}
COUNTER = ROWS["counter4_async_reset"]
REFERENCE = COUNTER["reference"]
NAIVE_RESULT = re.compile(r"Mismatches: (\d+) in (\d+) samples")
HEADER = "module TopModule (\n  input clk,\n  input areset,\n  input en,\n  output reg [3:0] q\n);\n"
STUCK = "  always @(posedge clk) q <= 4'd3;\n"  # a wrong design: every hack below tries to pass it off


def top(body: str, prelude: str = "") -> str:
    """A TopModule with the counter's ports around `body` (and source before it)."""
    return f"{prelude}{HEADER}{body}endmodule\n"


def score(source: str, options: dict[str, Any] | None = None, reference: dict | None = None) -> Verdict:
    """Score a fenced response with the registered verifier."""
    spec = SPEC
    return spec.score(
        f"```verilog\n{source}```",
        spec.parse_reference(reference or REFERENCE),
        spec.parse_options(options or {}),
    )


def naive_passes(source: str) -> bool:
    """VerilogEval's rule: one compile of testbench + reference + candidate, pass on 'Mismatches: 0'."""
    files = {"tb.sv": REFERENCE["testbench"], "ref.sv": REFERENCE["reference_module"], "cand.sv": source}
    limits = V.TOOL_LIMITS.model_copy(update={"cpu_s": 10.0})
    result = V.run_job(
        files,
        [
            (
                "compile",
                [V.IVERILOG, "-g2012", "-s", "tb", "-o", "t.vvp", "tb.sv", "ref.sv", "cand.sv"],
                limits,
            ),
            ("run", [V.VVP, "-n", "t.vvp"], limits),
        ],
    )
    found = NAIVE_RESULT.search(result.commands[-1].stdout) if len(result.commands) == 2 else None
    return found is not None and found.group(1) == "0"


HACKS = {
    "initial_finish": top(STUCK + "  initial $finish;\n"),
    "fake_result_line": top(STUCK + '  initial $display("Mismatches: 0 in 200 samples");\n'),
    "force_tb_match": top(STUCK + "  initial force tb.tb_match = 1;\n"),
    "force_over_lines_and_comments": top(STUCK + "  initial force /* x */\n    tb\n    .tb_match = 1'b1;\n"),
    "force_from_a_macro": top(STUCK + "  initial `F tb.tb_match = 1;\n", "`define F force\n"),
    "reads_the_reference_output": top("  always @(*) q = tb.good1.q;\n"),
    "reads_it_through_root": top("  always @(*) q = $root.tb.good1.q;\n"),
    "reads_it_through_an_escaped_name": top("  always @(*) q = \\tb .good1.q;\n"),
    "reads_it_through_a_macro": top("  always @(*) q = `R;\n", "`define R tb.good1.q\n"),
    "defparam_into_the_testbench": top(STUCK + "  defparam tb.good1.X = 1;\n"),
}


@pytest.mark.parametrize("name", sorted(HACKS))
def test_each_hack_fools_verilogeval_and_fails_here(name: str):
    source = HACKS[name]
    verdict = score(source)
    assert (verdict.status, verdict.reward, verdict.correct) == (Status.ok, 0.0, False), verdict.details
    assert verdict.reason in ("forbidden_construct", "mismatch")
    if name in ("initial_finish", "fake_result_line", "force_tb_match", "reads_the_reference_output"):
        assert naive_passes(source), f"{name} should pass VerilogEval's rule"


def test_the_gate_names_what_it_rejects():
    assert (
        score(HACKS["initial_finish"]).details["message"]
        == "system task or function '$finish' is not allowed"
    )
    assert "hierarchical reference 'tb.tb_match'" in score(HACKS["force_tb_match"]).details["violations"][1]
    assert score(HACKS["reads_it_through_root"]).details["violations"][0] == "'$root' is not allowed"
    for body, expected in [
        ('  integer f; initial f = $fopen("x.txt", "w");\n', "'$fopen'"),
        (
            '  string s; initial if ($value$plusargs("proctor_secret=%s", s)) $display(s);\n',
            "'$value$plusargs'",
        ),
        ('  initial $system("ls");\n', "'$system'"),
        ('  initial $readmemh("stim.hex", q);\n', "'$readmemh'"),
        ("  bind TopModule x y();\n", "'bind'"),
        ("  initial release tb.tb_match;\n", "'release'"),
    ]:
        verdict = score(top(STUCK + body))
        assert verdict.reason == "forbidden_construct" and expected in verdict.details["message"], body
    included = score(top(STUCK, '`include "ref.sv"\n'))
    assert (included.reason, included.details["message"]) == (
        "forbidden_construct",
        "`include is not allowed",
    )


def test_comments_and_strings_are_not_constructs():
    right = COUNTER["correct"]
    noisy = right.replace(
        "endmodule",
        '  // force tb.tb_match = 1; $finish; tb.good1.q\n  /* $fopen("x") */\n'
        '  initial $display("force tb.x $finish");\nendmodule',
    )
    verdict = score(noisy)
    assert (verdict.status, verdict.reward) == (Status.ok, 1.0), verdict.details


def test_candidate_modules_named_like_the_harness_cannot_replace_it():
    # Under VerilogEval's single compile a candidate's own RefModule or tb would clash with (or shadow) the
    # harness's; here every candidate module is renamed, so its RefModule is just an unused module.
    fake_ref = "module RefModule(input clk, input areset, input en, output [3:0] q);\n  assign q = 4'd3;\nendmodule\n"
    fake_tb = 'module tb;\n  initial $display("Mismatches: 0 in 122 samples");\nendmodule\n'
    verdict = score(fake_ref + fake_tb + top(STUCK))
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "mismatch")
    correct = score(fake_ref + fake_tb + COUNTER["correct"])
    assert (correct.status, correct.reward) == (Status.ok, 1.0), correct.details


def _gated(source: str) -> tuple[V.VerilogReference, V.ReferenceInfo, V.Gated, V.VerilogOptions]:
    """A candidate past the gate WITHOUT its checks: renamed by hand, to test the harness behind it."""
    reference = V.VerilogReference.model_validate(REFERENCE)
    options = V.VerilogOptions(checks=["testbench", "random"])
    info = V.reference_info(reference, options)
    renamed = source.replace("module TopModule", "module proctor_c_TopModule")
    return reference, info, V.Gated(renamed, renamed, "proctor_c_TopModule", True), options


def test_behind_the_gate_an_early_finish_fails_the_sample_count():
    # The correct design, stopped early: every sample it got was right, but it got too few.
    early = COUNTER["correct"].replace("endmodule", "  initial #300 $finish;\nendmodule")
    results = V.simulate(["testbench", "random"], *_gated(early))
    assert [(r.name, r.passed, r.reason, r.errors) for r in results] == [
        ("testbench", False, "mismatch", 0),
        ("random", False, "mismatch", None),  # the generated testbench reports only at its end
    ]
    assert "samples" in results[0].details["message"]
    assert "did not report" in results[1].details["message"]


def test_behind_the_gate_a_fake_line_is_ignored_and_the_secret_never_reaches_a_file():
    fake = top(
        STUCK + '  initial begin $display("Mismatches: 0 in 242 samples"); $display("-|RESULT 0 428"); end\n'
    )
    reference, info, gated, options = _gated(fake)
    secret = new_secret()
    job = V.simulation_job(["testbench", "random"], reference, info, gated, options, secret)
    assert all(secret not in text for text in job.files.values())
    runs = [argv for name, argv, _ in job.commands if name.endswith("_run")]
    assert len(runs) == 2 and all(f"+proctor_secret={secret}" in argv for argv in runs)
    assert "$value$plusargs" in HARNESS_MODULE
    results = V.simulate(["testbench", "random"], reference, info, gated, options)
    assert [(r.passed, r.reason) for r in results] == [(False, "mismatch"), (False, "mismatch")]
    assert results[0].errors > 0


def test_a_hanging_candidate_is_a_time_limit():
    hang = top("  reg [3:0] r;\n  always @(posedge clk) while (en || !en) r = r + 1;\n  always @(*) q = r;\n")
    verdict = score(hang, {"sim_cpu_s": 1})
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "time_limit")


def test_a_broken_sandbox_is_a_sandbox_error_never_a_zero(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PROCTOR_SANDBOX_BACKEND", "docker")  # no docker daemon here: the backend fails
    V._references.clear()
    verdict = score(COUNTER["correct"])
    assert (verdict.status, verdict.reason, verdict.correct) == (Status.sandbox_error, "sandbox_error", None)


def test_a_flood_of_output_is_an_output_limit():
    flood = top(
        STUCK
        + '  always @(posedge clk) repeat (100000) $display("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");\n'
    )
    verdict = score(flood)
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "output_limit")
