"""Acknowledgements between the wire, the pending ack and the durable cursor.

The pending-ack machine (:mod:`reference.pending_ack`) speaks of :class:`~reference.pending_ack.AckedPosition`
values and a :class:`~reference.pending_ack.CursorView`; the broker holds message ids from the wire
and a managed cursor.  This module translates both ways: an ack's message id into the machine's
position (a batch index as an ack set, PIP-54), the cursor into the view the machine recovers over
(PA-2), and the machine's cursor effects into cursor writes.
"""

from __future__ import annotations

from collections.abc import Mapping

import immutables

from engine.broker.entries import StoredMessage
from engine.storage.ledger import ManagedCursor, ManagedLedger
from reference import pending_ack as pa
from reference.ledger import entry_exists
from spec.types import Position, previous_position, words_to_bits

__all__ = ["acked_position", "cursor_view", "names_no_entry", "write_cumulative_ack", "write_individual_ack"]


def acked_position(
    messages: Mapping[Position, StoredMessage], position: Position, batch_index: int | None, cumulative: bool
) -> pa.AckedPosition:
    """The message id of an ack on the wire: a batch index is an ack set over the entry (PIP-54,
    ``acknowledgmentAtBatchIndexLevelEnabled``); a cumulative one covers indexes 0..i."""
    message = messages.get(position)
    if batch_index is None or message is None or message.batch is None:
        return pa.AckedPosition(position)
    indexes = range(batch_index + 1) if cumulative else (batch_index,)
    return pa.AckedPosition.of_indexes(position, message.batch_size, indexes)


def names_no_entry(position: Position, cumulative: bool, cursor: ManagedCursor, ledger: ManagedLedger) -> bool:
    """Whether the cursor would refuse an ack of ``position`` (:mod:`reference.cursor`): one above its
    mark-delete position that is beyond the last confirmed entry or past the end of its ledger (a
    position never written, or lost with a write that was never durable); an individual ack also
    names a live entry.  At or below the mark-delete position an ack is a no-op, never refused."""
    if position <= cursor.mark_delete_position:
        return False
    if position > ledger.last_confirmed():
        return True
    ledgers = ledger.ledgers()
    if not cumulative:
        return not entry_exists(position, ledgers)
    # A mark-delete may name the place before a live ledger's first entry, or a position of a
    # ledger that is gone; never one past the end of a live ledger.
    live = next((info for info in ledgers if info.ledger_id == position.ledger_id), None)
    return live is not None and position.entry_id >= live.entries


def cursor_view(cursor: ManagedCursor, messages: Mapping[Position, StoredMessage]) -> pa.CursorView:
    """The durable cursor as the pending ack reads it, batch entries' ack sets included (PA-2)."""
    deleted = frozenset(cursor.individually_deleted())
    in_part: dict[Position, pa.AckBits] = {}
    for position, message in messages.items():
        if message.batch is None or position <= cursor.mark_delete_position or position in deleted:
            continue
        words = cursor.batch_ack_set(position)
        acked = 0 if words is None else ((1 << message.batch_size) - 1) & ~words_to_bits(words)
        if acked:
            in_part[position] = pa.AckBits(message.batch_size, acked)
    return pa.CursorView(cursor.mark_delete_position, deleted, immutables.Map(in_part))


def write_individual_ack(cursor: ManagedCursor, effect: pa.CursorIndividualAck) -> None:
    """``CursorIndividualAck``: whole entries deleted, batch indexes cleared from their ack sets."""
    whole = [a.position for a in effect.positions if a.ack_set is None]
    sets = {a.position: a.ack_set for a in effect.positions if a.ack_set is not None}
    if whole:
        cursor.delete(whole)
    if sets:
        cursor.delete(list(sets), sets)


def write_cumulative_ack(cursor: ManagedCursor, effect: pa.CursorCumulativeAck, ledger: ManagedLedger | None) -> None:
    """``CursorCumulativeAck``: the mark-delete position moves; up to a batch index (PIP-54) it moves
    to the entry before, and that entry keeps the ack set of its indexes not yet acknowledged."""
    acked = effect.position
    if acked.ack_set is None or not any(acked.ack_set):
        cursor.mark_delete(acked.position)
        return
    assert ledger is not None
    before = previous_position(acked.position, ledger.ledgers())
    if before > cursor.mark_delete_position:
        cursor.mark_delete(before)
    cursor.delete([acked.position], {acked.position: acked.ack_set})
