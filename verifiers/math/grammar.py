"""Our own grammar for final answers: LaTeX, plain text and unicode math -> a small syntax tree.

Nothing here evaluates text: a precompiled tokenizer (one regex of alternatives, none of which can
backtrack more than a few characters) feeds a Pratt parser. Before the recursive descent, guards.check_text
bounds length and nesting with a linear scan, and the parser also counts its own recursion, so a 3,000-deep
nesting or a 3,000-storey tower is refused in microseconds instead of overflowing the stack.

The tree (`Node`) keeps what the writer wrote: decimal literals keep their digits (so tolerances can scale
with them), fractions remember whether they were \\frac or a/b (for the `form` checks), and ambiguous
notation is kept ambiguous where only the gold can decide: `(1, 2)` is a "bracket" node that values.py reads
as a tuple or an open interval, `f(x)` is a "call" that is a product in an expression and a label on the
left of an equation, and `a:b` is a ratio that values.py reads as a time of day when it looks like one.

Conventions chosen where notation is ambiguous (each has a test):
- `1,000,000`, `1{,}000`, `1\\,000` and `1 000` are one number (groups of exactly three digits after a
  first group of one to three, not starting with 0; a space-separated group is not followed by `/`, so
  `3 100/200` stays a mixed number); inside brackets `(1,100)` is a pair, not 1100. A decimal comma
  (`1000,99`, `0,111`) is read in values.py, where the other side decides.
- `1.2e-4` is 1.2×10⁻⁴ (never 1.2·e−4); `2e` is 2·e.
- `\\frac12` takes one digit per argument (TeX's rule); `x^23` is x²³ (what plain text means).
- `3\\frac{1}{2}` and `3 1/2` are mixed numbers (3½); `2 3` (two numbers side by side) is an error, not 6.
- `0.\\overline{3}`, `0.(3)`, `0.\\dot{3}` and `0.333...` are repeating decimals.
- `1010_2` is a number written in base 2.
- `2^3^4` is 2^(3^4), as in plain text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from proctor.verifiers.math.guards import (
    MAX_ITEMS,
    MAX_NODES,
    MAX_PARSE_DEPTH,
    MAX_TOKENS,
    MAX_TREE_DEPTH,
    ParseError,
    TooComplex,
    check_text,
)

# -- the tree ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Number:
    """A numeric literal as written: its exact value and the precision its digits state."""

    value: Fraction
    text: str
    kind: str  # "int" | "dec" | "sci" | "rep" (repeating) | "base"
    places: int | None = None  # decimal places stated (None: exact, e.g. an integer or repeating decimal)
    sig: int | None = None  # significant digits stated
    base: int | None = None


class Node:
    """One node of the syntax tree: an operator name, its children and an operator-specific value."""

    __slots__ = ("op", "args", "value")

    def __init__(self, op: str, args: tuple[Node, ...] = (), value: object = None):
        self.op = op
        self.args = args
        self.value = value

    def __repr__(self) -> str:
        return to_text(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def key(self) -> tuple:
        """A hashable structural key (the same for the same tree)."""
        value = self.value
        if isinstance(value, Number):
            value = value.value
        return (self.op, value, tuple(arg.key() for arg in self.args))

    def walk(self):
        """Every node of the tree, this one first (iterative, so deep trees cannot overflow the stack)."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.args))


# -- normalisation before tokenizing ---------------------------------------------------------------------------

_UNICODE = {
    "\u2212": "-",
    "\u2013": "-",
    "\u2012": "-",
    "\u2010": "-",
    "\u00d7": r"\times ",
    "\u22c5": r"\cdot ",
    "\u00b7": r"\cdot ",
    "\u2219": r"\cdot ",
    "\u2217": "*",
    "\u00f7": r"\div ",
    "\u2044": "/",  # fraction slash: 3⁄2
    "\u2215": "/",  # division slash
    "\u221a": r"\sqrt ",
    "\u221b": r"\sqrt[3]",
    "\u221c": r"\sqrt[4]",
    "\u03c0": r"\pi ",
    "\u221e": r"\infty ",
    "\u2264": r"\le ",
    "\u2265": r"\ge ",
    "\u2260": r"\ne ",
    "\u2248": r"\approx ",
    "\u00b1": r"\pm ",
    "\u2213": r"\mp ",
    "\u00b0": r"^\circ ",
    "\u2218": r"^\circ ",
    "\u222a": r"\cup ",
    "\u2229": r"\cap ",
    "\u2208": r"\in ",
    "\u2205": r"\emptyset ",
    "\u211d": r"\mathbb{R}",
    "\u2124": r"\mathbb{Z}",
    "\u2115": r"\mathbb{N}",
    "\u211a": r"\mathbb{Q}",
    "\u2102": r"\mathbb{C}",
    "\u2026": "...",
    "\u22ef": "...",
    "\u27e8": r"\langle ",
    "\u27e9": r"\rangle ",
    "\u00bd": r"\frac{1}{2}",
    "\u2153": r"\frac{1}{3}",
    "\u2154": r"\frac{2}{3}",
    "\u00bc": r"\frac{1}{4}",
    "\u00be": r"\frac{3}{4}",
    "\u2155": r"\frac{1}{5}",
    "\u2156": r"\frac{2}{5}",
    "\u2157": r"\frac{3}{5}",
    "\u2158": r"\frac{4}{5}",
    "\u2159": r"\frac{1}{6}",
    "\u215a": r"\frac{5}{6}",
    "\u215b": r"\frac{1}{8}",
    "\u215c": r"\frac{3}{8}",
    "\u215d": r"\frac{5}{8}",
    "\u215e": r"\frac{7}{8}",
    "\u2150": r"\frac{1}{7}",
    "\u2151": r"\frac{1}{9}",
    "\u2152": r"\frac{1}{10}",
    "\u00a0": " ",
    "\u2009": " ",
    "\u202f": " ",
    "\u3000": " ",
    "\u2032": "'",
    "\u03b1": r"\alpha ",
    "\u03b2": r"\beta ",
    "\u03b3": r"\gamma ",
    "\u03b4": r"\delta ",
    "\u03b8": r"\theta ",
    "\u03bb": r"\lambda ",
    "\u03bc": r"\mu ",
    "\u03c3": r"\sigma ",
    "\u03c6": r"\phi ",
    "\u03c9": r"\omega ",
    "\uff0c": ",",
    "\uff08": "(",
    "或": " or ",  # "1, 2, 3, 或 6": "or" in Chinese
    "\uff09": ")",
    "\u2236": ":",
}
_SUPERSCRIPTS = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+", strict=True))
_SUBSCRIPTS = dict(zip("₀₁₂₃₄₅₆₇₈₉", "0123456789", strict=True))
_TRANSLATE = str.maketrans(_UNICODE)
_SCRIPT_RUN = re.compile("([⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺]+)|([₀₁₂₃₄₅₆₇₈₉]+)")
_NEEDS_TRANSLATE = re.compile("[^\x00-\x7f]")

# `\left(` -> `(`, `\left.` -> nothing, `\bigl[` -> `[`; also math delimiters and \displaystyle-like switches.
_STRIP = re.compile(
    r"\\(?:left|right|middle)\s*\.|\\(?:left|right|middle|[bB]igg?[lr]?)(?![A-Za-z])"
    r"|\\(?:displaystyle|textstyle|scriptstyle|limits|nolimits|mathstrut|strut|!)(?![A-Za-z])"
    r"|(?<!\\)\$|\\\(|\\\)|\\\[|\\\]"
)
_TRAILING_MARKS = ("\\,", "\\;", "\\:", "\\!", "\\ ", "\\quad", "\\qquad", "~", "\\\\", ",", ";")
_LEADING = re.compile(r"^(?:\s|\\[,;:! ]|\\q?quad(?![A-Za-z])|~)+")


