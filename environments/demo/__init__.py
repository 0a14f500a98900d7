"""Toy tasks for the reference trainer (`demo.*`); not puzzles, outside the puzzle gates."""
