"""Packed runs and bitmaps: how the delayed-delivery trackers hold millions of indexes immutably.

Indexes ``(deliver_at, ledger, entry)`` are kept in sorted immutable runs of packed big-endian
records (:class:`Run`), so bytes order is ``(deliver_at, ledger, entry)`` order and a run costs 24
bytes per index (12 bytes for a sealed segment whose values fit relative to a base).  The mutable
queue and the in-memory tracker are log-structured: a tuple of runs merged pairwise as they grow
(:func:`lsm_add`, amortised O(log n) per add), which keeps every state immutable and hashable
without millions of Python objects.  Membership is per-ledger roaring bitmaps (:data:`Bitmaps`).

Nothing here is a rule: these are the data structures the rules in :mod:`reference.delayed_bucket`
and :mod:`reference.delayed_memory` are written over.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import immutables
import numpy
from pyroaring import BitMap, FrozenBitMap

from reference.persistent import evolve

__all__ = [
    "EMPTY_BITMAPS",
    "Bitmaps",
    "Index",
    "LsmQueue",
    "Run",
    "bit_add",
    "bit_set",
    "cardinality",
    "compact_run",
    "difference",
    "due_limit",
    "evolve",
    "freeze",
    "insert_sorted",
    "lsm_add",
    "lsm_min",
    "lsm_size",
    "merge_runs",
    "pack",
    "queue_head",
    "queue_size",
    "queued",
    "run_of_keys",
    "same_queue",
    "split_due",
    "union",
    "unpack",
]

_ABS: Final = struct.Struct(">QQQ")
_KEY: Final = struct.Struct("24s")  # one absolute record, as the key it is
_REL: Final = struct.Struct(">III")
_TS: Final = struct.Struct(">Q")  # the deliver-at leading an absolute record
_TS_REL: Final = struct.Struct(">I")  # the deliver-at leading a relative record
_U32: Final = 1 << 32


Index = tuple[int, int, int]  # (deliver_at, ledger_id, entry_id)


Q = TypeVar("Q", bound="LsmQueue")


# --------------------------------------------------------------------------------------------
# Runs: sorted immutable sequences of packed indexes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, init=False)
class Run:
    """A sorted run of indexes.  ``width`` 24: absolute ``>QQQ`` records; 12: ``>III`` records
    relative to ``(base_ts, base_ledger)``.  Records before ``offset`` are consumed."""

    data: bytes
    width: int = 24
    base_ts: int = 0
    base_ledger: int = 0
    offset: int = 0

    def __init__(self, data: bytes, width: int = 24, base_ts: int = 0, base_ledger: int = 0, offset: int = 0) -> None:
        # Written out (the dataclass's sets each field through object.__setattr__): a tracker
        # makes a run on every add.
        _RUN_SETTERS[0](self, data)
        _RUN_SETTERS[1](self, width)
        _RUN_SETTERS[2](self, base_ts)
        _RUN_SETTERS[3](self, base_ledger)
        _RUN_SETTERS[4](self, offset)

    def __len__(self) -> int:
        return len(self.data) // self.width - self.offset

    def key(self, i: int) -> bytes:
        """The absolute 24-byte key of record ``offset + i``."""
        at = (self.offset + i) * self.width
        if self.width == 24:
            return self.data[at : at + 24]
        ts, ledger, entry = _REL.unpack_from(self.data, at)
        return _ABS.pack(ts + self.base_ts, ledger + self.base_ledger, entry)

    def index(self, i: int) -> Index:
        at = (self.offset + i) * self.width
        if self.width == 24:
            return _ABS.unpack_from(self.data, at)
        ts, ledger, entry = _REL.unpack_from(self.data, at)
        return (ts + self.base_ts, ledger + self.base_ledger, entry)

    def head(self) -> bytes:
        return self.key(0)

    def head_ts(self) -> int:
        """The deliver-at of the first record (without making its key)."""
        at = self.offset * self.width
        if self.width == 24:
            ts: int = _TS.unpack_from(self.data, at)[0]
            return ts
        relative: int = _TS_REL.unpack_from(self.data, at)[0]
        return relative + self.base_ts

    def indexes(self) -> Iterator[Index]:
        view = memoryview(self.data)[self.offset * self.width :]
        if self.width == 24:
            return _ABS.iter_unpack(view)
        ts, ledger = self.base_ts, self.base_ledger
        return ((t + ts, lg + ledger, e) for t, lg, e in _REL.iter_unpack(view))

    def key_list(self, stop: int | None = None) -> list[bytes]:
        """The absolute keys of the records from ``offset`` on, the first ``stop`` of them when given."""
        n = len(self) if stop is None else min(stop, len(self))
        if self.width == 24:
            start = self.offset * 24
            return [key for (key,) in _KEY.iter_unpack(memoryview(self.data)[start : start + n * 24])]
        return [self.key(i) for i in range(n)]

    def advance(self, n: int = 1) -> Run | None:
        if n >= len(self):
            return None
        return evolve(self, offset=self.offset + n)

    def resident_bytes(self) -> int:
        return len(self.data) - self.offset * self.width


# the slots' own setters, which a frozen dataclass's __setattr__ does not guard
_RUN_SETTERS: Final = tuple(
    Run.__dict__[name].__set__ for name in ("data", "width", "base_ts", "base_ledger", "offset")
)


class _KeyView(Sequence[bytes]):
    """A run's keys as a sequence, for ``bisect`` without materialising them."""

    __slots__ = ("_run",)

    def __init__(self, run: Run) -> None:
        self._run = run

    def __len__(self) -> int:
        return len(self._run)

    def __getitem__(self, i: Any) -> Any:
        return self._run.key(i)


