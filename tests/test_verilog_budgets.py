"""Real-sized VerilogEval problems: the reference's own runs have their own budget and never the request's,
a testbench whose own TIMEOUT ends the reference's run is compared up to it, checks not asked for never touch
the reference (yosys refusing a latch in `always_comb` matters to `formal` only), a reference that overruns
its budget is a `timeout` (never bad_reference, never a reward), and limit options above the operator's
maxima are 422s naming the field.

The three problems are our own, shaped like VerilogEval's Prob082_lfsr32 (a 32-bit Galois LFSR; the
testbench's stimulus is 200,000 cycles but its `TIMEOUT` fires at 100K cycles: 200,000 samples),
Prob141_count_clock (a 12-hour BCD clock; here the TIMEOUT is far enough for the whole ~350,000-sample run)
and Prob137_fsm_serial (an FSM whose reference leaves `next` unassigned for unused state codes).
"""

from __future__ import annotations

from typing import Any

import pytest

from proctor.contract import RequestError, Status, Verdict
from proctor.settings import Settings, get_settings
from proctor.verifiers.verilog import verifier as V

STATS_TB = """`timescale 1 ps/1 ps

{stimulus}

module tb();
  typedef struct packed {{
    int errors;
    int errortime;
{stat_fields}
    int clocks;
  }} stats;
  stats stats1;
  reg clk = 0;
  initial forever #5 clk = ~clk;
{signals}
  initial begin
    $dumpfile("wave.vcd");
    $dumpvars(1, clk);
  end
  wire tb_match;
  wire tb_mismatch = ~tb_match;
  stimulus_gen stim1 (.clk, .*);
  RefModule good1 ({ref_ports});
  TopModule top_module1 ({dut_ports});
  final begin
{hints}
    $display("Hint: Total mismatched samples is %1d out of %1d samples\\n", stats1.errors, stats1.clocks);
    $display("Simulation finished at %0d ps", $time);
    $display("Mismatches: %1d in %1d samples", stats1.errors, stats1.clocks);
  end
  assign tb_match = ( {{ {refs} }} === ( {{ {refs} }} ^ {{ {duts} }} ^ {{ {refs} }} ) );
  always @(posedge clk, negedge clk) begin
    stats1.clocks++;
    if (!tb_match) begin
      if (stats1.errors == 0) stats1.errortime = $time;
      stats1.errors++;
    end
{checks}
  end
  initial begin
    #{timeout}
    $display("TIMEOUT");
    $finish();
  end
endmodule
"""


def make_testbench(stimulus: str, inputs: list[str], outputs: list[tuple[str, int]], timeout: int) -> str:
    """A VerilogEval-v2-shaped testbench (stats struct, per-output hints, its own TIMEOUT) for these ports."""
    signals = [f"  logic {name};" for name in inputs]
    for name, width in outputs:
        decl = f"[{width - 1}:0] " if width > 1 else ""
        signals += [f"  logic {decl}{name}_ref;", f"  logic {decl}{name}_dut;"]
    connections = [".clk", *(f".{name}" for name in inputs)]
    return STATS_TB.format(
        stimulus=stimulus,
        stat_fields="\n".join(f"    int errors_{n};\n    int errortime_{n};" for n, _ in outputs),
        signals="\n".join(signals),
        ref_ports=", ".join(connections + [f".{n}({n}_ref)" for n, _ in outputs]),
        dut_ports=", ".join(connections + [f".{n}({n}_dut)" for n, _ in outputs]),
        hints="\n".join(
            f"    if (stats1.errors_{n}) $display(\"Hint: Output '%s' has %0d mismatches. First mismatch "
            f'occurred at time %0d.", "{n}", stats1.errors_{n}, stats1.errortime_{n});\n'
            f'    else $display("Hint: Output \'%s\' has no mismatches.", "{n}");'
            for n, _ in outputs
        ),
        refs=", ".join(f"{n}_ref" for n, _ in outputs),
        duts=", ".join(f"{n}_dut" for n, _ in outputs),
        checks="\n".join(
            f"    if ({n}_ref !== ( {n}_ref ^ {n}_dut ^ {n}_ref )) begin\n"
            f"      if (stats1.errors_{n} == 0) stats1.errortime_{n} = $time;\n"
            f"      stats1.errors_{n} = stats1.errors_{n} + 1'b1;\n    end"
            for n, _ in outputs
        ),
        timeout=timeout,
    )


# -- a 32-bit Galois LFSR, 200,000 cycles of stimulus, the testbench's TIMEOUT at 100K cycles ----------

