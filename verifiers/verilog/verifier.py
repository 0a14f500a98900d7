"""The `verilog` verifier: a model-written module judged against a reference module by simulation and formal
equivalence, with the verdict owned by the harness.

Pipeline, every tool run in the sandbox (no network, CPU and memory limits, a fresh work folder per job):
1. extract the candidate (source.py): the last verilog/systemverilog fenced block, else the modules in the text;
2. gate it: preprocess alone (`iverilog -E`; `` `include `` refused before), reject forbidden constructs on
   the preprocessed tokens (force/release, hierarchical references, $root, bind, system tasks outside an
   allow-list, file I/O), prefix every module it declares (`proctor_c_`) so nothing can clash with `tb`,
   `RefModule` or `stimulus_gen`, elaborate it alone with iverilog (in the same job as the preprocessing),
   and compare its ports as iverilog compiled them (names, directions, widths) with the reference's, read the
   same way;
3. run the checks (`testbench`, `random`, `formal`), stopping at the first that fails:
   - testbench: the reference's testbench with every literal `$display` prefixed by a per-run secret that
     only a plusarg carries (harness.py); the verdict is the authenticated `Mismatches: N in M samples` line,
     and M must equal the count the reference alone produces (measured once per reference and cached, under
     the reference's own CPU budget); where the testbench's own `TIMEOUT` ends the reference's run too, the
     candidate is compared up to it;
   - random: a generated lockstep testbench (RefModule and the candidate on the same random stimulus, resets
     in both polarities, asserted at and between clock edges), seeded from a hash of the reference and
     options unless `seed` is given, its sample count known in advance;
   - formal (formal.py): ABC `&cec` (confirmed by x-aware yosys `sat`) for combinational designs; for
     sequential ones a harness-written miter through `clk2fflogic`, then ABC `pdr` (proof or counterexample)
     and `bmc3`; `inconclusive` (yosys cannot read the candidate, the proof passes its budget, timing
     controls yosys ignores, no proof within the depth) fails the check with the cause as the reason
     (formal_unreadable, formal_time_limit, ...) unless formal_inconclusive="pass", where it passes at 0.5
     and falls back to the random simulation when no simulation check is on.

Reasons: compile_error, interface_mismatch, forbidden_construct, mismatch, not_equivalent, time_limit (and
memory_limit/output_limit when the simulation ran out of memory or printed past the cap), formal_* (formal
could not decide; yosys/ABC failing on the reference against itself too is verifier_error, formal_tool_error). A sandbox failure
is status sandbox_error; a reference that does not build or does not pass its own testbench is
verifier_error (bad_reference), and one whose own testbench run passes its CPU budget (REFERENCE_SIM_CPU_S)
is status timeout (reference_time_limit): never a reward of 0. Only the checks asked for touch the
reference: yosys reads it for `formal` alone, its testbench runs for `testbench` alone.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from proctor.cache import LRUCache
from proctor.contract import Status, Verdict
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.sandboxes.backends import resolve_backend
from proctor.sandboxes.job import (
    Command,
    CommandResult,
    File,
    Job,
    Result,
    RunLimits,
    RunVerdict,
    SandboxFailure,
)
from proctor.settings import get_settings, within_max_cpu_s, within_max_memory_mb
from proctor.verifiers.verilog import fastgate, formal, jails
from proctor.verifiers.verilog.harness import (
    HARNESS_MODULE,
    SECRET_ARG,
    Port,
    RandomPlan,
    SimOutcome,
    authenticated_testbench,
    find_clock,
    find_resets,
    first_mismatch,
    is_sequential,
    new_secret,
    plan_random,
    read_output,
    testbench_hints,
)
from proctor.verifiers.verilog.source import (
    code_tokens,
    declared_modules,
    extract_verilog,
    raw_violations,
    rename,
    synthesis_view,
    timing_controls,
    tokenize,
    violations,
)

VERSION = "1.0.0"
REF_TOP = "RefModule"
CAND_PREFIX = "proctor_c_"
REF_COPY_PREFIX = "proctor_r_"
GOLD_PREFIX = "proctor_g_"
HARNESS_TOP = "proctor_harness"
IVERILOG = "/usr/bin/iverilog"
VVP = "/usr/bin/vvp"
YOSYS = "/usr/bin/yosys"
YOSYS_ABC = "/usr/bin/yosys-abc"
MIB = 1024 * 1024
MAX_SOURCE = 1 * MIB
TOOL_LIMITS = RunLimits(cpu_s=20.0, memory_mb=1024, processes=16, output_bytes=4 * MIB, file_size_mb=64)
CACHE_SIZE = 128
VVP_PORT = re.compile(r'^\s*\.port_info \d+ /(INPUT|OUTPUT|INOUT) (\d+) "([^"]+)";')
FORMAL_COMPONENT = {"equivalent": 1.0, "not_equivalent": 0.0, "inconclusive": 0.5}
# Why formal could not decide, as the reason of a failed check (formal_inconclusive="fail", the default): a
# design the checker cannot prove is not proven equivalent, whatever the candidate did to get there.
FORMAL_CAUSES = {
    "unreadable": "formal_unreadable",  # yosys does not read the candidate (it read the reference)
    "time_limit": "formal_time_limit",  # the proof ran past the formal CPU budget
    "memory_limit": "formal_memory_limit",  # ... or past the memory limit
    "unsupported": "formal_unsupported",  # yosys/ABC failed on the miter (they do not on the reference's own)
    "undecided": "formal_undecided",  # no proof within the depth, or proved only with the candidate's x set
}
DEADLINE_S = 90.0
# The tools' CPU seconds of one request may use this share of its deadline (less a fixed part for the
# worker, the sandbox's setup and parsing): a candidate slow at every stage then gets a time_limit verdict
# instead of running into the engine's deadline, a timeout status that a trainer masks.
CPU_SHARE = 0.8
CPU_RESERVE_S = 2.0
MIN_RUN_S = 0.5
# The reference's own runs (its elaboration, its testbench against itself, yosys for formal) have their own
# limits, never the request's options or budget: a VerilogEval testbench of 200,000 samples takes about
# 0.6 CPU s here, so 30 s leaves room for testbenches 50 times heavier. Measured once per problem and cached.
REFERENCE_SIM_CPU_S = 30.0
REFERENCE_MEMORY_MB = 2048
# A candidate's testbench run gets at least this multiple of what the reference's own run took (plus 1 s):
# the same testbench simulates the reference next to it, so a correct design needs about as much.
CANDIDATE_SLACK = 1.5


class VerilogReference(BaseModel):
    """A VerilogEval-style task: the reference module `RefModule`, an optional testbench, the expected top."""

    model_config = ConfigDict(extra="forbid")

    reference_module: str = Field(
        min_length=1, max_length=MAX_SOURCE, description="Verilog source declaring `module RefModule`."
    )
    testbench: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_SOURCE,
        description="A VerilogEval-style testbench instantiating RefModule and the top, printing "
        "'Mismatches: N in M samples' with $display.",
    )
    top: str = Field(
        "TopModule",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        max_length=100,
        description="The module the response must declare (default TopModule).",
    )

    @field_validator("reference_module")
    @classmethod
    def _declares_ref(cls, value: str) -> str:
        if REF_TOP not in declared_modules(tokenize(value)):
            raise ValueError(f"the reference module must declare `module {REF_TOP}`")
        return value

    @field_validator("testbench")
    @classmethod
    def _reports_mismatches(cls, value: str | None) -> str | None:
        if value is None:
            return value
        code = code_tokens(tokenize(value))
        if not any(t.kind == "ident" and t.text == REF_TOP for t in code):
            raise ValueError(f"the testbench must instantiate {REF_TOP}")
        if not any(t.kind == "string" and t.text.startswith('"Mismatches:') for t in code):
            raise ValueError("the testbench must $display a literal 'Mismatches: %d in %d samples' line")
        return value

    @field_validator("top")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in (REF_TOP, "tb", "stimulus_gen") or value.startswith("proctor_"):
            raise ValueError(f"the top module cannot be named {value!r}")
        return value


class VerilogOptions(BaseOptions):
    """Which checks to run, their budgets, and the random check's seed."""

    checks: list[Literal["testbench", "random", "formal"]] | None = Field(
        None,
        min_length=1,
        description="Checks to run, each must pass: testbench, random, formal (default: testbench when the "
        "reference has one, else random).",
    )
    seed: int | None = Field(
        None, ge=0, lt=2**31, description="Random-check seed (default: a hash of reference and options)."
    )
    random_cycles: int = Field(200, ge=1, le=20_000, description="Cycles (or steps) of the random check.")
    sim_cpu_s: float = Field(
        10.0,
        gt=0,
        le=120,
        description="CPU seconds for each simulation run of the candidate (the testbench run gets at least "
        "1.5 times what the reference's own run took, plus 1 s); at most the operator's "
        "PROCTOR_SANDBOX_MAX_CPU_S.",
    )
    formal_depth: int = Field(
        80, ge=1, le=2000, description="Frames of bounded search for a counterexample (two per clock cycle)."
    )
    formal_cpu_s: float = Field(
        20.0,
        gt=0,
        le=300,
        description="CPU seconds for the formal check; at most the operator's PROCTOR_SANDBOX_MAX_CPU_S.",
    )
    formal_inconclusive: Literal["fail", "pass"] = Field(
        "fail",
        description="What an inconclusive formal check counts as: fail (default: reward 0, reason "
        "formal_unreadable/formal_time_limit/...) or pass (component 0.5; the random simulation runs when no "
        "simulation check was asked for), for problems whose correct answers yosys often cannot prove.",
    )
    memory_mb: int = Field(
        1024,
        ge=64,
        le=8192,
        description="Memory for each tool run; at most the operator's PROCTOR_SANDBOX_MAX_MEMORY_MB.",
    )

    @field_validator("sim_cpu_s", "formal_cpu_s")
    @classmethod
    def _within_cpu_maximum(cls, value: float) -> float:
        return within_max_cpu_s(value)

    @field_validator("memory_mb")
    @classmethod
    def _within_memory_maximum(cls, value: int) -> int:
        return within_max_memory_mb(value)


