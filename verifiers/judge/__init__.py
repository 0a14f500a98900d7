"""LLM-judge verifiers (`judge.rubric`, `judge.principles`, `judge.equivalence`, `judge.pairwise`) and their client."""

from proctor.verifiers.judge import equivalence, pairwise, principles, rubric  # noqa: F401  (importing registers them)
