"""PIP-160 batched log writer benchmark (issue 6): ratios measured side by side in one run.

Setup: the file ledger with an fsync per entry (``FileLedger(group_commit=False)``), 64 concurrent
writer threads of 100-byte ``TransactionMetadataEntry`` records, Pulsar's default thresholds
(512 records, 4 MiB, 1 ms).  Phases, all in this process, one after the other:

1. **disk**: the disk's own limit, through the same calls the file ledger makes (pwrite, then
   fdatasync): 100-byte appends each followed by a sync (syncs/s), and 1 MiB appends each
   followed by a sync (bytes/s).
2. **policy ceiling**: the pure machine alone (``reference.batched_log.step``), no threads and
   no I/O: how many records per second the Python policy itself can take.
3. **throughput**: the engine writer, unbatched then batched; every writer keeps ``--window``
   records outstanding (pipelined, as many transactions of one coordinator are); durable
   records/s = records whose callback reported success, over the wall time including the drain.
4. **latency**: batched, every writer waits for each record's callback before sending the next
   (64 outstanding in all).  Two latencies: the *added* latency of batching, i.e. how long the
   oldest record of each batch waited in the buffer (what Pulsar's
   ``batch_oldest_record_delay`` histogram measures), against ``maxDelay``; and the end-to-end
   add-to-callback latency against ``maxDelay`` plus one sync of phase 1.

Phases 1, 3 and 4 run in ``--rounds`` interleaved rounds and every ratio is taken within its
round, so a disk whose speed drifts during the run (a shared machine) skews no ratio; the median
of the rounds is printed with each round's value.

Usage: ``.venv/bin/python benchmarks/batched_log_bench.py [--seconds 4] [--writers 64]``.
Prints one table and the ratios against the issue's targets.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.storage.batched_writer import BatchedLogWriter
from engine.storage.file_ledger import FileLedger, OsFileSystem
from reference import batched_log as bl
from spec.config import Config
from spec.envelope import LogKind
from spec.types import Position

RECORD_BYTES = 100


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- phase 1: the disk ---------------------------------------------------------------------------


def disk_limits(directory: Path, seconds: float) -> dict[str, float]:
    """The disk through the same calls the file ledger makes (``OsFileSystem``: pwrite, then
    fdatasync where the OS has it)."""
    fs = OsFileSystem()
    path = directory / "disk-probe"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    small = b"x" * RECORD_BYTES
    times: list[float] = []
    offset = 0
    try:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            started = time.perf_counter()
            fs.pwrite(fd, small, offset)
            fs.sync(fd)
            offset += len(small)
            times.append(time.perf_counter() - started)
        big = b"y" * (1024 * 1024)
        written = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            fs.pwrite(fd, big, offset)
            fs.sync(fd)
            offset += len(big)
            written += len(big)
        big_elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return {
        "fsyncs_per_s": len(times) / sum(times),
        "fsync_p50_ms": percentile(times, 0.5) * 1000,
        "fsync_p99_ms": percentile(times, 0.99) * 1000,
        "bytes_per_s": written / big_elapsed,
    }


# --- phase 2: the pure policy ----------------------------------------------------------------------


def policy_ceiling(seconds: float) -> float:
    config = Config().with_overrides({"transactionLogBatchedWriteEnabled": True})
    state = bl.initial(config, LogKind.TRANSACTION_LOG)
    record = bl.sample_record(RECORD_BYTES, 1)
    count = 0
    entry = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(1000):
            state, result = bl.step(state, bl.AsyncAddData(record, 0))
            for effect in result.effects:
                if isinstance(effect, bl.AsyncAddEntry):
                    state, _ = bl.step(state, bl.AddEntryComplete(effect.write_id, Position(1, entry)))
                    entry += 1
        count += 1000
    return count / (time.perf_counter() - started)


# --- phases 3 and 4: the engine over the file ledger -------------------------------------------------


class Load:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ok = 0
        self.failed = 0
        self.latencies: list[float] = []


class BufferWaits:
    """Each batch flush's oldest-record wait (ms): the latency that batching itself adds."""

    def __init__(self) -> None:
        self.delays: list[int] = []

    def observe(self, flush: bl.FlushObserved) -> None:
        self.delays.append(flush.delay_ms)


