"""The managed-ledger view the machines need: its errors, where a new cursor starts, and the pure
rules over a list of ledgers (the next live position, whether an entry exists, when a ledger is full,
and retention's consumed ledgers).

The engine's two ledgers (``engine.storage.memory_ledger`` and ``engine.storage.file_ledger``) and
the model checker's environment read these rules from here, so neither can drift from the other.
Failures are exceptions deriving from :class:`LedgerError` because the engine is imperative;
``domain_error()`` is the domain error a Pulsar broker would report.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence

from spec.config import Config
from spec.errors import DomainError, ManagedLedgerAlreadyClosed, ManagedLedgerFenced, PersistenceError
from spec.types import LedgerInfo, Position, PulsarName

__all__ = [
    "MB",
    "InitialPosition",
    "InvalidCursorPosition",
    "LedgerClosed",
    "LedgerError",
    "LedgerFenced",
    "LedgerWriteFailed",
    "NoSuchEntry",
    "consumed_ledgers",
    "entry_exists",
    "ledger_is_full",
    "next_position",
]

MB = 1024 * 1024


class LedgerError(Exception):
    """Base of every ledger failure.  ``domain_error()`` is what a broker would report."""

    def domain_error(self) -> DomainError:
        return PersistenceError(str(self))


class LedgerWriteFailed(LedgerError):
    """The append was not made durable (injected fault, disk error).  Nothing was acknowledged."""


class LedgerClosed(LedgerError):
    """The ledger is closed or write-failed; it must roll over before the next append."""

    def domain_error(self) -> DomainError:
        return ManagedLedgerAlreadyClosed(str(self))


class LedgerFenced(LedgerError):
    """Another owner fenced this ledger; this handle may never write again."""

    def domain_error(self) -> DomainError:
        return ManagedLedgerFenced(str(self))


class NoSuchEntry(LedgerError):
    """A read of a position that does not exist (or was deleted with its ledger)."""


class InvalidCursorPosition(LedgerError):
    """A cursor was asked to delete a position that was never written (beyond the last confirmed
    entry, or past the end of its ledger); Pulsar's "Invalid mark deleted position".  Nothing of
    the request was applied."""


class InitialPosition(PulsarName, enum.Enum):
    """Where a new cursor starts (Pulsar's ``CommandSubscribe.InitialPosition``).

    LATEST: the mark-delete position is the last confirmed entry, so only later entries are
    unconsumed.  EARLIEST: it is just before the first live entry, so every live entry is.
    Opening a cursor that already exists ignores this and returns it unchanged.
    """

    LATEST = "latest"
    EARLIEST = "earliest"


# ---------------------------------------------------------------------------------------------
# Positions over a list of ledgers.


def next_position(position: Position, ledgers: Sequence[LedgerInfo]) -> Position | None:
    """The first live entry strictly after ``position`` (Pulsar's ``getNextValidPosition``), or
    None when ``position`` is at or beyond the last entry.  Crosses ledger boundaries and skips
    empty and deleted ledgers."""
    for info in ledgers:
        if info.ledger_id < position.ledger_id:
            continue
        start = position.entry_id + 1 if info.ledger_id == position.ledger_id else 0
        if start < info.entries:
            return Position(info.ledger_id, start)
    return None


def entry_exists(position: Position, ledgers: Sequence[LedgerInfo]) -> bool:
    """Whether ``position`` names an entry of a live ledger."""
    return any(info.ledger_id == position.ledger_id and 0 <= position.entry_id < info.entries for info in ledgers)


def ledger_is_full(entries: int, size_bytes: int, config: Config) -> bool:
    """Pulsar's ``currentLedgerIsFull``: roll over once either limit is reached.  Size counts entry
    payload bytes, as ``currentLedgerSize`` does, so both ledgers roll at the same positions."""
    return (
        entries >= config.managed_ledger_max_entries_per_ledger
        or size_bytes >= config.managed_ledger_max_size_per_ledger_mbytes * MB
    )


def consumed_ledgers(
    ledgers: Sequence[LedgerInfo], current: int, marks: Iterable[Position], up_to: int | None = None
) -> tuple[int, ...]:
    """The non-current ledgers whose every entry each cursor has mark-deleted, oldest first.

    Pulsar's ``internalTrimLedgers`` trims below the slowest reader's mark-delete ledger (plus
    that ledger when its last entry is mark-deleted) and never the current ledger.  Only the
    mark-delete position counts: an individually deleted tail does not free a ledger until the
    mark-delete position passes it.
    """
    marks = list(marks)  # each cursor's mark-delete position
    out: list[int] = []
    for info in ledgers:
        if info.ledger_id == current or (up_to is not None and info.ledger_id > up_to):
            break
        last = Position(info.ledger_id, info.entries - 1)
        if all(mark >= last for mark in marks):
            out.append(info.ledger_id)
        else:
            break
    return tuple(out)
