"""Toy tasks for the reference trainer (`demo.*`); not puzzles, outside the puzzle gates. `tasks` registers
demo.max_digit and demo.sum when imported."""
