"""A durable cursor's state and its rules: mark-delete never moves backwards (but for a reset),
individual deletes and batch ack sets, contiguous deletes advancing the mark-delete position across
ledger boundaries, and where a reset really starts reading.

Pure functions over :class:`CursorState`; both of the engine's ledgers apply them, so the two
cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from reference.ledger import InitialPosition, InvalidCursorPosition, entry_exists, next_position
from spec.types import LedgerInfo, Position, bits_to_words, previous_position, words_to_bits

__all__ = [
    "CursorState",
    "apply_delete",
    "apply_mark_delete",
    "apply_reset",
    "initial_cursor_state",
    "reset_read_position",
]


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
