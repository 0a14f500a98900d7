"""`judge.rubric`: score a response against rubric items (Rubrics as Rewards; HealthBench's formula).

Reference: `{"items": [{criterion, points, kind: "llm" | "regex" | "code", pattern, code}], "prompt": str?}`.

- explicit mode (default): every `llm` item gets its own met / not-met verdict from one judge call (JSON,
  a reason before each verdict); `regex` and `code` items are checked without a model. The reward is the
  points of the met items (a met pitfall subtracts) over the total of the positive points, clipped to [0, 1].
  With `samples` = k the k judge replies are scored separately and averaged.
- implicit mode: the judge sees the `llm` items with their points and gives one holistic `[RESULT] n`
  (0-10); that fraction stands for the `llm` items' positive points, to which the met model-free items add.

A failed judge call is `judge_error`; a reply received but unparseable (or a refusal) scores that sample 0
(reason `judge_unparseable` / `judge_refusal`); a sandbox failure on a code item is `sandbox_error`. A code
item whose check cannot decide (raises, times out, returns a non-bool) counts against the response: a positive
item is not met, a pitfall is met (`items.undecided_met`), so breaking a pitfall's check never pays.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from proctor.contract import Status, Verdict
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
from proctor.verifiers.judge.items import MAX_ITEMS, CheckError, Item, code_met, regex_met, undecided_met
from proctor.verifiers.patterns import MAX_REGEX_CHARS
from proctor.verifiers.reading import after_think

IMPLICIT_SCALE = 10


class RubricReference(BaseModel):
    """The rubric: items with points, and optionally the task the response answers (shown to the judge)."""

    model_config = ConfigDict(extra="forbid")

    items: list[Item] = Field(min_length=1, max_length=MAX_ITEMS)
    prompt: str | None = Field(default=None, max_length=100_000, description="The task, shown to the judge.")

    @model_validator(mode="after")
    def _some_positive(self) -> RubricReference:
        if not any(item.points > 0 for item in self.items):
            raise ValueError("a rubric needs at least one item with positive points")
        return self


class RubricOptions(JudgeOptions):
    """Judge options plus the scoring mode."""

    mode: Literal["explicit", "implicit"] = Field(
        default="explicit",
        description="explicit: one verdict per item, met points over positive points; implicit: one holistic "
        "0-10 judge score for the llm items.",
    )


def rubric_reward(items: list[Item], met: list[float]) -> float:
    """Met points (a pitfall's are negative) over the positive points, clipped to [0, 1]; met may be fractional."""
    positive = sum(item.points for item in items if item.points > 0)
    earned = sum(item.points * fraction for item, fraction in zip(items, met, strict=True))
    return min(1.0, max(0.0, earned / positive))


async def model_free(items: list[Item], text: str) -> dict[int, tuple[bool | None, str]]:
    """Verdicts of the regex and code items, by item index (None: a check that could not decide); code items
    run in the sandbox concurrently."""
    regex_items = [index for index, item in enumerate(items) if item.kind == "regex"]
    code_items = [index for index, item in enumerate(items) if item.kind == "code"]
    # Up to MAX_ITEMS patterns over a long text take RE2 seconds: searched on a thread, never on the event loop.
    patterns, results = await asyncio.gather(
        asyncio.to_thread(lambda: [regex_met(items[index], text) for index in regex_items]),
        asyncio.gather(*(code_met(items[index], text) for index in code_items)),
    )
    found: dict[int, tuple[bool | None, str]] = {}
    for index, met in zip(regex_items, patterns, strict=True):
        found[index] = (
            met,
            "pattern" if met is not None else f"undecided: longer than {MAX_REGEX_CHARS} characters",
        )
    for index, (met, note) in zip(code_items, results, strict=True):
        found[index] = (met, note or "check")
    return found


async def grade_model_free(
    response: str | list[dict[str, Any]], task: str | None, items: list[Item]
) -> tuple[str | None, str, dict[int, tuple[bool | None, str]]] | Verdict:
    """(task, graded text, model-free verdicts), or the Verdict that ends scoring early (no answer, sandbox)."""
    prompt, raw = transcript(response, task)
    text = after_think(raw)
    if text is None or not text.strip():
        return Verdict.wrong("no_answer", graded=text is not None)
    try:
        free = await model_free(items, text)
    except CheckError as exc:
        return Verdict.failure(Status.sandbox_error, "sandbox_error", error=str(exc))
    return prompt, text, free


def free_met(free: dict[int, tuple[bool | None, str]], items: list[Item]) -> list[float]:
    """1.0 for each met model-free item, 0.0 for each unmet one, and for a check that could not decide
    whichever counts against the response (`undecided_met`); the llm items are filled in by the caller."""
    met = []
    for index, item in enumerate(items):
        verdict = free[index][0] if index in free else False
        met.append(undecided_met(item) if verdict is None else float(verdict))
    return met


def _item_details(items: list[Item], met: list[float], reasons: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "criterion": item.criterion[:200],
            "points": item.points,
            "kind": item.kind,
            "met": fraction,
            "reason": why,
        }
        for item, fraction, why in zip(items, met, reasons, strict=True)
    ]