class ReferenceFailure(Exception):
    """The reference (module or testbench) does not build or does not pass: a verifier_error."""


class ReferenceTimeout(Exception):
    """The reference's own testbench run passed its CPU budget: the score is a timeout, never a reward."""


class FormalMachineryFailure(Exception):
    """yosys/ABC fail on the reference against itself too: the formal tools are broken, not the candidate."""


class OutOfTime(Exception):
    """The request's CPU budget is spent before a tool run: the candidate's time_limit."""


@dataclass
class Budget:
    """CPU seconds the tools of one request may still use (measured by the sandbox, so a loaded machine's
    slowness is not charged to the candidate)."""

    cpu_left: float


_budget: ContextVar[Budget | None] = ContextVar("proctor_verilog_budget", default=None)


def request_budget(deadline_s: float | None) -> Budget:
    """The CPU budget of a request with this deadline (the verifier's default when None)."""
    return Budget(max(MIN_RUN_S, (deadline_s or DEADLINE_S) * CPU_SHARE - CPU_RESERVE_S))


def fit_to_budget(
    commands: list[tuple[str, list[str], RunLimits]], cpu_left: float
) -> list[tuple[str, list[str], RunLimits]]:
    """The commands with their CPU limits scaled down (in proportion) so that together they fit `cpu_left`."""
    total = sum(limits.cpu_s for _, _, limits in commands)
    factor = min(1.0, cpu_left / total) if total > 0 else 1.0
    if factor >= 1.0:
        return commands
    out = []
    for name, argv, limits in commands:
        cpu = max(0.1, limits.cpu_s * factor)
        out.append((name, argv, limits.model_copy(update={"cpu_s": cpu, "wall_s": 2 * cpu + 1})))
    return out


# -- running tools ---------------------------------------------------------------------------------------


def run_job(
    files: dict[str, str], commands: list[tuple[str, list[str], RunLimits]], fetch: tuple[str, ...] = ()
) -> Result:
    """Run tool commands in one fresh sandbox folder (keep going past failures); sandbox errors raise.
    Under a request's budget the commands share what is left of it, and OutOfTime raises when it is spent."""
    budget = _budget.get()
    if budget is not None:
        if budget.cpu_left < MIN_RUN_S:
            raise OutOfTime(f"the request's {CPU_SHARE:.0%} CPU share of its deadline is spent")
        commands = fit_to_budget(commands, budget.cpu_left)
    job = Job(
        files=[File(path=name, content=text) for name, text in files.items()],
        commands=[Command(argv=argv, name=name, limits=limits) for name, argv, limits in commands],
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp"},
        keep_going=True,
        fetch=list(fetch),
    )
    backend = resolve_backend(None)
    # A warm jail where the backend has them (no fresh jail per tool run); else, or when no warm jail can
    # take the job, a fresh jail per command as before.
    result = jails.POOL.run(backend, job) if jails.warm_usable(backend) else None
    if result is None:
        result = backend.run(job)
    if budget is not None:
        budget.cpu_left -= sum(c.cpu_s for c in result.commands)
    for command in result.commands:
        if command.verdict is RunVerdict.sandbox_error:
            raise SandboxFailure(f"{command.name}: {command.detail}"[:2000])
    return result


def fetched(result: Result, name: str) -> str | None:
    """A fetched file's text, or None when the job did not produce it."""
    data = result.files.get(name)
    return None if data is None else base64.b64decode(data).decode("utf-8", "replace")


def command(result: Result, name: str) -> CommandResult | None:
    """The named command's result (None when it did not run)."""
    return next((c for c in result.commands if c.name == name), None)


def tool_message(result: CommandResult | None) -> str:
    """A tool's complaint: the tail of its stderr (and stdout, where yosys writes its errors)."""
    if result is None:
        return "did not run"
    text = (result.stderr.strip() + "\n" + result.stdout.strip()[-1500:]).strip()
    return (text or result.detail or result.verdict.value)[-2000:]


def tool_limits(cpu_s: float, options: VerilogOptions, output_mb: int = 4) -> RunLimits:
    """Limits for one tool run, within the operator's maxima (asked-for options above them are 422s; this
    also bounds the defaults and the candidate's testbench floor)."""
    settings = get_settings()
    return TOOL_LIMITS.model_copy(
        update={
            "cpu_s": min(cpu_s, settings.sandbox_max_cpu_s),
            "memory_mb": min(options.memory_mb, settings.sandbox_max_memory_mb),
            "output_bytes": output_mb * MIB,
        }
    )


