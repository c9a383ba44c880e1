"""The in-memory managed ledger, and the cursor semantics both ledgers share.

:class:`MemoryLedger` keeps everything in process memory.  What a Pulsar broker keeps in
BookKeeper and the metadata store (the ledgers, their entries, the managed-ledger and cursor
properties, every cursor's mark-delete position, individually deleted positions and batch ack
sets) lives in a :class:`MemoryLedgerStorage` that outlives the handle, so a simulated broker
crash is "drop the handle, :meth:`MemoryLedger.reopen`": the new handle fences the old one and
opens a new ledger, as a new owner of a Pulsar topic does.  An append is durable when it returns
(there is nothing below memory to lose); the file ledger is where durability is earned.

The cursor rules (mark-delete never moves backwards, individual deletes and batch ack sets,
contiguous deletes advancing the mark-delete position across ledger boundaries) are the pure
functions of :mod:`reference.cursor`, which ``engine.storage.file_ledger`` applies too, so the two
ledgers cannot drift apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from engine.storage.ledger import Entry, InitialPosition, LedgerClosed, LedgerFenced, ManagedLedger, NoSuchEntry
from reference.cursor import (
    CursorState,
    apply_delete,
    apply_mark_delete,
    apply_reset,
    initial_cursor_state,
)
from reference.ledger import consumed_ledgers, ledger_is_full
from spec.config import Config
from spec.types import LedgerInfo, Position

__all__ = [
    "Cursor",
    "CursorOwner",
    "MemoryLedger",
    "MemoryLedgerStorage",
    "check_cursor_name",
    "non_durable_cursor",
]


# ---------------------------------------------------------------------------------------------
# The cursor handle, shared by both ledgers.


class CursorOwner(Protocol):
    """What a :class:`Cursor` needs from its ledger: read a state, and apply a change to it under
    the ledger's lock (validated against the ledger's current view and made durable before it
    returns)."""

    def cursor_state(self, name: str) -> CursorState: ...

    def update_cursor(
        self, name: str, change: Callable[[CursorState, tuple[LedgerInfo, ...], Position], CursorState]
    ) -> None: ...


class Cursor:
    """A durable cursor of a managed ledger (``ManagedCursor``).  Every mutation is durable when
    it returns; reads see the ledger's current state."""

    __slots__ = ("_name", "_owner")

    def __init__(self, owner: CursorOwner, name: str) -> None:
        self._owner = owner
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    @property
    def mark_delete_position(self) -> Position:
        return self._owner.cursor_state(self._name).mark_delete

    def mark_delete(self, position: Position) -> None:
        """Cumulative delete up to and including ``position`` (never moves backwards)."""
        self._owner.update_cursor(self._name, lambda s, ledgers, lac: apply_mark_delete(s, position, ledgers, lac))

    def delete(self, positions: Sequence[Position], ack_sets: Mapping[Position, tuple[int, ...]] | None = None) -> None:
        """Individual deletes; see :func:`apply_delete`."""
        chosen = tuple(positions)
        sets = dict(ack_sets) if ack_sets is not None else None
        self._owner.update_cursor(self._name, lambda s, ledgers, lac: apply_delete(s, chosen, sets, ledgers, lac))

    def reset(self, read_position: Position, ack_set: tuple[int, ...] | None = None) -> None:
        """Rewind or skip to ``read_position`` (seek, PA-22); see :func:`apply_reset`.  Durable
        when it returns, like every other cursor change."""
        words = tuple(ack_set) if ack_set is not None else None
        self._owner.update_cursor(
            self._name, lambda s, ledgers, lac: apply_reset(s, read_position, words, ledgers, lac)
        )

    def is_deleted(self, position: Position) -> bool:
        return self._owner.cursor_state(self._name).is_deleted(position)

    def batch_ack_set(self, position: Position) -> tuple[int, ...] | None:
        """The entry's remaining batch ack set, or None when no batch index of it was deleted
        (or the whole entry was)."""
        return self._owner.cursor_state(self._name).ack_sets.get(position)

    def individually_deleted(self) -> tuple[Position, ...]:
        return tuple(sorted(self._owner.cursor_state(self._name).individually_deleted))

    @property
    def properties(self) -> Mapping[str, str]:
        return self._owner.cursor_state(self._name).properties

    def set_property(self, key: str, value: str) -> None:
        _check_property(key, value)
        self._owner.update_cursor(self._name, lambda s, _l, _c: s.with_property(key, value))

    def remove_property(self, key: str) -> None:
        self._owner.update_cursor(self._name, lambda s, _l, _c: s.with_property(key, None))

    def state(self) -> CursorState:
        """A snapshot of everything this cursor records (for tests and inspection)."""
        return self._owner.cursor_state(self._name)

    def __repr__(self) -> str:
        return f"Cursor({self._name!r})"


