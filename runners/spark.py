"""The Spark runner of ``txnmodel verify``, and the one Spark session of the process.

:func:`spark_session` starts (or returns) the process's single session: quiet (no UI, no console
progress bar, log level ERROR), this Python in the workers, and on a cluster our packages shipped
to the executors.  Every phase of the main job, and any other tool of this process that wants
Spark, calls it and gets the same session; :func:`stop_session` ends it.

:func:`check_files_spark` checks history files on Spark: the files (a large Parquet file split by
history when there are fewer files than task slots) are packed into a few balanced tasks per core,
and each task runs :func:`runners.file_checks.check_units` on its share and writes its verdicts
itself.  Histories are read by the executors, never by the driver.  :func:`use_spark` decides
whether Spark pays for a given input at all.

pyspark is imported only inside the functions that need it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from history_io.folders import scratch_folder
from invariants.verify import VerdictRow, VerifyOptions, check_grouped
from runners.file_checks import Reproduce, Unit, check_units, read_groups
from views.report import rendered

__all__ = [
    "BREAK_EVEN_OPS",
    "check_files_spark",
    "estimate_operations",
    "pack",
    "spark_session",
    "stop_session",
    "use_spark",
    "work_units",
]

_SESSION: Any = None
_SESSION_MASTER: str | None = None
_LOCK = threading.Lock()


def spark_session(master: str = "local[2]", app: str = "txnmodel") -> Any:
    """The process's Spark session on ``master``, started on first use and reused after.

    Asking for another master stops the running session first: Spark allows one active
    SparkContext per process."""
    global _SESSION, _SESSION_MASTER
    with _LOCK:
        if _SESSION is not None and master == _SESSION_MASTER and not _stopped(_SESSION):
            return _SESSION
        if _SESSION is not None:
            _SESSION.stop()
        _SESSION, _SESSION_MASTER = _start(master, app), master
        return _SESSION


def stop_session() -> None:
    """Stop the process's session, if one is running (also done at exit)."""
    global _SESSION, _SESSION_MASTER
    with _LOCK:
        if _SESSION is not None:
            _SESSION.stop()
        _SESSION, _SESSION_MASTER = None, None


atexit.register(stop_session)


def _stopped(session: Any) -> bool:
    context = session.sparkContext
    return getattr(context, "_jsc", None) is None


def _start(master: str, app: str) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if "PYSPARK_SUBMIT_ARGS" not in os.environ:
        # The driver JVM starts before any SparkConf applies: quiet its log4j, and keep its temporary
        # files in the run's private folder, from the command line.
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            f"--driver-java-options '-Dlog4j2.configurationFile={_log4j_config()} "
            f"-Djava.io.tmpdir={scratch_folder('jvm')}' pyspark-shell"
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
    if master.startswith("local"):  # shuffle and block files in the run's private folder; a cluster uses its own
        builder = builder.config("spark.local.dir", str(scratch_folder("spark")))
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
    path = scratch_folder("log4j") / "log4j2.properties"
    path.write_text(_LOG4J)
    return str(path)


def _ship_packages(sc: Any) -> None:
    """On a cluster, executors need our packages (:data:`spec.layout.PACKAGES`; the model checker's
    levels run there too) as one zip."""
    import zipfile

    from spec.layout import PACKAGES

    root = Path(__file__).resolve().parent.parent
    name = str(scratch_folder("packages") / "txnmodel-packages.zip")
    with zipfile.ZipFile(name, "w") as archive:
        for package in PACKAGES:
            for file in (root / package).rglob("*"):
                # compiled modules cannot be imported from a zip: the executors run their source
                if file.is_file() and "__pycache__" not in file.parts and file.suffix not in (".so", ".c", ".pyd"):
                    archive.write(file, file.relative_to(root))
    sc.addPyFile(name)


