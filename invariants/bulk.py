"""Bulk verification: every checker over a folder of histories, on Spark or in one process.

``txnmodel verify PATH`` is :func:`verify_main`.  The job:

1. lists the history files under PATH (``--format parquet|jsonl|jepsen``);
2. hands one file to each Spark task (``local[2]`` by default, ``--master URL`` passed unchanged);
   the task reads and type-checks its file, groups the rows by history and then by object, and runs
   the checkers on each history: linearizability of each object against ``--model`` (split per
   object, a step budget per object, stop at the first ``illegal`` object of a history) and, when
   the history speaks the transactional vocabulary, the Elle-style checks of
   :mod:`invariants.transactional`.  A history lives in one file (a file may hold many), unless
   ``--group-by-history``: then the tasks emit (history, rows) pairs, Spark groups them by
   history across files (a shuffle), and a second stage checks each grouped history;
3. collects one verdict row per (history, checker), writes them to ``OUT/verdicts.parquet`` and
   every counterexample to ``OUT/counterexamples/`` (text and HTML), and prints a summary.

``--local`` runs the very same per-file function in this process, without Spark (the baseline the
benchmark compares with).

Exit codes (the CLI's): 0 every history passed every checker; 1 a violation (``illegal`` or a
transactional anomaly), an ``error`` (a model or machine raised: a programming error, reported with
its traceback), or an ``unknown`` verdict (a budget ran out: nothing was proved, so a CI
gate must not pass) unless ``--unknown-ok``; 2 bad input (a file or row that breaks the history
contract, an unknown model or format), which wins over 1 because the verdicts of bad input mean
nothing.

pyspark is imported only inside the functions that need it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_OK",
    "VerdictRow",
    "VerifyOptions",
    "add_verify_arguments",
    "build_parser",
    "check_file",
    "check_histories",
    "run_verify",
    "spark_session",
    "verify_main",
]

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

# Which object kind a reference machine's model checks (the engine's per-object histories).
MACHINE_KINDS = {
    "coordinator": "coordinator",
    "buffer": "partition",
    "pending_ack": "subscription",
    "delayed": "tracker",
}
GENERIC_KINDS = {"register": "register", "cas-register": "register", "kv": "key"}
TXN_VOCABULARY = frozenset({"send", "receive", "commit", "abort", "ack", "ack_cumulative"})
MAX_HTML_BYTES = 300_000


@dataclass(frozen=True)
class VerifyOptions:
    model: str = "auto"
    step_budget: int = 2_000_000
    seconds: float | None = 60.0
    counterexamples: bool = True


@dataclass(frozen=True)
class VerdictRow:
    """One verdict: a history and a checker (``linearizability``, ``transactional``; ``input`` and ``crash``)."""

    history: str
    checker: str
    verdict: str  # ok | illegal | unknown | error (a model raised) | bad-input
    file: str
    model: str = ""
    objects: int = 0
    ops: int = 0
    steps: int = 0
    seconds: float = 0.0
    failing_object: str | None = None
    detail: str = ""  # the anomalies (JSON) or the reason
    counterexample: str | None = None
    html: str | None = None
    seed: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("html")
        return out


VERDICT_COLUMNS = (
    ("history", "string"),
    ("checker", "string"),
    ("verdict", "string"),
    ("file", "string"),
    ("model", "string"),
    ("objects", "int64"),
    ("ops", "int64"),
    ("steps", "int64"),
    ("seconds", "float64"),
    ("failing_object", "string"),
    ("detail", "string"),
    ("counterexample", "string"),
    ("seed", "int64"),
)


# --- the checks, shared by Spark tasks and the local run -------------------------------------------


def _models_for(name: str, ops: Sequence[Any]) -> list[tuple[str, str | None]]:
    """[(model name, object kind it checks)] for a history; ``auto`` picks by the objects present.

    An engine history (machine-level operations present, :func:`spec.history.is_machine_operation`)
    gets every machine whose object kind it holds, in :data:`MACHINE_KINDS` order."""
    from spec.history import is_machine_operation, parse_object

    if name != "auto":
        if name in GENERIC_KINDS:
            return [(name, GENERIC_KINDS[name])]
        return [(name, MACHINE_KINDS.get(name))]
    kinds = {parse_object(op.object)[0] for op in ops}
    if kinds <= {"register"}:
        return [("cas-register", "register")]
    if kinds <= {"key"}:
        return [("kv", "key")]
    machine_kinds = {parse_object(op.object)[0] for op in ops if is_machine_operation(op)}
    # a transactional history without machine-level rows: no per-object model unless one is named
    return [(machine, kind) for machine, kind in MACHINE_KINDS.items() if kind in machine_kinds]


def _model_ops(ops: Sequence[Any], kind: str | None, machine: bool) -> list[Any]:
    """The operations a model checks: its kind's, and for a machine model of an engine history only
    the machine-level ones (the clients' ``new_txn``, ``send``, ... are not the machine's commands)."""
    from spec.history import is_machine_operation, parse_object

    mine = [op for op in ops if kind is None or parse_object(op.object)[0] == kind]
    if machine and any(is_machine_operation(op) for op in mine):
        mine = [op for op in mine if is_machine_operation(op)]
    return mine


_RANK = {"ok": 0, "skipped": 1, "unknown": 2, "illegal": 3}


def failing_part(model: Any, ops: Sequence[Any], result: Any) -> list[Any]:
    """The part of ``ops`` (as ``model.partition`` splits them: an object, or one crash epoch of a
    machine's object) that ``result``, an ``illegal`` object result, is about."""
    parts: list[list[Any]] = [part for part in model.partition(ops) if part and part[0].object == result.object]
    for part in parts:
        if result.blocked in {op.index for op in part}:
            return part
    return [op for part in parts for op in part]


def _check_models(
    plan: Sequence[tuple[str, str | None]], ops: Sequence[Any], options: VerifyOptions
) -> tuple[str, int, int, int, str | None, str, Any, Any]:
    """Linearizability of each planned model's objects.  Returns (verdict, objects, ops, steps,
    failing object, detail, counterexample text, html) over all of them: the worst verdict wins,
    the first illegal object is explained.  The detail is the reasons of the objects not ``ok``; for
    the machines of an engine history it is JSON: ``{"models": {model: {"objects", "epochs", "ops",
    "steps", "verdict", "seconds"}}, "reasons": [...]}``, the per-object verdicts by machine."""
    from invariants.linearizability import Verdict, check_history
    from invariants.models import model_by_name
    from invariants.report import counterexample_html, explain, render_text

    rank = {Verdict.OK: 0, Verdict.UNKNOWN: 1, Verdict.ILLEGAL: 2}
    deadline = None if options.seconds is None else time.monotonic() + options.seconds
    worst, objects, checked, steps = Verdict.OK, 0, 0, 0
    failing: str | None = None
    reasons: list[str] = []
    per_model: dict[str, dict[str, Any]] = {}
    text = page = None
    for model_name, kind in plan:
        try:
            model = model_by_name(model_name)
        except KeyError as exc:
            raise UnknownModel(exc.args[0]) from None
        mine = _model_ops(ops, kind, model_name in MACHINE_KINDS)
        seconds = None if deadline is None else max(0.0, deadline - time.monotonic())
        started = time.perf_counter()
        result = check_history(model, mine, step_budget=options.step_budget, seconds=seconds)
        # A machine's parts are its objects' crash epochs; an object's verdict is its worst epoch's.
        by_object: dict[str, Verdict] = {}
        for part in result.objects:
            known = by_object.get(part.object)
            if known is None or _RANK[part.verdict.value] > _RANK[known.value]:
                by_object[part.object] = part.verdict
        distinct = len(by_object)
        per_model[model_name] = {
            "objects": distinct,
            "epochs": len(result.objects),
            "ops": len(mine),
            "steps": result.steps,
            "verdict": result.verdict.value,
            "object_verdicts": dict(Counter(v.value for v in by_object.values())),
            "seconds": round(time.perf_counter() - started, 3),
        }
        objects += distinct
        checked += len(mine)
        steps += result.steps
        if rank[result.verdict] > rank[worst]:
            worst = result.verdict
        reasons += [f"{o.object}: {o.reason}" for o in result.objects if o.reason and o.verdict is not Verdict.SKIPPED]
        bad = result.failing()
        if bad is not None and failing is None:
            failing = bad.object
            if options.counterexamples:
                cx = explain(model, failing_part(model, mine, bad), bad)
                text = render_text(cx)
                page = counterexample_html(cx, max_bytes=MAX_HTML_BYTES)
    detail = "; ".join(reasons)[:2000]
    if all(model_name in MACHINE_KINDS for model_name, _ in plan):
        detail = json.dumps({"models": per_model, "reasons": [r[:500] for r in reasons[:4]]})
    return worst.value, objects, checked, steps, failing, detail, text, page


def check_histories(histories: dict[str, list[Any]], file: str, options: VerifyOptions) -> list[VerdictRow]:
    """Every checker on each history of one file."""
    from invariants.report import render_txn_text, txn_html
    from invariants.transactional import check_transactional
    from spec.errors import InputError
    from spec.history import is_machine_operation

    rows: list[VerdictRow] = []
    for name, ops in histories.items():
        seed = next((op.seed for op in ops if op.seed is not None), None)
        try:
            plan = _models_for(options.model, ops)
            if plan:
                started = time.perf_counter()
                verdict, objects, checked, steps, failing, reasons, text, page = _check_models(plan, ops, options)
                rows.append(
                    VerdictRow(
                        name,
                        "linearizability",
                        verdict,
                        file,
                        "+".join(m for m, _ in plan),
                        objects,
                        checked,
                        steps,
                        time.perf_counter() - started,
                        failing,
                        reasons,
                        text,
                        page,
                        seed,
                    )
                )
            # The transactional checks read what clients saw, not the machines' steps.
            client_ops = [op for op in ops if not is_machine_operation(op)]
            if any(op.f in TXN_VOCABULARY for op in client_ops):
                started = time.perf_counter()
                txn = check_transactional(client_ops)
                rows.append(
                    VerdictRow(
                        name,
                        "transactional",
                        "ok" if txn.ok else "illegal",
                        file,
                        "elle",
                        txn.txns,
                        len(client_ops),
                        0,
                        time.perf_counter() - started,
                        None,
                        json.dumps({"counts": txn.counts, "anomalies": [a.to_json() for a in txn.anomalies]}),
                        None if txn.ok else render_txn_text(txn, seed=seed),
                        None
                        if txn.ok or not options.counterexamples
                        else txn_html(txn, client_ops, seed=seed, max_bytes=MAX_HTML_BYTES),
                        seed,
                    )
                )
            if not plan and not any(op.f in TXN_VOCABULARY for op in client_ops):
                rows.append(
                    VerdictRow(
                        name,
                        "input",
                        "bad-input",
                        file,
                        options.model,
                        detail="no checker applies: no --model for these objects and no transactional operations",
                    )
                )
        except InputError as exc:
            rows.append(VerdictRow(name, "input", "bad-input", file, options.model, detail=f"{file}: {exc}", seed=seed))
        except UnknownModel as exc:
            rows.append(VerdictRow(name, "input", "bad-input", file, options.model, detail=str(exc), seed=seed))
        except Exception as exc:  # a model or machine raised: a programming error, reported, never hidden
            import traceback

            rows.append(
                VerdictRow(
                    name,
                    "crash",
                    "error",
                    file,
                    options.model,
                    seed=seed,
                    detail=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}",
                )
            )
    return rows


