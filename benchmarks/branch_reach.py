"""Branch reach: which branches of the pure machines (reference/) the main job's workloads take.

    .venv/bin/python benchmarks/branch_reach.py [--seeds 100] [--ops 60] [--jobs 2] [--out out/branch_reach]

Runs the main job's histories (``txnmodel run``: every workload at seeds ``1..--seeds`` with its
variants and fault mix by seed, faults on; on the memory ledger, which gives the same histories)
under coverage.py in branch mode, measuring the machines' modules (``devtools.mutation.MACHINE_MODULES``:
the coordinator, the client's transaction machine, the buffer, the pending ack, the batched log and
the delayed tracker with its parts).  A branch is an arc of a branching statement (an ``if`` to
its body or past it, a loop into its body or out, a ``case`` taken or not); it is reached when some
run took it.  Only the engine's runs are measured, not the checkers (which step the same machines).

Per machine: branches, reached, the share; every unreached branch with the function and statement
it is in and the reason it is not taken (``devtools.branches.UNREACHED``), or ``unexplained``.
Writes ``OUT/report.json`` and ``OUT/report.md`` and prints the table with the load average.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.branches import Branch, branch_sites, module_file, reason_for  # noqa: E402
from devtools.mutation import MACHINE_MODULES  # noqa: E402
from engine.simulation.workloads import WORKLOADS, main_job_spec, run  # noqa: E402


def _files() -> dict[str, tuple[str, str]]:
    """Each machine module's file -> (machine, module)."""
    return {
        str(module_file(module)): (machine, module)
        for machine, modules in MACHINE_MODULES.items()
        for module in modules
    }


def _measure(job: tuple[int, list[tuple[str, int]], int, str]) -> int:
    """In a worker: run the histories under coverage, save the data file; the histories run."""
    import coverage

    number, cases, ops, data_file = job
    cov = coverage.Coverage(data_file=f"{data_file}.{number}", branch=True, include=list(_files()))
    cov.start()
    try:
        for workload, seed in cases:
            cov.switch_context(f"{workload}:{seed}")  # which histories execute each line
            run(main_job_spec(workload, seed, ops))
    finally:
        cov.stop()
        cov.save()
    return len(cases)


def measure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """Run the histories in ``args.jobs`` workers and combine their coverage: coverage.py's JSON."""
    import coverage

    cases = [(workload, seed) for seed in range(1, args.seeds + 1) for workload in WORKLOADS]
    data_file = str(out / ".coverage")
    for old in out.glob(".coverage*"):
        old.unlink()
    chunks = [cases[k :: args.jobs] for k in range(args.jobs)]
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        done = sum(pool.map(_measure, [(k, chunk, args.ops, data_file) for k, chunk in enumerate(chunks)]))
    assert done == len(cases)
    cov = coverage.Coverage(data_file=data_file, branch=True, include=list(_files()))
    cov.combine([str(out)], keep=False)
    cov.save()
    report = out / "coverage.json"
    cov.json_report(outfile=str(report), show_contexts=True)
    data: dict[str, Any] = json.loads(report.read_text())
    return data


def branches(data: dict[str, Any]) -> list[Branch]:
    """Every arc of every machine module, reached or not."""
    files = _files()
    out: list[Branch] = []
    for path, entry in data["files"].items():
        key = files.get(str(Path(path).resolve())) or files.get(str((ROOT / path).resolve()))
        if key is None:
            continue
        machine, module = key
        sites = branch_sites(module)
        for arcs, reached in ((entry.get("executed_branches", []), True), (entry.get("missing_branches", []), False)):
            for line, target in arcs:
                site = sites.get(line)
                if site is None:
                    raise SystemExit(f"{module}:{line}: coverage.py names a branch where no statement starts")
                out.append(Branch(machine, module, line, target, site, reached))
    return sorted(out, key=lambda b: (b.machine, b.module, b.line, b.target))


