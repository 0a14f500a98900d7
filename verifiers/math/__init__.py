"""The `math` verifier family: importing this package registers `math`."""

from proctor.verifiers.math import verifier  # noqa: F401