class _NonDurableOwner:
    """Holds a non-durable cursor's state in memory, validated against its ledger's current view."""

    __slots__ = ("_ledger", "_lock", "_state")

    def __init__(self, ledger: ManagedLedger, state: CursorState) -> None:
        self._ledger = ledger
        self._state = state
        self._lock = threading.Lock()

    def cursor_state(self, name: str) -> CursorState:
        return self._state

    def update_cursor(
        self, name: str, change: Callable[[CursorState, tuple[LedgerInfo, ...], Position], CursorState]
    ) -> None:
        with self._lock:
            self._state = change(self._state, tuple(self._ledger.ledgers()), self._ledger.last_confirmed())


def non_durable_cursor(ledger: ManagedLedger, name: str, mark_delete: Position) -> Cursor:
    """A reader's cursor (Pulsar's ``NonDurableCursorImpl``, PA-24): the same rules as a durable
    cursor, kept in memory only.  It is not one of ``ledger.cursors()``, so it holds back no
    ledger deletion and nothing of it survives the broker."""
    check_cursor_name(name)
    return Cursor(_NonDurableOwner(ledger, CursorState(mark_delete=mark_delete)), name)


def _check_property(key: str, value: str) -> None:
    # Properties travel through JSON and Pulsar's string maps; anything else is a caller's bug.
    if not isinstance(key, str) or not isinstance(value, str):
        raise TypeError(f"property keys and values are str, got {type(key).__name__}={type(value).__name__}")


def check_cursor_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a cursor name is a non-empty str, got {name!r}")


# ---------------------------------------------------------------------------------------------
# The in-memory ledger.


@dataclass
class _MemoryLedgerData:
    entries: list[bytes] = field(default_factory=list)
    size_bytes: int = 0


class MemoryLedgerStorage:
    """What BookKeeper and the metadata store hold for one managed ledger; survives handles."""

    def __init__(self, name: str, config: Config, first_ledger_id: int) -> None:
        self.name = name
        self.config = config
        self.lock = threading.RLock()
        self.ledgers: dict[int, _MemoryLedgerData] = {}
        self.next_ledger_id = first_ledger_id
        self.current = -1
        self.properties: dict[str, str] = {}
        self.cursors: dict[str, CursorState] = {}
        # The owner epoch: a handle may write only while it holds the newest epoch (fencing).
        self.epoch = 0

    def open_ledger(self) -> None:
        ledger_id = self.next_ledger_id
        self.next_ledger_id += 1
        self.ledgers[ledger_id] = _MemoryLedgerData()
        self.current = ledger_id

    def infos(self) -> tuple[LedgerInfo, ...]:
        return tuple(LedgerInfo(i, len(d.entries)) for i, d in self.ledgers.items())

    def last_confirmed(self) -> Position:
        return Position(self.current, len(self.ledgers[self.current].entries) - 1)


