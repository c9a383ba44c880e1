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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from invariants import composed
from proofs.check.liveness import Graph, fair_bad_component
from proofs.check.model import Model, StepDiverged, Successor

__all__ = [
    "Frontier",
    "Options",
    "Parents",
    "Result",
    "TraceStep",
    "Violation",
    "Visited",
    "concrete_trace",
    "empty_result",
    "explore",
    "liveness_violations",
]


class Parents(Protocol):
    """Each seen state's parent on a shortest path from the initial state (its own, for that one)."""

    def parent(self, fp: int) -> int | None: ...


class Visited(Parents, Protocol):
    """The seen set with parent pointers, one BFS level at a time."""

    def add_level(self, fps: Sequence[int], parents: Sequence[int]) -> list[bool]:
        """Add fingerprints (with their parents); which of them were new."""
        ...

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


def empty_result(model: str, bounds: Mapping[str, Any], options: Options) -> Result:
    """The result of a run with ``options`` before it explores: the reductions that apply (none
    where liveness is checked: it needs the whole graph)."""
    symmetry = options.symmetry and not options.liveness
    por = options.por and not options.liveness
    result = Result(
        model, dict(bounds), reductions={"symmetry": symmetry, "por": por}, liveness_checked=options.liveness
    )
    if options.liveness and (options.symmetry or options.por):
        result.notes.append("liveness needs the whole graph: explored without symmetry and partial-order reduction")
    return result


def _explore(model: Model, options: Options) -> Result:
    started = time.perf_counter()
    result = empty_result(model.spec.name, model.spec.bounds, options)
    search = _Search(model, options, result.reductions)
    stop = search.run(result)
    found = search.found
    result.states = len(search.visited)
    result.transitions = search.transitions
    if stop or (found and options.stop_at_first):
        result.complete = False
    # A run that stops at its first violation is incomplete; one that goes on (``stop_at_first``
    # off) explored the whole graph and reports the lassos too.
    if search.graph is not None and result.complete and (not found or not options.stop_at_first):
        properties = composed.LIVENESS + (composed.LIVENESS_STRICT if options.strict else ())
        for violation in liveness_violations(model, search.graph, search.visited, search.init_fp, properties):
            found.setdefault(violation.name, violation)
    result.violations = sorted(found.values(), key=lambda v: (v.length, v.name))
    result.seconds = time.perf_counter() - started
    return result