async def score_rubric(
    response: str | list[dict[str, Any]], reference: RubricReference, options: RubricOptions
) -> Verdict:
    """Check the model-free items, ask the judge about the llm items, and combine the points."""
    items = reference.items
    graded = await grade_model_free(response, reference.prompt, items)
    if isinstance(graded, Verdict):
        return graded
    prompt, text, free = graded
    ledger = Ledger()
    llm = [index for index, item in enumerate(items) if item.kind == "llm"]
    criteria = [(items[index].criterion, items[index].points) for index in llm]
    try:
        if options.mode == "explicit":
            samples = await _explicit(prompt, text, criteria, options, ledger) if llm else [[]]
        else:
            samples = await _implicit(prompt, text, criteria, options, ledger) if llm else [1.0]
    except JudgeError as exc:
        return judge_failure(exc, ledger)
    rewards, met_sum = [], [0.0] * len(items)
    parsed = [sample for sample in samples if sample is not None]
    for sample in samples:
        if sample is None:
            rewards.append(0.0)  # an unparseable reply or a refusal is a wrong verdict
            continue
        met = free_met(free, items)
        if options.mode == "explicit":
            for position, index in enumerate(llm):
                met[index] = 1.0 if sample[position][0] else 0.0
            rewards.append(rubric_reward(items, met))
        else:
            llm_points = sum(items[index].points for index in llm if items[index].points > 0)
            positive = sum(item.points for item in items if item.points > 0)
            free_points = sum(items[index].points * met[index] for index in free)
            rewards.append(min(1.0, max(0.0, (sample * llm_points + free_points) / positive)))
            for index in llm:
                met[index] = sample
        met_sum = [total + value for total, value in zip(met_sum, met, strict=True)]
    met_mean = [total / len(parsed) if parsed else 0.0 for total in met_sum]
    reasons = [free[index][1] if index in free else "" for index in range(len(items))]
    if options.mode == "explicit" and parsed:
        for position, index in enumerate(llm):
            reasons[index] = parsed[0][position][1]
    reward = sum(rewards) / len(rewards)
    details: dict[str, Any] = {"mode": options.mode, "items": _item_details(items, met_mean, reasons)}
    if llm:
        details.update(ledger.details())
    components = {"met_points_fraction": reward, "samples_parsed": float(len(parsed))}
    if not parsed:
        return Verdict(
            reward=0.0, correct=False, reason=unparsed_reason(ledger), details=details, components=components
        )
    return Verdict(
        reward=reward,
        correct=reward >= 1.0,
        reason=None if reward >= 1.0 else "rubric_partial" if reward > 0 else "rubric_unmet",
        details=details,
        components=components,
    )


async def _explicit(
    prompt: str | None, text: str, criteria: list[tuple[str, float]], options: RubricOptions, ledger: Ledger
) -> list[list[tuple[bool, str]] | None]:
    messages = prompts.rubric_explicit(prompt, text, criteria)
    return await ask(options, messages, lambda reply: parse.item_verdicts(reply, len(criteria)), ledger)


async def _implicit(
    prompt: str | None, text: str, criteria: list[tuple[str, float]], options: RubricOptions, ledger: Ledger
) -> list[float | None]:
    messages = prompts.rubric_implicit(prompt, text, criteria)
    verdicts = await ask(
        options, messages, lambda reply: parse.result_score(reply, 0, IMPLICIT_SCALE), ledger
    )
    return [None if value is None else value / IMPLICIT_SCALE for value in verdicts]


_FORMAT_ITEMS = [
    {"criterion": "States the final answer in a box", "kind": "regex", "pattern": r"\\boxed\{[^}]+\}"},
    {"criterion": "Cites a source as [n]", "kind": "regex", "pattern": r"\[\d+\]", "points": 2},
    {"criterion": "Does not shout", "kind": "regex", "pattern": r"!!!", "points": -3},
]

_EXAMPLES = (
    Example(
        "Per [1], the total is \\boxed{12}.", {"items": _FORMAT_ITEMS}, 1.0, note="all model-free items met"
    ),
    Example("", {"items": _FORMAT_ITEMS}, 0.0, note="empty response"),
    Example("<think>[1] \\boxed{12}", {"items": _FORMAT_ITEMS}, 0.0, note="unterminated think block"),
    Example(
        "NO SOURCES!!! \\boxed{12}", {"items": _FORMAT_ITEMS}, 0.0, note="a pitfall cancels the points met"
    ),
    Example(
        "Per [1], the total is 12!!!", {"items": _FORMAT_ITEMS}, 0.0, note="pitfall outweighs the citation"
    ),
)

SPEC = register_verifier(
    VerifierSpec(
        name="judge.rubric",
        version="1.0.0",
        score=score_rubric,
        reference=RubricReference,
        options=RubricOptions,
        description="Rubric items with points (negative for pitfalls): per-item judge verdicts combined as met "
        "points over positive points (explicit) or one holistic judge score (implicit); regex items (RE2) and "
        "code items (sandboxed Python check) need no model.",
        examples=_EXAMPLES,
        execution="inline",
        deadline_s=DEADLINE_S,
        accepts_messages=True,
    )
)
