"""Procedural puzzle families; each registers the verifier `puzzle.<family>` and an environment.

Every module in this package is imported here, in sorted order, so a new family only needs its own module
(environments/puzzles/<family>.py ending in `register_family(...)`); nobody edits this file to add one.
"""

import importlib
import pkgutil

for _module in sorted(info.name for info in pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        importlib.import_module(f"{__name__}.{_module}")