def yosys_json_argv(source: str, top: str, out: str) -> list[str]:
    """yosys reading one file, elaborating `top`, and writing the flattened design as JSON."""
    script = (
        f"read_verilog -sv {source}; hierarchy -top {top}; proc; flatten; memory; opt_clean; write_json {out}"
    )
    return [YOSYS, "-q", "-p", script]


def ports_from_vvp(compiled: str, module: str) -> list[Port]:
    """The ports of the root `module` in a compiled vvp file (`.port_info` lines after its `.scope`): what
    iverilog elaborated, so the gate does not depend on yosys reading the candidate's body."""
    ports: list[Port] = []
    inside = False
    for line in compiled.splitlines():
        if line.startswith("S_"):
            inside = f'.scope module, "{module}" "{module}"' in line
            continue
        found = VVP_PORT.match(line) if inside else None
        if found:
            ports.append(Port(found.group(3), found.group(1).lower(), int(found.group(2))))
    return ports


def sim_commands(
    name: str,
    files: list[str],
    roots: list[str],
    secret: str,
    compile_limits: RunLimits,
    run_limits: RunLimits,
) -> list:
    """Compile (iverilog -g2012) and run (vvp, dumping off) one simulation."""
    tops = [arg for root in roots for arg in ("-s", root)]
    compile_argv = [IVERILOG, "-g2012", "-o", f"{name}.vvp", *tops, *files]
    run_argv = [VVP, "-n", f"{name}.vvp", "-none", f"+{SECRET_ARG}={secret}"]
    return [(f"{name}_compile", compile_argv, compile_limits), (f"{name}_run", run_argv, run_limits)]


@functools.lru_cache(maxsize=64)
def candidate_testbench(testbench: str, top: str, renamed_top: str) -> str:
    """The testbench as a candidate's simulation runs it: secret-tagged `$display`s, the top renamed (the same
    for every candidate of a problem, so kept)."""
    tb, _ = authenticated_testbench(testbench)
    return rename(tb, [], "", {top: renamed_top})


@functools.lru_cache(maxsize=64)
def _testbench_roots(testbench: str) -> tuple[str, ...]:
    return tuple(testbench_roots(testbench))


def testbench_roots(testbench: str) -> list[str]:
    """The testbench's top-level modules: those it declares but never instantiates."""
    tokens = tokenize(testbench)
    declared = declared_modules(tokens)
    uses = [t.text for t in code_tokens(tokens) if t.kind == "ident"]
    return [name for name in declared if uses.count(name) == 1] or declared[-1:]


# -- the reference, once per problem --------------------------------------------------------------------


@dataclass
class ReferenceInfo:
    """What the reference gives every candidate, measured on it alone (each part only when a check needs it).

    - ports: from iverilog's elaboration (as the candidate's are), always;
    - testbench_*: the reference's run of its own testbench (`testbench` check): the sample count, whether the
      testbench's own `TIMEOUT` ended it (then a candidate must end there too), and the CPU it took;
    - sequential/gold: yosys' reading of the reference (`formal` check only: yosys refuses some designs
      iverilog simulates, such as a latch inferred in `always_comb`).
    """

    ports: list[Port]
    sequential: bool | None = None
    gold: str | None = None  # synthesis view, modules prefixed for formal
    testbench_samples: int | None = None
    testbench_timeout: bool = False
    testbench_cpu_s: float = 0.0
    overrun: str | None = None  # the reference's own run passed its CPU budget (a timeout, cached)
    formal_self: str | None = None  # the formal flow on the reference against itself: "equivalent" or why not
    # Names a candidate must not use for its testbench verdict to skip the lone gate (fastgate.py): every
    # scope of the reference's own testbench run; None where the problem does not allow the fold.
    fold_names: frozenset[str] | None = None


_references: LRUCache[ReferenceInfo] = LRUCache(CACHE_SIZE)


def reference_key(reference: VerilogReference, options: VerilogOptions | None = None) -> str:
    """A cache key for what is measured on the reference alone: the problem only (the reference's runs have
    their own limits, never the request's options)."""
    payload = json.dumps(["v2", reference.model_dump(mode="json")])
    return hashlib.sha256(payload.encode()).hexdigest()


def reference_limits(cpu_s: float, output_mb: int = 4) -> RunLimits:
    """Limits of one of the reference's own tool runs: its own budget, within the operator's maxima."""
    settings = get_settings()
    return TOOL_LIMITS.model_copy(
        update={
            "cpu_s": min(cpu_s, settings.sandbox_max_cpu_s),
            "memory_mb": min(REFERENCE_MEMORY_MB, settings.sandbox_max_memory_mb),
            "output_bytes": output_mb * MIB,
        }
    )


def reference_info(
    reference: VerilogReference, options: VerilogOptions | None = None, checks: list[str] | None = None
) -> ReferenceInfo:
    """The reference's ports, and what the asked checks need of it (default: every check it supports),
    cached per process. ReferenceFailure when it does not build or does not pass its own testbench,
    ReferenceTimeout when its own run passes its CPU budget (REFERENCE_SIM_CPU_S, not the request's)."""
    wanted = set(checks) if checks is not None else {"testbench", "formal"}
    need_tb = "testbench" in wanted and reference.testbench is not None
    need_yosys = "formal" in wanted
    key = reference_key(reference)
    info = _references.get(key)
    if info is not None and info.overrun is not None and need_tb:
        raise ReferenceTimeout(info.overrun)
    need_tb = need_tb and (info is None or info.testbench_samples is None)
    need_yosys = need_yosys and (info is None or info.gold is None)
    if info is not None and not need_tb and not need_yosys:
        return info
    names = declared_modules(tokenize(reference.reference_module))
    syn = synthesis_view(reference.reference_module)
    files = {"ref.v": reference.reference_module}
    commands: list = []
    fetch = []
    if info is None:
        elaborate = [IVERILOG, "-g2012", "-o", "ref.vvp", "-s", REF_TOP, "ref.v"]
        commands.append(("ref_elaborate", elaborate, reference_limits(20.0, 1)))
        fetch.append("ref.vvp")
    if need_yosys:
        files["ref_syn.v"] = syn
        argv = yosys_json_argv("ref_syn.v", REF_TOP, "ref.json")
        commands.append(("ref_yosys", argv, reference_limits(20.0)))
        fetch.append("ref.json")
    secret = new_secret()
    run_limits = reference_limits(REFERENCE_SIM_CPU_S, 8)
    if need_tb:
        assert reference.testbench is not None
        tb, _ = authenticated_testbench(reference.testbench)
        tb = rename(tb, [], "", {reference.top: REF_COPY_PREFIX + REF_TOP})
        files["tb.sv"] = tb
        files["refcopy.v"] = rename(reference.reference_module, names, REF_COPY_PREFIX)
        files["harness.sv"] = HARNESS_MODULE
        roots = [*testbench_roots(reference.testbench), "proctor_harness"]
        tb_files = ["tb.sv", "ref.v", "refcopy.v", "harness.sv"]
        commands += sim_commands("tb", tb_files, roots, secret, reference_limits(20.0, 1), run_limits)
        fetch.append("tb.vvp")
    token = _budget.set(None)  # the reference's own runs are not the candidate's time
    try:
        result = run_job(files, commands, fetch=tuple(fetch))
    finally:
        _budget.reset(token)
    if info is None:
        compiled = fetched(result, "ref.vvp")
        ports = ports_from_vvp(compiled, REF_TOP) if compiled is not None else []
        if not ports:
            why = tool_message(command(result, "ref_elaborate"))
            raise ReferenceFailure(f"iverilog could not elaborate the reference: {why}")
        info = ReferenceInfo(ports)
    if need_yosys:
        design = fetched(result, "ref.json")
        if design is None:
            why = tool_message(command(result, "ref_yosys"))
            raise ReferenceFailure(f"yosys could not read the reference (the formal check needs it): {why}")
        parsed = json.loads(design)
        info.sequential, info.gold = is_sequential(parsed), rename(syn, names, GOLD_PREFIX)
    if need_tb:
        ran = command(result, "tb_run")
        if ran is not None and ran.verdict is RunVerdict.time_limit:
            info.overrun = (
                f"the reference's own testbench run passed its budget of {run_limits.cpu_s:g} CPU s "
                f"(used {ran.cpu_s:.1f} s): {ran.detail}"
            )[:2000]
            _references.put(key, info)
            raise ReferenceTimeout(info.overrun)
        if ran is None or ran.verdict is not RunVerdict.ok:
            why = tool_message(ran if ran is not None else command(result, "tb_compile"))
            raise ReferenceFailure(f"the reference's testbench does not run against the reference: {why}")
        outcome = read_output(ran.stdout, secret)
        if outcome.errors is None or outcome.errors != 0 or outcome.duplicated:
            raise ReferenceFailure(
                f"the reference does not pass its own testbench (mismatches: {outcome.errors}, "
                f"samples: {outcome.samples})"
            )
        # A testbench whose own `TIMEOUT` comes before its stimulus ends (VerilogEval's lfsr32 and count_clock
        # stop at 100K cycles) still compares the first part: every candidate must stop at the same place.
        info.testbench_samples, info.testbench_timeout = outcome.samples, outcome.timeout
        info.testbench_cpu_s = ran.cpu_s
        info.fold_names = _fold_names(reference, fetched(result, "tb.vvp"))
    _references.put(key, info)
    return info


