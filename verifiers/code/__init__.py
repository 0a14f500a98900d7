"""The `code` verifier family: `verifier` registers `code` when imported."""
