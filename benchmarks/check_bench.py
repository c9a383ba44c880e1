"""Model checker benchmark: distinct states per second per core on the default models, states and
transitions per model, the effect of each reduction, and Spark local[2] against local[1] against the
single process on a model of at least 10^6 states.  Ratios within one run; the load average is printed.

    .venv/bin/python benchmarks/check_bench.py [--big-model end-path --big-bound partitions=2 ...]
        [--no-spark] [--json]

Writes out/bench/check_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proofs.check.explore import Options, Result, explore
from proofs.check.model import Model
from proofs.check.models import DEFAULT_MODELS, build

# The reductions' effect is measured where they have something to merge: two clients on two partitions.
SYMMETRIC = {"clients": 2, "partitions": 2, "spread": 1, "readers": 0, "loss": 0, "duplicate": 0}
BIG_MODEL = "end-path"
BIG_BOUNDS = {"partitions": 2, "loss": 1, "duplicate": 1}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _local(name: str, bounds: dict[str, int], options: Options) -> dict[str, Any]:
    model = Model(build(name, bounds))
    cpu0, wall0 = _cpu(), time.perf_counter()
    result = explore(model, options)
    cpu, wall = _cpu() - cpu0, time.perf_counter() - wall0
    return _row(name, bounds, result, wall, cpu, cores=1)


def _row(name: str, bounds: dict[str, int], result: Result, wall: float, cpu: float, cores: int) -> dict[str, Any]:
    return {
        "model": name,
        "bounds": bounds,
        "verdict": result.verdict,
        "states": result.states,
        "transitions": result.transitions,
        "depth": result.depth,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "states_per_s": round(result.states / wall) if wall else None,
        "states_per_cpu_s": round(result.states / cpu) if cpu else None,
        "states_per_s_per_core": round(result.states / wall / cores) if wall else None,
        "reductions": result.reductions,
        "liveness": result.liveness_checked,
    }


def _spark(name: str, bounds: dict[str, int], options: Options, master: str, partitions: int) -> dict[str, Any]:
    from proofs.check.spark import explore_spark
    from runners.spark import spark_session, stop_session

    stop_session()
    spark_session(master, "check_bench")  # started outside the timing, as a running cluster would be
    wall0 = time.perf_counter()
    result, _model = explore_spark(build(name, bounds), options, master, partitions=partitions)
    wall = time.perf_counter() - wall0
    cores = int(master[len("local[") : -1]) if master.startswith("local[") else 1
    row = _row(name, bounds, result, wall, 0.0, cores)
    row["master"] = master
    row["partitions"] = partitions
    return row


def _levels(label: str) -> Any:
    """Progress on stderr: a line per BFS level (a long comparison shows where it is)."""
    started = time.perf_counter()

    def show(depth: int, states: int, frontier: int) -> None:
        print(
            f"  {label}: depth {depth}, {states:,} states, level {frontier:,}, "
            f"{time.perf_counter() - started:.0f} s, load {os.getloadavg()[0]:.1f}",
            file=sys.stderr,
            flush=True,
        )

    return show


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-model", default=BIG_MODEL)
    parser.add_argument("--big-bound", action="append", metavar="K=V", help="bounds of the big model")
    parser.add_argument(
        "--big-max-states",
        type=int,
        default=1_000_000,
        help="explore the big model's first levels up to this many states (the same levels in every mode)",
    )
    parser.add_argument("--only-big", action="store_true", help="only the big model's comparison")
    parser.add_argument("--no-spark", action="store_true", help="leave out the Spark comparison")
    parser.add_argument(
        "--partitions", type=int, default=4, help="Spark partitions of the big model, the same for local[1] and [2]"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    big_bounds = dict(BIG_BOUNDS)
    for item in args.big_bound or ():
        key, _, value = item.partition("=")
        big_bounds[key] = int(value)
    from views.progress import Reporter

    report: dict[str, Any] = {"load_before": os.getloadavg(), "cpus": os.cpu_count()}
    out = Path("out") / "bench"
    out.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every stage: a long run's figures so far are on disk
        (out / "check_bench.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")

    reductions: dict[str, Any] = {}
    report["default_models"] = []
    with Reporter().phase("check_bench", unit=""):
        if not args.only_big:
            report["default_models"] = [_local(name, {}, Options()) for name in DEFAULT_MODELS]
            save()
            for symmetry in (False, True):
                for por in (False, True):
                    row = _local("produce", SYMMETRIC, Options(liveness=False, symmetry=symmetry, por=por))
                    reductions[f"symmetry={'on' if symmetry else 'off'} por={'on' if por else 'off'}"] = row
        report["reductions"] = reductions
        save()

        def safety(label: str) -> Options:
            return Options(
                liveness=False, symmetry=False, por=False, max_states=args.big_max_states, progress=_levels(label)
            )

        big = report["big"] = {"single process": _local(args.big_model, big_bounds, safety("single process"))}
        save()
        if not args.no_spark:
            for master in ("local[1]", "local[2]"):
                big[master] = _spark(args.big_model, big_bounds, safety(master), master, args.partitions)
                big[master]["load"] = os.getloadavg()
                save()
            same = {(row["states"], row["transitions"], row["depth"], row["verdict"]) for row in big.values()}
            if len(same) != 1:
                print(f"the big model's runs disagree: {big}", file=sys.stderr)
                return 1
    report["load_after"] = os.getloadavg()
    save()
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    print(f"load average before {report['load_before']}, after {report['load_after']}, {report['cpus']} CPUs")
    print("\ndefault models (safety and liveness, no reductions):")
    for row in report["default_models"]:
        print(
            f"  {row['model']:<12} {row['verdict']:<9} {row['states']:>9,} states "
            f"{row['transitions']:>10,} transitions "
            f"{row['wall_s']:>7.2f} s  {row['states_per_cpu_s']:>8,} states per CPU second"
        )
    total_states = sum(r["states"] for r in report["default_models"])
    total_cpu = sum(r["cpu_s"] for r in report["default_models"])
    if total_cpu:
        print(f"  all: {total_states:,} states, {total_states / total_cpu:,.0f} distinct states per CPU second")
    print(f"\nreductions (produce, {SYMMETRIC}, safety only):")
    for key, row in reductions.items():
        print(f"  {key:<26} {row['verdict']:<9} {row['states']:>9,} states {row['transitions']:>10,} transitions")
    print(f"\n{args.big_model} {big_bounds} (safety, no reductions, the levels up to {args.big_max_states:,} states):")
    base = big["single process"]["wall_s"]
    for key, row in big.items():
        print(
            f"  {key:<15} {row['verdict']:<9} {row['states']:>10,} states {row['wall_s']:>8.1f} s "
            f"({base / row['wall_s']:.2f}x the single process)"
        )
    if "local[1]" in big and "local[2]" in big:
        print(f"  local[2] / local[1]: {big['local[1]']['wall_s'] / big['local[2]']['wall_s']:.2f}x")
    print(f"\nwritten: {out / 'check_bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