def _fold_names(reference: VerilogReference, compiled: str | None) -> frozenset[str] | None:
    """What a candidate must not name for its testbench verdict to fold the gate into the simulation's compile
    (fastgate.py), from the reference's own testbench run; None where this problem does not allow it."""
    assert reference.testbench is not None
    if compiled is None or not fastgate.problem_allows(
        reference.testbench, reference.reference_module, reference.top
    ):
        return None
    names = fastgate.outside_names(compiled)
    if names is None:
        return None
    declared = declared_modules(tokenize(reference.testbench + "\n" + reference.reference_module))
    return names | {fastgate.name_of(name) for name in declared} | {REF_TOP, HARNESS_TOP}


# -- the gate --------------------------------------------------------------------------------------------


@dataclass
class Gated:
    """A candidate that passed the gate: renamed source for simulation and its synthesis view for yosys."""

    source: str
    syn: str
    top: str
    sequential: bool
    yosys_error: str | None = None
    yosys_verdict: str = (
        "ok"  # how yosys' read of the candidate ended (time_limit: its budget, not its style)
    )
    undefined: list[str] = field(default_factory=list)  # where it can make x/z (formal.undefined_sources)
    unmodelled: list[str] = field(default_factory=list)  # those the sequential check's setundef leaves
    timing: list[str] = field(default_factory=list)  # delays/waits yosys ignores (source.timing_controls)


@dataclass
class Rejection:
    """Why a candidate did not pass the gate."""

    reason: str
    message: str
    extra: dict[str, Any] = field(default_factory=dict)


def port_differences(expected: list[Port], got: list[Port]) -> list[str]:
    """How the candidate's ports differ from the reference's (names, directions, widths)."""
    want = {p.name: p for p in expected}
    have = {p.name: p for p in got}
    out = [f"missing port {name}" for name in want if name not in have]
    out += [f"unexpected port {name}" for name in have if name not in want]
    for name in want.keys() & have.keys():
        a, b = want[name], have[name]
        if (a.direction, a.width) != (b.direction, b.width):
            out.append(f"port {name}: expected {a.direction} [{a.width}], got {b.direction} [{b.width}]")
    return sorted(out)


def gate(
    source: str,
    reference: VerilogReference,
    info: ReferenceInfo,
    options: VerilogOptions,
    with_yosys: bool = True,
) -> Gated | Rejection:
    """Preprocess, check, rename and elaborate the candidate alone (and read it with yosys when
    `with_yosys`), and compare its ports."""
    raw = raw_violations(source)
    if raw:
        return Rejection("forbidden_construct", raw[0], {"violations": raw[:20]})
    elaborate = [IVERILOG, "-g2012", "-o", "cand.vvp", "-s", reference.top, "cand.v"]
    elaborating = ("elaborate", elaborate, tool_limits(20.0, options, 1))
    read = None
    if fastgate.plain_source(source):
        # iverilog -E gives a plain source back unchanged: the checks on the host first, then one job that
        # elaborates it alone (and reads it with yosys)
        text = source
        checked = _checked(text, reference)
        if isinstance(checked, Rejection):
            return checked
        names, renamed, syn = checked
        commands, fetch = [elaborating], ["cand.vvp"]
        if with_yosys:
            commands.append(_yosys_read(reference, options))
            fetch.append("cand.json")
        first = read = run_job({"cand.v": source, "cand_syn.v": syn}, commands, fetch=tuple(fetch))
    else:
        # One job: preprocess, and elaborate the candidate as written (alone, so nothing can clash; compiling
        # runs none of its code): the forbidden-construct check on the preprocessed text comes first on the host.
        preprocess = [IVERILOG, "-g2012", "-E", "-o", "pre.v", "cand.v"]
        first = run_job(
            {"cand.v": source},
            [("preprocess", preprocess, tool_limits(10.0, options, 1)), elaborating],
            fetch=("pre.v", "cand.vvp"),
        )
        text = fetched(first, "pre.v")
        if text is None or first.commands[0].verdict is not RunVerdict.ok:
            return Rejection("compile_error", tool_message(first.commands[0]))
        checked = _checked(text, reference)
        if isinstance(checked, Rejection):
            return checked
        names, renamed, syn = checked
    compiled = fetched(first, "cand.vvp")
    elaborated = command(first, "elaborate")
    if elaborated is None or elaborated.verdict is not RunVerdict.ok or compiled is None:
        return Rejection("compile_error", tool_message(elaborated))
    differences = port_differences(info.ports, ports_from_vvp(compiled, reference.top))
    if differences:
        return Rejection("interface_mismatch", differences[0], {"port_differences": differences[:20]})
    top = CAND_PREFIX + reference.top
    if not with_yosys:  # only formal needs yosys' view of the candidate (whether it holds state)
        return Gated(renamed, syn, top, bool(info.sequential))
    timing = timing_controls(text)
    if read is None:
        read = run_job({"cand_syn.v": syn}, [_yosys_read(reference, options)], fetch=("cand.json",))
    # yosys reads less than iverilog (e.g. `q <= areset ? 0 : d` under an async-reset sensitivity list): the
    # candidate is still simulated, and the formal check says inconclusive with yosys' message.
    design = fetched(read, "cand.json")
    if design is None:
        ran = command(read, "yosys")
        why = tool_message(ran).replace(CAND_PREFIX, "")
        verdict = ran.verdict.value if ran is not None else "runtime_error"
        return Gated(renamed, syn, top, bool(info.sequential), why[-500:], verdict, timing=timing)
    parsed = json.loads(design)
    return Gated(
        renamed,
        syn,
        top,
        is_sequential(parsed),
        undefined=formal.undefined_sources(parsed, top),
        unmodelled=formal.undefined_sources(parsed, top, constants=False),
        timing=timing,
    )


