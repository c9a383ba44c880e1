"""The layering of docs/contributing.md, checked on the source: no package imports one above it.

``spec`` imports nothing of ours; the pure core (``reference/`` outside ``reference/engine/``)
imports ``spec`` only; the engine imports ``spec`` and ``reference``; ``invariants`` adds the
engine's package; ``proofs`` adds ``invariants``; ``txnmodel`` may import everything.  Imports are
read with ``ast`` (every one, lazy and ``TYPE_CHECKING`` ones included), so nothing is imported
and nothing runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = ("spec", "reference", "invariants", "proofs", "txnmodel")
ENGINE = "reference.engine"

# A layer and the layers it may import (itself included).
ALLOWED: dict[str, frozenset[str]] = {
    "spec": frozenset({"spec"}),
    "reference": frozenset({"spec", "reference"}),
    ENGINE: frozenset({"spec", "reference", ENGINE}),
    "invariants": frozenset({"spec", "reference", ENGINE, "invariants"}),
    "proofs": frozenset({"spec", "reference", ENGINE, "invariants", "proofs"}),
    "txnmodel": frozenset(OURS) | {ENGINE},
}


def layer(module: str) -> str:
    """The layer a dotted module name belongs to (``reference.engine...`` is the engine's)."""
    if module == ENGINE or module.startswith(ENGINE + "."):
        return ENGINE
    return module.split(".")[0]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, *, is_package: bool) -> list[tuple[int, str]]:
    """(line, dotted name) of every import of ``source``, relative ones resolved against ``module``;
    ``from package import name`` yields ``package.name`` too, since ``name`` may be a module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            found.extend((node.lineno, f"{target}.{alias.name}") for alias in node.names if alias.name != "*")
    return found


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Every import of ``source`` (module ``module``) that reaches a layer above its own."""
    own = layer(module)
    out = []
    for line, name in imported_modules(source, module, is_package=is_package):
        if name.split(".")[0] not in OURS:
            continue  # the standard library and third-party packages
        if layer(name) not in ALLOWED[own]:
            out.append(f"{module}:{line} imports {name} ({own} may import {', '.join(sorted(ALLOWED[own]))})")
    return out


def _sources(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if "pb" not in p.relative_to(ROOT).parts[1:2])


@pytest.mark.parametrize("package", OURS)
def test_no_package_imports_a_layer_above_it(package: str) -> None:
    found = [
        problem
        for path in _sources(package)
        for problem in violations(
            path.read_text(encoding="utf-8"), module_name(path), is_package=path.name == "__init__.py"
        )
    ]
    assert not found, "\n".join(found)


def test_every_source_file_is_in_a_layer() -> None:
    assert all(_sources(package) for package in OURS)
    assert {layer(module_name(p)) for package in OURS for p in _sources(package)} == set(ALLOWED)


@pytest.mark.parametrize(
    ("module", "source", "bad"),
    [
        ("spec.types", "from reference import buffer\n", "reference"),
        ("spec.types", "def f():\n    import invariants.base\n", "invariants.base"),
        ("reference.buffer", "from reference.engine import sim\n", "reference.engine"),
        ("reference.buffer", "from reference import engine\n", "reference.engine"),
        ("reference.delayed", "from .engine.broker import Broker\n", "reference.engine.broker"),
        (
            "reference.engine.simulate",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from invariants.history import write_parquet\n",
            "invariants.history",
        ),
        ("invariants.bulk", "from txnmodel.common import EXIT_OK\n", "txnmodel.common"),
    ],
)
def test_an_upward_import_is_caught(module: str, source: str, bad: str) -> None:
    """The check itself: each of these imports reaches above its module's layer."""
    assert any(f"imports {bad} " in v for v in violations(source, module))


def test_imports_within_the_rules_pass() -> None:
    source = "import json\nfrom spec.types import TxnID\nfrom . import buffer\nfrom reference.delayed_runs import Run\n"
    assert violations(source, "reference.delayed") == []
    assert (
        violations("from ..sim import Future\nfrom reference import buffer\n", "reference.engine.broker.partition")
        == []
    )
    assert violations("from .component import read_all\n", "reference.engine.broker", is_package=True) == []
