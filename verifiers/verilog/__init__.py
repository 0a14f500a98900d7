"""Verilog verifier `verilog`: harness-owned testbench, randomized lockstep simulation and formal equivalence."""

from proctor.verifiers.verilog import verifier  # noqa: F401