# A thousands group written with stray blanks around its separator: "11,\\! 111", "14 {, }916".
_LOOSE_GROUP = re.compile(r"(?<=\d)(?:,\\!\s+|\s?\{\s*,\s*\}\s?)(?=\d{3}(?!\d))")


def prepare(text: str) -> str:
    """Map unicode math to LaTeX, drop delimiters, sizing and spacing commands at the ends (linear time)."""
    if _NEEDS_TRANSLATE.search(text):
        if _SCRIPT_RUN.search(text):
            text = _SCRIPT_RUN.sub(_script_run, text)
        text = text.translate(_TRANSLATE)
    if "{" in text or "\\!" in text:
        text = _LOOSE_GROUP.sub("{,}", text)
    text = _STRIP.sub("", text)
    return _LEADING.sub("", _strip_end(text))


def _strip_end(text: str) -> str:
    """Drop trailing blanks, spacing commands and sentence punctuation, keeping an ellipsis ("0.333...")."""
    while True:
        text = text.rstrip()
        for mark in _TRAILING_MARKS:
            if text.endswith(mark) and not (mark == "\\ " and text.endswith("\\\\ ")):
                text = text[: -len(mark)]
                break
        else:
            if text.endswith(".") and not text.endswith(".."):
                text = text[:-1]
                continue
            return text


def _script_run(match: re.Match) -> str:
    if match.group(1):
        return "^{" + "".join(_SUPERSCRIPTS[c] for c in match.group(1)) + "}"
    return "_{" + "".join(_SUBSCRIPTS[c] for c in match.group(2)) + "}"


# -- tokens ------------------------------------------------------------------------------------------------

_GROUP_SEP = r"(?:,|\{,\}|\\,|\\!|\\ |\\:|\\;|~)"
_TOKEN = re.compile(
    r"(?P<ws>\s+|\\[,;:!> ]|~|\\(?:enspace|thinspace|medspace|thickspace|negthinspace)(?![A-Za-z]))"
    r"|(?P<num>(?:[1-9]\d{0,2}(?:(?:" + _GROUP_SEP + r"\d{3}|[ \t]\d{3}(?!/))(?!\d))+|\d+)"
    r"(?:\.\d+|\.(?=\\overline|\\dot|\(|\\ldots|\\dots|\\cdots|\.\.\.|/))?(?:[eE][-+]?\d+(?![\d.]))?"
    r"|\.\d+(?:[eE][-+]?\d+(?![\d.]))?)"
    r"|(?P<text>\\(?:text|textrm|textnormal|textbf|textit|textsf|texttt|textup|textsc|mbox|hbox|mathrm"
    r"|operatorname\*?|mathit)\s*\{(?P<content>[^{}]*)\})"
    r"|(?P<begin>\\begin\s*\{(?P<benv>[A-Za-z]+\*?)\})"
    r"|(?P<end>\\end\s*\{(?P<eenv>[A-Za-z]+\*?)\})"
    r"|(?P<cmd>\\(?:[A-Za-z]+|.))"
    r"|(?P<id>[A-Za-z]+)"
    r"|(?P<op>\*\*|<=|>=|!=|=<|=>|==|\.\.\.|[-+*/^_=<>()\[\]{},;|!&:'.%?])"
    r"|(?P<bad>.)",
    re.DOTALL,
)
_GROUP_SPLIT = re.compile(_GROUP_SEP + "|[ \t]")


class Token:
    """One token: its kind, its text (for commands without the backslash) and whether space preceded it."""

    __slots__ = ("kind", "text", "space", "extra")

    def __init__(self, kind: str, text: str, space: bool, extra: str = ""):
        self.kind = kind
        self.text = text
        self.space = space
        self.extra = extra

    def __repr__(self) -> str:
        return f"{self.kind}:{self.text}"


def tokenize(text: str) -> list[Token]:
    """Split prepared text into tokens; raises ParseError on characters no math uses."""
    tokens: list[Token] = []
    space = False
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind == "ws":
            space = True
            continue
        if kind == "num":
            tokens.append(Token("num", match.group(), space))
        elif kind == "text":
            command = match.group()[1 : match.group().index("{")].strip()
            tokens.append(Token("text", match.group("content"), space, command))
        elif kind == "begin":
            tokens.append(Token("begin", match.group("benv"), space))
        elif kind == "end":
            tokens.append(Token("end", match.group("eenv"), space))
        elif kind == "cmd":
            tokens.append(Token("cmd", match.group()[1:], space))
        elif kind == "id":
            tokens.append(Token("id", match.group(), space))
        elif kind == "op":
            tokens.append(Token("op", match.group(), space))
        else:
            raise ParseError(f"unexpected character {match.group()!r}")
        if len(tokens) > MAX_TOKENS:
            raise TooComplex(f"more than {MAX_TOKENS} tokens")
        space = False
    return tokens


# -- vocabulary --------------------------------------------------------------------------------------------

FUNCTIONS = {
    "sin": "sin", "cos": "cos", "tan": "tan", "sec": "sec", "csc": "csc", "cot": "cot", "cosec": "csc",
    "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsec": "asec", "arccsc": "acsc", "arccot": "acot",
    "asin": "asin", "acos": "acos", "atan": "atan",
    "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "coth": "coth", "sech": "sech", "csch": "csch",
    "arsinh": "asinh", "arcosh": "acosh", "artanh": "atanh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh",
    "log": "log", "ln": "ln", "lg": "lg", "exp": "exp", "sqrt": "sqrt", "cbrt": "cbrt", "abs": "abs",
    "floor": "floor", "ceil": "ceil", "max": "max", "min": "min", "gcd": "gcd", "lcm": "lcm", "det": "det",
    "sgn": "sign", "sign": "sign",
}  # fmt: skip
_INVERSE = {"sin": "asin", "cos": "acos", "tan": "atan", "sec": "asec", "csc": "acsc", "cot": "acot",
            "sinh": "asinh", "cosh": "acosh", "tanh": "atanh"}  # fmt: skip
