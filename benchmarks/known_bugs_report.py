"""Known-bug catalogue report: per mutant, detected yes/no, the detection rate over N seeds and the
number of histories needed for the first detection, by the bulk checker from the histories alone.

    .venv/bin/python benchmarks/known_bugs_report.py [--seeds 20] [--json]
    .venv/bin/python benchmarks/known_bugs_report.py --main-job 20 [--json]

``--main-job N``: instead of each bug's own probe, the main job's workloads (every workload at
seeds 1..N with its variants and fault mixes, 60 transactions), checked by the bulk checker and by
the client-visible oracle; per bug the first history each flags.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.known_bugs.catalogue import MUTANTS, main_job_detection, report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--main-job", type=int, default=0, metavar="N", help="the main job's workloads, seeds 1..N")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.main_job:
        found = []
        for mutant in MUTANTS:
            found.append(main_job_detection(mutant, args.main_job))
            if not args.json:
                r = found[-1]
                bulk = ", ".join(r["found"].get("bulk", [])) or "-"
                oracle = ", ".join(r["found"].get("oracle", [])) or "-"
                print(
                    f"| {r['bug']} | {r['bulk'] or '-'} | {r['oracle'] or '-'} | {r['histories']} | {bulk} | {oracle} "
                    f"| {r['seconds']} |",
                    flush=True,
                )
        if args.json:
            print(json.dumps(found, indent=2))
        detected = sum(r["detected"] for r in found)
        print(
            f"\n{detected}/{len(found)} detected in the main job's workloads (seeds 1..{args.main_job}); "
            f"{time.perf_counter() - started:.1f} s, load average {os.getloadavg()[0]:.1f}"
        )
        return 0
    rows = report(args.seeds)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        "| bug | reference | probe | detected | rate | histories to first detection "
        "| clean without mutant | anomalies |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        first = "-" if r["first"] is None else str(r["first"])
        print(
            f"| {r['bug']} | {r['reference']} | {r['probe']} | {'yes' if r['detected'] else 'no'} | {r['rate']} "
            f"| {first} | {r['clean_without']} | {', '.join(r['anomalies']) or '-'} |"
        )
    print(f"\n{args.seeds} seeds per mutant, {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    from views.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("known_bugs_report", unit=""):
        code = main()
    raise SystemExit(code)
