"""Graphs of dependencies, as the checkers read them: strongly connected components.

Elle-style checkers find cycles in a graph of transactions (what read whose writes, what followed
what); the layering of the tree itself is a graph of modules.  One iterative Tarjan serves them all:
no recursion, so a component of a million transactions does not hit Python's stack limit, and
successors are taken in sorted order, so the components and their order are the same from run to run.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import TypeVar

__all__ = ["strongly_connected_components"]

N = TypeVar("N", bound=Hashable)


def strongly_connected_components(edges: Mapping[N, Iterable[N]]) -> list[list[N]]:
    """Every strongly connected component of more than one node, each sorted, in the order Tarjan's
    algorithm closes them (nodes visited in sorted order).  ``edges`` maps a node to its successors;
    a successor that is not a key has none.  O(nodes + edges) after the sorts."""
    index: dict[N, int] = {}
    low: dict[N, int] = {}
    stack: list[N] = []
    on_stack: set[N] = set()
    found: list[list[N]] = []

    def successors(node: N) -> Iterator[N]:
        return iter(sorted(edges.get(node, ())))  # type: ignore[type-var]

    for root in sorted(edges):  # type: ignore[type-var]
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[N, Iterator[N]]] = [(root, successors(root))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, successors(child)))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))  # type: ignore[type-var]
    return found
