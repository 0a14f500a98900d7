"""The `verilog` verifier's parts and contract: extraction, the token gate, renaming, the random lockstep
testbench (clocks and resets by name, both polarities, sync/async), seeds, formal outcomes and fallbacks,
port checks, failures that are not rewards, 422s, and one request through the real HTTP service."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from proctor.contract import RequestError, Status, Verdict
from proctor.verifiers.verilog import formal
from proctor.verifiers.verilog.harness import Port, find_clock, find_resets, plan_random, read_output
from proctor.verifiers.verilog.source import (
    extract_verilog,
    rename,
    synthesis_view,
    timing_controls,
    violations,
)
from proctor.verifiers.verilog.verifier import SPEC, port_differences, ports_from_vvp, seed_for

DATASET = Path(__file__).resolve().parents[1] / "datasets" / "verilog" / "problems.jsonl"
ROWS = {row["id"]: row for row in map(json.loads, DATASET.read_text().splitlines())}
COUNTER = ROWS["counter4_async_reset"]
NO_TB = {"reference_module": COUNTER["reference"]["reference_module"]}
ADDER = ROWS["add8_carry"]


def score(source: str, reference: dict[str, Any], options: dict[str, Any] | None = None) -> Verdict:
    """Score a fenced response with the registered verifier."""
    return SPEC.score(
        f"```verilog\n{source}```", SPEC.parse_reference(reference), SPEC.parse_options(options or {})
    )


# -- source ----------------------------------------------------------------------------------------------


def test_extraction_takes_the_last_verilog_block_or_the_modules():
    two = "```verilog\nmodule A; endmodule\n```\ntext\n```systemverilog\nmodule B; endmodule\n```"
    assert extract_verilog(two) == ("module B; endmodule\n", "fenced_verilog")
    assert extract_verilog("```\nmodule C; endmodule\n```")[1] == "fenced_untagged"
    prose = "Sure! module TopModule(input a, output b); assign b = a; endmodule Hope it helps."
    assert extract_verilog(prose) == (
        "module TopModule(input a, output b); assign b = a; endmodule\n",
        "modules",
    )
    assert extract_verilog("no code here") == ("", "none")
    draft = "<think>\n```verilog\nmodule A; endmodule\n```\n</think>\n```verilog\nmodule B; endmodule\n```"
    assert extract_verilog(draft) == ("module B; endmodule\n", "fenced_verilog")
    assert extract_verilog("<think>\n```verilog\nmodule A; endmodule\n```\nstill thinking") == ("", "none")


def test_the_references_own_runs_do_not_spend_the_candidates_budget():
    from proctor.verifiers.verilog import verifier as V

    reference = V.VerilogReference.model_validate(
        NO_TB | {"reference_module": NO_TB["reference_module"] + "\n// budget"}
    )
    budget = V.request_budget(30.0)
    token = V._budget.set(budget)
    try:
        before = budget.cpu_left
        V.reference_info(reference, V.VerilogOptions())
    finally:
        V._budget.reset(token)
    assert budget.cpu_left == before


def test_the_gate_reads_tokens_not_substrings():
    clean = """module m(input a, output b);
  // force tb.x = 1; $finish
  /* tb.good1.q */
  sub u(.a(a), .y(b));
  real r = 1.5;
  initial $display("tb.good1.q $fopen force");
endmodule"""
    assert violations(clean) == []
    assert violations("module m; initial force x = 1; endmodule") == ["'force' is not allowed"]
    assert violations("module m; wire w = u[0].q; endmodule") == [
        "hierarchical reference ']'.q' is not allowed"
    ] or (violations("module m; wire w = u[0].q; endmodule")[0].startswith("hierarchical reference"))
    assert violations('module m; initial $dumpfile("x"); endmodule') == [
        "system task or function '$dumpfile' is not allowed"
    ]
    assert violations('module m; `line 1 "x" 0\nendmodule') == []
    assert violations("module m; `FOO endmodule") == ["directive '`FOO' is not allowed"]


def test_struct_members_are_allowed_only_on_module_level_struct_variables():
    allowed = """module m(input [3:0] a, output logic [3:0] y);
  typedef struct packed { logic [1:0] hi; logic [1:0] lo; } pair_t;
  pair_t p, q = 0;
  struct packed { logic x; logic [2:0] z; } s;
  always_comb begin p = a; y = {p.lo, p.hi} ^ {s.x, q.lo}; end