LFSR_REF = """module RefModule (
  input clk,
  input reset,
  output reg [31:0] q
);
  logic [31:0] q_next;
  always @(q) begin
    q_next = q[31:1];
    q_next[31] = q[0];
    q_next[21] ^= q[0];
    q_next[1] ^= q[0];
    q_next[0] ^= q[0];
  end
  always @(posedge clk)
    if (reset) q <= 32'h1;
    else q <= q_next;
endmodule
"""
LFSR_STIMULUS = """module stimulus_gen (input clk, output reg reset);
  initial begin
    repeat (400) @(posedge clk, negedge clk) reset <= !($random & 31);
    @(posedge clk) reset <= 1'b0;
    repeat (200000) @(posedge clk);
    reset <= 1'b1;
    repeat (5) @(posedge clk);
    #1 $finish;
  end
endmodule"""
LFSR = {
    "reference_module": LFSR_REF,
    "testbench": make_testbench(LFSR_STIMULUS, ["reset"], [("q", 32)], 1_000_000),
}
LFSR_GOOD = """module TopModule (input clk, input reset, output reg [31:0] q);
  always @(posedge clk)
    if (reset) q <= 32'h1;
    else q <= {q[0], q[31:23], q[22] ^ q[0], q[21:3], q[2] ^ q[0], q[1] ^ q[0]};
endmodule
"""
LFSR_WRONG_TAP = LFSR_GOOD.replace("q[22] ^ q[0], q[21:3]", "q[22], q[21:3]")

# -- a 12-hour clock (BCD hh:mm:ss and pm), about 176,000 cycles, run to the end -------------------------

CLOCK_REF = """module RefModule (
  input clk,
  input reset,
  input ena,
  output reg pm,
  output reg [7:0] hh,
  output reg [7:0] mm,
  output reg [7:0] ss
);
  wire [6:0] enable = {
    {hh[7:0], mm[7:0], ss[7:0]} == 24'h115959,
    {hh[3:0], mm[7:0], ss[7:0]} == 20'h95959,
    {mm[7:0], ss[7:0]} == 16'h5959,
    {mm[3:0], ss[7:0]} == 12'h959,
    ss[7:0] == 8'h59,
    ss[3:0] == 4'h9,
    1'b1} & {7{ena}};
  always @(posedge clk)
    if (reset) {pm, hh, mm, ss} <= 25'h0120000;
    else begin
      if (enable[0]) ss[3:0] <= ss[3:0] == 4'h9 ? 4'h0 : ss[3:0] + 4'h1;
      if (enable[1]) ss[7:4] <= ss[7:4] == 4'h5 ? 4'h0 : ss[7:4] + 4'h1;
      if (enable[2]) mm[3:0] <= mm[3:0] == 4'h9 ? 4'h0 : mm[3:0] + 4'h1;
      if (enable[3]) mm[7:4] <= mm[7:4] == 4'h5 ? 4'h0 : mm[7:4] + 4'h1;
      if (enable[4]) hh[3:0] <= hh == 8'h12 ? 4'h1 : hh == 8'h09 ? 4'h0 : hh[3:0] + 4'h1;
      if (enable[4]) hh[7:4] <= hh == 8'h12 ? 4'h0 : hh == 8'h09 ? 4'h1 : hh[7:4];
      if (enable[6]) pm <= ~pm;
    end
endmodule
"""
CLOCK_STIMULUS = """module stimulus_gen (input clk, output reg reset, output reg ena);
  initial begin
    reset <= 1; ena <= 1;
    @(posedge clk) reset <= 0;
    repeat (20) @(posedge clk);
    ena <= 0; reset <= 1;
    repeat (2) @(posedge clk);
    repeat (400) @(posedge clk, negedge clk) begin
      reset <= !($random & 31);
      ena <= !($random & 3);
    end
    reset <= 1;
    @(posedge clk) {reset, ena} <= 2'b01;
    repeat (3600) @(posedge clk);
    repeat (39600) @(posedge clk);
    repeat (132700) @(posedge clk);
    repeat (50) @(posedge clk, negedge clk) ena <= !($random & 7);
    reset <= 1'b1;
    repeat (5) @(posedge clk);
    #1 $finish;
  end
endmodule"""
CLOCK = {
    "reference_module": CLOCK_REF,
    "testbench": make_testbench(
        CLOCK_STIMULUS, ["reset", "ena"], [("pm", 1), ("hh", 8), ("mm", 8), ("ss", 8)], 10_000_000
    ),
}
CLOCK_GOOD = """module TopModule (
  input clk, input reset, input ena,
  output reg pm, output reg [7:0] hh, output reg [7:0] mm, output reg [7:0] ss
);
  function [7:0] bcd_inc(input [7:0] v, input [7:0] last);
    bcd_inc = v == last ? 8'h00 : v[3:0] == 4'h9 ? {v[7:4] + 4'h1, 4'h0} : v + 8'h01;
  endfunction
  always @(posedge clk) begin
    if (reset) begin
      pm <= 1'b0; hh <= 8'h12; mm <= 8'h00; ss <= 8'h00;
    end else if (ena) begin
      ss <= bcd_inc(ss, 8'h59);
      if (ss == 8'h59) begin
        mm <= bcd_inc(mm, 8'h59);
        if (mm == 8'h59) begin
          hh <= hh == 8'h12 ? 8'h01 : bcd_inc(hh, 8'h99);
          if (hh == 8'h11) pm <= ~pm;
        end
      end
    end
  end
endmodule
"""
CLOCK_PM_AT_ONE = CLOCK_GOOD.replace("if (hh == 8'h11) pm <= ~pm;", "if (hh == 8'h12) pm <= ~pm;")

