"""docs/contributing.md's module map is the tree: one row per folder of the product, every module of
the folder named in its row, nothing named that is not there."""

from __future__ import annotations

import re
from pathlib import Path

from spec.layout import PACKAGES

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(?P<folder>[\w/]+/)` \| (?P<text>.*) \|$")


def module_map() -> dict[str, set[str]]:
    text = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    section = text[text.index("## Module map") :]
    section = section[: section.find("\n## ", 5) if "\n## " in section[5:] else len(section)]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            rows[match["folder"]] = set(re.findall(r"`([\w]+)`", match["text"]))
    return rows


def tree() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            folder = path.parent.relative_to(ROOT)
            if folder.parts[:2] == ("spec", "pb") or (path.name == "__init__.py" and path.stat().st_size == 0):
                continue
            if path.name == "__init__.py":
                if folder.parent != Path(".") and folder.parts[:2] != ("spec", "pb"):
                    # a package inside a folder is one of the folder's modules, with a row of its own
                    found.setdefault(f"{folder.parent}/", set()).add(folder.name)
                continue
            found.setdefault(f"{folder}/", set()).add(path.stem)
    return found


def test_every_folder_has_a_row_and_every_row_a_folder() -> None:
    assert sorted(module_map()) == sorted(tree())


def test_every_module_is_named_in_its_folders_row() -> None:
    rows = module_map()
    missing = {folder: sorted(modules - rows.get(folder, set())) for folder, modules in tree().items()}
    assert not {k: v for k, v in missing.items() if v}


def test_every_module_named_exists() -> None:
    modules = tree()
    # a row may name other things in backticks (`Ok`, `inspect`): only names that look like one of
    # the folder's modules but are not are stale
    stale = {}
    for folder, names in module_map().items():
        here = modules.get(folder, set())
        elsewhere = {m for f, ms in modules.items() if f != folder for m in ms}
        gone = sorted(n for n in names - here if n.islower() and n not in elsewhere and n not in _WORDS)
        if gone:
            stale[folder] = gone
    assert not stale


# backticked words in the rows that are not modules
_WORDS = frozenset(
    {
        "inspect",
        "txnmodel",
        "record",
        "serve",
        "check",
        "verify",
        "run",
        "vectors",
        "prove",
        "config",
        "simulate",
        "view",
        "history",
    }
)
