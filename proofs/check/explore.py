"""Explicit-state exploration of a composed model: breadth-first, so the first violation of a
safety predicate comes with a shortest trace; liveness by fair cycles of the reachable graph.

* **Safety.**  Every state reached is checked (:meth:`Model.violations`), and every transition's
  step properties (:class:`Successor.broken`).  The shortest trace to the first violation of each
  predicate is kept.
* **Liveness.**  Each property of :data:`invariants.composed.LIVENESS` is "on every fair path the
  goal holds infinitely often", under weak fairness of every non-environment step (each delivery of
  a message, each client's program, each timer, each component task) and finitely many faults (the
  fault budget is finite, so no cycle holds a fault).  A violation is a *lasso*: a path to a
  strongly connected set of states where the goal never holds, fair because every step family
  enabled in all of its states is taken inside it, or a state without any fair step (stuttering
  there is fair).  This needs the whole graph, so it runs without reductions.
* **Reductions** (safety only): symmetry (:meth:`Model.canonical`: states are explored up to the
  model's automorphisms) and partial-order reduction (:meth:`Model.successors` with ``por``).
* **Seen states** are fingerprints (Python's hash of the tuple-of-ints state, the same in every
  process).  :class:`Visited` is the in-memory set; ``proofs/check/fpset.py`` has one that spills to
  disk.  Parent fingerprints give the traces, which are replayed concretely (:func:`concrete_trace`).
"""

from __future__ import annotations

import gc
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from invariants import composed
from proofs.check.model import Model, StepDiverged, Successor

__all__ = [
    "Frontier",
    "Options",
    "Result",
    "TraceStep",
    "Violation",
    "Visited",
    "concrete_trace",
    "explore",
]


class Visited(Protocol):
    """The seen set with parent pointers, one BFS level at a time."""

    def add_level(self, fps: Sequence[int], parents: Sequence[int]) -> list[bool]:
        """Add fingerprints (with their parents); which of them were new."""
        ...

    def parent(self, fp: int) -> int | None: ...

    def __len__(self) -> int: ...


class MemoryVisited:
    """All fingerprints and parents in one dict (the default; about 100 bytes per state)."""

    def __init__(self) -> None:
        self._parents: dict[int, int] = {}

    def add_level(self, fps: Sequence[int], parents: Sequence[int]) -> list[bool]:
        out = []
        known = self._parents
        for fp, parent in zip(fps, parents, strict=True):
            if fp in known:
                out.append(False)
            else:
                known[fp] = parent
                out.append(True)
        return out

    def parent(self, fp: int) -> int | None:
        return self._parents.get(fp)

    def __len__(self) -> int:
        return len(self._parents)


class Frontier(Protocol):
    """One BFS level's states in discovery order: appended once, then iterated once."""

    def append(self, fp: int, state: tuple[Any, ...]) -> None: ...

    def __iter__(self) -> Iterator[tuple[int, tuple[Any, ...]]]: ...

    def __len__(self) -> int: ...

    def discard(self) -> None:
        """The level is expanded: free what holds it."""
        ...


class MemoryFrontier:
    """A level in a list (the default)."""

    def __init__(self) -> None:
        self._items: list[tuple[int, tuple[Any, ...]]] = []

    def append(self, fp: int, state: tuple[Any, ...]) -> None:
        self._items.append((fp, state))

    def __iter__(self) -> Iterator[tuple[int, tuple[Any, ...]]]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def discard(self) -> None:
        self._items = []


@dataclass
class Options:
    symmetry: bool = True
    por: bool = True
    liveness: bool = True
    max_states: int | None = None
    stop_at_first: bool = True
    step_timeout_s: float | None = 20.0
    strict: bool = False  # also the liveness properties Pulsar's design does not promise (LIVENESS_STRICT)
    visited: Callable[[], Visited] | None = None
    # A big run's bounded memory: each level's states in a ``Frontier`` of this factory's (the
    # spilling one is ``proofs.check.fpset.SpillingFrontier``), and a level's successors settled
    # against the seen set every ``settle_every`` distinct fingerprints instead of once per level.
    # Same states, parents, counts and verdicts as the one-settle run (the tests check it).
    frontier: Callable[[], Frontier] | None = None
    settle_every: int | None = None
    progress: Callable[[int, int, int], None] | None = None  # (depth, states, frontier)


@dataclass
class TraceStep:
    """One step of a counterexample: the action taken and the state it led to."""

    label: tuple[Any, ...]
    state: tuple[Any, ...]