# -- a serial receiver FSM whose reference infers a latch in always_comb ----------------------------------

FSM_REF = """module RefModule (
  input clk,
  input in,
  input reset,
  output done
);
  parameter B0 = 0, B1 = 1, B2 = 2, B3 = 3, B4 = 4, B5 = 5, B6 = 6, B7 = 7, START = 8, STOP = 9, DONE = 10,
    ERR = 11;
  reg [3:0] state;
  reg [3:0] next;
  always_comb begin
    case (state)  // no default: codes 12..15 keep `next` (a latch; yosys refuses it in always_comb)
      START: next = in ? START : B0;
      B0: next = B1;
      B1: next = B2;
      B2: next = B3;
      B3: next = B4;
      B4: next = B5;
      B5: next = B6;
      B6: next = B7;
      B7: next = STOP;
      STOP: next = in ? DONE : ERR;
      DONE: next = in ? START : B0;
      ERR: next = in ? START : ERR;
    endcase
  end
  always @(posedge clk)
    if (reset) state <= START;
    else state <= next;
  assign done = (state == DONE);
endmodule
"""
FSM_STIMULUS = """module stimulus_gen (input clk, output reg in, output reg reset);
  initial begin
    reset <= 1; in <= 1;
    @(posedge clk) reset <= 0;
    repeat (300) begin
      @(negedge clk) in <= 0;
      repeat (8) @(negedge clk) in <= $random;
      @(negedge clk) in <= ($random & 7) != 0;
      repeat ($random & 3) @(negedge clk) in <= 1;
    end
    repeat (3000) @(negedge clk) begin
      in <= $random;
      reset <= ($random & 63) == 0;
    end
    #1 $finish;
  end
endmodule"""
FSM = {
    "reference_module": FSM_REF,
    "testbench": make_testbench(FSM_STIMULUS, ["in", "reset"], [("done", 1)], 1_000_000),
}
FSM_GOOD = """module TopModule (input clk, input in, input reset, output done);
  localparam IDLE = 3'd0, DATA = 3'd1, STOP = 3'd2, DONE = 3'd3, ERR = 3'd4;
  reg [2:0] st;
  reg [2:0] n;
  always @(posedge clk)
    if (reset) begin
      st <= IDLE;
      n <= 3'd0;
    end else
      case (st)
        IDLE, DONE: begin
          st <= in ? IDLE : DATA;
          n <= 3'd0;
        end
        DATA: begin
          n <= n + 3'd1;
          if (n == 3'd7) st <= STOP;
        end
        STOP: st <= in ? DONE : ERR;
        ERR: st <= in ? IDLE : ERR;
        default: st <= IDLE;
      endcase
  assign done = st == DONE;
endmodule
"""
FSM_NO_WAIT = FSM_GOOD.replace("ERR: st <= in ? IDLE : ERR;", "ERR: st <= IDLE;")


def score(source: str, reference: dict[str, Any], options: dict[str, Any] | None = None) -> Verdict:
    """Score a fenced response with the registered verifier."""
    return V.SPEC.score(
        f"```verilog\n{source}```", V.SPEC.parse_reference(reference), V.SPEC.parse_options(options or {})
    )


@pytest.fixture(autouse=True)
def _fresh_references():
    V._references.clear()
    yield
    V._references.clear()


def test_a_testbench_whose_own_timeout_ends_the_reference_is_compared_up_to_it():
    # Before: the reference's run printed TIMEOUT (200,000 cycles of stimulus, the TIMEOUT at 100K) and
    # every candidate got verifier_error/bad_reference.
    right = score(LFSR_GOOD, LFSR)
    assert (right.status, right.reward) == (Status.ok, 1.0), right.details
    assert right.details["testbench"]["samples_expected"] == 200_000
    assert "TIMEOUT" in right.details["testbench"]["note"]
    info = V.reference_info(V.VerilogReference.model_validate(LFSR), checks=["testbench"])
    assert info.testbench_timeout and info.testbench_samples == 200_000
    wrong = score(LFSR_WRONG_TAP, LFSR)
    assert (wrong.status, wrong.reward, wrong.reason) == (Status.ok, 0.0, "mismatch")


