"""Breadth-first exploration of a composed model on Spark (``txnmodel check --master URL``).

The pure part is :mod:`proofs.check` (a level is "expand these states": :meth:`Model.successors`
and :meth:`Model.canonical`); this module is the plumbing.  The seen set and every level's states
are partitioned by fingerprint (``fp mod partitions``) and live in a directory every executor sees;
Spark schedules the work and carries only small reports.  One BFS level is one Spark job of one
task per partition; task ``p`` of job ``k``:

1. **settles** level ``k`` of its partition: reads the successors that job ``k - 1``'s tasks wrote
   for it (one file per writer task), keeps one per fingerprint (the smallest parent, so the run is
   deterministic), tests them against its part of the seen set (:class:`proofs.check.fpset.PartitionSeen`:
   one sorted run per level, memory-mapped), and records the new ones;
2. **expands** the new states (each executor keeps one :class:`~proofs.check.model.Model` per run,
   so its memoised machine steps and transitions survive from level to level), checks every
   successor's safety predicates, and writes the successors bucketed by their partition, one
   pickle file per (writer, partition) for job ``k + 1``.

The states never cross between Python and the JVM: a shuffle of pickled states through Spark cost
more than the exploration itself.  What the driver collects per level is the new states' count, the
transitions' count, the violations, the values the executors interned, and for liveness the graph.

Component states travel as digests; the values an executor interned in a level go to the driver
with the level's report and are broadcast to every executor before the next level, so any
executor can expand any state.  The fingerprint of a state is Python's hash of a tuple of ints,
the same in every process, so the counts and verdicts equal the single-process run's.

The directory must be visible to every executor: a local directory in local mode, a shared file
system on a cluster.  A retried task rewrites the same files (the names carry the level and the
writer), so a retry never counts a state twice.  Traces are rebuilt on the driver from the parent
pointers on disk and replayed concretely.
"""

from __future__ import annotations

import gc
import os
import pickle
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from proofs.check.explore import (
    Options,
    Result,
    TraceStep,
    Violation,
    concrete_trace,
    empty_result,
    liveness_violations,
)
from proofs.check.fpset import PartitionSeen, parent_in
from proofs.check.liveness import Graph
from proofs.check.model import Model
from proofs.check.program import ModelSpec

__all__ = ["explore_spark"]

# Executor-side: one model per run id, and the value broadcasts it has loaded.
_RUNS: dict[str, tuple[Model, set[int]]] = {}


def _runtime(run_id: str, spec: ModelSpec, step_timeout_s: float | None, broadcasts: list[tuple[int, Any]]) -> Model:
    entry = _RUNS.get(run_id)
    if entry is None:
        for other in list(_RUNS):
            del _RUNS[other]  # one run at a time per worker: free the last one's caches
        entry = _RUNS[run_id] = (Model(spec, step_timeout_s=step_timeout_s), set())
    model, loaded = entry
    for bid, broadcast in broadcasts:
        if bid not in loaded:
            for d, value in broadcast.value:
                model.store.adopt(d, value)
            loaded.add(bid)
    return model


