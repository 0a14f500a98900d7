"""Verilog source handling on tokens: extract the candidate from a response, gate it, rename its modules.

Everything here works on a token stream with comments and strings recognised as tokens, never on substrings,
so `// force tb.x = 1` in a comment or `"$fopen"` in a string is not a construct, while `force` spread over
lines or hidden behind whitespace still is. The gate runs on the candidate *after* preprocessing (iverilog -E
in the sandbox), so a macro cannot assemble a forbidden construct that the raw text does not show.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

from proctor.verifiers.reading import after_think, fenced_blocks

VERILOG_TAGS = frozenset({"verilog", "systemverilog", "sv", "v", "vlog"})
MODULE_WORD = re.compile(r"\b(?:module|macromodule|endmodule)\b")

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>"(?:[^"\\\n]|\\.)*"?)
  | (?P<number>(?:\d[\d_]*\s*)?'[sS]?[bBoOdDhH]\s*[0-9a-fA-F_xXzZ?]+|'[01xXzZ]
       |\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d+)?)
  | (?P<system>\$[A-Za-z0-9_$]+)
  | (?P<directive>`[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<escaped>\\\S+)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<op>::|\.\*|``|`"|.)
    """,
    re.VERBOSE | re.DOTALL,
)

# System tasks and functions a design may use: printing (ignored by the harness), time, conversions, math
# and bit queries. Everything else (file I/O, $finish/$stop, plusargs, $system, dumping, $readmem...) is out,
# and so are $random/$urandom: iverilog's unseeded $random is one state shared with the testbench's stimulus,
# so a candidate drawing from it changes which inputs it is tested on.
ALLOWED_SYSTEM = frozenset(
    {
        "$display", "$displayb", "$displayh", "$displayo", "$write", "$writeb", "$writeh", "$writeo",
        "$strobe", "$monitor", "$info", "$warning", "$error",
        "$time", "$stime", "$realtime", "$signed", "$unsigned", "$clog2", "$bits", "$size",
        "$left", "$right", "$low", "$high", "$increment", "$dimensions", "$unpacked_dimensions",
        "$countones", "$onehot", "$onehot0", "$isunknown", "$countbits",
        "$itor", "$rtoi", "$bitstoreal", "$realtobits", "$shortrealtobits", "$bitstoshortreal",
        "$ln", "$log10", "$exp", "$sqrt", "$pow", "$floor", "$ceil", "$sin", "$cos", "$tan",
    }
)  # fmt: skip
# Display-like tasks are removed from the view yosys reads (it rejects many format strings) and from nothing
# else: the simulation keeps them, and the harness ignores what they print.
DISPLAY_TASKS = frozenset(
    {
        "$display", "$displayb", "$displayh", "$displayo", "$write", "$writeb", "$writeh", "$writeo",
        "$strobe", "$monitor", "$info", "$warning", "$error",
    }
)  # fmt: skip
FORBIDDEN_KEYWORDS = frozenset(
    {
        "force", "release", "bind", "interface", "program", "class", "package", "import", "export",
        "config", "library", "extern", "chandle", "checker", "$root", "$unit",
    }
)  # fmt: skip
# Directives that survive preprocessing legitimately (iverilog -E keeps `timescale and writes `line).
ALLOWED_DIRECTIVES = frozenset(
    {"`timescale", "`default_nettype", "`line", "`celldefine", "`endcelldefine", "`resetall"}
)
DECLARERS = frozenset({"module", "macromodule", "primitive"})
LIFETIMES = frozenset({"automatic", "static"})


@dataclass(frozen=True)
class Token:
    """One lexical token: its kind, its text and where it starts in the source."""

    kind: str
    text: str
    start: int


# A problem's testbench and reference are tokenized by every request (validation, the harness, renaming):
# texts up to this size are kept, the last few of them, so a training run tokenizes each about once.
CACHED_TEXT = 32 * 1024


def tokenize(source: str) -> list[Token]:
    """Every token of `source`, whitespace and comments included, in order (their texts join to the source)."""
    if len(source) <= CACHED_TEXT:
        return list(_tokenize_cached(source))
    return _tokenize(source)


@functools.lru_cache(maxsize=32)
def _tokenize_cached(source: str) -> tuple[Token, ...]:
    return tuple(_tokenize(source))


