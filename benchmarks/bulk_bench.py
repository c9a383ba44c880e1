"""Bulk checking: one process against Spark local[1] and local[2], where Spark pays, and how check
time grows.

    .venv/bin/python benchmarks/bulk_bench.py [--histories 240] [--ops 300] [--engine 20] [--quick]

Prints, in one run (ratios within the run; absolute times depend on the machine's load):

1. cas-register histories (12 clients, 5% crashed ops) and the main job's kind of histories
   (simulated engine runs of every workload with faults and the batch / Key_Shared /
   bucket-tracker variants: per-object linearizability against the reference machines plus the
   transactional checks), each checked by one process, by Spark ``local[1]`` and by Spark
   ``local[2]`` (each writing its verdicts as ``txnmodel verify`` does; the Spark job run once to
   warm its Python workers, then the best of two); the ratios local[2]/one process (goal >= 1.6x
   on 2 cores) and local[2]/local[1], and the CPU each runner got;
2. the transactional checks alone on the engine histories: client operations per CPU second;
3. where Spark pays: the session's start, a job's fixed cost and the per-operation costs give the
   break-even input size for ``verify`` (compare ``runners.spark.BREAK_EVEN_OPS``);
4. the 103 Jepsen etcd logs, with and without counterexamples, in one process;
5. one-process check time against history length and against concurrent clients, drawn to
   ``out/bench/bulk-scaling.png`` (matplotlib, a dev dependency; copy it into docs by hand).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from history_io.files import history_files, write_parquet  # noqa: E402
from invariants.linearizability import check_history  # noqa: E402
from invariants.models import CasRegister, random_register_history  # noqa: E402
from invariants.verify import VerifyOptions  # noqa: E402
from runners.file_checks import check_files_local, check_units  # noqa: E402
from runners.spark import (  # noqa: E402
    BREAK_EVEN_OPS,
    check_files_spark,
    pack,
    spark_session,
    stop_session,
    work_units,
)

JEPSEN = Path(os.environ.get("TXNMODEL_JEPSEN_DATA", ROOT.parent / "shared" / "data" / "porcupine" / "jepsen-etcd"))
OUT = ROOT / "out" / "bench"


def _load() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"


def register_corpus(folder: Path, histories: int, ops: int) -> tuple[list[str], int]:
    per_file = max(1, histories // 24)
    total = 0
    for start in range(0, histories, per_file):
        batch = {}
        for seed in range(start, min(start + per_file, histories)):
            history = random_register_history(seed, ops=ops, clients=12, crash=0.05)
            batch[history[0].history] = history
            total += len(history)
        write_parquet(folder / f"part-{start // per_file:04d}.parquet", batch)
    return [str(p) for p in history_files(folder, "parquet")], total


def engine_corpus(folder: Path, per_workload: int) -> tuple[list[str], float]:
    """The main job's histories (its flags, on memory ledgers), written by ``txnmodel simulate``."""
    from txnmodel.cli import main

    started = time.perf_counter()
    code = main(
        [
            "simulate",
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
            str(folder),
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
    return [str(p) for p in history_files(folder, "parquet")], time.perf_counter() - started


def _timed(run: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process, result)."""
    started, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - started, time.process_time() - cpu, result


def _spark_cpu(spark: Any, files: list[str], options: VerifyOptions) -> tuple[float, list[float]]:
    """The job instrumented: its wall time and the CPU seconds each task's Python worker got."""

    def task(units: list[Any]) -> list[float]:
        cpu = time.process_time()
        check_units(units, "parquet", options)
        return [time.process_time() - cpu]

    sc = spark.sparkContext
    slots = 3 * sc.defaultParallelism
    units = work_units(files, "parquet", slots)
    bins = pack(units, max(1, min(len(units), slots)))
    started = time.perf_counter()
    used = sc.parallelize(bins, len(bins)).flatMap(task).collect()
    return time.perf_counter() - started, used


def _makespan(costs: list[float], slots: int) -> float:
    """Longest-processing-time-first list scheduling of the task costs on ``slots`` slots."""
    loads = [0.0] * slots
    for cost in sorted(costs, reverse=True):
        loads[loads.index(min(loads))] += cost
    return max(loads)


COLD: dict[str, float] = {}  # the first session's start: a JVM and its Python workers from nothing


def compare_runners(name: str, files: list[str], total: int, scratch: Path) -> dict[str, float]:
    """One process, Spark local[1], Spark local[2] on the same files; every runner writes its
    verdicts as verify does."""
    options = VerifyOptions(counterexamples=False)
    figures: dict[str, float] = {}
    wall, cpu, rows = _timed(lambda: check_files_local(files, "parquet", options, out=str(scratch / "one")))
    verdicts = sorted((r.history, r.checker, r.verdict) for r in rows)
    figures.update(one=wall, one_cpu=cpu)
    for master in ("local[1]", "local[2]"):
        stop_session()
        started = time.perf_counter()
        spark = spark_session(master)
        figures[f"{master} start"] = time.perf_counter() - started
        COLD.setdefault("start", figures[f"{master} start"])

        def job(spark: Any = spark, master: str = master) -> list[Any]:
            return check_files_spark(files, "parquet", options, spark=spark, progress=False, out=str(scratch / master))

        first, _, _ = _timed(job)
        figures[f"{master} first job"] = first
        best = float("inf")
        for _ in range(2):
            wall, _, got = _timed(job)
            best = min(best, wall)
            assert sorted((r.history, r.checker, r.verdict) for r in got) == verdicts, master
        figures[master] = best
        figures[f"{master} task cpu wall"], costs = _spark_cpu(spark, files, options)
        figures[f"{master} task cpu"] = sum(costs)
        figures[f"{master} makespan"] = _makespan(costs, int(master[6:-1]))
    print(f"== {name}: {total:,} operations in {len(files)} Parquet files; verdicts {_counts(verdicts)}")
    print(f"{'runner':<16} {'seconds':>9} {'ops/s':>10}  notes")
    print(f"{'one process':<16} {figures['one']:>9.2f} {total / figures['one']:>10.0f}  {figures['one_cpu']:.2f} CPU s")
    for master in ("local[1]", "local[2]"):
        print(
            f"{'spark ' + master:<16} {figures[master]:>9.2f} {total / figures[master]:>10.0f}  session start "
            f"{figures[master + ' start']:.1f} s, first job {figures[master + ' first job']:.1f} s (not counted); "
            f"tasks got {figures[master + ' task cpu']:.2f} CPU s in {figures[master + ' task cpu wall']:.2f} s"
        )
    print(
        f"ratio local[2]/one process: {figures['one'] / figures['local[2]']:.2f}x (goal >= 1.6x); "
        f"local[2]/local[1]: {figures['local[1]'] / figures['local[2]']:.2f}x; {_load()}"
    )
    print(
        f"CPU the runners got: one process {figures['one_cpu'] / figures['one']:.2f} cores, local[2] tasks "
        f"{figures['local[2] task cpu'] / figures['local[2] task cpu wall']:.2f} cores (on a busy machine the "
        f"processes of one session share one scheduler autogroup: a second worker gets it no more CPU)"
    )
    print(
        f"projection for idle cores (a model, not a measurement): the tasks' CPU times scheduled on 2 slots "
        f"take {figures['local[2] makespan']:.2f} s against {figures['one_cpu']:.2f} CPU s in one process: "
        f"{figures['one_cpu'] / figures['local[2] makespan']:.2f}x before Spark's fixed cost per job\n"
    )
    figures["ops"] = total
    return figures


def _counts(verdicts: list[tuple[str, str, str]]) -> str:
    counts: dict[str, int] = {}
    for _, _, verdict in verdicts:
        counts[verdict] = counts.get(verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))


def transactional_rate(files: list[str]) -> None:
    from history_io.files import read_file
    from invariants.transactional import check_transactional
    from spec.history import is_machine_operation

    histories = {}
    for path in files:
        histories.update(read_file(path, "parquet"))
    clients = [[op for op in ops if not is_machine_operation(op)] for ops in histories.values()]
    count = sum(len(ops) for ops in clients)
    best = float("inf")
    for _ in range(3):
        cpu = time.process_time()
        for ops in clients:
            check_transactional(ops)
        best = min(best, time.process_time() - cpu)
    print(
        f"== transactional checks alone on the engine histories: {len(clients)} histories, {count:,} client "
        f"operations in {best:.3f} CPU s = {count / best:,.0f} operations per second per core "
        f"(goal >= 100,000; {_load()})\n"
    )


def break_even(engine: dict[str, float]) -> None:
    """Spark pays once the work it saves exceeds what it costs to start: with per-operation costs
    c1 (one process) and c2 (local[2]) and a fixed cost F (a session's cold start plus a first
    job's extra), the break-even input is F / (c1 - c2) operations."""
    ops = engine["ops"]
    fixed = COLD.get("start", engine["local[2] start"]) + max(0.0, engine["local[2] first job"] - engine["local[2]"])
    print("== where Spark pays (engine histories, the main job's kind)")
    print(
        f"fixed cost {fixed:.1f} s: a session's cold start {COLD.get('start', 0.0):.1f} s and the first job's "
        f"extra {max(0.0, engine['local[2] first job'] - engine['local[2]']):.1f} s (Python workers, imports)"
    )
    measured = (engine["one"] / ops, engine["local[2]"] / ops)
    idle = (engine["one_cpu"] / ops, engine["local[2] makespan"] / ops)
    for label, (c1, c2) in (("measured (this load)", measured), ("projected for idle cores", idle)):
        if c2 >= c1:
            print(f"{label}: local[2] is no faster per operation ({c1 * 1e6:.1f} us against {c2 * 1e6:.1f} us)")
        else:
            print(
                f"{label}: {c1 * 1e6:.1f} us per operation in one process, {c2 * 1e6:.1f} us on local[2]: "
                f"break-even at {fixed / (c1 - c2):,.0f} operations"
            )
    print(f"(runners.spark.BREAK_EVEN_OPS = {BREAK_EVEN_OPS:,}); {_load()}\n")


def jepsen() -> None:
    logs = [str(p) for p in sorted(JEPSEN.glob("*.log"))]
    if not logs:
        print(f"== Jepsen etcd: no data at {JEPSEN}\n")
        return
    times = {}
    for shrink in (False, True):
        options = VerifyOptions(model="cas-register", counterexamples=shrink)
        started = time.perf_counter()
        rows = check_files_local(logs, "jepsen", options)
        times[shrink] = time.perf_counter() - started
    verdicts = [r.verdict for r in rows]
    print(
        f"== Jepsen etcd: {len(logs)} logs, {sum(r.ops for r in rows)} operations, {verdicts.count('ok')} ok, "
        f"{verdicts.count('illegal')} illegal, {verdicts.count('unknown')} unknown"
    )
    print(f"one process, verdicts only:        {times[False]:.2f} s (files read and checked)")
    print(f"one process, with counterexamples: {times[True]:.2f} s; {_load()}\n")


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
    print("== one-process check time vs history length (4 clients, one register, median of 3)")
    print(f"{'ops':>6} {'ms':>10} {'steps':>10} {'us/op':>8}")
    for n in lengths:
        seconds, steps = _median_check(n, 4)
        curves["length"].append((n, seconds))
        print(f"{n:>6} {seconds * 1000:>10.1f} {steps:>10} {seconds / n * 1e6:>8.1f}")
    print("\n== one-process check time vs concurrent clients (200 ops, one register, median of 3)")
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
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / "bulk-scaling.png"
    figure.savefig(target)
    print(f"plot: {target} (copy it to docs/img/ by hand to publish it)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=240, help="cas-register histories (default 240)")
    parser.add_argument("--ops", type=int, default=300, help="operations per cas-register history (default 300)")
    parser.add_argument(
        "--engine", type=int, default=None, help="engine runs per workload (default 20; 6 with --quick; 0 skips)"
    )
    parser.add_argument("--quick", action="store_true", help="smaller corpora and curves")
    args = parser.parse_args()
    histories = 60 if args.quick else args.histories
    per_workload = args.engine if args.engine is not None else (6 if args.quick else 20)
    print(f"{_load()} at the start\n")
    with tempfile.TemporaryDirectory(prefix="txnmodel-bulk-bench-") as tmp:
        scratch = Path(tmp)
        (scratch / "registers").mkdir()
        files, total = register_corpus(scratch / "registers", histories, args.ops)
        compare_runners(
            f"{histories} cas-register histories x {args.ops} ops (12 clients, 5% crashed)", files, total, scratch / "r"
        )
        if per_workload > 0:
            (scratch / "engine").mkdir()
            files, simulated = engine_corpus(scratch / "engine", per_workload)
            from history_io.files import read_file

            ops = sum(len(h) for f in files for h in read_file(f, "parquet").values())
            engine = compare_runners(
                f"engine histories: {3 * per_workload} simulated runs ({simulated:.0f} s to simulate)",
                files,
                ops,
                scratch / "e",
            )
            transactional_rate(files)
            break_even(engine)
        stop_session()
    jepsen()
    plot(scaling(args.quick))
    print(f"{_load()} at the end")


if __name__ == "__main__":
    from views.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("bulk_bench", unit=""):
        main()