class _Progress:
    """Feeds a progress phase (a :class:`views.progress.Phase`, or None for none) with Spark's
    completed tasks (its status tracker, every half second) while a job runs."""

    def __init__(self, sc: Any, total: int, phase: Any) -> None:
        self._sc, self._total = sc, total
        self._phase: Any = None if phase is None or isinstance(phase, bool) else phase
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
        finished = 0  # tasks of the stages that ended (a job of two stages counts both)
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
    out: str | None = None,
    reproduce: Reproduce | None = None,
) -> list[VerdictRow]:
    """Check on Spark (``reproduce``: see :data:`runners.file_checks.Reproduce`).  ``progress``: a
    :class:`views.progress.Phase` fed with the tasks done, or None.

    Default: each task runs :func:`check_units` on a few files or on some histories of a large
    file (a history lives in one file, so no shuffle).  ``group_by_history``: tasks read files into
    (history, rows) pairs, Spark groups them by history across files (``reduceByKey``, a shuffle
    between executors), and the grouped histories are checked in a second stage: for datasets whose
    histories are spread over part files.  Histories never reach the driver.

    With ``out`` (a folder every executor can write to) each task writes its verdicts and
    counterexamples there itself (:func:`runners.verdicts.write_part`) and only the verdict rows,
    without their HTML pages, come back; without it the whole rows come back (tests, benchmarks).
    """
    session = spark if spark is not None else spark_session(master)
    sc = session.sparkContext
    # A Spark task costs tens of milliseconds: pack the work into a few tasks per core, balanced by size.
    slots = 3 * sc.defaultParallelism
    if not group_by_history:
        units = work_units(files, fmt, slots)
        work = pack(units, max(1, min(len(units), slots)))
        with _Progress(sc, len(work), progress):
            rows: list[VerdictRow] = (
                sc.parallelize(work, len(work))
                .mapPartitionsWithIndex(
                    lambda index, bins: [
                        row
                        for units in bins
                        for row in check_units(units, fmt, options, out, f"{index:05d}", reproduce)
                    ]
                )
                .collect()
            )
            return rows
    whole = [((path, None), float(_size(path) or 1)) for path in files]
    bins = [[path for path, _ in part] for part in pack(whole, max(1, min(len(files), slots)))]
    rdd = sc.parallelize(bins, len(bins))
    keyed = rdd.flatMap(lambda paths: [pair for path in paths for pair in read_groups(path, fmt, options, reproduce)])
    bad = keyed.filter(lambda pair: pair[0] is None).values()
    checked = (
        keyed.filter(lambda pair: pair[0] is not None)
        .reduceByKey(lambda left, right: left + right, numPartitions=slots)
        .mapPartitionsWithIndex(lambda index, pairs: _check_grouped_part(list(pairs), options, out, f"g{index:05d}"))
    )
    with _Progress(sc, len(bins) + slots, progress):
        rows = checked.collect()
        failed: list[VerdictRow] = bad.collect()  # bad-input rows only: small
    if out is not None and failed:
        from runners.verdicts import write_part

        failed = write_part(Path(out), "unread", failed)
    return failed + rows


def _check_grouped_part(
    pairs: Sequence[tuple[str, Any]], options: VerifyOptions, out: str | None, part: str
) -> list[VerdictRow]:
    """Stage 2 of ``--group-by-history`` on one Spark partition: check each grouped history, and
    with ``out`` write the partition's verdicts there."""
    rows = [row for history, parts in pairs for row in rendered(check_grouped(history, parts, options))]
    if out is None:
        return rows
    from runners.verdicts import write_part

    return write_part(Path(out), part, rows)


def work_units(files: Sequence[str], fmt: str, slots: int) -> list[tuple[Unit, float]]:
    """The work items with their estimated cost: whole files, except that with fewer files than
    task slots a large Parquet file is split by history into about its share of the slots (each
    task then reads only its histories' rows, filtered in Arrow), so a few big files still keep
    every core busy."""
    from history_io.files import parquet_history_names
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


def pack(units: Sequence[tuple[Unit, float]], count: int) -> list[list[Unit]]:
    """Greedy bin packing by estimated cost (largest first into the lightest bin)."""
    bins: list[list[Unit]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for unit, cost in sorted(units, key=lambda pair: -pair[1]):
        lightest = loads.index(min(loads))
        bins[lightest].append(unit)
        loads[lightest] += cost
    return [b for b in bins if b]


# Operations below which a verification runs faster in one process than on Spark on this project's
# 2-core machine: starting the session (a JVM and Python workers) costs more than the second core
# saves.  Measured by benchmarks/bulk_bench.py ("break-even"); see docs/cluster.md.
BREAK_EVEN_OPS = 300_000


def estimate_operations(files: Sequence[str], fmt: str, enough: int) -> int:
    """How many operations the files hold, counted from what is cheap to read on the driver: a
    Parquet file's row count from its footer, a text file's lines (Jepsen logs hold one event per
    line, two per operation).  Counting stops once ``enough`` is passed."""
    from history_io.inputs import open_input  # a regular file only: a FIFO would block, /dev/zero never end

    total = 0
    for path in files:
        try:
            with open_input(path) as handle:
                if fmt == "parquet":
                    import pyarrow.parquet as pq

                    total += pq.ParquetFile(handle).metadata.num_rows
                else:
                    lines = 0
                    for chunk in iter(lambda: handle.read(1 << 20), b""):
                        lines += chunk.count(b"\n")
                    total += lines // 2 if fmt == "jepsen" else lines
        except Exception:  # unreadable: the check itself reports it; count it as nothing here
            continue
        if total > enough:
            break
    return total


def use_spark(
    files: Sequence[str], fmt: str, mode: str, master: str | None, cores: int, threshold: int = BREAK_EVEN_OPS
) -> tuple[bool, str]:
    """Whether to check on Spark, and why.  ``mode`` ``local`` or ``spark`` decides.  ``auto``
    checks in this process when the input holds fewer than ``threshold`` operations
    (:data:`BREAK_EVEN_OPS`), or when no master is named and there is one core; on Spark otherwise
    (at ``master``, or ``local[cores]``)."""
    if mode == "local":
        return False, "--local"
    if mode == "spark":
        return True, "--spark"
    ops = estimate_operations(files, fmt, threshold)
    if ops < threshold:
        return False, f"{ops:,} operations, under the break-even of {threshold:,} for Spark; --spark forces it"
    if master is None and cores < 2:
        return False, "one core and no --master"
    return True, f"at least {threshold:,} operations, " + (f"--master {master}" if master else f"{cores} cores")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
