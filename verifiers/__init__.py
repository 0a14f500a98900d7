"""The verifier families, one subpackage each (text, math, code, sql, verilog, judge) plus `multi`, and what
they share: response reading (`reading`), answer verdicts (`answers`), RE2 patterns (`patterns`).

Importing this package, or any module in it, registers nothing beyond that module's own verifiers:
`proctor.registry.load_verifiers()` imports the built-in families (its BUILTIN_MODULES list).
"""
