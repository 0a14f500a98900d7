"""Task makers: procedural puzzles and multi-turn tool-use environments. Built in a later issue."""
