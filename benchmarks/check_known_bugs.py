"""The known-bug catalogue through ``txnmodel check``: per mutant, the smallest model and bounds
tried that find it, the property it breaks (safety or liveness), the trace length and the states.

    .venv/bin/python benchmarks/check_known_bugs.py [--json]

Writes out/check_known_bugs.json; the table of docs/known_bugs.md ("Model checking") is its output.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.known_bugs.catalogue import MUTANTS
from tests.known_bugs.check_probes import check_detection


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = []
    for mutant in MUTANTS:
        row = check_detection(mutant)
        rows.append(row)
        if not args.json:
            if row["detected"]:
                others = "; ".join(f"{k} {n} ({length})" for k, n, length in row["violations"])
                print(
                    f"| {row['mutant']} | yes | `{row['probe']}` | {row['kind']} {row['property']} | "
                    f"{row['trace_length']} | {row['states']:,} | {others} |",
                    flush=True,
                )
            else:
                print(
                    f"| {row['mutant']} | no | {', '.join(f'`{t}`' for t in row['tried'])} | {row['why']} |", flush=True
                )
    out = Path("out")
    out.mkdir(exist_ok=True)
    (out / "check_known_bugs.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    detected = sum(1 for r in rows if r["detected"])
    summary = (
        f"{detected} of {len(rows)} detected in {time.perf_counter() - started:.1f} s; load average {os.getloadavg()}"
    )
    if args.json:
        print(json.dumps({"rows": rows, "summary": summary}, indent=1))
    else:
        print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
