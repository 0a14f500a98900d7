"""Entry-point signatures of C, C++, Java, Go and Rust programs, and the token format the call harness speaks.

A small type grammar: int, long, double, bool, string, char (and byte), and arrays / vectors / lists / slices /
Vecs of those, nested one level (so `vector<vector<int>>` and `int[][]` are in, a map or a tree node is not).
Functions are found in the source with regular expressions over the text less its comments and string
literals (no compiler, nothing run): top-level functions, LeetCode-style `class Solution` methods (C++, Java)
and `impl Solution` functions (Rust). C takes LeetCode's C conventions: an array parameter `int* a` followed by
its length `int aSize`, and an array result through a trailing `int* returnSize`.

The harness and the judge exchange typed values as whitespace-separated tokens, so no language needs a JSON
parser: an integer in decimal, a double in shortest round-trip form, a bool as 1/0, a string as `x` and the hex
of its UTF-8 bytes, a char as its code point, a list as its length then its items. `encode` checks a JSON value
against a type (a mismatch raises `Mismatch` naming where), `decode` turns the harness's tokens back into plain
data.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

SCALARS = ("i32", "i64", "f64", "bool", "str", "char", "byte")
I32 = (-(2**31), 2**31 - 1)
I64 = (-(2**63), 2**63 - 1)
MAX_DEPTH = 2


class Unsupported(ValueError):
    """A signature the harness cannot call (a type outside the grammar, no such function)."""


class Mismatch(ValueError):
    """A JSON value that does not fit a parameter's type."""


@dataclass(frozen=True)
class Type:
    """A scalar kind, or a list of `elem`; `text` is the type as the source wrote it (without & and const)."""

    kind: str
    elem: Type | None = None
    text: str = ""
    flavor: str = ""  # Java: "array" or "list" for lists, "boxed" for Integer & co.

    def depth(self) -> int:
        """How many list levels."""
        return 0 if self.elem is None else 1 + self.elem.depth()

    def describe(self) -> str:
        """A language-neutral name: list[list[i32]]."""
        return self.kind if self.elem is None else f"list[{self.elem.describe()}]"


@dataclass(frozen=True)
class Param:
    """One parameter: its name, its type, and how it is passed (Rust: `&`, `&mut `; C: a length follows)."""

    name: str
    type: Type
    borrow: str = ""
    sized: bool = False  # C: an array parameter followed by its length


@dataclass(frozen=True)
class Signature:
    """A callable function: its name, parameters, result, and the class it belongs to (None: top level)."""

    name: str
    params: tuple[Param, ...]
    result: Type
    owner: str | None = None
    static: bool = True
    sized_result: bool = False  # C: an array result with a trailing `int* returnSize`

    def describe(self) -> str:
        """f(list[i32] nums, i32 target) -> list[i32]."""
        params = ", ".join(f"{p.type.describe()} {p.name}" for p in self.params)
        return f"{self.name}({params}) -> {self.result.describe()}"


# -- source text --------------------------------------------------------------------------------------

# An unclosed string ends at the end of its line (`\\?$`): were the match allowed to fail, each of many
# quotes on a line would rescan the rest of it, quadratic in the candidate's source.
_COMMENTS_STRINGS = re.compile(
    r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*(?:"|\\?$)|\'(?:\\.|[^\'\\\n]){1,8}\'|`[^`]*(?:`|\Z)',
    re.S | re.M,
)


def blank(source: str) -> str:
    """The source with comments and string/char literals blanked out (same length, so offsets still match)."""
    return _COMMENTS_STRINGS.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), source)


# A preprocessor line (continued by backslash-newline); it never fails to match, so the scan stays linear.
_DIRECTIVE = re.compile(r"^[ \t]*#(?:[^\n\\]|\\.)*", re.M | re.S)


def blank_directives(text: str) -> str:
    """C/C++ text with preprocessor lines blanked (same length): `#include <stdio.h>` right before a function
    would otherwise be read as part of its return type, and the function not found."""
    return _DIRECTIVE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)


def _depths(text: str) -> list[int]:
    depth_at, depth = [], 0
    for char in text:
        depth_at.append(depth)
        depth += (char == "{") - (char == "}")
    return depth_at


