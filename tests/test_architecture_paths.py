"""ARCHITECTURE.md stays a true map: every file path and `proctor.*` module it names exists in the repository,
and it points at nothing outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "ARCHITECTURE.md"
CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FILE_NAME = re.compile(r"^[\w.-]+\.(py|md|toml|yml|yaml|json|jsonl|txt|sh|sqlite)$")
MODULE = re.compile(r"^proctor(\.\w+)+$")


def _text() -> str:
    return MAP.read_text(encoding="utf-8")


def _top_level() -> set[str]:
    return {path.name for path in ROOT.iterdir()} - {".git", ".venv", "build"}


def _tracked_names() -> set[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return {Path(line).name for line in listed.stdout.splitlines()}


def _repo_paths(text: str) -> list[str]:
    """Backticked tokens that name a path in the repository (first segment a top-level entry) and link targets."""
    top = _top_level()
    found = []
    for token in CODE.findall(text):
        token = token.strip()
        if " " in token or token.startswith("/"):
            continue  # prose, commands and paths inside a sandbox (/box, /tmp) are not repository paths
        if "/" in token and token.split("/")[0] in top:
            found.append(token)
    for target in LINK.findall(text):
        if "://" not in target and not target.startswith("#"):
            found.append(target.split("#")[0])
    return found


def test_every_path_it_names_exists():
    paths = _repo_paths(_text())
    assert len(paths) > 50, "the path extraction found almost nothing; has the page's format changed?"
    missing = sorted({p for p in paths if not (ROOT / p).exists()})
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_bare_file_name_it_names_exists_somewhere():
    names = {t for t in CODE.findall(_text()) if FILE_NAME.match(t)}
    missing = sorted(names - _tracked_names() - _top_level())
    assert not missing, f"ARCHITECTURE.md names files that do not exist: {missing}"


def _resolves(dotted: str) -> bool:
    """proctor.a.b resolves to a module file, or to a name defined at the top of the longest module prefix."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if base.is_dir() and not module.exists() and end == len(parts):
            return True  # a namespace package (proctor.datasets)
        if module.is_file():
            rest = parts[end:]
            if not rest:
                return True
            name = re.escape(rest[0])
            pattern = (
                rf"^(?:async\s+def|def|class)\s+{name}\b|^{name}\s*[:=]|^\s+(?:async\s+def|def)\s+{name}\b"
            )
            return len(rest) <= 2 and re.search(pattern, module.read_text(encoding="utf-8"), re.M) is not None
    return False


def test_every_module_it_names_exists():
    modules = sorted(
        {t.removesuffix("()") for t in CODE.findall(_text()) if MODULE.match(t.removesuffix("()"))}
    )
    assert modules, "no proctor.* module found; has the page's format changed?"
    missing = [m for m in modules if not _resolves(m)]
    assert not missing, f"ARCHITECTURE.md names modules or names that do not exist: {missing}"


def test_it_points_nowhere_outside_the_repository():
    text = _text()
    outside = [t for t in CODE.findall(text) + LINK.findall(text) if t.startswith("../") or "/../" in t]
    assert not outside, f"paths outside the repository: {outside}"
    for marker in ("/work/", "/home/", "/Users/", "../shared"):
        assert marker not in text, marker
