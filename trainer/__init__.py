"""The GRPO reference trainer (extra `proctor[train]`). Built in a later issue."""
