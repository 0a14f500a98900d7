"""Verilog verifier `verilog`: harness-owned testbench, randomized lockstep simulation and formal equivalence."""
