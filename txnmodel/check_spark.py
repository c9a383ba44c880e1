"""Breadth-first exploration of a composed model on Spark (``txnmodel check --master URL``).

The pure part is :mod:`proofs.check` (a level is "expand these states": :meth:`Model.successors`
and :meth:`Model.canonical`); this module is the plumbing.  One BFS level is one Spark job:

1. the frontier's partitions expand their states on the executors (each executor keeps one
   :class:`~proofs.check.model.Model` per run, so its memoised machine steps and transitions
   survive from level to level), check every successor's safety predicates, and emit
   ``(fingerprint, (state, parent))``;
2. one shuffle partitions the successors by fingerprint (``fp mod partitions``) and keeps one per
   fingerprint;
3. each partition tests its fingerprints against its part of the seen set, which lives on disk
   (:class:`txnmodel.fpset.PartitionSeen`: one sorted run per level, memory-mapped), records the new
   ones, and yields them as the next frontier.

Component states travel as digests; the values an executor interned in a level go to the driver
with the level's results and are broadcast to every executor before the next level, so any
executor can expand any state.  The fingerprint of a state is Python's hash of a tuple of ints,
the same in every process, so the counts and verdicts equal the single-process run's.

The seen set's directory must be visible to every executor: a local directory in local mode, a
shared file system on a cluster.  Traces are rebuilt on the driver from the parent pointers on
disk and replayed concretely.
"""

from __future__ import annotations

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

from proofs.check.explore import Options, Result, TraceStep, Violation, concrete_trace
from proofs.check.model import Model
from proofs.check.program import ModelSpec
from txnmodel.fpset import PartitionSeen, parent_in

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


def _partition_of(partitions: int) -> Any:
    def part(key: Any) -> int:
        return key % partitions if isinstance(key, int) else 0

    return part


def explore_spark(
    spec: ModelSpec,
    options: Options,
    master: str,
    *,
    work_dir: str | None = None,
    partitions: int | None = None,
    spark: Any = None,
) -> tuple[Result, Model]:
    """Explore ``spec`` on Spark; the result and the driver's model (for rendering traces).  The
    session is the process's one (:func:`txnmodel.spark_runner.spark_session`), left running."""
    from txnmodel.spark_runner import spark_session

    started = time.perf_counter()
    session = spark or spark_session(master, "txnmodel-check")
    sc = session.sparkContext
    slots = int(sc.defaultParallelism)
    n_parts = partitions or max(2, 2 * slots)
    run_id = uuid.uuid4().hex
    directory = Path(tempfile.mkdtemp(prefix="txnmodel-check-", dir=work_dir))
    driver = Model(spec, step_timeout_s=options.step_timeout_s)
    symmetry = options.symmetry and not options.liveness
    por = options.por and not options.liveness
    result = Result(
        spec.name,
        dict(spec.bounds),
        reductions={"symmetry": symmetry, "por": por},
        liveness_checked=options.liveness,
    )
    if options.liveness and (options.symmetry or options.por):
        result.notes.append("liveness needs the whole graph: explored without symmetry and partial-order reduction")
    result.notes.append(f"Spark {master}: {n_parts} partitions")
    canon = driver.canonical if symmetry and len(driver.symmetries) > 1 else (lambda s: s)
    init = canon(driver.initial())
    init_fp = hash(init)
    PartitionSeen(directory, init_fp % n_parts).record(0, np.array([init_fp], dtype=np.int64), np.array([init_fp]))
    found: dict[str, Violation] = {}
    for name in driver.violations(init):
        found.setdefault(name, Violation("safety", name, [TraceStep(("init",), driver.initial())]))
    broadcasts: list[tuple[int, Any]] = []
    pending_values = driver.store.take_new()
    graph_edges: list[tuple[int, int, Any]] = []
    graph_states: dict[int, tuple[Any, ...]] = {init_fp: init}
    frontier = sc.parallelize([(init_fp, (init, init_fp))], 1)
    level = 0
    states = 1
    transitions = 0
    step_timeout = options.step_timeout_s
    liveness = options.liveness
    part = _partition_of(n_parts)
    try:
        while True:
            level += 1
            if pending_values:
                broadcasts.append((len(broadcasts), sc.broadcast(pending_values)))
            shipped = list(broadcasts)

            expand = partial(_expand, run_id, spec, step_timeout, shipped, symmetry, por, liveness)
            expanded = frontier.mapPartitionsWithIndex(expand)
            merged = expanded.reduceByKey(_first_parent, n_parts, part)
            out = merged.mapPartitionsWithIndex(partial(_settle, directory, level)).persist()
            level_report = _LevelReport()
            for record in out.mapPartitions(partial(_report, liveness)).collect():
                level_report.take(record, graph_states, graph_edges)
            new_count, transitions = level_report.new_states, transitions + level_report.transitions
            pending_values = level_report.values
            level_violations = level_report.violations
            for d, value in pending_values:
                driver.store.adopt(d, value)  # the driver renders traces and checks liveness
            frontier.unpersist()
            frontier = out.filter(lambda r: r[0] == "s").map(lambda r: (r[1], r[2]))
            states += new_count
            for _k, name, parent, _nfp, label in sorted(level_violations, key=lambda r: (r[1], r[2])):
                if name not in found:
                    path = _path(directory, n_parts, parent, init_fp)
                    found[name] = Violation("safety", name, _trace_to(driver, path, label, symmetry, por))
            if options.progress is not None:
                options.progress(level, states, new_count)
            if found and options.stop_at_first:
                result.complete = False
                break
            if new_count == 0:
                level -= 1
                break
            if options.max_states is not None and states >= options.max_states:
                result.complete = False
                result.notes.append(f"stopped at --max-states {options.max_states}")
                break
        result.states = states
        result.transitions = transitions
        result.depth = level
        if liveness and not found and result.complete:
            found.update(_liveness(driver, graph_states, graph_edges, directory, n_parts, init_fp, options))
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result.violations = sorted(found.values(), key=lambda v: (v.length, v.name))
    result.seconds = time.perf_counter() - started
    return result, driver


