"""The shape limits of docs/contributing.md, checked on the source (issues 18 and 27).

* No product file (every package of :data:`spec.layout.PACKAGES`) is longer than
  :data:`MAX_FILE_LINES`, except generated code (``spec/pb``) and the files whose length is their
  rules: a machine's own modules (``reference/<machine>.py`` and its parts
  ``reference/<machine>_*.py``) and its Z3 proofs (``proofs/<machine>.py``).
* No function or method of product code is longer than :data:`MAX_FUNCTION_LINES` (decorators
  excluded, docstring included: ``end_lineno - lineno + 1``), and no class longer than
  :data:`MAX_CLASS_LINES`, with no exemption.
* No ``Any`` crosses the simulated broker's module boundaries: nothing in ``engine/broker/``
  is annotated with it, and the public signatures of what its modules import from ours (the
  recorder the broker hands commands and results to, the logs, the delayed delivery service, and
  whatever they read of a module imported whole, like a machine's ``step``) do not mention it
  either, directly or through a type alias (a machine's ``Result``).

Sources are read with ``ast``; of ours only the machine registry is imported.  ``python tests/test_shape.py`` prints the
figures (the longest files and functions) without judging.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

from spec.layout import PACKAGES
from spec.machines import MACHINES

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = PACKAGES
MAX_FILE_LINES = 1000
MAX_FUNCTION_LINES = 100
MAX_CLASS_LINES = 500
BROKER = ROOT / "engine" / "broker"
# broker.conf's value bag: its generic accessors (``get``, ``items``, ``with_overrides``, ...) hold
# values of every type by nature; the broker reads the typed properties only (checked below).
CONFIG_ACCESSORS = frozenset({"get", "items", "with_overrides", "from_mapping", "defaults"})


def _machine_modules() -> frozenset[Path]:
    """The files whose length is their rules: ``reference/<machine>.py`` of every machine registered in
    ``spec/machines.py`` with its parts ``reference/<machine>_*.py``, and its Z3 proofs ``proofs/<machine>.py``."""
    found: set[Path] = set()
    for info in MACHINES:
        found.add(ROOT / "reference" / f"{info.module}.py")
        found.update((ROOT / "reference").glob(f"{info.module}_*.py"))
        proof = ROOT / "proofs" / f"{info.module}.py"
        if proof.exists():
            found.add(proof)
    return frozenset(found)


def product_files() -> list[Path]:
    """Every Python file of the product, generated code (``spec/pb``) left out."""
    return sorted(
        path
        for package in PRODUCT
        for path in (ROOT / package).rglob("*.py")
        if path.relative_to(ROOT).parts[:2] != ("spec", "pb")
    )


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def long_files(paths: list[Path], limit: int = MAX_FILE_LINES) -> list[tuple[int, str]]:
    exempt = _machine_modules()
    found = [(len(p.read_text(encoding="utf-8").splitlines()), p) for p in paths if p not in exempt]
    return sorted(((n, _shown(p)) for n, p in found if n > limit), reverse=True)


def function_lengths(source: str) -> Iterator[tuple[int, int, str]]:
    """(lines, first line, qualified name) of every function and method of ``source``."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[int, int, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                yield child.end_lineno - child.lineno + 1, child.lineno, prefix + child.name
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source), "")


def long_functions(paths: list[Path], limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str]]:
    return sorted(
        (
            (n, f"{_shown(p)}:{line} {name}")
            for p in paths
            for n, line, name in function_lengths(p.read_text(encoding="utf-8"))
            if n > limit
        ),
        reverse=True,
    )


