"""Text verifiers: exact/regex answer matching (`text.match`) and multiple-choice (`text.choice`)."""

from proctor.verifiers.text import choice, match  # noqa: F401  (importing registers them)
