"""The cyclic anomalies of Jepsen's Kafka checker (G0, G1c and their realtime variants), found as
Elle finds them: a dependency graph over the operations, its strongly connected components
(Tarjan), and in each one the first cycle of the most severe kind.

Edges between operations that committed or may have (``ok``, ``info``; a ``fail`` took no effect,
so a cycle through it proves nothing):

* **wr** ``T1 -> T2``: T2 polled a value T1 sent;
* **ww** ``T1 -> T2`` (only with ``ww_deps``, Jepsen's ``:ww-deps``): T1 sent the value just before
  one T2 sent, in a key's version order;
* **realtime** ``T1 -> T2``: T1 completed before T2 was invoked (Jepsen checks strict
  serializability, whose graph has these).  They are not materialised pairwise: every operation
  links to a chain of time points, invocations before completions at one instant, so a path
  ``T1 -> ... -> T2`` through the chain exists exactly when T1 completed before T2 began, with
  linearly many nodes and edges.

In each component, in Elle's order, the first kind that has a cycle there is reported, once (a
more severe kind implies the others): ``G0`` (ww edges only), ``G1c`` (ww and wr, at least one wr),
``G0-realtime`` (ww and realtime), ``G1c-realtime`` (all three).  Each search is a Tarjan pass over
the component restricted to the kind's edges and a breadth-first search for one cycle, so the whole
is linear in operations and edges.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from invariants.queue.model import Findings, QueueHistory, Unit, fmt_offset
from spec.history import Operation, OpType

__all__ = ["cycles", "strongly_connected"]

# The edge kinds, as indexes into the graph's adjacency lists.
WW, WR, RT = 0, 1, 2
# The kinds in the order Elle searches them, with the edges each may use.
_SEARCH: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("G0", (WW,)),
    ("G1c", (WW, WR)),
    ("G0-realtime", (WW, RT)),
    ("G1c-realtime", (WW, WR, RT)),
)


def strongly_connected(
    nodes: Iterable[int], edges: Sequence[Sequence[Sequence[int]]], kinds: Sequence[int]
) -> list[list[int]]:
    """The strongly connected components of more than one node among ``nodes``, over the edges of
    ``kinds`` (``edges[kind][node]`` lists a node's successors) that stay inside ``nodes``; Tarjan's
    algorithm, iteratively."""
    members = set(nodes)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    found: list[list[int]] = []

    def successors(node: int) -> Iterable[int]:
        for kind in kinds:
            for nxt in edges[kind][node]:
                if nxt in members:
                    yield nxt

    for root in sorted(members):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(successors(root)))]
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(successors(nxt))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
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
                    found.append(sorted(component))
    return found


@dataclass
class _Graph:
    """Operations as nodes ``0..len(units)-1``, then the time chain; ``edges[kind][node]``."""

    units: list[Unit]
    edges: list[list[list[int]]]
    chain_times: list[tuple[int, int]]  # per chain node (from len(units)): (time, 0 invoke / 1 complete)

    def is_unit(self, node: int) -> bool:
        return node < len(self.units)


def _build(q: QueueHistory, ww_deps: bool, realtime: bool) -> _Graph:
    units = [u for u in q.units if u.type in (OpType.OK, OpType.INFO)]
    node = {u.number: i for i, u in enumerate(units)}
    points: list[tuple[int, int]] = []
    if realtime:
        points = sorted(
            {(u.invoked_at, 0) for u in units}
            | {(u.completed_at, 1) for u in units if u.type is OpType.OK and u.completed_at is not None}
        )
    total = len(units) + len(points)
    edges: list[list[list[int]]] = [[[] for _ in range(total)] for _ in range(3)]
    for i, reader in enumerate(units):
        writers = {q.writer_of.get((r.key, r.value)) for r in reader.reads}
        for j in sorted(node[w.number] for w in writers if w is not None and w.number in node):
            if j != i:
                edges[WR][j].append(i)
    if ww_deps:
        for i, unit in enumerate(units):
            for write in unit.writes:
                order = q.orders.get(write.key)
                at = None if order is None else order.index_of.get(write.value)
                if order is None or not at:
                    continue
                before = q.writer_of.get((write.key, order.at(at - 1)))
                if before is not None and before.number in node and node[before.number] != i:
                    edges[WW][node[before.number]].append(i)
    if realtime:
        where = {point: len(units) + k for k, point in enumerate(points)}
        for k in range(len(points) - 1):
            edges[RT][len(units) + k].append(len(units) + k + 1)
        for i, unit in enumerate(units):
            edges[RT][where[(unit.invoked_at, 0)]].append(i)
            if unit.type is OpType.OK and unit.completed_at is not None:
                edges[RT][i].append(where[(unit.completed_at, 1)])
    return _Graph(units, edges, points)


def _cycle_from(
    graph: _Graph, start: int, members: set[int], kinds: Sequence[int], goal: int | None = None
) -> list[int] | None:
    """A shortest path from ``start`` back to ``goal`` (``start`` itself by default) inside
    ``members`` over the edges of ``kinds``, as the nodes from ``start`` to just before ``goal``."""
    goal = start if goal is None else goal
    parent: dict[int, int] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for kind in kinds:
            for nxt in graph.edges[kind][node]:
                if nxt == goal:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1]
                if nxt in members and nxt not in parent:
                    parent[nxt] = node
                    queue.append(nxt)
    return None


def _search(graph: _Graph, component: list[int]) -> tuple[str, list[int]] | None:
    """The first kind (Elle's order) with a cycle in the component, and that cycle as its nodes."""
    for name, kinds in _SEARCH:
        if RT in kinds:
            parts = strongly_connected(component, graph.edges, kinds) if name != "G1c-realtime" else [component]
        else:
            parts = strongly_connected([n for n in component if graph.is_unit(n)], graph.edges, kinds)
        for part in parts:
            members = set(part)
            if name == "G1c":
                edge = next(((a, b) for a in part for b in graph.edges[WR][a] if b in members), None)
                if edge is None:
                    continue
                path = _cycle_from(graph, edge[1], members, kinds, goal=edge[0])
                if path is not None:
                    return name, [edge[0], *path]
                continue
            start = next(n for n in part if graph.is_unit(n))
            found = _cycle_from(graph, start, members, kinds)
            if found is not None:
                return name, found
    return None


def _short(unit: Unit) -> str:
    marker = unit.end.args.get("jepsen", {}) if isinstance(unit.end.args, dict) else {}
    line = marker.get("line")
    return f":{unit.f} line {line}" if isinstance(line, int) else f":{unit.f} #{unit.number}"


def _why(q: QueueHistory, a: Unit, b: Unit, kinds: Sequence[int]) -> tuple[str, list[Operation]]:
    """Why ``a`` precedes ``b`` by a direct edge of one of ``kinds``: the words and the rows."""
    if WR in kinds:
        for read in b.reads:
            if q.writer_of.get((read.key, read.value)) is a:
                sent = next(w for w in a.writes if w.key == read.key and w.value == read.value)
                return f"{_short(b)} polled {read.value} from key {q.name(read.key)}, which {_short(a)} sent", [
                    sent.row,
                    read.row,
                ]
    for write in b.writes:
        order = q.orders.get(write.key)
        at = None if order is None else order.index_of.get(write.value)
        if order is None or not at:
            continue
        before = order.at(at - 1)
        if q.writer_of.get((write.key, before)) is a:
            mine = next(w for w in a.writes if w.key == write.key and w.value == before)
            return (
                f"{_short(a)} sent {before} to key {q.name(write.key)} just before {_short(b)} sent {write.value} "
                f"(offsets {fmt_offset(mine.offset)} < {fmt_offset(write.offset)})",
                [mine.row, write.row],
            )
    raise AssertionError(f"no edge {a.number} -> {b.number}")  # the search only walks edges that exist


def _explain(
    q: QueueHistory, graph: _Graph, nodes: list[int], kinds: Sequence[int]
) -> tuple[str, list[Operation], tuple[tuple[str, str, str], ...]]:
    """A cycle in words, its rows, and its edges for the viewer; a run through the time chain is
    one realtime edge."""
    first = next(i for i, n in enumerate(nodes) if graph.is_unit(n))
    ring = nodes[first:] + nodes[:first] + [nodes[first]]
    steps: list[str] = []
    rows: list[Operation] = []
    drawn: list[tuple[str, str, str]] = []
    previous, via_chain = ring[0], False
    for node in ring[1:]:
        if not graph.is_unit(node):
            via_chain = True
            continue
        a, b = graph.units[previous], graph.units[node]
        if via_chain:
            why = f"{_short(a)} completed at {a.completed_at} before {_short(b)} was invoked at {b.invoked_at}"
            more: list[Operation] = []
        else:
            why, more = _why(q, a, b, kinds)
        steps.append(why)
        rows += [a.end, *more]
        drawn.append((_short(a), _short(b), why))
        previous, via_chain = node, False
    return "; ".join(steps) + "; an operation cannot precede itself", rows, tuple(drawn)


def cycles(q: QueueHistory, out: Findings, *, ww_deps: bool = False, realtime: bool = True) -> None:
    """``G0``, ``G1c``, ``G0-realtime`` and ``G1c-realtime`` (see the module docstring): in each
    strongly connected component of the dependency graph, one cycle of the most severe kind found."""
    graph = _build(q, ww_deps, realtime)
    every = range(len(graph.units) + len(graph.chain_times))
    for component in strongly_connected(every, graph.edges, (WW, WR, RT)):
        found = _search(graph, component)
        if found is None:
            continue
        name, nodes = found
        kinds = dict(_SEARCH)[name]
        words, rows, drawn = _explain(q, graph, nodes, kinds)
        out.add(name, rows, words, drawn)