class MemoryLedger:
    """An in-memory :class:`~engine.storage.ledger.ManagedLedger`.

    ``config`` supplies ``managedLedgerMaxEntriesPerLedger`` and
    ``managedLedgerMaxSizePerLedgerMbytes``.  Ledger ids start at ``first_ledger_id`` and grow
    by one per ledger.  Thread-safe (one lock per storage).
    """

    def __init__(
        self,
        name: str = "ledger",
        config: Config | None = None,
        *,
        first_ledger_id: int = 0,
        storage: MemoryLedgerStorage | None = None,
    ) -> None:
        if storage is None:
            storage = MemoryLedgerStorage(name, config or Config(), first_ledger_id)
        self._storage = storage
        self._closed = False
        with storage.lock:
            storage.epoch += 1
            self._epoch = storage.epoch
            # A new owner closes the previous owner's ledger and writes to a fresh one, as a
            # Pulsar broker does when it loads a topic; positions after a reopen are in a new ledger.
            storage.open_ledger()

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._storage.name

    @property
    def config(self) -> Config:
        return self._storage.config

    @property
    def storage(self) -> MemoryLedgerStorage:
        return self._storage

    def reopen(self) -> MemoryLedger:
        """A new owner's handle on the same storage (a broker restart or topic move).  This
        handle is fenced: its writes raise :class:`LedgerFenced` from now on."""
        return MemoryLedger(storage=self._storage)

    def close(self) -> None:
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosed(f"managed ledger {self.name} is closed")
        if self._storage.epoch != self._epoch:
            raise LedgerFenced(f"managed ledger {self.name} was opened by a newer owner")

    # -- entries --------------------------------------------------------------------------------

    def append(self, data: bytes) -> Position:
        """Append one entry; returns its position.  Rolls over once the ledger is full."""
        payload = bytes(data)
        s = self._storage
        with s.lock:
            self._check_open()
            ledger = s.ledgers[s.current]
            ledger.entries.append(payload)
            ledger.size_bytes += len(payload)
            position = Position(s.current, len(ledger.entries) - 1)
            if ledger_is_full(len(ledger.entries), ledger.size_bytes, s.config):
                s.open_ledger()
            return position

    def read(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` live entries at or after ``start``, crossing ledger boundaries."""
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        s = self._storage
        with s.lock:
            self._check_open()
            out: list[Entry] = []
            for ledger_id, ledger in s.ledgers.items():
                if len(out) >= max_entries:
                    break
                if ledger_id < start.ledger_id:
                    continue
                first = max(start.entry_id, 0) if ledger_id == start.ledger_id else 0
                for entry_id in range(first, min(len(ledger.entries), first + max_entries - len(out))):
                    out.append(Entry(Position(ledger_id, entry_id), ledger.entries[entry_id]))
            return out

    def read_entry(self, position: Position) -> bytes:
        s = self._storage
        with s.lock:
            self._check_open()
            ledger = s.ledgers.get(position.ledger_id)
            if ledger is None or not 0 <= position.entry_id < len(ledger.entries):
                raise NoSuchEntry(f"no entry at {position} in {self.name}")
            return ledger.entries[position.entry_id]

    def last_confirmed(self) -> Position:
        with self._storage.lock:
            self._check_open()
            return self._storage.last_confirmed()

    def ledgers(self) -> tuple[LedgerInfo, ...]:
        with self._storage.lock:
            self._check_open()
            return self._storage.infos()

    def roll_owed(self) -> bool:
        return False  # a full ledger is rolled by the append that filled it, which cannot fail here

    def roll_over(self) -> None:
        s = self._storage
        with s.lock:
            self._check_open()
            s.open_ledger()

    def delete_consumed_ledgers(self, up_to: int | None = None) -> tuple[int, ...]:
        """Delete every non-current ledger whose last entry every cursor has deleted (with no
        cursor, every non-current ledger: nobody can read it any more); with ``up_to``, only those
        whose id is at most ``up_to``."""
        s = self._storage
        with s.lock:
            self._check_open()
            doomed = consumed_ledgers(s.infos(), s.current, [c.mark_delete for c in s.cursors.values()], up_to)
            for ledger_id in doomed:
                del s.ledgers[ledger_id]
            return doomed

    # -- properties -----------------------------------------------------------------------------

    @property
    def properties(self) -> Mapping[str, str]:
        with self._storage.lock:
            return MappingProxyType(dict(self._storage.properties))

    def set_property(self, key: str, value: str) -> None:
        _check_property(key, value)
        with self._storage.lock:
            self._check_open()
            self._storage.properties[key] = value

    def remove_property(self, key: str) -> None:
        with self._storage.lock:
            self._check_open()
            self._storage.properties.pop(key, None)

    # -- cursors --------------------------------------------------------------------------------

    def open_cursor(self, name: str, initial_position: InitialPosition = InitialPosition.LATEST) -> Cursor:
        check_cursor_name(name)
        s = self._storage
        with s.lock:
            self._check_open()
            if name not in s.cursors:
                s.cursors[name] = initial_cursor_state(initial_position, s.infos(), s.last_confirmed())
            return Cursor(self, name)

    def delete_cursor(self, name: str) -> None:
        with self._storage.lock:
            self._check_open()
            self._storage.cursors.pop(name, None)

    def cursors(self) -> tuple[Cursor, ...]:
        with self._storage.lock:
            return tuple(Cursor(self, name) for name in sorted(self._storage.cursors))

    def cursor_state(self, name: str) -> CursorState:
        with self._storage.lock:
            try:
                return self._storage.cursors[name]
            except KeyError:
                raise LedgerClosed(f"cursor {name} of {self.name} was deleted") from None

    def update_cursor(
        self, name: str, change: Callable[[CursorState, tuple[LedgerInfo, ...], Position], CursorState]
    ) -> None:
        s = self._storage
        with s.lock:
            self._check_open()
            state = self.cursor_state(name)
            s.cursors[name] = change(state, s.infos(), s.last_confirmed())

    def __repr__(self) -> str:
        return f"MemoryLedger({self.name!r}, ledgers={list(self._storage.ledgers)})"
