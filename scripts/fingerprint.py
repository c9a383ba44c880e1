"""Fingerprints of everything the product computes, for a change that must not change behaviour.

Runs the command line only (never imports the product), so the same script measures the tree
before and after a restructuring.  Prints one ``name sha256`` line per artefact, and with
``--keep DIR`` leaves the artefacts there for a diff:

* ``run/histories/*``: the main job's Parquet histories (``txnmodel run``, its default seeds);
* ``run/verdicts``: the main job's verdict table, timings left out;
* ``vectors``: every vector's result (``vectors run --json``);
* ``check``: the default models' verdicts and state counts (``check --json``, timings left out);
* ``inspect``: ``inspect --json`` of the file-ledger store of one seeded simulation on the real disk;
* ``verify``: ``verify --json`` of those histories and of the run's, timings left out;
* ``verify/jepsen-etcd``: ``verify --json`` of Porcupine's Jepsen etcd logs in ``../shared/data``.

Usage: ``python scripts/fingerprint.py [--txnmodel PATH] [--keep DIR] [--quick]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

TIMING_KEYS = frozenset({"seconds", "cpu_seconds", "wall_seconds", "elapsed", "rate", "states_per_second", "time"})


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def scrub(value: Any, root: str) -> Any:
    """``value`` with timings dropped and the scratch folder's path made relative."""
    if isinstance(value, dict):
        return {k: scrub(v, root) for k, v in value.items() if k not in TIMING_KEYS and not k.endswith("_seconds")}
    if isinstance(value, list):
        return [scrub(v, root) for v in value]
    if isinstance(value, str):
        if value[:1] in "{[":
            try:  # a JSON document inside a column (a verdict's detail): its timings go too
                return json.dumps(scrub(json.loads(value), root), sort_keys=True)
            except json.JSONDecodeError:
                pass
        return value.replace(root, "<tmp>")
    return value


def run(cmd: list[str], root: str, *, ok: tuple[int, ...] = (0,)) -> bytes:
    done = subprocess.run(cmd, capture_output=True, check=False)
    if done.returncode not in ok:
        sys.stderr.write(done.stderr.decode(errors="replace"))
        raise SystemExit(f"{' '.join(cmd)}: exit {done.returncode}")
    return done.stdout


def json_lines(raw: bytes, root: str) -> bytes:
    """One JSON document (pretty or not) or JSON Lines, timings scrubbed, in one canonical spelling."""
    try:
        return json.dumps(scrub(json.loads(raw), root), sort_keys=True).encode()
    except json.JSONDecodeError:
        pass
    out = []
    for line in raw.decode().splitlines():
        if line.strip():
            out.append(json.dumps(scrub(json.loads(line), root), sort_keys=True))
    return "\n".join(out).encode()


def verdict_table(path: Path, root: str) -> bytes:
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    rows = [scrub(r, root) for r in rows]
    rows.sort(key=lambda r: json.dumps(r, sort_keys=True))
    return json.dumps(rows, sort_keys=True).encode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--txnmodel", default=".venv/bin/txnmodel")
    parser.add_argument("--keep", type=Path)
    parser.add_argument("--quick", action="store_true", help="20 histories per workload, not the main job's 100")
    parser.add_argument("--rescore", type=Path, help="print the fingerprints of the artefacts a --keep run left in DIR")
    args = parser.parse_args()
    tm = args.txnmodel
    if args.rescore:
        for path in sorted((args.rescore / "fingerprint").iterdir()):
            data = path.read_bytes()
            if not path.name.startswith(("run__histories", "sim__")):
                value = scrub(json.loads(data), str(args.rescore))
                if path.name == "run__verdicts":  # rows in one order, whatever the run's
                    value.sort(key=lambda r: json.dumps(r, sort_keys=True))
                data = json.dumps(value, sort_keys=True).encode()
            print(f"{path.name.replace('__', '/')} {sha(data)}")
        return 0
    results: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory(prefix="fingerprint-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        root = str(work)
        run_out = work / "run"
        cmd = [tm, "run", "--out", str(run_out)]
        if args.quick:
            cmd += ["--histories", "20"]
        run(cmd, root)
        for path in sorted((run_out / "histories").glob("*.parquet")):
            results[f"run/histories/{path.name}"] = path.read_bytes()
        results["run/verdicts"] = verdict_table(run_out / "verdicts" / "verdicts.parquet", root)
        results["vectors"] = json_lines(run([tm, "vectors", "run", "spec/vectors", "--json"], root), root)
        results["check"] = json_lines(
            run([tm, "check", "--model", "default", "--json", "--out", str(work / "check")], root), root
        )
        data, hist = work / "data", work / "sim"
        run(
            [
                tm,
                "simulate",
                "--seed",
                "7",
                "--ledger",
                "file",
                "--disk",
                "real",
                "--data",
                str(data),
                "--out",
                str(hist),
                "--workload",
                "all",
                "--histories",
                "2",
                "--ops",
                "20",
                "--quiet",
            ],
            root,
        )
        for path in sorted(hist.glob("*.parquet")):
            results[f"sim/{path.name}"] = path.read_bytes()
        results["inspect"] = json_lines(run([tm, "inspect", "--json", str(data)], root), root)
        results["verify/sim"] = json_lines(
            run([tm, "verify", str(hist), "--local", "--json", "--no-progress", "--out", str(work / "v1")], root), root
        )
        results["verify/run"] = json_lines(
            run(
                [
                    tm,
                    "verify",
                    str(run_out / "histories"),
                    "--local",
                    "--json",
                    "--no-progress",
                    "--out",
                    str(work / "v2"),
                ],
                root,
            ),
            root,
        )
        # ../shared beside the checkout, or beside the folder of worktrees that holds it
        roots = Path(__file__).resolve().parents[1].parents
        etcd = next(
            (p for r in roots if (p := r / "shared" / "data" / "porcupine" / "jepsen-etcd").is_dir()),
            Path("/nonexistent"),
        )
        if etcd.is_dir():
            results["verify/jepsen-etcd"] = json_lines(
                run(
                    [
                        tm,
                        "verify",
                        str(etcd),
                        "--format",
                        "jepsen",
                        "--local",
                        "--json",
                        "--no-progress",
                        "--out",
                        str(work / "v3"),
                    ],
                    root,
                    ok=(0, 1),
                ),
                root,
            )
        if args.keep:
            for name, data_bytes in results.items():
                target = work / "fingerprint" / name.replace("/", "__")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data_bytes)
    for name, data_bytes in results.items():
        print(f"{name} {sha(data_bytes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
