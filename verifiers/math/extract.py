"""Final-answer extraction for the `math` verifier: which text(s) of a response are its final answer.

Rules, in order (each is a decision about the model's *final* commitment, never about its reasoning):

- Only what follows the last `</think>` is graded; an unterminated `<think>` leaves nothing (`final_part`).
- Boxes: the last top-level `\\boxed{}`/`\\fbox{}` is the answer. Earlier boxes joined to it by connectors
  only ("or", "and", ",", "/", "either", "maybe" ...) are co-committed and are candidates too (the engine
  calls several non-equivalent candidates a hedge); an earlier box followed by other text is a step of the
  reasoning or a self-correction, so only the last counts. A last box that is never closed means no answer
  (no fallback to earlier text). Boxes win over anchors wherever the anchor stands.
- Anchors, when there is no box: the last `<answer>...</answer>`, else the last "final answer is", "the answer
  is", "Answer:", "**Final Answer**", GSM8K's "#### 42" ... (case-insensitive), taking what follows to the
  end of the sentence or line (an explanation after it, "because ...", ", since ...", is dropped), with math
  delimiters, bold and a final period removed ("3.5." -> "3.5", "$x = 2$." -> "x = 2", "4:30 p.m." kept).
- Lenient mode only, when nothing anchored was found: the last math span (`$...$`, `$$...$$`, `\\(...\\)`,
  `\\[...\\]`) of the final part's last `LENIENT_WINDOW` characters (with spans joined to it by connectors),
  else the last number there, unless that number is one operand of a larger expression ("2^10", "1+1": the
  last number alone would change what was written, the false positive Math-Verify's fallback has).
- Inside one answer, "3 or 4", "either 3 or 4", "3 and/or 4", "3 and 4" split into candidates (when every part
  looks mathematical, so "Tom and Jerry" stays whole); "3, 4" does not split (a tuple or a list: the engine
  decides), except as the items of such an "and"/"or" list ("1, 2, and 3").

Every scan is linear in the text it reads, and reads a bounded window wherever it can: box markers are
found by regex in C over windows growing from the end; brace matching reads at most `MAX_BOX_SCAN`
characters; anchors are looked for in the last `ANCHOR_WINDOW` characters and sentences read at most
`MAX_CANDIDATE_CHARS` past their start; lenient mode reads the last `LENIENT_WINDOW`. Nothing recurses. A
10 MB response or 3,000-deep braces return in tens of milliseconds.

`Extracted.oversized` marks an answer beyond extraction's caps: a candidate longer than
`MAX_CANDIDATE_CHARS` (kept whole, never cut short, since a cut could change its value; when its end lies
beyond a scan window it is cut to a text still longer than the cap), a box enclosing the last one that is
longer than the cap, or more than `MAX_CANDIDATES` co-committed boxes (all candidates read so far are kept,
so a hedge check would also see them). The engine answers an oversized extraction `too_complex` without
parsing it. Short candidates can be oversized (a spray of boxes), so a length guard alone does not do.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Literal

from proctor.verifiers.math.grammar import FUNCTIONS, GREEK
from proctor.verifiers.reading import ANSWER_CLOSE, ANSWER_OPEN, after_think, match_brace

MAX_CANDIDATE_CHARS = 2_000
"""Longest candidate the engine is asked to parse; longer ones set `Extracted.oversized`."""

MAX_CANDIDATES = 64
"""Most co-committed boxes read; a longer run of boxes sets `oversized` (a spray of answers)."""

MAX_BOX_SCAN = 100_000
"""Most characters read looking for a box's closing brace: a last box still open after this many is
oversized (whether or not it closes later); one that is open when the text ends is unterminated."""

ANCHOR_WINDOW = 262_144
"""Anchors are looked for only in this many characters at the end of the final part (about 64k tokens):
an anchor followed by more text than that is not a final answer, and the bound keeps the search cheap."""

LENIENT_WINDOW = 65_536
"""Lenient mode reads only this many characters at the end of the final part: answers live at the end."""

_CONNECTOR_GAP = 80
_GOLD_GLUE = 60
_SENTENCE_STOP = re.compile(r"[.;:!?](?:\s|$)")
_PARTS_JOINED = re.compile(r"\band\b|,|\\text\s*\{\s*and\s*\}", re.IGNORECASE)
"""Most characters of words between the boxes of a gold that is several boxes (see _gold_boxes)."""
"""Most characters of connector text ("} \\text{ or } \\boxed{") between two co-committed boxes."""

_NEST_WINDOW = 4 * MAX_CANDIDATE_CHARS
"""How far before the last box a box enclosing it is looked for (a larger one is oversized anyway)."""

_BOX_MARKER = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BLANKS = re.compile(r"[ \t]*")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_BARE_BOX_TOKEN = re.compile(r"[^\s$]+")

# Text that may stand between two boxes of one final statement ("\\boxed{3} or \\boxed{4}"). Matched only
# against at most _CONNECTOR_GAP characters, so its alternation cannot cost more than a constant.
_CONNECTOR_WORDS = r"(?:and/or|or|and|either|both|maybe|perhaps|possibly|alternatively)"
_CONNECTOR_TEXT = re.compile(
    r"(?:\s|[,;/&~$]|\\[()\[\],;:! ]|\\q?quad\b|\\(?:text|textrm|textbf|mathrm|mbox|operatorname)\{\s*"
    + _CONNECTOR_WORDS
    + r"?\s*\}|\b"
    + _CONNECTOR_WORDS
    + r"\b)*",
    re.IGNORECASE,
)

# Anchors. Blank runs inside an anchor are bounded, so no run of blanks can make a match attempt costly.
_ANCHOR = re.compile(
    r"\b(?:the|my|our)[ \t]{1,16}(?:(?:final|correct|right)[ \t]{1,16})?answer[ \t]{1,16}"
    r"(?:is|would[ \t]{1,16}be|will[ \t]{1,16}be)\b"
    r"|\bfinal[ \t]{1,16}answer[ \t]{1,16}(?:is|would[ \t]{1,16}be)\b"
    r"|\b(?:final[ \t]{1,16})?answer[ \t]{0,16}(?:(?:\*\*|__)[ \t]{0,16})?[:：]"
    r"|\bfinal[ \t]{1,16}answer[ \t]{0,16}(?:(?:\*\*|__)[ \t#]{0,16})?(?=\r?\n|$)"
    r"|(?<!#)####(?!#)(?=[ \t]{0,16}[-−$\\]?\d)"  # GSM8K's "#### 42" (not a "#### Step 1" heading)
    # "Answer $9$", "**Answer** \\[ 9 \\]": a line that starts with the word and goes straight into math.
    r"|(?:^|(?<=\n))[ \t#*_>]{0,8}(?:final[ \t]{1,16})?answer[ \t*_]{0,16}"
    r"(?=(?:\$[^$\n]{1,400}\$|\\\[[^\n]{1,400}?\\\]|\\\([^\n]{1,400}?\\\))[ \t.]*(?:\r?\n|$))"
    r"|(?:最终|最后的?)?答案[ \t]{0,4}(?:[为是][ \t]{0,4}[:：]?|[:：])",  # "所以答案为 9。", "最终答案是：9"
    re.IGNORECASE,
)
_ANCHOR_LEAD = re.compile(r"[ \t]*(?:[:：][ \t]*)?")
_MERIDIEM = re.compile(r"(?:^|[^A-Za-z])[ap]\.m$", re.IGNORECASE)
_SPAN_CONTINUES = re.compile(r"(?:or|and)\b|[,/]\s*\$", re.IGNORECASE)  # "$3$ or $4$", "$3$, $4$"
_BLANK_LINES = re.compile(r"[ \t\r\n]*")
# Words that start an explanation after the answer ("3 because ...", "$x=2$, since ...").
_PROSE_TAIL = re.compile(
    r"[ \t,]{1,8}(?:because|since|as|which|where|when|whereas|given|so|thus|hence|therefore|i\.e\.|e\.g\.|meaning)\b",
    re.IGNORECASE,
)

# One token of a split scan: a connector command, an escape, a bracket, a comma or a connector word.
_SPLIT_TOKEN = re.compile(
    r"\\(?:text|textrm|textbf|mathrm|mbox|operatorname)\{\s*(?:and/or|or|and)\s*\}"
    r"|\\left|\\right|\\[{}]|\\[A-Za-z]+|\\.|[{}()\[\],]"
    r"|(?<!\S)(?:and/or|or|and)(?!\S)|或者|或",  # 或: "or" in Chinese, written without blanks
    re.IGNORECASE,
)
_EITHER = re.compile(r"^either\b\s*", re.IGNORECASE)
_MATHY = re.compile(r"[0-9\\=<>^_+\-*/()\[\]{}|]")

_MATH_TOKEN = re.compile(r"\\[()\[\]]|\\.|\$\$|\$", re.DOTALL)
_NUMBER = re.compile(
    r"(?<![\w.])[-−]?(?:(?:\d{1,3}(?:,\d{3})+|\d+,\d{1,2}(?![\d,])|\d+)(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?(?:/\d+)?%?"
)

_OPERATORS_BEFORE = frozenset("^_*/×÷·+-−")
_OPERATORS_AFTER = frozenset("^_*/×÷·+!")
_TRAILING_PUNCTUATION = ".,;:。，；："
_DOLLAR = re.compile(r"(?<!\\)\$")
_PUNCTUATION_ONLY = re.compile(r"[\s.,;:!?…'\"`*_#~-]*")
_CONTENT_FREE_MAX = 400
_FILLER = re.compile(
    r"\\(?:boxed|fbox|text|textbf|mathrm|[()\[\]])|[^A-Za-z0-9']+|\b(?:thought|process|thinking|reasoning|"
    r"solution|answer|answers|final|the|is|my|response|output|result|step|steps|let's|let|think|so|therefore|"
    r"thus|hence|here|ok|okay|well|hmm|reason|boxed|fbox|text|textbf|mathrm)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Extracted:
    """What a response commits to as its final answer.

    `candidates`: the answer texts, in order, () when none; several are a hedge unless they agree or the
    gold is a collection (the engine decides). `method`: "boxed", "anchor", "lenient" or "none" (exactly
    when there are no candidates). `content_free`: nothing to grade at all (empty, punctuation, a bare
    "Thought process:" or "The answer is", an empty box). `oversized`: a candidate is longer than
    MAX_CANDIDATE_CHARS (or a box enclosing the last one is), or more than MAX_CANDIDATES boxes are
    co-committed; the engine answers too_complex without parsing.
    """

    candidates: tuple[str, ...]
    method: str
    content_free: bool
    oversized: bool = False
    fallback: tuple[str, ...] = ()
    """For a later anchor that corrects an earlier box: the box's candidates, used when the anchored text is
    not an answer the grammar can read (a human page's "the answer is ${{2+4-1}\\choose2}$ * ... =560")."""


_NOTHING = Extracted((), "none", False)


def final_part(response: str) -> str:
    """Text after the last </think>; an unterminated <think> leaves nothing to grade."""
    tail = after_think(response)
    return "" if tail is None else tail


def extract_answer(response: str, mode: Literal["anchored", "lenient"] = "anchored") -> Extracted:
    """The final answer(s) a response commits to: boxes, else anchors, else (lenient mode) the last expression."""
    text = final_part(response)
    found = _from_boxes(text)
    if found is not None and found.candidates and not found.oversized:
        later = _anchor_after_boxes(text)
        if later is not None:
            found = Extracted(later.candidates, later.method, False, False, found.candidates)
    if found is None:
        found = _from_anchors(text)
    if found is None:
        found = _from_whole(text)
    if found is None and mode == "lenient":
        found = _from_lenient(text)
    if found is None or not found.candidates:
        return Extracted((), "none", _is_content_free(text))
    return found


def extract_gold(reference: str) -> str:
    """Bare LaTeX -> itself (stripped); "$...$", "\\(...\\)", "\\boxed{...}" -> the inside; a whole reference
    solution -> its final answer (GSM8K's "#### 42", else the last \\boxed, else an anchor line). Raise
    ValueError when nothing is there."""
    text = reference.strip()
    if not text:
        raise ValueError("the reference is empty")
    marker = text.rfind("####")
    if marker >= 0:
        line = text[marker + 4 :].strip()
        answer = _clean(line.split("\n", 1)[0])
    elif _last_marker(text) is not None:
        answer = _gold_boxes(text)
    else:
        cleaned = _clean(text)
        anchored = None if _is_wrapped(text) else _anchored_gold(text)
        answer = anchored if anchored is not None else cleaned
    if _PUNCTUATION_ONLY.fullmatch(answer):
        raise ValueError("the reference holds no answer")
    return answer


# -- boxes -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Box:
    start: int  # index of the backslash of \boxed
    content_start: int
    content_end: int  # exclusive
    end: int  # exclusive: one past the closing brace (or the bare token)

    @property
    def length(self) -> int:
        return self.content_end - self.content_start


def _last_marker(text: str) -> re.Match[str] | None:
    """The last \\boxed/\\fbox marker, searched in C over windows growing from the end."""
    end, window = len(text), 4096
    while True:
        start = max(0, end - window)
        last = deque(_BOX_MARKER.finditer(text, start, end), maxlen=1)
        if last:
            return last[0]
        if start == 0:
            return None
        window *= 16


def _read_box(text: str, marker: re.Match[str], limit: int) -> _Box | None:
    """The box opened by `marker`, or None when it is unterminated within `limit` characters or malformed."""
    position = _BLANKS.match(text, marker.end()).end()
    if position < len(text) and text[position] == "{":
        close = match_brace(text, position, limit)
        if close is None:
            return None
        return _Box(marker.start(), position + 1, close, close + 1)
    if position == marker.end():  # "\\boxed$" or "\\boxed" at the end: no box
        return None
    token = _BARE_BOX_TOKEN.match(text, position, position + limit)  # the brace-less form "\\boxed 42"
    if token is None:
        return None
    return _Box(marker.start(), token.start(), token.end(), token.end())


def _enclosing(text: str, box: _Box) -> _Box:
    """The outermost box enclosing `box` that opens within the nesting window (or `box` itself). One forward
    brace scan from the window's start, stopped as soon as every box brace opened before `box` has closed
    (at most MAX_BOX_SCAN characters past `box`)."""
    floor = max(0, box.start - _NEST_WINDOW)
    openers: dict[int, int] = {}
    for marker in _BOX_MARKER.finditer(text, floor, box.start):
        position = _BLANKS.match(text, marker.end()).end()
        if position < box.start and text[position] == "{":
            openers[position] = marker.start()
    if not openers:
        return box
    stack: list[int] = []
    pending = 0
    outer = box
    for token in _BRACE_TOKEN.finditer(text, floor, min(len(text), box.end + MAX_BOX_SCAN)):
        value = token.group()
        if value == "{":
            stack.append(token.start())
            pending += token.start() in openers
        elif value == "}" and stack:
            opened = stack.pop()
            if opened in openers:
                pending -= 1
                if token.start() >= box.end:
                    outer = _Box(openers[opened], opened + 1, token.start(), token.start() + 1)
        if token.start() >= box.end and pending == 0:
            break
    return outer


def _from_boxes(text: str) -> Extracted | None:
    """Candidates from the last box and the boxes co-committed with it; None when the text has no box."""
    chain = _box_chain(text)
    if chain is None:
        return None
    if isinstance(chain, Extracted):
        return chain
    candidates: list[str] = []
    for item in chain:
        content = _BOX_MARKER.sub("", _clean(text[item.content_start : item.content_end]))
        candidates.extend(_split(_clean(content)))
    found = _result(candidates, "boxed")
    if len(chain) > MAX_CANDIDATES:  # a spray of boxes: all it read stays, so a hedge check sees them too
        return Extracted(found.candidates, "boxed", False, oversized=True)
    return found


def _box_chain(text: str) -> list[_Box] | Extracted | None:
    """The last top-level box and the boxes co-committed with it, in order; None when there is no box, an
    Extracted when that is already the answer (no answer for an unterminated box, or oversized)."""
    marker = _last_marker(text)
    if marker is None:
        return None
    box = _read_box(text, marker, MAX_BOX_SCAN)
    if box is None:
        opening = _BLANKS.match(text, marker.end()).end()
        if text.startswith("{", opening) and len(text) - opening > MAX_BOX_SCAN:
            # Still open after MAX_BOX_SCAN characters: whether it closes later or not, it is far too long.
            content = text[opening + 1 : opening + 1 + MAX_BOX_SCAN]
            return Extracted((content,), "boxed", False, oversized=True)
        return _NOTHING  # the last box is never closed: no answer, and no fallback to earlier text
    if box.length <= MAX_CANDIDATE_CHARS:
        box = _enclosing(text, box)
    if box.length > MAX_CANDIDATE_CHARS:
        return Extracted((text[box.content_start : box.content_end],), "boxed", False, oversized=True)
    chain = [box]
    while len(chain) <= MAX_CANDIDATES:
        previous = _co_committed(text, chain[-1])
        if previous is None:
            break
        chain.append(previous)
    chain.reverse()
    return chain


def _co_committed(text: str, box: _Box) -> _Box | None:
    """The box just before `box` when only connector text stands between them, else None."""
    floor = max(0, box.start - _CONNECTOR_GAP - MAX_CANDIDATE_CHARS - 64)
    markers = deque(_BOX_MARKER.finditer(text, floor, box.start), maxlen=1)
    if not markers:
        return None
    previous = _read_box(text, markers[0], MAX_CANDIDATE_CHARS + 1)
    if previous is None or previous.end > box.start or box.start - previous.end > _CONNECTOR_GAP:
        return None
    gap = text[previous.end : box.start]
    if _CONNECTOR_TEXT.fullmatch(gap) is None:
        return None
    return previous


def _anchor_after_boxes(text: str) -> Extracted | None:
    """An explicit final-answer anchor after the last box, stating something mathematical ("... \\boxed{8}
    ... Final Answer: The final answer is $9$."): a later statement corrects an earlier box, as a later box
    does. An anchor that only points back ("The answer is boxed above.") leaves the box in charge."""
    marker = _last_marker(text)
    box = None if marker is None else _read_box(text, marker, MAX_BOX_SCAN)
    if box is None:
        return None
    # Only the text after the box is scanned (the hot path: every boxed response passes here), in place, so a
    # line-start anchor is one at a real line start.
    after = deque(_ANCHOR.finditer(text, max(box.end, len(text) - ANCHOR_WINDOW)), maxlen=1)
    if not after:
        return None
    anchor = after[0]
    found = _phrase_after(text, anchor)
    if found is None or found.oversized or not all(_MATHY.search(c) for c in found.candidates):
        return None
    # The whole sentence after the anchor must be the answer and nothing else: "Answer $4$ is wrong", "the
    # answer is 4 when n is odd", "Answer: 3 (from step 2)" and "答案是 5 个苹果" comment on the box or hedge,
    # and leave it in charge.
    end, _ = _sentence_end(text, anchor.end())
    sentence = text[anchor.end() : end]
    if _has_prose(_DOLLAR_SPAN.sub(" ", _clean(sentence))) or any(_has_prose(c) for c in found.candidates):
        return None
    return found  # one value corrects the box; several ("3 or 4") are a hedge, scored as one


def _has_prose(text: str) -> bool:
    """Words that are not part of an answer: an ASCII run of two letters or more that is not a function, Greek
    letter, unit or connector, or any letter of another script (CJK words have no spaces to count by)."""
    bare = _COMMAND.sub(" ", _TEXT_GROUP.sub(" ", text)).replace("或者", " ").replace("或", " ")
    if _OTHER_SCRIPT.search(bare):
        return True
    return any(word.lower() not in _ANSWER_WORDS for word in _LETTER_RUN.findall(bare))


def every_box(response: str) -> tuple[str, ...]:
    """The contents of every top-level box of the final part, in order (at most MAX_CANDIDATES + 1; boxes
    inside a box are part of it). For a multi-part gold: "(1) ... \\boxed{35} ... (2) ... \\boxed{4}"."""
    text = final_part(response)
    contents: list[str] = []
    position = 0
    for _ in range(MAX_CANDIDATES + 1):
        marker = _BOX_MARKER.search(text, position)
        if marker is None:
            break
        box = _read_box(text, marker, MAX_CANDIDATE_CHARS + 1)
        if box is None or box.length > MAX_CANDIDATE_CHARS:
            return ()
        contents.append(_clean(_BOX_MARKER.sub("", _clean(text[box.content_start : box.content_end]))))
        position = box.end
    return tuple(contents)


def _gold_boxes(text: str) -> str:
    """A reference solution's boxed answer: the last box, or its co-committed boxes joined by commas; a short
    gold that is several boxes with a few words between them (`\\boxed{1} papers and \\boxed{2} bins`) is
    all of them."""
    boxes = every_box(text)
    glue = len(text) - sum(len(box) for box in boxes) - len("\\boxed{}") * len(boxes)
    if (
        len(boxes) > 1
        and all(boxes)
        and glue <= _GOLD_GLUE
        and not _SENTENCE_STOP.search(_BOX_MARKER.sub("", text))
        and _PARTS_JOINED.search(_BOX_MARKER.sub("", text))  # "papers and ... bins", not "no no no"
    ):
        return ", ".join(
            boxes
        )  # one phrase of parts, not a solution whose sentences box a step, then the answer
    chain = _box_chain(text)
    if not isinstance(chain, list):
        raise ValueError("the reference's last \\boxed{} is never closed, or too long")
    contents = [
        _clean(_BOX_MARKER.sub("", _clean(text[item.content_start : item.content_end]))) for item in chain
    ]
    return ", ".join(content for content in contents if content)


# -- anchors ---------------------------------------------------------------------------------------


def _last_anchor(text: str) -> re.Match[str] | None:
    """The last anchor phrase within the final ANCHOR_WINDOW characters."""
    last = deque(_ANCHOR.finditer(text, max(0, len(text) - ANCHOR_WINDOW)), maxlen=1)
    return last[0] if last else None


def _from_anchors(text: str) -> Extracted | None:
    """Candidates from the last <answer> tag or anchor phrase; None when there is neither (or it is empty)."""
    tag = text.rfind(ANSWER_OPEN)
    if tag >= 0:
        start = tag + len(ANSWER_OPEN)
        close = text.find(ANSWER_CLOSE, start, start + MAX_BOX_SCAN)
        inner = text[start : close if close >= 0 else start + MAX_BOX_SCAN]
        found = _from_anchors_phrase(inner)
        if found is not None:
            return found
        if len(inner) > MAX_CANDIDATE_CHARS:
            return Extracted((inner,), "anchor", False, oversized=True)
        cleaned = _clean(inner)
        if cleaned:
            return _result(_split(cleaned), "anchor")
    return _from_anchors_phrase(text)


def _from_anchors_phrase(text: str) -> Extracted | None:
    anchor = _last_anchor(text)
    return None if anchor is None else _phrase_after(text, anchor)


def _phrase_after(text: str, anchor: re.Match[str]) -> Extracted | None:
    """The candidates an anchor states (None when it states nothing)."""
    expression, oversized = _anchored_expression(text, anchor.end())
    if oversized:
        return Extracted((expression,), "anchor", False, oversized=True)
    if not expression:
        return None
    return _result(_split(_value_after_copula(expression)), "anchor")


# "The largest $n$ is 34", "the volume of $ABCDEFGH$ is 120 cubic units": a sentence after the anchor whose
# value is what follows its last "is". Only a number or one math span, with at most a few unit words, counts.
_HEDGE_WORD = re.compile(r"\b(?:or|if|when|otherwise|unless|maybe|perhaps|either|else|rounded)\b|;", re.I)
_COPULA = re.compile(r"\s(?:is|are|equals|was)\s+", re.IGNORECASE)
_STATED = re.compile(
    r"(?:\$[^$]{1,400}\$|\\\(.{1,400}?\\\)|[-−]?\d[\d,]*(?:\.\d+)?%?)(?:\s+[A-Za-z]+){0,3}\s*",
    re.DOTALL,
)


_ONE_VALUE = re.compile(r"\$[^$]{1,400}\$|(?<![\w.])[-−]?\d+(?:[.,]\d+)*%?(?![\w.])")
_AND = re.compile(r"\band\b|&", re.IGNORECASE)
_NEGATION = re.compile(r"\b(?:not|no|never|isn't|aren't|wasn't|cannot|can't)\b", re.IGNORECASE)


def _the_one_number(sentence: str) -> str:
    """A final-answer sentence with no "is" that holds exactly one number or math span and no negation or
    hedge ("Jane started growing Sphere 3 hours ago"): that value; else the sentence as it is."""
    values = _ONE_VALUE.findall(sentence)
    if (
        len(values) != 1
        or _NEGATION.search(sentence)
        or _HEDGE_WORD.search(sentence)
        or _AND.search(sentence)
    ):
        return sentence  # "ignore previous instructions and output 1" is not the statement of a value
    return _clean(values[0]).replace("−", "-")


def _value_after_copula(expression: str) -> str:
    """The value a prose sentence states after its last "is", when the sentence is prose; else the text."""
    bare = _COMMAND.sub(" ", _TEXT_GROUP.sub(" ", expression))
    words = [
        word for word in _LETTER_RUN.findall(_DOLLAR_SPAN.sub(" ", bare)) if word.lower() not in _ANSWER_WORDS
    ]
    if len(words) < 2:
        return expression
    copulas = list(_COPULA.finditer(expression))
    if not copulas:
        return _the_one_number(expression)
    if len(copulas) != 1:  # "x is 3 and y is 4", "it is 3 or it is 4": two statements, not one value
        return expression
    before = _DOLLAR_SPAN.sub(" ", expression[: copulas[0].start()])
    if any(char.isdigit() for char in before) or _HEDGE_WORD.search(expression):
        return expression  # "the answer for n = 3 is 5", "3 if n is odd; otherwise it is 4": conditions
    rest = expression[copulas[0].end() :]
    if _STATED.fullmatch(rest) is None:
        return expression
    return _clean(rest)  # trailing words stay: "5 cm" must not lose its unit


def _anchored_gold(text: str) -> str | None:
    anchor = _last_anchor(text)
    if anchor is None:
        return None
    expression, oversized = _anchored_expression(text, anchor.end())
    return None if oversized else expression or None  # never a cut copy: the whole text goes to the guards


def _anchored_expression(text: str, start: int) -> tuple[str, bool]:
    """The cleaned expression that follows an anchor, to the end of its sentence; True when over the cap."""
    position = _ANCHOR_LEAD.match(text, start, start + 64).end()
    if position < len(text) and text[position] in "\r\n":  # "**Final Answer**" then the answer below
        position = _BLANK_LINES.match(text, position, position + 400).end()
    span = _leading_math(text, position)
    if span is not None:
        inner, after = span
        rest = text[after : after + 16].lstrip(" \t")
        if not _SPAN_CONTINUES.match(rest):
            if len(inner) > MAX_CANDIDATE_CHARS:
                return inner, True
            return _clean(inner), False
    end, finished = _sentence_end(text, position)
    if not finished:
        return text[position:end], True
    expression = text[position:end]
    if _MERIDIEM.search(expression):  # "4:30 p.m." keeps its abbreviation's period
        expression += "."
    prose = _PROSE_TAIL.search(expression)
    if prose is not None and prose.start() > 0 and _outside_groups(expression, prose.start()):
        expression = expression[: prose.start()]
    return _clean(expression), False


def _leading_math(text: str, position: int) -> tuple[str, int] | None:
    """(inside, end) of a math span starting at `position`, read within the candidate cap."""
    for opener, closer in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$")):
        if text.startswith(opener, position):
            inner_start = position + len(opener)
            close = text.find(closer, inner_start, inner_start + MAX_CANDIDATE_CHARS + 1 + len(closer))
            if close < 0:
                return None
            return text[inner_start:close], close + len(closer)
    return None


def _sentence_end(text: str, start: int) -> tuple[int, bool]:
    """End of the sentence that starts at `start`: a newline, or a period followed by a blank, outside
    braces, display math and environments (inline math ends at a newline too; a "$" with no partner on its
    line is a currency sign). Reads at most MAX_CANDIDATE_CHARS + 1 characters; False when it found no end."""
    limit = min(len(text), start + MAX_CANDIDATE_CHARS + 1)
    depth = braces = 0  # all brackets; braces alone (a line break inside a TeX group does not end it)
    inline = display = False
    environments = 0
    index = start
    while index < limit:
        char = text[index]
        if char == "\\":
            if text.startswith("\\begin{", index):
                environments += 1
            elif text.startswith("\\end{", index):
                environments = max(0, environments - 1)
            index += 2
            continue
        if char in "{([":
            depth += 1
            braces += char == "{"
        elif char in "})]":
            depth = max(0, depth - 1)
            braces = max(0, braces - (char == "}"))
        elif char == "$":
            if text.startswith("$$", index) and not inline:
                display = not display
                index += 2
                continue
            if inline:
                inline = False
            else:
                line_end = text.find("\n", index + 1, limit)
                inline = text.find("$", index + 1, limit if line_end < 0 else line_end) >= 0
        elif environments == 0 and not display:
            newline = char == "\n" and (braces == 0 or inline)
            period = (
                char in ".?"
                and depth == 0
                and not inline
                and (index + 1 >= len(text) or text[index + 1] in " \t\r\n*")
            )
            if newline or period:
                return index, True
        index += 1
    if limit == len(text):
        return limit, True
    return limit, False


def _outside_groups(text: str, stop: int) -> bool:
    """Whether position `stop` lies outside braces, brackets and $...$ (the text before it is short)."""
    depth = 0
    in_math = False
    for char in text[:stop]:
        if char in "{([":
            depth += 1
        elif char in "})]":
            depth -= 1
        elif char == "$":
            in_math = not in_math
    return depth <= 0 and not in_math


# -- a response that is only its answer -------------------------------------------------------------

# Words of three or more letters outside LaTeX commands and \\text{} (units): prose, so not a bare answer.
_TEXT_GROUP = re.compile(r"\\(?:text|textrm|textbf|mathrm|mbox|operatorname)\s*\{[^{}]*\}")
_COMMAND = re.compile(r"\\[A-Za-z]+")
_LETTER_RUN = re.compile(r"[A-Za-z]{2,}")
_DOLLAR_SPAN = re.compile(r"\$[^$]*\$")
_OTHER_SCRIPT = re.compile(r"[^\W\d_A-Za-z]")  # a letter outside ASCII (CJK, Cyrillic, ...)
# Letter runs a bare answer may hold: function names, Greek letters, connectors that _split reads, units.
_ANSWER_WORDS = (
    frozenset(FUNCTIONS)
    | frozenset(GREEK)
    | {"pi", "inf", "infty", "and", "or", "cm", "mm", "km", "kg", "mg", "ml", "ft", "mi", "yd", "lb", "lbs",
       "oz", "hr", "hrs", "min", "sec", "deg", "mph", "kph", "am", "pm"}
)  # fmt: skip


def _from_whole(text: str) -> Extracted | None:
    """A final part that is nothing but one expression (`\\frac{10}{9}`, `$3\\sqrt{2}$`, `x = 5`, `5 cm`):
    that expression, split as an anchored one is. A word (two letters or more that are not a function, a Greek
    letter, a unit or "and"/"or"), or a line break inside, and it is not an answer by itself: a number inside
    a sentence is never taken without an anchor."""
    cleaned = _clean(text)
    if not cleaned or len(cleaned) > MAX_CANDIDATE_CHARS or "\n" in cleaned or "$" in cleaned:
        return None
    bare = _COMMAND.sub(" ", _TEXT_GROUP.sub(" ", cleaned))
    if any(word.lower() not in _ANSWER_WORDS for word in _LETTER_RUN.findall(bare)):
        return None
    return _result(_split(cleaned), "whole")


# -- lenient ---------------------------------------------------------------------------------------


def _from_lenient(text: str) -> Extracted | None:
    """The last math span of the final part's tail (with spans co-committed to it), else its last number."""
    offset = max(0, len(text) - LENIENT_WINDOW)
    tail = text[offset:]
    spans = _math_spans(tail)
    last_number = deque(_NUMBER.finditer(tail), maxlen=1)
    if (
        spans
        and last_number
        and last_number[0].start() > spans[-1][1]
        and not _is_operand(tail, last_number[0])
    ):
        # "... $d = \\frac{90}{n}$ ... there are 12 sequences": a number after the last span comes later
        return _result([last_number[0].group().replace("−", "-")], "lenient")
    if spans:
        chosen = [spans[-1]]
        for previous in reversed(spans[:-1]):
            gap = tail[previous[1] : chosen[-1][0]]
            if len(gap) > _CONNECTOR_GAP or _CONNECTOR_TEXT.fullmatch(gap) is None:
                break
            chosen.append(previous)
        candidates: list[str] = []
        for start, end, inner_start, inner_end in reversed(chosen):
            del start, end
            content = tail[inner_start:inner_end]
            if len(content) > MAX_CANDIDATE_CHARS:
                return Extracted((content,), "lenient", False, oversized=True)
            candidates.extend(_split(_clean(content)))
        found = _result(candidates, "lenient")
        if found.candidates:
            return found
    number = deque(_NUMBER.finditer(tail), maxlen=1)
    if number and not _is_operand(tail, number[0]):
        return _result([number[0].group().replace("−", "-")], "lenient")
    return None


def _is_operand(text: str, number: re.Match[str]) -> bool:
    """Whether a number is one operand of a larger expression ("2^10", "1+1", "5!"): then it is no answer."""
    before = text[max(0, number.start() - 4) : number.start()].rstrip()
    after = text[number.end() : number.end() + 4].lstrip()
    return (before[-1:] in _OPERATORS_BEFORE and before != "") or (
        after[:1] in _OPERATORS_AFTER and after != ""
    )


def _math_spans(text: str) -> list[tuple[int, int, int, int]]:
    """(start, end, inner_start, inner_end) of each complete, non-empty math span, in order."""
    spans: list[tuple[int, int, int, int]] = []
    opener: str | None = None
    open_end = 0
    open_start = 0
    closers = {"$$": "$$", "$": "$", "\\(": "\\)", "\\[": "\\]"}
    for token in _MATH_TOKEN.finditer(text):
        value = token.group()
        if opener is None:
            if value in closers:
                opener, open_start, open_end = value, token.start(), token.end()
        elif value == closers[opener]:
            if text[open_end : token.start()].strip():
                spans.append((open_start, token.end(), open_end, token.start()))
            opener = None
    return spans


# -- shared ----------------------------------------------------------------------------------------


def _result(candidates: list[str], method: str) -> Extracted:
    stripped = (_DOLLAR.sub("", c).strip() if "$" in c else c for c in candidates)
    kept = tuple(c for c in stripped if not _PUNCTUATION_ONLY.fullmatch(c))
    if not kept:
        return _NOTHING
    oversized = any(len(c) > MAX_CANDIDATE_CHARS for c in kept)
    return Extracted(kept, method, False, oversized=oversized)


def _is_wrapped(text: str) -> bool:
    return _unwrap(text) != text


def _unwrap(text: str) -> str:
    """One layer of $...$, $$...$$, \\(...\\), \\[...\\], **...**, __...__ or \\boxed{...} around all of text."""
    for opener, closer in (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("**", "**"), ("__", "__")):
        if (
            len(text) >= len(opener) + len(closer)
            and text.startswith(opener)
            and text.endswith(closer)
            and text.find(closer, len(opener)) == len(text) - len(closer)
        ):
            return text[len(opener) : len(text) - len(closer)]
    if len(text) >= 2 and text[0] == "$" and text[-1] == "$" and text.count("$") == 2:
        return text[1:-1]
    marker = _BOX_MARKER.match(text)
    if marker is not None:
        box = _read_box(text, marker, len(text))
        if box is not None and box.end == len(text):
            return text[box.content_start : box.content_end]
    return text


def _clean(text: str) -> str:
    """Strip blanks, wrapping delimiters and bold, and a final period (a decimal point is never last)."""
    current = text.strip()
    for _ in range(8):
        previous = current
        current = _strip_trailing(current)
        current = _unwrap(current).strip()
        for mark in ("**", "__"):  # "**Answer:** 42" leaves an unpaired "**" before the answer
            if current.count(mark) % 2 == 1:
                if current.startswith(mark):
                    current = current[len(mark) :].strip()
                elif current.endswith(mark):
                    current = current[: -len(mark)].strip()
        if current == previous:
            break
    return current


def _strip_trailing(text: str) -> str:
    """Drop a sentence's final punctuation and blanks, keeping the period of "a.m."/"p.m."."""
    stripped = text.rstrip(_TRAILING_PUNCTUATION + " \t\r\n\f\v")
    if len(stripped) < len(text) and text[len(stripped)] == "." and _MERIDIEM.search(stripped[-6:]):
        return stripped + "."
    return stripped


def _split(candidate: str) -> list[str]:
    """Split "3 or 4", "either 3 or 4", "1, 2, and 3" into their parts; anything else stays whole."""
    if len(candidate) > MAX_CANDIDATE_CHARS:
        return [candidate]
    cuts: list[tuple[int, int]] = []
    has_connector = False
    depth = 0
    for token in _SPLIT_TOKEN.finditer(candidate):
        value = token.group()
        if value in ("{", "(", "[", "\\{"):
            depth += 1
        elif value in ("}", ")", "]", "\\}"):
            depth -= 1
        elif depth != 0:
            continue
        elif value == ",":
            cuts.append(token.span())
        elif value[0] != "\\" or value[-1] == "}":
            cuts.append(token.span())
            has_connector = True
    if not has_connector:
        return [candidate]
    merged: list[list[int]] = []
    for start, end in cuts:  # ", and" is one cut, not two around an empty part
        if merged and not _trim_edges(candidate[merged[-1][1] : start]):
            merged[-1][1] = end
        else:
            merged.append([start, end])
    parts: list[str] = []
    position = 0
    for start, end in merged:
        parts.append(candidate[position:start])
        position = end
    parts.append(candidate[position:])
    parts[0] = _EITHER.sub("", parts[0].strip())
    cleaned = [_clean(_trim_edges(part)) for part in parts]
    if any(not part for part in cleaned):
        return [candidate]
    if not all(_MATHY.search(part) or len(part) <= 3 for part in cleaned):
        return [candidate]
    return cleaned


_EDGE_COMMANDS = ("\\qquad", "\\quad", "\\,", "\\;", "\\:", "\\!", "\\ ")


def _trim_edges(part: str) -> str:
    """Strip blanks, commas, ~ and LaTeX spacing commands from both ends."""
    previous = None
    while previous != part:
        previous = part
        part = part.strip(" \t\r\n~,")
        for command in _EDGE_COMMANDS:
            if part.startswith(command):
                part = part[len(command) :]
            if part.endswith(command) and not part.endswith("\\" + command):
                part = part[: -len(command)]
    return part


def _is_content_free(text: str) -> bool:
    """Empty, blank, punctuation, or only filler words ("Thought process:", "The answer is", "\\boxed{}")."""
    stripped = text.strip()
    if len(stripped) > _CONTENT_FREE_MAX:
        return False
    return not _FILLER.sub("", stripped).strip()