@dataclass
class Violation:
    kind: str  # "safety" | "liveness" | "divergence"
    name: str
    trace: list[TraceStep]  # from the initial state (label ("init",))
    cycle_start: int | None = None  # liveness: the index in ``trace`` where the cycle starts
    detail: str = ""

    @property
    def length(self) -> int:
        return len(self.trace) - 1


@dataclass
class Result:
    model: str
    bounds: dict[str, Any]
    states: int = 0
    transitions: int = 0
    depth: int = 0
    seconds: float = 0.0
    complete: bool = True
    violations: list[Violation] = field(default_factory=list)
    reductions: dict[str, bool] = field(default_factory=dict)
    liveness_checked: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.complete and not self.violations

    @property
    def verdict(self) -> str:
        if self.violations:
            return "violated"
        return "ok" if self.complete else "incomplete"


def explore(model: Model, options: Options | None = None) -> Result:
    """Explore ``model`` breadth-first (see the module docstring)."""
    # States are tuples of ints and interned values that never form reference cycles; the cyclic
    # collector would only re-walk the ever-growing seen graph on every collection.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _explore(model, options or Options())
    finally:
        if enabled:
            gc.enable()


def _explore(model: Model, options: Options) -> Result:
    started = time.perf_counter()
    symmetry = options.symmetry and not options.liveness
    por = options.por and not options.liveness
    result = Result(
        model.spec.name,
        dict(model.spec.bounds),
        reductions={"symmetry": symmetry, "por": por},
        liveness_checked=options.liveness,
    )
    if options.liveness and (options.symmetry or options.por):
        result.notes.append("liveness needs the whole graph: explored without symmetry and partial-order reduction")
    canon = model.canonical if symmetry and len(model.symmetries) > 1 else _identity
    visited = options.visited() if options.visited is not None else MemoryVisited()
    init = canon(model.initial())
    init_fp = hash(init)
    visited.add_level([init_fp], [init_fp])
    found: dict[str, Violation] = {}
    graph = _Graph() if options.liveness else None
    if graph is not None:
        graph.node(init_fp)

    def record(kind: str, name: str, fp: int, extra: Successor | None = None, detail: str = "") -> None:
        if name in found:
            return
        trace = concrete_trace(model, _path(visited, fp, init_fp), symmetry=symmetry, por=por)
        if extra is not None:
            trace.append(TraceStep(extra.label, extra.state))
        found[name] = Violation(kind, name, trace, detail=detail)

    for name in model.violations(init):
        record("safety", name, init_fp)
    new_frontier: Callable[[], Frontier] = options.frontier or MemoryFrontier
    frontier = new_frontier()
    frontier.append(init_fp, init)
    depth = 0
    transitions = 0
    stop = bool(found) and options.stop_at_first
    settle_every = options.settle_every
    while len(frontier) and not stop:
        candidates: dict[int, tuple[tuple[Any, ...], int, Successor]] = {}
        following = new_frontier()
        # The violations of the level's new states wait for the end of its expansion: a run that
        # stops at a transition's violation in this level never settles it (so never sees them),
        # whether it settles once or every ``settle_every`` fingerprints.
        settled: dict[str, Violation] = {}

        for fp, state in frontier:
            try:
                succs = model.successors(state, por=por)
            except StepDiverged as exc:
                record("divergence", "step-terminates", fp, detail=str(exc))
                stop = options.stop_at_first
                break
            for succ in succs:
                transitions += 1
                nxt = canon(succ.state)
                nfp = hash(nxt)
                if succ.broken:
                    for name in succ.broken:
                        record("safety", name, fp, succ)
                if graph is not None:
                    graph.edge(fp, nfp, succ.family, nxt)
                if nfp not in candidates:
                    candidates[nfp] = (nxt, fp, succ)
            if graph is not None:
                graph.close(fp)
            if found and options.stop_at_first:
                stop = True
                break
            if settle_every is not None and len(candidates) >= settle_every:
                _settle(model, visited, candidates, following, graph, found, settled, init_fp, symmetry, por)
        frontier.discard()
        if stop:
            following.discard()
            break
        _settle(model, visited, candidates, following, graph, found, settled, init_fp, symmetry, por)
        for name, violation in settled.items():
            found.setdefault(name, violation)
        frontier = following
        depth += 1 if len(frontier) else 0
        if options.progress is not None:
            options.progress(depth, len(visited), len(frontier))
        if found and options.stop_at_first:
            break
        if options.max_states is not None and len(visited) >= options.max_states:
            result.complete = not len(frontier)
            if len(frontier):
                result.notes.append(f"stopped at --max-states {options.max_states}")
            break
    frontier.discard()
    result.states = len(visited)
    result.transitions = transitions
    result.depth = depth
    if stop or (found and options.stop_at_first):
        result.complete = False
    complete = result.complete
    # A run that stops at its first violation is incomplete; one that goes on (``stop_at_first``
    # off) explored the whole graph and reports the lassos too.
    if graph is not None and complete and (not found or not options.stop_at_first):
        properties = composed.LIVENESS + (composed.LIVENESS_STRICT if options.strict else ())
        for violation in _liveness(model, graph, visited, init_fp, properties):
            found.setdefault(violation.name, violation)
    result.violations = sorted(found.values(), key=lambda v: (v.length, v.name))
    result.seconds = time.perf_counter() - started
    return result


