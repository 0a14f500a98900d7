"""Helpers the math tests share: the reward of one response against one gold, scored in process."""

from __future__ import annotations

from proctor.verifiers.math.verifier import MathOptions, MathReference, score_math


def reward(response: str, gold: str, **options: object) -> float:
    """The `math` reward of a response against a gold (options as MathOptions takes them)."""
    return score_math(response, MathReference(answer=gold), MathOptions(**options)).reward  # type: ignore[arg-type]


def boxed_reward(answer: str, gold: str, **options: object) -> float:
    """The `math` reward of `\\boxed{answer}` against a gold."""
    return reward(f"\\boxed{{{answer}}}", gold, **options)
