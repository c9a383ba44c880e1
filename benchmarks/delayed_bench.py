"""PIP-195 benchmark: bucket tracker vs the in-memory baseline, measured side by side in one run.

Figures (printed as ratios of two measurements of this run, plus Pulsar's published numbers):

1. resident memory per tracked message with ``--messages`` delayed messages over ``--ledgers``
   ledgers, Pulsar's default bucket settings (minIndex 50000, 300 s segments, 5000 indexes per
   segment), deliver-at spread over a 600 s window as in coderzc's Pulsar 3.0 test.  "Resident"
   is the tracker state without its snapshot store (that is BookKeeper, not broker memory):
   a deep walk of the immutable state, counting roaring bitmaps by their container bytes.
   Target: bucket < 2 B/message; Pulsar's in-memory tracker costs 24 B/message.
2. recovery of a tracker holding all messages: ``recover()`` from the bucket snapshots vs
   rebuilding the in-memory tracker by replaying every message.  Target >= 50x.  Published:
   in-memory 35 M messages in 6,120 s vs buckets 100 M in 90 s.
3. throughput of add and of get_scheduled_messages (batches of 1000), bucket vs in-memory.

The two trackers are measured side by side in two processes (one core each); times are each
process's CPU seconds, so a busy machine does not skew one side of a ratio.  The wall time of
the whole run is printed with the load average.  Writes ``out/delayed_bench/report.txt``.

Usage: ``.venv/bin/python benchmarks/delayed_bench.py [--messages 10000000] [--ledgers 1000]``.
The default run takes a few minutes; ``--messages 1000000`` is a quick look.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import immutables
from pyroaring import BitMap, FrozenBitMap

from engine.delayed.bucket_storage import decode_metadata, decode_segment, encode_segment
from reference import delayed as d
from spec.config import Config
from spec.pb import DelayedMessageIndexBucketMetadata_pb2 as metadata_pb

PULSAR_IN_MEMORY_BYTES = 24
PUBLISHED_IN_MEMORY = (35_000_000, 6120.0)
PUBLISHED_BUCKET = (100_000_000, 90.0)


def resident_bytes(root: Any, *, skip: tuple[str, ...] = ("storage",)) -> int:
    """Deep size of an immutable state; shared objects counted once."""
    seen: set[int] = set()
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or obj is None or isinstance(obj, bool | type):
            continue
        seen.add(id(obj))
        if isinstance(obj, FrozenBitMap | BitMap):
            stats = obj.get_statistics()
            total += sys.getsizeof(obj) + sum(v for k, v in stats.items() if k.startswith("n_bytes_"))
            total += 16 * stats["n_containers"]  # container headers
            continue
        total += sys.getsizeof(obj)
        if is_dataclass(obj) and not isinstance(obj, type):
            stack.extend(getattr(obj, f.name) for f in fields(obj) if f.name not in skip)
        elif isinstance(obj, immutables.Map):
            for k, v in obj.items():
                stack.append(k)
                stack.append(v)
        elif isinstance(obj, tuple | list | frozenset | set):
            stack.extend(obj)
    return total


def messages(count: int, ledgers: int, seed: int = 7) -> Iterator[tuple[int, int, int]]:
    """Messages in publish order: ledger by ledger, deliver-at 172,800-173,400 s after t=0."""
    bits = random.Random(seed).getrandbits
    per_ledger = count // ledgers
    for ledger in range(1, ledgers + 1):
        for entry in range(per_ledger):
            yield ledger, entry, 172_800_000 + bits(32) % 600_000


def build(state: d.Tracker, count: int, ledgers: int) -> tuple[d.Tracker, float]:
    started = time.process_time()
    step = d.step
    add = d.AddMessage
    for ledger, entry, deliver_at in messages(count, ledgers):
        state, _ = step(state, add(ledger, entry, deliver_at, 0))
    return state, time.process_time() - started


def drain(state: d.Tracker, limit: int) -> tuple[int, float]:
    """Deliver ``limit`` messages in batches of 1000 with the clock past every deliver-at."""
    started = time.process_time()
    delivered = 0
    while delivered < limit:
        state, result = d.step(state, d.GetScheduledMessages(1000, 200_000_000))
        assert result.ok
        got = len(result.value)  # type: ignore[union-attr]
        if got == 0:
            break
        delivered += got
    return delivered, time.process_time() - started


def recover_from_bytes(tracker: d.BucketTracker) -> tuple[d.BucketTracker, Any, float]:
    """Recovery as a broker does it: parse each bucket's entry 0 (metadata, roaring bitmaps) and
    its first live segment from their serialized bytes, then build the index.  Every segment
    is due after t=0, so segment 1 is the one recovery reads."""
    encoded = {
        bucket_id: (
            dd_meta(snapshot),
            encode_segment(snapshot.segments[0]),
            len(snapshot.segments),
            snapshot,
        )
        for bucket_id, snapshot in tracker.storage.snapshots.items()
    }
    placeholder = d.Run(b"")
    started = time.process_time()
    snapshots = {}
    for bucket_id, (metadata_bytes, segment_bytes, n_segments, snapshot) in encoded.items():
        metadata = decode_metadata(metadata_bytes)
        first = decode_segment(segment_bytes)
        segments = (first, *([placeholder] * (n_segments - 1)))
        snapshots[bucket_id] = d.Snapshot(
            snapshot.start_ledger_id, snapshot.end_ledger_id, metadata, segments, snapshot.length
        )
    storage = d.Storage(immutables.Map(snapshots), tracker.storage.properties, tracker.storage.next_bucket_id)
    recovered, result = d.recover(tracker.params, storage, 0)
    return recovered, result, time.process_time() - started


def dd_meta(snapshot: d.Snapshot) -> bytes:
    return bytes(d.encode_metadata(snapshot.metadata, metadata_pb).SerializeToString())


def measure(tracker: str, n: int, ledgers: int, drain_n: int) -> dict[str, Any]:
    """One tracker's figures, in a process of its own: build, resident bytes, (bucket) recovery
    from the snapshots' bytes, drain."""
    state, add_s = build(d.initial(Config(), tracker=tracker), n, ledgers)  # Pulsar's defaults
    assert state.count == n
    gc.collect()
    out: dict[str, Any] = {"add_s": add_s, "bytes": resident_bytes(state)}
    print(f"{tracker} tracker built in {add_s:.1f} s", file=sys.stderr, flush=True)
    if isinstance(state, d.BucketTracker):
        recovered, result, recover_s = recover_from_bytes(state)
        assert result.ok and recovered.count == sum(b.count for b in state.buckets)
        out.update(recover_s=recover_s, recovered=recovered.count, buckets=len(state.buckets))
    out["got"], out["get_s"] = drain(state, drain_n)
    out["cpu_s"] = time.process_time()  # everything this process did, from its start
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--ledgers", type=int, default=1000)
    parser.add_argument("--drain", type=int, default=1_000_000, help="messages delivered for the get throughput")
    parser.add_argument("--out", type=Path, default=Path("out/delayed_bench"))
    args = parser.parse_args()
    n, ledgers = args.messages - args.messages % args.ledgers, args.ledgers
    drain_n = min(args.drain, n)
    started, load_before = time.perf_counter(), os.getloadavg()
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    say(f"{n:,} delayed messages over {ledgers:,} ledgers, Pulsar default bucket settings")
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        bucket_job = pool.apply_async(measure, ("bucket", n, ledgers, drain_n))
        memory_job = pool.apply_async(measure, ("in_memory", n, ledgers, drain_n))
        bucket, memory = bucket_job.get(), memory_job.get()
    wall_s, load_after = time.perf_counter() - started, os.getloadavg()
    bucket_bytes, memory_bytes = bucket["bytes"], memory["bytes"]
    recover_s = bucket["recover_s"]
    replay_s = memory["add_s"]  # rebuilding the in-memory index = replaying every message into it

    say(f"bucket tracker: {bucket['buckets']} buckets")
    say()
    say("memory (resident state, snapshot store excluded)")
    say(f"  bucket      {bucket_bytes / n:8.3f} B/message  ({bucket_bytes / 2**20:,.1f} MiB)   target < 2")
    say(
        f"  in-memory   {memory_bytes / n:8.3f} B/message  ({memory_bytes / 2**20:,.1f} MiB)"
        f"   Pulsar's TripleLongPriorityQueue: {PULSAR_IN_MEMORY_BYTES}"
    )
    say(f"  ratio in-memory / bucket: {memory_bytes / bucket_bytes:.1f}x")
    say("recovery of the whole index")
    say(
        f"  from bucket snapshots  {recover_s:8.3f} s  ({bucket['recovered']:,} messages indexed,"
        f" {n / recover_s:,.0f} msg/s)"
    )
    say(f"  replay into in-memory  {replay_s:8.2f} s  ({n / replay_s:,.0f} msg/s)")
    say(f"  ratio replay / snapshots: {replay_s / recover_s:.1f}x   target >= 50")
    pub_mem = PUBLISHED_IN_MEMORY[0] / PUBLISHED_IN_MEMORY[1]
    pub_bucket = PUBLISHED_BUCKET[0] / PUBLISHED_BUCKET[1]
    say(
        f"  published (Pulsar 3.0.4): in-memory 35 M in 6,120 s ({pub_mem:,.0f} msg/s), "
        f"buckets 100 M in 90 s ({pub_bucket:,.0f} msg/s): {pub_bucket / pub_mem:.0f}x"
    )
    say("throughput")
    say(
        f"  add      bucket {n / bucket['add_s']:10,.0f} msg/s   in-memory {n / memory['add_s']:10,.0f} msg/s"
        f"   ratio {memory['add_s'] / bucket['add_s']:.2f}"
    )
    say(
        f"  get      bucket {bucket['got'] / bucket['get_s']:10,.0f} msg/s"
        f"   in-memory {memory['got'] / memory['get_s']:10,.0f} msg/s"
        f"   ratio {memory['get_s'] * bucket['got'] / (bucket['get_s'] * memory['got']):.2f}"
        f"  ({bucket['got']:,} / {memory['got']:,} delivered)"
    )
    say(f"wall time {wall_s:.0f} s on {os.cpu_count()} cores (the two trackers in parallel)   target < 180")
    busiest = max(bucket["cpu_s"], memory["cpu_s"])
    say(
        f"  CPU seconds per process: bucket {bucket['cpu_s']:.0f}, in-memory {memory['cpu_s']:.0f}"
        f" (on two idle cores the run takes about {busiest:.0f} s plus the start of the processes;"
        f" the wall time above is {wall_s / busiest:.1f}x that)"
    )
    say(
        f"load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} before,"
        f" {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} after"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    from views.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("delayed_bench", unit=""):
        code = main()
    raise SystemExit(code)
