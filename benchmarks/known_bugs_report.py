"""Known-bug catalogue report: per mutant, detected yes/no, the detection rate over N seeds and the
number of histories needed for the first detection, by the bulk checker from the histories alone.

    .venv/bin/python benchmarks/known_bugs_report.py [--seeds 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.known_bugs.catalogue import report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
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
    from txnmodel.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("known_bugs_report", unit=""):
        code = main()
    raise SystemExit(code)