def _expand(
    run_id: str,
    spec: ModelSpec,
    step_timeout: float | None,
    shipped: list[Any],
    symmetry: bool,
    por: bool,
    liveness: bool,
    index: int,
    items: Iterable[Any],
) -> Iterator[Any]:
    """A frontier partition's successors keyed by fingerprint, and what the driver needs keyed by
    (partition, serial): violations, graph edges (for liveness), counts, newly interned values."""
    model = _runtime(run_id, spec, step_timeout, shipped)
    canon = model.canonical if symmetry and len(model.symmetries) > 1 else (lambda s: s)
    model.store.take_new()
    count = 0
    serial = 0
    for fp, (state, _parent) in items:
        for succ in model.successors(state, por=por):
            count += 1
            nxt = canon(succ.state)
            nfp = hash(nxt)
            for name in list(succ.broken) + model.violations(succ.state, succ.changed):
                serial += 1
                yield ((index, serial), ("violation", name, fp, nfp, succ.label))
            if liveness:
                serial += 1
                yield ((index, serial), ("edge", fp, nfp, succ.family))
            yield (nfp, (nxt, fp))
    serial += 1
    yield ((index, serial), ("transitions", count))
    values = model.store.take_new()
    if values:
        serial += 1
        yield ((index, serial), ("values", values))


def _settle(directory: Path, level: int, index: int, items: Iterable[Any]) -> Iterator[Any]:
    """Test a partition's successors against its part of the seen set; record and yield the new."""
    seen = PartitionSeen(directory, index).open(level)
    keys: list[int] = []
    payload: list[Any] = []
    for key, value in items:
        if isinstance(key, tuple):
            yield ("x", value)
        else:
            keys.append(key)
            payload.append(value)
    if not keys:
        seen.record(level, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        return
    fps = np.array(keys, dtype=np.int64)
    fresh = seen.new(fps)
    parents = np.array([p[1] for p in payload], dtype=np.int64)
    seen.record(level, fps[fresh], parents[fresh])
    for keep, key, value in zip(fresh.tolist(), keys, payload, strict=True):
        if keep:
            yield ("s", key, value)


def _report(liveness: bool, items: Iterable[Any]) -> Iterator[Any]:
    """One job per level: what the driver needs (the extras, the new states' count, and for
    liveness the new states) in one collect; the frontier stays on the executors."""
    count = 0
    for record in items:
        if record[0] == "s":
            count += 1
            if liveness:
                yield ("state", record[1], record[2][0])
        else:
            yield record
    yield ("count", count)


class _LevelReport:
    """What one level's collect brought back to the driver."""

    def __init__(self) -> None:
        self.new_states = 0
        self.transitions = 0
        self.values: list[tuple[int, Any]] = []
        self.violations: list[Any] = []

    def take(self, record: Any, states: dict[int, Any], edges: list[tuple[int, int, Any]]) -> None:
        if record[0] == "count":
            self.new_states += record[1]
        elif record[0] == "state":
            states[record[1]] = record[2]
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


def _first_parent(a: Any, b: Any) -> Any:
    """Keep one successor per fingerprint: the one with the smallest parent (deterministic)."""
    if isinstance(a, tuple) and len(a) == 2 and isinstance(a[1], int) and isinstance(b, tuple) and len(b) == 2:
        return a if a[1] <= b[1] else b
    return a


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
    from proofs.check import explore as local

    graph = local._Graph()
    graph.node(init_fp, states[init_fp])
    for fp in sorted(states, key=lambda f: (f != init_fp,)):
        graph.node(fp, states[fp])
    for src, dst, family in edges:
        graph.edge(src, dst, family, states[dst])

    class _Parents:
        def parent(self, fp: int) -> int | None:
            return parent_in(directory, partitions, fp)

    properties = composed.LIVENESS + (composed.LIVENESS_STRICT if options.strict else ())
    found = local._liveness(driver, graph, _Parents(), init_fp, properties)  # type: ignore[arg-type]
    return {v.name: v for v in found}


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `txnmodel check --master URL`")
