"""Task makers: procedural puzzles (`puzzle.*`) and the trainer's toy tasks (`demo.*`).

Importing this package registers every environment and its verifier.
"""

from proctor.environments import demo, puzzles  # noqa: F401  (importing registers them)
