"""LLM-judge verifiers (`judge.rubric`, `judge.principles`, `judge.equivalence`, `judge.pairwise`) and their
client; each verifier module registers its verifier when imported."""
