"""Built-in verifier families; importing this package registers them all."""

from proctor.verifiers import code, judge, math, multi, sql, text, verilog  # noqa: F401
