"""What the wire costs: the official client against ``txnmodel serve`` beside the in-process engine.

One workload, five ways, in one run (ratios, never absolute times):

* ``engine``: the in-process client (:mod:`engine.simulation.client`) on the memory ledger, the
  simulation run as fast as it goes (no history recording, as serve runs without ``--history``);
* ``serve-memory``, ``serve-file``: the official ``pulsar-client`` over a loopback socket to
  ``txnmodel serve`` on the memory and the file ledger, without compression;
* ``serve-memory-lz4``, ``serve-file-lz4``: the same with the producer compressing with LZ4 (the
  broker stores and delivers the compressed bytes and reads each message through the codec).

The workload: ``--messages`` synchronous sends of a 200-byte text record (each waits for its
receipt), then as many receives each followed by an acknowledgement, on one topic with one
Exclusive subscription.  Reported per way: the produce rate (sends/s), the consume rate
(receive+ack/s), send latency p50/p99, and the time per message against the engine's.  The goal:
serve on the memory ledger costs less than 2x the engine's time per message.

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


def _record(i: int) -> str:
    """A 200-byte text record, compressible as JSON-like payloads are."""
    text = f'{{"order": {i}, "customer": "c-{i % 97}", "items": ["book", "pen"], "state": "placed", "note": "'
    return (text + "x" * 200)[:198] + '"}'


def _summary(name: str, produce_s: float, consume_s: float, sends: list[float], n: int) -> dict[str, Any]:
    total_s = produce_s + consume_s
    return {
        "way": name,
        "messages": n,
        "seconds": total_s,
        "messages_per_s": n / total_s,
        "us_per_message": total_s / n * 1e6,
        "produce_per_s": n / produce_s,
        "consume_per_s": n / consume_s,
        "send_p50_us": _percentile(sends, 0.5) * 1e6,
        "send_p99_us": _percentile(sends, 0.99) * 1e6,
    }


def bench_engine(n: int) -> dict[str, Any]:
    from engine.simulation.client import Cluster

    cluster = Cluster.start(seed=1, topics={"bench": 1}, record_machines=False)
    client = cluster.client()
    consumer = client.subscribe("bench", "sub")
    producer = client.create_producer("bench")
    sends = []
    start = time.perf_counter()
    for i in range(n):
        t = time.perf_counter()
        producer.send(_record(i))
        sends.append(time.perf_counter() - t)
    produced = time.perf_counter()
    for _ in range(n):
        message = consumer.receive(timeout_millis=1000)
        assert message is not None
        consumer.acknowledge(message)
    consumed = time.perf_counter()
    cluster.close()
    return _summary("engine", produced - start, consumed - produced, sends, n)


def bench_serve(n: int, ledger: str, compression: str = "NONE") -> dict[str, Any]:
    import pulsar

    from runners.serve import serve
    from spec.config import Config

    codec = {"NONE": pulsar.CompressionType.NONE, "LZ4": pulsar.CompressionType.LZ4}[compression]
    data = tempfile.mkdtemp(prefix="serve-bench-") if ledger == "file" else None
    with serve(ledger=ledger, data=data, config=Config(transaction_coordinator_enabled=True)) as url:
        client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        consumer = client.subscribe("bench", "sub")
        producer = client.create_producer("bench", compression_type=codec)
        sends = []
        start = time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            producer.send(_record(i).encode())
            sends.append(time.perf_counter() - t)
        produced = time.perf_counter()
        for _ in range(n):
            message = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(message)
        consumed = time.perf_counter()
        client.close()
    suffix = "" if compression == "NONE" else f"-{compression.lower()}"
    return _summary(f"serve-{ledger}{suffix}", produced - start, consumed - produced, sends, n)


WAYS = [("memory", "NONE"), ("memory", "LZ4"), ("file", "NONE"), ("file", "LZ4")]


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
    with progress.phase("serve_bench", total=1 + len(WAYS), unit="ways") as phase:
        rows.append(bench_engine(args.messages))
        phase.advance(note="in-process engine")
        for ledger, compression in WAYS:
            rows.append(bench_serve(args.messages, ledger, compression))
            phase.advance(note=f"serve, {ledger} ledger, compression {compression}")
    engine = rows[0]
    load = os.getloadavg()
    print(f"load average: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}  (2 cores shared; ratios, not absolute times)")
    print(
        f"{'way':<18}{'produce/s':>10}{'consume/s':>10}{'send p50 us':>12}{'p99 us':>8}"
        f"{'us/msg':>8}{'x engine':>9}{'produce x':>10}{'consume x':>10}"
    )
    for row in rows:
        row["ratio_to_engine"] = row["us_per_message"] / engine["us_per_message"]
        row["produce_ratio_to_engine"] = engine["produce_per_s"] / row["produce_per_s"]
        row["consume_ratio_to_engine"] = engine["consume_per_s"] / row["consume_per_s"]
        print(
            f"{row['way']:<18}{row['produce_per_s']:>10.0f}{row['consume_per_s']:>10.0f}{row['send_p50_us']:>12.0f}"
            f"{row['send_p99_us']:>8.0f}{row['us_per_message']:>8.0f}{row['ratio_to_engine']:>9.2f}"
            f"{row['produce_ratio_to_engine']:>10.2f}{row['consume_ratio_to_engine']:>10.2f}"
        )
    by_way = {row["way"]: row for row in rows}
    ratio = by_way["serve-memory"]["ratio_to_engine"]
    verdict = "met" if ratio < 2 else "NOT met"
    print(f"wire cost on the memory ledger: {ratio:.2f}x the in-process engine (goal < 2x): {verdict}")
    for ledger in ("memory", "file"):
        lz4 = by_way[f"serve-{ledger}-lz4"]["us_per_message"] / by_way[f"serve-{ledger}"]["us_per_message"]
        print(f"LZ4 on the {ledger} ledger: {lz4:.2f}x the time per message without compression")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "serve_bench.json").write_text(json.dumps({"load_average": load, "rows": rows}, indent=1))
    print(f"wrote {out / 'serve_bench.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