class UnknownModel(Exception):
    """``--model`` names neither a generic model nor a reference machine with ``VECTORS``."""


def check_file(path: str, fmt: str, options: VerifyOptions, only: Sequence[str] | None = None) -> list[VerdictRow]:
    """Read one file and check every history in it (or those named in ``only``, Parquet only); bad
    input becomes a ``bad-input`` row."""
    from invariants.history import read_file
    from spec.errors import InputError

    try:
        histories = read_file(path, fmt, only)
    except InputError as exc:
        return [VerdictRow(Path(path).name, "input", "bad-input", path, options.model, detail=str(exc))]
    return check_histories(histories, path, options)


def read_groups(path: str, fmt: str, options: VerifyOptions) -> list[tuple[str | None, Any]]:
    """Stage 1 of ``--group-by-history``: one file's rows keyed by history, ``(None, row)`` for bad input.

    Only the per-row contract is checked here; the cross-row rules need the whole history.
    """
    from invariants.history import iter_jsonl, iter_parquet, read_file
    from spec.errors import InputError

    try:
        if fmt == "jepsen":
            return [(name, [(path, ops)]) for name, ops in read_file(path, fmt).items()]
        groups: dict[str, list[Any]] = {}
        for op in iter_parquet(path) if fmt == "parquet" else iter_jsonl(path):
            groups.setdefault(op.history, []).append(op)
    except InputError as exc:
        return [(None, VerdictRow(Path(path).name, "input", "bad-input", path, options.model, detail=str(exc)))]
    return [(name, [(path, ops)]) for name, ops in groups.items()]


