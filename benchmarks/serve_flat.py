"""Flat with the work: the official client's produce and consume rates as one topic grows to 10^6.

``txnmodel serve`` runs in a process of its own, on the memory and on the file ledger.  One
producer sends ``--messages`` messages (not batched, so the topic rolls ledgers every
``managedLedgerMaxEntriesPerLedger`` entries) while one consumer receives and acknowledges each,
concurrently.  Reported per tenth of the topic: the produce rate (receipts per second) and the
consume rate (acknowledged messages per second), and the server's resident memory when that tenth
was consumed.  The goal: the last tenth's rate at least 0.8 of the first tenth's, and memory that
does not grow with what was ever sent (everything is acknowledged as it goes, so what is
unacknowledged and in flight stays small).  Ratios in one run, with the load average: the machine
is shared, so absolute rates say little.

Usage: python benchmarks/serve_flat.py [--messages N] [--ledger memory|file|both] [--out out/serve_flat]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TENTHS = 10
GOAL = 0.8


def _resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _rates(stamps: list[float], n: int, began: float) -> list[float]:
    """Messages per second over each tenth, from the time each message completed."""
    size = n // TENTHS
    rates = []
    previous = began
    for tenth in range(TENTHS):
        end = stamps[(tenth + 1) * size - 1]
        rates.append(size / max(end - previous, 1e-9))
        previous = end
    return rates


def run(n: int, ledger: str) -> dict[str, Any]:
    import pulsar

    data = tempfile.mkdtemp(prefix="serve-flat-")
    command = [sys.executable, "-m", "txnmodel", "serve", "--port", "0", "--admin-port", "off", "--ledger", ledger]
    if ledger == "file":
        command += ["--data", data]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    url = server.stdout.readline().split()[0]
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe("flat", "sub", receiver_queue_size=1000)
    producer = client.create_producer("flat", batching_enabled=False, block_if_queue_full=True, send_timeout_millis=0)
    produced: list[float] = [0.0] * n
    consumed: list[float] = [0.0] * n
    memory: list[float] = []
    failures: list[str] = []
    size = n // TENTHS

    def sent(i: int) -> Any:
        def done(result: Any, _mid: Any) -> None:
            if result != pulsar.Result.Ok:
                failures.append(f"send {i}: {result}")
            produced[i] = time.perf_counter()

        return done

    def consume() -> None:
        for i in range(n):
            message = consumer.receive(timeout_millis=120_000)
            consumer.acknowledge(message)
            consumed[i] = time.perf_counter()
            if (i + 1) % size == 0:
                memory.append(_resident_mb(server.pid))

    reader = threading.Thread(target=consume)
    began = time.perf_counter()
    reader.start()
    payload = b"x" * 100
    for i in range(n):
        producer.send_async(payload, sent(i))
    producer.flush()
    reader.join()
    elapsed = time.perf_counter() - began
    client.close()
    server.terminate()
    server.wait(timeout=60)
    produce, consume_rates = _rates(sorted(produced), n, began), _rates(consumed, n, began)
    return {
        "ledger": ledger,
        "messages": n,
        "seconds": elapsed,
        "failures": failures[:5],
        "produce_per_s": produce,
        "consume_per_s": consume_rates,
        "produce_ratio": produce[-1] / produce[0],
        "consume_ratio": consume_rates[-1] / consume_rates[0],
        "resident_mb": memory,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--ledger", choices=("memory", "file", "both"), default="both")
    parser.add_argument("--out", default="out/serve_flat")
    args = parser.parse_args(argv)
    if args.messages < TENTHS:
        parser.error(f"--messages must be at least {TENTHS}")
    ledgers = ("memory", "file") if args.ledger == "both" else (args.ledger,)
    load_before = os.getloadavg()
    rows = [run(args.messages, ledger) for ledger in ledgers]
    load_after = os.getloadavg()
    print(
        f"load average: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before, "
        f"{load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after (2 cores shared: ratios, not rates)"
    )
    met = True
    for row in rows:
        produce, consume = row["produce_per_s"], row["consume_per_s"]
        print(f"{row['ledger']} ledger, {row['messages']} messages in {row['seconds']:.0f} s")
        print("  tenth    produce/s  consume/s  server RSS MB")
        for tenth in range(TENTHS):
            rss = row["resident_mb"][tenth] if tenth < len(row["resident_mb"]) else float("nan")
            print(f"  {tenth + 1:>5} {produce[tenth]:>12.0f} {consume[tenth]:>10.0f} {rss:>14.1f}")
        ok = row["produce_ratio"] >= GOAL and row["consume_ratio"] >= GOAL and not row["failures"]
        met = met and ok
        print(
            f"  last tenth / first tenth: produce {row['produce_ratio']:.2f}, consume {row['consume_ratio']:.2f} "
            f"(goal >= {GOAL}): {'met' if ok else 'NOT met'}"
            + (f"; failures {row['failures']}" if row["failures"] else "")
        )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"load_average_before": load_before, "load_average_after": load_after, "rows": rows}
    (out / "serve_flat.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out / 'serve_flat.json'}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