def _owners(text: str, depth_at: list[int], pattern: str) -> list[tuple[int, int, str]]:
    """(start, end, name) of each top-level block whose header matches `pattern` (group `name`)."""
    blocks = []
    for match in re.finditer(pattern, text):  # patterns bound their own repetition: no quadratic scans
        brace = match.end() - 1
        if depth_at[match.start()] != 0:
            continue
        end = brace
        while end < len(text) and not (text[end] == "}" and depth_at[end] == 1):
            end += 1
        blocks.append((brace, end, match.group("name")))
    return blocks


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside <> [] () brackets."""
    parts, depth, current = [], 0, []
    for char in text:
        if char in "<[(":
            depth += 1
        elif char in ">])":
            depth -= 1
        if char == sep and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current))
    return [p.strip() for p in parts]


MAX_PREFIX = 300
MAX_TYPE = 200
_ACCESS = re.compile(r"\b(?:public|private|protected)\s*:|@\w+(?:\([^()]{0,200}\))?")


def _headers(text: str, tail: str) -> Iterator[tuple[str, re.Match[str]]]:
    """(what precedes the name in its statement, the match) for every `name(params) <tail>{` in the text.

    Every repetition is bounded and the return type is read from a bounded window before the name, so a hostile
    source cannot make this quadratic."""
    pattern = re.compile(r"\b(?P<name>[A-Za-z_]\w*)\s{0,100}\((?P<params>[^()]{0,2000})\)" + tail)
    for match in pattern.finditer(text):
        start = match.start("name")
        window = text[max(0, start - MAX_PREFIX) : start]
        cut = max(window.rfind(";"), window.rfind("{"), window.rfind("}"), window.rfind(")"))
        prefix = _ACCESS.sub(" ", window[cut + 1 :])
        yield prefix, match


def _checked(found: Type | None, text: str) -> Type:
    if found is None:
        raise Unsupported(f"type {' '.join(text.split())!r} is outside the call harness's types")
    if found.depth() > MAX_DEPTH:
        raise Unsupported(f"type {' '.join(text.split())!r} nests lists deeper than {MAX_DEPTH}")
    return found


# -- C++ and C ------------------------------------------------------------------------------------------

_CPP_SCALARS = {
    "int": "i32",
    "long": "i64",
    "long long": "i64",
    "long int": "i64",
    "long long int": "i64",
    "int64_t": "i64",
    "int32_t": "i32",
    "double": "f64",
    "float": "f64",
    "bool": "bool",
    "string": "str",
    "char": "byte",
}


def cpp_type(text: str) -> Type | None:
    """A C++ type (const and & dropped; std:: optional)."""
    if len(text) > MAX_TYPE:
        return None
    clean = re.sub(r"\bconst\b|&", " ", text).replace("std::", "")
    clean = " ".join(clean.split())
    found = re.fullmatch(r"vector\s*<\s*(.*)\s*>", clean)
    if found:
        inner = cpp_type(found.group(1))
        return None if inner is None else Type("list", inner, clean)
    kind = _CPP_SCALARS.get(clean)
    return Type(kind, text=clean) if kind else None


_C_RESULT = re.compile(r"[A-Za-z_][\w\s\*]*[\s\*]")
_C_SCALARS = {k: v for k, v in _CPP_SCALARS.items() if k not in ("string",)}


def _c_scalar(text: str) -> tuple[str | None, int]:
    """(scalar kind, pointer depth) of a C type."""
    stars = text.count("*")
    base = " ".join(re.sub(r"\bconst\b|\*", " ", text).split())
    if base == "char" and stars >= 1:
        return "str", stars - 1
    return _C_SCALARS.get(base), stars


def _c_params(raw: str, array_result: bool) -> tuple[list[Param], bool]:
    """C parameters with LeetCode's conventions: (params, the result is an array with `int* returnSize`)."""
    parts = [p for p in _split_top(raw) if p and p != "void"]
    named = []
    for part in parts:
        found = re.fullmatch(r"(.*?[\s\*])([A-Za-z_]\w*)", part)
        if not found:
            raise Unsupported(f"parameter {part!r} has no name")
        named.append((found.group(1).strip(), found.group(2)))
    sized_result = array_result and bool(named) and re.fullmatch(r"int\s*\*", named[-1][0]) is not None
    if sized_result:
        named = named[:-1]
    params: list[Param] = []
    index = 0
    while index < len(named):
        text, name = named[index]
        kind, stars = _c_scalar(text)
        if kind is None or stars > 1:
            raise Unsupported(f"parameter {name} of type {text!r} is outside the call harness's C types")
        if stars == 1:
            follows = named[index + 1] if index + 1 < len(named) else None
            if follows is None or _c_scalar(follows[0]) != ("i32", 0):
                raise Unsupported(f"array parameter {name} must be followed by its length (int {name}Size)")
            params.append(Param(name, Type("list", Type(kind, text=kind), text), sized=True))
            index += 2
            continue
        params.append(Param(name, Type(kind, text=text)))
        index += 1
    return params, sized_result


