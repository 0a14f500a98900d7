"""The puzzle answer contract: the answer is inside <answer>...</answer> (or \\boxed{}) after the last </think>.

Components: `format` (an answer was found and has the family's shape) and `answer` (it obeys the rules).
Binary reward: 1 only for a correct answer. Extraction is linear in the response and bounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proctor.contract import Verdict
from proctor.verifiers.reading import after_think, clip, has_answer_tag, last_answer_tag, last_boxed

MAX_ANSWER_CHARS = 2_000
"""Default longest answer a family accepts; longer answers score 0 (reason answer_too_long)."""


def extract(response: str) -> str | None:
    """The answer text: the last <answer>...</answer>, else the last \\boxed{}, after the last </think>."""
    text = after_think(response)
    if text is None:
        return None
    found = last_answer_tag(text) if has_answer_tag(text) else last_boxed(text)
    if found is None:
        return None
    found = found.strip()
    if found.startswith(("\\boxed", "\\fbox")):  # <answer>\boxed{x}</answer>
        inner = last_boxed(found)
        if inner is not None and found.endswith("}"):
            found = inner.strip()
    return found or None


@dataclass(frozen=True)
class Checked:
    """A family checker's finding: `parsed` False means the answer did not have the family's shape."""

    correct: bool
    reason: str | None = None
    parsed: bool = True
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def right(cls, **details: Any) -> Checked:
        """The answer obeys every rule."""
        return cls(True, None, True, details)

    @classmethod
    def wrong(cls, reason: str, **details: Any) -> Checked:
        """The answer has the right shape but breaks a rule; `reason` is a short code."""
        return cls(False, reason, True, details)

    @classmethod
    def malformed(cls, reason: str = "malformed", **details: Any) -> Checked:
        """The answer cannot be read as an answer of this family (format 0)."""
        return cls(False, reason, False, details)


def no_answer(reason: str, details: dict[str, Any]) -> Verdict:
    """Reward 0, format 0: no answer was found (or it was too long to read)."""
    return Verdict(
        reward=0.0, correct=False, reason=reason, components={"format": 0.0, "answer": 0.0}, details=details
    )


def to_verdict(checked: Checked, answer: str) -> Verdict:
    """The Verdict for a checked answer: binary reward, components format and answer."""
    details = {"extracted": clip(answer), **checked.details}
    if not checked.parsed:
        return no_answer(checked.reason or "malformed", details)
    reward = 1.0 if checked.correct else 0.0
    return Verdict(
        reward=reward,
        correct=checked.correct,
        reason=None if checked.correct else (checked.reason or "wrong_answer"),
        components={"format": 1.0, "answer": reward},
        details=details,
    )
