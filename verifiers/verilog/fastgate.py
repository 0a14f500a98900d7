"""The one-job testbench verdict: the gate's sandboxed preprocessing and lone elaboration folded into the
simulation's own compile, where that keeps exactly the gate's checks; anywhere it might not, the full gate.

The gate (verifier.gate) preprocesses the candidate (iverilog -E) so that a macro cannot hide a forbidden
construct, then elaborates it alone so that it cannot lean on anything outside itself, and reads its ports.
For most candidates neither needs a run of its own:

- preprocessing: a candidate whose only backticks open a `timescale or `default_nettype line (and that holds
  nothing but printable ASCII, tabs and newlines) comes out of iverilog -E unchanged, so the forbidden-
  construct check reads the text as written (`plain_source`);
- elaborating alone: compiled with the testbench, a candidate could use the testbench's (or the reference's)
  modules, its tasks, functions and named blocks (Verilog resolves those names upwards through the instance
  tree), and anything declared at file scope. So the fold is used only where the testbench and the reference
  declare nothing outside their modules and do not override the top's parameters (`problem_allows`, once per
  problem), the candidate names none of the scopes the reference's own testbench run elaborated
  (`outside_names`: every module, instance, task, function and block of it), and in the compiled design
  every module under the candidate's instances is one of the candidate's own (`check_compiled`);
- ports: read from the compiled design's instances of the candidate's top; they must equal the reference's.

When any of this does not hold (a compile error included), the verdict comes from the full gate and its own
simulation job, so the result is the gate's in every case; the fold only skips runs whose outcome it knows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from proctor.verifiers.verilog.harness import Port
from proctor.verifiers.verilog.source import code_tokens, tokenize

PLAIN = re.compile(r"[\t\n\x20-\x7e]*")
SIMPLE_DIRECTIVE = re.compile(r"^[ \t]*`(?:timescale|default_nettype)\b[^`\n]*$")
SCOPE = re.compile(
    r'^(S_0x[0-9a-f]+) \.scope ([A-Za-z0-9_.$]+), "((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)"'
    r"[^;]*?(?:, (S_0x[0-9a-f]+))?;$"
)
PORT = re.compile(r'^\s*\.port_info \d+ /(INPUT|OUTPUT|INOUT) (\d+) "((?:[^"\\]|\\.)*)";')
# What may stand outside the modules of a testbench or reference on the fold's path: these directives.
TOP_LEVEL_DIRECTIVES = frozenset(
    {"`timescale", "`default_nettype", "`resetall", "`celldefine", "`endcelldefine"}
)


def plain_source(source: str) -> bool:
    """Whether iverilog -E gives `source` back unchanged: printable ASCII, tabs and newlines only, and every
    backtick opening a `timescale or `default_nettype line (no macro, no conditional, no include)."""
    if PLAIN.fullmatch(source) is None:
        return False
    return all(SIMPLE_DIRECTIVE.match(line) for line in source.split("\n") if "`" in line)


def problem_allows(testbench: str, reference_module: str, top: str) -> bool:
    """Whether the fold may be used on this problem: the testbench and the reference hold nothing but modules
    at file scope (and a few directives), and the testbench does not set the top's parameters (its ports then
    are those of the top alone)."""
    for text in (testbench, reference_module):
        if not _only_modules(text):
            return False
    code = code_tokens(tokenize(testbench))
    for i, token in enumerate(code):
        if token.kind == "ident" and token.text == "defparam":
            return False
        named = token.kind in ("ident", "escaped") and name_of(token.text) == top
        if named and i + 1 < len(code) and code[i + 1].text == "#":
            return False
    return True


def _only_modules(text: str) -> bool:
    code = code_tokens(tokenize(text))
    depth = 0
    line_of_directive = -1
    for token in code:
        if token.kind == "ident" and token.text in ("module", "macromodule"):
            depth += 1
            continue
        if token.kind == "ident" and token.text == "endmodule":
            depth -= 1
            if depth < 0:
                return False
            continue
        if token.kind == "directive" and token.text not in TOP_LEVEL_DIRECTIVES:
            return False  # a macro or `begin_keywords inside a module still carries into the next files
        if depth > 0:
            continue
        line = text.count("\n", 0, token.start)
        if token.kind == "directive" and token.text in TOP_LEVEL_DIRECTIVES:
            line_of_directive = line
            continue
        if line != line_of_directive:  # anything else at file scope, outside a directive's own line
            return False
    return depth == 0


def name_of(text: str) -> str:
    """An identifier's name: an escaped identifier names what follows its backslash."""
    return text[1:] if text.startswith("\\") else text


def candidate_names(source: str) -> set[str]:
    """Every identifier the candidate writes (escaped ones by their names)."""
    return {name_of(t.text) for t in code_tokens(tokenize(source)) if t.kind in ("ident", "escaped")}


@dataclass
class Scope:
    """One `.scope` of a compiled vvp file: its kind (module, begin, function...), names and parent."""

    label: str
    kind: str
    name: str
    type: str
    parent: str | None
    ports: list[Port] = field(default_factory=list)


def scopes(compiled: str) -> list[Scope] | None:
    """The scopes of a compiled vvp file with their ports, or None when a scope line does not parse."""
    out: list[Scope] = []
    current: Scope | None = None
    for line in compiled.splitlines():
        if line.startswith("S_"):
            found = SCOPE.match(line)
            if found is None:
                return None
            label, kind, name, type_, parent = found.groups()
            current = Scope(label, kind, name, type_, parent)
            out.append(current)
            continue
        port = PORT.match(line) if current is not None else None
        if port is not None and current is not None:
            current.ports.append(Port(port.group(3), port.group(1).lower(), int(port.group(2))))
    return out


def outside_names(compiled: str) -> frozenset[str] | None:
    """The names of every scope (module types, instances, tasks, functions, blocks) of a compiled design:
    what a candidate compiled into it must not name. None when one does not parse or holds an escape."""
    found = scopes(compiled)
    if found is None:
        return None
    names = {text for scope in found for text in (scope.name, scope.type)}
    if any("\\" in name for name in names):
        return None
    return frozenset(names)


def check_compiled(compiled: str, top: str, prefix: str, expected: list[Port]) -> bool:
    """Whether the compiled design holds the candidate's `top` (at least one instance), every instance with
    exactly the `expected` ports, and under them only modules the candidate declared (named `prefix`...)."""
    found = scopes(compiled)
    if found is None:
        return False
    by_label = {scope.label: scope for scope in found}
    tops = [scope for scope in found if scope.kind == "module" and scope.type == top]
    if not tops:
        return False
    want = sorted((p.name, p.direction, p.width) for p in expected)
    for scope in tops:
        if sorted((p.name, p.direction, p.width) for p in scope.ports) != want:
            return False
    top_labels = {scope.label for scope in tops}
    for scope in found:
        if scope.kind != "module" or scope.type.startswith(prefix):
            continue
        seen: set[str] = set()
        parent = scope.parent
        while parent is not None and parent not in seen:  # a module of someone else's under the candidate
            if parent in top_labels:
                return False
            seen.add(parent)
            parent = by_label[parent].parent if parent in by_label else None
    return True
