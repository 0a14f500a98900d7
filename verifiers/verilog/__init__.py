"""Verilog verifier `verilog`: harness-owned testbench, randomized lockstep simulation and formal equivalence
(`verifier` registers it when imported)."""