def site_histories(data: dict[str, Any], found: list[Branch]) -> dict[str, dict[str, list[str]]]:
    """Module -> line -> the histories (``workload:seed``) that executed it, for every ``if`` and
    ``elif`` with a reached arc: where ``benchmarks/mutation_report.py --flips`` judges its flip.

    Each list alternates two orders, each history once: the histories that take the **rarest path
    of the statement's function** (a history's rank is the fewest histories that executed any line
    of that function it executed; ties by seed), and the lowest seeds.  A flip's consequence often
    shows only past a later, rarer test of the same function (the buffer's low-watermark loop
    executes its ``if first is None`` in every history, and aborts a transaction only in the
    late-append fault mix's), which the lowest seeds rarely take; and the rarest paths of a function
    are not always where its flip shows (the pending ack's admin check is judged on ctp seed 9)."""
    files = _files()
    wanted: dict[str, set[int]] = {}
    for b in found:
        if b.reached and b.site.kind in ("if", "elif"):
            wanted.setdefault(b.module, set()).add(b.line)
    out: dict[str, dict[str, list[str]]] = {}
    for path, entry in data["files"].items():
        key = files.get(str(Path(path).resolve())) or files.get(str((ROOT / path).resolve()))
        if key is None or key[1] not in wanted:
            continue
        module = key[1]
        statements = branch_sites(module)
        executed = {int(line): {c for c in cs if c} for line, cs in entry.get("contexts", {}).items()}
        rank: dict[str, dict[str, int]] = {}  # function -> history -> its rarest line's count
        for line, histories in executed.items():
            site = statements.get(line)
            if site is None or not histories:
                continue
            best = rank.setdefault(site.function, {})
            for h in histories:
                best[h] = min(best.get(h, len(histories)), len(histories))
        out[module] = {}
        for line in sorted(wanted[module]):
            ranks = rank.get(statements[line].function, {})
            histories = executed.get(line, set())
            rarest = sorted(histories, key=lambda h: (ranks.get(h, 0), _history_order(h)))
            out[module][str(line)] = _alternate(rarest, sorted(histories, key=_history_order))
    return out


def _alternate(first: list[str], second: list[str]) -> list[str]:
    """``first[0]``, ``second[0]``, ``first[1]``, ... each item once (both lists hold the same items)."""
    out: list[str] = []
    seen: set[str] = set()
    for pair in zip(first, second, strict=True):
        for h in pair:
            if h not in seen:
                seen.add(h)
                out.append(h)
    return out


def _history_order(context: str) -> tuple[int, str]:
    workload, _, seed = context.partition(":")
    return (int(seed) if seed.isdigit() else 0, workload)


def table(found: list[Branch]) -> list[dict[str, Any]]:
    rows = []
    for machine in [*MACHINE_MODULES, "overall"]:
        mine = [b for b in found if machine in ("overall", b.machine)]
        reached = sum(b.reached for b in mine)
        missed = [b for b in mine if not b.reached]
        explained = sum(reason_for(b) is not None for b in missed)
        rows.append(
            {
                "machine": machine,
                "branches": len(mine),
                "reached": reached,
                "share": round(reached / len(mine), 4) if mine else 0.0,
                "unreached_explained": explained,
                "unexplained": len(missed) - explained,
            }
        )
    return rows


def markdown(rows: list[dict[str, Any]], found: list[Branch]) -> str:
    lines = [
        "| machine | branches | reached | share | unreached with a reason | unexplained |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['machine']} | {r['branches']} | {r['reached']} | {100 * r['share']:.1f} % "
            f"| {r['unreached_explained']} | {r['unexplained']} |"
        )
    lines += ["", "Unreached branches:", ""]
    for b in found:
        if not b.reached:
            target = f"line {b.target}" if b.target > 0 else "exit"
            why = reason_for(b) or "unexplained"
            lines.append(
                f"- `{b.module}:{b.line}` -> {target} in `{b.site.function}` ({b.site.kind}: `{b.site.text}`): {why}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="seeds 1..N per workload (default 100, the main job's)")
    parser.add_argument("--ops", type=int, default=60, help="transactions per history (default 60, the main job's)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--out", default=str(ROOT / "out" / "branch_reach"))
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started, cpu = time.perf_counter(), time.process_time()
    data = measure(args, out)
    found = branches(data)
    rows = table(found)
    wall = time.perf_counter() - started
    load = os.getloadavg()
    kinds = Counter(b.site.kind for b in found if not b.reached)
    meta = {
        "seeds": args.seeds,
        "ops": args.ops,
        "histories": args.seeds * len(WORKLOADS),
        "wall_seconds": round(wall, 1),
        "own_cpu_seconds": round(time.process_time() - cpu, 1),
        "load_average": load,
        "unreached_by_kind": dict(kinds),
    }
    sites = site_histories(data, found)
    (out / "report.json").write_text(
        json.dumps({"meta": meta, "table": rows, "branches": [b.to_json() for b in found], "sites": sites}, indent=1)
    )
    (out / "coverage.json").unlink()  # large (every line's contexts); the report keeps what is used
    text = markdown(rows, found)
    (out / "report.md").write_text(text + "\n")
    overall = rows[-1]
    print(text.split("\n\nUnreached")[0])
    print(
        f"\n{overall['reached']}/{overall['branches']} branches reached ({100 * overall['share']:.1f} %), "
        f"{overall['unexplained']} unreached without a reason; {meta['histories']} histories, wall {wall:.0f} s, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; report: {out / 'report.md'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
