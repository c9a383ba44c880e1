"""The one Tarjan the checkers and the layering test share."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from invariants.graphs import strongly_connected_components


def test_components_of_more_than_one_node() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": {"d"}, "f": set()}
    assert strongly_connected_components(graph) == [["a", "b", "c"], ["d", "e"]]
    assert strongly_connected_components({1: [2], 2: [3]}) == []
    assert strongly_connected_components({}) == []


def test_a_long_cycle_needs_no_recursion() -> None:
    n = 200_000
    graph = {i: [(i + 1) % n] for i in range(n)}
    (component,) = strongly_connected_components(graph)
    assert len(component) == n


@given(st.dictionaries(st.integers(0, 12), st.sets(st.integers(0, 12), max_size=4), max_size=13))
def test_the_components_are_the_mutually_reachable_sets(graph: dict[int, set[int]]) -> None:
    def reach(start: int) -> set[int]:
        seen, todo = {start}, [start]
        while todo:
            for nxt in graph.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    nodes = set(graph) | {m for ms in graph.values() for m in ms}
    reachable = {n: reach(n) for n in nodes}
    expected = {frozenset(m for m in nodes if m in reachable[n] and n in reachable[m]) for n in nodes}
    expected = {c for c in expected if len(c) > 1}
    assert {frozenset(c) for c in strongly_connected_components(graph)} == expected