def _tokenize(source: str) -> list[Token]:
    tokens = []
    for match in _TOKEN.finditer(source):
        kind = match.lastgroup or "op"
        tokens.append(Token(kind, match.group(), match.start()))
    return tokens


def code_tokens(tokens: Iterable[Token]) -> list[Token]:
    """The tokens that are code: no whitespace, no comments."""
    return [t for t in tokens if t.kind not in ("ws", "comment")]


def extract_verilog(response: str) -> tuple[str, str]:
    """The candidate's source and how it was found: the last verilog/systemverilog fenced block, else the
    last untagged block holding a module, else every module...endmodule span of the text.

    Only what follows the last </think> counts; an unterminated <think> is no answer ("none")."""
    visible = after_think(response)
    if visible is None:
        return "", "none"
    blocks = fenced_blocks(visible)
    tagged = [block.code for block in blocks if block.info in VERILOG_TAGS]
    if tagged:
        return tagged[-1], "fenced_verilog"
    plain = [block.code for block in blocks if not block.info and module_spans(block.code)]
    if plain:
        return plain[-1], "fenced_untagged"
    spans = module_spans(visible)
    if spans:
        return "\n\n".join(spans) + "\n", "modules"
    return "", "none"


def module_spans(text: str) -> list[str]:
    """Every `module ... endmodule` span of `text` (a linear scan: a lazy regex is quadratic on hostile text)."""
    spans, start = [], None
    for word in MODULE_WORD.finditer(text):
        if word.group() != "endmodule":
            start = word.start() if start is None else start
        elif start is not None:
            spans.append(text[start : word.end()])
            start = None
    return spans


def declared_modules(tokens: Iterable[Token]) -> list[str]:
    """Names declared by `module`, `macromodule` or `primitive`, in order."""
    code = code_tokens(tokens)
    names = []
    for i, token in enumerate(code):
        if token.kind == "ident" and token.text in DECLARERS:
            j = i + 1
            while j < len(code) and code[j].text in LIFETIMES:
                j += 1
            if j < len(code) and code[j].kind in ("ident", "escaped"):
                names.append(code[j].text)
    return names


def raw_violations(source: str) -> list[str]:
    """Constructs rejected before preprocessing: `include (a file from outside the candidate)."""
    return [
        f"`{t.text[1:]} is not allowed"
        for t in code_tokens(tokenize(source))
        if t.kind == "directive" and t.text == "`include"
    ]


def violations(source: str) -> list[str]:
    """Forbidden constructs in preprocessed candidate source, each as a short message (empty: clean)."""
    code = code_tokens(tokenize(source))
    members = struct_variables(code)
    modules = module_indexes(code)
    found: list[str] = []
    for i, token in enumerate(code):
        text = token.text
        if token.kind == "ident" and text in FORBIDDEN_KEYWORDS:
            found.append(f"'{text}' is not allowed")
        elif token.kind == "system":
            if text in FORBIDDEN_KEYWORDS:
                found.append(f"'{text}' is not allowed")
            elif text not in ALLOWED_SYSTEM:
                found.append(f"system task or function '{text}' is not allowed")
        elif token.kind == "directive" and text not in ALLOWED_DIRECTIVES:
            found.append(f"directive '{text}' is not allowed")
        elif token.kind == "op" and text in ("``", '`"'):
            found.append(f"macro operator '{text}' is not allowed")
        elif token.kind == "op" and text == "." and 0 < i < len(code) - 1:
            before, after = code[i - 1], code[i + 1]
            dotted = (before.kind in ("ident", "escaped") or before.text == "]") and after.kind in NAMES
            if dotted and _chain_head(code, i, modules) not in members:
                found.append(f"hierarchical reference '{before.text}.{after.text}' is not allowed")
    return list(dict.fromkeys(found))


NAMES = ("ident", "escaped")
# Keywords that open a nested scope; a struct variable declared inside one is not a module-level name, and a
# dotted name built on it could resolve upwards, out of the candidate.
OPENERS = {
    "begin": "end",
    "fork": "join",
    "generate": "endgenerate",
    "function": "endfunction",
    "task": "endtask",
}
MAX_DECLARATION = 256
CLOSERS = frozenset({"end", "join", "join_any", "join_none", "endgenerate", "endfunction", "endtask"})