def check_group(history: str, parts: Sequence[tuple[str, list[Any]]], options: VerifyOptions) -> list[VerdictRow]:
    """Stage 2 of ``--group-by-history``: a history's rows from every file, validated and checked."""
    from spec.history import BadHistory, validate_history

    files = ", ".join(sorted({path for path, _ in parts}))
    ops = sorted((op for _, chunk in parts for op in chunk), key=lambda op: op.index)
    try:
        validate_history(ops, where=files)
    except BadHistory as exc:
        return [VerdictRow(history, "input", "bad-input", files, options.model, detail=str(exc))]
    return check_histories({history: ops}, files, options)


# --- Spark -----------------------------------------------------------------------------------------


def spark_session(master: str = "local[2]", app: str = "txnmodel-verify") -> Any:
    """A quiet Spark session: no UI, no console progress bar, log level ERROR, this Python in the workers."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "PYSPARK_SUBMIT_ARGS" not in os.environ:
        # The driver JVM starts before any SparkConf applies: quiet its log4j from the command line.
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            f"--driver-java-options -Dlog4j2.configurationFile={_log4j_config()} pyspark-shell"
        )
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.python.worker.reuse", "true")
        .config("spark.executor.extraJavaOptions", "-Dlog4j2.level=ERROR")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not master.startswith("local"):
        _ship_packages(spark.sparkContext)
    return spark


# In a pyspark "shell" Spark resets the root level to its own logger's level (WARN unless that
# logger has a configuration of its own) and says so on stderr; configuring the whole
# org.apache.spark hierarchy at the root's level keeps the driver silent.
_LOG4J = """rootLogger.level = error
logger.spark.name = org.apache.spark
logger.spark.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""


