"""`judge.equivalence`: ask a judge whether the response's extracted final answer means the same as the gold.

The judge never sees the whole response: only the extracted answer (the last \\boxed{}, <answer> tag or
"Answer:" line; no fallback to the whole text), the gold and optionally the question. An answer with no
letter or digit, or one that is only a reasoning opener ("Thought process:", "Let's solve this step by
step"), is `no_answer` without a judge call: such "master key" replies fool judges that read whole responses.

By default the rule-based `math` verifier is asked first, through the same engine (and its cache): when it
says correct the judge is not called; when it says no (or cannot read the gold) the judge decides. So this
verifier is the "judge after rules" fallback of general-verifier setups.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from proctor.contract import RequestError, Status, Verdict
from proctor.registry import Example, VerifierSpec, register_verifier
from proctor.verifiers.judge import parse, prompts
from proctor.verifiers.judge.client import JudgeError
from proctor.verifiers.judge.common import (
    DEADLINE_S,
    JudgeOptions,
    Ledger,
    ask,
    judge_failure,
    unparsed_reason,
)
from proctor.verifiers.reading import clip, extract_answer

MAX_ANSWER_CHARS = 2_000
_OPENERS = re.compile(
    r"^(?:thought\s+process|thinking|reasoning|solution|answer|final\s+answer|the\s+answer\s+is|step\s+\d+|"
    r"let'?s\s+(?:solve|think)[\w\s]*|let\s+me\s+(?:solve|think)[\w\s]*|to\s+solve\s+this[\w\s]*|"
    r"解|答|思路|解答)[\s:：.,!。]*$",
    re.IGNORECASE,
)
_CONTENT = re.compile(r"[^\W_]", re.UNICODE)


class EquivalenceReference(BaseModel):
    """The gold answer (a bare string is shorthand for {"answer": it}) and optionally the question."""

    model_config = ConfigDict(extra="forbid")

    answer: str = Field(min_length=1, max_length=10_000, description="The gold answer.")
    question: str | None = Field(
        default=None, max_length=100_000, description="The question, shown to the judge."
    )

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"answer": value} if isinstance(value, str) else value


class EquivalenceOptions(JudgeOptions):
    """Judge options, how to extract the answer, and which rule-based verifier to ask first."""

    extract: Literal["marked", "boxed", "answer_tag", "answer_line", "last_line"] = Field(
        default="marked",
        description="marked: the last \\boxed{}, else <answer>, else an 'Answer:' line (never the whole "
        "response); or force one method.",
    )
    rules_first: Literal["math", "text.match", "none"] = Field(
        default="math",
        description="Rule-based verifier asked first; the judge is asked only when it says no.",
    )


def extract_final(response: str, method: str) -> str | None:
    """The final answer the judge may see, or None (never the whole response)."""
    if method != "marked":
        return extract_answer(response, method).text  # type: ignore[arg-type]
    found = extract_answer(response, "auto")
    return found.text if found.method in {"boxed", "answer_tag", "answer_line"} else None


def is_contentless(answer: str) -> bool:
    """Whether an answer states nothing: no letter or digit, or only a reasoning opener."""
    stripped = answer.strip()
    return _CONTENT.search(stripped) is None or _OPENERS.match(stripped) is not None


async def _rule_verdict(response: str, gold: str, verifier: str) -> dict[str, Any] | None:
    from proctor.engine import current_engine, prepare

    request = {"verifier": verifier, "response": response, "reference": gold}
    try:
        # Past inline_max_chars the rule's prepare (end-token cut, validation, the cache key's hash over the
        # whole response) runs on a thread; to_thread carries the context, so the outer end tokens still apply.
        if len(response) > current_engine().settings.inline_max_chars:
            item = await asyncio.to_thread(prepare, request)
        else:
            item = prepare(request)
    except RequestError as exc:  # a gold the rules cannot read: the judge decides alone
        return {"verifier": verifier, "skipped": exc.message}
    score = await current_engine().score_nested(item)
    return {
        "verifier": score.verifier,
        "status": score.status.value,
        "correct": score.correct,
        "reason": score.reason,
    }


async def score_equivalence(
    response: str, reference: EquivalenceReference, options: EquivalenceOptions
) -> Verdict:
    """Rules first; then the judge on the extracted answer and the gold only."""
    from proctor.engine import current_engine

    if len(response) > current_engine().settings.inline_max_chars:  # extraction reads it all: a thread
        answer = await asyncio.to_thread(extract_final, response, options.extract)
    else:
        answer = extract_final(response, options.extract)
    details: dict[str, Any] = {"extracted": clip(answer)}
    if answer is None or is_contentless(answer):
        return Verdict.wrong("no_answer", **details)
    if len(answer) > MAX_ANSWER_CHARS:
        return Verdict.wrong("answer_too_long", **details)
    if options.rules_first != "none":
        rule = await _rule_verdict(response, reference.answer, options.rules_first)
        details["rules"] = rule
        if rule is not None and rule.get("status") == Status.ok.value and rule.get("correct"):
            return Verdict(reward=1.0, correct=True, details=details, components={"rules": 1.0})
    ledger = Ledger()
    messages = prompts.equivalence(reference.question, answer.strip(), reference.answer)
    try:
        votes = await ask(options, messages, parse.final_decision, ledger)
    except JudgeError as exc:
        return judge_failure(exc, ledger, **details)
    details.update(ledger.details())
    reward = sum(1.0 for vote in votes if vote) / len(votes)
    components = {"rules": 0.0, "judge": reward}
    if all(vote is None for vote in votes):
        return Verdict(
            reward=0.0, correct=False, reason=unparsed_reason(ledger), details=details, components=components
        )
    reason = None if reward >= 1.0 else "judge_not_equivalent"
    return Verdict(
        reward=reward, correct=reward >= 1.0, reason=reason, details=details, components=components
    )


_EXAMPLES = (
    Example(
        "So the answer is \\boxed{\\frac{1}{2}}.", "0.5", 1.0, note="the rules already agree: no judge call"
    ),
    Example("Final answer: 12", {"answer": "12", "question": "3 * 4?"}, 1.0, note="answer line"),
    Example(":", "12", 0.0, note="master key ':'"),
    Example("Thought process:", "12", 0.0, note="master key 'Thought process:'"),
    Example(
        "Answer: Let's solve this problem step by step.", "12", 0.0, note="answer line that is only an opener"
    ),
    Example("\\boxed{}", "12", 0.0, note="empty box"),
    Example("<think>\\boxed{12}</think>", "12", 0.0, note="answer only inside the think block"),
)

SPEC = register_verifier(
    VerifierSpec(
        name="judge.equivalence",
        version="1.0.0",
        score=score_equivalence,
        reference=EquivalenceReference,
        options=EquivalenceOptions,
        description="Whether the extracted final answer is equivalent to the gold: the rule-based math verifier "
        "first, then a judge that sees only the extracted answer and the gold (Final Decision: Yes/No).",
        examples=_EXAMPLES,
        execution="inline",
        deadline_s=DEADLINE_S,
    )
)
