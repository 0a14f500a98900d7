"""What a trainer gets when scoring failed: the `on_failure` policy shared by adapters and compat routes."""

from __future__ import annotations

from typing import Literal

from proctor.contract import Score, Status

FailurePolicy = Literal["raise", "none", "value"]
FAILURE_POLICIES: tuple[str, ...] = ("raise", "none", "value")


class ScoringFailed(RuntimeError):
    """Scoring failed (status other than ok) and the policy is `raise`: stop the run loudly."""

    def __init__(self, score: Score):
        super().__init__(
            f"scoring failed for item {score.id!r} with {score.verifier}: status={score.status.value} "
            f"reason={score.reason}"
        )
        self.score = score


def reward_or_policy(score: Score, policy: FailurePolicy, value: float = 0.0) -> float | None:
    """The score's reward when it is a true verdict; otherwise what the policy says (raise, None, or value)."""
    if score.status is Status.ok:
        return score.reward
    if policy == "raise":
        raise ScoringFailed(score)
    if policy == "none":
        return None
    return value
