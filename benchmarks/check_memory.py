"""A big safety run of ``txnmodel check`` in bounded memory: the command runs as a child process under
an address-space limit (``RLIMIT_AS``, 2 GiB by default), and its peak resident set (the children's
``ru_maxrss``) is printed with its states, verdict, wall and CPU time and the load average.

    .venv/bin/python benchmarks/check_memory.py [--limit-gib 2] [--spill 250000]
        [--model end-path --bound partitions=2 --bound loss=2 --bound duplicate=1]

The default model has more than 10^7 states (safety, no reductions).  ``--spill N`` keeps at most N
fingerprints, N frontier states and N pending successors in memory (``docs/check/index.md``, Scale).
Writes out/bench/check_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BIG_MODEL = "end-path"
BIG_BOUNDS = ("partitions=2", "loss=2", "duplicate=1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit-gib", type=float, default=2.0, help="the child's address-space limit")
    parser.add_argument("--spill", type=int, default=250_000)
    parser.add_argument("--model", default=BIG_MODEL)
    parser.add_argument("--bound", action="append", metavar="K=V", help="the model's bounds")
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
        "--no-symmetry",
        "--no-por",
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
    started = time.perf_counter()
    child = subprocess.run(command, preexec_fn=limited, stdout=subprocess.PIPE, text=True, check=False)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    report.update(
        exit=child.returncode,
        wall_s=round(time.perf_counter() - started, 1),
        cpu_s=round(usage.ru_utime + usage.ru_stime, 1),
        peak_rss_mib=round(usage.ru_maxrss / 1024),  # Linux reports KiB
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


if __name__ == "__main__":
    raise SystemExit(main())
