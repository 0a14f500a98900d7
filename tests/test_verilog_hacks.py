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


ADDER = ROWS["add8_carry"]["reference"]
ADDER_TOP = "module TopModule (input [7:0] a, input [7:0] b, output [8:0] sum);\n"
X_ADDERS = {
    "all_x": "  assign sum = 9'bx;\n",
    "all_z": "  assign sum = 9'bz;\n",
    "x_on_one_input_pair": "  assign sum = (a == 8'h5a && b == 8'h33) ? 9'bx : a + b;\n",
    "z_on_one_input_pair": "  assign sum = (a == 8'h5a && b == 8'h33) ? 9'bz : a + b;\n",
    "carry_left_undriven": "  assign sum[7:0] = a + b;\n",
}


@pytest.mark.parametrize("name", sorted(X_ADDERS))
def test_x_or_z_is_never_proved_equivalent_on_a_combinational_design(name: str):
    # ABC proves the synthesized miter, where every x became whatever suited the optimizer: `9'bx` was
    # "equivalent" to a + b. The x-aware SAT must decide instead (the simulation shows the x: a mismatch).
    verdict = score(ADDER_TOP + X_ADDERS[name] + "endmodule\n", {"checks": ["formal"]}, ADDER)
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "not_equivalent"), name
    assert verdict.details["formal"]["result"] == "not_equivalent"


def test_an_x_where_the_reference_wraps_is_not_proved_on_a_sequential_design():
    # At the wrap (15 + 1) the reference gives 0 and the candidate x; pdr on a netlist where that x is 0
    # proved them equivalent. With the candidate's x as a free input there is a counterexample.
    wraps_to_x = top(
        "  always @(posedge clk or posedge areset)\n    if (areset) q <= 0;\n"
        "    else q <= (q == 4'd15 && en) ? 4'bx : q + en;\n"
    )
    verdict = score(wraps_to_x, {"checks": ["formal"]})
    assert (verdict.status, verdict.reward) == (Status.ok, 0.0), verdict.details
    assert verdict.details["formal"]["result"] == "not_equivalent"


@pytest.mark.parametrize(("data", "out"), [("stim", "errors"), ("cyc", "samples"), ("check", "q")])
def test_ports_named_like_the_random_testbench_internals_still_simulate(data: str, out: str):
    # The generated testbench declared `stim`, `errors`, `samples`, `cyc` and `check` next to the reference's
    # ports: such a port made every candidate, the reference itself included, a compile_error of 0.
    module = "module {} (input clk, input [3:0] {d}, output reg [3:0] {o});\n  always @(posedge clk) {o} <= {d};\nendmodule\n"
    reference = {"reference_module": module.format("RefModule", d=data, o=out)}
    verdict = score(module.format("TopModule", d=data, o=out), {"checks": ["random"]}, reference)
    assert (verdict.status, verdict.reward) == (Status.ok, 1.0), verdict.details


def test_a_candidate_slow_at_every_stage_is_a_time_limit_not_a_masked_timeout():
    # Each stage stayed within its own CPU limit (10 s for each of the two simulations here), but together
    # they ran past the request's 12 s deadline: the engine's timeout status, which a trainer masks. The
    # stages now share a CPU budget within the deadline, and the candidate gets its time_limit.
    hang = top("  reg [3:0] r;\n  always @(posedge clk) while (en || !en) r = r + 1;\n  always @(*) q = r;\n")
    verdict = score(hang, {"checks": ["testbench", "random"], "sim_cpu_s": 10, "deadline_s": 12})
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "time_limit")
    cut_at = re.search(r"passed ([0-9.]+) s", verdict.details["message"])
    assert cut_at is not None and 2 * float(cut_at.group(1)) < 12 * V.CPU_SHARE


def test_the_budget_scales_a_job_down_to_what_is_left():
    limits = V.TOOL_LIMITS
    commands = [("a", ["x"], limits.model_copy(update={"cpu_s": 20.0})), ("b", ["y"], limits)]
    assert V.fit_to_budget(commands, 100.0) == commands
    fitted = V.fit_to_budget(commands, 20.0)
    assert [round(c[2].cpu_s, 3) for c in fitted] == [10.0, 10.0]
    assert sum(c[2].wall_backstop_s for c in fitted) < 2 * 20.0 + 3
    assert V.request_budget(90.0).cpu_left == 70.0


def test_a_reference_input_named_trigger_does_not_clash_with_the_sequential_miter():
    # The miter's own output was `trigger`: a reference input of that name merged with it, and a correct
    # design got a counterexample at frame 0 (a wrong reward of 0).
    ports = "(input clk, input reset, input trigger, output reg [3:0] q);\n"
    reference = {
        "reference_module": f"module RefModule {ports}  always @(posedge clk) if (reset) q <= 0;"
        " else q <= q + trigger;\nendmodule\n"
    }
    correct = (
        f"module TopModule {ports}  always @(posedge clk)\n    if (reset) q <= 4'd0;\n"
        "    else if (trigger) q <= q + 4'd1;\nendmodule\n"
    )
    verdict = score(correct, {"checks": ["formal"]}, reference)
    assert (verdict.status, verdict.reward) == (Status.ok, 1.0), verdict.details
    assert verdict.details["formal"]["result"] == "equivalent"


