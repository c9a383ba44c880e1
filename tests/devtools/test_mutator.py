"""The AST mutator of devtools/mutation.py: its operators, and applying and restoring a mutant."""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools.mutation import (
    MACHINE_MODULES,
    OPERATORS,
    Mutant,
    applied,
    enumerate_mutants,
    install,
    live_function,
    sample,
)

SAMPLE = '''"""A module to mutate."""

LIMIT = 3


def below(a: int, b: int) -> bool:
    """Docstrings are not mutated."""
    assert a >= 0, "nor are asserts"
    return a < b


def pick(flag: bool, x: int) -> int:
    y = x + 1
    if flag and x != 0:
        return y
    else:
        return -y


def maybe(x: int | None) -> str:
    return "none" if x is None else "some"


def negated(x: bool) -> bool:
    return not x


TABLE = {"below": below}


class Box:
    def __init__(self, size: int) -> None:
        self.size = size

    def big(self) -> bool:
        return self.size >= 10

    @property
    def empty(self) -> bool:
        return self.size == 0

    @classmethod
    def make(cls) -> "Box":
        return cls(True + 0)
'''


@pytest.fixture
def module(tmp_path: Path) -> Iterator[str]:
    name = f"mutation_sample_{abs(hash(str(tmp_path)))}"
    (tmp_path / f"{name}.py").write_text(SAMPLE, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module(name)
        yield name
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def mutants(module: str) -> list[Mutant]:
    return enumerate_mutants("sample", module)


def find(module: str, function: str, operator: str, before: str) -> Mutant:
    found = [m for m in mutants(module) if m.function == function and m.operator == operator and m.before == before]
    assert len(found) == 1, found
    return found[0]


def test_every_operator_is_generated_and_docstrings_asserts_annotations_are_not(module: str) -> None:
    all_ = mutants(module)
    assert {m.operator for m in all_} == set(OPERATORS)
    assert [m.index for m in all_] == list(range(len(all_)))
    below = [(m.operator, m.before, m.after) for m in all_ if m.function == "below"]
    assert below == [("boundary", "<", "<=")]  # not the docstring, not the assert, not the annotations
    assert ("constant", "3", "4") not in [(m.operator, m.before, m.after) for m in all_]  # module level: untouched


def test_the_operators(module: str) -> None:
    kinds = Counter((m.function, m.operator) for m in mutants(module))
    assert kinds[("pick", "boolean")] == 2  # and -> or, if negated
    assert kinds[("pick", "compare")] == 1  # != -> ==
    assert kinds[("pick", "branch")] == 1  # if/else swapped
    assert kinds[("pick", "statement")] == 1  # y = x + 1 removed
    assert kinds[("pick", "constant")] == 2  # x + 1 and x != 0
    assert kinds[("maybe", "branch")] == 1 and kinds[("maybe", "compare")] == 1
    assert kinds[("negated", "boolean")] == 1
    assert kinds[("Box.make", "constant")] == 2  # True -> False and 0 -> 1


def test_applied_changes_behaviour_and_restores_it(module: str) -> None:
    mod = sys.modules[module]
    mutant = find(module, "below", "boundary", "<")
    assert mod.below(1, 1) is False
    with applied(mutant):
        assert mod.below(1, 1) is True
        assert mod.TABLE["below"](1, 1) is True  # a table holding the function by value runs the mutant
    assert mod.below(1, 1) is False


@pytest.mark.parametrize(
    ("function", "operator", "before", "call", "plain", "mutated"),
    [
        ("pick", "branch", "if/else", lambda m: m.pick(True, 1), 2, -2),
        ("pick", "boolean", "and", lambda m: m.pick(True, 0), -1, 1),
        ("pick", "boolean", "if flag and x != 0", lambda m: m.pick(True, 1), 2, -2),
        ("maybe", "branch", "'none' if x is None else 'some'", lambda m: m.maybe(None), "none", "some"),
        ("negated", "boolean", "not x", lambda m: m.negated(True), False, True),
        ("Box.big", "boundary", ">=", lambda m: m.Box(10).big(), True, False),
        ("Box.empty", "compare", "==", lambda m: m.Box(0).empty, True, False),
        ("Box.make", "constant", "0", lambda m: m.Box.make().size, 1, 2),
    ],
)
def test_each_kind_of_function(
    module: str, function: str, operator: str, before: str, call: object, plain: object, mutated: object
) -> None:
    mod = sys.modules[module]
    mutant = find(module, function, operator, before)
    assert call(mod) == plain  # type: ignore[operator]
    with applied(mutant):
        assert call(mod) == mutated  # type: ignore[operator]
    assert call(mod) == plain  # type: ignore[operator]


def test_a_removed_statement_is_pass(module: str) -> None:
    mutant = find(module, "pick", "statement", "y = x + 1")
    with applied(mutant), pytest.raises(NameError):
        sys.modules[module].pick(True, 1)


def test_sample_is_seeded_and_per_machine() -> None:
    population = [m for machine in ("client", "coordinator") for m in enumerate_mutants(machine)]
    first = sample(population, 5, seed=7)
    assert first == sample(population, 5, seed=7)
    assert first != sample(population, 5, seed=8)
    assert Counter(m.machine for m in first) == {"client": 5, "coordinator": 5}


def test_every_reference_machine_is_mutable() -> None:
    for machine, modules in MACHINE_MODULES.items():
        found = enumerate_mutants(machine)
        assert len(found) > 50, machine
        assert {m.module for m in found} == set(modules)
        for mutant in found[:: max(1, len(found) // 5)]:
            live_function(mutant)  # every function the mutants name is found


def test_install_applies_a_reference_mutant_until_undone() -> None:
    mutant = enumerate_mutants("client")[0]
    func = live_function(mutant)
    before = func.__code__
    undo = install(mutant.id)
    try:
        assert func.__code__ is not before
    finally:
        undo()
    assert func.__code__ is before


def test_an_installed_mutant_stays_when_the_undo_is_dropped() -> None:
    """What the pytest plugin does: it keeps no handle, and the mutant must stay for the session."""
    import gc

    mutant = enumerate_mutants("client")[0]
    func = live_function(mutant)
    before = func.__code__
    undo = install(mutant.id)
    handle = id(undo)
    del undo
    gc.collect()
    try:
        assert func.__code__ is not before, handle
    finally:
        func.__code__ = before
