"""`multi`: a weighted sum or a formula over other verifiers' rewards (format + answer + length shaping).

Reference:

    {"components": {"fmt": {"verifier": "text.match", "reference": {...}, "options": {...}, "weight": 0.2},
                    "answer": {"verifier": "math", "reference": "42", "weight": 0.8}},
     "formula": "0.2 * fmt + 0.8 * answer",        # optional; without it: sum(weight * reward) / sum(weight)
     "preset": "dapo_overlong" | "cosine_length",  # optional, instead of a formula
     "length": 812, "max_length": 1024, "cache_length": 256,
     "range": [-1, 1]}                             # the raw value's range, mapped onto [0, 1]

Each component is scored by the same engine that scores this request (cache, pool and judge client
included), all at once. In a formula each component's name stands for its reward, and `length`,
`max_length` and `cache_length` for the response length (the `length` given, e.g. the trainer's token count,
else the number of whitespace-separated words) and the length budget. Formulas are parsed and evaluated
by `verifiers/formula.py`, never `eval`.

Presets (documented shaping from the literature; both need exactly one component called `answer`):
- `dapo_overlong`: `(2 * answer - 1) + overlong(length, max_length, cache_length)`, raw range [-2, 1]: DAPO's
  rule reward (+1 correct, -1 wrong) plus its soft overlong punishment (0 within max_length - cache_length,
  then down to -1 at max_length, -1 beyond). Mapped onto [0, 1]: correct and short 1, correct but past the
  budget 2/3, wrong and short 1/3, wrong and past the budget 0.
- `cosine_length`: `cosine_scale(answer, length, max_length)`, raw range [-10, 2] (cosine length scaling:
  shorter correct answers earn more, wrong answers are punished less the longer they think).

The raw value is mapped linearly from `range` onto [0, 1] and clipped; `details.raw` keeps it.
A component that fails (any non-ok status) makes the whole score fail with that status (the trainer masks
it), never a partial reward computed without it.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from proctor.contract import RequestError, Status, Verdict
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.verifiers.formula import Formula, FormulaError, Interval, domain_problem, parse_formula

MAX_COMPONENTS = 16
LENGTH_VARIABLES = frozenset({"length", "max_length", "cache_length"})
PRESETS: dict[str, tuple[str, tuple[float, float]]] = {
    "dapo_overlong": ("(2 * answer - 1) + overlong(length, max_length, cache_length)", (-2.0, 1.0)),
    "cosine_length": ("cosine_scale(answer, length, max_length)", (-10.0, 2.0)),
}


class Component(BaseModel):
    """One verifier whose reward feeds the combination."""

    model_config = ConfigDict(extra="forbid")

    verifier: str = Field(min_length=1, description="A registered verifier (not multi itself).")
    reference: Any = Field(default=None, description="That verifier's reference.")
    options: dict[str, Any] = Field(default_factory=dict, description="That verifier's options.")
    weight: float = Field(default=1.0, ge=0, le=1000, description="Weight in the weighted sum (no formula).")


class MultiReference(BaseModel):
    """Components, and how to combine them: a weighted sum, a formula, or a preset."""

    model_config = ConfigDict(extra="forbid")

    components: dict[str, Component] = Field(min_length=1, max_length=MAX_COMPONENTS)
    formula: str | None = Field(
        default=None, max_length=2_000, description="Arithmetic over component names."
    )
    preset: Literal["dapo_overlong", "cosine_length"] | None = Field(default=None)
    length: float | None = Field(
        default=None, ge=0, description="Response length (e.g. tokens); default words."
    )
    max_length: float | None = Field(default=None, gt=0, description="Length budget for the presets.")
    cache_length: float | None = Field(default=None, gt=0, description="DAPO's soft-punishment interval.")
    range: tuple[float, float] | None = Field(
        default=None,
        description="The raw value's range, mapped onto [0, 1] (default [0, 1], or the preset's).",
    )

    @model_validator(mode="after")
    def _check(self) -> MultiReference:
        for name, component in self.components.items():
            if not name.isidentifier() or name in LENGTH_VARIABLES:
                raise ValueError(
                    f"component name {name!r} must be an identifier other than {sorted(LENGTH_VARIABLES)}"
                )
            _check_component(name, component)
        if self.formula is not None and self.preset is not None:
            raise ValueError("give a formula or a preset, not both")
        if self.preset is not None:
            if "answer" not in self.components:
                raise ValueError(f"preset {self.preset} needs a component called 'answer'")
            if self.max_length is None or (self.preset == "dapo_overlong" and self.cache_length is None):
                raise ValueError(
                    f"preset {self.preset} needs max_length"
                    + (" and cache_length" if self.preset == "dapo_overlong" else "")
                )
        if (
            self.formula is None
            and self.preset is None
            and sum(c.weight for c in self.components.values()) <= 0
        ):
            raise ValueError("the weights must not all be 0")
        low, high = self.bounds()
        if not low < high:
            raise ValueError("range must be [low, high] with low < high")
        if self.formula is not None:
            # Only the length variables this reference defines: one it leaves unset would fail every score.
            defined = {"length"} | {
                name for name in ("max_length", "cache_length") if getattr(self, name) is not None
            }
            try:
                Formula(self.formula, set(self.components) | defined)
            except FormulaError as exc:
                raise ValueError(f"formula: {exc}") from None
        expression = self.expression()
        if expression is not None:
            # A formula that has no value somewhere in its variables' ranges would fail scores later (a
            # verifier_error that masks the sample, e.g. a long wrong answer): refused now, with the point.
            problem = check_ranges(
                expression,
                tuple(self.components),
                self.length,
                self.max_length,
                self.cache_length,
                max_words(),
            )
            if problem is not None:
                raise ValueError(
                    f"formula {expression!r} cannot be evaluated over its variables' ranges: {problem}"
                )
        return self

    def expression(self) -> str | None:
        """The formula to evaluate, if any (a preset's or the given one)."""
        return PRESETS[self.preset][0] if self.preset else self.formula

    def bounds(self) -> tuple[float, float]:
        """The raw value's range."""
        if self.range is not None:
            return self.range
        return PRESETS[self.preset][1] if self.preset else (0.0, 1.0)


def max_words() -> int:
    """The most whitespace-separated words a response can have within PROCTOR_MAX_BODY_BYTES (one character
    and one separator each): the top of `length`'s range when the reference does not give it."""
    from proctor.settings import get_settings

    return (get_settings().max_body_bytes + 1) // 2


@lru_cache(maxsize=1024)
def check_ranges(
    expression: str,
    components: tuple[str, ...],
    length: float | None,
    max_length: float | None,
    cache_length: float | None,
    top: int,
) -> str | None:
    """Why the formula may have no value somewhere over its variables' ranges (naming the sub-expression), or
    None.

    Component rewards range over [0, 1]; `length` is the reference's value when it gives one, else any whole
    word count a response within the body limit can have (0 to `top`); max_length/cache_length are constants.
    The check is interval arithmetic over those ranges (`formula.domain_problem`: sound, and conservative, so
    it may refuse a formula that never actually fails).
    """
    fixed = {
        name: value
        for name, value in (("length", length), ("max_length", max_length), ("cache_length", cache_length))
        if value is not None
    }
    formula = Formula(expression, set(components) | set(fixed) | {"length"})
    ranges = {name: Interval(0.0, 1.0) for name in components}
    ranges["length"] = Interval(0.0, float(top), integer=True)
    ranges |= {name: Interval(value, value, float(value).is_integer()) for name, value in fixed.items()}
    where = ", ".join(
        [f"{name} in [0, 1]" for name in components if name in formula.names]
        + [f"{name} = {value:.12g}" for name, value in fixed.items() if name in formula.names]
        + ([f"length a whole number in [0, {top}]"] if "length" in formula.names and length is None else [])
    )
    problem = domain_problem(formula, ranges)
    return None if problem is None else f"{problem} (for {where or 'any values'})"


def _check_component(name: str, component: Component) -> None:
    from proctor.registry import get_verifier

    if component.verifier == "multi":
        raise ValueError(f"component {name}: multi cannot contain multi")
    try:
        spec = get_verifier(component.verifier)
        spec.parse_reference(component.reference)
        spec.parse_options(component.options)
    except RequestError as exc:  # checked now so a bad component is a 422 naming it, never a failed score
        raise ValueError(f"component {name}: {exc.message}") from None


def combine(reference: MultiReference, rewards: dict[str, float], length: float) -> tuple[float, float]:
    """(raw value, reward in [0, 1]) from the component rewards; FormulaError when the formula fails."""
    expression = reference.expression()
    if expression is None:
        total = sum(c.weight for c in reference.components.values())
        raw = sum(c.weight * rewards[name] for name, c in reference.components.items()) / total
    else:
        variables = {**rewards, "length": length}
        if reference.max_length is not None:
            variables["max_length"] = reference.max_length
        if reference.cache_length is not None:
            variables["cache_length"] = reference.cache_length
        raw = parse_formula(expression, frozenset(variables)).evaluate(variables)
    low, high = reference.bounds()
    return raw, min(1.0, max(0.0, (raw - low) / (high - low)))


async def score_multi(response: str, reference: MultiReference, options: BaseOptions) -> Verdict:
    """Score every component through the engine at once, then combine their rewards."""
    from proctor.engine import current_engine, prepare, request_size

    engine = current_engine()
    names = list(reference.components)
    requests = [
        {"verifier": c.verifier, "response": response, "reference": c.reference, "options": c.options}
        for c in reference.components.values()
    ]
    # Each prepare cuts end tokens, validates and hashes the whole response and reference: past
    # inline_max_chars (the engine's measure, as Engine.prepare_async sizes a request) they all run on one
    # thread, never the event loop. asyncio.to_thread carries the context, so the components still inherit
    # this item's end tokens.
    limit = engine.settings.inline_max_chars
    if len(response) > limit or any(request_size(request, limit).total > limit for request in requests):
        items = await asyncio.to_thread(lambda: [prepare(request) for request in requests])
    else:
        items = [prepare(request) for request in requests]
    scores = await asyncio.gather(*(engine.score_nested(item) for item in items))
    parts = {
        name: {
            "verifier": s.verifier,
            "status": s.status.value,
            "reward": s.reward,
            "reason": s.reason,
            "cached": s.cached,
        }
        for name, s in zip(names, scores, strict=True)
    }
    for name, score in zip(names, scores, strict=True):
        if score.status is not Status.ok:
            return Verdict.failure(
                score.status, f"component_{score.status.value}", component=name, components=parts
            )
    rewards = {name: score.reward for name, score in zip(names, scores, strict=True)}
    if reference.length is not None:
        length = reference.length
    elif len(response) > limit:  # counting words reads the whole response: a thread for a large one
        length = float(await asyncio.to_thread(lambda: len(response.split())))
    else:
        length = float(len(response.split()))
    try:
        raw, reward = combine(reference, rewards, length)
    except FormulaError as exc:
        return Verdict.failure(Status.verifier_error, "formula_error", error=str(exc), components=parts)
    details = {
        "raw": raw,
        "length": length,
        "formula": reference.expression() or "weighted_sum",
        "components": parts,
    }
    reason = None if reward >= 1.0 else "partial" if reward > 0 else "no_reward"
    return Verdict(reward=reward, correct=reward >= 1.0, reason=reason, components=rewards, details=details)


_FORMAT_AND_ANSWER = {
    "fmt": {
        "verifier": "text.match",
        "reference": {"answer": ".+", "op": "regex"},
        "options": {"extract": "answer_tag"},
    },
    "answer": {"verifier": "text.match", "reference": "42"},
}

_EXAMPLES = (
    Example("<answer>42</answer>", {"components": _FORMAT_AND_ANSWER}, 1.0, note="format and answer"),
    Example(
        "<answer>42</answer>",
        {"components": _FORMAT_AND_ANSWER, "formula": "fmt * answer"},
        1.0,
        note="formula: answer counts only in format",
    ),
    Example(
        "<answer>42</answer>",
        {
            "components": {"answer": _FORMAT_AND_ANSWER["answer"]},
            "preset": "dapo_overlong",
            "length": 100,
            "max_length": 1000,
            "cache_length": 200,
        },
        1.0,
        note="DAPO overlong: within budget, no penalty",
    ),
    Example("", {"components": _FORMAT_AND_ANSWER}, 0.0, note="empty response"),
    Example(
        "42",
        {"components": _FORMAT_AND_ANSWER, "formula": "fmt * answer"},
        0.0,
        note="right answer, no format",
    ),
    Example(
        "<answer>41</answer>",
        {
            "components": {"answer": _FORMAT_AND_ANSWER["answer"]},
            "preset": "dapo_overlong",
            "length": 1500,
            "max_length": 1000,
            "cache_length": 200,
        },
        0.0,
        note="DAPO overlong: wrong and past the budget",
    ),
)

SPEC = register_verifier(
    VerifierSpec(
        name="multi",
        version="1.0.0",
        score=score_multi,
        reference=MultiReference,
        options=BaseOptions,
        description="A weighted sum or a safe arithmetic formula over other verifiers' rewards, with length "
        "shaping presets (DAPO soft overlong punishment, cosine length scaling); a failing component fails it.",
        examples=_EXAMPLES,
        execution="inline",
        deadline_s=300.0,
    )
)