def c_functions(source: str) -> list[Signature]:
    """The top-level C functions with a signature in the grammar (others are skipped)."""
    text = blank_directives(blank(source))
    depth_at = _depths(text)
    found = []
    for prefix, match in _headers(text, r"\s{0,100}\{"):
        if not _C_RESULT.fullmatch(prefix.lstrip()):
            continue
        ret = prefix.strip()
        if depth_at[match.start("name")] != 0 or ret in ("return", "else"):
            continue
        if match.group("name") in ("main", "if", "while", "for", "switch"):
            continue
        ret = re.sub(r"^\s*(static|inline|extern)\s+", "", ret)
        try:
            kind, stars = _c_scalar(ret)
            params, sized = _c_params(match.group("params"), stars == 1)
            if kind is None or stars > 1 or (stars == 1) != sized:
                raise Unsupported(f"result type {ret!r}")
            result = Type("list", Type(kind, text=kind), ret) if stars else Type(kind, text=ret)
        except Unsupported as exc:
            found.append(_unsupported(match.group("name"), match.group(0), exc))
            continue
        found.append(Signature(match.group("name"), tuple(params), result, sized_result=sized))
    return found


def _unsupported(name: str, header: str, why: Exception, owner: str | None = None) -> Signature:
    """A placeholder for a function whose signature is outside the grammar (kept to say why in errors)."""
    text = " ".join(header.rstrip("{").split())
    return Signature(name, (), Type("unsupported", text=text, flavor=str(why)), owner)


_CPP_RESULT = re.compile(r"[A-Za-z_][\w:<>,\s&\*]*[\s&\*>]")
_CPP_TAIL = r"\s{0,100}(?:const\s{0,100})?(?:noexcept\s{0,100})?(?:override\s{0,100})?\{"


def cpp_functions(source: str) -> list[Signature]:
    """Top-level functions and methods of top-level classes/structs (public or not) in C++."""
    text = blank_directives(blank(source))
    depth_at = _depths(text)
    classes = _owners(text, depth_at, r"\b(?:class|struct)\s+(?P<name>[A-Za-z_]\w*)[^;{}]{0,500}\{")
    found = []
    for prefix, match in _headers(text, _CPP_TAIL):
        if not _CPP_RESULT.fullmatch(prefix.lstrip()):
            continue
        start = match.start("name")
        owner = next((n for s, e, n in classes if s < start < e), None)
        if depth_at[start] != (1 if owner else 0) or match.group("name") in ("main", "if", "while", "for"):
            continue
        words = prefix.split()
        static = "static" in words
        ret = " ".join(w for w in words if w not in ("static", "inline", "virtual", "constexpr"))
        if ret in ("return", "else", "new"):
            continue
        try:
            params = []
            for part in _split_top(match.group("params")):
                if not part or part == "void":
                    continue
                named = re.fullmatch(r"(.*?[\s&\*>])([A-Za-z_]\w*)", part)
                if not named:
                    raise Unsupported(f"parameter {part!r}")
                params.append(Param(named.group(2), _checked(cpp_type(named.group(1)), named.group(1))))
            result = _checked(cpp_type(ret), ret)
        except Unsupported as exc:
            found.append(_unsupported(match.group("name"), match.group(0), exc, owner))
            continue
        found.append(Signature(match.group("name"), tuple(params), result, owner, static or owner is None))
    return found


# -- Java -------------------------------------------------------------------------------------------------

_JAVA_SCALARS = {
    "int": ("i32", ""),
    "long": ("i64", ""),
    "double": ("f64", ""),
    "float": ("f64", ""),
    "boolean": ("bool", ""),
    "char": ("char", ""),
    "String": ("str", ""),
    "Integer": ("i32", "boxed"),
    "Long": ("i64", "boxed"),
    "Double": ("f64", "boxed"),
    "Boolean": ("bool", "boxed"),
    "Character": ("char", "boxed"),
}


