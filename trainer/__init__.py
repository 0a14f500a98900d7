"""The GRPO reference trainer behind `proctor train` (extra `proctor[train]`).

`config.py` holds every hyperparameter (`TrainConfig`), `grpo.py` the algorithm and the loop, `tokenizer.py`
a character-level tokenizer for tiny models built without downloads; `configs/tiny.yaml` is the example run.
"""