def test_the_references_runs_never_use_the_requests_sim_budget():
    # Before: the reference's own testbench run got the request's sim_cpu_s, so a small one made the
    # problem a bad_reference. The candidate's testbench run gets at least what the reference's took.
    verdict = score(LFSR_GOOD, LFSR, {"sim_cpu_s": 0.1})
    assert (verdict.status, verdict.reward) == (Status.ok, 1.0), verdict.details
    reference = V.VerilogReference.model_validate(LFSR)
    assert V.reference_key(reference) == V.reference_key(reference, V.VerilogOptions(sim_cpu_s=3))


@pytest.mark.slow
def test_a_long_clock_testbench_runs_to_its_end():
    right = score(CLOCK_GOOD, CLOCK)
    assert (right.status, right.reward) == (Status.ok, 1.0), right.details
    samples = right.details["testbench"]["samples_expected"]
    assert samples > 350_000 and "note" not in right.details["testbench"]
    wrong = score(CLOCK_PM_AT_ONE, CLOCK)
    assert (wrong.status, wrong.reward, wrong.reason) == (Status.ok, 0.0, "mismatch")
    assert any(
        "'pm' has" in hint and "no mismatches" not in hint for hint in wrong.details["testbench"]["hints"]
    )


def test_a_latch_in_the_references_always_comb_matters_to_formal_only():
    # yosys refuses the reference ("Latch inferred ... from always_comb"); iverilog simulates it. Before, the
    # reference was always read with yosys, and a testbench-only request was a bad_reference.
    right = score(FSM_GOOD, FSM, {"checks": ["testbench"]})
    assert (right.status, right.reward) == (Status.ok, 1.0), right.details
    assert "sequential" not in right.details  # nothing read it with yosys
    also_random = score(FSM_GOOD, FSM, {"checks": ["testbench", "random"]})
    assert (also_random.status, also_random.reward) == (Status.ok, 1.0), also_random.details
    wrong = score(FSM_NO_WAIT, FSM)
    assert (wrong.status, wrong.reward, wrong.reason) == (Status.ok, 0.0, "mismatch")
    formal = score(FSM_GOOD, FSM, {"checks": ["testbench", "formal"]})
    assert (formal.status, formal.reason) == (Status.verifier_error, "bad_reference")
    assert "Latch inferred" in formal.details["error"] and "formal" in formal.details["error"]


def test_a_reference_that_overruns_its_own_budget_is_a_timeout(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(V, "REFERENCE_SIM_CPU_S", 0.2)  # the LFSR testbench takes about 0.6 CPU s
    verdict = score(LFSR_GOOD, LFSR)
    assert (verdict.status, verdict.reason, verdict.correct) == (Status.timeout, "reference_time_limit", None)
    assert "reference" in verdict.details["message"]
    # the overrun is cached with the problem: the next candidate does not pay for it again
    again = score(LFSR_WRONG_TAP, LFSR)
    assert (again.status, again.reason) == (Status.timeout, "reference_time_limit")
    # a check that does not run the reference's testbench is not affected
    random_only = score(LFSR_GOOD, LFSR, {"checks": ["random"]})
    assert (random_only.status, random_only.reward) == (Status.ok, 1.0), random_only.details


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"sim_cpu_s": 61}, "options.sim_cpu_s"),
        ({"formal_cpu_s": 100}, "options.formal_cpu_s"),
        ({"memory_mb": 4096}, "options.memory_mb"),
    ],
)
def test_limits_above_the_operators_maxima_are_422(
    monkeypatch: pytest.MonkeyPatch, options: dict[str, Any], field: str
):
    monkeypatch.setenv("PROCTOR_SANDBOX_MAX_CPU_S", "60")
    monkeypatch.setenv("PROCTOR_SANDBOX_MAX_MEMORY_MB", "2048")
    get_settings.cache_clear()
    try:
        with pytest.raises(RequestError) as caught:
            V.SPEC.parse_options(options)
        assert (caught.value.status, caught.value.field) == (422, field)
        V.SPEC.parse_options({"sim_cpu_s": 60, "formal_cpu_s": 60, "memory_mb": 2048})
    finally:
        get_settings.cache_clear()


@pytest.mark.slow
def test_real_sized_problems_fit_the_pools_default_deadline():
    from proctor.engine import Engine

    engine = Engine(Settings(cache_size=0, pool_workers=1))
    try:
        requests = [
            {"verifier": "verilog", "response": f"```verilog\n{source}```", "reference": reference}
            for source, reference in ((LFSR_GOOD, LFSR), (CLOCK_GOOD, CLOCK), (FSM_GOOD, FSM))
        ]
        scores = engine.score_batch(requests)
    finally:
        engine.close()
    assert [(s.status, s.reward) for s in scores] == [(Status.ok, 1.0)] * 3, scores
    assert V.SPEC.deadline_s == V.DEADLINE_S
