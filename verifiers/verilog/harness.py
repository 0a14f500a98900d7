"""The simulation harness: a testbench's lines authenticated by a per-run secret, and a generated random
lockstep testbench.

The secret reaches the simulation only as a `+proctor_secret=` plusarg, read by the harness module
`proctor_harness` into a string; no file in the job holds it and the candidate can read neither plusargs
(`$value$plusargs` is not on its allow-list) nor another module's variables (hierarchical references are
rejected), so a line starting with `<secret>|` was printed by the testbench. Everything else is ignored.
"""

from __future__ import annotations

import random
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from proctor.verifiers.verilog.source import display_strings

SECRET_ARG = "proctor_secret"
HARNESS_MODULE = f"""\
module proctor_harness;
  string secret;
  initial if (!$value$plusargs("{SECRET_ARG}=%s", secret)) secret = "-";
endmodule
"""
SECRET_REF = "proctor_harness.secret"
MISMATCH_LINE = re.compile(r"^Mismatches:\s*(\d+)\s+in\s+(\d+)\s+samples\s*$")
RESULT_LINE = re.compile(r"^RESULT (\d+) (\d+)$")
CLOCK_NAME = re.compile(r"^(?:i_)?(?:clk|clock)(?:_i|_in)?$", re.IGNORECASE)
RESET_NAME = re.compile(r"(?:rst|reset)", re.IGNORECASE)
ACTIVE_LOW = re.compile(r"(?:n|_b|n_i|_ni|_l)$", re.IGNORECASE)
HALF_PERIOD = 5
CORNER_CHANCE = 8  # one value in 8 is a corner: 0, 1 or all ones
RESET_CHANCE = 12  # after the opening cycles, one cycle in 12 asserts a reset
PULSE_CHANCE = 10  # one cycle in 10 asserts the resets between clock edges, mid-high


def new_secret() -> str:
    """A fresh secret for one simulation run."""
    return secrets.token_hex(16)


@dataclass(frozen=True)
class Port:
    """One port of a module: name, direction (input/output/inout) and width in bits."""

    name: str
    direction: str
    width: int


def is_sequential(design: dict[str, Any]) -> bool:
    """Whether a yosys design (after proc and flatten) holds any state: flip-flops, latches or memories."""
    for module in design.get("modules", {}).values():
        for cell in module.get("cells", {}).values():
            kind = cell.get("type", "")
            if kind.startswith(("$_DFF", "$_SDFF", "$_DLATCH", "$_SR", "$_ALDFF")) or kind in STATE_CELLS:
                return True
    return False


STATE_CELLS = frozenset(
    {
        "$dff", "$dffe", "$adff", "$adffe", "$sdff", "$sdffe", "$sdffce", "$aldff", "$aldffe", "$dffsr",
        "$dffsre", "$dlatch", "$adlatch", "$dlatchsr", "$sr", "$ff", "$mem", "$mem_v2", "$memwr", "$memwr_v2",
        "$memrd", "$memrd_v2",
    }
)  # fmt: skip


# -- the reference's testbench ---------------------------------------------------------------------------


def authenticated_testbench(testbench: str) -> tuple[str, int]:
    """The testbench with each literal-format `$display` prefixed by the secret, and how many there were."""
    return display_strings(testbench, SECRET_REF)


@dataclass
class SimOutcome:
    """What one simulation's authenticated lines say."""

    errors: int | None = None
    samples: int | None = None
    lines: list[str] = field(default_factory=list)
    timeout: bool = False
    duplicated: bool = False


def read_output(stdout: str, secret: str) -> SimOutcome:
    """The testbench's own lines (those carrying the secret) and the mismatch and sample counts among them."""
    prefix = secret + "|"
    outcome = SimOutcome()
    for raw in stdout.splitlines():
        if not raw.startswith(prefix):
            continue
        line = raw[len(prefix) :]
        outcome.lines.append(line)
        found = MISMATCH_LINE.match(line) or RESULT_LINE.match(line)
        if found:
            if outcome.errors is not None:
                outcome.duplicated = True
            outcome.errors, outcome.samples = int(found.group(1)), int(found.group(2))
        elif line.strip() == "TIMEOUT":
            outcome.timeout = True
    return outcome


# -- random lockstep testbench ---------------------------------------------------------------------------


