"""Reach report: which numbered rules the main job's workloads drive (``devtools.reach``).

    .venv/bin/python benchmarks/reach_report.py [--seeds 100] [--ops 60] [--out out/reach]

Runs the main job's histories (``txnmodel run``: every workload at seeds ``1..--seeds`` with its
variants and fault mix by seed, faults on; on the memory ledger, which gives the same histories)
and, per rule id of ``spec/rules/*.md``:

* **records**: in how many histories replaying the engine's machine-step records (coordinator,
  buffer, pending ack, delayed tracker) runs a function or steps a command whose docstring cites
  the rule (:func:`devtools.reach.replay_reach`);
* **live**: the same, traced on the live run, which also sees the client's transaction machine and
  the PIP-160 batched log writer (their steps are not in the history), the reference functions
  the engine calls outside a step (dispatch, recovery), and the few engine functions that alone
  carry out a rule (``devtools.reach.ENGINE_SITES``);
* **calls**: how many times such functions ran, summed over the histories.

Writes ``OUT/report.json`` and ``OUT/report.md`` and prints the unreached rules, with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.reach import all_rules, replay_reach, rule_map, rules_reached, traced  # noqa: E402
from engine.simulation.workloads import WORKLOADS, main_job_spec, run  # noqa: E402


def _reach(
    args: argparse.Namespace,
    mapping: Any,
    rules: dict[str, str],
    by_records: Counter[str],
    by_live: Counter[str],
    calls: Counter[str],
    phase: Any,
) -> None:
    """The main job's histories of seeds 1..``args.seeds``, each run traced, counted into the counters."""
    for seed in range(1, args.seeds + 1):
        for workload in WORKLOADS:
            spec = main_job_spec(workload, seed, args.ops)
            with traced() as live:
                result = run(spec)
            recorded = rules_reached(replay_reach(result.operations), mapping)
            seen = rules_reached(live, mapping)
            by_records.update(recorded.keys())
            by_live.update(seen.keys())
            calls.update(seen)
            phase.advance(note=f"{workload} seed {seed}")
        print(f"  seed {seed}: {len(set(by_records) | set(by_live))}/{len(rules)} rules reached", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="seeds 1..N per workload (default 100, the main job's)")
    parser.add_argument("--ops", type=int, default=60, help="transactions per history (default 60, the main job's)")
    parser.add_argument("--out", default=str(ROOT / "out" / "reach"))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    mapping = rule_map()
    rules = all_rules()
    by_records: Counter[str] = Counter()
    by_live: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    histories = 0
    from views.progress import Reporter

    progress = Reporter().phase("reach_report", total=args.seeds * len(WORKLOADS), unit="histories")
    with progress as phase:
        _reach(args, mapping, rules, by_records, by_live, calls, phase)
    histories = args.seeds * len(WORKLOADS)
    reached = set(by_records) | set(by_live)
    wall = time.perf_counter() - started
    load = os.getloadavg()
    rows = [
        {
            "rule": rule,
            "title": title,
            "records": by_records.get(rule, 0),
            "live": by_live.get(rule, 0),
            "calls": calls.get(rule, 0),
        }
        for rule, title in sorted(rules.items(), key=lambda kv: (kv[0].split("-")[0], int(kv[0].split("-")[1])))
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"histories": histories, "seeds": args.seeds, "ops": args.ops, "wall_seconds": round(wall, 1), "load": load}
    (out / "report.json").write_text(json.dumps({"meta": meta, "rules": rows}, indent=1))
    lines = [
        f"{len(reached)}/{len(rules)} rule ids reached by {histories} histories "
        f"({len(by_records)} from the machine-step records alone); wall {wall:.0f} s, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        "",
        "| rule | title | histories (records) | histories (live) | calls |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {r['rule']} | {r['title']} | {r['records']} | {r['live']} | {r['calls']} |" for r in rows]
    missing = [r for r in rows if not r["records"] and not r["live"]]
    lines += ["", "Unreached: " + (", ".join(f"{r['rule']} ({r['title']})" for r in missing) or "none")]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print(lines[0])
    print(lines[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
