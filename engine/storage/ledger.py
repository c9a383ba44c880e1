"""The managed-ledger view the machines need, as one interface with two implementations.

``engine.storage.memory_ledger.MemoryLedger`` and ``engine.storage.file_ledger.FileLedger``
implement it and pass the same test suite (``tests/engine/storage/test_ledger_contract.py``).  This
module is the contract; it holds no implementation.

A managed ledger is a sequence of ledgers (ids increasing), each a sequence of entries (ids from
0).  Appends go to the current ledger; roll-over closes it and opens the next.  Cursors record
what has been consumed: a mark-delete position (everything at or before it is deleted),
individually deleted positions above it, and per-entry batch ack sets (PIP-45 / PIP-160: bit i
set means batch index i is still present).  Whole ledgers below every cursor's mark-delete
position may be deleted.

The engine is imperative: operations block until done and failures are exceptions deriving
from :class:`LedgerError`, each mapped to the domain error a Pulsar broker would report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# The errors and InitialPosition are the view's vocabulary, stated with its pure rules; the engine
# names them from here, beside the interface.
from reference.ledger import (
    InitialPosition,
    InvalidCursorPosition,
    LedgerClosed,
    LedgerError,
    LedgerFenced,
    LedgerWriteFailed,
    NoSuchEntry,
)
from spec.types import LedgerInfo, Position

__all__ = [
    "Entry",
    "InitialPosition",
    "InvalidCursorPosition",
    "LedgerClosed",
    "LedgerError",
    "LedgerFenced",
    "LedgerWriteFailed",
    "ManagedCursor",
    "ManagedLedger",
    "NoSuchEntry",
]


@dataclass(frozen=True, slots=True)
class Entry:
    position: Position
    data: bytes


@runtime_checkable
class ManagedCursor(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def mark_delete_position(self) -> Position: ...

    def mark_delete(self, position: Position) -> None:
        """Cumulative delete up to and including ``position`` (never moves backwards; only
        :meth:`reset` does)."""

    def delete(self, positions: Sequence[Position], ack_sets: Mapping[Position, tuple[int, ...]] | None = None) -> None:
        """Individual deletes.  A position with an ack set (Java ``BitSet`` words, bit set =
        still present) ANDs it into the entry's batch ack set; the entry is deleted when no
        bit is left.  Contiguous deletes above the mark-delete position advance it."""

    def reset(self, read_position: Position, ack_set: tuple[int, ...] | None = None) -> None:
        """Seek: make ``read_position`` the next entry to read.  The mark-delete position becomes
        the one before it (it may move back), individual deletes and batch ack sets are dropped,
        ``ack_set`` becomes the read entry's; a position that names no live entry moves to the
        next live one, past the end to the last confirmed entry."""

    def is_deleted(self, position: Position) -> bool: ...

    def batch_ack_set(self, position: Position) -> tuple[int, ...] | None:
        """The entry's remaining batch ack set, or None when no batch index of it was deleted."""

    def individually_deleted(self) -> tuple[Position, ...]: ...

    @property
    def properties(self) -> Mapping[str, str]: ...

    def set_property(self, key: str, value: str) -> None: ...

    def remove_property(self, key: str) -> None: ...


@runtime_checkable
class ManagedLedger(Protocol):
    @property
    def name(self) -> str: ...

    def append(self, data: bytes) -> Position:
        """Append one entry; returns once it is durable."""

    def read(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries at or after ``start``, crossing ledger boundaries."""

    def read_entry(self, position: Position) -> bytes: ...

    def last_confirmed(self) -> Position:
        """The last durable entry; ``(current ledger, -1)`` when the current ledger is empty."""

    def ledgers(self) -> tuple[LedgerInfo, ...]:
        """The live ledgers (ids and entry counts), oldest first; what ``previous_position`` needs."""

    def roll_over(self) -> None:
        """Close the current ledger and open the next one."""

    def roll_owed(self) -> bool:
        """The current ledger is full (``reference.ledger.ledger_is_full``) and its roll-over failed:
        the next append opens the next ledger first (Pulsar's ClosedLedger state), so it lands at
        that ledger's entry 0, not after the current ledger's last entry.  Never raises: a failed or
        closed ledger's next append reports the failure."""

    def delete_consumed_ledgers(self, up_to: int | None = None) -> tuple[int, ...]:
        """Delete every ledger wholly at or before every cursor's mark-delete position (never the
        current one; with ``up_to``, none whose id is above it); returns the deleted ledger ids."""

    @property
    def properties(self) -> Mapping[str, str]: ...

    def set_property(self, key: str, value: str) -> None: ...

    def remove_property(self, key: str) -> None:
        """Remove a managed-ledger property (no-op when absent); durable like ``set_property``."""

    def open_cursor(self, name: str, initial_position: InitialPosition = InitialPosition.LATEST) -> ManagedCursor:
        """The cursor ``name``, created durably at ``initial_position`` if it does not exist."""

    def delete_cursor(self, name: str) -> None:
        """Remove a cursor durably (unsubscribe); it no longer holds back ledger deletion."""

    def cursors(self) -> tuple[ManagedCursor, ...]: ...

    def close(self) -> None:
        """Release the handle; every later operation raises :class:`LedgerClosed`.  Idempotent."""
