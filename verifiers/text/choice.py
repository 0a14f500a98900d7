"""`text.choice`: grade a multiple-choice answer ("B", "(B)", "\\boxed{B}", "The answer is B", the option's text).

Runs inline: every scan is linear and the pieces parsed label by label are capped in length.

How the chosen option is found, in order; the first step that names any option decides:
1. every \\boxed{}/\\fbox{} in the graded text;
2. every <answer>...</answer>;
3. every explicit phrase "answer is X", "Answer: X", "the correct option is X", "a good choice is X",
   "I choose X", "X is correct" / "Option X is the best";
4. lines that are nothing but an answer: "B", "(B)", "**B**", "option B", "B) <the text of B>", or the
   text of one option.
The graded text is what follows the last </think>; an unterminated <think> means no answer.
If the deciding step names two or more different options ("A or B", "\\boxed{A} \\boxed{B}", "A and C",
"Either B or D", a copied list of all options, two "Answer:" lines that disagree) the response is hedged
and scores 0. A capital "A" or "I" followed by an ordinary word ("A good choice is B", "I think") is read
as English, not as an option, and lower-case labels count only when they stand alone ("(b)", "answer: b").
"""

from __future__ import annotations

import re
import string
from collections import deque
from typing import Annotated, Any, ClassVar

from pydantic import Field, ValidationInfo, WithJsonSchema, field_validator

from proctor.contract import Verdict
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.verifiers.answers import AnswerReference, graded, unanswered
from proctor.verifiers.reading import DETAIL_CHARS, after_think, all_answer_tags, all_boxed, clip
from proctor.verifiers.text.normalize import normalize

DEFAULT_LABELS = string.ascii_uppercase
MAX_OPTIONS = 100
MAX_OPTION_CHARS = 2_000
"""An option's text longer than this is a 422 naming it: every answer phrase, box and line is read up to
FRAGMENT_CHARS beyond the longest option, so one 50,000-character option made a response of 64 anchors cost
about 64 x 50,000 characters of reading on the event loop."""
FRAGMENT_CHARS = 300
"""How much text after an anchor (or of a line, a box) is read, beyond the longest option's text."""
MAX_LINES = 1000
"""Only the last lines of a response are read as bare answers."""
MAX_ANCHORS = 64
"""Only the last answer phrases (and the last boxes, the last answer tags) of a response are read."""

_LABEL_PATTERN = re.compile(r"[A-Za-z0-9]{1,8}")
_WORD = re.compile(r"[A-Za-z0-9]+")
# Opening clutter before a label: markup, brackets, LaTeX wrappers and filler words ("option B",
# "Either B or D", "\text{B}"). Each alternative consumes at least one character and they are tried one
# at a time from a Python loop, so nothing here can backtrack.
_OPEN_NOISE = re.compile(
    r"[\s*_`$\"'“‘(\[{:#>-]+"
    r"|\\(?:text|textbf|textit|mathrm|mathbf|emph|boxed|fbox)[ \t]*\{"
    r"|\\[(\[]"
    r"|(?i:option|choice|letter|either|probably|possibly|maybe|perhaps|likely|most|clearly|definitely"
    r"|actually|indeed|simply|just|therefore|thus|hence|so|then)\b"
)
_CLOSE_NOISE = re.compile(r"[)\]}*_`$\"'”’]*")
# "A or B", "A, B", "A/B", "B, or C", "B (or A)": each piece starts with a non-blank, so blanks cannot trade.
_CONNECTOR = re.compile(r"\s*(?:\(\s*)?(?:(?:,|/|&|\+|\||;|\b(?:and/or|or|and|nor)\b)\s*)+", re.IGNORECASE)
_STRICT_END = re.compile(r"[\s.:;!?,)\]}*_`$\"'”’\\]*\Z")
_LABEL_TEXT_DELIMITER = re.compile(r"[\s.:)\]\-–—]*")
_NEXT_WORD = re.compile(r"\s+([a-z][a-z']*)")
# Words that may follow a capital "A"/"I" used as an option label; any other lower-case word means English.
_LABEL_FOLLOWERS = frozenset(
    {"or", "and", "nor", "is", "was", "because", "since", "as", "seems", "would", "should", "must"}
    | {"appears", "looks", "remains", "fits", "matches", "holds", "wins"}
)
_ENGLISH_LABELS = frozenset({"A", "I"})
# "answer is", "Answer:", "**Answer**:", "the correct option is", "a good choice would be", "I choose".
# The optional emphasis group must start with * or _, so blank runs around it cannot trade characters.
_ANCHOR = re.compile(
    r"\b(?:answer|option|choice)[ \t]*(?:(?:\*\*|__)[ \t]*)?"
    r"(?:(?:is|would[ \t]+be|should[ \t]+be|must[ \t]+be|will[ \t]+be)\b[ \t]*:?|[:：])"
    r"|\bI(?:[ \t]+would|[ \t]+will|'d|'ll)?[ \t]+(?:choose|pick|select|go[ \t]+with)\b[ \t]*:?",
    re.IGNORECASE,
)
# "B is correct", "(B) is the right answer", "Option B is the best": the phrase is found first (a cheap
# literal search), then the label just before it.
_IS_CORRECT = re.compile(r"(?<=[ \t])is[ \t]+(?:the[ \t]+)?(?:correct|right|best)\b", re.IGNORECASE)
_LABEL_BEFORE = re.compile(r"(?<![A-Za-z0-9])\(?([A-Za-z0-9]{1,8})\)?[ \t]+\Z")