def java_type(text: str) -> Type | None:
    """A Java type: primitives, their boxes, String, T[] and List<T> (ArrayList built)."""
    if len(text) > MAX_TYPE:
        return None
    clean = "".join(text.replace("final", " ").split())
    if clean.endswith("[]"):
        inner = java_type(clean[:-2])
        return None if inner is None else Type("list", inner, clean, "array")
    found = re.fullmatch(r"(?:java\.util\.)?(?:List|ArrayList)<(.*)>", clean)
    if found:
        inner = java_type(found.group(1))
        if inner is None or (inner.elem is None and inner.flavor != "boxed" and inner.kind != "str"):
            return None
        return Type("list", inner, clean, "list")
    if clean in _JAVA_SCALARS:
        kind, flavor = _JAVA_SCALARS[clean]
        return Type(kind, text=clean, flavor=flavor)
    return None


_JAVA_MODIFIERS = ("public", "private", "protected", "static", "final", "synchronized", "abstract")
_JAVA_RESULT = re.compile(r"[A-Za-z_][\w.<>,\[\]\s]*\s")
_JAVA_TAIL = r"\s{0,100}(?:throws\s+[\w.]+(?:\s*,\s*[\w.]+){0,20}\s{0,100})?\{"


def java_functions(source: str) -> list[Signature]:
    """Methods of top-level classes in Java."""
    text = blank(source)
    depth_at = _depths(text)
    classes = _owners(text, depth_at, r"\bclass\s+(?P<name>[A-Za-z_]\w*)[^;{}]{0,500}\{")
    found = []
    for prefix, match in _headers(text, _JAVA_TAIL):
        if not _JAVA_RESULT.fullmatch(prefix.lstrip()):
            continue
        words = prefix.split()
        mods = [w for w in words if w in _JAVA_MODIFIERS]
        ret = " ".join(w for w in words if w not in _JAVA_MODIFIERS)
        start = match.start("name")
        owner = next((n for s, e, n in classes if s < start < e), None)
        if owner is None or depth_at[start] != 1 or not ret or ret in ("new", "return", "else"):
            continue
        if match.group("name") == "main":
            continue
        try:
            params = []
            for part in _split_top(match.group("params")):
                named = re.fullmatch(r"(?:final\s+)?(.*?)\s*\b([A-Za-z_]\w*)", part, re.S)
                if not named:
                    raise Unsupported(f"parameter {part!r}")
                params.append(Param(named.group(2), _checked(java_type(named.group(1)), named.group(1))))
            result = _checked(java_type(ret), ret)
        except Unsupported as exc:
            found.append(_unsupported(match.group("name"), match.group(0), exc, owner))
            continue
        static = "static" in mods
        found.append(Signature(match.group("name"), tuple(params), result, owner, static))
    return found


# -- Go -----------------------------------------------------------------------------------------------------

_GO_SCALARS = {
    "int": "i64",
    "int64": "i64",
    "int32": "i32",
    "float64": "f64",
    "float32": "f64",
    "bool": "bool",
    "string": "str",
    "byte": "byte",
    "rune": "char",
}


def go_type(text: str) -> Type | None:
    """A Go type: the scalars and slices of them."""
    if len(text) > MAX_TYPE:
        return None
    clean = "".join(text.split())
    if clean.startswith("[]"):
        inner = go_type(clean[2:])
        return None if inner is None else Type("list", inner, clean)
    kind = _GO_SCALARS.get(clean)
    return Type(kind, text=clean) if kind else None


_GO_FUNCTION = re.compile(
    r"^func\s+(?P<name>[A-Za-z_]\w*)\s{0,100}\((?P<params>[^()]{0,2000})\)\s{0,100}(?P<ret>[^{\n]{0,300}?)\s*\{",
    re.M,
)


def go_functions(source: str) -> list[Signature]:
    """Top-level Go functions (not methods)."""
    found = []
    for match in _GO_FUNCTION.finditer(blank(source)):
        name = match.group("name")
        if name in ("main", "init"):
            continue
        try:
            params: list[Param] = []
            pending: list[str] = []
            for part in _split_top(match.group("params")):
                pieces = part.split(None, 1)
                if len(pieces) == 1:  # `a, b int`: a name whose type comes with a later one
                    pending.append(pieces[0])
                    continue
                kind = _checked(go_type(pieces[1]), pieces[1])
                params.extend(Param(n, kind) for n in [*pending, pieces[0]])
                pending = []
            if pending:
                raise Unsupported("unnamed parameters")
            ret = match.group("ret").strip()
            if not ret:
                raise Unsupported("no result")
            result = _checked(go_type(ret), ret)
        except Unsupported as exc:
            found.append(_unsupported(name, match.group(0), exc))
            continue
        found.append(Signature(name, tuple(params), result))
    return found


