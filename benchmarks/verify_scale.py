"""How ``verify`` scales with a history's length: the transactional and delivery checks at 10^4, 10^5
and 10^6 operations of each ``txnmodel record`` workload shape, in one run.

    .venv/bin/python benchmarks/verify_scale.py [--sizes 10000,100000,1000000] [--workloads ...]
                                               [--templates DIR] [--out out/bench/verify-scale]

The histories are **built from recordings**, not recorded at length: one history per workload
(``produce-consume``, ``nack``, ``ack-timeout``, ``delayed``, ``ctp``, ``multi``) is recorded from
``txnmodel serve`` (in this process, on loopback, its default options: ``--ops 300``, seed 1) or
read from ``--templates DIR`` (``<workload>*.parquet``, e.g. ``txnmodel record`` output), then
repeated end to end, each copy after the last in time, with its own payloads, ledger ids, transaction
ids and client processes, on the same topics and subscriptions: the recorded shape (the operations'
mix, the subscriptions' types, the consumers, the bounds) with as many operations as asked, whole
copies only (so a size is the first multiple of the template's length at or past it).  The
subscriptions grow with the history, which is what a check that loops over a subscription's
operations per operation pays for.

Each (workload, size) is measured in a fresh process: the Parquet file read into operations
(``history_io.files.iter_histories``), the **transactional checks** (the analysis, every check of
the taxonomy and which had anything to judge), the **delivery checks** (the delivery oracle), the
CPU seconds of each, the verdicts (every history must pass: a clean broker's history tiled is still
clean), and the process's peak memory above what it held before reading, per operation.

Each (workload, size) is measured ``--repeat`` times (default 5), each time in a fresh process, and
the table gives each stage's **median**: between runs of the same tree one stage's ratio moved by up
to 1.8, so one run decides nothing near the goal, and three did not settle it either (one stage's
10^5 time spread over 0.44 to 0.57 s in three runs of one tree on a shared host, which moves a ratio
by about 1.3 either way).  The repeats go round the sizes (every size once,
then again), so the machine's drift over a workload's minutes falls on every size alike.  Every
run's figures are in the JSON.

**The machine's linear anchor**, measured in the same child on the same operations after the
checks: the least work any check of a history does, by construction linear -- every operation filed
under its object and index in a dict, then each looked up again in history order (three times over,
the sum timed).  Its ratio between sizes is what this machine's memory does to linear work over
that many operations: a 10^5-operation history's objects take about 300 MB and a 10^6 one's about
2 GB, and the farther apart a lookup's memory, the more it costs (on a host whose L3 holds 480 MiB
the first fits and the second does not; on one with 32 MiB neither does, and the page tables that
map the larger one miss the caches too), which no checker that holds the history in memory
escapes.  It is printed beside each stage's ratio; the goal is still judged on the stages' own
ratios.

Prints, with the load average: per workload and size the CPU seconds and operations per CPU second of
each stage, the ratios t(10^6)/t(10^5) and t(10^5)/t(10^4) (goal: at most 12, where 10 is linear)
with the anchor's, and whether the checks run at 50,000 operations per CPU second or more at 10^6;
writes the figures to ``OUT/verify-scale.json`` and the table to ``OUT/verify-scale.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKLOADS = ("produce-consume", "nack", "ack-timeout", "delayed", "ctp", "multi")
SIZES = (10_000, 100_000, 1_000_000)
GOAL_RATIO = 12.0
GOAL_RATE = 50_000


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} CPUs"


# --- templates: one recorded history per workload ----------------------------------------------


def templates(workloads: list[str], folder: Path, given: Path | None) -> dict[str, Path]:
    """One recorded history per workload: from ``given``, else recorded once into ``folder`` from
    ``txnmodel serve`` in this process (kept there for the next run)."""
    found: dict[str, Path] = {}
    for workload in workloads:
        for source in (given, folder):
            if source is None:
                continue
            # record writes into a timestamped folder (with a ``latest`` link) under its --out
            matches = sorted({p.resolve() for p in source.rglob(f"{workload}*.parquet") if _is(workload, p)})
            if matches:
                found[workload] = matches[0]
                break
    missing = [w for w in workloads if w not in found]
    if missing:
        from recording import RecordOptions, record
        from runners.serve import serve

        folder.mkdir(parents=True, exist_ok=True)
        with serve() as url:
            for workload in missing:
                started = time.perf_counter()
                result = record(
                    RecordOptions(url=url, workload=workload, out=str(folder), ops=300, seed=1, progress=False)
                )
                found[workload] = Path(result.path)
                print(f"recorded {workload}: {result.operations} operations in {time.perf_counter() - started:.1f}s")
    return found


def _is(workload: str, path: Path) -> bool:
    """``path`` is a recording of ``workload`` (``nack`` is not ``nack-...``'s prefix of another)."""
    rest = path.name[len(workload) :]
    return rest.startswith(("-seed", ".", "-")) and not any(
        other != workload and other.startswith(workload) and path.name.startswith(other) for other in WORKLOADS
    )


# --- tiling: the template repeated end to end -----------------------------------------------------


def tile(template: Path, size: int, history: str) -> list[Any]:
    """The template's operations repeated end to end until there are at least ``size`` of them (whole
    copies): copy k is shifted in time past the one before, its payloads, ledger ids, transaction
    ids and processes its own, its topics and subscriptions the template's."""
    from history_io.files import read_file
    from spec.history import Operation

    ((_, ops),) = read_file(template, "parquet").items()
    start = min(op.invoked_at for op in ops)
    end = max(op.completed_at if op.completed_at is not None else op.invoked_at for op in ops)
    span = end - start + 10_000  # a quiet 10 s between copies
    ledgers = 1 + max((_ledger(op.args) for op in ops), default=0)
    ledgers = max(ledgers, 1 + max((_ledger(op.returned) for op in ops), default=0))
    txns = 1 + max((_txn(v) for op in ops for v in (op.args, op.returned)), default=0)
    processes = 1 + max(op.process for op in ops)
    copies = -(-size // len(ops))
    out: list[Operation] = []
    for k in range(copies):
        shift = (k * ledgers, k * txns, k * span, f"c{k}:")
        for op in ops:
            value = _shifted(op.args, shift)
            result = _shifted(op.returned, shift)
            out.append(
                Operation(
                    history,
                    op.index + k * len(ops),
                    op.process + k * processes,
                    op.type,
                    op.f,
                    op.object,
                    json.dumps(value, separators=(",", ":")),
                    None if op.result is None else json.dumps(result, separators=(",", ":")),
                    op.invoked_at + k * span,
                    None if op.completed_at is None else op.completed_at + k * span,
                    op.error,
                    op.seed,
                    value,
                    result,
                )
            )
    return out


def _ledger(value: Any) -> int:
    position = value.get("position") if isinstance(value, dict) else None
    return int(position[0]) if isinstance(position, list) and position else 0


def _txn(value: Any) -> int:
    txn = value.get("txn") if isinstance(value, dict) else None
    return int(txn[1]) if isinstance(txn, list) and len(txn) == 2 else 0


def _shifted(value: Any, shift: tuple[int, int, int, str]) -> Any:
    """A value or result of copy k: its message ids in the copy's ledgers, its transaction in the
    copy's ids, its times in the copy's span, its payload the copy's."""
    if not isinstance(value, dict):
        return value
    ledgers, txns, dt, tag = shift
    out = dict(value)
    if isinstance(out.get("message"), str):
        out["message"] = tag + out["message"]
    if isinstance(out.get("position"), list) and len(out["position"]) == 2:
        out["position"] = [out["position"][0] + ledgers, out["position"][1]]
    for key in ("txn", "txn_id"):
        if isinstance(out.get(key), list) and len(out[key]) == 2:
            out[key] = [out[key][0], out[key][1] + txns]
    for key in ("deliver_at_ms", "publish_time"):
        if isinstance(out.get(key), int):
            out[key] += dt
    return out


# --- one measurement, in a fresh process --------------------------------------------------------


_STAGES = ("transactional", "delivery")


def measure(path: str) -> dict[str, Any]:
    """Read and check one history file (the child's side): CPU seconds per stage, peak memory.  The
    stages are timed inside the one ``check_history`` that gives the verdicts, as ``verify`` runs
    it, by the progress it reports: the transactional checks from its start (the client operations
    picked, the analysis, the taxonomy, Jepsen's checks, which had anything to judge, the row) to
    ``delivery checks``, the delivery checks (the oracle, the row) from there to its end."""
    from history_io.files import iter_histories
    from invariants.verify import VerifyOptions, check_history

    _imported()
    before = _resident()
    _reset_peak()
    c0 = time.process_time()
    ((name, ops),) = list(iter_histories(path, "parquet"))
    c1 = time.process_time()
    stamps: dict[str, float] = {}

    def progress(done: float, what: str) -> None:
        stamps.setdefault(what, time.process_time())

    rows = check_history(name, ops, path, VerifyOptions(), progress=progress)
    c3 = time.process_time()
    peak = _peak()
    anchor_s = anchor(ops)
    if "delivery checks" not in stamps:
        raise SystemExit(f"{path}: no transactional and delivery checks ran: {[row.checker for row in rows]}")
    c2 = stamps["delivery checks"]
    # a linearizability row, when a model applies, is neither stage
    linearizability = stamps.get("linearizability done", 0.0) - stamps.get("linearizability", 0.0)
    details = {row.checker: json.loads(row.detail or "{}") for row in rows if row.checker in _STAGES}
    return {
        "ops": len(ops),
        "read_s": c1 - c0,
        "transactional_s": c2 - c1 - linearizability,
        "delivery_s": c3 - c2,
        "anchor_s": anchor_s,
        "peak_bytes": peak - before,
        "verdicts": {row.checker: row.verdict for row in rows},
        "anomalies": {k: v for detail in details.values() for k, v in detail.get("counts", {}).items()},
        "judged": sum(
            1
            for detail in details.values()
            for statement in detail.get("applicability", {}).values()
            if statement.get("applies")
        )
        + sum(1 for n in details.get("delivery", {}).get("judged", {}).values() if n),
    }


ANCHOR_PASSES = 3


def anchor(ops: list[Any]) -> float:
    """CPU seconds of the machine's linear anchor on ``ops``: each operation filed under its object
    and index, then each looked up again in history order and its completion read; ``ANCHOR_PASSES``
    times over (one pass at 10^4 operations is a few milliseconds, below the clock's steadiness)."""
    total = 0.0
    for _ in range(ANCHOR_PASSES):
        started = time.process_time()
        by_object: dict[str, dict[int, Any]] = {}
        for op in ops:
            by_object.setdefault(op.object, {})[op.index] = op
        completed = 0
        for op in ops:
            if by_object[op.object][op.index].completed_at is not None:
                completed += 1
        total += time.process_time() - started
        del by_object
    return total


def _imported() -> None:
    """What ``check_history`` imports on first use, imported before the clock starts."""
    import invariants.applicability
    import invariants.client_visible
    import invariants.queue
    import invariants.transactional
    import spec.history

    del invariants, spec


def _status(field: str) -> int | None:
    """A ``/proc/self/status`` figure in bytes (Linux), None elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _resident() -> int:
    """What the process holds now (its resident set; elsewhere than Linux its peak so far)."""
    now = _status("VmRSS")
    if now is not None:
        return now
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_peak() -> None:
    """The resident peak from now on: ``getrusage``'s ``ru_maxrss`` carries the parent's peak across
    ``exec`` (a child after a 10^6-operation history read 0 bytes per operation at 10^5), and the
    kernel's own peak (``VmHWM``) is reset to what the process holds now."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _peak() -> int:
    """The resident peak since :func:`_reset_peak` (``VmHWM``; elsewhere than Linux ``ru_maxrss``)."""
    peak = _status("VmHWM")
    if peak is not None:
        return peak
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


_TIMED = ("read_s", "transactional_s", "delivery_s", "anchor_s")


def median_figures(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One (workload, size)'s figures from its runs: each timed stage's median, the first run's
    other figures (the same history gives the same counts and verdicts every run, which is
    checked), every run kept under ``runs``."""
    first = runs[0]
    for run in runs[1:]:
        if run["verdicts"] != first["verdicts"] or run["ops"] != first["ops"]:
            raise SystemExit(f"runs of one history disagree: {first['verdicts']} against {run['verdicts']}")
    out = dict(first)
    for key in _TIMED:
        values = sorted(run[key] for run in runs)
        middle = len(values) // 2
        out[key] = values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2
    out["peak_bytes"] = max(run["peak_bytes"] for run in runs)
    out["runs"] = runs
    return out


def _child(path: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--measure", str(path)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"measuring {path} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# --- the report ---------------------------------------------------------------------------------


def _rate(ops: int, seconds: float) -> str:
    return f"{ops / seconds:,.0f}" if seconds > 0 else "-"


def report(figures: dict[str, dict[int, dict[str, Any]]], sizes: list[int]) -> list[str]:
    lines = [
        "| workload | ops | read s | transactional s (ops/CPU s) | delivery s (ops/CPU s) | both: ops/CPU s | "
        "peak MB (bytes/op) | verdicts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for workload, by_size in figures.items():
        for size in sizes:
            f = by_size.get(size)
            if f is None:
                continue
            checks = f["transactional_s"] + f["delivery_s"]
            verdicts = ", ".join(f"{k} {v}" for k, v in sorted(f["verdicts"].items()))
            lines.append(
                f"| {workload} | {f['ops']:,} | {f['read_s']:.2f} | {f['transactional_s']:.2f} "
                f"({_rate(f['ops'], f['transactional_s'])}) | {f['delivery_s']:.2f} "
                f"({_rate(f['ops'], f['delivery_s'])}) | {_rate(f['ops'], checks)} | {f['peak_bytes'] / 2**20:.0f} "
                f"({f['peak_bytes'] / f['ops']:,.0f}) | {verdicts} |"
            )
    lines += [
        "",
        "| workload | stage | " + " | ".join(f"t({b:.0e})/t({a:.0e})" for a, b in itertools.pairwise(sizes)) + " |",
    ]
    lines.append("|---|---|" + "---|" * (len(sizes) - 1))
    for workload, by_size in figures.items():
        for stage in _TIMED:
            ratios = []
            for a, b in itertools.pairwise(sizes):
                fa, fb = by_size.get(a), by_size.get(b)
                ratios.append(
                    "-"
                    if fa is None or fb is None or fa[stage] <= 0
                    else f"{fb[stage] / fa[stage]:.1f} (ops x{fb['ops'] / fa['ops']:.1f})"
                )
            lines.append(f"| {workload} | {stage[:-2]} | " + " | ".join(ratios) + " |")
    return lines


def _per_step(fa: dict[str, Any], fb: dict[str, Any], stage: str, step: int) -> float:
    """``stage``'s time ratio between two sizes, per ``step`` times the operations (the tiles make
    a size a little more than asked)."""
    if fa.get(stage, 0) <= 0:
        return 0.0
    return float(fb[stage] / fa[stage] * (fa["ops"] / fb["ops"]) * step)


def goals(figures: dict[str, dict[int, dict[str, Any]]], sizes: list[int]) -> list[str]:
    """The issue's goals, per workload: t(10^6)/t(10^5) <= 12 and >= 50,000 operations per CPU second
    at 10^6, on the transactional and the delivery checks."""
    if len(sizes) < 2:
        return []
    big, small = sizes[-1], sizes[-2]
    out = []
    for workload, by_size in figures.items():
        fb, fa = by_size.get(big), by_size.get(small)
        if fb is None or fa is None:
            continue
        for stage in ("transactional_s", "delivery_s"):
            ratio = _per_step(fa, fb, stage, big // small)
            rate = fb["ops"] / fb[stage] if fb[stage] > 0 else float("inf")
            ok = ratio <= GOAL_RATIO and rate >= GOAL_RATE
            out.append(
                f"{'met' if ok else 'MISSED'}: {workload} {stage[:-2]}: t({big:.0e})/t({small:.0e}) = {ratio:.1f} "
                f"(per {big // small}x operations; goal <= {GOAL_RATIO:g}; the linear anchor "
                f"{_per_step(fa, fb, 'anchor_s', big // small):.1f}), {rate:,.0f} operations per CPU second at "
                f"{fb['ops']:,} (goal >= {GOAL_RATE:,})"
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--templates", type=Path, help="recorded histories to tile (<workload>*.parquet)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "bench" / "verify-scale")
    parser.add_argument(
        "--repeat", type=int, default=5, help="fresh processes per history; the table gives the medians (default 5)"
    )
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # the child's side
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0
    sizes = sorted(int(s) for s in args.sizes.split(","))
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = sorted(set(workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workloads {unknown}; workloads are {', '.join(WORKLOADS)}")
    from history_io.files import write_parquet

    print(f"start: {_load()}")
    found = templates(workloads, args.out / "templates", args.templates)
    histories = args.out / "histories"
    histories.mkdir(parents=True, exist_ok=True)
    figures: dict[str, dict[int, dict[str, Any]]] = {}
    for workload in workloads:
        paths: dict[int, Path] = {}
        for size in sizes:
            paths[size] = histories / f"{workload}-{size}.parquet"
            ops = tile(found[workload], size, f"{workload}-{size}")
            write_parquet(paths[size], {ops[0].history: ops})
            del ops
        # The repeats go round the sizes (10^4, 10^5, 10^6, then again), so that the machine's
        # drift over the minutes a workload takes (other tenants, its caches' state) falls on every
        # size alike instead of on whichever size ran last.
        runs: dict[int, list[dict[str, Any]]] = {size: [] for size in sizes}
        for _ in range(max(1, args.repeat)):
            for size in sizes:
                f = _child(paths[size])
                runs[size].append(f)
                print(
                    f"{workload} {f['ops']:,} ops: read {f['read_s']:.2f}s, transactional {f['transactional_s']:.2f}s, "
                    f"delivery {f['delivery_s']:.2f}s, anchor {f['anchor_s']:.3f}s, peak {f['peak_bytes'] / 2**20:.0f} "
                    f"MB, {f['verdicts']} ({_load()})"
                )
        for size in sizes:
            figures.setdefault(workload, {})[size] = median_figures(runs[size])
            paths[size].unlink()
    table = report(figures, sizes)
    met = goals(figures, sizes)
    end = _load()
    print("\n".join(["", *table, "", *met, f"end: {end}"]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verify-scale.json").write_text(
        json.dumps({"sizes": sizes, "templates": {w: str(p) for w, p in found.items()}, "figures": figures}, indent=2)
    )
    (args.out / "verify-scale.md").write_text("\n".join([*table, "", *met, f"end: {end}", ""]))
    return 0 if all(line.startswith("met") for line in met) else 1


if __name__ == "__main__":
    sys.exit(main())
