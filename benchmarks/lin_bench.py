"""Linearizability checking in one process, per file, beside Porcupine when a built harness is given.

    .venv/bin/python benchmarks/lin_bench.py [--etcd DIR] [--kv DIR|GITDIR] [--porcupine HARNESS]
                                             [--repeat 3] [--plain]

For each Jepsen etcd log (``--etcd``, default ``../shared/data/porcupine/jepsen-etcd``) and each of
Porcupine's kv test files (``--kv``: a folder holding ``c01-ok.txt`` ...; or the git directory of a
Porcupine checkout, whose ``test_data/kv`` is read at run time into a private temporary folder):
our verdict, the in-process check time (the best of ``--repeat`` runs of
:func:`invariants.linearizability.check_history`, after reading and decoding the file), the search
steps and steps per second, and the peak memory of one check (tracemalloc, a separate run).  With
``--porcupine HARNESS`` (a program you build outside this repository that times
``porcupine.CheckOperations`` on each file given, on one core, and prints one JSON line per file:
``{"file", "ops", "ok", "seconds", "allocated_bytes"}``), its verdict and time are printed beside
ours, with the ratio ours/Porcupine per file and per file set.  ``--plain`` also times the search
run as plain Python (the fallback when the Cython build is absent).

Verdicts must agree with the published ones (VERDICTS.tsv; a kv file's name says ``ok`` or
``bad``) and with Porcupine's: a disagreement stops the benchmark.  Results also go to
``out/bench/lin_bench.json``.  Absolute times depend on the machine's load; read the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from history_io.jepsen import read_jepsen_log, read_kv_log, read_verdicts  # noqa: E402
from invariants import linearizability  # noqa: E402
from invariants.models import CasRegister, KeyValue  # noqa: E402

ETCD = ROOT.parent / "shared" / "data" / "porcupine" / "jepsen-etcd"
OUT = ROOT / "out" / "bench"


def _kv_files(source: Path | None, scratch: Path) -> list[Path]:
    """Porcupine's kv test files: from a folder, or read out of a git directory into ``scratch``."""
    if source is None:
        return []
    if (source / "HEAD").exists() or source.name.endswith(".git") or (source / "objects").is_dir():
        names = subprocess.run(
            ["git", "--git-dir", str(source), "ls-tree", "--name-only", "HEAD", "test_data/kv/"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for name in names:
            data = subprocess.run(
                ["git", "--git-dir", str(source), "show", f"HEAD:{name}"], capture_output=True, check=True
            ).stdout
            (scratch / Path(name).name).write_bytes(data)
        source = scratch
    return sorted(source.glob("c*-*.txt"))


def _time_check(model: Any, ops: list[Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = linearizability.check_history(model, ops, step_budget=50_000_000, seconds=None)
        best = min(best, time.perf_counter() - started)
    return best, result


def _peak_memory(model: Any, ops: list[Any]) -> int:
    tracemalloc.start()
    try:
        linearizability.check_history(model, ops, step_budget=50_000_000, seconds=None)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _plain_module() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("invariants._wgl_plain", ROOT / "invariants" / "_wgl.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _porcupine(harness: str | None, files: list[Path], repeat: int) -> dict[str, dict[str, Any]]:
    if harness is None or not files:
        return {}
    done = subprocess.run(
        [harness, "-repeat", str(repeat), *map(str, files)], capture_output=True, text=True, check=True, timeout=3600
    )
    return {row["file"]: row for row in map(json.loads, done.stdout.splitlines())}


def measure(
    name: str, files: list[Path], reader: Any, model: Any, expected: dict[str, bool], args: argparse.Namespace
) -> list[dict[str, Any]]:
    theirs = _porcupine(args.porcupine, files, args.repeat)
    plain = _plain_module() if args.plain else None
    rows = []
    for path in files:
        ops = reader(path)
        seconds, result = _time_check(model, ops, args.repeat)
        row: dict[str, Any] = {
            "set": name,
            "file": path.name,
            "ops": len(ops),
            "verdict": result.verdict.value,
            "seconds": seconds,
            "steps": result.steps,
            "peak_bytes": _peak_memory(model, ops),
        }
        if path.name in expected and (result.verdict.value == "ok") != expected[path.name]:
            raise SystemExit(f"{path.name}: verdict {result.verdict.value}, published {expected[path.name]}")
        if plain is not None:
            saved, linearizability._wgl = linearizability._wgl, plain
            try:
                row["plain_seconds"], again = _time_check(model, ops, 1)
            finally:
                linearizability._wgl = saved
            assert again.verdict is result.verdict and again.steps == result.steps, path.name
        other = theirs.get(path.name)
        if other is not None:
            if other["ok"] != (result.verdict.value == "ok"):
                raise SystemExit(f"{path.name}: Porcupine says ok={other['ok']}, we say {result.verdict.value}")
            row["porcupine_seconds"] = other["seconds"]
            row["porcupine_allocated"] = other.get("allocated_bytes")
        rows.append(row)
    return rows


def report(name: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    theirs = all("porcupine_seconds" in r for r in rows)
    print(f"== {name}: {len(rows)} files, {sum(r['ops'] for r in rows)} operations")
    head = f"{'file':<14} {'ops':>6} {'verdict':>8} {'ours ms':>10} {'steps':>9} {'steps/s':>10} {'peak KiB':>9}"
    head += f" {'porcupine ms':>13} {'ours/theirs':>11}" if theirs else ""
    head += f" {'plain ms':>9}" if "plain_seconds" in rows[0] else ""
    print(head)
    for r in rows:
        line = (
            f"{r['file']:<14} {r['ops']:>6} {r['verdict']:>8} {r['seconds'] * 1000:>10.2f} {r['steps']:>9} "
            f"{r['steps'] / r['seconds'] if r['seconds'] else 0:>10.0f} {r['peak_bytes'] / 1024:>9.0f}"
        )
        if theirs:
            ratio = r["seconds"] / r["porcupine_seconds"] if r["porcupine_seconds"] else float("inf")
            line += f" {r['porcupine_seconds'] * 1000:>13.2f} {ratio:>11.2f}"
        if "plain_seconds" in r:
            line += f" {r['plain_seconds'] * 1000:>9.2f}"
        print(line)
    ours = sum(r["seconds"] for r in rows)
    summary = f"total: ours {ours:.3f} s, {sum(r['steps'] for r in rows)} steps"
    if theirs:
        porcupine = sum(r["porcupine_seconds"] for r in rows)
        ratios = [r["seconds"] / r["porcupine_seconds"] for r in rows if r["porcupine_seconds"]]
        summary += (
            f"; Porcupine {porcupine:.3f} s; ours/Porcupine {ours / porcupine:.2f}x for the set "
            f"(per file: median {statistics.median(ratios):.2f}x, max {max(ratios):.2f}x)"
        )
    print(summary + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--etcd", type=Path, default=ETCD, help=f"Jepsen etcd logs (default {ETCD})")
    parser.add_argument("--kv", type=Path, default=None, help="Porcupine's kv test files, or its git directory")
    parser.add_argument("--porcupine", default=None, help="a built Porcupine timing harness (see the docstring)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per file; the best is kept (default 3)")
    parser.add_argument("--plain", action="store_true", help="also time the search as plain Python")
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; search "
        f"{'compiled (Cython)' if linearizability._wgl.compiled() else 'plain Python'}\n"
    )
    scratch = Path(tempfile.mkdtemp(prefix="txnmodel-lin-bench-"))
    try:
        etcd = sorted(args.etcd.glob("etcd_*.log")) if args.etcd.is_dir() else []
        verdicts = read_verdicts(args.etcd / "VERDICTS.tsv") if (args.etcd / "VERDICTS.tsv").exists() else {}
        kv = _kv_files(args.kv, scratch)
        kv_expected = {p.name: p.stem.endswith("-ok") for p in kv}
        results = {
            "etcd": measure("Jepsen etcd", etcd, read_jepsen_log, CasRegister(), verdicts, args),
            "kv": measure("Porcupine kv", kv, read_kv_log, KeyValue(), kv_expected, args),
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not etcd:
        print(f"== Jepsen etcd: no logs at {args.etcd}")
    report("Jepsen etcd logs", results["etcd"])
    report("Porcupine kv files", results["kv"])
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "lin_bench.json").write_text(json.dumps(results, indent=1))
    print(f"results: {OUT / 'lin_bench.json'}")


if __name__ == "__main__":
    from views.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("lin_bench", unit=""):
        main()
