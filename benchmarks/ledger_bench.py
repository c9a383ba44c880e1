"""Managed-ledger append throughput: memory vs file (a sync per entry) vs file with group commit.

Setup: ``--threads`` (default 16) threads append ``--size``-byte entries (default 100) to one
ledger for ``--seconds`` (default 3) per variant, every append waiting for its own
acknowledgement, as a broker's add-entry path does.  Variants, one after the other in this process:

1. ``memory``: :class:`MemoryLedger` (no I/O: the cost of the interface and the lock);
2. ``file``: :class:`FileLedger` with ``group_commit=False`` (one journal ``fdatasync`` per entry,
   under the ledger lock; the entry's frame is written behind to its ledger file);
3. ``file+group``: :class:`FileLedger` with ``group_commit=True`` (concurrent appenders share one
   sync of its journal);
4. ``store``: four ledgers of one :class:`FileStore`, thread i appending to ledger i mod 4: every
   ledger's appends share the one journal's syncs.

Prints appends/s per variant, the mean entries per sync of variant 3, and the ratios, all from
this one run (absolute rates on a shared or virtualised disk swing from run to run; the ratios
of one run are what to compare).

Usage: ``.venv/bin/python benchmarks/ledger_bench.py [--seconds 3] [--threads 16] [--size 100]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.storage.file_ledger import FileLedger, OsFileSystem
from engine.storage.file_store import FileStore
from engine.storage.ledger import ManagedLedger
from engine.storage.memory_ledger import MemoryLedger
from spec.config import Config


class CountingFileSystem(OsFileSystem):
    """Counts syncs of ledger files, to report how many entries one group sync carried."""

    def __init__(self) -> None:
        self.syncs = 0
        self._lock = threading.Lock()

    def sync(self, fd: int) -> None:
        super().sync(fd)
        with self._lock:
            self.syncs += 1


def run_appenders(ml: ManagedLedger, threads: int, seconds: float, payload: bytes) -> int:
    stop = threading.Event()
    counts = [0] * threads
    start_line = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        start_line.wait()
        done = 0
        while not stop.is_set():
            ml.append(payload)
            done += 1
        counts[index] = done

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    start_line.wait()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join()
    return sum(counts)


def run_appenders_to(ledgers: list[FileLedger], threads: int, seconds: float, payload: bytes) -> int:
    """``threads`` threads, thread i appending to ``ledgers[i % len(ledgers)]``; returns the appends."""
    stop = threading.Event()
    counts = [0] * threads
    start_line = threading.Barrier(threads + 1)

    def worker(index: int) -> None:
        start_line.wait()
        done = 0
        ml = ledgers[index % len(ledgers)]
        while not stop.is_set():
            ml.append(payload)
            done += 1
        counts[index] = done

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    start_line.wait()
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join()
    return sum(counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--dir", help="where the ledger directories go (default: a temporary directory)")
    args = parser.parse_args(argv)
    payload = os.urandom(args.size)
    # Roll over rarely, as with Pulsar's defaults; the point is the append path.
    config = Config()
    base = tempfile.mkdtemp(prefix="ledger-bench-", dir=args.dir)
    rows: list[tuple[str, float, str]] = []
    try:

        def timed(name: str, make: Callable[[], ManagedLedger], note: Callable[[int], str] = lambda n: "") -> float:
            ml = make()
            try:
                began = time.perf_counter()
                count = run_appenders(ml, args.threads, args.seconds, payload)
                elapsed = time.perf_counter() - began
            finally:
                ml.close()
            rate = count / elapsed
            rows.append((name, rate, note(count)))
            return rate

        memory = timed("memory", lambda: MemoryLedger("bench", config))
        file_single = timed("file (sync per append)", lambda: FileLedger(os.path.join(base, "single"), config))
        counting = CountingFileSystem()
        group = timed(
            "file + group commit",
            lambda: FileLedger(os.path.join(base, "group"), config, group_commit=True, fs=counting),
            lambda n: f"{n / max(counting.syncs, 1):.1f} entries per sync",
        )
        # Several managed ledgers of one store, one journal: every thread's appends (to a ledger of
        # its own among four) share the journal's syncs, as a bookie's journal serves every ledger.
        shared = CountingFileSystem()
        store = FileStore(os.path.join(base, "store"), config, fs=shared)
        ledgers = [store.open_ledger(f"l{i}") for i in range(4)]
        began = time.perf_counter()
        count = run_appenders_to(ledgers, args.threads, args.seconds, payload)
        store_rate = count / (time.perf_counter() - began)
        store.close()
        rows.append(
            ("store: 4 ledgers, one journal", store_rate, f"{count / max(shared.syncs, 1):.1f} entries per sync")
        )
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"appends of {args.size}-byte entries, {args.threads} threads, {args.seconds:g} s each, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    print(f"{'variant':<34} {'appends/s':>12}  notes")
    for name, rate, note in rows:
        print(f"{name:<34} {rate:>12,.0f}  {note}")
    print()
    print(f"memory / file (sync per append):  {memory / file_single:8.1f}x")
    print(f"memory / file + group commit:     {memory / group:8.1f}x")
    print(f"group commit / sync per append:   {group / file_single:8.1f}x")
    print(f"store (4 ledgers) / sync per append: {store_rate / file_single:5.1f}x")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    from views.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("ledger_bench", unit=""):
        code = main()
    raise SystemExit(code)
