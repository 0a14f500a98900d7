"""The `math` verifier family: `verifier` registers `math` when imported."""