def _settle(
    model: Model,
    visited: Visited,
    candidates: dict[int, tuple[tuple[Any, ...], int, Successor]],
    following: Frontier,
    graph: _Graph | None,
    found: dict[str, Violation],
    settled: dict[str, Violation],
    init_fp: int,
    symmetry: bool,
    por: bool,
) -> None:
    """Add the candidates to the seen set; the new ones join the next level, and the violations of
    the new states go to ``settled`` (shortest traces: the seen set has their parents)."""
    fps = list(candidates)
    new = visited.add_level(fps, [candidates[f][1] for f in fps])
    for fp, is_new in zip(fps, new, strict=True):
        if not is_new:
            continue
        state, _parent, succ = candidates[fp]
        following.append(fp, state)
        if graph is not None:
            graph.node(fp)
        # The parent was clean (or its violations are recorded with a shorter trace): check what the
        # transition rewrote, on the concrete successor (the predicates are symmetric).
        for name in model.violations(succ.state, succ.changed):
            if name not in found and name not in settled:
                trace = concrete_trace(model, _path(visited, fp, init_fp), symmetry=symmetry, por=por)
                settled[name] = Violation("safety", name, trace)
    candidates.clear()


def _identity(s: tuple[Any, ...]) -> tuple[Any, ...]:
    return s


def _path(visited: Visited, fp: int, init_fp: int) -> list[int]:
    path = [fp]
    while fp != init_fp:
        parent = visited.parent(fp)
        if parent is None:
            raise AssertionError(f"state {fp:#x} has no parent")
        fp = parent
        path.append(fp)
    path.reverse()
    return path


def concrete_trace(model: Model, fps: Sequence[int], *, symmetry: bool, por: bool) -> list[TraceStep]:
    """Replay a path of (canonical) fingerprints from the initial state: at each step the successor
    whose canonical fingerprint is the next one.  The states are concrete (not permuted)."""
    canon = model.canonical if symmetry and len(model.symmetries) > 1 else _identity
    state = model.initial()
    trace = [TraceStep(("init",), state)]
    for target in fps[1:]:
        for succ in model.successors(state, por=por):
            if hash(canon(succ.state)) == target:
                trace.append(TraceStep(succ.label, succ.state))
                state = succ.state
                break
        else:
            raise AssertionError(f"no successor of step {len(trace) - 1} reaches {target:#x}")
    return trace


# --- liveness -------------------------------------------------------------------------------


class _Graph:
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


def _liveness(
    model: Model, graph: _Graph, visited: Visited, init_fp: int, properties: tuple[composed.Liveness, ...]
) -> list[Violation]:
    out: list[Violation] = []
    n = len(graph.fps)
    goals: list[tuple[bool, ...]] = []
    for i in range(n):
        state = graph.states[i]
        if state is None:
            state = model.initial()
        goals.append(model.goals(state, properties))
    for k, prop in enumerate(properties):
        bad = [not g[k] for g in goals]
        if not any(bad):
            continue
        found = _fair_bad_component(graph, bad)
        if found is None:
            continue
        entry, cycle = found
        prefix = _path(visited, graph.fps[entry], init_fp)
        fps = prefix + [graph.fps[j] for j in cycle[1:]]
        trace = concrete_trace(model, fps, symmetry=False, por=False)
        detail = prop.doc.splitlines()[0] if prop.doc else ""
        out.append(Violation("liveness", prop.name, trace, cycle_start=len(prefix) - 1, detail=detail))
    return out


def _fair_bad_component(graph: _Graph, bad: list[bool]) -> tuple[int, list[int]] | None:
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


def _fair_cycle(graph: _Graph, entry: int, members: set[int], inner: list[tuple[int, int, int]]) -> list[int]:
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


def _sccs(graph: _Graph, bad: list[bool]) -> Iterable[list[int]]:
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