def pack(index: Index) -> bytes:
    return _ABS.pack(*index)


def unpack(key: bytes) -> Index:
    return _ABS.unpack(key)


def run_of_keys(keys: Sequence[bytes]) -> Run:
    """An absolute run of already sorted keys."""
    return Run(b"".join(keys))


def compact_run(indexes: Sequence[Index]) -> Run:
    """A sealed segment: 12-byte relative records when every value fits, else absolute ones."""
    if not indexes:
        return Run(b"")
    base_ts = indexes[0][0]
    base_ledger = min(i[1] for i in indexes)
    if all(i[0] - base_ts < _U32 and i[1] - base_ledger < _U32 and i[2] < _U32 for i in indexes):
        data = b"".join(_REL.pack(t - base_ts, ledger - base_ledger, e) for t, ledger, e in indexes)
        return Run(data, 12, base_ts, base_ledger)
    return Run(b"".join(_ABS.pack(*i) for i in indexes))


def insert_sorted(runs: tuple[Run, ...], run: Run | None) -> tuple[Run, ...]:
    """Insert into a tuple of runs kept sorted by head key (the shared queue)."""
    if run is None or len(run) == 0:
        return runs
    at = bisect.bisect_right(runs, run.head(), key=Run.head)
    return (*runs[:at], run, *runs[at:])


LSM_FANOUT: Final = 4
# From this many records on, runs are merged by sorting their packed records as fixed-width byte
# strings in numpy (memcmp order, the order of the keys); below it, numpy's call costs more than
# sorting Python bytes objects.
_ARRAY_MERGE: Final = 256


def lsm_add(runs: tuple[Run, ...], key: bytes) -> tuple[Run, ...]:
    """Log-structured insert: append a one-record run; whenever the newest :data:`LSM_FANOUT`
    runs are of one size class (the oldest of them less than ``LSM_FANOUT`` times the newest),
    merge them into one.  Run sizes grow by powers of the fanout, so a record is copied
    O(log n / log fanout) times (7 times at 50,000 records, against 16 when pairs are merged)
    and there are O(fanout log n) runs."""
    out = [*runs, Run(key)]
    newest = 1
    while len(out) >= LSM_FANOUT and len(out[-LSM_FANOUT]) < LSM_FANOUT * newest:
        merged = merge_runs(out[-LSM_FANOUT:])
        del out[-LSM_FANOUT:]
        out.append(merged)
        newest = len(merged)
    return tuple(out)


def merge_runs(runs: Sequence[Run]) -> Run:
    """One absolute run of the records of sorted ``runs``, sorted."""
    packed = b"".join(r.data[r.offset * 24 :] if r.width == 24 else b"".join(r.key_list()) for r in runs)
    if len(packed) >= _ARRAY_MERGE * 24:
        return Run(numpy.sort(numpy.frombuffer(packed, dtype="S24"), kind="stable").tobytes())
    keys = [key for (key,) in _KEY.iter_unpack(packed)]
    keys.sort()
    return Run(b"".join(keys))


def lsm_min(runs: tuple[Run, ...]) -> int | None:
    best: int | None = None
    best_key = b""
    for i, run in enumerate(runs):
        head = run.head()
        if best is None or head < best_key:
            best, best_key = i, head
    return best


def lsm_size(runs: tuple[Run, ...]) -> int:
    return sum(len(r) for r in runs)


class LsmQueue:
    """A base for the values that hold a log-structured queue in their ``runs`` field (the bucket
    tracker's mutable bucket, the in-memory tracker), with slots for what the runs sum up to:
    their size and their smallest key, which every add asks for (the seal threshold, the timer).

    Neither is a field: both are computed from ``runs`` the first time they are asked for, so a
    value built any way at all (``evolve``, ``replace``, a test) has the right ones; an add hands
    them on to the value it makes (:func:`queued`), which saves going over every run each time.
    """

    __slots__ = ("_queue_head", "_queue_size")

    runs: tuple[Run, ...]
    _queue_size: int
    _queue_head: bytes | None