_LABELS_SCHEMA = {
    "anyOf": [
        {"type": "string", "description": "One label per character, e.g. 'ABCD' or '1234'."},
        {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z0-9]{1,8}$"}},
    ],
    "description": "Labels of the options in order; default A, B, C, ... (one per option when options are given).",
}


def effective_labels(options: list[str] | None, labels: list[str] | None) -> list[str]:
    """The labels in use: the given ones (or A-Z), cut to the number of options when options are given."""
    chosen = list(labels) if labels is not None else list(DEFAULT_LABELS)
    return chosen[: len(options)] if options is not None else chosen


def option_text_map(options: list[str] | None, labels: list[str]) -> dict[str, str]:
    """Normalised option text -> its label, for texts that belong to exactly one option."""
    if not options:
        return {}
    seen: dict[str, str | None] = {}
    for label, text in zip(labels, options, strict=False):
        key = normalize(text)
        if key:
            seen[key] = None if key in seen else label
    return {key: label for key, label in seen.items() if label is not None}


class ChoiceReference(AnswerReference):
    """The correct option; a plain string "B" means {"answer": "B"} with labels A-Z."""

    SHORTHAND_SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "string",
        "description": "The correct label, e.g. 'B'.",
    }

    # Field order matters: `answer` is resolved against `options` and `labels`, validated before it.
    options: list[Annotated[str, Field(min_length=1, max_length=MAX_OPTION_CHARS)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_OPTIONS,
        description="The options' texts, in label order, each at most 2,000 characters; a response may then "
        "answer with the text itself.",
    )
    labels: Annotated[list[str] | None, WithJsonSchema(_LABELS_SCHEMA)] = Field(
        default=None, validate_default=True
    )
    answer: str | int = Field(
        description="The correct option: its label ('B'), its 0-based index (1), or its exact text."
    )

    @field_validator("labels", mode="before")
    @classmethod
    def _split_labels(cls, value: Any) -> Any:
        return list(value) if isinstance(value, str) else value

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        options = info.data.get("options")
        if value is None:
            if options is not None and len(options) > len(DEFAULT_LABELS):
                raise ValueError(f"{len(options)} options are more than the default labels A-Z; give labels")
            return None
        for label in value:
            if not _LABEL_PATTERN.fullmatch(label):
                raise ValueError(f"label {label!r} must be 1-8 letters or digits")
        if len({label.casefold() for label in value}) != len(value):
            raise ValueError("labels must be distinct (ignoring case)")
        if options is not None and len(value) < len(options):
            raise ValueError(f"{len(options)} options need at least {len(options)} labels, got {len(value)}")
        return value

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_type(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ValueError("answer must be a label (string) or a 0-based option index (integer)")
        return value

    @field_validator("answer")
    @classmethod
    def _resolve_answer(cls, value: str | int, info: ValidationInfo) -> str:
        if "options" not in info.data or "labels" not in info.data:
            return str(value)  # options or labels already failed; that error is the one reported
        options = info.data["options"]
        labels = effective_labels(options, info.data["labels"])
        if isinstance(value, int):
            if not 0 <= value < len(labels):
                raise ValueError(f"index {value} is out of range for {len(labels)} options")
            return labels[value]
        label = resolve_label(value, labels, options)
        if label is None:
            raise ValueError(f"{value!r} is not one of the labels {', '.join(labels)} nor an option's text")
        return label

    @property
    def active_labels(self) -> list[str]:
        """The labels in use for this question."""
        return effective_labels(self.options, self.labels)


def resolve_label(value: str, labels: list[str], options: list[str] | None) -> str | None:
    """The label a reference's answer names: a label (any case, brackets allowed) or an option's exact text."""
    bare = value.strip().strip("()[]. ")
    if bare in labels:
        return bare
    folded = [label for label in labels if label.casefold() == bare.casefold()]
    if len(folded) == 1:
        return folded[0]
    return option_text_map(options, labels).get(normalize(value))


class Question:
    """What parsing needs about one reference, computed once per score."""

    def __init__(self, reference: ChoiceReference):
        self.labels = reference.active_labels
        self.exact = set(self.labels)
        self.folded = {label.casefold(): label for label in self.labels}
        self.texts = option_text_map(reference.options, self.labels)
        longest = max((len(text) for text in reference.options or ()), default=0)
        self.span = FRAGMENT_CHARS + longest


def _label_at(text: str, position: int, question: Question) -> tuple[str | None, int]:
    word = _WORD.match(text, position)
    if word is None:
        return None, position
    value, end = word.group(), word.end()
    if value in question.exact:
        if value in _ENGLISH_LABELS:
            follower = _NEXT_WORD.match(text, end)
            if follower is not None and follower.group(1) not in _LABEL_FOLLOWERS:
                return None, position  # "A good choice", "I think": English, not an option
        return value, end
    label = question.folded.get(value.casefold())
    if label is not None and (text.startswith((")", "]"), end) or _STRICT_END.match(text, end)):
        return label, end  # a lower-case label only when it stands alone: "(b)", "answer: b."
    return None, position


def scan_labels(text: str, question: Question, start: int = 0) -> tuple[list[str], int]:
    """Labels named at `start` ("B", "(B)", "option B", "A or B", "Either B or D") and where they end."""
    found: list[str] = []
    position, end = start, start
    while True:
        label = None
        while label is None:
            label, after = _label_at(text, position, question)
            if label is None:
                noise = _OPEN_NOISE.match(text, position)
                if noise is None:
                    return found, end
                position = noise.end()
        found.append(label)
        end = _CLOSE_NOISE.match(text, after).end()
        connector = _CONNECTOR.match(text, end)
        if connector is None:
            return found, end
        position = connector.end()


def fragment_choice(fragment: str, question: Question) -> list[str]:
    """Options a fragment names: labels at its start, else the exact text of one option."""
    fragment = fragment[: question.span]
    found, _ = scan_labels(fragment, question)
    if found:
        return found
    label = question.texts.get(normalize(fragment))
    return [label] if label is not None else []


def line_choice(line: str, question: Question) -> list[str]:
    """Options a line names when it is nothing but an answer: "B", "(B)", "A or B", "B) text of B", text of B."""
    line = line.strip()
    if not line or len(line) > question.span:
        return []
    found, end = scan_labels(line, question)
    if not found:
        label = question.texts.get(normalize(line))
        return [label] if label is not None else []
    if _STRICT_END.match(line, end):
        return found
    if len(found) == 1:  # "B) Paris": the text must be an option's; another option's text is a hedge
        rest = line[_LABEL_TEXT_DELIMITER.match(line, end).end() :]
        label = question.texts.get(normalize(rest))
        if label is not None:
            return found if label == found[0] else [found[0], label]
    return []


def _anchored(text: str, question: Question) -> tuple[list[str], list[str]]:
    named: list[str] = []
    evidence: list[str] = []
    for anchor in deque(_ANCHOR.finditer(text), maxlen=MAX_ANCHORS):
        start = anchor.end()
        stop = text.find("\n", start, start + question.span)
        fragment = text[start : stop if stop >= 0 else start + question.span]
        found = fragment_choice(fragment, question)
        if found:
            named.extend(found)
            evidence.append(fragment.strip())
    for phrase in deque(_IS_CORRECT.finditer(text), maxlen=MAX_ANCHORS):
        before = _LABEL_BEFORE.search(text, max(0, phrase.start() - 24), phrase.start())
        if before is not None and before.group(1) in question.exact:  # exact case: "a is right" is English
            named.append(before.group(1))
            evidence.append(text[before.start() : phrase.end()])
    return named, evidence


def _bare_lines(text: str, question: Question) -> tuple[list[str], list[str]]:
    named: list[str] = []
    evidence: list[str] = []
    for line in text.rsplit("\n", MAX_LINES)[-MAX_LINES:]:
        found = line_choice(line, question)
        if found:
            named.extend(found)
            evidence.append(line.strip())
    return named, evidence


def named_options(text: str, question: Question, *, tags: bool = True) -> tuple[list[str], str, list[str]]:
    """The options a graded text names, by the first step that names any: (labels, method, evidence)."""
    named: list[str] = []
    evidence: list[str] = []
    for content in all_boxed(text, MAX_ANCHORS, limit=question.span):
        found = fragment_choice(content.strip(), question)
        if found:
            named.extend(found)
            evidence.append(content.strip())
    if named:
        return _unique(named), "boxed", evidence
    if tags:
        for content in all_answer_tags(text, MAX_ANCHORS):
            found, _, _ = named_options(content.strip(), question, tags=False)
            if not found:
                found = fragment_choice(content.strip(), question)
            if found:
                named.extend(found)
                evidence.append(content.strip())
        if named:
            return _unique(named), "answer_tag", evidence
    named, evidence = _anchored(text, question)
    if named:
        return _unique(named), "answer_phrase", evidence
    named, evidence = _bare_lines(text, question)
    if named:
        return _unique(named), "bare", evidence
    return [], "none", []


def _unique(labels: list[str]) -> list[str]:
    return list(dict.fromkeys(labels))


def score_choice(response: str, reference: ChoiceReference, options: BaseOptions) -> Verdict:
    """Find the one option the response chooses; hedges (two options named) and silence score 0."""
    text = after_think(response)
    expected = str(reference.answer)
    if text is None:
        named, method, evidence = [], "think_unterminated", []
    else:
        named, method, evidence = named_options(text, Question(reference))
    details: dict[str, Any] = {
        "method": method,
        "extracted": clip(" | ".join(piece[:DETAIL_CHARS] for piece in evidence[-4:])) if evidence else None,
        "named": named[:26],
        "expected": expected,
    }
    if len(named) != 1:
        return unanswered("no_answer" if not named else "hedged", details)
    return graded(named[0] == expected, details)


_CAPITALS = {"options": ["London", "Paris", "Rome", "Berlin"], "answer": "B"}

_EXAMPLES = (
    # Gold: each must score 1.
    Example("B", "B", 1.0, note="bare label"),
    Example("(B)", "B", 1.0, note="bracketed label"),
    Example("The answer is $\\boxed{C}$.", "C", 1.0, note="boxed"),
    Example("Paris is the capital, so the answer is D.", "D", 1.0, note="answer phrase"),
    Example("Answer: (B)", "B", 1.0, note="answer line"),
    Example("<think>A looks tempting, but no.</think>\nThe correct option is **B**.", "B", 1.0, note="think"),
    Example("Paris", _CAPITALS, 1.0, note="the option's text"),
    Example("A good choice is B", "B", 1.0, note="the article 'A' is not option A"),
    Example("option C", "C", 1.0, note="option C"),
    Example("<answer>C</answer>", {"answer": 2, "options": ["1", "2", "3", "4"]}, 1.0, note="index answer"),
    Example("The answer is 3.", {"answer": "3", "labels": "1234"}, 1.0, note="numeric labels"),
    # Cheats and failures: each must score 0.
    Example("", "B", 0.0, note="empty response"),
    Example("A or B", "B", 0.0, note="hedge"),
    Example("\\boxed{A} \\boxed{B}", "B", 0.0, note="two boxes"),
    Example("Either B or D", "B", 0.0, note="either-or hedge"),
    Example("A, B, C, D", "C", 0.0, note="every option"),
    Example("<think>The answer is B.</think>", "B", 0.0, note="answer only inside think"),
    Example(
        "Which city is the capital of France?\nA) London\nB) Paris\nC) Rome\nD) Berlin",
        _CAPITALS,
        0.0,
        note="copied question",
    ),
    Example("A good choice is B", "A", 0.0, note="the article 'A' is not option A"),
    Example("Answer: A\nAnswer: B", "B", 0.0, note="two answers"),
    Example("The answer is A.", "B", 0.0, note="wrong option"),
    Example("B) Rome", _CAPITALS, 0.0, note="label and another option's text"),
)

SPEC = register_verifier(
    VerifierSpec(
        name="text.choice",
        version="1.0.0",
        score=score_choice,
        reference=ChoiceReference,
        options=BaseOptions,
        description="Multiple-choice answers: 'B', '(B)', '\\boxed{B}', 'The answer is B', 'Answer: (B)', or the "
        "option's text; a response naming two different options is hedged and scores 0.",
        examples=_EXAMPLES,
        execution="inline",
    )
)
