"""Looking up a built-in verifier imports only the module that registers it; everything else loads everything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from proctor.contract import RequestError
from proctor.environments.tools.base import get_tool_environment
from proctor.registry import BUILTIN_MODULES, all_verifiers, builtin_module, get_verifier

ROOT = Path(__file__).resolve().parents[1]


def test_every_built_in_verifier_is_found_through_the_module_that_registers_it():
    built_in = [spec for spec in all_verifiers() if spec.score.__module__.startswith("proctor.")]
    assert len(built_in) > 40
    for spec in built_in:
        module = builtin_module(spec.name)
        assert module in BUILTIN_MODULES, spec.name
        # the module named is the one whose import registers it (puzzle families register from the package; a
        # tool environment's replay verifier is made in tools/base.py, so its environment class says where)
        defined_in = spec.score.__module__
        if defined_in == "proctor.environments.tools.base":
            defined_in = type(get_tool_environment(spec.name)).__module__
        assert defined_in.startswith(module) or module.startswith(defined_in.rsplit(".", 1)[0]), spec.name


def test_a_name_no_built_in_module_registers_loads_everything_and_is_a_404():
    assert builtin_module("nope") is None and builtin_module("puzzle.") == "proctor.environments.puzzles"
    with pytest.raises(RequestError) as error:
        get_verifier("puzzle.no_such_family")
    assert error.value.status == 404 and "text.match" in error.value.message


def _fresh(program: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def test_one_text_match_item_in_a_fresh_process_imports_no_other_family():
    loaded = _fresh(
        "import sys, proctor\n"
        "assert proctor.score('text.match', response='\\\\boxed{42}', reference='42').reward == 1.0\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('proctor.', 'sqlglot', 'httpx')))))"
    ).split()
    families = ("math", "code", "sql", "verilog", "judge", "multi")
    assert not [m for m in loaded if m.startswith(tuple(f"proctor.verifiers.{f}" for f in families))], loaded
    assert not [m for m in loaded if m.startswith(("proctor.environments.puzzles", "sqlglot"))], loaded


def test_a_plugin_from_the_environment_is_still_found_in_a_fresh_process():
    env_program = "import os, proctor\nspec = proctor.get_verifier('test.misbehave')\nprint(spec.name)"
    done = subprocess.run(
        [sys.executable, "-c", env_program],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "PROCTOR_PLUGINS": "tests.plugins.slow"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "test.misbehave"


def test_looking_up_a_built_in_environment_in_a_fresh_process_imports_no_verifier_family():
    loaded = _fresh(
        "import sys\n"
        "from proctor.environments.registry import get_environment\n"
        "assert len(get_environment('puzzle.sudoku').tasks('train', 0, 1, None, None)) == 1\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('proctor.', 'sqlglot')))))"
    ).split()
    families = ("math", "code", "sql", "verilog", "judge", "multi")
    assert not [m for m in loaded if m.startswith(tuple(f"proctor.verifiers.{f}" for f in families))], loaded
    assert not [m for m in loaded if m.startswith(("proctor.environments.demo", "sqlglot"))], loaded