# the slots' own setters (what object.__setattr__ reaches after looking the name up)
_set_queue_size = LsmQueue.__dict__["_queue_size"].__set__
_set_queue_head = LsmQueue.__dict__["_queue_head"].__set__


def _summary(queue: LsmQueue) -> tuple[int, bytes | None]:
    try:
        return queue._queue_size, queue._queue_head
    except AttributeError:
        runs = queue.runs
        i = lsm_min(runs)
        size, head = lsm_size(runs), (runs[i].head() if i is not None else None)
        object.__setattr__(queue, "_queue_size", size)
        object.__setattr__(queue, "_queue_head", head)
        return size, head


def queue_size(queue: LsmQueue) -> int:
    """How many keys the queue's runs hold."""
    return _summary(queue)[0]


def queue_head(queue: LsmQueue) -> bytes | None:
    """The queue's smallest key, None when it is empty."""
    return _summary(queue)[1]


def queued(after: Q, before: LsmQueue, key: bytes) -> Q:
    """``after``, whose runs are ``before``'s with ``key`` added (:func:`lsm_add`), with the
    size and smallest key that follow from ``before``'s."""
    size, head = _summary(before)
    _set_queue_size(after, size + 1)
    _set_queue_head(after, key if head is None or key < head else head)
    return after


def same_queue(after: Q, before: LsmQueue) -> Q:
    """``after``, whose runs are ``before``'s, with ``before``'s size and smallest key."""
    size, head = _summary(before)
    _set_queue_size(after, size)
    _set_queue_head(after, head)
    return after


def due_limit(cutoff: int) -> bytes:
    """The largest key due at ``cutoff``: a key is due when it is at most this one."""
    return _ABS.pack(cutoff, (1 << 64) - 1, (1 << 64) - 1)


def split_due(runs: tuple[Run, ...], cutoff: int) -> tuple[list[bytes], tuple[Run, ...]]:
    """Remove every index with ``deliver_at <= cutoff`` from sorted runs (each run's due part is a
    prefix); return the due keys sorted and the remaining runs."""
    limit = due_limit(cutoff)
    due: list[bytes] = []
    rest: list[Run] = []
    for run in runs:
        n = bisect.bisect_right(_KeyView(run), limit)
        if n:
            due.extend(run.key_list(n))
        remaining = run.advance(n) if n else run
        if remaining is not None:
            rest.append(remaining)
    due.sort()
    return due, tuple(rest)


# --------------------------------------------------------------------------------------------
# Bitmaps: ledger id -> FrozenBitMap of entry ids
# --------------------------------------------------------------------------------------------

Bitmaps = immutables.Map[int, FrozenBitMap]
EMPTY_BITMAPS: Bitmaps = immutables.Map()


def bit_set(bitmaps: Bitmaps, ledger: int, entry: int) -> bool:
    bm = bitmaps.get(ledger)
    return bm is not None and entry in bm


def bit_add(bitmaps: Bitmaps, ledger: int, entry: int) -> Bitmaps:
    bm = bitmaps.get(ledger)
    if bm is None:
        return bitmaps.set(ledger, FrozenBitMap([entry]))
    # copy on write: the copy shares the containers of ``bm`` but the one the bit lands in
    added = BitMap(bm, copy_on_write=True)
    added.add(entry)
    return bitmaps.set(ledger, FrozenBitMap(added, copy_on_write=True))


def difference(bitmaps: Bitmaps, removed: Mapping[int, BitMap]) -> Bitmaps:
    """``bitmaps`` without the ``removed`` bits, which are all set; an emptied ledger bitmap is
    removed (MB4)."""
    with bitmaps.mutate() as out:
        for ledger, bits in removed.items():
            rest = FrozenBitMap(out[ledger] - bits)
            if len(rest) + len(bits) != len(out[ledger]):
                raise ValueError(f"bits of ledger {ledger} are not all set")  # a caller's bug
            if rest:
                out[ledger] = rest
            else:
                del out[ledger]
        result: Bitmaps = out.finish()
    return result


def cardinality(bitmaps: Bitmaps) -> int:
    return sum(len(bm) for bm in bitmaps.values())


def freeze(builders: Mapping[int, BitMap]) -> Bitmaps:
    out: dict[int, FrozenBitMap] = {}
    for ledger, bm in builders.items():
        bm.run_optimize()  # Pulsar 3.1+ runs runOptimize before serializing (B.3)
        out[ledger] = FrozenBitMap(bm)
    return immutables.Map(out)


def union(maps: Iterable[Bitmaps]) -> Bitmaps:
    out: dict[int, BitMap] = {}
    for m in maps:
        for ledger, bm in m.items():
            out.setdefault(ledger, BitMap()).update(bm)
    return freeze(out)