endmodule"""
    assert violations(allowed) == []
    # declared in a named block or in another module, `good1` would resolve upwards into the testbench
    hidden = """module m(output [3:0] y);
  typedef struct packed { logic [3:0] q; } t;
  always_comb begin : blk t good1; end
  assign y = good1.q;
endmodule
module n; typedef struct packed { logic q; } u; u tb; endmodule
module k(output y); assign y = tb.tb_match; endmodule"""
    assert violations(hidden) == [
        "hierarchical reference 'good1.q' is not allowed",
        "hierarchical reference 'tb.tb_match' is not allowed",
    ]
    adder = """module TopModule(input [7:0] a, input [7:0] b, output [8:0] sum);
  typedef struct packed { logic c; logic [7:0] s; } res_t;
  res_t r;
  assign r = a + b;
  assign sum = {r.c, r.s};
endmodule
"""
    verdict = score(adder, {"reference_module": ADDER["reference"]["reference_module"]})
    assert (verdict.status, verdict.reward) == (Status.ok, 1.0), verdict.details


def test_renaming_prefixes_modules_but_not_ports_after_a_dot():
    source = "module TopModule(input a, output y); sub sub(.sub(a), .y(y)); endmodule\nmodule sub(input sub, output y); endmodule"
    out = rename(source, ["TopModule", "sub"], "p_")
    assert "module p_TopModule" in out and "p_sub p_sub(.sub(a)" in out and "module p_sub(input p_sub" in out


def test_the_synthesis_view_drops_display_calls_only():
    source = 'module m(input a); always @(a) if (a) $display("%b", a); else $write("x"); endmodule'
    assert synthesis_view(source) == "module m(input a); always @(a) if (a) ; else ; endmodule"


def test_ports_come_from_the_compiled_vvp():
    compiled = 'S_0x1 .scope module, "T" "T" 3 1;\n    .port_info 0 /INPUT 1 "clk";\n    .port_info 1 /OUTPUT 8 "q";\nS_0x2 .scope module, "U" "U" 3 9;\n    .port_info 0 /INPUT 4 "z";\n'
    assert ports_from_vvp(compiled, "T") == [Port("clk", "input", 1), Port("q", "output", 8)]
    want = [Port("clk", "input", 1), Port("q", "output", 8)]
    assert port_differences(
        want, [Port("clk", "input", 1), Port("q", "output", 4), Port("x", "input", 1)]
    ) == [
        "port q: expected output [8], got output [4]",
        "unexpected port x",
    ]


# -- the random lockstep testbench -----------------------------------------------------------------------


def test_clocks_and_resets_are_found_by_name_with_both_polarities():
    ports = [Port(n, "input", 1) for n in ("clk", "areset", "rst_n", "resetn", "enable")] + [
        Port("q", "output", 4)
    ]
    assert find_clock(ports) == "clk"
    assert find_resets(ports) == ["areset", "rst_n", "resetn"]
    plan = plan_random(ports, "T", 40, seed=7)
    first = [int(line, 16) for line in plan.stimulus.splitlines()]
    # row layout: pulse, areset, rst_n, resetn, enable. Cycle 0 asserts each reset at its guessed level,
    # cycle 20 (second half) at the opposite level.
    assert (first[0] >> 1) & 0b111 == 0b100 and (first[20] >> 1) & 0b111 == 0b011
    assert plan.samples == sum(3 if row >> 4 & 1 else 2 for row in first)
    assert plan_random(ports, "T", 40, seed=7) == plan and plan_random(ports, "T", 40, seed=8) != plan


def test_the_random_check_catches_a_synchronous_reset_where_an_asynchronous_one_is_due():
    wrong = score(COUNTER["wrong"], NO_TB)
    assert (wrong.status, wrong.reward, wrong.reason) == (Status.ok, 0.0, "mismatch")
    first = wrong.details["random"]["first_mismatch"]
    assert first["inputs"]["areset"] == "1" and set(first["outputs"]) == {"q"}
    assert wrong.details["random"]["resets"] == ["areset"] and wrong.details["random"]["clock"] == "clk"
    right = score(COUNTER["correct"], NO_TB)
    assert (right.status, right.reward, right.components) == (
        Status.ok,
        1.0,
        {"compiles": 1.0, "random": 1.0, "mismatch_fraction": 0.0},
    )


def test_the_seed_is_a_hash_of_the_request_unless_given():
    reference = SPEC.parse_reference(NO_TB)
    options = SPEC.parse_options({})
    assert seed_for(reference, options) == seed_for(reference, SPEC.parse_options({"deadline_s": 9}))
    assert seed_for(reference, options) != seed_for(reference, SPEC.parse_options({"random_cycles": 50}))
    assert seed_for(reference, SPEC.parse_options({"seed": 42})) == 42
    once, twice = score(COUNTER["wrong"], NO_TB), score(COUNTER["wrong"], NO_TB)
    assert once.details["random"] == twice.details["random"]
    seeded = score(COUNTER["wrong"], NO_TB, {"seed": 42, "random_cycles": 30})
    assert seeded.details["random"]["seed"] == 42 and seeded.details["random"]["cycles"] == 30


def test_only_lines_with_the_secret_count():
    out = read_output("Mismatches: 0 in 9 samples\nS|Mismatches: 2 in 9 samples\nX|RESULT 0 9\n", "S")
    assert (out.errors, out.samples, out.lines) == (2, 9, ["Mismatches: 2 in 9 samples"])
    assert read_output("S|RESULT 0 4\nS|RESULT 0 4\n", "S").duplicated


# A testbench in VerilogEval v2's layout (stats struct, `.*` connections, wavedrom tasks, $dumpvars, `final`
# result block, TIMEOUT guard), written for this test; iverilog 11 runs it unchanged.
VERILOGEVAL_TB = r"""`timescale 1 ps/1 ps
`define OK 12
`define INCORRECT 13

module stimulus_gen (
	input clk,
	output logic [7:0] in,
	output reg[511:0] wavedrom_title,
	output reg wavedrom_enable
);
	task wavedrom_start(input[511:0] title = "");
	endtask
	task wavedrom_stop;
		#1;
	endtask
	initial begin
		in <= 0;
		@(negedge clk) wavedrom_start("Random");
		repeat(5) @(posedge clk, negedge clk) in <= $random;
		wavedrom_stop();
		repeat(100) @(posedge clk, negedge clk) in <= $random;
		#1 $finish;
	end
endmodule

module tb();
	typedef struct packed {
		int errors;
		int errortime;
		int errors_out;
		int errortime_out;
		int clocks;
	} stats;
	stats stats1;
	wire[511:0] wavedrom_title;
	wire wavedrom_enable;
	int wavedrom_hide_after_time;
	reg clk=0;
	initial forever #5 clk = ~clk;
	logic [7:0] in;
	logic [7:0] out_ref;
	logic [7:0] out_dut;
	initial begin
		$dumpfile("wave.vcd");
		$dumpvars(1, stim1.clk, tb_mismatch ,in,out_ref,out_dut );
	end
	wire tb_match;
	wire tb_mismatch = ~tb_match;
	stimulus_gen stim1 (
		.clk,
		.* ,
		.in );
	RefModule good1 (
		.in,
		.out(out_ref) );
	TopModule top_module1 (
		.in,
		.out(out_dut) );
	bit strobe = 0;
	task wait_for_end_of_timestep;
		repeat(5) begin
			strobe <= !strobe;
			@(strobe);
		end
	endtask
	final begin
		if (stats1.errors_out) $display("Hint: Output '%s' has %0d mismatches. First mismatch occurred at time %0d.", "out", stats1.errors_out, stats1.errortime_out);
		else $display("Hint: Output '%s' has no mismatches.", "out");
		$display("Hint: Total mismatched samples is %1d out of %1d samples\n", stats1.errors, stats1.clocks);
		$display("Simulation finished at %0d ps", $time);
		$display("Mismatches: %1d in %1d samples", stats1.errors, stats1.clocks);
	end
	assign tb_match = ( { out_ref } === ( { out_ref } ^ { out_dut } ^ { out_ref } ) );
	always @(posedge clk, negedge clk) begin
		stats1.clocks++;
		if (!tb_match) begin
			if (stats1.errors == 0) stats1.errortime = $time;
			stats1.errors++;
		end
		if (out_ref !== ( out_ref ^ out_dut ^ out_ref ))
		begin if (stats1.errors_out == 0) stats1.errortime_out = $time;
			stats1.errors_out = stats1.errors_out+1'b1; end
	end
	initial begin
		#1000000
		$display("TIMEOUT");
		$finish();
	end
endmodule
"""
REVERSE_REF = "module RefModule (\n  input [7:0] in,\n  output [7:0] out\n);\n  assign out = {in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7]};\nendmodule\n"
REVERSE_GOOD = "module TopModule(input [7:0] in, output [7:0] out);\n  genvar i;\n  generate for (i = 0; i < 8; i = i + 1) begin : g\n    assign out[i] = in[7 - i];\n  end endgenerate\nendmodule\n"


def test_a_verilogeval_v2_style_testbench_runs_unchanged():
    reference = {"reference_module": REVERSE_REF, "testbench": VERILOGEVAL_TB}
    right = score(REVERSE_GOOD, reference, {"checks": ["testbench", "random", "formal"]})
    assert (right.status, right.reward) == (Status.ok, 1.0), right.details
    assert right.details["testbench"]["samples_expected"] == 107
    wrong = score(REVERSE_GOOD.replace("in[7 - i]", "in[i]"), reference)
    assert (wrong.reward, wrong.reason) == (0.0, "mismatch")
    assert wrong.details["testbench"]["hints"][0].startswith("Hint: Output 'out' has ")


# -- formal ----------------------------------------------------------------------------------------------


def test_formal_counterexample_for_a_combinational_trap():
    verdict = score(ADDER["trap"], ADDER["reference"], {"checks": ["formal"]})
    assert (verdict.status, verdict.reward, verdict.reason) == (Status.ok, 0.0, "not_equivalent")
    found = verdict.details["formal"]
    assert found["method"] == "sat" and found["note"] == "abc-cec: not_equivalent"
    values = {row["signal"]: row["value"] for row in found["counterexample"]}
    assert (values["in_a"], values["in_b"]) == ("10100101", "00111100")
    assert values["gold_sum"] != values["gate_sum"]


def test_formal_proves_a_sequential_design_and_finds_a_deep_trap():
    right = score(COUNTER["correct"], COUNTER["reference"], {"checks": ["formal"]})
    assert right.details["formal"]["result"] == "equivalent" and right.components["formal"] == 1.0
    trap = score(COUNTER["trap"], COUNTER["reference"], {"checks": ["formal"]})
    assert trap.reason == "not_equivalent" and trap.details["formal"]["method"].startswith("clk2fflogic+abc")
    assert "counterexample at frame" in trap.details["formal"]["note"]
    trace = trap.details["formal"]["counterexample"]
    last = max(row["step"] for row in trace)
    final = {row["signal"]: row["value"] for row in trace if row["step"] == last}
    assert final["gold_q"] == "1101" and final["gate_q"] == "0000"  # the trap wraps after 12
    shallow = score(
        COUNTER["trap"], COUNTER["reference"], {"checks": ["formal"], "formal_depth": 4, "formal_cpu_s": 2}
    )
    assert shallow.details["formal"]["result"] in ("inconclusive", "not_equivalent")
    assert (shallow.reward, shallow.status) == (0.0, Status.ok)
    if shallow.details["formal"]["result"] == "inconclusive":  # never a pass: the depth or the time ran out
        assert shallow.reason in ("formal_undecided", "formal_time_limit")


def test_inconclusive_formal_fails_unless_asked_to_pass_and_then_falls_back_to_simulation():
    # yosys cannot read `q <= areset ? 0 : d` under an asynchronous sensitivity list; iverilog can.
    lfsr = ROWS["lfsr8_async"]
    strict = score(lfsr["correct"], lfsr["reference"], {"checks": ["formal"]})
    assert (strict.status, strict.reward, strict.reason) == (Status.ok, 0.0, "formal_unreadable")
    assert strict.components == {"compiles": 1.0, "formal": 0.0}
    assert strict.details["formal"]["cause"] == "unreadable" and "fallback" not in strict.details["formal"]
    lenient = {"checks": ["formal"], "formal_inconclusive": "pass"}
    verdict = score(lfsr["correct"], lfsr["reference"], lenient)
    assert (verdict.status, verdict.reward) == (Status.ok, 1.0)
    assert verdict.components == {"compiles": 1.0, "formal": 0.5, "random": 1.0, "mismatch_fraction": 0.0}
    assert (
        verdict.details["formal"]["result"] == "inconclusive"
        and verdict.details["formal"]["fallback"] == "random"
    )
    wrong = score(
        lfsr["wrong"].replace("if (areset) q <= 8'h01; else q <=", "q <= areset ? 8'h01 :"),
        lfsr["reference"],
        lenient,
    )
    assert (wrong.reward, wrong.reason, wrong.components["formal"]) == (0.0, "mismatch", 0.5)


def test_timing_controls_yosys_ignores_are_found_and_parameters_are_not():
    assert timing_controls("module m #(parameter W = 8)(input a); sub #(.W(8)) u(.a(a)); endmodule") == []
    assert timing_controls("always @(posedge clk) q <= d; initial q = 0;") == []
    assert timing_controls("always @(posedge clk) q <= #1 d;") == ["a delay (#)"]
    assert timing_controls("initial begin @(posedge clk); armed = 1; end") == [
        "an event control (@) in an initial block"
    ]
    assert timing_controls("always @(posedge clk) wait (go) q <= d;") == ["'wait'"]


def test_formal_parsers():
    assert formal.sequential_result('Output 0 of miter "m" was asserted in frame 7.') == ("not_equivalent", 7)
    assert formal.sequential_result("Property proved.  Time = 0.1 sec") == ("equivalent", None)
    assert formal.sequential_result("No output asserted in 40 frames.") == ("inconclusive", None)
    assert formal.abc_result("Networks are equivalent.") == "equivalent"
    assert formal.sat_result("Interrupted SAT solver: TIMEOUT!") == "inconclusive"


# -- the gate's verdicts and failures --------------------------------------------------------------------


def test_interface_and_compile_errors():
    narrow = score(
        COUNTER["correct"].replace("output reg [3:0] q", "output reg [2:0] q"), COUNTER["reference"]
    )
    assert (narrow.reason, narrow.details["message"]) == (
        "interface_mismatch",
        "port q: expected output [4], got output [3]",
    )
    assert narrow.components == {"compiles": 1.0}
    renamed = score(COUNTER["correct"].replace("module TopModule", "module Counter"), COUNTER["reference"])
    assert (renamed.reason, renamed.details["message"]) == ("interface_mismatch", "no module named TopModule")
    broken = score(COUNTER["correct"].replace("endmodule", "wire w = ;\nendmodule"), COUNTER["reference"])
    assert broken.reason == "compile_error" and broken.components == {"compiles": 0.0}
    assert "syntax error" in broken.details["message"] and "proctor_c_" not in broken.details["message"]
    other_top = {**NO_TB, "top": "Counter"}
    assert score(COUNTER["correct"].replace("module TopModule", "module Counter"), other_top).reward == 1.0


def test_reference_failures_are_verifier_errors_never_zero():
    bad = {"reference_module": "module RefModule(input a, output b); assign b = ; endmodule"}
    verdict = score("module TopModule(input a, output b); assign b = a; endmodule\n", bad)
    assert (verdict.status, verdict.reason, verdict.correct) == (Status.verifier_error, "bad_reference", None)
    no_tb = score(COUNTER["correct"], NO_TB, {"checks": ["testbench"]})
    assert (no_tb.status, no_tb.reason) == (Status.verifier_error, "no_testbench")


def test_bad_requests_are_422_naming_the_field():
    with pytest.raises(RequestError) as missing:
        SPEC.parse_reference({"reference_module": "module Other(input a); endmodule"})
    assert (missing.value.status, missing.value.field) == (422, "reference.reference_module")
    with pytest.raises(RequestError) as silent:
        SPEC.parse_reference({**NO_TB, "testbench": "module tb; RefModule r(); endmodule"})
    assert silent.value.field == "reference.testbench"
    with pytest.raises(RequestError) as check:
        SPEC.parse_options({"checks": ["lint"]})
    assert check.value.field.startswith("options.checks")


def test_over_http(start_server):
    url = start_server(PROCTOR_PLUGINS="tests.plugins.slow,proctor.verifiers.verilog")
    body = {
        "verifier": "verilog",
        "response": f"```verilog\n{COUNTER['correct']}```",
        "reference": COUNTER["reference"],
        "options": {"checks": ["testbench", "formal"]},
    }
    answer = httpx.post(f"{url}/v1/score", json=body, timeout=90)
    assert answer.status_code == 200, answer.text
    got = answer.json()
    assert (got["status"], got["reward"], got["verifier"]) == ("ok", 1.0, "verilog@1.0.0"), got
    assert got["components"]["formal"] == 1.0
    hack = {
        **body,
        "response": COUNTER["correct"].replace("endmodule", "initial force tb.errors = 0;\nendmodule"),
    }
    caught = httpx.post(f"{url}/v1/score", json=hack, timeout=90).json()
    assert (caught["status"], caught["reward"], caught["reason"]) == ("ok", 0.0, "forbidden_construct")
    body["reference"] = {"reference_module": "module Ref(input a); endmodule"}
    rejected = httpx.post(f"{url}/v1/score", json=body, timeout=30)
    assert rejected.status_code == 422 and "reference.reference_module" in rejected.text


def test_a_reset_whose_name_misleads_still_lets_the_design_run():
    # `rst_n` reads as active low, but this design resets on 1: the first half mostly holds it in reset, the
    # second half (opposite polarity) lets it count, and a counting bug shows either way.
    ref = (
        "module RefModule(input clk, input rst_n, output reg [3:0] q);\n"
        "  always @(posedge clk) if (rst_n) q <= 0; else q <= q + 4'd1;\nendmodule\n"
    )
    wrong = ref.replace("RefModule", "TopModule").replace("q + 4'd1", "q + 4'd2")
    verdict = score(wrong, {"reference_module": ref}, {"random_cycles": 100})
    assert (verdict.reward, verdict.reason) == (0.0, "mismatch")
    assert verdict.details["random"]["resets"] == ["rst_n"]
    right = score(ref.replace("RefModule", "TopModule"), {"reference_module": ref}, {"random_cycles": 100})
    assert right.reward == 1.0