GREEK = frozenset(
    [
        "alpha",
        "beta",
        "gamma",
        "delta",
        "epsilon",
        "varepsilon",
        "zeta",
        "eta",
        "theta",
        "vartheta",
        "iota",
        "kappa",
        "lambda",
        "mu",
        "nu",
        "xi",
        "omicron",
        "rho",
        "varrho",
        "sigma",
        "varsigma",
        "tau",
        "upsilon",
        "phi",
        "varphi",
        "chi",
        "psi",
        "omega",
        "Gamma",
        "Delta",
        "Theta",
        "Lambda",
        "Xi",
        "Pi",
        "Sigma",
        "Upsilon",
        "Phi",
        "Psi",
        "Omega",
        "ell",
    ]
)
_PLAIN_CONSTANTS = {"pi": "pi", "inf": "oo", "infty": "oo", "infinity": "oo", "oo": "oo"}
CONNECTORS = frozenset({"or", "and"})
UNIT_WORDS = frozenset(
    [
        "cm",
        "mm",
        "km",
        "kg",
        "mg",
        "ft",
        "yd",
        "mi",
        "hr",
        "in",
        "lb",
        "lbs",
        "oz",
        "ml",
        "cc",
        "mph",
        "kph",
        "sq",
        "cu",
        "am",
        "pm",
        "m",
        "s",
        "g",
        "h",
        "L",
        "kN",
        "Hz",
    ]
)
"""Short words read as units after a value (longer unknown words after a value are units too)."""
_RELATIONS = {
    "=": "=", "==": "=", "<": "<", ">": ">", "<=": "<=", ">=": ">=", "=<": "<=", "=>": ">=", "!=": "!=",
}  # fmt: skip
_REL_CMDS = {
    "le": "<=", "leq": "<=", "leqslant": "<=", "ge": ">=", "geq": ">=", "geqslant": ">=", "lt": "<", "gt": ">",
    "ne": "!=", "neq": "!=", "approx": "=", "doteq": "=", "equiv": "=", "in": "in",
}  # fmt: skip
_MUL_CMDS = frozenset({"cdot", "times", "ast", "div", "over"})
_ACCENTS = {
    "bar": "bar", "overline": "bar", "hat": "hat", "widehat": "hat", "vec": "vec", "overrightarrow": "vec",
    "tilde": "tilde", "widetilde": "tilde", "dot": "dot", "ddot": "ddot", "check": "check", "breve": "breve",
}  # fmt: skip
_SET_OPS = {"cup": "union", "cap": "intersect", "setminus": "setminus"}
_IGNORED_CMDS = frozenset(
    {"mathbf", "boldsymbol", "bm", "mathsf", "mathtt", "mathcal", "mathscr", "mathfrak", "pmb", "boxed", "fbox",
     "underline", "emph", "mathnormal", "cal", "bf", "rm", "it", "mathbin", "mathrel", "mathord", "mathop"}
)  # fmt: skip
_SKIPPED_GROUPS = frozenset(
    {"color", "textcolor", "hspace", "vspace", "phantom", "hphantom", "vphantom", "label"}
)
_MATRIX_ENVS = frozenset(
    {"matrix", "pmatrix", "bmatrix", "Bmatrix", "vmatrix", "Vmatrix", "smallmatrix", "array", "psmallmatrix",
     "bsmallmatrix"}
)  # fmt: skip
_LIST_ENVS = frozenset({"aligned", "align", "align*", "gathered", "gather", "gather*", "split", "eqnarray"})
_CLOSERS = frozenset({")", "]"})
_SEPARATORS = frozenset({",", ";"})
_ELLIPSES = frozenset({"ldots", "dots", "cdots", "dotsc"})
_WORDS = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}")
_DIGIT = re.compile(r"\d")


def _num(value: Fraction | int) -> Node:
    value = Fraction(value)
    return Node("num", (), Number(value, str(value), "int" if value.denominator == 1 else "dec"))


def number_literal(text: str) -> Number:
    """The exact value and stated precision of a decimal literal (thousands separators allowed)."""
    plain = _GROUP_SPLIT.sub("", text) if not text.isdigit() else text
    mantissa, _, exponent_text = plain.replace("E", "e").partition("e")
    whole, dot, fraction = mantissa.partition(".")
    exponent = int(exponent_text) if exponent_text else 0
    if abs(exponent) > 10_000:
        raise TooComplex("a decimal exponent beyond 10^10000")
    digits = (whole + fraction).lstrip("0")
    value = Fraction(int(whole or "0") * 10 ** len(fraction) + int(fraction or "0"), 10 ** len(fraction))
    value = value * Fraction(10) ** exponent
    if not dot and not exponent_text:
        return Number(value, text, "int")
    places = len(fraction) - exponent
    sig = len(digits) if digits else 0
    return Number(value, text, "sci" if exponent_text else "dec", places, sig)


def _repeating(whole_and_prefix: str, repetend: str, text: str) -> Number:
    whole, _, prefix = whole_and_prefix.partition(".")
    whole = _GROUP_SPLIT.sub("", whole)  # 1,000.(3) and 1 000.\\overline{3}: the whole part may be grouped
    scale = 10 ** len(prefix)
    period = 10 ** len(repetend) - 1
    value = Fraction(int(whole or "0")) + Fraction(int(prefix or "0"), scale)
    value += Fraction(int(repetend), scale * period)
    return Number(value, text, "rep")