@pytest.mark.parametrize("call", ["$random", "$urandom", "$urandom_range(3)"])
def test_a_candidate_cannot_draw_from_the_testbenchs_random_stream(call: str):
    # iverilog's unseeded $random is one state for the whole simulation: each draw by the candidate shifts
    # the stimulus `stimulus_gen` gets from it, so a design could steer the test away from its bugs.
    verdict = score(top(STUCK + f"  integer r;\n  always @(posedge clk) r = {call};\n"))
    assert (verdict.status, verdict.reason) == (Status.ok, "forbidden_construct")
    assert call.split("(")[0] in verdict.details["message"]


# -- formal that cannot decide is not a pass (red team: one construct yosys cannot read switched it off) ----

DFF = ROWS["dff8_en_sync_reset"]
DFF_HEADER = "module TopModule(input clk, input reset, input en, input [7:0] d, output reg [7:0] q);\n"
DFF_TRAP = "(d == 8'hA5 && q == 8'h5A)"  # one input/state pair no stimulus is likely to hit
UNREADABLE = {
    "event": "event e; always @(posedge clk) begin ->e; if (reset) q <= 0; "
    f"else if (en) q <= {DFF_TRAP} ? 8'h00 : d; end\n",
    "real": "real r; always @(posedge clk) begin r = d; if (reset) q <= 0; "
    f"else if (en) q <= ({DFF_TRAP} && r > 1.0) ? 8'h00 : d; end\n",
    "while": "integer k; reg [7:0] t; always @(posedge clk) begin t = d; k = 0; while (k < 1) k = k + 1; "
    f"if (reset) q <= 0; else if (en) q <= {DFF_TRAP} ? 8'h00 : t; end\n",
}


@pytest.mark.parametrize("name", sorted(UNREADABLE))
def test_a_trap_yosys_cannot_read_fails_formal(name: str):
    verdict = score(DFF_HEADER + UNREADABLE[name] + "endmodule\n", {"checks": ["formal"]}, DFF["reference"])
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "formal_unreadable")
    assert verdict.components == {"compiles": 1.0, "formal": 0.0}
    found = verdict.details["formal"]
    assert (found["result"], found["cause"], found["inconclusive"]) == ("inconclusive", "unreadable", "fail")
    assert "yosys could not read the candidate" in found["note"] and "fallback" not in found


def test_the_datasets_trap_with_an_unreadable_line_still_fails_testbench_and_formal():
    both = {"checks": ["testbench", "formal"]}
    assert score(COUNTER["trap"], both).reason == "not_equivalent"
    hidden = COUNTER["trap"].replace(
        "endmodule", "  event proctor_e; always @(posedge clk) ->proctor_e;\nendmodule", 1
    )
    verdict = score(hidden, both)
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "formal_unreadable")
    assert verdict.components == {"compiles": 1.0, "testbench": 1.0, "mismatch_fraction": 0.0, "formal": 0.0}
    # the documented opt-out: an inconclusive proof passes, at 0.5, and a trap the testbench misses goes through
    lenient = score(hidden, {**both, "formal_inconclusive": "pass"})
    assert (lenient.reward, lenient.components["formal"]) == (1.0, 0.5)


def test_a_proof_the_candidate_makes_too_expensive_is_a_formal_time_limit():
    product = "{56'b0,d}*{56'b0,q}*{56'b0,d}*{56'b0,q}*64'd1234567891011"
    heavy = (
        f"{DFF_HEADER}wire [63:0] m = {product};\n"
        "always @(posedge clk) if (reset) q <= 0; else if (en) q <= (m[63:40] == 24'h3A5F1C) ? 8'h00 : d;\n"
        "endmodule\n"
    )
    verdict = score(heavy, {"checks": ["formal"], "formal_cpu_s": 2}, DFF["reference"])
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "formal_time_limit")
    assert verdict.details["formal"]["cause"] == "time_limit" and verdict.components["formal"] == 0.0


def test_a_delay_yosys_ignores_cannot_hide_a_trap_from_formal():
    # yosys keeps the textually last initial value (0) and drops the delay; the simulation arms the trap
    armed = (
        f"{DFF_HEADER}reg armed; initial #100 armed = 1; initial armed = 0;\n"
        "always @(posedge clk) if (reset) q <= 0; else if (en) q <= (armed && d == 8'hA5) ? 8'h00 : d;\n"
        "endmodule\n"
    )
    verdict = score(armed, {"checks": ["formal"]}, DFF["reference"])
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "formal_unsupported")
    assert "timing controls" in verdict.details["formal"]["note"]


def test_formal_still_proves_a_correct_design_and_the_reference_itself():
    for source in (DFF["correct"], DFF["reference"]["reference_module"].replace("RefModule", "TopModule")):
        verdict = score(source, {"checks": ["formal"]}, DFF["reference"])
        assert (verdict.status, verdict.reward) == (Status.ok, 1.0), verdict.details
        assert verdict.components == {"compiles": 1.0, "formal": 1.0}
    right = score(COUNTER["correct"], {"checks": ["testbench", "formal"]})
    assert (right.reward, right.details["formal"]["result"]) == (1.0, "equivalent")


def test_formal_tools_that_fail_on_the_reference_too_are_a_verifier_error(monkeypatch: pytest.MonkeyPatch):
    reference = {**REFERENCE, "reference_module": REFERENCE["reference_module"] + "\n// broken abc\n"}
    monkeypatch.setattr(V, "YOSYS_ABC", "/usr/bin/false")
    verdict = score(COUNTER["correct"], {"checks": ["formal"]}, reference)
    assert (verdict.status, verdict.reason, verdict.correct) == (
        Status.verifier_error,
        "formal_tool_error",
        None,
    )
    assert "reference equivalent to itself" in verdict.details["error"]
