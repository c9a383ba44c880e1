"""Main job benchmark: ``txnmodel run`` part by part, wall and CPU seconds, operations checked.

    .venv/bin/python benchmarks/main_job_bench.py [--histories 70] [--ops 60] [--jobs 2]
                                                  [--compare-verify] [--json]

Runs the main job (``txnmodel run``, its defaults unless told) in a child process with its output
under ``out/main_job_bench/``, and reports from its summary table each part's wall seconds (the
parts overlap: proofs, simulation and verification run at once on the worker processes) and CPU
seconds (in the workers, added up), the whole job's wall and CPU seconds (the child and every
process it waited for, from ``getrusage``), the operations verified, and the CPU seconds per
100,000 of them.  On a shared machine the wall time says how busy the machine was; the CPU seconds
are what the job costs: on an idle machine with ``--jobs`` cores the wall time is about the CPU
seconds over the cores, plus what does not overlap.

``--compare-verify`` then verifies the histories the run wrote three ways, side by side: in one
process (:func:`runners.file_checks.check_files_local`), in ``--jobs`` worker processes as the
main job does (:class:`runners.main_job.Pipeline`), and on Spark ``local[<jobs>]`` (the session's
start included, as a run pays it): the measured case for the main job's choice of where to verify.

The load average is printed with the figures, which go to ``out/main_job_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "out"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _rows_written(histories: Path) -> int:
    """The operations the run wrote, every one of which a checker reads: the rows of its history
    files (from their footers; the summary counts them per checker, each checker its own kind)."""
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(path).metadata.num_rows for path in sorted(histories.glob("*.parquet")))


def parse_summary(stdout: str) -> tuple[dict[str, dict[str, float | None]], int]:
    """The summary table of ``txnmodel run``: each part's wall and CPU seconds (None where the table
    gives none), and the histories verified."""
    parts: dict[str, dict[str, float | None]] = {}
    summary = stdout.split("== summary", 1)[-1].splitlines()[1:]
    histories = 0
    for line in summary:
        # "<name>  <verdict>  <wall> <cpu>": the seconds are the last 15 characters, either may be
        # blank (a checker's own line has none: its seconds are the verify line's, all checkers at once)
        if not line.strip() or line.startswith(" "):
            continue
        name, part_wall, part_cpu = line.split("  ")[0].strip(), line[-15:-8].strip(), line[-7:].strip()
        parts[name] = {
            "wall": float(part_wall.rstrip("s")) if part_wall else None,
            "cpu": float(part_cpu.rstrip("s")) if part_cpu else None,
        }
        if name == "verify":
            # "verify  <n> histories  <wall> <cpu>"
            verified = re.search(r"(\d+) histories", line)
            histories = int(verified.group(1)) if verified else 0
    return parts, histories


def run_main_job(histories: int | None, ops: int | None, jobs: int, out: Path) -> dict[str, Any]:
    """``txnmodel run`` in a child process: its summary lines, wall and CPU seconds, operations."""
    command = [sys.executable, "-m", "txnmodel", "run", "--out", str(out), "--jobs", str(jobs)]
    if histories is not None:
        command += ["--histories", str(histories)]
    if ops is not None:
        command += ["--ops", str(ops)]
    load_before = os.getloadavg()
    cpu0, t0 = _children_cpu(), time.perf_counter()
    # its progress (stderr) shows as it runs; the summary table (stdout) is read back
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    parts, histories = parse_summary(done.stdout)
    return {
        "command": " ".join(command[1:]),
        "exit_code": done.returncode,
        "wall": wall,
        "cpu": cpu,
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "histories": histories,
        "operations": _rows_written(out / "histories"),
        "parts": parts,
        "summary": done.stdout.split("== summary", 1)[-1].splitlines()[1:],
    }


def compare_verify(histories: Path, jobs: int, scratch: Path) -> dict[str, dict[str, float]]:
    """The same histories verified in one process, in ``jobs`` workers, and on Spark local[jobs]."""
    from invariants.verify import VerifyOptions
    from runners.file_checks import check_files_local
    from runners.main_job import Pipeline, verify_task
    from runners.spark import check_files_spark, pack, spark_session, stop_session, work_units

    files = sorted(str(p) for p in histories.glob("*.parquet"))
    results: dict[str, dict[str, float]] = {}

    def measured(name: str, work: Any) -> None:
        cpu0, own0, t0 = _children_cpu(), time.process_time(), time.perf_counter()
        rows = work()
        results[name] = {
            "wall": time.perf_counter() - t0,
            "cpu_here": time.process_time() - own0,
            "cpu_children": _children_cpu() - cpu0,  # the workers once reaped (Spark's JVM: once stopped)
            "verdicts": len(rows),
        }
        print(f"  verify {name}: {results[name]['wall']:.1f} s wall, {len(rows)} verdicts", file=sys.stderr)

    measured("one process", lambda: check_files_local(files, "parquet", VerifyOptions(), out=str(scratch / "one")))

    def workers() -> list[Any]:
        rows: list[Any] = []
        pipeline = Pipeline(jobs)
        units = work_units(files, "parquet", 6 * jobs)
        for number, chunk in enumerate(pack(units, min(len(units), 6 * jobs))):
            pipeline.submit("verify", verify_task, (chunk, str(scratch / "workers"), f"{number:04d}"), rows.extend)
        try:
            pipeline.run()
        finally:
            pipeline.close()
        return rows

    measured(f"{jobs} workers", workers)

    def spark() -> list[Any]:
        try:
            session = spark_session(f"local[{jobs}]")
            return check_files_spark(files, "parquet", VerifyOptions(), spark=session, out=str(scratch / "spark"))
        finally:
            stop_session()

    measured(f"spark local[{jobs}]", spark)
    return results


def _seconds(value: float | None) -> str:
    """A part's seconds, or a dash where the summary gives none (a checker's own line)."""
    return f"{'-':>8}" if value is None else f"{value:>8.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=None, help="seeds per workload (default: the main job's)")
    parser.add_argument("--ops", type=int, default=None, help="transactions per history (default: the main job's)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--compare-verify", action="store_true", help="then verify the histories three ways")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)

    base = OUT_DIR / "main_job_bench"
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    figures: dict[str, Any] = {"main_job": run_main_job(args.histories, args.ops, args.jobs, base / "run")}
    job = figures["main_job"]
    if args.compare_verify:
        figures["verify_ways"] = compare_verify(base / "run" / "histories", args.jobs, base / "verify")
    figures["load_average_end"] = os.getloadavg()
    (OUT_DIR / "main_job_bench.json").write_text(json.dumps(figures, indent=2) + "\n")
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"{job['command']}: exit {job['exit_code']}")
    print(f"load average before {job['load_before'][0]:.2f}, after {job['load_after'][0]:.2f} (1 min)")
    print(f"{'part':<22} {'wall s':>8} {'cpu s':>8}")
    for name, part in job["parts"].items():
        print(f"{name:<22} {_seconds(part['wall'])} {_seconds(part['cpu'])}")
    print(f"{'whole job':<22} {job['wall']:>8.1f} {job['cpu']:>8.1f}")
    ops = job["operations"]
    per = job["cpu"] / ops * 100_000 if ops else 0.0
    print(f"{job['histories']} histories, {ops:,} operations verified; {per:.1f} CPU s per 100,000 operations")
    print(f"on an idle machine with {args.jobs} cores: about {job['cpu'] / args.jobs:.0f} s if the parts overlap fully")
    for name, way in figures.get("verify_ways", {}).items():
        print(
            f"verify {name:<16} {way['wall']:>7.1f} s wall, {way['cpu_here'] + way['cpu_children']:>7.1f} s CPU "
            f"(this process {way['cpu_here']:.1f})"
        )
    print(f"figures: {OUT_DIR / 'main_job_bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
