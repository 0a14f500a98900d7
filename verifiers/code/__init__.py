"""The `code` verifier family: importing this package registers `code`."""

from proctor.verifiers.code import verifier  # noqa: F401
