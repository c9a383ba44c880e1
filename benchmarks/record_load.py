"""No false alarm from load: every ``txnmodel record`` workload against ``txnmodel serve``, as fast as
this machine drives it, verified.

For each workload, ``txnmodel serve`` runs as a process of its own (without faults, or with
``--faults`` and the recorder's ``--liveness off``, as docs/verify-your-broker.md says), and
``txnmodel record --seconds S`` (or ``--ops N``) drives it as fast as the writers go; the history is
then verified.  The reference broker must pass every one.  Printed per run: the operations recorded,
their rate, the unknown outcomes, the negative acks and delayed messages judged, each checker's
verdict and the anomalies found, with the load average before and after (the machine is shared:
the figures are this run's only).  A JSON copy goes under ``--out``.

Usage: python benchmarks/record_load.py [--seconds 5 | --ops N] [--faults SPEC] [--workloads a,b]
       [--out out/bench/record_load]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# serve's faults for a recording (tests/recording/faults.py says why these two are left out)
FAULTS = "on,drop_request=0,short_txn_timeout=0"


def _serve(faults: str | None, seed: int) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, "-m", "txnmodel", "serve", "--port", "0", "--seed", str(seed)]
    if faults:
        command += ["--faults", faults]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline().split()  # the service URL, then the admin URL when serve has one
    url = line[0] if line else ""
    if not url.startswith("pulsar://"):
        proc.kill()
        raise SystemExit(f"serve did not start: {url!r}")
    return proc, url


def _record(url: str, workload: str, budget: list[str], faults: bool, out: str) -> tuple[int, float]:
    command = [sys.executable, "-m", "txnmodel", "record", "--url", url, "--workload", workload, "--out", out]
    command += [*budget, "--no-progress"]
    if faults:
        command += ["--liveness", "off"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
    return done.returncode, time.monotonic() - started


def _verify(path: Path) -> dict[str, Any]:
    from history_io.files import read_parquet
    from invariants.verify import VerifyOptions, check_histories

    histories = read_parquet(path)
    (ops,) = histories.values()
    started = time.monotonic()
    rows = check_histories(histories, str(path), VerifyOptions())
    found: Counter[str] = Counter()
    judged: list[str] = []
    for row in rows:
        detail = json.loads(row.detail) if row.detail.startswith("{") else {}
        for name, count in detail.get("counts", {}).items():
            found[f"{row.checker}:{name}"] += count
        for check, seen in detail.get("applicability", {}).items():
            if seen["applies"]:
                judged.append(check)
    span_s = (max(op.completed_at or op.invoked_at for op in ops) - ops[0].invoked_at) / 1000
    return {
        "operations": len(ops),
        "unknown": sum(op.type.indeterminate for op in ops),
        "negative_acks": sum(op.f == "negative_ack" for op in ops),
        "delayed_sends": sum(op.f == "send" and "deliver_at_ms" in op.args for op in ops),
        "ops_per_s": len(ops) / span_s if span_s else 0.0,
        "verdicts": {row.checker: row.verdict for row in rows},
        "anomalies": dict(found),
        "judged": judged,
        "verify_s": time.monotonic() - started,
    }


def main() -> None:
    from recording.workloads import WORKLOADS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, default=None)
    budget.add_argument("--ops", type=int, default=None)
    parser.add_argument("--faults", default=None, help=f"serve's fault spec (e.g. {FAULTS})")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default="out/bench/record_load")
    args = parser.parse_args()
    budget_args = ["--ops", str(args.ops)] if args.ops is not None else ["--seconds", f"{args.seconds or 5:g}"]
    results = []
    for workload in args.workloads.split(","):
        load_before = os.getloadavg()
        proc, url = _serve(args.faults, args.seed)
        store = tempfile.mkdtemp(prefix=f"record-load-{workload}-")
        try:
            code, took = _record(url, workload, budget_args, bool(args.faults), store)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        result: dict[str, Any] = {"workload": workload, "faults": args.faults, "budget": budget_args}
        result.update({"record_exit": code, "record_s": took, "load_before": load_before, "store": store})
        files = sorted(Path(store).rglob("*.parquet"))
        if files:
            result.update(_verify(files[0]))
        result["load_after"] = os.getloadavg()
        results.append(result)
        verdicts = " ".join(f"{k}={v}" for k, v in result.get("verdicts", {}).items())
        rate = result.get("ops_per_s", 0)
        print(
            f"{workload:16} exit {code}  {result.get('operations', 0):>7,} ops  {rate:>6,.0f} op/s  "
            f"{result.get('unknown', 0):>6,} unknown  nacks {result.get('negative_acks', 0):>4}  "
            f"delayed {result.get('delayed_sends', 0):>5}  {verdicts}  {result.get('anomalies') or ''}  "
            f"load {load_before[0]:.1f}->{result['load_after'][0]:.1f}",
            flush=True,
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = f"record_load_{'faults' if args.faults else 'clean'}_{'_'.join(budget_args).strip('-')}.json"
    (out / name).write_text(json.dumps(results, indent=2))
    print(f"wrote {out / name}")


if __name__ == "__main__":
    main()
