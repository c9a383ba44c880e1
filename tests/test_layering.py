"""The layers of :mod:`spec.layout`, checked on the source: no import crosses them upward, no import
circle anywhere in the product, and no module uses another module's private (``_underscore``) names.

Imports are read with ``ast`` (every one, lazy and ``TYPE_CHECKING`` ones included), so nothing is
imported and nothing runs.  ``from package import name`` counts as importing ``package.name`` when
that is a module, else ``package`` (its ``__init__``).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

from invariants.graphs import strongly_connected_components
from spec.layout import LAYERS, PACKAGES, layer_of, may_import

ROOT = Path(__file__).resolve().parents[1]


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
    out = []
    for line, name in imported_modules(source, module, is_package=is_package):
        if name.split(".")[0] not in PACKAGES:
            continue  # the standard library and third-party packages
        if not may_import(module, name):
            own = layer_of(module)
            allowed = ", ".join(sorted(LAYERS[own])) or "nothing of ours"
            out.append(f"{module}:{line} imports {name} ({own} may import {allowed})")
    return out


def sources(package: str) -> list[Path]:
    return sorted(p for p in (ROOT / package).rglob("*.py") if p.relative_to(ROOT).parts[:2] != ("spec", "pb"))


def product_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sources(package)}


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the product modules it imports (a name resolved to its longest module prefix).

    ``from package import submodule`` imports the submodule; the package's ``__init__`` runs first
    whatever the spelling, as for every module of the package, so that alone is no edge to it.  A
    module of another package is an edge to that package's ``__init__`` too (:func:`outer_packages`)."""

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        found = imported_modules(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py")
        names = {name for _, name in found}
        # a package named only as the source of submodules it is asked for: not imported for itself
        sources = {n.rpartition(".")[0] for n in names if n in modules}
        targets = {
            t
            for name in names
            if (t := resolve(name)) is not None
            and t != module
            and not (name in sources and all(m.rpartition(".")[0] != name or m in modules for m in names))
        }
        graph[module] = targets | {p for t in targets for p in outer_packages(t, module, modules)}
    return graph


def outer_packages(target: str, importer: str, modules: Mapping[str, Path]) -> set[str]:
    """The packages whose ``__init__`` importing ``target`` runs first, outside the importer's own:
    a module of another package is reached through that package's ``__init__``, and a circle
    through it fails at import time as surely as one between modules."""
    parts = target.split(".")
    outer = {".".join(parts[:i]) for i in range(1, len(parts))}
    return {p for p in outer if p in modules and not (importer == p or importer.startswith(p + "."))}


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (the checkers'
    own Tarjan, :func:`invariants.graphs.strongly_connected_components`)."""
    return strongly_connected_components(graph)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_package_imports_a_layer_above_it(package: str) -> None:
    found = [
        problem
        for path in sources(package)
        for problem in violations(
            path.read_text(encoding="utf-8"), module_name(path), is_package=path.name == "__init__.py"
        )
    ]
    assert not found, "\n".join(found)


def test_no_import_circle() -> None:
    assert circles(import_graph(product_modules())) == []


def test_every_source_file_is_in_a_layer() -> None:
    modules = product_modules()
    assert all(sources(package) for package in PACKAGES)
    assert {layer_of(m) for m in modules} <= set(LAYERS)
    # every folder of the engine is a layer of its own: nothing hides in the package's root
    engine = {layer_of(m) for m in modules if m.startswith("engine")}
    assert engine == {name for name in LAYERS if name.startswith("engine")}


def test_the_installed_packages_are_the_layers() -> None:
    """pyproject.toml installs exactly the packages the layers name."""
    import tomllib

    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(found) == sorted(f"{p}*" for p in PACKAGES)


@pytest.mark.parametrize(
    ("module", "source", "bad"),
    [
        ("spec.types", "from reference import buffer\n", "reference"),
        ("spec.types", "def f():\n    import invariants.base\n", "invariants.base"),
        ("reference.buffer", "from engine.scheduler import Future\n", "engine.scheduler"),
        ("reference.delayed", "from engine.broker import Broker\n", "engine.broker"),
        ("invariants.verify", "from views.report import render_text\n", "views.report"),
        ("invariants.verify", "from history_io.files import read_history\n", "history_io.files"),
        (
            "engine.simulation.workloads",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from history_io.files import write_parquet\n",
            "history_io.files",
        ),
        ("engine.storage.ledger", "from engine.broker import Broker\n", "engine.broker"),
        ("engine.storage.disk", "from engine.simulated.disk import SimDisk\n", "engine.simulated.disk"),
        ("engine.serve.server", "from engine.simulation.workloads import FAULT_RATES\n", "engine.simulation.workloads"),
        ("engine.simulation.client", "from ..serve.server import PulsarServer\n", "engine.serve.server"),
        ("proofs.check.spark", "from runners.spark import spark_session\n", "runners.spark"),
        ("runners.verdicts", "from txnmodel.common import EXIT_OK\n", "txnmodel.common"),
        ("recording.workloads", "from engine.broker import Broker\n", "engine.broker"),
    ],
)
def test_an_upward_import_is_caught(module: str, source: str, bad: str) -> None:
    """The check itself: each of these imports reaches above its module's layer."""
    assert any(f"imports {bad} " in v for v in violations(source, module))


def test_imports_within_the_rules_pass() -> None:
    source = "import json\nfrom spec.types import TxnID\nfrom . import buffer\nfrom reference.delayed_runs import Run\n"
    assert violations(source, "reference.delayed") == []
    assert violations("from ..scheduler import Future\nfrom reference import buffer\n", "engine.broker.partition") == []
    assert violations("from .component import read_all\n", "engine.broker", is_package=True) == []
    assert violations("from engine.storage.ledger import Entry\n", "engine.simulated.faults") == []
    assert (
        violations("from engine.broker import Broker\nfrom views.progress import Progress\n", "runners.main_job") == []
    )


def test_a_circle_is_caught() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
