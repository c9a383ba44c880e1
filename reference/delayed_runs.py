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
from pyroaring import BitMap, FrozenBitMap

__all__ = [
    "EMPTY_BITMAPS",
    "Bitmaps",
    "Index",
    "Run",
    "bit_add",
    "bit_remove",
    "bit_set",
    "cardinality",
    "compact_run",
    "evolve",
    "freeze",
    "insert_sorted",
    "lsm_add",
    "lsm_min",
    "lsm_size",
    "pack",
    "run_of_keys",
    "split_due",
    "union",
    "unpack",
]

_ABS: Final = struct.Struct(">QQQ")
_REL: Final = struct.Struct(">III")
_U32: Final = 1 << 32


Index = tuple[int, int, int]  # (deliver_at, ledger_id, entry_id)


T = TypeVar("T")


def evolve(obj: T, **changes: Any) -> T:
    """``dataclasses.replace`` for our slotted frozen values, without re-running ``__init__``
    (the hot path of every step; several times faster)."""
    cls = type(obj)
    new = cls.__new__(cls)
    for name in cls.__slots__:  # type: ignore[attr-defined]
        object.__setattr__(new, name, changes[name] if name in changes else getattr(obj, name))
    return new


# --------------------------------------------------------------------------------------------
# Runs: sorted immutable sequences of packed indexes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """A sorted run of indexes.  ``width`` 24: absolute ``>QQQ`` records; 12: ``>III`` records
    relative to ``(base_ts, base_ledger)``.  Records before ``offset`` are consumed."""

    data: bytes
    width: int = 24
    base_ts: int = 0
    base_ledger: int = 0
    offset: int = 0

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

    def indexes(self) -> Iterator[Index]:
        for i in range(len(self)):
            yield self.index(i)

    def key_list(self) -> list[bytes]:
        if self.width == 24:
            start = self.offset * 24
            return [self.data[i : i + 24] for i in range(start, len(self.data), 24)]
        return [self.key(i) for i in range(len(self))]

    def advance(self, n: int = 1) -> Run | None:
        if n >= len(self):
            return None
        return evolve(self, offset=self.offset + n)

    def resident_bytes(self) -> int:
        return len(self.data) - self.offset * self.width


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


def lsm_add(runs: tuple[Run, ...], key: bytes) -> tuple[Run, ...]:
    """Log-structured insert: append a one-record run, merge while the newer run is not smaller
    than half the older (sizes stay geometric, so merges cost O(log n) per record)."""
    out = [*runs, Run(key)]
    while len(out) >= 2 and len(out[-2]) <= 2 * len(out[-1]):
        newer = out.pop()
        older = out.pop()
        out.append(run_of_keys(sorted(older.key_list() + newer.key_list())))
    return tuple(out)


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


def split_due(runs: tuple[Run, ...], cutoff: int) -> tuple[list[bytes], tuple[Run, ...]]:
    """Remove every index with ``deliver_at <= cutoff`` from sorted runs (each run's due part is a
    prefix); return the due keys sorted and the remaining runs."""
    limit = _ABS.pack(cutoff, (1 << 64) - 1, (1 << 64) - 1)
    due: list[bytes] = []
    rest: list[Run] = []
    for run in runs:
        n = bisect.bisect_right(_KeyView(run), limit)
        if n:
            due.extend(run.key_list()[:n] if run.width == 24 else [run.key(i) for i in range(n)])
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
    return bitmaps.set(ledger, FrozenBitMap([entry]) if bm is None else bm | FrozenBitMap([entry]))


def bit_remove(bitmaps: Bitmaps, ledger: int, entry: int) -> Bitmaps:
    """Drop one bit that is set; an emptied ledger bitmap is removed (MB4)."""
    bm = bitmaps.get(ledger)
    if bm is None or entry not in bm:
        raise ValueError(f"bit {ledger}:{entry} is not set")  # callers check first: a bug, not a domain error
    if len(bm) == 1:
        return bitmaps.delete(ledger)
    return bitmaps.set(ledger, bm - FrozenBitMap([entry]))


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
