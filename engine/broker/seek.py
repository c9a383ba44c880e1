"""Where a seek restarts a subscription: by message id (PA-22) or by publish time (PA-23).

Pure reads of the partition's ledger and messages; the subscription steps its pending ack with
the command and makes the cursor and the dispatcher follow.
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.broker.entries import StoredMessage
from engine.storage.ledger import ManagedLedger
from reference import pending_ack as pa
from reference.cursor import reset_read_position
from spec.types import Position, previous_position

__all__ = ["publish_time_position", "reset_command"]


def reset_command(
    read_position: Position,
    ack_set: tuple[int, ...] | None,
    ledger: ManagedLedger,
    messages: Mapping[Position, StoredMessage],
) -> pa.ResetCursor:
    """PA-22: the pending ack's reset for a seek to ``read_position``: the cursor restarts after the
    entry before the first live one at or after it (after the last entry when there is none), and
    a seek to a batch entry's index carries the entry's ack set."""
    infos, last = ledger.ledgers(), ledger.last_confirmed()
    start = reset_read_position(read_position, infos, last)
    mark_delete = last if start is None else previous_position(start, infos)
    read: pa.AckedPosition | None = None
    stored = None if start is None else messages.get(start)
    if start == read_position and ack_set is not None and stored is not None and stored.batch is not None:
        read = pa.AckedPosition(read_position, ack_set, stored.batch_size)
    return pa.ResetCursor(mark_delete, read)


def publish_time_position(
    ledger: ManagedLedger, messages: Mapping[Position, StoredMessage], timestamp: int
) -> Position:
    """PA-23: the entry after the newest one published before ``timestamp``, or the first live
    entry when none was."""
    earlier = [p for p, m in messages.items() if m.publish_time < timestamp]
    if not earlier:
        infos = ledger.ledgers()
        return next((Position(i.ledger_id, 0) for i in infos if i.entries > 0), ledger.last_confirmed().next())
    newest = max(earlier)
    return Position(newest.ledger_id, newest.entry_id + 1)