def _log4j_config() -> str:
    import tempfile

    path = Path(tempfile.gettempdir()) / "txnmodel-log4j2.properties"
    if not path.exists() or path.read_text() != _LOG4J:
        path.write_text(_LOG4J)
    return str(path)


def _ship_packages(sc: Any) -> None:
    """On a cluster, executors need our packages: ship spec/, reference/ and invariants/ as one zip."""
    import tempfile
    import zipfile

    root = Path(__file__).resolve().parent.parent
    handle, name = tempfile.mkstemp(suffix=".zip", prefix="txnmodel-")
    os.close(handle)
    with zipfile.ZipFile(name, "w") as archive:
        for package in ("spec", "reference", "invariants"):
            for file in (root / package).rglob("*"):
                if file.is_file() and "__pycache__" not in file.parts:
                    archive.write(file, file.relative_to(root))
    sc.addPyFile(name)


class _Progress:
    """Feeds a progress phase (a :class:`txnmodel.progress.Phase`, or None for none) with Spark's
    completed tasks (its status tracker, every half second) while a job runs."""

    def __init__(self, sc: Any, total: int, phase: Any) -> None:
        self._sc, self._total = sc, total
        self._phase: Any = None if phase is None or phase is False else phase
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Progress:
        if self._phase is not None:
            self._phase.set_total(self._total)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._phase is None:
            return
        self._thread.join()
        if exc[0] is None:
            self._phase.update(done=self._total)

    def _run(self) -> None:
        tracker = self._sc.statusTracker()
        finished = 0  # tasks of stages that ended (a job of two stages counts both)
        seen: dict[int, int] = {}
        while not self._stop.wait(0.5):
            active = set(tracker.getActiveStageIds())
            for stage in list(seen):
                if stage not in active:
                    finished += seen.pop(stage)
            for stage in active:
                info = tracker.getStageInfo(stage)
                if info is not None:
                    seen[stage] = info.numCompletedTasks
            self._phase.update(done=min(self._total, finished + sum(seen.values())))