# -- Rust ---------------------------------------------------------------------------------------------------

_RUST_SCALARS = {
    "i32": "i32",
    "i64": "i64",
    "usize": "i64",
    "u32": "i64",
    "u64": "i64",
    "isize": "i64",
    "f64": "f64",
    "f32": "f64",
    "bool": "bool",
    "String": "str",
    "char": "char",
    "u8": "byte",
}


def rust_type(text: str) -> tuple[Type | None, str]:
    """(type, how it is passed: '', '&' or '&mut ') of a Rust type; &str is a borrowed String, &[T] a
    borrowed Vec<T>."""
    if len(text) > MAX_TYPE:
        return None, ""
    clean = " ".join(text.split())
    borrow = ""
    if clean.startswith("&mut "):
        borrow, clean = "&mut ", clean[5:]
    elif clean.startswith("&"):
        borrow, clean = "&", clean[1:].strip()
    clean = re.sub(r"\s+", "", clean)
    if clean == "str" and borrow:
        return Type("str", text="String"), borrow
    found = re.fullmatch(r"Vec<(.*)>", clean) or (re.fullmatch(r"\[(.*)\]", clean) if borrow else None)
    if found:
        inner, inner_borrow = rust_type(found.group(1))
        if inner is None or inner_borrow:
            return None, borrow
        return Type("list", inner, f"Vec<{inner.text}>"), borrow
    kind = _RUST_SCALARS.get(clean)
    return (Type(kind, text=clean) if kind else None), borrow


_RUST_FUNCTION = re.compile(
    r"\bfn\s+(?P<name>[A-Za-z_]\w*)\s{0,100}(?:<[^<>]{0,200}>)?\s{0,100}\((?P<params>[^()]{0,2000})\)"
    r"\s{0,100}(?:->\s*(?P<ret>[^{;]{1,300}?))?\s{0,100}(?:where[^{;]{0,300})?\{"
)


def rust_functions(source: str) -> list[Signature]:
    """Top-level functions and the functions of a top-level `impl Name` block (LeetCode's `impl Solution`)."""
    text = blank(source)
    depth_at = _depths(text)
    impls = _owners(text, depth_at, r"\bimpl\s+(?P<name>[A-Za-z_]\w*)\s{0,100}\{")
    found = []
    for match in _RUST_FUNCTION.finditer(text):
        start = match.start("name")
        owner = next((n for s, e, n in impls if s < start < e), None)
        if depth_at[start] != (1 if owner else 0) or match.group("name") == "main":
            continue
        try:
            params = []
            for part in _split_top(match.group("params")):
                if re.fullmatch(r"&?\s*(mut\s+)?self", part):
                    raise Unsupported("a method taking self")
                named = re.fullmatch(r"(?:mut\s+)?([A-Za-z_]\w*)\s*:\s*(.*)", part, re.S)
                if not named:
                    raise Unsupported(f"parameter {part!r}")
                kind, borrow = rust_type(named.group(2))
                params.append(Param(named.group(1), _checked(kind, named.group(2)), borrow))
            ret = (match.group("ret") or "").strip()
            kind, borrow = rust_type(ret) if ret else (None, "")
            if borrow:
                raise Unsupported("a borrowed result")
            result = _checked(kind, ret or "()")
        except Unsupported as exc:
            found.append(_unsupported(match.group("name"), match.group(0), exc, owner))
            continue
        found.append(Signature(match.group("name"), tuple(params), result, owner))
    return found


FINDERS = {
    "c": c_functions,
    "cpp": cpp_functions,
    "java": java_functions,
    "go": go_functions,
    "rust": rust_functions,
}


def functions(language: str, source: str) -> dict[str, Signature]:
    """The program's callable functions by name (the first definition of a name wins; an unsupported one
    is kept as a placeholder of kind 'unsupported' so errors can name it)."""
    table: dict[str, Signature] = {}
    for signature in FINDERS[language](source):
        if signature.name not in table or table[signature.name].result.kind == "unsupported":
            table.setdefault(signature.name, signature)
            if table[signature.name].result.kind == "unsupported" and signature.result.kind != "unsupported":
                table[signature.name] = signature
    return table


