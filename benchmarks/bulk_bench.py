"""Bulk checking: Spark local[2] against the single-process checker, and how check time grows.

    .venv/bin/python benchmarks/bulk_bench.py [--histories 240] [--ops 300] [--quick]

Prints, in one run:

1. operations checked per second by the Spark job on ``local[2]`` and by the single-process checker
   on the same Parquet histories (the session start is reported apart; the job is run once to warm
   the Python workers, then timed), and their ratio (target >= 1.6x on 2 cores);
2. single-process check time against history length (fixed clients) and against the number of
   concurrent clients (fixed length), on simulated cas-register histories (median of a few seeds);
3. the time to check the 103 Jepsen etcd histories, with and without counterexample shrinking;
4. the ratio of (1) on simulated engine histories (what the main job checks): per-object
   linearizability against the reference machines plus the transactional checks.

A PNG plot of (2) is written to docs/img/bulk-scaling.png (matplotlib, a dev dependency); without it the
tables are the output.  Absolute times depend on the machine's load; read the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from invariants.history import history_files, write_parquet  # noqa: E402
from invariants.linearizability import check_history  # noqa: E402
from invariants.models import CasRegister, random_register_history  # noqa: E402
from invariants.verify import VerifyOptions  # noqa: E402
from txnmodel.file_checks import check_files_local  # noqa: E402
from txnmodel.spark_runner import check_files_spark, spark_session  # noqa: E402

JEPSEN = ROOT.parent / "shared" / "data" / "porcupine" / "jepsen-etcd"


def _write_corpus(folder: Path, histories: int, ops: int, per_file: int) -> tuple[list[str], int]:
    total = 0
    for start in range(0, histories, per_file):
        batch = {}
        for seed in range(start, min(start + per_file, histories)):
            history = random_register_history(seed, ops=ops, clients=12, crash=0.05)
            batch[history[0].history] = history
            total += len(history)
        write_parquet(folder / f"part-{start // per_file:04d}.parquet", batch)
    return [str(p) for p in history_files(folder, "parquet")], total


def spark_vs_local(histories: int, ops: int, engine: int = 0) -> None:
    options = VerifyOptions(counterexamples=False)
    with tempfile.TemporaryDirectory() as tmp:
        files, total = _write_corpus(Path(tmp), histories, ops, per_file=max(1, histories // 24))
        started, cpu = time.perf_counter(), time.process_time()
        local_rows = check_files_local(files, "parquet", options)
        local, local_cpu = time.perf_counter() - started, time.process_time() - cpu

        started = time.perf_counter()
        spark = spark_session("local[2]")
        session = time.perf_counter() - started
        on_spark, spark_rows = _best_spark_run(spark, files, options)
        cpu_wall, task_cpu = _spark_cpu(spark, files, options)
        cpu_used = sum(task_cpu)
        makespan = _makespan(task_cpu, spark.sparkContext.defaultParallelism)
        assert sorted((r.history, r.verdict) for r in spark_rows) == sorted((r.history, r.verdict) for r in local_rows)
        assert {r.verdict for r in local_rows} == {"ok"}

        print(
            f"== Spark local[2] vs single process: {histories} cas-register histories x {ops} ops "
            f"(12 clients, 5% crashed ops), {len(files)} Parquet files"
        )
        print(f"{'runner':<22} {'seconds':>9} {'ops/s':>10}")
        print(f"{'single process':<22} {local:>9.2f} {total / local:>10.0f}")
        print(
            f"{'spark local[2]':<22} {on_spark:>9.2f} {total / on_spark:>10.0f}   (session start {session:.1f}s, "
            f"not included)"
        )
        print(f"ratio spark/single: {local / on_spark:.2f}x (target >= 1.6x)")
        print(
            f"single process: {local_cpu:.2f} CPU s in {local:.2f} s wall = {local_cpu / local:.2f} cores; "
            f"spark tasks: {cpu_used:.2f} CPU s in {cpu_wall:.2f} s wall = {cpu_used / cpu_wall:.2f} cores "
            f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
        )
        print(
            f"ratio of CPU-normalized throughput (ops per CPU second, spark/single): "
            f"{(total / cpu_used) / (total / local_cpu):.2f}x"
        )
        print(
            f"projection for idle cores (a model, not a measurement): the {len(task_cpu)} tasks' CPU times "
            f"scheduled on {spark.sparkContext.defaultParallelism} slots finish in {makespan:.2f} CPU s, "
            f"so spark/single = {local_cpu / makespan:.2f}x before Spark's fixed job cost"
        )
        print(
            "(processes of one session share one scheduler autogroup: on a busy machine more worker "
            "processes do not get this job more CPU)\n"
        )

        started = time.perf_counter()
        check_files_spark(
            [str(p) for p in sorted(JEPSEN.glob("*.log"))],
            "jepsen",
            VerifyOptions(model="cas-register", counterexamples=False),
            spark=spark,
            progress=False,
        )
        jepsen_spark = time.perf_counter() - started
        engine_histories(spark, engine)
        spark.stop()
    jepsen(jepsen_spark)


def engine_histories(spark: object, per_workload: int) -> None:
    """The main job's kind of data: simulated engine histories (faults on, every workload, the
    batch / Key_Shared / bucket-tracker variants), checked per object against the reference machines
    and transactionally, in one process and on Spark with warm workers."""
    if per_workload <= 0:
        return
    from txnmodel.commands.simulate import simulate_main

    options = VerifyOptions(counterexamples=False)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        code = simulate_main(
            [
                "--seed",
                "1",
                "--workload",
                "all",
                "--histories",
                str(per_workload),
                "--ops",
                "60",
                "--ledger",
                "memory",
                "--out",
                tmp,
                "--faults",
                "on",
                "--batch-messages",
                "mixed",
                "--key-shared",
                "mixed",
                "--delayed-tracker",
                "mixed",
                "--quiet",
            ]
        )
        assert code == 0, code
        simulated = time.perf_counter() - started
        files = [str(p) for p in history_files(Path(tmp), "parquet")]
        started = time.perf_counter()
        local_rows = check_files_local(files, "parquet", options)
        local = time.perf_counter() - started
        on_spark, spark_rows = _best_spark_run(spark, files, options)
        assert sorted((r.history, r.checker, r.verdict) for r in spark_rows) == sorted(
            (r.history, r.checker, r.verdict) for r in local_rows
        )
        assert {r.verdict for r in local_rows} == {"ok"}, {r.verdict for r in local_rows}
        total = sum(r.ops for r in local_rows if r.checker == "linearizability")
        print(
            f"== engine histories: {3 * per_workload} simulated runs ({simulated:.1f}s to simulate), "
            f"{len(files)} Parquet files, {total} operations, per-object linearizability + transactional"
        )
        print(f"{'single process':<22} {local:>9.2f} s {total / local:>10.0f} ops/s")
        print(f"{'spark local[2]':<22} {on_spark:>9.2f} s {total / on_spark:>10.0f} ops/s")
        print(f"ratio spark/single on engine histories: {local / on_spark:.2f}x\n")


def _best_spark_run(spark: object, files: list[str], options: VerifyOptions) -> tuple[float, list[Any]]:
    """The Spark job once to warm the Python workers, then the best of two timed runs."""
    check_files_spark(files, "parquet", options, spark=spark, progress=False)
    best, rows = float("inf"), []
    for _ in range(2):
        started = time.perf_counter()
        rows = check_files_spark(files, "parquet", options, spark=spark, progress=False)
        best = min(best, time.perf_counter() - started)
    return best, rows


def _makespan(costs: list[float], slots: int) -> float:
    """Longest-processing-time-first list scheduling of the task costs on ``slots`` slots."""
    loads = [0.0] * slots
    for cost in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads)


def _spark_cpu(spark: object, files: list[str], options: VerifyOptions) -> tuple[float, list[float]]:
    """The same job instrumented: wall time and the CPU seconds its Python workers actually got."""
    from txnmodel.file_checks import check_file
    from txnmodel.spark_runner import pack, work_units

    def task(units: list[tuple[str, tuple[str, ...] | None]]) -> list[float]:
        cpu = time.process_time()
        for path, names in units:
            check_file(path, "parquet", options, names)
        return [time.process_time() - cpu]

    sc = spark.sparkContext  # type: ignore[attr-defined]
    slots = 3 * sc.defaultParallelism
    units = work_units(files, "parquet", slots)
    bins = pack(units, max(1, min(len(units), slots)))
    started = time.perf_counter()
    used = sc.parallelize(bins, len(bins)).flatMap(task).collect()
    return time.perf_counter() - started, used


def jepsen(on_spark: float) -> None:
    logs = [str(p) for p in sorted(JEPSEN.glob("*.log"))]
    if not logs:
        print(f"== Jepsen etcd: no data at {JEPSEN}")
        return
    times = {}
    for shrink in (False, True):
        started = time.perf_counter()
        rows = check_files_local(logs, "jepsen", VerifyOptions(model="cas-register", counterexamples=shrink))
        times[shrink] = time.perf_counter() - started
    verdicts = [r.verdict for r in rows]
    ops = sum(r.ops for r in rows)
    print(
        f"== Jepsen etcd: {len(logs)} logs, {ops} operations, {verdicts.count('ok')} ok, "
        f"{verdicts.count('illegal')} illegal, {verdicts.count('unknown')} unknown"
    )
    print(f"single process, verdicts only:        {times[False]:.2f}s")
    print(f"single process, with counterexamples: {times[True]:.2f}s")
    print(f"spark local[2], verdicts only:        {on_spark:.2f}s\n")


def _median_check(ops: int, clients: int, seeds: int = 3) -> tuple[float, int]:
    seconds, steps = [], []
    for seed in range(seeds):
        history = random_register_history(1000 + seed, ops=ops, clients=clients, crash=0.02)
        started = time.perf_counter()
        result = check_history(CasRegister(), history)
        seconds.append(time.perf_counter() - started)
        steps.append(result.steps)
    return statistics.median(seconds), int(statistics.median(steps))


def scaling(quick: bool) -> dict[str, list[tuple[int, float]]]:
    lengths = [50, 100, 200, 400] if quick else [50, 100, 200, 400, 800, 1600]
    clients = [1, 2, 4, 8] if quick else [1, 2, 4, 8, 12, 16]
    curves: dict[str, list[tuple[int, float]]] = {"length": [], "clients": []}
    print("== single-process check time vs history length (4 clients, one register, median of 3)")
    print(f"{'ops':>6} {'ms':>10} {'steps':>10} {'us/op':>8}")
    for n in lengths:
        seconds, steps = _median_check(n, 4)
        curves["length"].append((n, seconds))
        print(f"{n:>6} {seconds * 1000:>10.1f} {steps:>10} {seconds / n * 1e6:>8.1f}")
    print("\n== single-process check time vs concurrent clients (200 ops, one register, median of 3)")
    print(f"{'clients':>7} {'ms':>10} {'steps':>10}")
    for c in clients:
        seconds, steps = _median_check(200, c)
        curves["clients"].append((c, seconds))
        print(f"{c:>7} {seconds * 1000:>10.1f} {steps:>10}")
    print()
    return curves


def plot(curves: dict[str, list[tuple[int, float]]]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib not installed: no plot, the tables above are the result)")
        return
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for axis, key, label in ((left, "length", "operations"), (right, "clients", "concurrent clients")):
        xs, ys = zip(*curves[key], strict=True)
        axis.plot(xs, [y * 1000 for y in ys], marker="o")
        axis.set_xlabel(label)
        axis.set_ylabel("check time (ms)")
        axis.set_yscale("log")  # concurrency grows the search exponentially; length roughly linearly
        axis.grid(True, which="both", alpha=0.3)
    left.set_title("one register, 4 clients")
    right.set_title("one register, 200 operations")
    figure.tight_layout()
    target = Path(__file__).resolve().parent.parent / "docs" / "img" / "bulk-scaling.png"
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target)
    print(f"plot: {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=240)
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="smaller corpus and curves")
    parser.add_argument(
        "--engine",
        type=int,
        default=None,
        help="simulated engine histories per workload for the engine-history ratio (0: skip; "
        "default 10 with --quick, else 30)",
    )
    args = parser.parse_args()
    histories = 60 if args.quick else args.histories
    engine = args.engine if args.engine is not None else (10 if args.quick else 30)
    spark_vs_local(histories, args.ops, engine)
    plot(scaling(args.quick))


if __name__ == "__main__":
    from txnmodel.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("bulk_bench", unit=""):
        code = main()
    raise SystemExit(code)
