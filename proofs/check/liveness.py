"""The liveness check's graph algorithms: the reachable graph with each edge's fairness family,
and the search for a fair lasso whose cycle never reaches a goal.

A property's counterexample is a strongly connected set of states where the goal never holds, fair
because every step family enabled in all of its states is taken inside it, or a state without any
fair step (stuttering there is fair).  :func:`fair_bad_component` finds the shallowest one and a
cycle through it; :func:`proofs.check.explore.liveness_violations` turns it into a trace.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Graph", "fair_bad_component"]


class Graph:
    """The reachable graph for the liveness check: node ids, out-edges with their fairness family."""

    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.fps: list[int] = []
        self.states: list[tuple[Any, ...] | None] = []
        self.out: list[list[tuple[int, int]]] = []  # (target node fp, family id)
        self.families: dict[Any, int] = {}
        self.fair: list[bool] = []

    def node(self, fp: int, state: tuple[Any, ...] | None = None) -> int:
        i = self.index.get(fp)
        if i is None:
            i = self.index[fp] = len(self.fps)
            self.fps.append(fp)
            self.states.append(state)
            self.out.append([])
        elif state is not None and self.states[i] is None:
            self.states[i] = state
        return i

    def family(self, family: Any) -> int:
        f = self.families.get(family)
        if f is None:
            f = self.families[family] = len(self.fair)
            self.fair.append(family is not None)
        return f

    def edge(self, src: int, dst: int, family: Any, dst_state: tuple[Any, ...]) -> None:
        i = self.node(src)
        self.node(dst, dst_state)
        self.out[i].append((dst, self.family(family)))

    def close(self, src: int) -> None:
        pass


def fair_bad_component(graph: Graph, bad: list[bool]) -> tuple[int, list[int]] | None:
    """A fair strongly connected set of bad nodes, or a bad node without a fair step: its entry
    node (the shallowest: nodes are numbered in BFS order) and a cycle through it that takes or
    passes a disabled state for every fair family (``[entry]`` alone: stuttering)."""
    index = graph.index
    fair = graph.fair
    best: tuple[int, list[int]] | None = None
    for i in range(len(graph.fps)):
        if bad[i] and not any(fair[f] for _t, f in graph.out[i]):
            best = (i, [i])
            break
    for comp in _sccs(graph, bad):
        members = set(comp)
        inner = [(i, index[t], f) for i in comp for t, f in graph.out[i] if index[t] in members]
        if not inner:
            continue
        taken = {f for _i, _j, f in inner}
        enabled_everywhere: set[int] | None = None
        for i in comp:
            mine = {f for _t, f in graph.out[i] if fair[f]}
            enabled_everywhere = mine if enabled_everywhere is None else enabled_everywhere & mine
        if enabled_everywhere and not enabled_everywhere <= taken:
            continue
        entry = min(comp)
        if best is not None and best[0] <= entry:
            continue
        best = (entry, _fair_cycle(graph, entry, members, inner))
    return best


def _fair_cycle(graph: Graph, entry: int, members: set[int], inner: list[tuple[int, int, int]]) -> list[int]:
    """A cycle from ``entry`` inside ``members`` that takes every fair family taken inside it and
    visits, for every other fair family, a state where it is disabled."""
    index = graph.index
    fair = graph.fair
    adjacency: dict[int, list[tuple[int, int]]] = {}
    for i, j, f in inner:
        adjacency.setdefault(i, []).append((j, f))
    families = {f for _i, _j, f in inner if fair[f]}
    enabled_somewhere: set[int] = set()
    for i in members:
        enabled_somewhere |= {f for _t, f in graph.out[i] if fair[f]}
    targets: list[tuple[str, int]] = [("edge", f) for f in sorted(families)]
    for f in sorted(enabled_somewhere - families):
        targets.append(("off", f))
    cycle = [entry]
    here = entry
    for kind, f in targets:
        if kind == "edge":
            goal = lambda i, j, fam, f=f: fam == f  # noqa: E731
        else:
            goal = lambda i, j, fam, f=f: f not in {g for _t, g in graph.out[j]}  # noqa: E731
        here = _walk(adjacency, here, goal, cycle)
    if here != entry or len(cycle) == 1:
        _walk(adjacency, here, lambda i, j, fam: j == entry, cycle)
    del index
    return cycle


def _walk(
    adjacency: dict[int, list[tuple[int, int]]], start: int, goal: Callable[[int, int, int], bool], cycle: list[int]
) -> int:
    """BFS from ``start`` to the first edge satisfying ``goal``; append the path's nodes."""
    parents: dict[int, int] = {start: start}
    queue = deque([start])
    while queue:
        i = queue.popleft()
        for j, f in adjacency.get(i, ()):
            if goal(i, j, f):
                path = [j]
                k = i
                while k != start:
                    path.append(k)
                    k = parents[k]
                cycle.extend(reversed(path))
                return j
            if j not in parents:
                parents[j] = i
                queue.append(j)
    return start


def _sccs(graph: Graph, bad: list[bool]) -> Iterable[list[int]]:
    """Tarjan's strongly connected components of the subgraph of bad nodes (iterative)."""
    index_of = graph.index
    n = len(graph.fps)
    order = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    counter = 0
    for root in range(n):
        if not bad[root] or order[root] != -1:
            continue
        work = [(root, 0)]
        order[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            v, k = work[-1]
            edges = graph.out[v]
            if k < len(edges):
                work[-1] = (v, k + 1)
                w = index_of[edges[k][0]]
                if not bad[w]:
                    continue
                if order[w] == -1:
                    order[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, 0))
                elif on_stack[w]:
                    low[v] = min(low[v], order[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == order[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    comp.append(w)
                    if w == v:
                        break
                yield comp