@dataclass
class RandomPlan:
    """A generated lockstep testbench: its source, its stimulus file and the sample count it must report."""

    testbench: str
    stimulus: str
    samples: int
    clock: str | None
    resets: list[str]


def find_clock(inputs: list[Port]) -> str | None:
    """The clock input, found by name (clk, clock, clk_i, i_clk ...), 1 bit wide."""
    return next((p.name for p in inputs if p.width == 1 and CLOCK_NAME.match(p.name)), None)


def find_resets(inputs: list[Port]) -> list[str]:
    """1-bit inputs whose name says reset (rst, reset, areset, rst_n, resetn ...)."""
    return [p.name for p in inputs if p.width == 1 and RESET_NAME.search(p.name)]


def _value(rng: random.Random, width: int) -> int:
    if rng.randrange(CORNER_CHANCE) == 0:
        return rng.choice((0, 1, (1 << width) - 1))
    return rng.getrandbits(width)


def plan_random(ports: list[Port], top: str, cycles: int, seed: int) -> RandomPlan:
    """A lockstep testbench driving RefModule and the candidate's top with the same random stimulus.

    Clocked designs: inputs change at the falling edge and outputs are sampled before and after each rising
    edge; resets are asserted for the first two cycles and then now and then, also between clock edges (so
    a synchronous reset where an asynchronous one is due shows), and in the second half of the run with the
    opposite polarity (the name's guess of the active level may be wrong). Without a clock every step applies
    new inputs and samples once. A sample mismatches where a reference output bit is 0 or 1 and the
    candidate's differs (an x in the reference matches anything, as in VerilogEval).
    """
    inputs = [p for p in ports if p.direction == "input"]
    outputs = [p for p in ports if p.direction != "input"]
    clock = find_clock(inputs)
    resets = find_resets(inputs) if clock else []
    data = [p for p in inputs if p.name != clock]
    rng = random.Random(seed)
    rows: list[int] = []
    samples = 0
    half = cycles // 2
    for cycle in range(cycles):
        row = 0
        for port in data:
            if port.name in resets:
                active = 0 if ACTIVE_LOW.search(port.name) else 1
                if cycle >= half:
                    active ^= 1
                asserted = (cycle % max(half, 1)) < 2 or rng.randrange(RESET_CHANCE) == 0
                value = active if asserted else active ^ 1
            else:
                value = _value(rng, port.width)
            row = (row << port.width) | value
        pulse = 1 if resets and rng.randrange(PULSE_CHANCE) == 0 else 0
        rows.append((pulse << _data_width(data)) | row if clock else row)
        samples += (3 if pulse else 2) if clock else 1
    width = _data_width(data) + (1 if clock else 0)
    digits = max(1, (width + 3) // 4)
    stimulus = "".join(f"{row:0{digits}x}\n" for row in rows)
    source = _testbench_source(inputs, outputs, data, clock, resets, top, cycles, width, seed)
    return RandomPlan(source, stimulus, samples, clock, resets)


def _data_width(data: list[Port]) -> int:
    return sum(p.width for p in data)


def _decl(port: Port, kind: str, name: str) -> str:
    vector = f"[{port.width - 1}:0] " if port.width > 1 else ""
    return f"  {kind} {vector}{name};"


def _fmt(port: Port) -> str:
    return "%b" if port.width <= 16 else "%h"


def _testbench_source(
    inputs: list[Port],
    outputs: list[Port],
    data: list[Port],
    clock: str | None,
    resets: list[str],
    top: str,
    cycles: int,
    width: int,
    seed: int,
) -> str:
    lines = ["`timescale 1ns/1ps", "module proctor_tb;", f"  // seed {seed}"]
    lines += [_decl(p, "reg", p.name) for p in inputs]
    lines += [_decl(p, "wire", f"proctor_ref_{p.name}") for p in outputs]
    lines += [_decl(p, "wire", f"proctor_dut_{p.name}") for p in outputs]
    lines.append(f"  reg [{max(width, 1) - 1}:0] proctor_stim [0:{cycles - 1}];")
    lines.append("  integer proctor_errors = 0, proctor_samples = 0, proctor_cyc = 0;")
    refs = ", ".join(
        [f".{p.name}({p.name})" for p in inputs] + [f".{p.name}(proctor_ref_{p.name})" for p in outputs]
    )
    duts = ", ".join(
        [f".{p.name}({p.name})" for p in inputs] + [f".{p.name}(proctor_dut_{p.name})" for p in outputs]
    )
    lines.append(f"  RefModule proctor_ref ({refs});")
    lines.append(f"  {top} proctor_dut ({duts});")
    ref_all = "{" + ", ".join(f"proctor_ref_{p.name}" for p in outputs) + "}"
    dut_all = "{" + ", ".join(f"proctor_dut_{p.name}" for p in outputs) + "}"
    s = SECRET_REF
    lines.append("  task proctor_check;")
    lines.append("    begin")
    lines.append("      proctor_samples = proctor_samples + 1;")
    lines.append(f"      if ({ref_all} !== ({ref_all} ^ {dut_all} ^ {ref_all})) begin")
    lines.append("        proctor_errors = proctor_errors + 1;")
    lines.append("        if (proctor_errors == 1) begin")
    lines.append(
        f'          $display("%0s|FIRST %0d %0d %0t", {s}, proctor_samples - 1, proctor_cyc, $time);'
    )
    for p in inputs:
        lines.append(f'          $display("%0s|IN {p.name} {_fmt(p)}", {s}, {p.name});')
    for p in outputs:
        fmt = _fmt(p)
        lines.append(
            f'          $display("%0s|OUT {p.name} {fmt} {fmt}", {s}, proctor_ref_{p.name}, proctor_dut_{p.name});'
        )
    lines += ["        end", "      end", "    end", "  endtask"]
    unpack = "{" + ", ".join(p.name for p in data) + "}" if data else ""
    lines.append("  initial begin")
    lines.append('    $readmemh("stim.hex", proctor_stim);')
    if clock:
        lines.append(f"    {clock} = 0;")
        lines.append(
            f"    for (proctor_cyc = 0; proctor_cyc < {cycles}; proctor_cyc = proctor_cyc + 1) begin"
        )
        if unpack:
            lines.append(f"      {unpack} = proctor_stim[proctor_cyc][{max(width - 2, 0)}:0];")
        lines.append(f"      #{HALF_PERIOD - 2} proctor_check;")
        lines.append(f"      #2 {clock} = 1;")
        lines.append("      #1 proctor_check;")
        lines.append(f"      if (proctor_stim[proctor_cyc][{width - 1}]) begin")
        for name in resets:
            active = 0 if ACTIVE_LOW.search(name) else 1
            lines.append(f"        {name} = (proctor_cyc < {cycles // 2}) ? 1'b{active} : 1'b{active ^ 1};")
        lines.append("        #1 proctor_check;")
        lines.append(f"        #{HALF_PERIOD - 2};")
        lines.append(f"      end else #{HALF_PERIOD - 1};")
        lines.append(f"      {clock} = 0;")
        lines.append("    end")
    else:
        lines.append(
            f"    for (proctor_cyc = 0; proctor_cyc < {cycles}; proctor_cyc = proctor_cyc + 1) begin"
        )
        if unpack:
            lines.append(f"      {unpack} = proctor_stim[proctor_cyc];")
        lines.append(f"      #{HALF_PERIOD} proctor_check;")
        lines.append(f"      #{HALF_PERIOD};")
        lines.append("    end")
    lines.append(f'    $display("%0s|RESULT %0d %0d", {s}, proctor_errors, proctor_samples);')
    lines.append("    $finish;")
    lines.append("  end")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"


def first_mismatch(lines: list[str]) -> dict[str, Any] | None:
    """The first mismatching sample reported by the random testbench: index, cycle, time, inputs, outputs."""
    found: dict[str, Any] | None = None
    for line in lines:
        parts = line.split()
        if parts[:1] == ["FIRST"] and len(parts) == 4:
            found = {
                "sample": int(parts[1]),
                "cycle": int(parts[2]),
                "time": parts[3],
                "inputs": {},
                "outputs": {},
            }
        elif found is not None and parts[:1] == ["IN"] and len(parts) == 3:
            found["inputs"][parts[1]] = parts[2]
        elif found is not None and parts[:1] == ["OUT"] and len(parts) == 4:
            found["outputs"][parts[1]] = {"expected": parts[2], "got": parts[3]}
    return found


def testbench_hints(lines: list[str]) -> list[str]:
    """The testbench's own hint lines (VerilogEval prints where each output first mismatched)."""
    return [line for line in lines if line.startswith("Hint:")][:20]
