"""The order sets and maps are spelled in: numbers numerically, as ``spec/vectors/README.md`` says.

An implementer in another language sorts numbers as numbers; the vectors must agree with them.
"""

from __future__ import annotations

import functools
import importlib
import json
import re
from pathlib import Path
from typing import Any

import immutables
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spec.jsonvalues import json_order, to_json
from spec.types import Position, Subscription, TxnID

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "spec" / "vectors" / "README.md"


def test_numbers_sort_numerically_not_as_text() -> None:
    assert to_json(frozenset({10, 130, 60, 9})) == [9, 10, 60, 130]
    assert to_json(frozenset({TxnID(0, 10), TxnID(0, 9), TxnID(1, 0)})) == [[0, 9], [0, 10], [1, 0]]
    assert to_json(immutables.Map({Position(10, 0): "a", Position(3, 12): "b"})) == [[[3, 12], "b"], [[10, 0], "a"]]
    assert to_json(frozenset({-1, 2, -10})) == [-10, -1, 2]


def test_kinds_order_null_bool_number_string_array_object() -> None:
    values: list[Any] = [{"a": 1}, [1], "x", 2, True, False, None, [0, 5], "", 1.5]
    assert sorted(values, key=json_order) == [None, False, True, 1.5, 2, "", "x", [0, 5], [1], {"a": 1}]


@given(st.frozensets(st.integers(-(2**63), 2**64)))
def test_int_sets_sort_as_python_sorts_them(values: frozenset[int]) -> None:
    assert to_json(values) == sorted(values)


@given(st.frozensets(st.builds(TxnID, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))))
def test_txn_id_sets_sort_by_most_then_least(values: frozenset[TxnID]) -> None:
    assert to_json(values) == [[t.most_sig_bits, t.least_sig_bits] for t in sorted(values)]


@given(st.frozensets(st.builds(Subscription, st.text(max_size=4), st.text(max_size=4))))
def test_subscription_sets_sort_by_code_point(values: frozenset[Subscription]) -> None:
    assert to_json(values) == [
        [s.topic, s.subscription] for s in sorted(values, key=lambda s: (s.topic, s.subscription))
    ]


def _documented_sets() -> dict[str, list[str]]:
    """``{machine: [observer, ...]}`` from the README's table of sets and maps."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index("| machine | where |") :].split("\n\n", 1)[0]
    out: dict[str, list[str]] = {}
    for line in table.splitlines()[2:]:
        machine, where = (cell.strip() for cell in line.strip("|").split("|")[:2])
        if where.startswith("effects"):
            continue
        out.setdefault(machine, []).extend(re.findall(r"`([a-z_]+)`", where.split("→")[0]))
    return out


def _arrays_of(name: str, value: Any) -> list[list[Any]]:
    """The arrays of an observed value that spell the documented set or map."""
    if value is None:
        return []
    if name == "entry":
        return [value["remaining"]] if isinstance(value, dict) and value.get("remaining") is not None else []
    if name == "txn_positions":
        return [value] + [indexes for _, indexes in value if indexes is not None]
    assert isinstance(value, list), (name, value)
    return [value]


def test_every_documented_set_is_observed_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from runners.vectors import run_paths

    documented = _documented_sets()
    assert documented, "the README's table of sets lost its rows"
    seen: dict[str, int] = {}
    for machine, names in documented.items():
        vectors = importlib.import_module(f"reference.{machine}").VECTORS
        for name in names:
            assert name in vectors.observers, f"the README names {machine}.{name}, which is not an observer"
            observer = vectors.observers[name]

            @functools.wraps(observer)  # the runner decodes arguments by the observer's signature and hints
            def spy(*args: Any, _observer: Any = observer, _name: str = f"{machine}.{name}", **kwargs: Any) -> Any:
                result = _observer(*args, **kwargs)
                for array in _arrays_of(_name.split(".")[1], to_json(result)):
                    keys = [json_order(item) for item in array]
                    assert keys == sorted(keys) and len(set(keys)) == len(keys), (_name, json.dumps(array))
                    seen[_name] = seen.get(_name, 0) + 1
                return result

            monkeypatch.setitem(vectors.observers, name, spy)
    results = run_paths([ROOT / "spec" / "vectors"])
    assert all(r.passed for r in results)
    # the vectors observe most of these sets; a test that saw none would prove nothing
    assert len(seen) >= 8, seen
