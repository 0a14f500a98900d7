"""Convert Math-Verify's own test cases into bench/data/math_verify_tests.jsonl (inputs and verdicts only).

Run with `.venv/bin/python bench/convert_math_verify_tests.py /tmp/mvsrc/math_verify-0.9.0` (the unpacked
math-verify 0.9.0 sdist from PyPI; `--out` to write elsewhere). The output is deterministic: same sdist, same
file, byte for byte.

How the cases are captured (no hand copying, no Math-Verify code copied into this repository): the sdist's
test modules are imported from its `tests/` folder, and every test function is called once per
`pytest.mark.parametrize` parameter set with the comparison helper replaced by a recorder:

- `compare_strings(gold, pred, match_types=..., precision=..., strict=..., allow_set_relation_comp=...)`
  (test_all.py, and the files that import it from there) records its bound arguments, with the helper's own
  defaults applied, and returns a sentinel whose `==` records the expected verdict the test asserts;
- `parse`/`verify` (test_yujianll.py, which calls them with their defaults) record that the defaults are
  used; the expected verdict is the test's `result` parameter.

Non-parametrized test functions are called the same way (test_precision's string comparison is captured;
its direct `sympy_expr_eq` asserts run for real and are not rows). Files that are not (gold, prediction,
verdict) pairs are skipped; `SKIPPED` says which and why, and the script prints it.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import logging
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "data" / "math_verify_tests.jsonl"

CONVERTED = [
    "test_all.py",
    "test_numina_cases.py",
    "test_open_thoughts.py",
    "test_boxed.py",
    "test_strict.py",
    "test_yujianll.py",
]
SKIPPED = {
    "test_string_extraction.py": "StringExtractionConfig parse() output checks (multiple-choice letters), no gold",
    "test_gamma_func.py": "parse() output compared with a sympy object (Gamma), no gold string",
    "test_configs.py": "extraction-config plumbing (boxed_match_priority, NormalizationConfig), no verdict",
    "test_raise_on_error.py": "verify(raise_on_error=...) error propagation with a mocked comparator",
    "test_timeout.py": "timeout handling with mocked slow parse/verify",
    "test_all.py::test_precision (sympy_expr_eq asserts)": "sympy objects compared directly, no strings; "
    "its compare_strings case is converted",
}
DEFAULT_PRECISION = 6  # verify()'s and compare_strings' float_rounding default


class _Expected:
    """Returned by the recording helper: `helper(...) == expected` records the expected verdict."""

    def __init__(self, sink: dict[str, Any]):
        self.sink = sink

    def __eq__(self, other: object) -> bool:
        self.sink["expected"] = other
        return True

    def __hash__(self) -> int:
        return 0


def config_label(match_types: list[str], precision: int, strict: bool, set_rel: bool) -> str:
    """A short label of the extraction and comparison settings a case used: 'latex+expr', 'latex;precision=2'."""
    parts = ["+".join(match_types)]
    if precision != DEFAULT_PRECISION:
        parts.append(f"precision={precision}")
    if not strict:
        parts.append("strict=False")
    if set_rel:
        parts.append("allow_set_relation_comp")
    return ";".join(parts)


def load_tests(tests_dir: Path) -> dict[str, types.ModuleType]:
    """Import the converted test modules under a private `tests` package rooted at the sdist's tests/."""
    saved = {name: mod for name, mod in sys.modules.items() if name == "tests" or name.startswith("tests.")}
    for name in saved:
        del sys.modules[name]
    package = types.ModuleType("tests")
    package.__path__ = [str(tests_dir)]
    sys.modules["tests"] = package
    modules: dict[str, types.ModuleType] = {}
    try:
        for filename in CONVERTED:
            name = f"tests.{filename[:-3]}"
            spec = importlib.util.spec_from_file_location(name, tests_dir / filename)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            modules[filename] = module
    finally:
        for name in [n for n in sys.modules if n == "tests" or n.startswith("tests.")]:
            del sys.modules[name]
        sys.modules.update(saved)
    return modules


