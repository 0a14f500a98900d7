"""Built-in verifier families; importing this package registers them all."""

from proctor.verifiers import math, text  # noqa: F401