def class_lengths(source: str) -> Iterator[tuple[int, int, str]]:
    """(lines, first line, qualified name) of every class of ``source``, nested ones too."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[int, int, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                assert child.end_lineno is not None
                yield child.end_lineno - child.lineno + 1, child.lineno, prefix + child.name
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(source), "")


def long_classes(paths: list[Path], limit: int = MAX_CLASS_LINES) -> list[tuple[int, str]]:
    return sorted(
        (
            (n, f"{_shown(p)}:{line} {name}")
            for p in paths
            for n, line, name in class_lengths(p.read_text(encoding="utf-8"))
            if n > limit
        ),
        reverse=True,
    )


def test_no_class_is_over_the_limit() -> None:
    found = long_classes(product_files())
    assert not found, "\n".join(f"{where}: {n} lines (limit {MAX_CLASS_LINES})" for n, where in found)


def test_no_product_file_is_over_the_limit() -> None:
    found = long_files(product_files())
    assert not found, "\n".join(f"{path}: {n} lines (limit {MAX_FILE_LINES})" for n, path in found)


def test_no_function_is_over_the_limit() -> None:
    found = long_functions(product_files())
    assert not found, "\n".join(f"{where}: {n} lines (limit {MAX_FUNCTION_LINES})" for n, where in found)


def test_the_limits_catch_what_they_should(tmp_path: Path) -> None:
    """The measures themselves: a function one line over is caught, one at the limit is not."""
    body = "    x = 0\n" * (MAX_FUNCTION_LINES - 1)
    method = "    " + body.replace("\n    ", "\n        ")
    source = f"def at_limit():\n{body}\n\nclass C:\n    def over(self):\n{method}        x = 1\n"
    lengths = {name: n for n, _, name in function_lengths(source)}
    assert lengths == {"at_limit": MAX_FUNCTION_LINES, "C.over": MAX_FUNCTION_LINES + 1}
    over, at = tmp_path / "over.py", tmp_path / "at.py"
    over.write_text("x = 1\n" * (MAX_FILE_LINES + 1), encoding="utf-8")
    at.write_text("x = 1\n" * MAX_FILE_LINES, encoding="utf-8")
    assert long_files([over, at]) == [(MAX_FILE_LINES + 1, str(over))]
    assert long_functions([over, at]) == []
    body = "    x = 0\n" * (MAX_CLASS_LINES - 1)
    big = tmp_path / "big.py"
    big.write_text(f"class AtLimit:\n{body}\n\nclass Over:\n{body}    y = 0\n", encoding="utf-8")
    assert long_classes([big]) == [(MAX_CLASS_LINES + 1, f"{big}:{MAX_CLASS_LINES + 3} Over")]


def test_generated_code_and_machine_modules_are_the_only_exemptions() -> None:
    files = product_files()
    assert not any(p.relative_to(ROOT).parts[:2] == ("spec", "pb") for p in files)
    machines = _machine_modules()
    assert {
        ROOT / "reference" / "buffer.py",
        ROOT / "reference" / "delayed_bucket.py",
        ROOT / "proofs" / "buffer.py",
    } <= machines
    assert all(p.parent in (ROOT / "reference", ROOT / "proofs") and p.exists() for p in machines)


# -- Any at the broker's boundaries -----------------------------------------------------------------


def _mentions_any(annotation: ast.expr | None, aliases: frozenset[str] = frozenset()) -> bool:
    """Whether ``annotation`` says ``Any``, itself or through one of ``aliases`` (see :func:`any_aliases`)."""
    if annotation is None:
        return False
    return any(
        (isinstance(n, ast.Name) and (n.id == "Any" or n.id in aliases))
        or (isinstance(n, ast.Attribute) and n.attr == "Any")
        or (isinstance(n, ast.Constant) and isinstance(n.value, str) and "Any" in n.value)
        for n in ast.walk(annotation)
    )


def _signature_anys(node: ast.FunctionDef | ast.AsyncFunctionDef, aliases: frozenset[str] = frozenset()) -> bool:
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    return any(_mentions_any(a.annotation, aliases) for a in every if a is not None) or _mentions_any(
        node.returns, aliases
    )


def any_aliases(source: str) -> frozenset[str]:
    """The module-level names of ``source`` that stand for a type with ``Any`` inside: an alias that
    says it (``Result = Ok[Any] | Err``) and one built on such an alias (``Step = tuple[S, Result]``),
    so a signature ``-> Step`` lets an ``Any`` through as surely as ``-> Any``."""
    values: dict[str, ast.expr] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = node.value
    tainted: set[str] = set()
    while grown := {n for n, v in values.items() if n not in tainted and not n.startswith("__")
                    and _mentions_any(v, frozenset(tainted))}:  # fmt: skip
        tainted |= grown
    return frozenset(tainted)


def any_annotations(source: str) -> list[int]:
    """Lines of ``source`` where an annotation (a signature's or a variable's) mentions ``Any``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        in_signature = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _signature_anys(node)
        if in_signature or (isinstance(node, ast.AnnAssign) and _mentions_any(node.annotation)):
            lines.append(node.lineno)
    return lines


def _module_path(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def _resolve(module: str, node: ast.ImportFrom, *, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def public_any_signatures(source: str, name: str) -> list[str]:
    """The public functions (or a class's public methods and fields) named ``name`` in ``source``
    whose signatures mention ``Any``, or ``name`` itself when it is one of :func:`any_aliases`."""
    aliases = any_aliases(source)
    found = [name] if name in aliases else []
    for node in ast.parse(source).body:
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name == name
            and _signature_anys(node, aliases)
        ):
            found.append(name)
        elif isinstance(node, ast.ClassDef) and node.name == name:
            for member in node.body:
                if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef):
                    public = not member.name.startswith("_") or member.name == "__init__"
                    if public and _signature_anys(member, aliases):
                        found.append(f"{name}.{member.name}")
                elif isinstance(member, ast.AnnAssign) and _mentions_any(member.annotation, aliases):
                    target = ast.unparse(member.target)
                    if not target.startswith("_"):
                        found.append(f"{name}.{target}")
    return found


