"""What the wire costs: the official client against ``txnmodel serve`` beside the in-process engine.

One workload, three ways, in one run (ratios, never absolute times):

* ``engine``: the in-process client (:mod:`engine.simulation.client`) on the memory ledger, the
  simulation run as fast as it goes (no history recording, as serve runs without ``--history``);
* ``serve-memory`` and ``serve-file``: the official ``pulsar-client`` over a loopback socket to
  ``txnmodel serve`` on the memory and the file ledger.

The workload: ``--messages`` synchronous sends (each waits for its receipt), then as many receives
each followed by an acknowledgement, on one topic with one Exclusive subscription.  Reported per
way: messages/s over the whole produce-and-consume, and p50/p99 of a send and of a receive+ack.
The goal: serve on the memory ledger costs less than 2x the engine's time per message.

Usage: python benchmarks/serve_bench.py [--messages N] [--out out/serve_bench]
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


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _summary(name: str, total_s: float, sends: list[float], receives: list[float], n: int) -> dict[str, Any]:
    return {
        "way": name,
        "messages": n,
        "seconds": total_s,
        "messages_per_s": n / total_s,
        "us_per_message": total_s / n * 1e6,
        "send_p50_us": _percentile(sends, 0.5) * 1e6,
        "send_p99_us": _percentile(sends, 0.99) * 1e6,
        "receive_p50_us": _percentile(receives, 0.5) * 1e6,
        "receive_p99_us": _percentile(receives, 0.99) * 1e6,
    }


def bench_engine(n: int) -> dict[str, Any]:
    from engine.simulation.client import Cluster

    cluster = Cluster.start(seed=1, topics={"bench": 1}, record_machines=False)
    client = cluster.client()
    consumer = client.subscribe("bench", "sub")
    producer = client.create_producer("bench")
    sends, receives = [], []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        producer.send(f"m{i}")
        sends.append(time.perf_counter() - t)
    for _ in range(n):
        t = time.perf_counter()
        message = consumer.receive(timeout_millis=1000)
        assert message is not None
        consumer.acknowledge(message)
        receives.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    cluster.close()
    return _summary("engine", total, sends, receives, n)


def bench_serve(n: int, ledger: str) -> dict[str, Any]:
    import pulsar

    from runners.serve import serve
    from spec.config import Config

    data = tempfile.mkdtemp(prefix="serve-bench-") if ledger == "file" else None
    with serve(ledger=ledger, data=data, config=Config(transaction_coordinator_enabled=True)) as url:
        client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe("bench", "sub")
        producer = client.create_producer("bench")
        sends, receives = [], []
        start = time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            producer.send(f"m{i}".encode())
            sends.append(time.perf_counter() - t)
        for _ in range(n):
            t = time.perf_counter()
            message = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(message)
            receives.append(time.perf_counter() - t)
        total = time.perf_counter() - start
        client.close()
    return _summary(f"serve-{ledger}", total, sends, receives, n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--out", default="out/serve_bench")
    args = parser.parse_args(argv)
    from views.progress import Reporter

    progress = Reporter()
    with progress.phase("serve_bench: warm up", unit=""):
        bench_engine(200)  # warm imports and caches on both sides before anything is timed
        bench_serve(200, "memory")
    rows: list[dict[str, Any]] = []
    with progress.phase("serve_bench", total=3, unit="ways") as phase:
        rows.append(bench_engine(args.messages))
        phase.advance(note="in-process engine")
        for ledger in ("memory", "file"):
            rows.append(bench_serve(args.messages, ledger))
            phase.advance(note=f"serve, {ledger} ledger")
    anchor = rows[0]["us_per_message"]
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  (2 cores shared; ratios, not absolute times)")
    print(f"{'way':<14}{'msg/s':>9}{'us/msg':>9}{'ratio':>7}{'send p50':>10}{'p99':>8}{'recv+ack p50':>14}{'p99':>8}")
    for row in rows:
        row["ratio_to_engine"] = row["us_per_message"] / anchor
        print(
            f"{row['way']:<14}{row['messages_per_s']:>9.0f}{row['us_per_message']:>9.0f}{row['ratio_to_engine']:>7.2f}"
            f"{row['send_p50_us']:>10.0f}{row['send_p99_us']:>8.0f}{row['receive_p50_us']:>14.0f}"
            f"{row['receive_p99_us']:>8.0f}"
        )
    ratio = rows[1]["ratio_to_engine"]
    verdict = "met" if ratio < 2 else "NOT met"
    print(f"wire cost on the memory ledger: {ratio:.2f}x the in-process engine (goal < 2x): {verdict}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve_bench.json").write_text(json.dumps({"load_average": load, "rows": rows}, indent=1))
    print(f"wrote {out / 'serve_bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
