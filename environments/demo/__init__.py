"""Toy tasks for the reference trainer (`demo.*`); not puzzles, outside the puzzle gates."""

from proctor.environments.demo import tasks  # noqa: F401  (importing registers demo.max_digit and demo.sum)
