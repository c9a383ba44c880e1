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

Times are process CPU seconds (the benchmark is single-threaded), so a busy machine does not
skew one side of a ratio.

Usage: ``.venv/bin/python benchmarks/delayed_bench.py [--messages 10000000] [--ledgers 1000]``.
The default run takes several minutes; ``--messages 1000000`` is a quick look.
"""

from __future__ import annotations

import argparse
import gc
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

from reference import delayed as d
from reference.engine.bucket_storage import decode_metadata, decode_segment, encode_segment
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
    rng = random.Random(seed)
    per_ledger = count // ledgers
    for ledger in range(1, ledgers + 1):
        for entry in range(per_ledger):
            yield ledger, entry, 172_800_000 + rng.randrange(600_000)


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--ledgers", type=int, default=1000)
    parser.add_argument("--drain", type=int, default=1_000_000, help="messages delivered for the get throughput")
    args = parser.parse_args()
    n, ledgers = args.messages - args.messages % args.ledgers, args.ledgers
    config = Config()  # Pulsar's defaults for every delayedDelivery* key
    print(f"{n:,} delayed messages over {ledgers:,} ledgers, Pulsar default bucket settings", flush=True)

    bucket, bucket_add_s = build(d.initial(config, tracker="bucket"), n, ledgers)
    assert isinstance(bucket, d.BucketTracker) and bucket.count == n
    gc.collect()
    bucket_bytes = resident_bytes(bucket)
    print(f"bucket tracker built in {bucket_add_s:.1f} s: {len(bucket.buckets)} buckets", flush=True)

    memory, memory_add_s = build(d.initial(config, tracker="in_memory"), n, ledgers)
    assert memory.count == n
    gc.collect()
    memory_bytes = resident_bytes(memory)
    print(f"in-memory tracker built in {memory_add_s:.1f} s", flush=True)

    recovered, result, recover_s = recover_from_bytes(bucket)
    assert result.ok and recovered.count == sum(b.count for b in bucket.buckets)
    replay_s = memory_add_s  # rebuilding the in-memory index = replaying every message into it

    drain_n = min(args.drain, n)
    bucket_got, bucket_get_s = drain(bucket, drain_n)
    memory_got, memory_get_s = drain(memory, drain_n)

    print()
    print("memory (resident state, snapshot store excluded)")
    print(f"  bucket      {bucket_bytes / n:8.3f} B/message  ({bucket_bytes / 2**20:,.1f} MiB)   target < 2")
    print(
        f"  in-memory   {memory_bytes / n:8.3f} B/message  ({memory_bytes / 2**20:,.1f} MiB)"
        f"   Pulsar's TripleLongPriorityQueue: {PULSAR_IN_MEMORY_BYTES}"
    )
    print(f"  ratio in-memory / bucket: {memory_bytes / bucket_bytes:.1f}x")
    print("recovery of the whole index")
    print(
        f"  from bucket snapshots  {recover_s:8.3f} s  ({recovered.count:,} messages indexed,"
        f" {n / recover_s:,.0f} msg/s)"
    )
    print(f"  replay into in-memory  {replay_s:8.2f} s  ({n / replay_s:,.0f} msg/s)")
    print(f"  ratio replay / snapshots: {replay_s / recover_s:.1f}x   target >= 50")
    pub_mem = PUBLISHED_IN_MEMORY[0] / PUBLISHED_IN_MEMORY[1]
    pub_bucket = PUBLISHED_BUCKET[0] / PUBLISHED_BUCKET[1]
    print(
        f"  published (Pulsar 3.0.4): in-memory 35 M in 6,120 s ({pub_mem:,.0f} msg/s), "
        f"buckets 100 M in 90 s ({pub_bucket:,.0f} msg/s): {pub_bucket / pub_mem:.0f}x"
    )
    print("throughput")
    print(
        f"  add      bucket {n / bucket_add_s:10,.0f} msg/s   in-memory {n / memory_add_s:10,.0f} msg/s"
        f"   ratio {memory_add_s / bucket_add_s:.2f}"
    )
    print(
        f"  get      bucket {bucket_got / bucket_get_s:10,.0f} msg/s   in-memory {memory_got / memory_get_s:10,.0f}"
        f" msg/s   ratio {memory_get_s * bucket_got / (bucket_get_s * memory_got):.2f}"
        f"  ({bucket_got:,} / {memory_got:,} delivered)"
    )
    return 0


if __name__ == "__main__":
    from txnmodel.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("delayed_bench", unit=""):
        code = main()
    raise SystemExit(code)
