"""The shape of the code: no import cycle between Proctor's modules, and no long function in the sandboxes.

Both read the source with `ast` (nothing is imported but the packages' locations), so a lazy import inside a
function counts as an edge too: a cycle hidden behind one is still a cycle a reader has to untangle.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PACKAGES = ("api", "datasets", "environments", "sandboxes", "trainer", "verifiers")
MAX_FUNCTION_LINES = 80


def _location(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, package
    return Path(next(iter(spec.submodule_search_locations)))


def _modules() -> dict[str, Path]:
    """Every module of the proctor package, by dotted name, wherever its folder lives."""
    found: dict[str, Path] = {}
    roots = [("proctor", _location("proctor"))]
    roots += [(f"proctor.{name}", _location(f"proctor.{name}")) for name in PACKAGES]
    for prefix, root in roots:
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if prefix == "proctor" and parts[0] in PACKAGES:
                continue  # reached through a link: listed under its own root
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((prefix, *parts))] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The proctor modules `name` imports, at module level or inside a function."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    wanted: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            wanted.update(
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            )
    found = set()
    for target in wanted:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_import_cycle() -> None:
    modules = _modules()
    assert "proctor.sandboxes.job" in modules and "proctor.contract" in modules
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert _cycles(graph) == []


def test_the_cycle_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


@pytest.mark.parametrize("package", ["sandboxes"])
def test_no_function_over_80_lines(package: str) -> None:
    long = []
    for path in sorted(_location(f"proctor.{package}").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