def check_files_spark(
    files: Sequence[str],
    fmt: str,
    options: VerifyOptions,
    master: str = "local[2]",
    progress: Any = None,
    spark: Any = None,
    group_by_history: bool = False,
) -> list[VerdictRow]:
    """Check on Spark; the verdicts come back to the driver.  ``progress``: a
    :class:`txnmodel.progress.Phase` fed with the tasks done, or None.

    Default: each task runs :func:`check_file` on a few files (a history lives in one file, so no
    shuffle).  ``group_by_history``: tasks read files into (history, rows) pairs, Spark groups them
    by history across files (``reduceByKey``), and the grouped histories are checked in a second
    stage: for datasets whose histories are spread over part files.
    """
    session = spark if spark is not None else spark_session(master)
    sc = session.sparkContext
    # A Spark task costs tens of milliseconds: pack the work into a few tasks per core, balanced by size.
    slots = 3 * sc.defaultParallelism
    if not group_by_history:
        units = _units(files, fmt, slots)
        work = _pack(units, max(1, min(len(units), slots)))
        with _Progress(sc, len(work), progress):
            rows: list[VerdictRow] = (
                sc.parallelize(work, len(work))
                .flatMap(lambda part: [row for path, names in part for row in check_file(path, fmt, options, names)])
                .collect()
            )
            return rows
    whole = [((path, None), float(_size(path) or 1)) for path in files]
    bins = [[path for path, _ in part] for part in _pack(whole, max(1, min(len(files), slots)))]
    rdd = sc.parallelize(bins, len(bins))
    keyed = rdd.flatMap(lambda paths: [pair for path in paths for pair in read_groups(path, fmt, options)])
    bad = keyed.filter(lambda pair: pair[0] is None).values()
    checked = (
        keyed.filter(lambda pair: pair[0] is not None)
        .reduceByKey(lambda left, right: left + right, numPartitions=slots)
        .flatMap(lambda pair: check_group(pair[0], pair[1], options))
    )
    with _Progress(sc, len(bins) + slots, progress):
        return bad.union(checked).collect()  # type: ignore[no-any-return]


Unit = tuple[str, "tuple[str, ...] | None"]  # a file, and the histories of it to check (None: all)


def _units(files: Sequence[str], fmt: str, slots: int) -> list[tuple[Unit, float]]:
    """The work items with their estimated cost: whole files, except that with fewer files than
    task slots a large Parquet file is split by history into about its share of the slots (each
    task then reads only its histories' rows, filtered in Arrow), so a few big files still keep
    every core busy."""
    from invariants.history import parquet_history_names
    from spec.errors import InputError

    if fmt != "parquet" or len(files) >= slots:
        return [((path, None), float(_size(path) or 1)) for path in files]
    total = sum(_size(path) for path in files) or 1
    units: list[tuple[Unit, float]] = []
    for path in files:
        size = float(_size(path) or 1)
        shards = max(1, round(size / total * slots))
        try:
            names = parquet_history_names(path) if shards > 1 else []
        except InputError:
            names = []  # the task reads the whole file and reports what is wrong with it
        if len(names) < 2:
            units.append(((path, None), size))
            continue
        shards = min(shards, len(names))
        units.extend(
            ((path, tuple(names[i::shards])), size * len(names[i::shards]) / len(names)) for i in range(shards)
        )
    return units


