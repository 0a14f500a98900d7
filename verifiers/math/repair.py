"""Golds as public datasets store them, mended where a human reads them without doubt.

Only golds are mended: the dataset's damage is not the model's doing, and a gold refused is a row the user
loses. A response is never mended (a model that writes broken LaTeX is answered as it wrote it).

What is mended, and why each is safe:
- Escapes eaten by a JSON or Python string: `\\f` of `\\frac` read as a form feed leaves U+000C + "rac",
  `\\b` of `\\boxed` a backspace, `\\t` of `\\times` a tab, `\\r` of `\\right` a carriage return, `\\n` of
  `\\neq` a newline, `\\a` of `\\alpha` a bell, `\\v` of `\\vec` a vertical tab. Such a character followed by
  the rest of a LaTeX command's name (and not by another letter) becomes that command again; a real tab or
  newline is followed by something else and stays.
- Doubled backslashes from double-escaped JSON (`\\\\frac{1}{2}` as text): when every run of backslashes has
  an even length and one of them stands before a letter, each run is halved. A gold written properly has a
  single backslash before its commands, so this never touches one.
- A spacing command glued to the next letter (`\\quadx_{2}`, from one public dataset): a blank after it.
- An inequality followed by a colon and the same set as an interval (`x<-7:(-\\infty,-7)`, one public
  dataset's form): the interval, when the two agree (verifier.gold_value checks; when they disagree the gold is
  refused).
- An unbalanced end: a lone trailing backslash, and closing braces (`}` or `\\}`) at the end that close
  nothing, are dropped. An opening brace that is never closed is not guessed at: that gold stays a 422.
"""

from __future__ import annotations

import re

# The control character an eaten escape leaves, the letter it ate, and the commands that letter starts.
_EATEN = {
    "\x0c": ("f", ("frac", "forall")),
    "\x08": ("b", ("boxed", "binom", "beta", "bar", "bmatrix", "begin", "bigg", "big")),
    "\t": ("t", ("times", "tfrac", "textbf", "textrm", "text", "theta", "tilde", "tan", "tau", "to")),
    "\r": ("r", ("right", "rangle", "rfloor", "rceil", "rho", "rm")),
    "\x07": ("a", ("alpha", "approx", "angle", "arcsin", "arccos", "arctan", "ast")),
    "\x0b": ("v", ("vec", "varphi", "varepsilon", "vartheta", "vee", "vdots")),
    "\n": ("n", ("neq", "ne", "nu", "not", "nabla", "neg", "nleq", "ngeq")),
}


def _escape_pattern(characters: str) -> re.Pattern[str]:
    """The eaten escapes of `characters`, with the backslash a doubly escaped source may have left before one
    (`\\` + form feed + `rac`), and not followed by another letter."""
    alternatives = "|".join(
        re.escape(character)
        + "(?:"
        + "|".join(sorted((name[1:] for name in _EATEN[character][1]), key=len, reverse=True))
        + ")"
        for character in characters
    )
    return re.compile(r"\\?(?:" + alternatives + ")(?![A-Za-z])")


_ESCAPES = _escape_pattern("\x0c\x08\t\r\x07\x0b")
_ESCAPES_AND_NEWLINE = _escape_pattern("\x0c\x08\t\r\x07\x0b\n")
_CONDITION_THEN_SET = re.compile(
    r"(?P<condition>[^:]{1,400}(?:<|>|\\le|\\ge|\\leq|\\geq|\\leqslant|\\geqslant)[^:]{0,400}):\s*"
    r"(?P<set>[\[(].{1,400}[\])])"
)
_GLUED_SPACING = re.compile(r"(\\q?quad)(?=[A-Za-z])")
_BACKSLASH_RUN = re.compile(r"\\+")
_DOUBLED_COMMAND = re.compile(r"(?<!\\)(?:\\\\)+(?=[A-Za-z])")


def restore_escapes(text: str, newline: bool = False) -> str:
    """Eaten escapes turned back into their commands; a newline only when asked (a solution's lines are
    real newlines, so only a gold that does not parse has its "\\n" + "eq" read as \\neq)."""
    pattern = _ESCAPES_AND_NEWLINE if newline else _ESCAPES
    return pattern.sub(_restored, text)


def _restored(match: re.Match[str]) -> str:
    eaten = match.group().lstrip("\\")
    return "\\" + _EATEN[eaten[0]][0] + eaten[1:]


def condition_and_set(gold: str) -> tuple[str, str] | None:
    """(inequality, interval) of a gold written `x<-7:(-\\infty,-7)` (one public dataset's form), or None."""
    stated = _CONDITION_THEN_SET.fullmatch(gold.strip())
    return None if stated is None else (stated.group("condition"), stated.group("set"))


def repair_gold(text: str) -> str:
    """The gold with eaten escapes, doubled backslashes and an unbalanced end mended (see the module doc)."""
    text = restore_escapes(text, newline=True)
    text = _GLUED_SPACING.sub(r"\1 ", text)  # NuminaMath's "\\quadx_{2}": \\quad then x
    doubled = "\\\\" in text and _DOUBLED_COMMAND.search(text) is not None
    if doubled and all(len(run) % 2 == 0 for run in _BACKSLASH_RUN.findall(text)):
        text = _BACKSLASH_RUN.sub(lambda run: "\\" * (len(run.group()) // 2), text)
    return _mend_end(text)


def _mend_end(text: str) -> str:
    """Drop a lone trailing backslash and the closing braces at the end that close nothing."""
    text = text.rstrip()
    if text.endswith("\\") and not text.endswith("\\\\"):
        text = text[:-1].rstrip()
    depth, escaped = _depths(text)
    while True:
        if text.endswith("\\}") and escaped < 0:
            text, escaped = text[:-2].rstrip(), escaped + 1
        elif text.endswith("}") and not text.endswith("\\}") and depth < 0:
            text, depth = text[:-1].rstrip(), depth + 1
        else:
            return text


def _depths(text: str) -> tuple[int, int]:
    """(depth of `{`/`}`, depth of `\\{`/`\\}`) at the end of text: negative when more close than open."""
    depth = escaped = 0
    index = 0
    while index < len(text):
        character = text[index]
        if character == "\\" and index + 1 < len(text):
            following = text[index + 1]
            escaped += (following == "{") - (following == "}")
            index += 2
            continue
        depth += (character == "{") - (character == "}")
        index += 1
    return depth, escaped


# "\text{(1) } a_n=2n-1;\ \text{(2) } S_n=n^2": part numbers of a multi-part gold, at the start or after a
# separator. They name the parts; the values are what a response is compared with.
_PART_LABEL = re.compile(
    r"(?:^|(?<=[;,]))(?:\s|\\[ ,;:]|\\q?quad)*"
    r"(?:\\text(?:bf)?\s*\{\s*\(?(?:[1-9]|[a-h]|i{1,3}|iv)\)\s*\}|\((?:[1-9]|i{1,3}|iv)\)(?=\s))"
)


def drop_part_labels(gold: str) -> str:
    """A multi-part gold without its part numbers: `\\text{(1) } 3; \\text{(2) } 5` -> `3; 5`. At least two
    part numbers are needed: `(2) (x+2) (x-2)` is a product and `(1)` a value."""
    if len(_PART_LABEL.findall(gold)) < 2:  # "(2)(x+2)(x-2)": one leading "(2)" is a factor, not part 2
        return gold
    dropped = _PART_LABEL.sub("", gold).strip()
    return dropped or gold
