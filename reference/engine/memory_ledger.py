"""The in-memory managed ledger, and the cursor semantics both ledgers share.

:class:`MemoryLedger` keeps everything in process memory.  What a Pulsar broker keeps in
BookKeeper and the metadata store (the ledgers, their entries, the managed-ledger and cursor
properties, every cursor's mark-delete position, individually deleted positions and batch ack
sets) lives in a :class:`MemoryLedgerStorage` that outlives the handle, so a simulated broker
crash is "drop the handle, :meth:`MemoryLedger.reopen`": the new handle fences the old one and
opens a new ledger, as a new owner of a Pulsar topic does.  An append is durable when it returns
(there is nothing below memory to lose); the file ledger is where durability is earned.

The cursor rules (mark-delete never moves backwards, individual deletes and batch ack sets,
contiguous deletes advancing the mark-delete position across ledger boundaries) are pure
functions over :class:`CursorState` here, and ``reference.engine.file_ledger`` uses the same
functions, so the two ledgers cannot drift apart.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Protocol

from spec.config import Config
from spec.types import LedgerInfo, Position, bits_to_words, previous_position, words_to_bits

from .ledger import (
    Entry,
    InitialPosition,
    InvalidCursorPosition,
    LedgerClosed,
    LedgerFenced,
    ManagedLedger,
    NoSuchEntry,
)

__all__ = [
    "MB",
    "Cursor",
    "CursorOwner",
    "CursorState",
    "MemoryLedger",
    "MemoryLedgerStorage",
    "apply_delete",
    "apply_mark_delete",
    "apply_reset",
    "check_cursor_name",
    "consumed_ledgers",
    "entry_exists",
    "initial_cursor_state",
    "ledger_is_full",
    "next_position",
    "non_durable_cursor",
    "reset_read_position",
]

MB = 1024 * 1024


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


# ---------------------------------------------------------------------------------------------
# Cursor state and its rules (pure).


@dataclass(frozen=True, slots=True)
class CursorState:
    """Everything a durable cursor records.

    ``individually_deleted`` holds only positions above ``mark_delete``; ``ack_sets`` maps an entry
    with some (not all) batch indexes deleted to its remaining ack set, as Java ``BitSet`` words
    with bit i set while batch index i is still present.
    """

    mark_delete: Position
    individually_deleted: frozenset[Position] = frozenset()
    ack_sets: Mapping[Position, tuple[int, ...]] = field(default_factory=lambda: MappingProxyType({}))
    properties: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def is_deleted(self, position: Position) -> bool:
        return position <= self.mark_delete or position in self.individually_deleted

    def with_property(self, key: str, value: str | None) -> CursorState:
        props = dict(self.properties)
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
        return replace(self, properties=MappingProxyType(props))


def initial_cursor_state(
    initial_position: InitialPosition, ledgers: Sequence[LedgerInfo], last_confirmed: Position
) -> CursorState:
    """A new cursor's state.  EARLIEST starts just before the first live ledger (``(first, -1)``),
    as Pulsar's ``getPreviousPosition(getFirstPosition())`` does; LATEST at the last confirmed
    entry."""
    if initial_position is InitialPosition.EARLIEST and ledgers:
        return CursorState(mark_delete=Position(ledgers[0].ledger_id, -1))
    return CursorState(mark_delete=last_confirmed)


def _check_writable_position(position: Position, ledgers: Sequence[LedgerInfo], last_confirmed: Position) -> None:
    # Pulsar rejects a delete beyond the last confirmed entry ("Invalid mark deleted position");
    # a position past the end of a closed ledger was never written either.
    if position > last_confirmed:
        raise InvalidCursorPosition(f"position {position} is beyond the last confirmed entry {last_confirmed}")
    live = {info.ledger_id: info.entries for info in ledgers}
    entries = live.get(position.ledger_id)
    if entries is not None and position.entry_id >= entries:
        raise InvalidCursorPosition(f"position {position} is past the end of ledger {position.ledger_id} ({entries})")


def _advance(state: CursorState, ledgers: Sequence[LedgerInfo]) -> CursorState:
    # ManagedCursorImpl.setAcknowledgedPosition: the mark-delete position swallows every
    # individually deleted entry contiguous with it, across ledger boundaries.
    mark = state.mark_delete
    deleted = {p for p in state.individually_deleted if p > mark}
    while (following := next_position(mark, ledgers)) is not None and following in deleted:
        deleted.discard(following)
        mark = following
    ack_sets = {p: words for p, words in state.ack_sets.items() if p > mark and p not in deleted}
    return replace(
        state,
        mark_delete=mark,
        individually_deleted=frozenset(deleted),
        ack_sets=MappingProxyType(ack_sets),
    )


def apply_mark_delete(
    state: CursorState, position: Position, ledgers: Sequence[LedgerInfo], last_confirmed: Position
) -> CursorState:
    """Cumulative delete up to and including ``position``.

    A position at or below the current mark-delete position changes nothing (Pulsar raises
    ``MarkDeletingMarkedPosition``, which every caller in the broker only logs).  A position that
    was never written raises :class:`InvalidCursorPosition`.
    """
    if position <= state.mark_delete:
        return state
    if position.entry_id != -1 or position.ledger_id not in {i.ledger_id for i in ledgers}:
        _check_writable_position(position, ledgers, last_confirmed)
    return _advance(replace(state, mark_delete=position), ledgers)


def apply_delete(
    state: CursorState,
    positions: Sequence[Position],
    ack_sets: Mapping[Position, tuple[int, ...]] | None,
    ledgers: Sequence[LedgerInfo],
    last_confirmed: Position,
) -> CursorState:
    """Individual deletes, with optional batch ack sets (``ManagedCursorImpl.asyncDelete``).

    Without an ack set the whole entry is deleted.  With one, it is ANDed into the entry's
    remaining ack set (the first one given is taken as is); when no bit is left the whole entry
    is deleted.  Deleted entries contiguous with the mark-delete position advance it.  All
    positions are validated before any is applied, so a rejected request changes nothing.
    """
    given = dict(ack_sets or {})
    stray = set(given) - set(positions)
    if stray:
        raise ValueError(f"ack sets given for positions not being deleted: {sorted(stray)}")
    for position in positions:
        if position > state.mark_delete:
            _check_writable_position(position, ledgers, last_confirmed)
            if not entry_exists(position, ledgers):
                raise InvalidCursorPosition(f"position {position} names no live entry")
    deleted = set(state.individually_deleted)
    remaining = dict(state.ack_sets)
    for position in positions:
        if position <= state.mark_delete or position in deleted:
            continue
        if position in given:
            bits = words_to_bits(given[position])
            if position in remaining:
                bits &= words_to_bits(remaining[position])
            if bits:
                remaining[position] = bits_to_words(bits)
                continue
        remaining.pop(position, None)
        deleted.add(position)
    return _advance(
        replace(state, individually_deleted=frozenset(deleted), ack_sets=MappingProxyType(remaining)), ledgers
    )


def reset_read_position(read: Position, ledgers: Sequence[LedgerInfo], last_confirmed: Position) -> Position | None:
    """Where a reset to ``read`` really starts reading: ``read`` itself when it names a live
    entry, else the first live entry after it (an entry of a deleted ledger, or one past the end
    of a closed ledger); None when nothing is at or after it (Pulsar's ``asyncResetCursor``:
    ``getNextValidPosition``, and "latest in effect" beyond the last entry)."""
    if read > last_confirmed:
        return None
    for info in ledgers:
        if info.entries == 0 or Position(info.ledger_id, info.entries - 1) < read:
            continue
        return max(read, Position(info.ledger_id, 0))
    return None


def apply_reset(
    state: CursorState,
    read: Position,
    ack_set: tuple[int, ...] | None,
    ledgers: Sequence[LedgerInfo],
    last_confirmed: Position,
) -> CursorState:
    """Rewind (or skip) the cursor so that ``read`` is the next entry to read (PA-22;
    ``ManagedCursorImpl.internalResetCursor``).

    The mark-delete position becomes the position just before the read position (across empty
    ledgers, ``getPreviousPosition``), every individual delete and batch ack set is dropped, and
    ``ack_set`` (a seek to a batch index: Java ``BitSet`` words, bit set = index still present)
    becomes the read entry's.  A read position that names no live entry moves to the next live
    one (its ack set is then dropped); past the last entry the cursor ends at the last confirmed
    entry (nothing left to read).  Properties are kept.  Unlike :func:`apply_mark_delete` this may
    move the mark-delete position back: it is the one operation that does.
    """
    start = reset_read_position(read, ledgers, last_confirmed)
    if start is None:
        return CursorState(mark_delete=last_confirmed, properties=state.properties)
    mark = previous_position(start, ledgers)
    sets: dict[Position, tuple[int, ...]] = {}
    if ack_set is not None and start == read and words_to_bits(ack_set):
        sets[start] = tuple(ack_set)
    return CursorState(mark_delete=mark, ack_sets=MappingProxyType(sets), properties=state.properties)


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
    """An in-memory :class:`~reference.engine.ledger.ManagedLedger`.

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
