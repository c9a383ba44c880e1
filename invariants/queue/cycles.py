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

The graph of a large history is not stored: a node's predecessors are worked out from what the
operation read and sent, and from the time chain, when asked for.  Kahn's algorithm peels away every
node on no cycle (in a correct history, all of them), and only what remains, the cycles and what
hangs between them, gets explicit edges for Tarjan and the searches.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterable, Mapping, Sequence

from invariants.graphs import strongly_connected_components
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
    nodes: Iterable[int], edges: Sequence[Mapping[int, Sequence[int]]], kinds: Sequence[int]
) -> list[list[int]]:
    """The strongly connected components of more than one node among ``nodes``, over the edges of
    ``kinds`` (``edges[kind][node]`` lists a node's successors) that stay inside ``nodes``; the checkers' one Tarjan
    (:func:`invariants.graphs.strongly_connected_components`)."""
    members = set(nodes)
    among = {node: [nxt for kind in kinds for nxt in edges[kind].get(node, ()) if nxt in members] for node in members}
    return strongly_connected_components(among)


class _Graph:
    """Operations that committed or may have as nodes ``0..len(units)-1``, then the time chain; each
    node's predecessors by kind are worked out when asked for (:func:`_Graph.preds`)."""

    def __init__(self, q: QueueHistory, ww_deps: bool, realtime: bool) -> None:
        self.q, self.ww_deps = q, ww_deps
        self.units = [u for u in q.units if u.type in (OpType.OK, OpType.INFO)]
        self.node = {u.number: i for i, u in enumerate(self.units)}
        points: list[tuple[int, int]] = []
        if realtime:
            points = sorted(
                {(u.invoked_at, 0) for u in self.units}
                | {(u.completed_at, 1) for u in self.units if u.type is OpType.OK and u.completed_at is not None}
            )
        self.chain_times = points
        where = {point: len(self.units) + k for k, point in enumerate(points)}
        # per unit: the chain node of its invocation; per chain node: the units that completed there
        self.invoked = array("i", [where[(u.invoked_at, 0)] for u in self.units] if realtime else [])
        completed: dict[int, list[int]] = {}
        for i, u in enumerate(self.units):
            if realtime and u.type is OpType.OK and u.completed_at is not None:
                completed.setdefault(where[(u.completed_at, 1)], []).append(i)
        self.completed = completed

    @property
    def size(self) -> int:
        return len(self.units) + len(self.chain_times)

    def is_unit(self, node: int) -> bool:
        return node < len(self.units)

    def preds(self, node: int) -> list[tuple[int, int]]:
        """The node's predecessors, each with the kind of its edge."""
        if not self.is_unit(node):
            out = [(unit, RT) for unit in self.completed.get(node, ())]
            return [*out, (node - 1, RT)] if node > len(self.units) else out
        out = [(self.invoked[node], RT)] if self.invoked else []
        unit, q, index = self.units[node], self.q, self.node
        writers = {q.writer(r.key, r.value) for r in unit.reads}
        out += [(index[w.number], WR) for w in writers if w is not None and w is not unit and w.number in index]
        if self.ww_deps:
            for write in unit.writes:
                order = q.orders.get(write.key)
                at = None if order is None else order.index_of.get(write.value)
                if order is None or not at:
                    continue
                before = q.writer(write.key, order.at(at - 1))
                if before is not None and before is not unit and before.number in index:
                    out.append((index[before.number], WW))
        return out

    def cyclic_part(self) -> list[int]:
        """The nodes left once Kahn's algorithm has peeled away every node on no cycle, working from
        the sinks back over predecessors (the units' worked out once, the chain's implicit)."""
        units, size = len(self.units), self.size
        data = [tuple(pred for pred, kind in self.preds(i) if kind != RT) for i in range(units)]
        invoked, completed = self.invoked, self.completed
        out_degree = array("i", bytes(4 * size))
        for i in range(units):
            for pred in data[i]:
                out_degree[pred] += 1
            if invoked:
                out_degree[invoked[i]] += 1
        for k in range(units, size):
            for pred in completed.get(k, ()):
                out_degree[pred] += 1
            if k > units:
                out_degree[k - 1] += 1
        sinks = [node for node in range(size) if out_degree[node] == 0]
        while sinks:
            node = sinks.pop()
            if node < units:
                preds = [*data[node], invoked[node]] if invoked else data[node]
            else:
                preds = [*completed.get(node, ()), node - 1] if node > units else completed.get(node, [])
            for pred in preds:
                out_degree[pred] -= 1
                if out_degree[pred] == 0:
                    sinks.append(pred)
        return [node for node in range(size) if out_degree[node] > 0]

    def edges_among(self, nodes: Sequence[int]) -> list[dict[int, list[int]]]:
        """Explicit successor lists, by kind, of the edges among ``nodes``."""
        members = set(nodes)
        edges: list[dict[int, list[int]]] = [{}, {}, {}]
        for node in nodes:
            for pred, kind in self.preds(node):
                if pred in members:
                    edges[kind].setdefault(pred, []).append(node)
        return edges


def _cycle_from(
    edges: Sequence[Mapping[int, Sequence[int]]],
    start: int,
    members: set[int],
    kinds: Sequence[int],
    goal: int | None = None,
) -> list[int] | None:
    """A shortest path from ``start`` back to ``goal`` (``start`` itself by default) inside
    ``members`` over the edges of ``kinds``, as the nodes from ``start`` to just before ``goal``."""
    goal = start if goal is None else goal
    parent: dict[int, int] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for kind in kinds:
            for nxt in edges[kind].get(node, ()):
                if nxt == goal:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return path[::-1]
                if nxt in members and nxt not in parent:
                    parent[nxt] = node
                    queue.append(nxt)
    return None


def _search(
    graph: _Graph, edges: Sequence[Mapping[int, Sequence[int]]], component: list[int]
) -> tuple[str, list[int]] | None:
    """The first kind (Elle's order) with a cycle in the component, and that cycle as its nodes."""
    for name, kinds in _SEARCH:
        if RT in kinds:
            parts = strongly_connected(component, edges, kinds) if name != "G1c-realtime" else [component]
        else:
            parts = strongly_connected([n for n in component if graph.is_unit(n)], edges, kinds)
        for part in parts:
            members = set(part)
            if name == "G1c":
                edge = next(((a, b) for a in part for b in edges[WR].get(a, ()) if b in members), None)
                if edge is None:
                    continue
                path = _cycle_from(edges, edge[1], members, kinds, goal=edge[0])
                if path is not None:
                    return name, [edge[0], *path]
                continue
            start = next(n for n in part if graph.is_unit(n))
            found = _cycle_from(edges, start, members, kinds)
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
            if q.writer(read.key, read.value) is a:
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
        if q.writer(write.key, before) is a:
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
    graph = _Graph(q, ww_deps, realtime)
    remaining = graph.cyclic_part()
    if not remaining:
        return
    edges = graph.edges_among(remaining)
    for component in strongly_connected(remaining, edges, (WW, WR, RT)):
        found = _search(graph, edges, component)
        if found is None:
            continue
        name, nodes = found
        kinds = dict(_SEARCH)[name]
        words, rows, drawn = _explain(q, graph, nodes, kinds)
        out.add(name, rows, words, drawn)