def _chain_head(code: list[Token], dot: int, modules: list[int]) -> tuple[int, str] | None:
    """The (module index, name) a dotted chain ending at `code[dot]` starts with; None when it starts with `]`."""
    j = dot - 1
    while j >= 2 and code[j - 1].text == "." and code[j - 2].kind in NAMES:
        j -= 2
    if code[j].kind not in NAMES:
        return None
    return (modules[j], code[j].text)


def module_indexes(code: list[Token]) -> list[int]:
    """For each token, which module it lies in (counted from 1; 0 outside any module)."""
    out, count, inside = [], 0, False
    for token in code:
        if token.kind == "ident" and token.text in ("module", "macromodule"):
            count, inside = count + 1, True
        out.append(count if inside else 0)
        if token.kind == "ident" and token.text == "endmodule":
            inside = False
    return out


def struct_variables(code: list[Token]) -> set[tuple[int, str]]:
    """(module index, name) of variables declared at module level with a struct or union type (a typedef'd one
    or an inline `struct ... {}`): `name.field` on them is a member select, not a hierarchical reference."""
    typedefs: set[str] = set()
    found: set[tuple[int, str]] = set()
    module, depth = 0, 0
    braces: list[bool] = []  # one entry per open `{`: whether it opens a struct/union body
    i = 0
    while i < len(code):
        text = code[i].text
        if code[i].kind == "ident" and text in ("module", "macromodule"):
            module, depth = module + 1, 0
        elif code[i].kind == "ident" and text in OPENERS:
            depth += 1
        elif code[i].kind == "ident" and text in CLOSERS:
            depth = max(0, depth - 1)
        elif text == "{":
            braces.append(_opens_struct_body(code, i))
        elif text == "}":
            was_struct = braces.pop() if braces else False
            if was_struct and not braces and depth == 0:
                names, _ = _declared_after(code, i + 1)
                found.update((module, name) for name in names)
        elif code[i].kind == "ident" and text == "typedef":
            end = _statement_end(code, i)
            if end > i and code[end - 1].kind in NAMES:
                typedefs.add(code[end - 1].text)
            i = end
            continue
        elif code[i].kind in NAMES and text in typedefs and depth == 0 and not braces:
            names, end = _declared_after(code, i + 1)
            found.update((module, name) for name in names)
            i = max(end, i + 1)  # a declaration holds no scope keywords; skipping it keeps this linear
            continue
        i += 1
    return found


def _opens_struct_body(code: list[Token], brace: int) -> bool:
    """Whether the `{` at `brace` opens a `struct`/`union` body (not a concatenation)."""
    k = brace - 1
    while k >= 0 and code[k].text in ("packed", "signed", "unsigned", "tagged"):
        k -= 1
    return k >= 0 and code[k].text in ("struct", "union")


def _declared_after(code: list[Token], start: int) -> tuple[list[str], int]:
    """Names declared by `[dims] a [dims], b ... ;` starting at `start`, and where the declaration ends."""
    names, j, depth = [], start, 0
    end = min(len(code), start + MAX_DECLARATION)  # declarations are short; bounds the work on hostile text
    while j < end and not (depth == 0 and code[j].text in (";", ")")):
        text = code[j].text
        depth += text in ("[", "(", "{")
        depth -= text in ("]", ")", "}")
        if depth == 0 and code[j].kind in NAMES and (j == start or code[j - 1].text in (",", "]")):
            names.append(text)
        if depth == 0 and text == "=":  # an initializer: skip to the next declarator
            while j < end and not (depth == 0 and code[j].text in (",", ";")):
                depth += code[j].text in ("[", "(", "{")
                depth -= code[j].text in ("]", ")", "}")
                j += 1
            continue
        j += 1
    return names, j


def _statement_end(code: list[Token], start: int) -> int:
    """The index of the `;` ending the statement at `start`, outside braces."""
    depth = 0
    for j in range(start, len(code)):
        depth += code[j].text == "{"
        depth -= code[j].text == "}"
        if depth == 0 and code[j].text == ";":
            return j
    return len(code)


