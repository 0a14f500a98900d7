"""Task makers: procedural puzzles (`puzzle.*`, in `puzzles/`) and the trainer's toy tasks (`demo.*`).

Importing this package registers nothing; `proctor.registry.load_verifiers()` imports the environment
modules, which register each environment and its verifier.
"""
