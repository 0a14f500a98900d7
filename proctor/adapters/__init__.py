"""Drop-in reward adapters for trainers (verl, TRL, OpenRLHF)."""
