"""Simulation benchmark: the same seeded runs on the simulated disk and on the real one, in one run.

    .venv/bin/python benchmarks/simulate_bench.py [--histories 4] [--ops 60] [--seed 1] [--json]

Every workload (ctp, multi, delayed), ``--histories`` seeds each, with faults on and the variants
the main job mixes in (batch messages on odd seeds, Key_Shared on seeds = 1 mod 3, the bucket
tracker on seeds 2, 3, 6, 7, ...), on file ledgers with the journal's group commit
(``--group-commit-ms``) and without the simulated disk's own EIO faults (a real disk has none to
match), run three ways side by side:

* ``sim``    -- the store on the simulated disk (:class:`engine.simulated.disk.SimDisk`): broker
                crashes are power cuts;
* ``real``   -- the same store on the real disk, in a scratch folder under ``out/``;
* ``memory`` -- the in-memory ledger, the floor (no store at all; its histories differ, as it
                neither groups commits nor loses anything at a crash).

Reported: wall seconds and operations simulated per second for each, the ratio real/sim, and
whether the sim and real histories are byte-identical (their Parquet rows, run by run; they must
be: the journal makes what a crash leaves independent of the disk).  The load average is printed
with the figures, which go to ``out/simulate_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.simulation.workloads import WORKLOADS, RunSpec, run, variant

OUT_DIR = Path(__file__).resolve().parent.parent / "out"


def spec_for(workload: str, seed: int, ops: int, ledger: str, disk: str, group: int, data: str | None) -> RunSpec:
    """The run the main job makes for this workload and seed (its variants mixed the same way)."""
    return RunSpec(
        workload=workload,
        seed=seed,
        ops=ops,
        faults=True,
        ledger=ledger,
        data_dir=data,
        disk=disk,
        group_commit_ms=group if ledger == "file" else None,
        batch_messages=variant("mixed", seed, 2),
        key_shared=variant("mixed", seed, 3),
        delayed_tracker="bucket" if workload == "delayed" and variant("mixed", seed, 2, step=2) else "memory",
        # The simulated disk's own faults (EIO) off: a real disk has none to match them, and the
        # histories are compared byte for byte.
        fault_rates={"disk_eio": 0},
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=4, help="seeds per workload")
    parser.add_argument("--ops", type=int, default=60, help="transactions attempted per history")
    parser.add_argument("--seed", type=int, default=1, help="the first seed")
    parser.add_argument("--group-commit-ms", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    OUT_DIR.mkdir(exist_ok=True)
    seconds = {"sim": 0.0, "real": 0.0, "memory": 0.0}
    operations = {"sim": 0, "real": 0, "memory": 0}
    runs: list[dict[str, Any]] = []
    from views.progress import Reporter

    progress = Reporter().phase("simulate_bench", total=3 * len(WORKLOADS) * args.histories, unit="runs")
    with tempfile.TemporaryDirectory(prefix="simulate-bench-", dir=OUT_DIR) as scratch, progress as phase:
        for workload in WORKLOADS:
            for seed in range(args.seed, args.seed + args.histories):
                rows: dict[str, list[Any]] = {}
                row: dict[str, Any] = {"workload": workload, "seed": seed}
                # Interleaved per history, so load drifting over the run is seen by all three.
                for how in ("sim", "real", "memory"):
                    ledger = "memory" if how == "memory" else "file"
                    data = os.path.join(scratch, f"{workload}-{seed}") if how == "real" else None
                    spec = spec_for(
                        workload, seed, args.ops, ledger, "sim" if how == "sim" else "real", args.group_commit_ms, data
                    )
                    start = time.perf_counter()
                    result = run(spec)
                    elapsed = time.perf_counter() - start
                    seconds[how] += elapsed
                    operations[how] += len(result.operations)
                    rows[how] = [op.to_row() for op in result.operations]
                    row[f"{how}_seconds"] = elapsed
                    phase.advance(note=f"{workload} seed {seed} {how}")
                    if how == "sim":
                        row["power_cuts"] = result.counters.get("journal_power_cuts", 0)
                        row["journal_replayed"] = result.counters.get("journal_replayed", 0)
                row["ops"] = len(rows["sim"])
                row["identical"] = rows["sim"] == rows["real"]
                runs.append(row)
                if not args.json:
                    print(
                        f"  {workload} seed {seed}: {row['ops']} ops, sim {row['sim_seconds']:.2f}s, real "
                        f"{row['real_seconds']:.2f}s, memory {row['memory_seconds']:.2f}s, "
                        f"{'identical' if row['identical'] else 'DIFFERENT'}",
                        flush=True,
                    )
        load = os.getloadavg()
    report = {
        "histories": len(runs),
        "ops_per_history": args.ops,
        "group_commit_ms": args.group_commit_ms,
        "load_average": load,
        "seconds": seconds,
        "operations": operations,
        "ops_per_second": {how: operations[how] / seconds[how] for how in seconds},
        "real_over_sim": seconds["real"] / seconds["sim"],
        "sim_over_memory": seconds["sim"] / seconds["memory"],
        "identical_histories": sum(r["identical"] for r in runs),
        "power_cuts": sum(r["power_cuts"] for r in runs),
        "journal_records_replayed": sum(r["journal_replayed"] for r in runs),
        "runs": runs,
    }
    (OUT_DIR / "simulate_bench.json").write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{len(runs)} histories, {args.ops} txns each, faults on, group commit {args.group_commit_ms} ms")
        print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        for how in ("sim", "real", "memory"):
            print(
                f"  {how:<6} {seconds[how]:8.1f} s  {operations[how]:>8} ops  "
                f"{report['ops_per_second'][how]:>8.0f} ops/s"  # type: ignore[index]
            )
        print(f"  real disk / simulated disk wall time: {report['real_over_sim']:.2f}")
        print(f"  simulated disk / memory ledger wall time: {report['sim_over_memory']:.2f}")
        print(f"  byte-identical sim and real histories: {report['identical_histories']} of {len(runs)}")
        print(
            f"  power cuts on the simulated disk: {report['power_cuts']}, journal records replayed: "
            f"{report['journal_records_replayed']}"
        )
        print(f"wrote {OUT_DIR / 'simulate_bench.json'}")
    return 0 if report["identical_histories"] == len(runs) else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