class _Search:
    """One breadth-first exploration: the seen set, the violations found with their shortest
    traces, the transitions counted and, for liveness, the reachable graph."""

    def __init__(self, model: Model, options: Options, reductions: dict[str, bool]) -> None:
        self.model = model
        self.options = options
        self.symmetry, self.por = reductions["symmetry"], reductions["por"]
        self.canon = model.canonical if self.symmetry and len(model.symmetries) > 1 else _identity
        self.visited = options.visited() if options.visited is not None else MemoryVisited()
        self.new_frontier: Callable[[], Frontier] = options.frontier or MemoryFrontier
        self.found: dict[str, Violation] = {}
        self.graph = Graph() if options.liveness else None
        self.init_fp = 0
        self.transitions = 0

    def record(self, kind: str, name: str, fp: int, extra: Successor | None = None, detail: str = "") -> None:
        """The first violation of ``name``: the shortest trace to ``fp`` (and the step ``extra``)."""
        if name in self.found:
            return
        path = _path(self.visited, fp, self.init_fp)
        trace = concrete_trace(self.model, path, symmetry=self.symmetry, por=self.por)
        if extra is not None:
            trace.append(TraceStep(extra.label, extra.state))
        self.found[name] = Violation(kind, name, trace, detail=detail)

    def run(self, result: Result) -> bool:
        """Explore level by level into ``result`` (its depth, whether complete); whether the run
        stopped inside a level (at a violation, or a step that diverged)."""
        model, options, visited, found = self.model, self.options, self.visited, self.found
        init = self.canon(model.initial())
        self.init_fp = init_fp = hash(init)
        visited.add_level([init_fp], [init_fp])
        if self.graph is not None:
            self.graph.node(init_fp)
        for name in model.violations(init):
            self.record("safety", name, init_fp)
        frontier = self.new_frontier()
        frontier.append(init_fp, init)
        stop = bool(found) and options.stop_at_first
        while len(frontier) and not stop:
            candidates: dict[int, tuple[tuple[Any, ...], int, Successor]] = {}
            following = self.new_frontier()
            # The violations of the level's new states wait for the end of its expansion: a run that
            # stops at a transition's violation in this level never settles it (so never sees them),
            # whether it settles once or every ``settle_every`` fingerprints.
            settled: dict[str, Violation] = {}
            stop = self.expand(frontier, candidates, following, settled)
            frontier.discard()
            if stop:
                following.discard()
                break
            self.settle(candidates, following, settled)
            for name, violation in settled.items():
                found.setdefault(name, violation)
            frontier = following
            result.depth += 1 if len(frontier) else 0
            if options.progress is not None:
                options.progress(result.depth, len(visited), len(frontier))
            if found and options.stop_at_first:
                break
            if options.max_states is not None and len(visited) >= options.max_states:
                result.complete = not len(frontier)
                if len(frontier):
                    result.notes.append(f"stopped at --max-states {options.max_states}")
                break
        frontier.discard()
        return stop

    def expand(
        self,
        frontier: Frontier,
        candidates: dict[int, tuple[tuple[Any, ...], int, Successor]],
        following: Frontier,
        settled: dict[str, Violation],
    ) -> bool:
        """Expand one level's states into ``candidates`` (one per fingerprint, the first found),
        checking each transition's step properties; whether the run stops here."""
        model, options, graph, canon = self.model, self.options, self.graph, self.canon
        settle_every = options.settle_every
        for fp, state in frontier:
            try:
                succs = model.successors(state, por=self.por)
            except StepDiverged as exc:
                self.record("divergence", "step-terminates", fp, detail=str(exc))
                return options.stop_at_first
            for succ in succs:
                self.transitions += 1
                nxt = canon(succ.state)
                nfp = hash(nxt)
                if succ.broken:
                    for name in succ.broken:
                        self.record("safety", name, fp, succ)
                if graph is not None:
                    graph.edge(fp, nfp, succ.family, nxt)
                if nfp not in candidates:
                    candidates[nfp] = (nxt, fp, succ)
            if graph is not None:
                graph.close(fp)
            if self.found and options.stop_at_first:
                return True
            if settle_every is not None and len(candidates) >= settle_every:
                self.settle(candidates, following, settled)
        return False

    def settle(
        self,
        candidates: dict[int, tuple[tuple[Any, ...], int, Successor]],
        following: Frontier,
        settled: dict[str, Violation],
    ) -> None:
        """Add the candidates to the seen set; the new ones join the next level, and the violations
        of the new states go to ``settled`` (shortest traces: the seen set has their parents)."""
        fps = list(candidates)
        new = self.visited.add_level(fps, [candidates[f][1] for f in fps])
        for fp, is_new in zip(fps, new, strict=True):
            if not is_new:
                continue
            state, _parent, succ = candidates[fp]
            following.append(fp, state)
            if self.graph is not None:
                self.graph.node(fp)
            # The parent was clean (or its violations are recorded with a shorter trace): check what
            # the transition rewrote, on the concrete successor (the predicates are symmetric).
            for name in self.model.violations(succ.state, succ.changed):
                if name not in self.found and name not in settled:
                    path = _path(self.visited, fp, self.init_fp)
                    trace = concrete_trace(self.model, path, symmetry=self.symmetry, por=self.por)
                    settled[name] = Violation("safety", name, trace)
        candidates.clear()


def _identity(s: tuple[Any, ...]) -> tuple[Any, ...]:
    return s


def _path(parents: Parents, fp: int, init_fp: int) -> list[int]:
    path = [fp]
    while fp != init_fp:
        parent = parents.parent(fp)
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


def liveness_violations(
    model: Model, graph: Graph, parents: Parents, init_fp: int, properties: tuple[composed.Liveness, ...]
) -> list[Violation]:
    """Each property's shortest fair lasso in ``graph`` that never reaches its goal, as a concrete
    trace (``parents``: the seen set's parent pointers, for the path to the lasso)."""
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
        found = fair_bad_component(graph, bad)
        if found is None:
            continue
        entry, cycle = found
        prefix = _path(parents, graph.fps[entry], init_fp)
        fps = prefix + [graph.fps[j] for j in cycle[1:]]
        trace = concrete_trace(model, fps, symmetry=False, por=False)
        detail = prop.doc.splitlines()[0] if prop.doc else ""
        out.append(Violation("liveness", prop.name, trace, cycle_start=len(prefix) - 1, detail=detail))
    return out