def entry(language: str, source: str, name: str, owner: str | None = None) -> Signature:
    """The signature of `name` (a method of `owner` when given); Unsupported says why it cannot be called."""
    candidates = [
        s for s in FINDERS[language](source) if s.name == name and (owner is None or s.owner == owner)
    ]
    good = [s for s in candidates if s.result.kind != "unsupported"]
    if good:
        return good[0]
    if candidates:
        raise Unsupported(
            f"cannot call {candidates[0].result.text}: {candidates[0].result.flavor} (the call harness takes "
            "int, long, double, bool, string, char and lists of them, nested at most twice)"
        )
    where = f" in class {owner}" if owner else ""
    raise Unsupported(f"no function {name}{where} found in the program")


# -- tokens -----------------------------------------------------------------------------------------------


def encode(value: object, kind: Type, where: str = "value") -> list[str]:
    """The tokens of a JSON value as `kind`; Mismatch names where it does not fit."""
    if kind.kind == "list":
        if type(value) not in (list, tuple):
            raise Mismatch(f"{where}: expected a list for {kind.describe()}, got {type(value).__name__}")
        assert kind.elem is not None
        tokens = [str(len(value))]  # type: ignore[arg-type]
        for index, item in enumerate(value):  # type: ignore[arg-type]
            tokens.extend(encode(item, kind.elem, f"{where}[{index}]"))
        return tokens
    scalar = kind.kind
    if scalar in ("i32", "i64"):
        low, high = I32 if scalar == "i32" else I64
        if type(value) is not int or not low <= value <= high:
            raise Mismatch(f"{where}: expected an integer that fits {scalar}, got {_short(value)}")
        return [str(value)]
    if scalar == "f64":
        if type(value) not in (int, float) or not math.isfinite(value):  # type: ignore[arg-type]
            raise Mismatch(f"{where}: expected a number, got {_short(value)}")
        return [repr(float(value))]  # type: ignore[arg-type]
    if scalar == "bool":
        if type(value) is not bool:
            raise Mismatch(f"{where}: expected true or false, got {_short(value)}")
        return ["1" if value else "0"]
    if scalar == "str":
        if type(value) is not str:
            raise Mismatch(f"{where}: expected a string, got {_short(value)}")
        return ["x" + value.encode("utf-8", "surrogatepass").hex()]
    if scalar in ("char", "byte"):
        limit = 256 if scalar == "byte" else 0x110000
        if type(value) is not str or len(value) != 1 or ord(value) >= limit:
            raise Mismatch(f"{where}: expected a one-character string for {scalar}, got {_short(value)}")
        return [str(ord(value))]
    raise Mismatch(f"{where}: unsupported type {kind.describe()}")


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def decode(tokens: Iterator[str], kind: Type) -> object:
    """Plain data from the harness's tokens for a value of `kind`; ValueError when they do not parse."""
    token = next(tokens)
    if kind.kind == "list":
        size = int(token)
        if size < 0:
            raise ValueError("a negative length")
        assert kind.elem is not None
        return [decode(tokens, kind.elem) for _ in range(size)]
    if kind.kind in ("i32", "i64"):
        return int(token)
    if kind.kind == "f64":
        return float(token)
    if kind.kind == "bool":
        if token not in ("0", "1"):
            raise ValueError(f"a bool token {token!r}")
        return token == "1"
    if kind.kind == "str":
        if not token.startswith("x"):
            raise ValueError(f"a string token {token[:20]!r}")
        return bytes.fromhex(token[1:]).decode("utf-8", "replace")
    if kind.kind in ("char", "byte"):
        code = int(token)
        if kind.kind == "byte":
            code &= 0xFF
        if not 0 <= code < 0x110000:  # chr() would raise OverflowError past the C long range
            raise ValueError(f"a character code {token[:20]!r}")
        return chr(code)
    raise ValueError(f"unsupported type {kind.describe()}")


def json_fits(value: object, depth: int = 0) -> bool:
    """Whether a JSON value is in the typed languages' domain: numbers, bools, strings and lists of them,
    nested at most MAX_DEPTH deep (no objects, no nulls)."""
    if type(value) is list:
        return depth < MAX_DEPTH and all(json_fits(item, depth + 1) for item in value)
    return type(value) in (int, float, bool, str)
