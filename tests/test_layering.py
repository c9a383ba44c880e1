"""The layers of :mod:`spec.layout`, checked on the source: no import crosses them upward, no import
circle anywhere in the product, and no module uses another module's private (``_underscore``) names.

Imports are read with ``ast`` (every one, lazy and ``TYPE_CHECKING`` ones included), so nothing is
imported and nothing runs.  ``from package import name`` counts as importing ``package.name`` when
that is a module, else ``package`` (its ``__init__``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

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
    whatever the spelling, as for every module of the package, so that alone is no edge to it."""

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
        graph[module] = {
            t
            for name in names
            if (t := resolve(name)) is not None
            and t != module
            and not (name in sources and all(m.rpartition(".")[0] != name or m in modules for m in names))
        }
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
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
                    found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def private_uses(source: str, module: str, modules: frozenset[str], *, is_package: bool = False) -> list[str]:
    """Where ``source`` (module ``module``) names another module's private names: ``from m import _x``
    or ``alias._x`` on a module imported whole.  A private module of its own package
    (``from invariants import _wgl``) is the package's to use."""
    found: list[str] = []
    aliases: dict[str, str] = {}
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in modules:
                    aliases[alias.asname or alias.name] = full
                    if alias.name.startswith("_") and node.module != package:
                        found.append(f"{module}:{node.lineno} imports the private module {full}")
                elif alias.name.startswith("_") and not alias.name.startswith("__") and node.module != module:
                    found.append(f"{module}:{node.lineno} imports {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules and alias.asname:
                    aliases[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and aliases.get(node.value.id, module) != module
        ):
            found.append(f"{module}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names() -> None:
    modules = product_modules()
    names = frozenset(modules)
    found = [
        problem
        for module, path in modules.items()
        for problem in private_uses(
            path.read_text(encoding="utf-8"), module, names, is_package=path.name == "__init__.py"
        )
    ]
    assert not found, "\n".join(found)


def test_a_private_use_is_caught() -> None:
    names = frozenset({"a.b", "a.c", "a._d", "e.f"})
    assert private_uses("from a.c import _x\n", "a.b", names) == ["a.b:1 imports a.c._x"]
    assert private_uses("from a import c as k\nk._y()\n", "a.b", names) == ["a.b:2 uses a.c._y"]
    assert private_uses("from a import _d\n", "a.b", names) == []  # its own package's private module
    assert private_uses("from a import _d\n", "e.f", names) == ["e.f:1 imports the private module a._d"]
    assert private_uses("from a.c import x\nclass K:\n    def m(self):\n        self._z()\n", "a.b", names) == []


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