def explore_spark(
    spec: ModelSpec,
    options: Options,
    session: Any,
    *,
    work_dir: str | None = None,
    partitions: int | None = None,
) -> tuple[Result, Model]:
    """Explore ``spec`` on Spark; the result and the driver's model (for rendering traces).  The
    session is the caller's (the command line's is the process's one,
    :func:`runners.spark.spark_session`), left running."""
    started = time.perf_counter()
    sc = session.sparkContext
    slots = int(sc.defaultParallelism)
    n_parts = partitions or max(2, 2 * slots)
    directory = Path(tempfile.mkdtemp(prefix="txnmodel-check-", dir=work_dir))
    result = empty_result(spec.name, spec.bounds, options)
    result.notes.append(f"Spark {getattr(sc, 'master', '?')}: {n_parts} partitions")
    run = _Run(sc, spec, options, directory, n_parts, result.reductions)
    found = run.found
    states = 0
    transitions = 0
    # What job k found expanding level k, reported with level k + 1 (as the single process does).
    ahead = _LevelReport()
    level = 0
    try:
        while True:
            report = run.level(level)
            states += report.new_states
            if level == 0:
                ahead = report
                level = 1
                continue
            transitions += ahead.transitions
            run.note_violations(ahead, report)
            ahead = report
            if options.progress is not None:
                options.progress(level, states, report.new_states)
            if found and options.stop_at_first:
                result.complete = False
                break
            if report.new_states == 0:
                level -= 1
                break
            if options.max_states is not None and states >= options.max_states:
                result.complete = False
                result.notes.append(f"stopped at --max-states {options.max_states}")
                break
            level += 1
        result.states = states
        result.transitions = transitions
        result.depth = level
        if options.liveness and not found and result.complete:
            found.update(
                _liveness(run.driver, run.graph_states, run.graph_edges, directory, n_parts, run.init_fp, options)
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result.violations = sorted(found.values(), key=lambda v: (v.length, v.name))
    result.seconds = time.perf_counter() - started
    return result, run.driver


class _Run:
    """The driver's side of one run: the levels' Spark jobs, the values and graph they report, and
    the violations found, with their traces rebuilt on the driver's model."""

    def __init__(
        self, sc: Any, spec: ModelSpec, options: Options, directory: Path, n_parts: int, reductions: dict[str, bool]
    ) -> None:
        self.sc, self.spec, self.options, self.directory, self.n_parts = sc, spec, options, directory, n_parts
        self.run_id = uuid.uuid4().hex
        self.driver = driver = Model(spec, step_timeout_s=options.step_timeout_s)
        self.symmetry, self.por = reductions["symmetry"], reductions["por"]
        canon = driver.canonical if self.symmetry and len(driver.symmetries) > 1 else (lambda s: s)
        init = canon(driver.initial())
        self.init_fp = init_fp = hash(init)
        # Level 0 is the initial state, "written" for its partition by the driver.
        _write_bucket(_level_dir(directory, 0) / "from-driver", init_fp % n_parts, [(init_fp, init, init_fp, ())])
        self.found: dict[str, Violation] = {}
        for name in driver.violations(init):
            self.found.setdefault(name, Violation("safety", name, [TraceStep(("init",), driver.initial())]))
        self.broadcasts: list[tuple[int, Any]] = []
        self.pending_values = driver.store.take_new()
        self.graph_edges: list[tuple[int, int, Any]] = []
        self.graph_states: dict[int, tuple[Any, ...]] = {}
        self.tasks = sc.parallelize(range(n_parts), n_parts)

    def level(self, level: int) -> _LevelReport:
        """Job ``level``: settle the level and expand its new states; what the tasks reported."""
        if self.pending_values:
            self.broadcasts.append((len(self.broadcasts), self.sc.broadcast(self.pending_values)))
        job = partial(
            _level_task,
            self.run_id,
            self.spec,
            self.options.step_timeout_s,
            list(self.broadcasts),
            self.symmetry,
            self.por,
            self.options.liveness,
            str(self.directory),
            self.n_parts,
            level,
        )
        report = _LevelReport()
        for record in self.tasks.mapPartitionsWithIndex(job).collect():
            report.take(record, self.graph_states, self.graph_edges)
        shutil.rmtree(_level_dir(self.directory, level), ignore_errors=True)  # its successors are settled
        self.pending_values = report.values
        for d, value in self.pending_values:
            self.driver.store.adopt(d, value)  # the driver renders traces and checks liveness
        return report

    def note_violations(self, ahead: _LevelReport, report: _LevelReport) -> None:
        """This level's transitions' step properties (job k - 1 expanded them), then its new
        states' invariants (job k settled them): the single process's order within a level."""
        found, driver, symmetry, por = self.found, self.driver, self.symmetry, self.por
        for _k, name, parent, _nfp, label in sorted(ahead.violations, key=lambda r: (r[1], r[2])):
            if name not in found:
                path = _path(self.directory, self.n_parts, parent, self.init_fp)
                found[name] = Violation("safety", name, _trace_to(driver, path, label, symmetry, por))
        for _k, name, fp in sorted(report.state_violations, key=lambda r: (r[1], r[2])):
            if name not in found:
                path = _path(self.directory, self.n_parts, fp, self.init_fp)
                found[name] = Violation("safety", name, concrete_trace(driver, path, symmetry=symmetry, por=por))


def _level_dir(directory: Path, level: int) -> Path:
    return directory / "successors" / f"level-{level:06d}"


def _write_bucket(folder: Path, partition: int, items: list[tuple[int, tuple[Any, ...], int, Any]]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"to-{partition:05d}.pickle"
    tmp = folder / f".to-{partition:05d}.{uuid.uuid4().hex}.tmp"
    tmp.write_bytes(pickle.dumps(items, protocol=pickle.HIGHEST_PROTOCOL))
    os.replace(tmp, path)  # a retried task replaces its file whole


def _level_task(
    run_id: str,
    spec: ModelSpec,
    step_timeout: float | None,
    shipped: list[Any],
    symmetry: bool,
    por: bool,
    liveness: bool,
    directory: str,
    partitions: int,
    level: int,
    index: int,
    _items: Iterable[Any],
) -> Iterator[Any]:
    """Settle partition ``index`` of level ``level`` and expand its new states (module docstring)."""
    # As in the single process (proofs.check.explore): states never form reference cycles, and the
    # cyclic collector would re-walk the executor's whole memo of states at every collection.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield from _settle_and_expand(
            run_id, spec, step_timeout, shipped, symmetry, por, liveness, Path(directory), partitions, level, index
        )
    finally:
        if enabled:
            gc.enable()


def _settle_and_expand(
    run_id: str,
    spec: ModelSpec,
    step_timeout: float | None,
    shipped: list[Any],
    symmetry: bool,
    por: bool,
    liveness: bool,
    root: Path,
    partitions: int,
    level: int,
    index: int,
) -> Iterator[Any]:
    # 1. settle: one candidate per fingerprint, the smallest parent; then against the seen set.
    candidates: dict[int, tuple[tuple[Any, ...], int, Any]] = {}
    name = f"to-{index:05d}.pickle"
    for path in sorted(_level_dir(root, level).glob(f"from-*/{name}")):
        for fp, state, parent, changed in pickle.loads(path.read_bytes()):
            known = candidates.get(fp)
            if known is None or parent < known[1]:
                candidates[fp] = (state, parent, changed)
    seen = PartitionSeen(root, index).open(level)
    keys = sorted(candidates)
    fps = np.array(keys, dtype=np.int64)
    fresh = seen.new(fps) if keys else np.zeros(0, dtype=bool)
    parents = np.array([candidates[k][1] for k in keys], dtype=np.int64)
    seen.record(level, fps[fresh], parents[fresh])
    new = [(k, candidates[k][0], candidates[k][2]) for k, keep in zip(keys, fresh.tolist(), strict=True) if keep]
    del candidates
    yield ("count", len(new))
    model = _runtime(run_id, spec, step_timeout, shipped)
    # The new states' invariants, once per state (the predicates are symmetric: the canonical
    # state breaks what the concrete one does), over what the transition to it rewrote.
    for fp, state, changed in new:
        if liveness:
            yield ("state", fp, state)
        for violated in model.violations(state, changed):
            yield ("broken", violated, fp)
    # 2. expand the new states; their successors go to their partitions' files for the next level.
    canon = model.canonical if symmetry and len(model.symmetries) > 1 else (lambda s: s)
    model.store.take_new()
    buckets: list[dict[int, tuple[tuple[Any, ...], int, Any]]] = [{} for _ in range(partitions)]
    count = 0
    for fp, state, _changed in new:
        for succ in model.successors(state, por=por):
            count += 1
            nxt = canon(succ.state)
            nfp = hash(nxt)
            for violated in succ.broken:
                yield ("x", ("violation", violated, fp, nfp, succ.label))
            if liveness:
                yield ("x", ("edge", fp, nfp, succ.family))
            bucket = buckets[nfp % partitions]
            known = bucket.get(nfp)
            if known is None or fp < known[1]:
                bucket[nfp] = (nxt, fp, succ.changed)
    out = _level_dir(root, level + 1) / f"from-{index:05d}"
    for target, bucket in enumerate(buckets):
        if bucket:
            _write_bucket(out, target, [(nfp, *entry) for nfp, entry in bucket.items()])
    yield ("x", ("transitions", count))
    values = model.store.take_new()
    if values:
        yield ("x", ("values", values))


class _LevelReport:
    """What one level's collect brought back to the driver."""

    def __init__(self) -> None:
        self.new_states = 0
        self.transitions = 0
        self.values: list[tuple[int, Any]] = []
        self.violations: list[Any] = []
        self.state_violations: list[Any] = []

    def take(self, record: Any, states: dict[int, Any], edges: list[tuple[int, int, Any]]) -> None:
        if record[0] == "count":
            self.new_states += record[1]
        elif record[0] == "state":
            states[record[1]] = record[2]
        elif record[0] == "broken":
            self.state_violations.append(record)
        else:
            extra = record[1]
            if extra[0] == "transitions":
                self.transitions += extra[1]
            elif extra[0] == "values":
                self.values.extend(extra[1])
            elif extra[0] == "violation":
                self.violations.append(extra)
            elif extra[0] == "edge":
                edges.append(extra[1:])


def _trace_to(driver: Model, path: list[int], label: Any, symmetry: bool, por: bool) -> list[TraceStep]:
    """The concrete trace along ``path`` (fingerprints), then the step ``label`` that broke a property."""
    trace = concrete_trace(driver, path, symmetry=symmetry, por=por)
    for succ in driver.successors(trace[-1].state, por=por):
        if succ.label == label:
            trace.append(TraceStep(succ.label, succ.state))
            break
    return trace


def _path(directory: Path, partitions: int, fp: int, init_fp: int) -> list[int]:
    path = [fp]
    while fp != init_fp:
        parent = parent_in(directory, partitions, fp)
        if parent is None:
            raise AssertionError(f"state {fp:#x} has no parent in the seen set")
        fp = parent
        path.append(fp)
    path.reverse()
    return path


def _liveness(
    driver: Model,
    states: dict[int, tuple[Any, ...]],
    edges: list[tuple[int, int, Any]],
    directory: Path,
    partitions: int,
    init_fp: int,
    options: Options,
) -> dict[str, Violation]:
    """The liveness check of the local explorer, over the graph the executors reported."""
    from invariants import composed

    graph = Graph()
    graph.node(init_fp, states[init_fp])
    for fp in sorted(states, key=lambda f: (f != init_fp,)):
        graph.node(fp, states[fp])
    for src, dst, family in edges:
        graph.edge(src, dst, family, states[dst])

    class _Parents:
        def parent(self, fp: int) -> int | None:
            return parent_in(directory, partitions, fp)

    properties = composed.LIVENESS + (composed.LIVENESS_STRICT if options.strict else ())
    found = liveness_violations(driver, graph, _Parents(), init_fp, properties)
    return {v.name: v for v in found}


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `txnmodel check --master URL`")
