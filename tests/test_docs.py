"""The README is a short front door whose links all land, and the documentation site covers what exists.

`make test` also builds the site with `mkdocs build --strict`, which checks every link and anchor inside
docs/, that every page is in the navigation, and that the API reference renders; these tests check what that
build cannot see: the README, and that nothing registered goes undocumented.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

import proctor

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        if isinstance(entry, str):
            pages.append(entry)
        elif isinstance(entry, dict):
            for value in entry.values():
                pages.extend(_nav_pages(value) if isinstance(value, list) else [value])
    return pages


def test_readme_is_a_short_front_door():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    for command in ("make serve", "make test", "make docs", "/v1/score", "proctor.score("):
        assert command in text, command


def test_readme_links_land_on_files_in_the_repository():
    targets = [t for t in LINK.findall(README.read_text()) if "://" not in t]
    assert any(t.startswith("docs/") for t in targets)
    broken = [t for t in targets if not (ROOT / t.split("#")[0]).exists()]
    assert not broken, f"README.md links to missing files: {broken}"


def test_every_page_is_in_the_navigation_and_every_nav_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = set(_nav_pages(config["nav"]))
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages - nav == set(), "pages missing from mkdocs.yml nav"
    assert nav - pages == set(), "nav entries without a page"


def test_the_site_builds_offline():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["theme"].get("font") is False  # no web fonts fetched at build or view time
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    assert set(plugins) <= {"search", "mkdocstrings"}, plugins  # e.g. no social cards, which fetch fonts
    python = config["plugins"][plugins.index("mkdocstrings")]["mkdocstrings"]["handlers"]["python"]
    assert "inventories" not in python and "import" not in python  # no object inventories from the web


def test_every_verifier_is_documented():
    text = "\n".join(p.read_text() for p in DOCS.rglob("*.md"))
    puzzles = (DOCS / "environments" / "puzzles.md").read_text()
    missing = []
    for spec in proctor.all_verifiers():
        name = spec.name
        if not spec.score.__module__.startswith("proctor."):
            continue  # test verifiers other tests register in this process
        if name.startswith("puzzle.") and name != "puzzle.mix":
            family = name.removeprefix("puzzle.")
            if not re.search(rf"(^|[|,`\s]){re.escape(family)}([`|,\s]|$)", puzzles, re.M):
                missing.append(name)
        elif f"`{name}`" not in text:
            missing.append(name)
    assert not missing, f"verifiers without documentation: {missing}"