def _checked(text: str, reference: VerilogReference) -> Rejection | tuple[list[str], str, str]:
    """The gate's checks on the preprocessed text (forbidden constructs, the top declared), and its modules,
    the renamed text and its synthesis view."""
    found = violations(text)
    if found:
        return Rejection("forbidden_construct", found[0], {"violations": found[:20]})
    names = declared_modules(tokenize(text))
    if reference.top not in names:
        return Rejection("interface_mismatch", f"no module named {reference.top}", {"modules": names[:20]})
    renamed = rename(text, names, CAND_PREFIX)
    return names, renamed, synthesis_view(renamed)


def _yosys_read(reference: VerilogReference, options: VerilogOptions) -> tuple[str, list[str], RunLimits]:
    """The gate's yosys read of the candidate's synthesis view (cand_syn.v), written as cand.json."""
    argv = yosys_json_argv("cand_syn.v", CAND_PREFIX + reference.top, "cand.json")
    return ("yosys", argv, tool_limits(20.0, options))


# -- checks ----------------------------------------------------------------------------------------------


@dataclass
class CheckResult:
    """One check's outcome: passed or the reason, and what to report."""

    name: str
    passed: bool
    reason: str | None = None
    errors: int | None = None
    samples: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    formal: str | None = None


def _sim_verdict(
    name: str,
    ran: CommandResult | None,
    compiled: CommandResult | None,
    secret: str,
    want: int,
    timeout_expected: bool = False,
) -> CheckResult:
    if compiled is None or compiled.verdict is not RunVerdict.ok:
        message = tool_message(compiled).replace(CAND_PREFIX, "")
        return CheckResult(name, False, "compile_error", details={"message": message})
    if ran is None:
        return CheckResult(name, False, "compile_error", details={"message": "the simulation did not run"})
    if ran.verdict in (RunVerdict.time_limit, RunVerdict.memory_limit, RunVerdict.output_limit):
        return CheckResult(name, False, ran.verdict.value, details={"message": ran.detail})
    outcome: SimOutcome = read_output(ran.stdout, secret)
    details: dict[str, Any] = {"samples_expected": want}
    if outcome.timeout and not timeout_expected:
        return CheckResult(
            name, False, "time_limit", details={**details, "message": "the testbench timed out"}
        )
    if outcome.errors is None or outcome.duplicated:
        details["message"] = "the testbench did not report a result (the simulation ended early)"
        return CheckResult(name, False, "mismatch", details=details)
    if outcome.samples != want:
        details["message"] = f"the testbench ran {outcome.samples} samples, the reference alone {want}"
        return CheckResult(name, False, "mismatch", outcome.errors, outcome.samples, details)
    first = first_mismatch(outcome.lines)
    if first is not None:
        details["first_mismatch"] = first
    hints = testbench_hints(outcome.lines)
    if hints:
        details["hints"] = hints
    passed = outcome.errors == 0
    return CheckResult(name, passed, None if passed else "mismatch", outcome.errors, outcome.samples, details)