def _pack(units: Sequence[tuple[Unit, float]], count: int) -> list[list[Unit]]:
    """Greedy bin packing by estimated cost (largest first into the lightest bin)."""
    bins: list[list[Unit]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for unit, cost in sorted(units, key=lambda pair: -pair[1]):
        lightest = loads.index(min(loads))
        bins[lightest].append(unit)
        loads[lightest] += cost
    return [b for b in bins if b]


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def check_files_local(
    files: Sequence[str], fmt: str, options: VerifyOptions, progress: Any = None, group_by_history: bool = False
) -> list[VerdictRow]:
    """The same work in this process, file after file.  ``progress``: a
    :class:`txnmodel.progress.Phase` told of every file checked, or None."""
    rows: list[VerdictRow] = []
    progress = None if progress is False else progress
    if progress is not None:
        progress.set_total(len(files))
    if group_by_history:
        groups: dict[str, list[Any]] = {}
        for path in files:
            for key, payload in read_groups(path, fmt, options):
                if key is None:
                    rows.append(payload)
                else:
                    groups.setdefault(key, []).extend(payload)
            if progress is not None:
                progress.advance(note=Path(path).name)
        for history, parts in groups.items():
            rows.extend(check_group(history, parts, options))
        return rows
    for path in files:
        rows.extend(check_file(path, fmt, options))
        if progress is not None:
            progress.advance(note=Path(path).name)
    return rows


# --- output ----------------------------------------------------------------------------------------


def write_verdicts(out: Path, rows: Sequence[VerdictRow]) -> list[Path]:
    """``OUT/verdicts.parquet``, ``OUT/counterexamples/<history>.<checker>.{txt,html}`` and
    ``OUT/index.html`` (every verdict, each counterexample linked).  Returns the counterexample
    files written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from invariants.viewer import index_page

    out.mkdir(parents=True, exist_ok=True)
    types = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64()}
    schema = pa.schema([pa.field(name, types[kind]) for name, kind in VERDICT_COLUMNS])
    table = pa.table({name: [getattr(row, name) for row in rows] for name, _ in VERDICT_COLUMNS}, schema=schema)
    pq.write_table(table, out / "verdicts.parquet")
    pages = out / "counterexamples"
    written: list[Path] = []
    listed = []
    for row in rows:
        entry = row.to_json()
        if row.counterexample is not None:
            pages.mkdir(exist_ok=True)
            stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{row.history}.{row.checker}")
            (pages / f"{stem}.txt").write_text(row.counterexample + "\n", encoding="utf-8")
            written.append(pages / f"{stem}.txt")
            entry["txt"] = f"counterexamples/{stem}.txt"
            if row.html is not None:
                (pages / f"{stem}.html").write_text(row.html, encoding="utf-8")
                written.append(pages / f"{stem}.html")
                entry["html"] = f"counterexamples/{stem}.html"
        listed.append(entry)
    (out / "index.html").write_text(index_page(listed, title=f"txnmodel verify: {out}"), encoding="utf-8")
    return written


def _duplicates(rows: Sequence[VerdictRow]) -> list[VerdictRow]:
    """A history id found in two files is bad input (a history lives in one file)."""
    files: dict[str, set[str]] = {}
    for row in rows:
        if row.checker != "input":
            files.setdefault(row.history, set()).add(row.file)
    return [
        VerdictRow(
            history,
            "input",
            "bad-input",
            ", ".join(sorted(where)),
            detail=f"history {history!r} appears in several files: {', '.join(sorted(where))}",
        )
        for history, where in sorted(files.items())
        if len(where) > 1
    ]


@dataclass
class Summary:
    histories: int = 0
    ops: int = 0
    seconds: float = 0.0
    by_checker: dict[str, Counter[str]] = field(default_factory=dict)

    def table(self) -> str:
        lines = [f"{'checker':<16} {'ok':>6} {'illegal':>8} {'unknown':>8} {'error':>6} {'bad-input':>10}"]
        for checker, counts in sorted(self.by_checker.items()):
            lines.append(
                f"{checker:<16} {counts['ok']:>6} {counts['illegal']:>8} {counts['unknown']:>8} "
                f"{counts['error']:>6} {counts['bad-input']:>10}"
            )
        lines.append(f"{self.histories} histories, {self.ops} operations, {self.seconds:.1f}s")
        return "\n".join(lines)


def summarize(rows: Sequence[VerdictRow], seconds: float) -> Summary:
    summary = Summary(seconds=seconds)
    ops: dict[str, int] = {}
    for row in rows:
        summary.by_checker.setdefault(row.checker, Counter())[row.verdict] += 1
        ops[row.history] = max(ops.get(row.history, 0), row.ops)
    summary.histories = len(ops)
    summary.ops = sum(ops.values())
    return summary


def exit_code(rows: Sequence[VerdictRow], unknown_ok: bool = False) -> int:
    verdicts = {row.verdict for row in rows}
    if "bad-input" in verdicts:
        return EXIT_BAD_INPUT
    if "illegal" in verdicts or "error" in verdicts or ("unknown" in verdicts and not unknown_ok):
        return EXIT_FAILED
    return EXIT_OK


def history_results(rows: Sequence[VerdictRow]) -> list[dict[str, Any]]:
    """One result per history: its name, overall verdict, and each checker's verdict."""
    rank = {"ok": 0, "unknown": 1, "illegal": 2, "error": 3, "bad-input": 4}
    grouped: dict[str, list[VerdictRow]] = {}
    for row in rows:
        grouped.setdefault(row.history, []).append(row)
    out = []
    for history, mine in sorted(grouped.items()):
        worst = max((r.verdict for r in mine), key=lambda v: rank.get(v, 0))
        out.append(
            {
                "history": history,
                "verdict": worst,
                "seed": next((r.seed for r in mine if r.seed is not None), None),
                "file": mine[0].file,
                "checkers": {r.checker: r.to_json() for r in mine},
            }
        )
    return out


# --- the command line ------------------------------------------------------------------------------


def add_verify_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``txnmodel verify`` (for the CLI's subparser)."""
    parser.add_argument("path", metavar="PATH", help="a history file, or a folder searched for them")
    parser.add_argument(
        "--format",
        choices=["parquet", "jsonl", "jepsen"],
        default="parquet",
        help="history format (default parquet; jepsen: Jepsen etcd logs)",
    )
    parser.add_argument(
        "--model",
        default="auto",
        help="linearizability model: register / cas-register (Jepsen registers), kv, or a reference "
        "machine (coordinator, buffer, pending_ack, delayed); auto (default) picks a generic "
        "model from the objects, and transactional histories get the Elle-style checks",
    )
    parser.add_argument("--master", default="local[2]", help="Spark master URL, passed unchanged (default local[2])")
    parser.add_argument("--local", action="store_true", help="check in this process without Spark")
    parser.add_argument(
        "--group-by-history",
        action="store_true",
        help="histories may be spread over several files (Spark part files): group rows by history "
        "across files with a shuffle before checking (default: a history lives in one file)",
    )
    parser.add_argument(
        "--out",
        default="out/verdicts",
        help="folder for verdicts.parquet, index.html and counterexamples/ (default out/verdicts)",
    )
    parser.add_argument(
        "--budget",
        type=int,
        default=2_000_000,
        help="search steps per object before the verdict is unknown (default 2,000,000)",
    )
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="wall-clock budget per history's linearizability check (default 60)"
    )
    parser.add_argument("--unknown-ok", action="store_true", help="exit 0 even if some verdict is unknown")
    parser.add_argument("--no-counterexamples", action="store_true", help="skip shrinking and rendering")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--json", action="store_true", help="print one result per history as JSON")
    return parser


def build_parser(prog: str = "txnmodel verify") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Check histories: linearizability of each object against a model (Wing-Gong-Lowe, split per "
        "object, budgeted) and the transactional properties (read-committed, atomic visibility, no "
        "loss, no duplicates, order, delayed never early), on Spark or locally. Writes verdicts as "
        "Parquet. Exit 0 all ok, 1 a violation or an unknown verdict, 2 bad input.",
    )
    return add_verify_arguments(parser)


def run_verify(args: argparse.Namespace, reporter: Any = None) -> int:
    """Run with parsed arguments (what the CLI's ``verify`` subcommand calls); ``reporter`` (a
    :class:`txnmodel.progress.Reporter`, or None) shows the progress."""
    from invariants.history import history_files
    from invariants.models import model_by_name
    from spec.errors import InputError
    from spec.history import BadHistory

    started = time.perf_counter()
    try:
        out_dir = Path(args.out).resolve()
        # never read our own output back as input (an --out folder inside PATH)
        files = [str(p) for p in history_files(args.path, args.format) if out_dir not in p.resolve().parents]
        if not files:
            raise BadHistory(f"no {args.format} history files outside the output folder {out_dir}", where=args.path)
        if args.model != "auto":
            model_by_name(args.model)
    except InputError as exc:
        print(f"txnmodel verify: invalid input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyError as exc:
        print(f"txnmodel verify: {exc.args[0]}", file=sys.stderr)
        return EXIT_BAD_INPUT
    model = "cas-register" if args.format == "jepsen" and args.model == "auto" else args.model
    options = VerifyOptions(
        model=model, step_budget=args.budget, seconds=args.seconds, counterexamples=not args.no_counterexamples
    )
    import contextlib

    def phase(name: str, total: int | None, unit: str) -> Any:
        if reporter is None or args.no_progress:
            return contextlib.nullcontext(None)
        return reporter.phase(name, total=total, unit=unit)

    grouped = args.group_by_history
    if args.local:
        with phase("verify", len(files), "files") as progress:
            rows = check_files_local(files, args.format, options, progress=progress, group_by_history=grouped)
    else:
        with phase("verify: start Spark", None, "") as progress:
            spark = spark_session(args.master)  # a JVM starts: tens of seconds on a busy machine
        with phase(f"verify on Spark ({args.master})", None, "tasks") as progress:
            rows = check_files_spark(
                files,
                args.format,
                options,
                master=args.master,
                progress=progress,
                spark=spark,
                group_by_history=grouped,
            )
    if not grouped:
        rows = list(rows) + _duplicates(rows)
    elapsed = time.perf_counter() - started
    written = write_verdicts(Path(args.out), rows)
    code = exit_code(rows, unknown_ok=args.unknown_ok)
    summary = summarize(rows, elapsed)
    if args.json:
        json.dump(
            {
                "exit_code": code,
                "histories": history_results(rows),
                "summary": {
                    "histories": summary.histories,
                    "operations": summary.ops,
                    "seconds": round(elapsed, 3),
                    "verdicts": {k: dict(v) for k, v in summary.by_checker.items()},
                },
                "index": str(Path(args.out) / "index.html"),
                "counterexample_files": [str(path) for path in written],
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return code
    _print_report(rows, summary, Path(args.out), written)
    return code


def _print_report(
    rows: Iterable[VerdictRow], summary: Summary, out: Path, written: Sequence[Path] = (), max_shown: int = 10
) -> None:
    """Each verdict that is not ok (the first ``max_shown``, each cut at 40 lines, every cut
    marked with what it left out and where the rest is), then the summary and every file written."""
    bad = [r for r in rows if r.verdict != "ok"]
    pages = {path.stem: path for path in written}
    for row in bad[:max_shown]:
        seed = f" (seed {row.seed})" if row.seed is not None else ""
        print(f"{row.verdict.upper()} {row.history} [{row.checker}]{seed}")
        stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{row.history}.{row.checker}")
        if row.counterexample:
            lines = row.counterexample.splitlines()
            print("\n".join("    " + line for line in lines[:40]))
            if len(lines) > 40:
                where = pages.get(stem, out / "counterexamples")
                print(f"    ... {len(lines) - 40} more lines not shown: the whole counterexample is in {where}")
        elif row.detail:
            print(
                f"    {row.detail[:500]}"
                + (f" ... ({len(row.detail) - 500} more characters)" if len(row.detail) > 500 else "")
            )
    if len(bad) > max_shown:
        print(f"... {len(bad) - max_shown} more verdicts that are not ok, not shown: see {out / 'index.html'}")
    print(summary.table())
    for path in written:
        print(f"counterexample: {path}")
    print(f"verdicts: {out / 'verdicts.parquet'}")
    print(f"index of every verdict: {out / 'index.html'}")


def verify_main(argv: Sequence[str], reporter: Any = None) -> int:
    """``txnmodel verify ARGS`` as a function: parse, run, return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else EXIT_BAD_INPUT
    if reporter is None:
        from txnmodel.progress import Reporter  # the command line's own: this function is the CLI

        reporter = Reporter(enabled=not args.no_progress)
    return run_verify(args, reporter)


if __name__ == "__main__":
    raise SystemExit(verify_main(sys.argv[1:]))