def param_sets(func: Any) -> list[dict[str, Any]]:
    """The keyword arguments of each parametrized call of a test function ([{}] when not parametrized)."""
    sets: list[dict[str, Any]] = [{}]
    for mark in getattr(func, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names, values = mark.args[0], mark.args[1]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        expanded = []
        for base in sets:
            for value in values:
                value = getattr(value, "values", value)  # pytest.param(...)
                row = (value,) if len(names) == 1 else tuple(value)
                expanded.append({**base, **dict(zip(names, row, strict=True))})
        sets = expanded
    return sets


def capture(filename: str, module: types.ModuleType) -> list[dict[str, Any]]:
    """Call each test function of one module with recorders in place; one row per recorded comparison."""
    rows: list[dict[str, Any]] = []
    original = getattr(module, "compare_strings", None)
    signature = inspect.signature(original) if original is not None else None
    calls: list[dict[str, Any]] = []

    def record_compare(*args: Any, **kwargs: Any) -> _Expected:
        assert signature is not None
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        call = dict(bound.arguments)
        calls.append(call)
        return _Expected(call)

    def record_parse(text: str, *args: Any, **kwargs: Any) -> str:
        assert not args and not kwargs, "test_yujianll is expected to call parse() with its defaults"
        return text

    def record_verify(gold: str, pred: str, *args: Any, **kwargs: Any) -> bool:
        assert not args and not kwargs, "test_yujianll is expected to call verify() with its defaults"
        calls.append({"gold": gold, "pred": pred, "defaults": True})
        return False

    if original is not None:
        module.compare_strings = record_compare  # type: ignore[attr-defined]
    if filename == "test_yujianll.py":
        module.parse = record_parse  # type: ignore[attr-defined]
        module.verify = record_verify  # type: ignore[attr-defined]
    for name, func in sorted(vars(module).items(), key=lambda item: _line(item[1])):
        if not name.startswith("test_") or not callable(func) or func.__module__ != module.__name__:
            continue
        for index, params in enumerate(param_sets(func)):
            calls.clear()
            try:
                func(**params)
            except AssertionError:
                if filename != "test_yujianll.py":  # there the recorder's False fails the assert
                    raise
            source = f"{filename}::{name}" + (f"[{index}]" if params else "")
            for k, call in enumerate(calls):
                if call.get("defaults"):
                    config, expected = "parse-defaults", params["result"]
                else:
                    config = config_label(
                        call["match_types"],
                        call["precision"],
                        call["strict"],
                        call["allow_set_relation_comp"],
                    )
                    expected = call["expected"]
                rows.append(
                    {
                        "source": source if len(calls) == 1 else f"{source}#{k}",
                        "gold": call["gold"],
                        "prediction": call["pred"],
                        "expected": bool(expected),
                        "config": config,
                    }
                )
    return rows


def _line(obj: Any) -> int:
    code = getattr(obj, "__code__", None)
    return code.co_firstlineno if code is not None else 0


NOTES = {
    "parse-defaults": "parse()/verify() defaults: LatexExtractionConfig() + ExprExtractionConfig(), "
    "float_rounding=6, strict=True",
}


def convert(sdist: Path) -> list[dict[str, Any]]:
    """All rows of the converted test files, in file order, with ids."""
    logging.disable(logging.CRITICAL)
    modules = load_tests(sdist / "tests")
    rows: list[dict[str, Any]] = []
    for filename in CONVERTED:
        rows.extend(capture(filename, modules[filename]))
    out = []
    for number, row in enumerate(rows, 1):
        note = NOTES.get(
            row["config"],
            "compare_strings: LatexExtractionConfig(boxed_match_priority=0) "
            "and/or ExprExtractionConfig() for both sides",
        )
        out.append({"id": f"mvt-{number:03d}", **row, "note": note})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdist", type=Path, help="the unpacked math-verify 0.9.0 sdist folder")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = convert(args.sdist)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")
    print(f"wrote {len(rows)} rows to {args.out}")
    for what, why in SKIPPED.items():
        print(f"skipped {what}: {why}")


if __name__ == "__main__":
    main()