def seed_for(reference: VerilogReference, options: VerilogOptions) -> int:
    """The random check's seed: the option, else a hash of reference and options (same request, same stimulus)."""
    if options.seed is not None:
        return options.seed
    payload = json.dumps(
        [reference.model_dump(mode="json"), options.model_dump(mode="json", exclude={"seed", "deadline_s"})],
        sort_keys=True,
    )
    return int(hashlib.sha256(payload.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


@dataclass
class SimulationJob:
    """The files and commands of one simulation job, and what the random testbench must report."""

    files: dict[str, str]
    commands: list
    plan: RandomPlan | None


def simulation_job(
    checks: list[str],
    reference: VerilogReference,
    info: ReferenceInfo,
    gated: Gated,
    options: VerilogOptions,
    secret: str,
) -> SimulationJob:
    """The job for the simulation checks asked for; the secret is only in vvp's argv, never in a file."""
    files = {"ref.v": reference.reference_module, "cand.v": gated.source, "harness.sv": HARNESS_MODULE}
    commands: list = []
    plan = None
    if "testbench" in checks and reference.testbench is not None:
        files["tb.sv"] = candidate_testbench(reference.testbench, reference.top, gated.top)
        roots = [*_testbench_roots(reference.testbench), HARNESS_TOP]
        # at least what the reference's own run needed: the same testbench, with the candidate in its place
        floor = CANDIDATE_SLACK * info.testbench_cpu_s + 1.0
        run = tool_limits(max(options.sim_cpu_s, floor), options, 8)
        tb_files = ["tb.sv", "ref.v", "cand.v", "harness.sv"]
        commands += sim_commands("tb", tb_files, roots, secret, tool_limits(20.0, options, 1), run)
    if "random" in checks:
        plan = plan_random(info.ports, gated.top, options.random_cycles, seed_for(reference, options))
        files["random_tb.sv"] = plan.testbench
        files["stim.hex"] = plan.stimulus
        roots = ["proctor_tb", "proctor_harness"]
        random_files = ["random_tb.sv", "ref.v", "cand.v", "harness.sv"]
        compile_limits, run = tool_limits(20.0, options, 1), tool_limits(options.sim_cpu_s, options, 8)
        commands += sim_commands("random", random_files, roots, secret, compile_limits, run)
    return SimulationJob(files, commands, plan)


def _testbench_check(result: Result, secret: str, info: ReferenceInfo) -> CheckResult:
    want = info.testbench_samples or 0
    ran, compiled = command(result, "tb_run"), command(result, "tb_compile")
    check = _sim_verdict("testbench", ran, compiled, secret, want, info.testbench_timeout)
    if info.testbench_timeout:
        check.details["note"] = "the testbench's own TIMEOUT ends the reference's run too: compared up to it"
    return check


def simulate(
    checks: list[str], reference: VerilogReference, info: ReferenceInfo, gated: Gated, options: VerilogOptions
) -> list[CheckResult]:
    """Run the simulation checks asked for (testbench, random) in one sandbox job."""
    secret = new_secret()
    job = simulation_job(checks, reference, info, gated, options, secret)
    files, commands, plan = job.files, job.commands, job.plan
    result = run_job(files, commands)
    out = []
    if "testbench" in checks and reference.testbench is not None:
        out.append(_testbench_check(result, secret, info))
    if plan is not None:
        check = _sim_verdict(
            "random", command(result, "random_run"), command(result, "random_compile"), secret, plan.samples
        )
        check.details.update(
            seed=seed_for(reference, options),
            cycles=options.random_cycles,
            clock=plan.clock,
            resets=plan.resets,
        )
        out.append(check)
    return out


def folded_testbench(
    source: str, reference: VerilogReference, info: ReferenceInfo, options: VerilogOptions
) -> Rejection | CheckResult | None:
    """The testbench verdict in one job, the gate folded into the simulation's compile (fastgate.py): a
    Rejection or the check's result, exactly what the gate and `simulate` would give; None where the fold
    cannot vouch for that (the caller then runs the gate and the simulation)."""
    if info.fold_names is None or not fastgate.plain_source(source):
        return None
    # iverilog -E gives a plain source back unchanged: the gate's checks on the preprocessed text, on it
    found = violations(source)
    if found:
        return Rejection("forbidden_construct", found[0], {"violations": found[:20]})
    names = declared_modules(tokenize(source))
    if reference.top not in names:
        return Rejection("interface_mismatch", f"no module named {reference.top}", {"modules": names[:20]})
    if fastgate.candidate_names(source) & info.fold_names:
        return None  # it names a scope of the testbench's: only its lone elaboration can tell
    top = CAND_PREFIX + reference.top
    gated = Gated(rename(source, names, CAND_PREFIX), "", top, bool(info.sequential))
    secret = new_secret()
    job = simulation_job(["testbench"], reference, info, gated, options, secret)
    # the compiled design's scopes and ports: what the gate's lone elaboration read
    result = run_job(job.files, job.commands, fetch=("tb.vvp",))
    compiled = command(result, "tb_compile")
    design = fetched(result, "tb.vvp")
    if compiled is None or compiled.verdict is not RunVerdict.ok or design is None:
        return None  # the gate says which: compile_error or interface_mismatch
    if not fastgate.check_compiled(design, top, CAND_PREFIX, info.ports):
        return None
    return _testbench_check(result, secret, info)


def prove(
    info: ReferenceInfo, gated: Gated, options: VerilogOptions, reference: VerilogReference | None = None
) -> CheckResult:
    """Formal equivalence of the candidate with the reference (formal.py). Without a proof or a
    counterexample (`inconclusive`) the check fails with the cause as its reason (formal_unreadable,
    formal_time_limit, ...) unless `formal_inconclusive` is "pass": a design the checker cannot prove is not
    proven equivalent. Where yosys/ABC fail on the candidate, they are first run on the reference against
    itself (once per problem): when that fails too the tools are broken (FormalMachineryFailure)."""
    outcome, sequential = _prove(info, gated, options)
    tools_failed = outcome.cause in ("unreadable", "unsupported") and not gated.timing
    if outcome.result == "inconclusive" and tools_failed and reference is not None:
        _formal_machinery_check(reference, info)
    details: dict[str, Any] = {"result": outcome.result, "method": outcome.method, "sequential": sequential}
    if sequential:
        details["depth"] = options.formal_depth
    if outcome.counterexample:
        details["counterexample"] = outcome.counterexample
    if outcome.note:
        details["note"] = outcome.note
    reason = None
    if outcome.result == "not_equivalent":
        reason = "not_equivalent"
        details["message"] = "formal equivalence found a counterexample" + (
            f" ({outcome.note})" if outcome.note else ""
        )
    elif outcome.result == "inconclusive":
        details["cause"] = outcome.cause or "undecided"
        details["inconclusive"] = options.formal_inconclusive
        if options.formal_inconclusive == "fail":
            reason = FORMAL_CAUSES[details["cause"]]
            details["message"] = (
                "formal equivalence could not decide, which is not a proof (formal_inconclusive=fail): "
                + (outcome.note or details["cause"])
            )[:2000]
    return CheckResult("formal", reason is None, reason, details=details, formal=outcome.result)


def _inconclusive(method: str, cause: str, note: str) -> formal.FormalOutcome:
    return formal.FormalOutcome("inconclusive", method, note=note, cause=cause)


def _cause_of(ran: CommandResult | None) -> str:
    """Why a formal tool run gave no answer: its budget (time or memory), else the tool failed on the miter."""
    if ran is not None and ran.verdict in (RunVerdict.time_limit, RunVerdict.memory_limit):
        return ran.verdict.value
    return "unsupported"


def _prove(info: ReferenceInfo, gated: Gated, options: VerilogOptions) -> tuple[formal.FormalOutcome, bool]:
    gold_top, timeout = GOLD_PREFIX + REF_TOP, max(1, int(options.formal_cpu_s) - 1)
    sequential = bool(info.sequential or gated.sequential)
    if gated.timing:
        note = (
            "the candidate uses timing controls yosys ignores (" + ", ".join(gated.timing[:3]) + "): a proof "
            "would be about another design than the one simulated"
        )
        return _inconclusive("none", "unsupported", note), sequential
    if gated.yosys_error is not None:
        cause = gated.yosys_verdict if gated.yosys_verdict in ("time_limit", "memory_limit") else "unreadable"
        note = "yosys could not read the candidate: " + gated.yosys_error
        return _inconclusive("none", cause, note), sequential
    assert info.gold is not None, "reference_info reads the reference with yosys when formal is asked"
    files = {"gold.v": info.gold, "gate.v": gated.syn}
    limits = tool_limits(options.formal_cpu_s, options, 8)
    if sequential:
        clock = find_clock([p for p in info.ports if p.direction == "input"])
        resets = find_resets([p for p in info.ports if p.direction == "input"]) if clock else []
        files["wrap.v"] = formal.miter_wrapper(info.ports, gold_top, gated.top, clock, resets)
        files["seq.ys"] = formal.sequential_script("gold.v", "gate.v", "wrap.v", CAND_PREFIX + "*")
        half = limits.model_copy(update={"cpu_s": max(1.0, options.formal_cpu_s / 2)})
        result = run_job(
            files,
            [
                ("synth", [YOSYS, "-q", "-s", "seq.ys"], half),
                ("pdr", [YOSYS_ABC, "-c", formal.pdr_command(max(1, timeout // 2))], half),
                (
                    "bmc",
                    [YOSYS_ABC, "-c", formal.bmc_command(options.formal_depth, max(1, timeout // 2))],
                    half,
                ),
            ],
        )
        outcome = _from_abc(result, clock)
        if outcome.result == "equivalent" and gated.unmodelled:
            # pdr proved it on a netlist where these x's got a chosen value; the simulation shows the x
            outcome = _inconclusive(
                outcome.method,
                "undecided",
                "proved only with the candidate's x/z given values: " + "; ".join(gated.unmodelled[:3]),
            )
        if outcome.result == "not_equivalent" and outcome.frame is not None:
            outputs = [p.name for p in info.ports if p.direction != "input"]
            files["trace.ys"] = formal.sequential_trace_script(
                "gold.v", "gate.v", "wrap.v", outputs, outcome.frame + 2, timeout
            )
            traced = command(run_job(files, [("trace", [YOSYS, "-s", "trace.ys"], limits)]), "trace")
            if (
                traced is not None
                and traced.verdict is RunVerdict.ok
                and formal.SAT_FAIL.search(traced.stdout)
            ):
                outcome.counterexample = formal.last_steps(formal.counterexample(traced.stdout))
        return outcome, sequential
    files["comb.ys"] = formal.combinational_script("gold.v", gold_top, "gate.v", gated.top)
    abc_limits = limits.model_copy(update={"cpu_s": max(1.0, options.formal_cpu_s / 2)})
    result = run_job(
        files,
        [
            ("synth", [YOSYS, "-q", "-s", "comb.ys"], abc_limits),
            ("abc", [YOSYS_ABC, "-c", formal.abc_command()], abc_limits),
        ],
    )
    abc = command(result, "abc")
    said = (
        formal.abc_result(abc.stdout) if abc is not None and abc.verdict is RunVerdict.ok else "inconclusive"
    )
    # ABC works on a netlist where every x of the candidate became whatever suited synthesis: with an
    # x source (an x/z constant, an undriven net...) its "equivalent" is confirmed by the x-aware SAT
    if said == "equivalent" and not gated.undefined:
        return formal.FormalOutcome("equivalent", "abc-cec"), sequential
    files["sat.ys"] = formal.combinational_sat_script("gold.v", gold_top, "gate.v", gated.top, timeout)
    again = run_job(files, [("sat", [YOSYS, "-s", "sat.ys"], limits)])
    outcome = _from_sat(command(again, "sat"), "sat")
    if outcome.result == "inconclusive" and outcome.cause == "unsupported":
        synth = command(result, "synth")
        if synth is not None and synth.verdict in (RunVerdict.time_limit, RunVerdict.memory_limit):
            outcome.cause = synth.verdict.value  # the candidate's synthesis ran out first
    outcome.note = (
        f"abc-cec: {said}"
        + ("; the candidate can make x: " + "; ".join(gated.undefined[:3]) if gated.undefined else "")
        + (f"; {outcome.note}" if outcome.note and outcome.result == "inconclusive" else "")
    )
    return outcome, sequential


def _formal_machinery_check(reference: VerilogReference, info: ReferenceInfo) -> None:
    """The formal flow on the reference against itself, once per problem (cached with the reference, not
    charged to the candidate): when it is not `equivalent` the tools are broken, and a candidate they fail
    on gets a verifier_error instead of a reward of 0."""
    if info.formal_self is None:
        names = declared_modules(tokenize(reference.reference_module))
        syn = rename(synthesis_view(reference.reference_module), names, CAND_PREFIX)
        itself = Gated("", syn, CAND_PREFIX + REF_TOP, bool(info.sequential))
        token = _budget.set(None)
        try:
            outcome, _ = _prove(info, itself, VerilogOptions())
        finally:
            _budget.reset(token)
        info.formal_self = (
            outcome.result if outcome.result == "equivalent" else (outcome.note or outcome.result)
        )
        _references.put(reference_key(reference), info)
    if info.formal_self != "equivalent":
        raise FormalMachineryFailure(
            f"yosys/ABC do not prove the reference equivalent to itself: {info.formal_self}"[:2000]
        )


def _from_abc(result: Result, clock: str | None) -> formal.FormalOutcome:
    synth = command(result, "synth")
    if synth is None or synth.verdict is not RunVerdict.ok:
        why = tool_message(synth)[-500:].replace(CAND_PREFIX, "")
        return _inconclusive("clk2fflogic+abc", _cause_of(synth), f"yosys failed: {why}")
    causes = {}
    for name, method in (("pdr", "clk2fflogic+abc-pdr"), ("bmc", "clk2fflogic+abc-bmc3")):
        ran = command(result, name)
        if ran is None or ran.verdict is not RunVerdict.ok:
            causes[name] = _cause_of(ran)
            continue
        said, frame = formal.sequential_result(ran.stdout)
        if said == "equivalent":
            return formal.FormalOutcome(said, method)
        if said == "not_equivalent" and frame is not None:
            note = f"counterexample at frame {frame}" + (f" (clock cycle {frame // 2})" if clock else "")
            return formal.FormalOutcome(said, method, note=note, frame=frame)
        causes[name] = "time_limit" if formal.ABC_TIMEOUT.search(ran.stdout) else "undecided"
    # bmc3 decides the cause when it ran: it stopped at its depth (undecided) or at its time; else pdr's
    if "memory_limit" in causes.values():
        cause = "memory_limit"
    elif causes.get("bmc") in ("time_limit", "undecided"):
        cause = causes["bmc"]
    else:
        cause = causes.get("pdr", "unsupported")
    notes = {
        "time_limit": "no proof and no counterexample within the formal CPU budget",
        "memory_limit": "the proof ran out of memory",
        "unsupported": "ABC failed on the miter",
        "undecided": f"no proof, and no counterexample within the depth (pdr: {causes.get('pdr')})",
    }
    return _inconclusive("clk2fflogic+abc", cause, notes[cause])


def _from_sat(ran: CommandResult | None, method: str) -> formal.FormalOutcome:
    if ran is None:
        return _inconclusive(method, "unsupported", "yosys did not run")
    if ran.verdict in (RunVerdict.time_limit, RunVerdict.memory_limit):
        return _inconclusive(method, ran.verdict.value, f"yosys stopped: {ran.detail}")
    log = ran.stdout
    result = formal.sat_result(log)
    note, cause = "", ""
    if ran.verdict is not RunVerdict.ok and result == "inconclusive":
        note = "yosys failed: " + tool_message(ran)[-500:].replace(CAND_PREFIX, "")
        cause = "unsupported"
    elif result == "inconclusive":
        cause = "time_limit" if formal.SAT_INTERRUPTED.search(log) else "undecided"
        note = "no counterexample and no proof within the time budget"
    cex = formal.counterexample(log) if result == "not_equivalent" else []
    return formal.FormalOutcome(result, method, cex, note, cause=cause)


# -- scoring ---------------------------------------------------------------------------------------------


def score_verilog(response: str, reference: VerilogReference, options: VerilogOptions) -> Verdict:
    """Extract, gate, then run the asked checks (within the request's CPU budget); reward 1 only when every
    one passes."""
    token = _budget.set(request_budget(options.deadline_s))
    try:
        return _score(response, reference, options)
    finally:
        _budget.reset(token)


def _score(response: str, reference: VerilogReference, options: VerilogOptions) -> Verdict:
    source, method = extract_verilog(response)
    checks = list(dict.fromkeys(options.checks or (["testbench"] if reference.testbench else ["random"])))
    details: dict[str, Any] = {"extraction": method, "checks": checks}
    components: dict[str, float] = {"compiles": 0.0}
    if "testbench" in checks and reference.testbench is None:
        return Verdict.failure(
            Status.verifier_error,
            "no_testbench",
            message="checks asks for testbench, but the reference has no testbench",
            **details,
        )
    if not source.strip():
        details["message"] = "no Verilog module in the response"
        return Verdict(
            reward=0.0, correct=False, reason="compile_error", components=components, details=details
        )
    try:
        info = reference_info(reference, options, checks)
        folded = folded_testbench(source, reference, info, options) if checks == ["testbench"] else None
        if isinstance(folded, CheckResult):
            components["compiles"] = 1.0
            return _verdict([folded], components, details)
        gated = folded or gate(source, reference, info, options, with_yosys="formal" in checks)
        if isinstance(gated, Rejection):
            details.update(message=gated.message, **gated.extra)
            # it compiled when it elaborated and only its ports differ
            components["compiles"] = 1.0 if "port_differences" in gated.extra else 0.0
            return Verdict(
                reward=0.0, correct=False, reason=gated.reason, components=components, details=details
            )
        components["compiles"] = 1.0
        if "formal" in checks:  # known only where yosys read the designs
            details["sequential"] = bool(info.sequential or gated.sequential)
        results = run_checks(checks, reference, info, gated, options)
    except OutOfTime as exc:
        details["message"] = f"{exc}: the candidate's tool runs took too long"
        return Verdict(reward=0.0, correct=False, reason="time_limit", components=components, details=details)
    except SandboxFailure as exc:
        return Verdict.failure(Status.sandbox_error, "sandbox_error", error=str(exc), **details)
    except ReferenceFailure as exc:
        return Verdict.failure(Status.verifier_error, "bad_reference", error=str(exc)[:2000], **details)
    except ReferenceTimeout as exc:
        return Verdict.failure(Status.timeout, "reference_time_limit", message=str(exc)[:2000], **details)
    except FormalMachineryFailure as exc:
        return Verdict.failure(Status.verifier_error, "formal_tool_error", error=str(exc)[:2000], **details)
    return _verdict(results, components, details)


def run_checks(
    checks: list[str], reference: VerilogReference, info: ReferenceInfo, gated: Gated, options: VerilogOptions
) -> list[CheckResult]:
    """Simulation checks first, then formal; stop at the first failure. An inconclusive formal check fails
    (formal_inconclusive="fail", the default); where it passes ("pass") and no simulation check was asked
    for, the random simulation runs as a fallback."""
    sims = [name for name in ("testbench", "random") if name in checks]
    results = simulate(sims, reference, info, gated, options) if sims else []
    if any(not r.passed for r in results) or "formal" not in checks:
        return results
    proof = prove(info, gated, options, reference)
    results.append(proof)
    if proof.formal == "inconclusive" and proof.passed and not sims:
        proof.details["fallback"] = "random"
        results += simulate(["random"], reference, info, gated, options)
    return results


def _verdict(results: list[CheckResult], components: dict[str, float], details: dict[str, Any]) -> Verdict:
    reason = None
    for result in results:
        if result.formal is not None:  # an inconclusive check that fails is worth 0, like a counterexample
            components["formal"] = FORMAL_COMPONENT[result.formal] if result.passed else 0.0
        else:
            components[result.name] = 1.0 if result.passed else 0.0
        details[result.name] = result.details
        if result.samples and "mismatch_fraction" not in components and result.errors is not None:
            components["mismatch_fraction"] = round(result.errors / result.samples, 6)
        if not result.passed and reason is None:
            reason = result.reason
            details["message"] = result.details.get("message", "")
    correct = reason is None
    return Verdict(
        reward=1.0 if correct else 0.0, correct=correct, reason=reason, components=components, details=details
    )


# -- registration ----------------------------------------------------------------------------------------

_ADDER_REF = """module RefModule(input [7:0] a, input [7:0] b, output [8:0] sum);
  assign sum = a + b;
endmodule
"""
_ADDER = {"reference_module": _ADDER_REF}
_ADDER_GOOD = """module TopModule(input [7:0] a, input [7:0] b, output reg [8:0] sum);
  always @(*) sum = {1'b0, a} + {1'b0, b};
endmodule
"""
_COUNTER_REF = """module RefModule(input clk, input areset, input en, output reg [3:0] q);
  always @(posedge clk or posedge areset)
    if (areset) q <= 4'd0;
    else if (en) q <= q + 4'd1;
endmodule
"""
_COUNTER_TB = """`timescale 1 ps/1 ps
module stimulus_gen(input clk, output reg areset, output reg en);
  initial begin
    areset = 1; en = 0;
    @(negedge clk) areset = 0;
    repeat (40) @(negedge clk) en = $random;
    @(negedge clk) areset = 1;
    @(negedge clk) areset = 0;
    repeat (20) @(negedge clk) en = $random;
    #1 $finish;
  end
endmodule
module tb();
  reg clk = 0;
  initial forever #5 clk = ~clk;
  wire areset, en;
  wire [3:0] q_ref, q_dut;
  integer errors = 0, clocks = 0;
  stimulus_gen stim1(.clk(clk), .areset(areset), .en(en));
  RefModule good1(.clk(clk), .areset(areset), .en(en), .q(q_ref));
  TopModule top_module1(.clk(clk), .areset(areset), .en(en), .q(q_dut));
  always @(posedge clk, negedge clk) begin
    clocks = clocks + 1;
    if (q_ref !== (q_ref ^ q_dut ^ q_ref)) errors = errors + 1;
  end
  final $display("Mismatches: %1d in %1d samples", errors, clocks);
endmodule
"""
_COUNTER = {"reference_module": _COUNTER_REF, "testbench": _COUNTER_TB}


def _fence(code: str) -> str:
    return f"Here is the module.\n\n```verilog\n{code}```\n"


def _counter(body: str, extra: str = "") -> str:
    return (
        "module TopModule(input clk, input areset, input en, output reg [3:0] q);\n"
        f"{extra}  always @(posedge clk or posedge areset)\n    if (areset) q <= 0;\n    else {body}\nendmodule\n"
    )


_GOOD_COUNTER = _counter("q <= q + en;")
_EXAMPLES = (
    Example(_fence(_ADDER_GOOD), _ADDER, 1.0, note="combinational, random lockstep check"),
    Example(_fence(_ADDER_GOOD), _ADDER, 1.0, {"checks": ["random", "formal"]}, note="random and formal"),
    Example(_fence(_GOOD_COUNTER), _COUNTER, 1.0, note="sequential, the reference's testbench"),
    Example(
        _fence(_GOOD_COUNTER), _COUNTER, 1.0, {"checks": ["testbench", "formal"]}, note="testbench and formal"
    ),
    Example("I could not write it.", _ADDER, 0.0, note="no module"),
    Example(_fence(_ADDER_GOOD.replace("+ {1'b0, b}", "- {1'b0, b}")), _ADDER, 0.0, note="wrong design"),
    Example(
        _fence(_ADDER_GOOD.replace("{1'b0, b};", "{1'b0, b} ^ (a == 8'h5a && b == 8'hc3);")),
        _ADDER,
        0.0,
        {"checks": ["random", "formal"]},
        note="trap: one wrong input pair that random stimulus misses, formal finds",
    ),
    Example(_fence(_counter("q <= q;", "  initial #100 $finish;\n")), _COUNTER, 0.0, note="initial $finish"),
    Example(
        _fence(_counter("q <= q;", '  initial #1000 $display("Mismatches: 0 in 122 samples");\n')),
        _COUNTER,
        0.0,
        note="prints a fake result line",
    ),
    Example(
        _fence(_counter("q <= q;", "  initial force tb.errors = 0;\n")), _COUNTER, 0.0, note="force tb.errors"
    ),
    Example(
        _fence(_counter("q <= tb.good1.q;")), _COUNTER, 0.0, note="reads the reference through tb.good1.q"
    ),
    Example(
        _fence(_counter("q <= q + en;").replace("posedge clk or posedge areset", "posedge clk")),
        _COUNTER,
        0.0,
        {"checks": ["formal"]},
        note="synchronous reset where an asynchronous one is due (clk2fflogic)",
    ),
    Example(
        _fence(_counter("q <= q + en;").replace("input en", "input [1:0] en")),
        _COUNTER,
        0.0,
        note="wrong ports",
    ),
)

SPEC = register_verifier(
    VerifierSpec(
        name="verilog",
        version=VERSION,
        score=score_verilog,
        reference=VerilogReference,
        options=VerilogOptions,
        description="A Verilog module judged against a reference module (VerilogEval conventions): the "
        "reference's testbench with a harness-owned, secret-tagged verdict, a randomized lockstep testbench, "
        "and formal equivalence with yosys/ABC; forbidden constructs and port mismatches are rejected first.",
        examples=_EXAMPLES,
        execution="pool",
        deadline_s=DEADLINE_S,
    )
)