def _broker_modules() -> list[tuple[Path, str, bool]]:
    out = []
    for path in sorted(BROKER.glob("*.py")):
        is_package = path.name == "__init__.py"
        parts = path.relative_to(ROOT).with_suffix("").parts
        out.append((path, ".".join(parts[:-1] if is_package else parts), is_package))
    return out


def test_nothing_in_the_broker_is_annotated_any() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path, _, _ in _broker_modules()
        for line in any_annotations(path.read_text(encoding="utf-8"))
    ]
    assert not found, "annotated with Any:\n" + "\n".join(found)


def _taken_names(tree: ast.Module, module: str, *, is_package: bool) -> Iterator[tuple[str, str]]:
    """(module, name) of everything a module takes from another by ``from ... import``: each name it
    imports, and for a module it imports whole (``from reference import buffer as tb``) each
    ``tb.name`` it reads."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        target = _resolve(module, node, is_package=is_package)
        for alias in node.names:
            whole = f"{target}.{alias.name}"
            if _module_path(whole) is None:
                yield target, alias.name
                continue
            local = alias.asname or alias.name
            read = {
                n.attr
                for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == local
            }
            yield from ((whole, name) for name in sorted(read))


def test_what_the_broker_imports_of_ours_takes_and_returns_no_any() -> None:
    found = []
    for path, module, is_package in _broker_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for target, name in _taken_names(tree, module, is_package=is_package):
            source_path = _module_path(target)
            if target.split(".")[0] not in PRODUCT or source_path is None:
                continue
            for hit in public_any_signatures(source_path.read_text(encoding="utf-8"), name):
                if target == "spec.config" and hit.split(".")[-1] in CONFIG_ACCESSORS:
                    continue
                found.append(f"{path.relative_to(ROOT)} imports {target}.{hit}")
    assert not found, "\n".join(found)


def test_the_broker_reads_no_untyped_config_accessor() -> None:
    """What makes the Config exemption above sound: the broker calls none of the accessors."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}"
        for path, _, _ in _broker_modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
        and node.attr in CONFIG_ACCESSORS
        and "config" in ast.unparse(node.value).lower()
    ]
    assert not found, "\n".join(found)


def test_the_any_checks_catch_what_they_should() -> None:
    assert any_annotations("def f(x: Any) -> None: ...\n") == [1]
    assert any_annotations("def f(x: int) -> typing.Any: ...\n") == [1]
    assert any_annotations("x: dict[str, Any] = {}\n") == [1]
    assert any_annotations("def f(x: 'Ok[Any]') -> None: ...\n") == [1]
    assert any_annotations("def f(x: object) -> Mapping[str, object]: ...\n") == []
    source = (
        "class Observer:\n"
        "    def stepped(self, command: Any) -> None: ...\n"
        "    def _private(self, x: Any) -> None: ...\n"
        "    def fine(self, x: object) -> None: ...\n"
        "def helper(x: object) -> Any: ...\n"
    )
    assert public_any_signatures(source, "Observer") == ["Observer.stepped"]
    assert public_any_signatures(source, "helper") == ["helper"]
    machine = (
        "Result = Ok[Any] | Err\n"
        "Step = tuple[State, Result]\n"
        "Fine = Ok[object] | Err\n"
        "__all__ = ['Any']\n"
        "def step(state: State, command: Command) -> Step: ...\n"
        "def initial() -> State: ...\n"
    )
    assert any_aliases(machine) == {"Result", "Step"}
    assert public_any_signatures(machine, "step") == ["step"]
    assert public_any_signatures(machine, "Result") == ["Result"]
    assert public_any_signatures(machine, "initial") == public_any_signatures(machine, "Fine") == []
    broker = "from reference import buffer as tb\nfrom spec.types import Position\ntb.step(tb.initial(), c)\n"
    assert list(_taken_names(ast.parse(broker), "engine.broker.x", is_package=False)) == [
        ("reference.buffer", "initial"),
        ("reference.buffer", "step"),
        ("spec.types", "Position"),
    ]


if __name__ == "__main__":
    files = product_files()
    print(f"{len(files)} product files; over {MAX_FILE_LINES} lines (machine modules exempt):")
    for n, path in long_files(files) or [(0, "(none)")]:
        print(f"  {n:5d}  {path}")
    print("the 10 longest functions:")
    for n, where in long_functions(files, 0)[:10]:
        print(f"  {n:5d}  {where}")
    print(f"functions over {MAX_FUNCTION_LINES} lines: {len(long_functions(files))}")
    print("the 5 longest classes:")
    for n, where in long_classes(files, 0)[:5]:
        print(f"  {n:5d}  {where}")
    print(f"classes over {MAX_CLASS_LINES} lines: {len(long_classes(files))}")
    sys.exit(0)
