"""`judge.principles`: RLBFF-style binary principles chosen per request, each a yes/no question to the judge.

Reference: `{"principles": ["The response is in French.", {...item...}], "prompt": str?}`. A principle is a
string (asked of the judge) or a rubric item object (`criterion`, `points` as its weight, `kind` llm / regex /
code). Each llm principle is its own judge call answered `Final Decision: Yes/No`, so a principle shared by
many requests is cached once. The reward is the weight of the satisfied principles over the total positive
weight (the rubric formula), averaged over `samples`. A reply without a decision (or a code check that cannot
decide) counts against the response: "No" for a positive weight, "Yes" for a negative one (a pitfall).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from proctor.contract import Verdict
from proctor.registry import Example, VerifierSpec, register_verifier
from proctor.verifiers.judge import parse, prompts
from proctor.verifiers.judge.client import JudgeError
from proctor.verifiers.judge.common import DEADLINE_S, JudgeOptions, Ledger, ask, judge_failure
from proctor.verifiers.judge.items import MAX_ITEMS, Item, undecided_met
from proctor.verifiers.judge.rubric import free_met, grade_model_free, rubric_reward


class PrinciplesReference(BaseModel):
    """The principles to check (strings or item objects) and optionally the task the response answers."""

    model_config = ConfigDict(extra="forbid")

    principles: list[Item] = Field(min_length=1, max_length=MAX_ITEMS)
    prompt: str | None = Field(default=None, max_length=100_000, description="The task, shown to the judge.")

    @field_validator("principles", mode="before")
    @classmethod
    def _strings_are_llm_items(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"criterion": entry} if isinstance(entry, str) else entry for entry in value]
        return value

    @field_validator("principles")
    @classmethod
    def _some_positive(cls, value: list[Item]) -> list[Item]:
        if not any(item.points > 0 for item in value):
            raise ValueError("at least one principle needs a positive weight")
        return value


async def score_principles(
    response: str | list[dict[str, Any]], reference: PrinciplesReference, options: JudgeOptions
) -> Verdict:
    """One yes/no judge call per llm principle (model-free ones checked directly); weighted fraction satisfied."""
    items = reference.principles
    graded = await grade_model_free(response, reference.prompt, items)
    if isinstance(graded, Verdict):
        return graded
    prompt, text, free = graded
    ledger = Ledger()
    llm = [index for index, item in enumerate(items) if item.kind == "llm"]
    try:
        config = options.config() if llm else None
        answers = await asyncio.gather(
            *(
                ask(
                    options,
                    prompts.principle(prompt, text, items[index].criterion),
                    parse.final_decision,
                    ledger,
                    config,
                )
                for index in llm
            )
        )
    except JudgeError as exc:
        return judge_failure(exc, ledger)
    met = free_met(free, items)
    undecided = 0
    for index, votes in zip(llm, answers, strict=True):
        undecided += sum(vote is None for vote in votes)
        # A reply without a decision counts against the response: "No" for a principle it should satisfy,
        # "Yes" for a negative-weight one (a pitfall), so an injected non-answer never avoids a penalty.
        fallback = undecided_met(items[index])
        met[index] = sum(fallback if vote is None else float(vote) for vote in votes) / len(votes)
    reward = rubric_reward(items, met)
    details: dict[str, Any] = {
        "principles": [
            {"principle": item.criterion[:200], "weight": item.points, "kind": item.kind, "satisfied": value}
            for item, value in zip(items, met, strict=True)
        ],
        "undecided_replies": undecided,
    }
    if llm:
        details.update(ledger.details())
    components = {f"principle_{index + 1}": value for index, value in enumerate(met)}
    reason = (
        None if reward >= 1.0 else "judge_unparseable" if undecided and reward == 0 else "principles_unmet"
    )
    return Verdict(
        reward=reward, correct=reward >= 1.0, reason=reason, details=details, components=components
    )


_PRINCIPLES = [
    {"criterion": "Answers in a single sentence", "kind": "regex", "pattern": r"^[^.!?\n]*[.!?]?\s*$"},
    {"criterion": "Mentions the unit", "kind": "regex", "pattern": r"\bkm\b"},
]

_EXAMPLES = (
    Example("The distance is 42 km.", {"principles": _PRINCIPLES}, 1.0, note="both principles hold"),
    Example("", {"principles": _PRINCIPLES}, 0.0, note="empty response"),
    Example(
        "It is far. Very far. Trust me.", {"principles": _PRINCIPLES}, 0.0, note="neither principle holds"
    ),
)

SPEC = register_verifier(
    VerifierSpec(
        name="judge.principles",
        version="1.0.0",
        score=score_principles,
        reference=PrinciplesReference,
        options=JudgeOptions,
        description="RLBFF-style binary principles chosen per request: one yes/no judge question per principle "
        "(Final Decision: Yes/No), or an RE2/sandboxed-code check; reward is the weighted fraction satisfied.",
        examples=_EXAMPLES,
        execution="inline",
        deadline_s=DEADLINE_S,
        accepts_messages=True,
    )
)