def _ellipsis_repetend(fraction: str) -> tuple[str, str] | None:
    """For 0.142857142857... the shortest period that repeats at least twice at the end, with the prefix."""
    for period in range(1, len(fraction) // 2 + 1):
        block = fraction[-period:]
        if fraction[-2 * period : -period] == block:
            prefix = fraction[: -2 * period]
            while prefix.endswith(block):  # 0.3333... -> prefix "", repetend "3"
                prefix = prefix[:-period]
            # Rotate so the prefix is as short as possible (0.1666... -> prefix "1", repetend "6").
            while prefix and prefix[-1] == block[-1]:
                prefix, block = prefix[:-1], block[-1] + block[:-1]
            return prefix, block
    return None


# -- the parser --------------------------------------------------------------------------------------------


class Parser:
    """A Pratt parser over the token list; `parse()` returns the tree of the whole answer."""

    def __init__(self, tokens: list[Token]):
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.abs_depth = 0
        self.nodes = 0
        self.brackets = 0

    # token helpers

    def peek(self, offset: int = 0) -> Token | None:
        index = self.pos + offset
        return self.tokens[index] if index < len(self.tokens) else None

    def advance(self) -> Token:
        token = self.peek()
        if token is None:
            raise ParseError("unexpected end of answer")
        self.pos += 1
        return token

    def at(self, kind: str, text: str | None = None, offset: int = 0) -> bool:
        token = self.peek(offset)
        return token is not None and token.kind == kind and (text is None or token.text == text)

    def expect(self, kind: str, text: str) -> Token:
        token = self.peek()
        if token is None or token.kind != kind or token.text != text:
            raise ParseError(f"expected {text!r}")
        self.pos += 1
        return token

    def node(self, op: str, args: tuple[Node, ...] = (), value: object = None) -> Node:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise TooComplex(f"more than {MAX_NODES} nodes")
        return Node(op, args, value)

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_PARSE_DEPTH:
            raise TooComplex(f"nesting deeper than {MAX_PARSE_DEPTH // 3} levels")

    # entry points

    def parse(self) -> Node:
        if not self.tokens:
            raise ParseError("empty answer")
        node = self.sequence(top=True)
        if self.peek() is not None:
            raise ParseError(f"unexpected {self.peek().text!r}")
        return node

    def sequence(self, top: bool = False, closers: frozenset[str] = _CLOSERS) -> Node:
        """Items separated by ',', ';', 'or', 'and' (a bare list at the top, a tuple's items in brackets)."""
        items = [self.expression(0)]
        separator = None
        while True:
            token = self.peek()
            if token is None:
                break
            if token.kind == "op" and token.text in _SEPARATORS:
                kind = ","
            elif self._connector(token):
                kind = "or"
            elif token.kind == "cmd" and token.text == "\\" and top:
                kind = ","
            else:
                break
            self.pos += 1
            while self._connector(self.peek()):  # ", and" / "or \text{ and }"
                self.pos += 1
                kind = "or"
            separator = separator or kind
            if kind == "or":
                separator = "or"
            if self.peek() is None or (self.peek().kind == "op" and self.peek().text in closers):
                break  # a trailing separator: "1, 2,"
            items.append(self.expression(0))
            if len(items) > MAX_ITEMS:
                raise TooComplex(f"more than {MAX_ITEMS} items")
        if len(items) == 1:
            return items[0]
        return self.node("list", tuple(items), separator)

    @staticmethod
    def _connector(token: Token | None) -> bool:
        if token is None:
            return False
        if token.kind == "id":
            return token.text.lower() in CONNECTORS
        if token.kind == "text":
            return token.text.strip().strip(",").strip().lower() in CONNECTORS or token.text.strip() == ","
        return token.kind == "cmd" and token.text in ("lor", "land", "quad", "qquad")

    # Pratt core

    def expression(self, rbp: int) -> Node:
        self.enter()
        left = self.prefix()
        while True:
            token = self.peek()
            if token is None:
                break
            lbp = self.infix_power(token, left)
            if lbp <= rbp:
                break
            left = self.infix(token, left)
        self.depth -= 1
        return left

    def infix_power(self, token: Token, left: Node) -> int:
        kind, text = token.kind, token.text
        if kind == "op":
            if text in _RELATIONS:
                return 10
            if text == ":":
                return 12
            if text in "+-":
                return 30
            if text in ("*", "/"):
                return 40
            if text in ("^", "**", "_", "!", "%", "'"):
                return 70
            if text in ("(", "{"):
                return 40
            if text == "[" and left.op not in ("bracket", "set", "list", "union"):
                return 40  # 2[x - 1]: square brackets as grouping after a factor
            if text == "|":
                return 40 if self.abs_depth == 0 else 0
            if text == "." or text == "...":
                return 0
            return 0
        if kind == "cmd":
            if text in _REL_CMDS:
                return 10
            if text in _SET_OPS:
                return 20
            if text in ("pm", "mp"):
                return 30
            if text in _MUL_CMDS:
                return 40
            if text in ("%", "circ", "degree"):
                return 70
            if text in ("mid", "colon", "\\", "rangle", "rfloor", "rceil", "rvert", "|", "}", "right", "to"):
                return 0
            if text in _ELLIPSES or text in ("quad", "qquad", "lor", "land"):
                return 0
            if text == "$":
                return 0
            return 40  # an atom-starting command: implicit multiplication
        if kind == "id":
            if text.lower() in CONNECTORS:
                return 0
            if self._unit_word(text) and not self._letter_in_expression(text):
                return 5
            if text == "x" and left.op == "num" and self.at("num", offset=1):
                return 40  # "3 x 4" written for 3 × 4
            return 40
        if kind == "text":
            if self._connector(token):
                return 0
            return 5  # a unit or a trailing remark: attaches to the whole expression
        if kind == "num":
            return 40
        if kind == "begin":
            return 40
        return 0

    def _letter_in_expression(self, text: str) -> bool:
        """A one-letter unit word (m, s, g, h, L) that the expression goes on after (`L C s^{2} + R C s + 1`,
        `2 m \\omega^2`): a variable, not a unit. Its own power (`5 m^2`) does not count as going on."""
        if len(text) != 1:
            return False
        offset = 1
        if self.at("op", "^", offset=offset):  # skip the letter's own power: ^2 or ^{...}
            offset += 2
            depth = 1 if self.at("op", "{", offset=offset - 1) else 0
            while depth and (token := self.peek(offset)) is not None:
                depth += (token.kind, token.text) == ("op", "{")
                depth -= (token.kind, token.text) == ("op", "}")
                offset += 1
        following = self.peek(offset)
        if following is None:
            return False
        if following.kind == "op":
            if following.text == "/":  # 10 m/s: a compound unit; 5m/2: a variable over a number
                after = self.peek(offset + 1)
                return not (after is not None and after.kind == "id" and self._unit_word(after.text))
            return following.text in "+-*" or following.text == "("
        return following.kind in ("id", "cmd", "num") and not (
            following.kind == "cmd" and following.text in ("quad", "qquad", "text")
        )

    @staticmethod
    def _unit_word(text: str) -> bool:
        if text in UNIT_WORDS:
            return True
        lowered = text.lower()
        return len(text) >= 3 and lowered not in FUNCTIONS and lowered not in _PLAIN_CONSTANTS

    def infix(self, token: Token, left: Node) -> Node:
        kind, text = token.kind, token.text
        if kind == "op" and text in _RELATIONS or kind == "cmd" and text in _REL_CMDS:
            return self.relation(left)
        if kind == "op":
            if text == ":":
                self.pos += 1
                return self.node("ratio", (left, self.expression(12)))
            if text in "+-":
                self.pos += 1
                right = self.expression(30)
                if text == "-":
                    right = self.node("neg", (right,))
                return self._add(left, right)
            if text == "*":
                self.pos += 1
                return self._mul(left, self.expression(40))
            if text == "/":
                self.pos += 1
                return self.node("div", (left, self.expression(40)), "slash")
            if text in ("^", "**"):
                return self.power(left)
            if text == "_":
                return self.subscript(left)
            if text == "!":
                self.pos += 1
                if self.at("op", "!"):
                    raise ParseError("double factorial")
                return self.node("fact", (left,))
            if text == "%":
                self.pos += 1
                return self.node("pct", (left,))
            if text == "'":
                return self._primed(left)
            return self.implicit(left, token)
        if kind == "cmd":
            if text in _SET_OPS:
                self.pos += 1
                return self.node(_SET_OPS[text], (left, self.expression(20)))
            if text in ("pm", "mp"):
                self.pos += 1
                right = self.expression(30)
                return self.node("pm", (left, right), text)
            if text in _MUL_CMDS:
                self.pos += 1
                right = self.expression(40)
                if text in ("div", "over"):
                    return self.node("div", (left, right), "slash")
                return self._mul(left, right)
            if text == "%":
                self.pos += 1
                return self.node("pct", (left,))
            if text in ("circ", "degree"):
                self.pos += 1
                return self._degrees(left)
            return self.implicit(left, token)
        if kind == "id" and self._unit_word(text) and not self._letter_in_expression(text) or kind == "text":
            return self.unit(left)
        return self.implicit(left, token)

    def implicit(self, left: Node, token: Token) -> Node:
        if token.kind == "num" and self._ends_in_number(left):
            raise ParseError("two numbers side by side")
        if token.kind == "id" and token.text == "x" and left.op == "num" and self.at("num", offset=1):
            self.pos += 1  # "3 x 4": a letter x between two numbers is a times sign
            return self._mul(left, self.expression(40))
        right = self.expression(40)
        return self._mul(left, right)

    @staticmethod
    def _ends_in_number(node: Node) -> bool:
        while node.op in ("mul", "add") and node.args:
            node = node.args[-1]
        return node.op in ("num", "pct")

    def _add(self, left: Node, right: Node) -> Node:
        if left.op == "add" and left.value is None:
            return self.node("add", (*left.args, right))
        return self.node("add", (left, right))

    def _mul(self, left: Node, right: Node) -> Node:
        if left.op == "mul":
            return self.node("mul", (*left.args, right))
        return self.node("mul", (left, right))

    def _degrees(self, left: Node) -> Node:
        node = self.node("deg", (left,))
        token = self.peek()
        if token is not None and not token.space and token.kind == "id" and token.text in ("C", "F"):
            self.pos += 1
            return self.node("unit", (left,), "deg" + token.text)
        return node

    def relation(self, first: Node) -> Node:
        sides = [first]
        ops = []
        while True:
            token = self.peek()
            if token is None:
                break
            if token.kind == "op" and token.text in _RELATIONS:
                op = _RELATIONS[token.text]
            elif token.kind == "cmd" and token.text in _REL_CMDS:
                op = _REL_CMDS[token.text]
            else:
                break
            self.pos += 1
            ops.append(op)
            sides.append(self.expression(10))
        return self.node("rel", tuple(sides), tuple(ops))

    def power(self, base: Node) -> Node:
        exponents = []
        while self.at("op", "^") or self.at("op", "**"):
            self.pos += 1
            if self._degree_mark():
                node = self._degrees(base if not exponents else self._tower(base, exponents))
                return node
            primes = self._prime_mark() if not exponents else 0
            if primes:
                if base.op != "sym":
                    raise ParseError("a prime on something that is not a variable")
                base = self.node("sym", (), f"{base.value}{chr(39) * primes}")
                if not (self.at("op", "^") or self.at("op", "**")):
                    return base
                continue
            exponents.append(self.script())
        return self._tower(base, exponents)

    def _tower(self, base: Node, exponents: list[Node]) -> Node:
        result = exponents[-1]
        for exponent in reversed(exponents[:-1]):
            result = self.node("pow", (exponent, result))
        return self.node("pow", (base, result))

    def _primed(self, left: Node) -> Node:
        """y' and y'': a derivative named by its primes, a variable of its own (y' is not y)."""
        count = 0
        while self.at("op", "'"):
            self.pos += 1
            count += 1
        if left.op != "sym":
            raise ParseError("a prime on something that is not a variable")
        return self.node("sym", (), f"{left.value}{chr(39) * count}")

    def _prime_mark(self) -> int:
        """How many primes a superscript of \\prime commands writes (^{\\prime}, ^{\\prime\\prime}, ^\\prime), or 0."""
        if self.at("cmd", "prime"):
            self.pos += 1
            return 1
        count, offset = 0, 1
        if not self.at("op", "{"):
            return 0
        while self.at("cmd", "prime", offset):
            count, offset = count + 1, offset + 1
        if count and self.at("op", "}", offset):
            self.pos += offset + 1
            return count
        return 0

    def _degree_mark(self) -> bool:
        if self.at("cmd", "circ"):
            self.pos += 1
            return True
        if self.at("op", "{") and self.at("cmd", "circ", 1) and self.at("op", "}", 2):
            self.pos += 3
            return True
        return False

    def script(self) -> Node:
        """The argument of ^ or _: a braced group, a whole number, one letter, one command atom, or -atom."""
        token = self.peek()
        if token is None:
            raise ParseError("missing exponent")
        if token.kind == "op" and token.text == "{":
            return self.group()
        if token.kind == "op" and token.text == "(":
            return self.primary()
        if token.kind == "op" and token.text in "-+":
            self.pos += 1
            inner = self.script()
            return self.node("neg", (inner,)) if token.text == "-" else inner
        if token.kind == "num":
            self.pos += 1
            return self.node("num", (), number_literal(token.text))
        if token.kind == "id":
            return self._one_letter()
        if token.kind == "cmd" or token.kind == "text":
            self.enter()
            node = self.primary()
            self.depth -= 1
            return node
        raise ParseError(f"bad exponent {token.text!r}")

    def _one_letter(self) -> Node:
        token = self.advance()
        if len(token.text) > 1:
            self.tokens.insert(self.pos, Token("id", token.text[1:], False))
        return self._letter(token.text[0])

    def subscript(self, left: Node) -> Node:
        self.pos += 1
        script = self.script()
        literal = left.args[0] if left.op == "group" else left
        if literal.op == "num" and literal.value.kind == "int":
            return self._based(literal.value, script)
        if left.op == "sym":
            return self.node("sym", (), f"{left.value}_{{{to_text(script)}}}")
        raise ParseError("a subscript on something that is neither a number nor a variable")

    def _based(self, literal: Number, script: Node) -> Node:
        if script.op == "text":
            base = {"two": 2, "eight": 8, "ten": 10, "sixteen": 16}.get(str(script.value).strip().lower())
        elif script.op == "num" and script.value.kind == "int":
            base = int(script.value.value)
        else:
            base = None
        if base is None or not 2 <= base <= 36:
            raise ParseError("a number base must be an integer from 2 to 36")
        digits = literal.text
        try:
            value = int(digits, base)
        except ValueError:
            raise ParseError(f"{digits} is not a base-{base} numeral") from None
        return self.node("num", (), Number(Fraction(value), digits, "base", base=base))

    def unit(self, left: Node) -> Node:
        words = []
        while True:
            token = self.peek()
            if token is None:
                break
            if token.kind == "id" and (self._unit_word(token.text) or words) and not self._connector(token):
                words.append(token.text)
                self.pos += 1
            elif token.kind == "text" and not self._connector(token):
                words.append(token.text.strip())
                self.pos += 1
            elif token.kind == "op" and token.text in ("^", "/") and words:
                self.pos += 1
                words.append(token.text + to_text(self.script()) if token.text == "^" else "/")
            elif token.kind == "op" and token.text == "." and words:
                self.pos += 1  # "p.m.", "sq. units"
            elif token.kind == "num" and words and words[-1].endswith("/"):
                self.pos += 1
                words.append(token.text)
            elif token.kind == "cmd" and token.text == "$":
                self.pos += 1
                words.append("$")
            else:
                break
        kept = [word for word in words if any(c.isalnum() or c in "$/" for c in word)]
        unit = " ".join(kept).strip(" /")  # "m/s" keeps its slash, as "\\text{ m/s}" does
        if not unit:
            return left
        return self.node("unit", (left,), unit)

    # prefix forms

    def prefix(self) -> Node:
        token = self.peek()
        if token is None:
            raise ParseError("unexpected end of answer")
        if token.kind == "op" and token.text in "-+":
            self.pos += 1
            operand = self.expression(45)
            return self.node("neg", (operand,)) if token.text == "-" else operand
        if token.kind == "cmd" and token.text in ("pm", "mp"):
            self.pos += 1
            return self.node("pm", (_num(0), self.expression(45)), token.text)
        if token.kind == "op" and token.text in ("=", "=="):
            self.pos += 1  # an answer written as "= 5"
            return self.expression(10)
        return self.primary()

    def primary(self) -> Node:
        self.enter()
        node = self._primary()
        self.depth -= 1
        return node

    def _primary(self) -> Node:
        token = self.advance()
        kind, text = token.kind, token.text
        if kind == "num":
            return self.number(token)
        if kind == "id":
            self.pos -= 1
            return self.word()
        if kind == "op":
            if text in ("(", "["):
                return self.bracket(text)
            if text == "{":
                self.pos -= 1
                return self.group(allow_list=True)
            if text == "|":
                return self.absolute("op", "|")
            raise ParseError(f"unexpected {text!r}")
        if kind == "cmd":
            return self.command(text)
        if kind == "text":
            return self.text(token)
        if kind == "begin":
            return self.environment(text)
        raise ParseError(f"unexpected {text!r}")

    def number(self, token: Token) -> Node:
        if self.brackets and "," in token.text:
            self._split_groups(token)
        literal = number_literal(token.text)
        nxt = self.peek()
        if literal.kind == "dec" and nxt is not None and not nxt.space:
            repeating = self._repeating(token.text, nxt)
            if repeating is not None:
                return self.node("num", (), repeating)
        if nxt is not None and (
            nxt.kind == "op" and nxt.text == "..." or nxt.kind == "cmd" and nxt.text in _ELLIPSES
        ):
            self.pos += 1
            return self.node("num", (), self._ellipsis(literal, token.text))
        node = self.node("num", (), literal)
        if literal.kind == "int" and nxt is not None:
            mixed = self._mixed(node, nxt)
            if mixed is not None:
                return mixed
        return node

    def _split_groups(self, token: Token) -> None:
        """Inside brackets "(1,100)" is a pair, not 1100, unless a group could not stand alone ("(1,000)")."""
        groups = token.text.split(",")
        if any(group.startswith("0") for group in groups[1:]) or any(not g[:1].isdigit() for g in groups):
            return
        token.text = groups[0]
        extra: list[Token] = []
        for group in groups[1:]:
            extra.extend((Token("op", ",", False), Token("num", group, False)))
        self.tokens[self.pos : self.pos] = extra

    def _repeating(self, text: str, nxt: Token) -> Number | None:
        if nxt.kind == "cmd" and nxt.text == "overline":
            self.pos += 1
            block = self.group()
            if block.op != "num" or block.value.kind != "int":
                raise ParseError("\\overline over something that is not digits")
            return _repeating(text, block.value.text, f"{text}\\overline{{{block.value.text}}}")
        if nxt.kind == "cmd" and nxt.text == "dot":
            digits, dotted = [], []
            while self.peek() is not None and not self.peek().space:
                token = self.peek()
                if token.kind == "cmd" and token.text == "dot":
                    self.pos += 1
                    block = self.group()
                    if block.op != "num" or block.value.kind != "int":
                        raise ParseError("\\dot over something that is not a digit")
                    dotted.append(len(digits))
                    digits.extend(block.value.text)
                elif token.kind == "num" and token.text.isdigit() and dotted:
                    self.pos += 1
                    digits.extend(token.text)
                else:
                    break
            repetend = "".join(digits[dotted[0] : dotted[-1] + 1])
            prefix = "".join(digits[: dotted[0]])
            return _repeating(text + prefix, repetend, f"{text}{''.join(digits)}(dotted)")
        if (
            nxt.kind == "op"
            and nxt.text == "("
            and self.at("num", offset=1)
            and self.peek(1).text.isdigit()
            and self.at("op", ")", 2)
        ):
            block = self.peek(1).text
            self.pos += 3
            return _repeating(text, block, f"{text}({block})")
        return None

    def _ellipsis(self, literal: Number, text: str) -> Number:
        if literal.kind == "dec":
            whole, _, fraction = text.partition(".")
            found = _ellipsis_repetend(fraction)
            if found is not None:
                prefix, block = found
                return _repeating(f"{whole}.{prefix}", block, text + "...")
        return literal  # "3.14159..." is a rounded decimal, as stated

    def _mixed(self, whole: Node, nxt: Token) -> Node | None:
        if nxt.kind == "cmd" and nxt.text in ("frac", "dfrac", "tfrac"):
            start = self.pos
            self.pos += 1
            fraction = self.fraction()
            if self._integer_fraction(fraction):
                return self.node("mixed", (whole, fraction))
            self.pos = start
            return None
        if (
            nxt.kind == "num"
            and nxt.space
            and nxt.text.isdigit()
            and self.at("op", "/", 1)
            and self.at("num", offset=2)
            and self.peek(2).text.isdigit()
        ):
            after = self.peek(3)
            if after is None or after.kind in ("text",) or after.kind == "op" and after.text in ",;)]=":
                self.pos += 3
                fraction = self.node("div", (_num(int(nxt.text)), _num(int(self.peek(-1).text))), "slash")
                return self.node("mixed", (whole, fraction))
        return None

    @staticmethod
    def _integer_fraction(node: Node) -> bool:
        return (
            node.op == "div"
            and all(arg.op == "num" and arg.value.kind == "int" for arg in node.args)
            and 0 < node.args[0].value.value < node.args[1].value.value
        )

    def word(self) -> Node:
        token = self.advance()
        text = token.text
        lowered = text.lower()
        if lowered in FUNCTIONS and (len(text) > 1):
            return self.function(FUNCTIONS[lowered])
        if lowered in _PLAIN_CONSTANTS and len(text) > 1:
            return self.node("const", (), _PLAIN_CONSTANTS[lowered])
        if len(text) == 1:
            node = self._letter(text)
            return self._maybe_call(node, token)
        if len(text) == 2 and text not in UNIT_WORDS:
            self.tokens.insert(self.pos, Token("id", text[1], False))
            return self._letter(text[0])
        return self.node("text", (), text)

    def _letter(self, letter: str) -> Node:
        if letter == "e":
            return self.node("const", (), "e")
        if letter == "i":
            return self.node("const", (), "i")
        return self.node("sym", (), letter)

    def _maybe_call(self, node: Node, token: Token) -> Node:
        """f(x), g(x, y): kept as a "call" (a product in expressions, a label on an equation's left side)."""
        if node.op != "sym" or not self.at("op", "(") or self.peek().space:
            return node
        index = self.pos + 1
        names = []
        while index < len(self.tokens):
            tok = self.tokens[index]
            if tok.kind == "id" and len(tok.text) == 1:
                names.append(tok.text)
            else:
                return node
            index += 1
            if (
                index < len(self.tokens)
                and self.tokens[index].kind == "op"
                and self.tokens[index].text == ","
            ):
                index += 1
                continue
            break
        if not names or index >= len(self.tokens) or self.tokens[index].text != ")":
            return node
        self.pos = index + 1
        args = tuple(self._letter(name) for name in names)
        return self.node("call", args, node.value)

    def bracket(self, opener: str) -> Node:
        saved = self.abs_depth
        self.abs_depth = 0
        self.brackets += 1
        items = self.sequence(closers=_CLOSERS)
        self.brackets -= 1
        self.abs_depth = saved
        token = self.advance()
        if token.kind != "op" or token.text not in _CLOSERS:
            raise ParseError("unclosed bracket")
        entries = items.args if items.op == "list" else (items,)
        if len(entries) == 1 and opener == "(" and token.text == ")":
            inner = entries[0]
            return self.node("group", (inner,)) if inner.op == "num" else inner
        if len(entries) == 1 and opener == "[" and token.text == "]":
            return entries[0]
        return self.node("bracket", entries, opener + token.text)

    def group(self, allow_list: bool = False) -> Node:
        """A TeX group {...}; inside, a comma list is allowed only where a group stands alone."""
        self.expect("op", "{")
        if self.at("op", "}"):
            self.pos += 1
            return self.node("empty")
        saved = self.abs_depth
        self.abs_depth = 0
        node = self.sequence(closers=frozenset({"}"}))
        self.abs_depth = saved
        self.expect("op", "}")
        if node.op == "list" and not allow_list:
            raise ParseError("a list inside a TeX group")
        return node

    def argument(self) -> Node:
        """One TeX macro argument: {group}, or a single digit, letter or command (\\frac12, \\sqrt2)."""
        token = self.peek()
        if token is None:
            raise ParseError("missing argument")
        if token.kind == "op" and token.text == "{":
            return self.group()
        if token.kind == "num":
            self.pos += 1
            if len(token.text) > 1 and token.text.isdigit():
                self.tokens.insert(self.pos, Token("num", token.text[1:], False))
                return _num(int(token.text[0]))
            return self.node("num", (), number_literal(token.text))
        if token.kind == "id":
            return self._one_letter()
        if token.kind in ("cmd", "text"):
            self.enter()
            node = self.primary()
            self.depth -= 1
            return node
        raise ParseError(f"bad argument {token.text!r}")

    def fraction(self) -> Node:
        numerator = self.argument()
        denominator = self.argument()
        return self.node("div", (numerator, denominator), "frac")

    def command(self, name: str) -> Node:
        if name in ("frac", "dfrac", "tfrac", "cfrac"):
            return self.fraction()
        if name in ("sqrt",):
            index = None
            if self.at("op", "["):
                self.pos += 1
                index = self.expression(0)
                self.expect("op", "]")
            if self.at("op", "("):  # √(x+1) from unicode, or \sqrt(2) in plain text
                radicand = self.primary()
            elif self.at("num"):  # √16 from unicode arrives as "\sqrt 16": the whole number
                radicand = self.node("num", (), number_literal(self.advance().text))
            else:
                radicand = self.argument()
            if index is None:
                return self.node("func", (radicand,), "sqrt")
            return self.node("root", (radicand, index))
        if name in ("binom", "dbinom", "tbinom"):
            return self.node("func", (self.argument(), self.argument()), "binom")
        if name == "pi":
            return self.node("const", (), "pi")
        if name in ("infty", "infin"):
            return self.node("const", (), "oo")
        if name in ("imath", "jmath"):
            return self.node("const", (), "i")
        if name in GREEK:
            return self.node("sym", (), name)
        if name in ("emptyset", "varnothing", "empty"):
            return self.node("set", ())
        if name in FUNCTIONS and name not in ("sqrt", "abs", "floor", "ceil", "cbrt"):
            return self.function(FUNCTIONS[name])
        if name == "{":
            return self.braced_set()
        if name == "langle":
            items = self.sequence(closers=frozenset())
            self.expect("cmd", "rangle")
            entries = items.args if items.op == "list" else (items,)
            return self.node("bracket", entries, "<>")
        if name in ("lfloor", "lceil"):
            inner = self.expression(0)
            self.expect("cmd", "r" + name[1:])
            return self.node("func", (inner,), name[1:])
        if name in ("lvert", "vert"):
            return self.absolute("cmd", "rvert" if name == "lvert" else "vert")
        if name == "|":
            return self.absolute("cmd", "|")
        if name == "mathbb":
            inner = self.argument()
            letter = inner.value if inner.op in ("sym", "const") else None
            if letter in ("R", "Z", "N", "Q", "C"):
                return self.node("domain", (), letter)
            raise ParseError("unknown \\mathbb set")
        if name in _IGNORED_CMDS:
            return self.argument() if self.at("op", "{") else self.primary()
        if name in _SKIPPED_GROUPS:
            if self.at("op", "{"):
                self._skip_group()
            return self.primary()
        if name == "$":
            return self.node("unit", (self.expression(45),), "$")
        if name in ("%",):
            raise ParseError("a percent sign with nothing before it")
        if name == "degree":
            raise ParseError("a degree sign with nothing before it")
        if name in ("sum", "prod"):
            return self.series(name)
        if name in ("top", "intercal"):
            return self.node("sym", (), "T")  # A^{\\top}: the transpose mark, read as A^T
        if name in ("angle", "measuredangle", "sphericalangle", "triangle"):
            token = self.peek()
            if token is None or token.kind != "id" or not token.text.isalpha() or not token.text.isupper():
                raise ParseError(f"\\{name} without its letters")
            self.pos += 1
            kind = "triangle" if name == "triangle" else "angle"
            return self.node("sym", (), f"{kind}({token.text})")  # ∠ABC, △ABC: names, as AB names a segment
        if name in _ACCENTS:
            # \\bar{x}, \\hat{\\theta}, \\vec{v}, \\overline{AB}: a variable of its own (x̄ is not x); over a
            # number (a repetend out of place) or an expression it is refused.
            inner = self.argument()
            letters = [inner] if inner.op == "sym" else list(inner.args) if inner.op == "mul" else []
            if not letters or any(letter.op != "sym" for letter in letters):
                raise ParseError(f"\\{name} over something that is not a variable")
            return self.node(
                "sym", (), f"{_ACCENTS[name]}({''.join(str(letter.value) for letter in letters)})"
            )
        if name in ("exp",):
            return self.function("exp")
        if name in ("neg", "lnot"):
            raise ParseError("logic negation")
        raise ParseError(f"unknown command \\{name}")

    def series(self, name: str) -> Node:
        """`\\sum_{k=1}^{n} body` / `\\prod`: limits in either order, the body up to the next + or - at its level.
        The tree is ("sum" | "prod", (body, first, last), index); values.py expands it or compares it at whole
        numbers."""
        lower = upper = None
        for _ in range(2):
            if lower is None and self.at("op", "_"):
                self.pos += 1
                lower = self.script()
            elif upper is None and self.at("op", "^"):
                self.pos += 1
                upper = self.script()
        while lower is not None and lower.op == "group":
            lower = lower.args[0]
        if lower is None or upper is None:
            raise ParseError(f"\\{name} without both of its limits")
        index = (
            lower.args[0] if lower.op == "rel" and lower.value == ("=",) and len(lower.args) == 2 else None
        )
        if index is None or not (index.op == "sym" or index.op == "const" and index.value in ("i", "e")):
            raise ParseError(f"\\{name} whose lower limit is not index = start")
        if any(part.op == "const" and part.value == "oo" for part in upper.walk()):
            raise ParseError(f"an infinite \\{name}")  # no value to compare at a point: a 422, not a silent 0
        body = self.expression(30)
        return self.node(name, (body, lower.args[1], upper), str(index.value))

    def _skip_group(self) -> None:
        depth = 0
        while True:
            token = self.advance()
            if token.kind == "op" and token.text == "{":
                depth += 1
            elif token.kind == "op" and token.text == "}":
                depth -= 1
                if depth == 0:
                    return

    def absolute(self, kind: str, closer: str) -> Node:
        self.abs_depth += 1
        inner = self.expression(0)
        self.abs_depth -= 1
        token = self.advance()
        if token.kind != kind or token.text != closer:
            raise ParseError("unclosed absolute value")
        return self.node("func", (inner,), "abs")

    def braced_set(self) -> Node:
        if self.at("cmd", "}"):
            self.pos += 1
            return self.node("set", ())
        self.abs_depth += 1  # a bar after the first item is set-builder notation, not an absolute value
        self.brackets += 1
        first = self.expression(0)
        self.abs_depth -= 1
        if self.at("op", "|") or self.at("cmd", "mid") or self.at("op", ":") or self.at("cmd", "colon"):
            self.pos += 1
            condition = self.sequence(closers=frozenset())
            self.brackets -= 1
            self.expect("cmd", "}")
            return self.node("builder", (first, condition))
        items = [first]
        while self.at("op", ",") or self.at("op", ";") or self._connector(self.peek()):
            self.pos += 1
            items.append(self.expression(0))
            if len(items) > MAX_ITEMS:
                raise TooComplex(f"more than {MAX_ITEMS} items")
        self.brackets -= 1
        self.expect("cmd", "}")
        return self.node("set", tuple(items))

    def function(self, name: str) -> Node:
        """A named function: \\sin x, \\sin(x), \\sin^2 x, \\log_2 8, \\log_{b}(x), \\max(a, b)."""
        power = None
        base = None
        for _ in range(2):
            if self.at("op", "^") and power is None:
                self.pos += 1
                power = self.script()
            elif self.at("op", "_") and base is None and name in ("log",):
                self.pos += 1
                base = self.script()
        inverse = power is not None and power.op == "neg" and power.args[0].op == "num"
        if inverse and power.args[0].value.value == 1 and name in _INVERSE:  # \sin^{-1}
            name, power = _INVERSE[name], None
        if self.at("op", "("):
            self.pos += 1
            args = self.sequence(closers=frozenset({")"}))
            self.expect("op", ")")
            arguments = args.args if args.op == "list" else (args,)
        elif self.at("op", "{"):
            arguments = (self.group(),)
        else:
            arguments = (self._bare_argument(),)
        if name in ("max", "min", "gcd", "lcm"):
            if len(arguments) < 1:
                raise ParseError(f"{name} needs arguments")
        elif len(arguments) != 1:
            raise ParseError(f"{name} takes one argument")
        if base is not None:
            arguments = (*arguments, base)
        node = self.node("func", tuple(arguments), name)
        if power is not None:
            node = self.node("pow", (node, power))
        return node

    def _bare_argument(self) -> Node:
        """\\sin 2x is sin(2x); \\sin x \\cos x is sin(x)·cos(x): a paren-less argument is a product of atoms."""
        self.enter()
        node = self.expression(45)
        while True:
            token = self.peek()
            if token is None or token.space and token.kind == "num":
                break
            if (
                token.kind in ("num",)
                or token.kind == "id"
                and len(token.text) == 1
                or token.kind == "cmd"
                and (token.text in GREEK or token.text == "pi")
            ):
                node = self._mul(node, self.expression(45))
            else:
                break
        self.depth -= 1
        return node

    def text(self, token: Token) -> Node:
        content = token.text.strip()
        if token.extra.startswith("operatorname"):
            lowered = content.lower()
            if lowered in FUNCTIONS:
                return self.function(FUNCTIONS[lowered])
            raise ParseError(f"unknown operator {content!r}")
        if not content:
            return self.primary()
        if _WORDS.search(content) and not _DIGIT.search(content):
            return self.node("text", (), content)
        try:
            inner = parse_tokens(tokenize(prepare(content)), self.depth)
        except ParseError:
            return self.node("text", (), content)
        if token.extra.startswith("mathrm") or token.extra.startswith("mathit"):
            return inner
        return inner if inner.op != "text" else self.node("text", (), content)

    def environment(self, env: str) -> Node:
        if env in ("array",) and self.at("op", "{"):
            self._skip_group()
        rows: list[Node] = []
        cells: list[Node] = []
        while True:
            token = self.peek()
            if token is None:
                raise ParseError(f"unclosed environment {env}")
            if token.kind == "end":
                if token.text != env:
                    raise ParseError(f"\\end{{{token.text}}} closes \\begin{{{env}}}")
                self.pos += 1
                break
            if token.kind == "cmd" and token.text == "\\":
                self.pos += 1
                rows.append(self.node("row", tuple(cells)))
                cells = []
                continue
            if token.kind == "op" and token.text == "&":
                self.pos += 1
                if env in _LIST_ENVS:
                    continue
                if not cells:
                    raise ParseError("an empty matrix cell")
                continue
            if token.kind == "cmd" and token.text in ("hline",):
                self.pos += 1
                continue
            cells.append(self.cell(env))
            if len(cells) > MAX_ITEMS:
                raise TooComplex(f"more than {MAX_ITEMS} cells in a row")
        if cells:
            rows.append(self.node("row", tuple(cells)))
        if len(rows) > MAX_ITEMS:
            raise TooComplex(f"more than {MAX_ITEMS} matrix rows")
        if env in _LIST_ENVS:
            items = []
            for row in rows:
                items.extend(row.args)
            return self.node("list", tuple(items), ",")
        if env not in _MATRIX_ENVS:
            raise ParseError(f"unsupported environment {env}")
        if not rows:
            raise ParseError("an empty matrix")
        width = len(rows[0].args)
        if any(len(row.args) != width for row in rows):
            raise ParseError("matrix rows of different lengths")
        return self.node("matrix", tuple(rows), env)

    def cell(self, env: str) -> Node:
        if env in _LIST_ENVS:
            # In aligned equations "&" marks alignment inside one equation: glue the halves back together.
            left = self.expression(0)
            while self.at("op", "&"):
                self.pos += 1
                if self.at("op", "=") or self.at("cmd") and self.peek().text in _REL_CMDS:
                    left = self.relation(left)
                else:
                    break
            return left
        return self.expression(0)


def parse_tokens(tokens: list[Token], depth: int = 0) -> Node:
    """Parse a token list into a tree."""
    parser = Parser(tokens)
    parser.depth = depth
    return parser.parse()


def parse(text: str) -> Node:
    """Parse one answer's text (LaTeX, plain text or unicode) into a tree; raises ParseError or TooComplex."""
    check_text(text)
    return parse_prepared(prepare(text))


def parse_prepared(prepared: str) -> Node:
    """Parse text already passed through `prepare`; raises ParseError or TooComplex."""
    check_text(prepared)
    node = parse_tokens(tokenize(prepared))
    check_tree(node)
    return node


def check_tree(node: Node) -> None:
    """Refuse trees deeper than MAX_TREE_DEPTH (left-nested 1/2/3/..., towers), without recursion."""
    stack = [(node, 1)]
    while stack:
        current, depth = stack.pop()
        if depth > MAX_TREE_DEPTH:
            raise TooComplex(f"an expression nested deeper than {MAX_TREE_DEPTH}")
        stack.extend((arg, depth + 1) for arg in current.args)


# -- printing ----------------------------------------------------------------------------------------------

_PRECEDENCE = {"rel": 1, "list": 0, "pm": 3, "add": 3, "mul": 4, "div": 4, "neg": 5, "pow": 6}


def to_text(node: Node) -> str:
    """A canonical plain-text rendering of a tree (for details and for structural keys)."""
    op = node.op
    args = node.args
    if op == "num":
        number = node.value
        if number.kind == "base":
            return f"{number.text}_{number.base}"
        if number.kind in ("dec", "sci"):
            return number.text if number.kind == "dec" and "," not in number.text else _decimal(number)
        return _fraction(number.value)
    if op in ("sym", "text"):
        return str(node.value)
    if op == "const":
        return {"pi": "pi", "e": "e", "i": "i", "oo": "oo"}[node.value]
    if op == "group":
        return to_text(args[0])
    if op == "add":
        out = to_text(args[0])
        for arg in args[1:]:
            if arg.op == "neg":
                out += " - " + _wrap(arg.args[0], 4)
            else:
                out += " + " + _wrap(arg, 3)
        return out
    if op == "mul":
        return "*".join(_wrap(arg, 4) for arg in args)
    if op == "div":
        return f"{_wrap(args[0], 4)}/{_wrap(args[1], 5)}"
    if op == "neg":
        return "-" + _wrap(args[0], 5)
    if op == "pow":
        return f"{_wrap(args[0], 7)}^{_wrap(args[1], 7)}"
    if op == "func":
        return f"{node.value}({', '.join(to_text(arg) for arg in args)})"
    if op == "root":
        return f"root({to_text(args[0])}, {to_text(args[1])})"
    if op == "mixed":
        return f"{to_text(args[0])} {to_text(args[1])}"
    if op == "fact":
        return _wrap(args[0], 7) + "!"
    if op == "pct":
        return _wrap(args[0], 7) + "%"
    if op == "deg":
        return _wrap(args[0], 7) + "°"
    if op == "unit":
        return f"{to_text(args[0])} {node.value}"
    if op == "rel":
        out = to_text(args[0])
        for relation, side in zip(node.value, args[1:], strict=True):
            out += f" {relation} {to_text(side)}"
        return out
    if op == "ratio":
        return f"{to_text(args[0])}:{to_text(args[1])}"
    if op == "pm":
        return f"{to_text(args[0])} ± {_wrap(args[1], 4)}"
    if op == "list":
        return ", ".join(to_text(arg) for arg in args)
    if op == "bracket":
        opener, closer = node.value[0], node.value[-1]
        return opener + ", ".join(to_text(arg) for arg in args) + closer
    if op == "set":
        return "{" + ", ".join(to_text(arg) for arg in args) + "}"
    if op == "builder":
        return "{" + to_text(args[0]) + " | " + to_text(args[1]) + "}"
    if op in ("union", "intersect", "setminus"):
        symbol = {"union": " U ", "intersect": " n ", "setminus": " \\ "}[op]
        return symbol.join(to_text(arg) for arg in args)
    if op == "matrix":
        return "[" + "; ".join(", ".join(to_text(cell) for cell in row.args) for row in args) + "]"
    if op == "call":
        return f"{node.value}({', '.join(to_text(arg) for arg in args)})"
    if op == "domain":
        return {"R": "R", "Z": "Z", "N": "N", "Q": "Q", "C": "C"}[node.value]
    if op == "empty":
        return ""
    return op + "(" + ", ".join(to_text(arg) for arg in args) + ")"


def _wrap(node: Node, level: int) -> str:
    text = to_text(node)
    inner = _PRECEDENCE.get(node.op, 9)
    if node.op == "num" and node.value.value < 0:
        inner = 5
    return f"({text})" if inner < level else text


def _fraction(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _decimal(number: Number) -> str:
    value = number.value
    places = max(number.places or 0, 0)
    scaled = value * 10**places
    if scaled.denominator == 1:
        sign = "-" if scaled < 0 else ""
        digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
        return sign + (digits[:-places] + "." + digits[-places:] if places else digits)
    return _fraction(value)
