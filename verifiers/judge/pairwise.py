"""`judge.pairwise`: A/B preference of the response over a competing one, asked in both orders.

Reference: `{"other": str, "prompt": str?}`. The judge is asked twice, once with the response as A and once
as B (JSON, reason before winner). Both orders agreeing gives 1 (win), 0.5 (tie) or 0 (loss). When they
disagree (position bias), `details.consistent` is false and `on_disagreement` decides: `tie` (default,
0.5, as MT-Bench counts inconsistent pairs), `loss` (0: only a preference that survives the swap earns
reward) or `average` (the mean of both orders' outcomes). An empty response loses and a non-empty one
beats an empty other without a judge call. With `samples` = k each order is sampled k times and the
outcomes are averaged per order first; an unparseable sample counts as a loss (0) in that average.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from proctor.contract import Verdict
from proctor.registry import Example, VerifierSpec, register_verifier
from proctor.verifiers.judge import parse, prompts
from proctor.verifiers.judge.client import JudgeError
from proctor.verifiers.judge.common import (
    DEADLINE_S,
    JudgeOptions,
    Ledger,
    ask,
    judge_failure,
    transcript,
    unparsed_reason,
)
from proctor.verifiers.reading import after_think


class PairwiseReference(BaseModel):
    """The competing response and optionally the task both answer."""

    model_config = ConfigDict(extra="forbid")

    other: str = Field(max_length=1_000_000, description="The response to compare against.")
    prompt: str | None = Field(default=None, max_length=100_000, description="The task, shown to the judge.")


class PairwiseOptions(JudgeOptions):
    """Judge options plus the policy for the two orders disagreeing."""

    on_disagreement: Literal["tie", "loss", "average"] = Field(
        default="tie", description="tie: 0.5; loss: 0; average: mean of both orders' outcomes."
    )


def outcome(winner: str, response_is: str) -> float:
    """1 when the response won, 0.5 for a tie, 0 when it lost."""
    if winner == "tie":
        return 0.5
    return 1.0 if winner == response_is else 0.0


def combine(first: float, second: float, policy: str) -> tuple[float, bool]:
    """(reward, consistent) from the two orders' outcomes under the disagreement policy."""
    if first == second:
        return first, True
    if policy == "average":
        return (first + second) / 2, False
    return (0.5 if policy == "tie" else 0.0), False


async def score_pairwise(
    response: str | list[dict[str, Any]], reference: PairwiseReference, options: PairwiseOptions
) -> Verdict:
    """Ask with the response as A and as B; combine the two by the stated policy."""
    prompt, raw = transcript(response, reference.prompt)
    mine, theirs = after_think(raw), after_think(reference.other)
    mine = mine.strip() if mine else ""
    theirs = theirs.strip() if theirs else ""
    if not mine:
        return Verdict.wrong("no_answer")
    if not theirs:
        return Verdict(reward=1.0, correct=True, reason=None, details={"other_empty": True})
    ledger = Ledger()
    try:
        config = options.config()
        as_a, as_b = await asyncio.gather(
            ask(options, prompts.pairwise(prompt, mine, theirs), parse.preference, ledger, config),
            ask(options, prompts.pairwise(prompt, theirs, mine), parse.preference, ledger, config),
        )
    except JudgeError as exc:
        return judge_failure(exc, ledger)
    details: dict[str, Any] = ledger.details()
    parsed = [sum(vote is not None for vote in as_a), sum(vote is not None for vote in as_b)]
    if not parsed[0] or not parsed[1]:
        details["orders_parsed"] = parsed
        return Verdict(reward=0.0, correct=False, reason=unparsed_reason(ledger), details=details)
    if parsed != [len(as_a), len(as_b)]:
        details["orders_parsed"] = parsed
    # An unparseable sample is a loss, never dropped: dropping it would let a response that makes the judge
    # answer out of form whenever it would lose (an injected instruction) average over its wins only.
    first = sum(0.0 if vote is None else outcome(vote[0], "A") for vote in as_a) / len(as_a)
    second = sum(0.0 if vote is None else outcome(vote[0], "B") for vote in as_b) / len(as_b)
    reward, consistent = combine(first, second, options.on_disagreement)
    details.update(
        consistent=consistent,
        policy=options.on_disagreement,
        reasons=[vote[1][:300] for vote in (*as_a, *as_b) if vote is not None],
    )
    components = {"response_first": first, "response_second": second}
    reason = None if reward >= 1.0 else "judge_disagreement" if not consistent else "not_preferred"
    return Verdict(
        reward=reward, correct=reward >= 1.0, reason=reason, details=details, components=components
    )


_EXAMPLES = (
    Example("A full answer.", {"other": ""}, 1.0, note="beats an empty response without a judge call"),
    Example("", {"other": "A full answer."}, 0.0, note="an empty response loses"),
    Example("<think>A full answer.", {"other": "Short."}, 0.0, note="unterminated think block: no answer"),
)

SPEC = register_verifier(
    VerifierSpec(
        name="judge.pairwise",
        version="1.0.0",
        score=score_pairwise,
        reference=PairwiseReference,
        options=PairwiseOptions,
        description="A/B preference over a competing response, asked in both orders; disagreement (position "
        "bias) is reported and scored by on_disagreement (tie 0.5 by default).",
        examples=_EXAMPLES,
        execution="inline",
        deadline_s=DEADLINE_S,
        accepts_messages=True,
    )
)
