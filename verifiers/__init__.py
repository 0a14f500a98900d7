"""Built-in verifier families; importing this package registers them all."""

from proctor.verifiers import code, math, text  # noqa: F401
