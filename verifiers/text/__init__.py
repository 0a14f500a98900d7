"""Text verifiers: exact/regex answer matching (`text.match`), multiple-choice (`text.choice`) and similarity
to reference text (`text.similarity`)."""

from proctor.verifiers.text import choice, match, similarity  # noqa: F401  (importing registers them)