def rename(source: str, names: Iterable[str], prefix: str, extra: dict[str, str] | None = None) -> str:
    """`source` with every identifier in `names` prefixed (and those in `extra` mapped), except right after
    a `.`, where an identifier names a port or member rather than a module."""
    mapping = {name: prefix + name for name in names}
    mapping.update(extra or {})
    out: list[str] = []
    previous = ""
    for token in tokenize(source):
        text = token.text
        if token.kind in ("ident", "escaped") and text in mapping and previous != ".":
            new = mapping[text]
            text = "\\" + new.lstrip("\\") + " " if token.kind == "escaped" else new
        out.append(text)
        if token.kind not in ("ws", "comment"):
            previous = token.text
    return "".join(out)


def synthesis_view(source: str) -> str:
    """`source` without display-like task calls (left as the null statement `;`), for yosys, which rejects
    format strings the simulator accepts."""
    tokens = tokenize(source)
    out: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.kind == "system" and token.text in DISPLAY_TASKS:
            j = i + 1
            while j < len(tokens) and tokens[j].kind in ("ws", "comment"):
                j += 1
            if j < len(tokens) and tokens[j].text == "(":
                depth = 0
                while j < len(tokens):
                    depth += tokens[j].text == "("
                    depth -= tokens[j].text == ")"
                    j += 1
                    if depth == 0:
                        break
            i = j
            continue
        out.append(token.text)
        i += 1
    return "".join(out)


def display_strings(source: str, tag: str) -> tuple[str, int]:
    """`source` with every `$display("...", ...)` whose format is a literal turned into
    `$display("%0s|...", tag, ...)`, and how many were turned: the harness authenticates the testbench's lines
    by the value of `tag` (an expression holding the run's secret)."""
    tokens = tokenize(source)
    code_index = [i for i, t in enumerate(tokens) if t.kind not in ("ws", "comment")]
    replace: dict[int, str] = {}
    for n, i in enumerate(code_index[:-2]):
        if tokens[i].kind == "system" and tokens[i].text == "$display":
            paren, literal = tokens[code_index[n + 1]], tokens[code_index[n + 2]]
            if paren.text == "(" and literal.kind == "string":
                replace[code_index[n + 2]] = f'"%0s|{literal.text[1:-1]}", {tag}'
    text = "".join(replace.get(i, t.text) for i, t in enumerate(tokens))
    return text, len(replace)


# Keywords after which `#(` is a delay, not a parameter list (`module m #(`, `sub #(.W(8)) u` follow a name).
DELAY_AFTER = frozenset(
    {
        "initial", "always", "begin", "else", "fork", "forever", "assign", "final", "do", "wire", "tri",
        "and", "or", "not", "nand", "nor", "xor", "xnor", "buf", "bufif0", "bufif1", "notif0", "notif1",
    }
)  # fmt: skip
OPENS = frozenset({"begin", "fork"})
CLOSES = frozenset({"end", "join", "join_any", "join_none"})


def timing_controls(source: str) -> list[str]:
    """Timing controls yosys ignores where the simulation obeys them: delays (`#5`, `<= #1`), `wait`, and an
    event control (`@`) inside an `initial` block. yosys reads `initial #100 armed = 1;` as a plain initial
    value, so a formal proof would be about another design than the one simulated."""
    code = code_tokens(tokenize(source))
    found: list[str] = []
    for i, token in enumerate(code):
        if token.text == "#":
            before = code[i - 1] if i else None
            after = code[i + 1] if i + 1 < len(code) else None
            parameters = (
                before is not None
                and before.kind in ("ident", "escaped")
                and before.text not in DELAY_AFTER
                and after is not None
                and after.text == "("
            )
            if not parameters:
                found.append("a delay (#)")
        elif token.kind == "ident" and token.text == "wait":
            found.append("'wait'")
        elif (
            token.kind == "ident"
            and token.text == "initial"
            and any(t.text == "@" for t in code[i + 1 : _block_end(code, i + 1) + 1])
        ):
            found.append("an event control (@) in an initial block")
    return list(dict.fromkeys(found))


def _block_end(code: list[Token], start: int) -> int:
    """The index of the last token of the statement at `start` (a begin/fork block, or up to its `;`)."""
    if start < len(code) and code[start].text in OPENS:
        depth = 0
        for j in range(start, len(code)):
            depth += code[j].text in OPENS
            depth -= code[j].text in CLOSES
            if depth == 0:
                return j
        return len(code)
    return _statement_end(code, start)