def run_engine(
    directory: Path, *, enabled: bool, writers: int, window: int, seconds: float, closed_loop: bool
) -> dict[str, Any]:
    shutil.rmtree(directory, ignore_errors=True)
    ledger = FileLedger(directory, group_commit=False)
    config = Config().with_overrides({"transactionLogBatchedWriteEnabled": enabled})
    waits = BufferWaits()
    writer = BatchedLogWriter(ledger, bl.writer_config(config, LogKind.TRANSACTION_LOG), metrics=waits)
    load = Load()
    stop = threading.Event()
    records = [bl.sample_record(RECORD_BYTES, i % 128) for i in range(128)]
    outstanding = 1 if closed_loop else window

    def one_writer(index: int) -> None:
        slots = threading.Semaphore(outstanding)
        sent = 0
        while not stop.is_set():
            slots.acquire()
            if stop.is_set():
                slots.release()
                break
            started = time.perf_counter()

            def done(position: Any, error: Any, started: float = started) -> None:
                elapsed = time.perf_counter() - started
                with load.lock:
                    if error is None:
                        load.ok += 1
                        load.latencies.append(elapsed)
                    else:
                        load.failed += 1
                slots.release()

            writer.add_with_callback(records[(index + sent) % 128], done)
            sent += 1
        for _ in range(outstanding):  # wait for this writer's outstanding records
            slots.acquire()

    threads = [threading.Thread(target=one_writer, args=(i,), daemon=True) for i in range(writers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    stats = writer.state.stats
    writer.close()
    entries = writer.entries_written
    ledger.close()
    shutil.rmtree(directory, ignore_errors=True)
    return {
        "records_per_s": load.ok / elapsed,
        "entries_per_s": entries / elapsed,
        "records": load.ok,
        "failed": load.failed,
        "records_per_entry": load.ok / entries if entries else float("nan"),
        "p50_ms": percentile(load.latencies, 0.5) * 1000,
        "p99_ms": percentile(load.latencies, 0.99) * 1000,
        "wait_p99_ms": percentile([float(d) for d in waits.delays], 0.99),
        "wait_max_ms": max(waits.delays, default=0),
        "triggers": (stats.max_records, stats.max_size, stats.max_delay, stats.large_data),
    }


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of each engine phase per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of disk / unbatched / batched / latency")
    parser.add_argument("--writers", type=int, default=64)
    parser.add_argument("--window", type=int, default=32, help="outstanding records per writer (throughput phase)")
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    args = parser.parse_args(argv)
    sys.setswitchinterval(0.0005)  # 64 producer threads: let the writer thread get the GIL back quickly
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="batched-log-bench-"))
    base.mkdir(parents=True, exist_ok=True)
    rounds: list[dict[str, Any]] = []
    try:
        ceiling = policy_ceiling(min(args.seconds, 2.0))
        for _ in range(args.rounds):
            # Interleaved, so that a disk whose speed drifts (shared machines) affects every
            # configuration of a round alike; each ratio is taken within its round.
            rounds.append(
                {
                    "disk": disk_limits(base, min(args.seconds, 1.0)),
                    "unbatched": run_engine(
                        base / "unbatched",
                        enabled=False,
                        writers=args.writers,
                        window=args.window,
                        seconds=args.seconds,
                        closed_loop=False,
                    ),
                    "batched": run_engine(
                        base / "batched",
                        enabled=True,
                        writers=args.writers,
                        window=args.window,
                        seconds=args.seconds,
                        closed_loop=False,
                    ),
                    "latency": run_engine(
                        base / "latency",
                        enabled=True,
                        writers=args.writers,
                        window=1,
                        seconds=args.seconds,
                        closed_loop=True,
                    ),
                }
            )
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)

    max_delay_ms = Config().transaction_log_batched_write_max_delay_in_millis
    print(
        f"PIP-160 batched log benchmark: file ledger, fsync per entry, {args.writers} writers, "
        f"{RECORD_BYTES}-byte records, defaults 512 records / 4 MiB / {max_delay_ms} ms, "
        f"{args.rounds} interleaved rounds of {args.seconds:g} s"
    )
    print(f"policy ceiling: {ceiling:.0f} records/s (pure step, one thread, no I/O)")
    for i, r in enumerate(rounds, start=1):
        d = r["disk"]
        print(
            f"round {i}: disk {d['fsyncs_per_s']:.0f} fsyncs/s (p50 {d['fsync_p50_ms']:.2f} ms, p99 "
            f"{d['fsync_p99_ms']:.2f} ms), {d['bytes_per_s'] / 1e6:.1f} MB/s with fsync per MiB"
        )
        for name in ("unbatched", "batched", "latency"):
            e = r[name]
            window = 1 if name == "latency" else args.window
            label = f"{'batched' if name == 'latency' else name}, {window} outstanding/writer"
            print(
                f"  {label:<32} {e['records_per_s']:>8.0f} records/s {e['entries_per_s']:>7.0f} entries/s "
                f"{e['records_per_entry']:>6.1f} rec/entry  latency p50 {e['p50_ms']:7.2f} ms "
                f"p99 {e['p99_ms']:7.2f} ms"
                f"  buffer wait p99 {e['wait_p99_ms']:.0f} ms max {e['wait_max_ms']} ms  failed {e['failed']}  "
                f"triggers {e['triggers']}"
            )

    speedups = [r["batched"]["records_per_s"] / r["unbatched"]["records_per_s"] for r in rounds]
    per_entry = [r["batched"]["records_per_entry"] for r in rounds]
    wait_p99 = [r["latency"]["wait_p99_ms"] for r in rounds]
    wait_p99_saturated = [r["batched"]["wait_p99_ms"] for r in rounds]
    e2e_p99 = [r["latency"]["p99_ms"] for r in rounds]
    bound = [max_delay_ms + r["disk"]["fsync_p50_ms"] for r in rounds]
    bound99 = [max_delay_ms + r["disk"]["fsync_p99_ms"] for r in rounds]
    vs_fsync = [r["batched"]["records_per_s"] / r["disk"]["fsyncs_per_s"] for r in rounds]
    unbatched_vs_fsync = [r["unbatched"]["records_per_s"] / r["disk"]["fsyncs_per_s"] for r in rounds]
    entries_vs_fsync = [r["batched"]["entries_per_s"] / r["disk"]["fsyncs_per_s"] for r in rounds]
    bytes_vs_disk = [r["batched"]["records_per_s"] * RECORD_BYTES / r["disk"]["bytes_per_s"] for r in rounds]
    vs_ceiling = [r["batched"]["records_per_s"] / ceiling for r in rounds]

    def show(values: list[float]) -> str:
        return "  ".join(f"{v:.2f}" for v in values)

    print()
    print("ratios (median of rounds; each round's value follows)")
    print(f"  batched / unbatched durable records/s        {median(speedups):8.1f}x  [{show(speedups)}]  target >= 50x")
    print(
        f"  records per entry, batched                   {median(per_entry):8.1f}   [{show(per_entry)}]  target >= 100"
    )
    print(
        f"  added latency (buffer wait) p99 / maxDelay   {median(wait_p99) / max_delay_ms:8.2f}   "
        f"[{show([w / max_delay_ms for w in wait_p99])}]  target <= 1 (+ clock ms rounding)"
    )
    print(
        f"  same, writers saturating the writer thread   {median(wait_p99_saturated) / max_delay_ms:8.2f}   "
        f"[{show([w / max_delay_ms for w in wait_p99_saturated])}]  (executor queueing)"
    )
    print(
        f"  end-to-end p99 / (maxDelay + p50 fsync)      "
        f"{median([a / b for a, b in zip(e2e_p99, bound, strict=True)]):8.2f}   "
        f"[{show([a / b for a, b in zip(e2e_p99, bound, strict=True)])}]  target <= 1"
    )
    print(
        f"  end-to-end p99 / (maxDelay + p99 fsync)      "
        f"{median([a / b for a, b in zip(e2e_p99, bound99, strict=True)]):8.2f}   "
        f"[{show([a / b for a, b in zip(e2e_p99, bound99, strict=True)])}]"
    )
    print(f"  batched records/s / disk fsyncs/s            {median(vs_fsync):8.1f}x  [{show(vs_fsync)}]")
    print(
        f"  unbatched records/s / disk fsyncs/s          {median(unbatched_vs_fsync):8.2f}   "
        f"[{show(unbatched_vs_fsync)}]"
    )
    print(f"  batched entries/s / disk fsyncs/s           {median(entries_vs_fsync):8.2f}   [{show(entries_vs_fsync)}]")
    print(f"  batched payload bytes/s / disk bytes/s       {median(bytes_vs_disk):8.3f}   [{show(bytes_vs_disk)}]")
    print(f"  batched records/s / policy ceiling           {median(vs_ceiling):8.2f}   [{show(vs_ceiling)}]")
    return 0


if __name__ == "__main__":
    from views.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("batched_log_bench", unit=""):
        code = main()
    raise SystemExit(code)
