"""A big safety run of ``txnmodel check`` in bounded memory: the command runs as a child process under
an address-space limit (``RLIMIT_AS``, 2 GiB by default), and its peak resident set (the children's
``ru_maxrss``) is printed with its states, verdict, wall and CPU time, the peak disk use of its spill
directory (sampled every 10 s) and the load average.

    .venv/bin/python benchmarks/check_memory.py [--limit-gib 2] [--spill 250000]
        [--model end-path --bound partitions=1 --bound loss=3 --bound duplicate=2 --bound aborts=0]
        [--no-reductions]

The default model, explored with its reductions as ``txnmodel check`` does by default, has
between 10^7 and 2*10^7 states (``docs/check/index.md``, Scale); ``--no-reductions`` explores it without symmetry and
partial-order reduction.  ``--spill N`` keeps at most N fingerprints, N frontier states and N pending
successors in memory.  The child's spill files go to a private directory under out/bench (removed after);
its progress lines (one per BFS level) to out/bench/check_memory.progress.log.
Writes out/bench/check_memory.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BIG_MODEL = "end-path"
BIG_BOUNDS = ("partitions=1", "loss=3", "duplicate=2", "aborts=0")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gib", type=float, default=2.0, help="the child's address-space limit")
    parser.add_argument("--spill", type=int, default=250_000)
    parser.add_argument("--model", default=BIG_MODEL)
    parser.add_argument("--bound", action="append", metavar="K=V", help="the model's bounds")
    parser.add_argument(
        "--no-reductions", action="store_true", help="explore without symmetry and partial-order reduction"
    )
    args = parser.parse_args(argv)
    limit = int(args.limit_gib * 1024**3)
    out = Path("out") / "bench"
    out.mkdir(parents=True, exist_ok=True)
    command = [
        str(Path(sys.executable).parent / "txnmodel"),
        "check",
        "--model",
        args.model,
        *(f"--bound={b}" for b in (args.bound or BIG_BOUNDS)),
        "--no-liveness",
        *(["--no-symmetry", "--no-por"] if args.no_reductions else []),
        "--spill",
        str(args.spill),
        "--progress",  # a line per BFS level on stderr
        "--no-progress",
        "--json",
        "--out",
        str(out / "check_memory"),
    ]

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    report: dict[str, Any] = {"command": command, "limit_bytes": limit, "load_before": os.getloadavg()}
    print(" ".join(command), file=sys.stderr, flush=True)
    spill_dir = Path(tempfile.mkdtemp(prefix="check-memory-", dir=out))
    peak_disk = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(10.0):
            peak_disk[0] = max(peak_disk[0], _disk_use(spill_dir))

    watcher = threading.Thread(target=watch, daemon=True)
    started = time.perf_counter()
    watcher.start()
    try:
        with open(out / "check_memory.progress.log", "w", encoding="utf-8") as progress:
            child = subprocess.run(
                command,
                preexec_fn=limited,
                stdout=subprocess.PIPE,
                stderr=progress,
                text=True,
                check=False,
                env={**os.environ, "TMPDIR": str(spill_dir)},
            )
    finally:
        done.set()
        watcher.join()
        shutil.rmtree(spill_dir, ignore_errors=True)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report.update(
        exit=child.returncode,
        wall_s=round(time.perf_counter() - started, 1),
        cpu_s=round(usage.ru_utime + usage.ru_stime, 1),
        peak_rss_mib=round(usage.ru_maxrss / 1024),  # Linux reports KiB
        peak_spill_disk_mib=round(peak_disk[0] / 1024**2),
        load_after=os.getloadavg(),
    )
    try:
        (run,) = json.loads(child.stdout)["models"]
        report.update(verdict=run["verdict"], states=run["states"], transitions=run["transitions"], depth=run["depth"])
    except (ValueError, KeyError):
        report["stdout"] = child.stdout[-2000:]
    (out / "check_memory.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "command"}, indent=1))
    return 0 if child.returncode == 0 else 1


def _disk_use(directory: Path) -> int:
    total = 0
    for path in directory.rglob("*"):
        with contextlib.suppress(OSError):  # a file the child removed meanwhile
            total += path.stat().st_blocks * 512
    return total


if __name__ == "__main__":
    raise SystemExit(main())
