"""Formal equivalence with yosys: the scripts, and what their logs say.

Combinational designs: both sides are synthesized into one miter (`miter -equiv`), written as AIGER, and
ABC's `&cec -m` proves the miter's output constant. ABC works on the synthesized netlist, where an `x` of the
reference has been given some value, so when ABC finds a difference yosys' SAT solver, which models x (with
`miter -ignore_gold_x` an x bit of the reference matches anything, as in simulation), decides and produces the
counterexample.

Sequential designs: a harness-written miter (`miter_wrapper`) feeds both designs the same inputs, holds every
reset input (found by name, active level guessed from the name) active until the second rising clock edge and
compares the outputs from then on. `clk2fflogic` turns every flip-flop, asynchronous resets included, into
logic on a global clock, so the clock and the resets are ordinary inputs that may change between any two
steps (`async2sync` would sample an asynchronous reset at the clock edge and hide exactly the
synchronous-for-asynchronous bug). Registers start at 0 (AIGER has no x). ABC's `pdr` then proves that the
miter never triggers or finds a counterexample; when it runs out of time, `bmc3` searches for a
counterexample up to the depth budget (two frames per clock cycle). The outcome is `equivalent` (proved),
`not_equivalent` (a counterexample) or `inconclusive` (neither within the budget), which the verifier
counts as a failure unless asked otherwise (`formal_inconclusive`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from proctor.verifiers.verilog.harness import ACTIVE_LOW

GOLD = "proctor_gold"
GATE = "proctor_gate"
MITER = "proctor_miter"
AIGER = "miter.aig"
SAT_FAIL = re.compile(r"(?:SAT proof finished - model found: FAIL!|model found for base case: FAIL!)")
SAT_PROVED = re.compile(r"(?:SAT proof finished - no model found: SUCCESS!|Induction step proven: SUCCESS!)")
SAT_TIMEOUT = re.compile(r"(?:Interrupted SAT solver: TIMEOUT|Reached maximum number of time steps)")
SAT_INTERRUPTED = re.compile(r"Interrupted SAT solver: TIMEOUT")
# pdr and bmc3 stopping at their -T time budget ("Reached timeout (N seconds)"), not at bmc3's depth
ABC_TIMEOUT = re.compile(r"timeout", re.IGNORECASE)
ABC_EQUIVALENT = re.compile(r"Networks are equivalent", re.IGNORECASE)
ABC_DIFFERENT = re.compile(r"Networks are NOT EQUIVALENT", re.IGNORECASE)
# One row of yosys' model table: "  <step> \<signal> <dec> <hex> <bin>".
ASSERTED = re.compile(r"was asserted in frame (\d+)")
PROVED = re.compile(r"Property proved")
AGE = "proctor_age"
HELD = "proctor_held_"
TRIGGER = "proctor_trigger"  # the sequential miter's output (yosys' own `miter` names it `trigger`)
SIDE = "proctor_"  # prefix of the sequential miter's gold_/gate_ wires, dropped in counterexamples
MODEL_ROW = re.compile(r"^\s*(?:(\d+|init)\s+)?\\(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$")


def _read(files: list[str], top: str, name: str) -> list[str]:
    reads = [f"read_verilog -sv {path}" for path in files]
    return [
        "design -reset",
        *reads,
        f"hierarchy -top {top}",
        f"rename {top} {name}",
        "proc",
        "flatten",
        "memory -nomap",
        "memory_map",
        "opt_clean",
        f"design -stash {name}",
    ]


def _load_both(gold: str, gold_top: str, gate: str, gate_top: str, outputs: bool = True) -> list[str]:
    # For SAT: -make_outputs shows both sides' outputs in the counterexample, and -ignore_gold_x lets an x of
    # the reference match anything (modelled with -enable_undef). For ABC neither: it proves every output of
    # the miter constant 0, and synthesis folds the x-detection logic of -ignore_gold_x into a constant.
    make = " -make_outputs -ignore_gold_x" if outputs else ""
    return [
        *_read([gold], gold_top, GOLD),
        *_read([gate], gate_top, GATE),
        "design -reset",
        f"design -copy-from {GOLD} -as {GOLD} {GOLD}",
        f"design -copy-from {GATE} -as {GATE} {GATE}",
        f"miter -equiv -flatten{make} {GOLD} {GATE} {MITER}",
        f"hierarchy -top {MITER}",
    ]


def combinational_script(gold: str, gold_top: str, gate: str, gate_top: str) -> str:
    """Yosys script: the miter of two combinational designs, synthesized to AIGER for ABC."""
    lines = _load_both(gold, gold_top, gate, gate_top, outputs=False)
    lines += [
        "synth -flatten -top " + MITER,
        "aigmap",
        "opt_clean",
        f"write_aiger -zinit {AIGER}",
    ]
    return "\n".join(lines) + "\n"


def combinational_sat_script(gold: str, gold_top: str, gate: str, gate_top: str, timeout_s: int) -> str:
    """Yosys script: SAT on the miter of two combinational designs, x-aware, showing a counterexample."""
    lines = _load_both(gold, gold_top, gate, gate_top)
    lines.append(
        f"sat -prove trigger 0 -enable_undef -set-def-inputs -show-inputs -show-outputs -timeout {timeout_s} "
        f"{MITER}"
    )
    return "\n".join(lines) + "\n"


def miter_wrapper(
    ports: list[Any], gold_top: str, gate_top: str, clock: str | None, resets: list[str]
) -> str:
    """A Verilog miter of the two designs for the sequential check: both see the same inputs; with a clock,
    every reset input is held at its active level (guessed from the name) until the second rising edge, and
    the outputs are compared from then on (`proctor_trigger` is 1 on a difference). Its own names carry the `proctor_` prefix, so no port of
    the reference (an input named `trigger`, `gold_q` ...) can clash with them."""
    inputs = [p for p in ports if p.direction == "input"]
    outputs = [p for p in ports if p.direction != "input"]
    decl = [f"input {_vec(p.width)}{p.name}" for p in inputs] + [f"output {TRIGGER}"]
    lines = [f"module {MITER} (" + ", ".join(decl) + ");"]
    hold = "1'b0"
    if clock is not None:
        lines.append(f"  reg [1:0] {AGE} = 2'd0;")
        lines.append(f"  always @(posedge {clock}) if ({AGE} != 2'd3) {AGE} <= {AGE} + 2'd1;")
        hold = f"({AGE} < 2'd2)"
    driven = {}
    for p in inputs:
        if p.name in resets and clock is not None:
            active = "1'b0" if ACTIVE_LOW.search(p.name) else "1'b1"
            lines.append(f"  wire {HELD}{p.name} = {hold} ? {active} : {p.name};")
            driven[p.name] = HELD + p.name
        else:
            driven[p.name] = p.name
    for side in ("gold", "gate"):
        lines += [f"  wire {_vec(p.width)}{SIDE}{side}_{p.name};" for p in outputs]
    for side, top in (("gold", gold_top), ("gate", gate_top)):
        conns = [f".{p.name}({driven[p.name]})" for p in inputs] + [
            f".{p.name}({SIDE}{side}_{p.name})" for p in outputs
        ]
        lines.append(f"  {top} {SIDE}{side} (" + ", ".join(conns) + ");")
    gold_all = "{" + ", ".join(f"{SIDE}gold_{p.name}" for p in outputs) + "}"
    gate_all = "{" + ", ".join(f"{SIDE}gate_{p.name}" for p in outputs) + "}"
    lines.append(f"  assign {TRIGGER} = !{hold} && ({gold_all} != {gate_all});")
    lines.append("endmodule")
    return "\n".join(lines) + "\n"


def _vec(width: int) -> str:
    return f"[{width - 1}:0] " if width > 1 else ""


def _sequential_miter(gold: str, gate: str, wrapper: str, gate_modules: str = "") -> list[str]:
    """Yosys commands shared by the sequential scripts: the flattened miter after clk2fflogic, zero init."""
    return [
        f"read_verilog -sv {gold}",
        f"read_verilog -sv {gate}",
        f"read_verilog -sv {wrapper}",
        f"hierarchy -top {MITER}",
        "proc",
        *([f"setundef -undriven -anyseq {gate_modules}"] if gate_modules else []),
        "flatten",
        "memory -nomap",
        "memory_map",
        "opt_clean",
        "clk2fflogic",
        "setundef -undriven -init -zero",
    ]


def sequential_script(gold: str, gate: str, wrapper: str, gate_modules: str = "") -> str:
    """Yosys script: the wrapper miter, clk2fflogic (clock and resets become ordinary inputs), registers
    starting at 0, as an AIGER for ABC. Every x constant and undriven net of the modules matching
    `gate_modules` (the candidate's) becomes a free input, so the proof holds whatever value it takes."""
    lines = [
        *_sequential_miter(gold, gate, wrapper, gate_modules),
        "opt -fast",
        "dffunmap",
        "techmap",
        "opt -fast",
        "abc -g AND",
        "opt_clean",
        f"write_aiger -zinit {AIGER}",
    ]
    return "\n".join(lines) + "\n"


def sequential_trace_script(
    gold: str, gate: str, wrapper: str, outputs: list[str], steps: int, timeout_s: int
) -> str:
    """Yosys script: the same miter, zero init, and a bounded SAT search of `steps` steps that prints the
    inputs and both sides' outputs of a counterexample (ABC only says at which frame it failed)."""
    shows = " ".join(f"-show {SIDE}{side}_{name}" for name in outputs for side in ("gold", "gate"))
    lines = [
        *_sequential_miter(gold, gate, wrapper),
        f"sat -seq {steps} -set-init-zero -prove {TRIGGER} 0 -show-inputs {shows} -timeout {timeout_s} {MITER}",
    ]
    return "\n".join(lines) + "\n"


def pdr_command(timeout_s: int) -> str:
    """ABC's property-directed reachability: a proof (the miter never triggers) or a counterexample."""
    return f"read_aiger {AIGER}; pdr -T {timeout_s}"


def bmc_command(depth: int, timeout_s: int) -> str:
    """ABC's bounded model check to `depth` frames (two frames per clock cycle after clk2fflogic)."""
    return f"read_aiger {AIGER}; bmc3 -F {depth} -T {timeout_s}"


def sequential_result(log: str) -> tuple[str, int | None]:
    """equivalent, not_equivalent or inconclusive from a pdr or bmc3 log, and the failing frame."""
    found = ASSERTED.search(log)
    if found:
        return "not_equivalent", int(found.group(1))
    if PROVED.search(log):
        return "equivalent", None
    return "inconclusive", None


# Cells whose output can be x in simulation although yosys/ABC give it a value: division and modulo by a
# non-constant divisor (x on zero) and a shift that can reach past its input (x-filled, `a[i +: w]`).
DIVIDERS = frozenset({"$div", "$mod", "$divfloor", "$modfloor"})


def undefined_sources(design: dict[str, Any], top: str, constants: bool = True) -> list[str]:
    """Where the flattened module `top` of a yosys JSON design can put an x or z on a net, which ABC and
    `pdr` (on a synthesized netlist, where an x is whatever value suits the optimizer) do not model: x/z
    constants, undriven bits that something reads, and cells that make x (out-of-range `$shiftx`, division
    by a non-constant). Empty: every net the outputs depend on is 0 or 1 in simulation too. Without
    `constants`, x constants and undriven nets read by cells are left out (`setundef -anyseq` models them);
    an output port tied to x/z or left undriven is still reported."""
    module = design.get("modules", {}).get(top)
    if module is None:
        return ["the top module is missing from yosys' design"]
    found: list[str] = []
    driven: set[int] = set()
    for port in module.get("ports", {}).values():
        if port.get("direction") == "input":
            driven.update(bit for bit in port.get("bits", []) if isinstance(bit, int))
    cells = module.get("cells", {}).values()
    for cell in cells:
        directions = cell.get("port_directions", {})
        for name, bits in cell.get("connections", {}).items():
            if directions.get(name) == "output":
                driven.update(bit for bit in bits if isinstance(bit, int))
    read: list[tuple[str, list[Any]]] = []
    for cell in cells:
        kind = cell.get("type", "")
        directions = cell.get("port_directions", {})
        connections = cell.get("connections", {})
        if kind in DIVIDERS and any(bit not in ("0", "1") for bit in connections.get("B", [])):
            found.append(f"{kind} by a non-constant divisor (x when it is 0)")
        elif kind == "$shiftx" and _shiftx_can_overrun(cell.get("parameters", {})):
            found.append("a part-select that can reach past its vector (x)")
        if constants:
            read += [(kind, bits) for name, bits in connections.items() if directions.get(name) != "output"]
    read += [
        ("output " + name, port.get("bits", []))
        for name, port in module.get("ports", {}).items()
        if port.get("direction") != "input"
    ]
    for where, bits in read:
        if any(bit in ("x", "z") for bit in bits):
            found.append(f"an x or z constant ({where})")
        elif any(isinstance(bit, int) and bit not in driven for bit in bits):
            found.append(f"an undriven net ({where})")
    return list(dict.fromkeys(found))


def _shiftx_can_overrun(parameters: dict[str, Any]) -> bool:
    def number(key: str) -> int:
        value = parameters.get(key, 0)
        return int(value, 2) if isinstance(value, str) else int(value)

    if number("B_SIGNED"):
        return True
    biggest = (1 << min(number("B_WIDTH"), 64)) - 1
    return biggest + number("Y_WIDTH") > number("A_WIDTH")


def abc_command() -> str:
    """ABC's combinational equivalence check of the single-output miter."""
    return f"&r {AIGER}; &cec -m"


@dataclass
class FormalOutcome:
    """What the formal check concluded, how, and a counterexample when there is one."""

    result: str  # equivalent, not_equivalent, inconclusive
    method: str
    counterexample: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""
    frame: int | None = None
    cause: str = ""  # when inconclusive: unreadable, time_limit, memory_limit, unsupported or undecided


def sat_result(log: str) -> str:
    """equivalent, not_equivalent or inconclusive, from a yosys `sat` log."""
    if SAT_FAIL.search(log):
        return "not_equivalent"
    if SAT_PROVED.search(log) and not SAT_TIMEOUT.search(log):
        return "equivalent"
    return "inconclusive"


def abc_result(log: str) -> str:
    """equivalent, not_equivalent or inconclusive, from ABC's `&cec -m` output."""
    if ABC_DIFFERENT.search(log):
        return "not_equivalent"
    if ABC_EQUIVALENT.search(log):
        return "equivalent"
    return "inconclusive"


def last_steps(rows: list[dict[str, Any]], count: int = 4) -> list[dict[str, Any]]:
    """The rows of a sequential counterexample's last `count` steps (where the outputs part)."""
    steps = sorted({row["step"] for row in rows if "step" in row})
    keep = set(steps[-count:])
    return [row for row in rows if row.get("step") in keep]


def counterexample(log: str, limit: int = 4096) -> list[dict[str, Any]]:
    """The model yosys printed: one row per port (`in_*` inputs, `gold_*`/`gate_*` outputs), with the time
    step for a sequential model."""
    rows = []
    for line in log.splitlines():
        found = MODEL_ROW.match(line)
        if not found or found.group(1) == "init":
            continue
        signal = found.group(2)
        if signal in ("trigger", TRIGGER) or "$" in signal or signal.startswith(HELD) or signal == AGE:
            continue
        if signal.startswith((SIDE + "gold_", SIDE + "gate_")):
            signal = signal[len(SIDE) :]
        row: dict[str, Any] = {"signal": signal, "value": found.group(5)}
        if found.group(1) is not None:
            row["step"] = int(found.group(1))
        rows.append(row)
        if len(rows) >= limit:
            break
    return rows
