"""`text.match`: compare the answer extracted from a response with a gold answer (eq, ne, contains, regex).

Runs inline in the service process. That is safe because nothing here can take more than linear time:
regular expressions are compiled and run with RE2 (google-re2), which has no backtracking, so a pattern
such as `(a+)+$` runs in time linear in the text and no pattern can hang the service; extraction and
normalisation are linear scans without recursion. RE2's cost also grows with the pattern (a DFA-hostile
pattern such as `(a|b)*a(a|b){200}` falls back to simulating every state), so an answer longer than
MAX_REGEX_CHARS is not matched against a regex: it scores 0 with reason `answer_too_long`. Inline means on the
service's event loop, so the reference is bounded too: each gold (or pattern) at most MAX_GOLD_CHARS, all of them
MAX_GOLDS_TOTAL_CHARS (a 422 naming `answer` beyond), and a regex declares its RE2 program's cost
(`MatchReference.inline_cost`), so a short DFA-hostile pattern against a long response is scored in the pool.

For op=regex the answer is normalised (wrappers, whitespace, punctuation as the options say) but the
pattern is used as written; `case_sensitive` maps to RE2's case option.

Reference: a plain string (the gold answer) or `{"answer": str | [str, ...], "op": "eq" | "ne" |
"contains" | "regex"}`. Several golds mean "any of them" (for `ne`: "none of them").

Options (all documented on `MatchOptions`): which extraction to use, and how both sides are normalised
before comparing (case-insensitive, whitespace collapsed and wrappers such as `**...**` or a trailing
period removed by default; punctuation kept by default, since it often carries meaning: "-5", "3.14").
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

import re2
from pydantic import Field, PrivateAttr, ValidationInfo, WithJsonSchema, field_validator, model_validator

from proctor.contract import Verdict
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.verifiers.answers import AnswerReference, graded, unanswered
from proctor.verifiers.patterns import MAX_PATTERN_CHARS, MAX_REGEX_CHARS, pattern_error, regex_matches
from proctor.verifiers.reading import ExtractMethod, clip, extract_answer
from proctor.verifiers.text.normalize import normalize

Op = Literal["eq", "ne", "contains", "regex"]

MAX_GOLDS = 256
MAX_GOLD_CHARS = MAX_PATTERN_CHARS
"""A gold (or an RE2 pattern) longer than this is a 422 naming it: every gold is normalised and compared on each
score, and no short answer needs more (a whole document belongs to a similarity or judge verifier)."""
MAX_GOLDS_TOTAL_CHARS = 100_000
"""All golds together longer than this are a 422 naming `answer`: a reference is validated and hashed (the cache
key) by code that holds the GIL, so even off the event loop 2.5 MB of golds stalled it for about 40 ms."""
REGEX_STEPS_PER_CHAR = 10
"""RE2 steps (answer characters times program instructions) that cost about what one character of input does:
RE2 runs a DFA-hostile pattern such as `(a|b)*a(a|b){1000}` (18 characters, 3,008 instructions) in time
proportional to the answer times the program, so its cost is counted by `MatchReference.inline_cost`."""

_GOLD = {"type": "string", "minLength": 1, "maxLength": MAX_GOLD_CHARS}
_GOLD_SCHEMA = {
    "anyOf": [
        _GOLD,
        {"type": "array", "items": _GOLD, "minItems": 1, "maxItems": MAX_GOLDS},
    ],
    "description": "The gold answer, or several golds (any may match; for op=ne, none may), each at most "
    f"{MAX_GOLD_CHARS:,} characters and {MAX_GOLDS_TOTAL_CHARS:,} together. For op=regex: RE2 patterns.",
}


class MatchReference(AnswerReference):
    """What to compare the extracted answer with, and how (a plain string means {"answer": it, "op": "eq"})."""

    SHORTHAND_SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "string",
        "minLength": 1,
        "description": "The gold answer.",
    }

    # `op` comes first so the `answer` validator can see it.
    op: Op = Field(
        default="eq",
        description="eq: equals a gold; ne: equals no gold; contains: a gold occurs in the answer; "
        "regex: an RE2 pattern matches the answer.",
    )
    answer: Annotated[
        list[Annotated[str, Field(min_length=1)]],
        Field(min_length=1, max_length=MAX_GOLDS),
        WithJsonSchema(_GOLD_SCHEMA),
    ]
    _program_size: int = PrivateAttr(default=0)
    """op=regex: the RE2 instructions of every pattern together (what a match costs per answer character)."""

    @field_validator("answer", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("answer")
    @classmethod
    def _patterns_compile(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # Lengths first: a pattern is compiled only once it is known to be of a reasonable size.
        for index, gold in enumerate(value):
            if len(gold) > MAX_GOLD_CHARS:
                raise ValueError(f"gold {index} is {len(gold):,} characters; at most {MAX_GOLD_CHARS:,}")
        total = sum(map(len, value))
        if total > MAX_GOLDS_TOTAL_CHARS:
            raise ValueError(
                f"the golds are {total:,} characters together; at most {MAX_GOLDS_TOTAL_CHARS:,}"
            )
        # Checked here so a bad pattern is a 422 at request time, never a failure at scoring time.
        if info.data.get("op") == "regex":
            for index, pattern in enumerate(value):
                problem = pattern_error(pattern)
                if problem is not None:
                    raise ValueError(f"pattern {index} is not a valid RE2 pattern: {problem}")
        return value

    @model_validator(mode="after")
    def _measure_patterns(self) -> MatchReference:
        if self.op == "regex":
            # Case-insensitive programs are the larger ones (each letter becomes a class); the patterns compiled
            # in the validator above, so these compiles succeed.
            options = re2.Options()
            options.log_errors = False
            options.case_sensitive = False
            self._program_size = sum(re2.compile(pattern, options).programsize for pattern in self.answer)
        return self

    def inline_cost(self, response_chars: int) -> int:
        """Characters' worth of work beyond this reference's size that scoring a response of `response_chars`
        takes (`Engine.runs_inline` adds it to the item's size): for op=regex, RE2's answer-times-program steps."""
        if self.op != "regex":
            return 0
        return min(response_chars, MAX_REGEX_CHARS) * self._program_size // REGEX_STEPS_PER_CHAR


class MatchOptions(BaseOptions):
    """How to extract the answer and how to normalise both sides before comparing."""

    extract: ExtractMethod = Field(
        default="auto",
        description="auto: the first that applies of the last \\boxed{}/\\fbox{}, the last <answer>...</answer>, "
        "the last line starting 'Answer:', 'Final answer:' or 'The answer is', else the whole response; boxed, answer_tag, answer_line, "
        "last_line (last non-blank line) force one method; none: the whole response. Always only what "
        "follows the last </think>; an unterminated <think> means no answer.",
    )
    case_sensitive: bool = Field(default=False, description="Compare case-sensitively.")
    normalize_whitespace: bool = Field(
        default=True, description="Trim both ends and collapse runs of whitespace to one space."
    )
    strip_punctuation: bool = Field(
        default=False,
        description="Remove all punctuation (ASCII punctuation and symbols, Unicode punctuation) from both "
        "sides. Off by default: '-5' and '5' or '3.14' and '314' must stay different.",
    )
    strip_wrappers: bool = Field(
        default=True,
        description="Remove what wraps a whole answer: **bold**, `code`, $...$, quotes, \\text{}, \\boxed{}, "
        "and trailing sentence punctuation (. , ; : ! ?).",
    )
    match: Literal["full", "search"] = Field(
        default="full",
        description="op=regex only: full: the pattern must match the whole answer; search: anywhere in it.",
    )


def normalize_answer(text: str, options: MatchOptions, *, for_regex: bool = False) -> str:
    """Normalise one side as the options say; for regex, case is left to RE2 and the pattern is untouched."""
    return normalize(
        text,
        case_sensitive=options.case_sensitive or for_regex,
        whitespace=options.normalize_whitespace,
        punctuation=options.strip_punctuation,
        wrappers=options.strip_wrappers,
    )


def compare(normalized: str, reference: MatchReference, options: MatchOptions) -> bool:
    """Apply the reference's op to an answer already normalised by `normalize_answer`; True means reward 1."""
    if reference.op == "regex":
        return regex_matches(
            normalized,
            reference.answer,
            case_sensitive=options.case_sensitive,
            search=options.match == "search",
        )
    # A gold that normalises to nothing (say "..." with strip_punctuation) can match nothing.
    golds = [gold for gold in (normalize_answer(g, options) for g in reference.answer) if gold]
    if reference.op == "eq":
        return normalized in golds
    if reference.op == "ne":
        return normalized not in golds
    return any(gold in normalized for gold in golds)


def score_match(response: str, reference: MatchReference, options: MatchOptions) -> Verdict:
    """Extract the answer, normalise it and compare it with the gold(s) by the reference's op."""
    extraction = extract_answer(response, options.extract)
    details: dict[str, Any] = {"method": extraction.method, "extracted": clip(extraction.text)}
    normalized = None
    if extraction.text is not None:
        normalized = normalize_answer(extraction.text, options, for_regex=reference.op == "regex")
    details["normalized"] = clip(normalized)
    if not normalized:
        return unanswered("no_answer", details)
    if reference.op == "regex" and len(normalized) > MAX_REGEX_CHARS:
        return graded(False, details, "answer_too_long")
    return graded(compare(normalized, reference, options), details)


_EXAMPLES = (
    # Gold: each must score 1.
    Example("The answer is \\boxed{42}.", "42", 1.0, note="boxed"),
    Example("<think>2+2 might be 5... no.</think>\n\\boxed{4}", "4", 1.0, note="after the think block"),
    Example("<answer> Paris </answer>", "Paris", 1.0, note="answer tag"),
    Example("Let me recall.\nFinal answer: paris", "Paris", 1.0, note="answer line, case-insensitive"),
    Example("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}", 1.0, note="nested braces"),
    Example("\\fbox{7}", "7", 1.0, note="fbox"),
    Example("First \\boxed{3}; corrected: \\boxed{5}", "5", 1.0, note="last box wins"),
    Example("Answer: **Mount Everest**.", {"answer": ["Everest", "Mount Everest"]}, 1.0, note="any gold"),
    Example("Answer: Lyon", {"answer": "Paris", "op": "ne"}, 1.0, note="ne: must not say Paris"),
    Example("The capital of France is Paris.", {"answer": "paris", "op": "contains"}, 1.0, note="contains"),
    Example("Answer: 2024-05-01", {"answer": "\\d{4}-\\d{2}-\\d{2}", "op": "regex"}, 1.0, note="regex"),
    Example("Answer: U.S.A.", "USA", 1.0, {"strip_punctuation": True}, note="punctuation stripped"),
    # Cheats and failures: each must score 0.
    Example("", "42", 0.0, note="empty response"),
    Example("<think>The answer is \\boxed{42}.</think>", "42", 0.0, note="answer only inside think"),
    Example("<think>\\boxed{42}", "42", 0.0, note="unterminated think block"),
    Example("What is six times seven?", "42", 0.0, note="copied question"),
    Example("\\boxed{42} or maybe \\boxed{41}", "42", 0.0, note="two boxes: the last one counts"),
    Example("42 or 43", "42", 0.0, note="hedge"),
    Example("So the result is \\boxed{42", "42", 0.0, note="unterminated box"),
    Example("\\boxed{}", "42", 0.0, note="empty box"),
    Example(
        "Answer: 2024-05-01 or 2024-05-02",
        {"answer": "\\d{4}-\\d{2}-\\d{2}", "op": "regex"},
        0.0,
        note="regex must match the whole answer",
    ),
    Example("Answer: Paris", {"answer": "Paris", "op": "ne"}, 0.0, note="ne: said the forbidden answer"),
    Example("Answer: 42", "42", 0.0, {"extract": "boxed"}, note="a box was asked for"),
)

SPEC = register_verifier(
    VerifierSpec(
        name="text.match",
        version="1.0.0",
        score=score_match,
        reference=MatchReference,
        options=MatchOptions,
        description="Extract the final answer (\\boxed{}, <answer>, 'Answer:' line or the whole response after "
        "</think>) and compare it with a gold answer: eq, ne, contains or an RE2 regex, with case, whitespace "
        "and punctuation normalisation.",
        examples=_EXAMPLES,
        execution="inline",
    )
)
