"""The pending ack's strategies (``tests/pending_ack/test_stateful.py`` draws from these) and its driver.

The topic is one ledger (id 0) of ``len(BATCH_SIZES)`` entries; entry e holds ``BATCH_SIZES[e]``
messages.  Txns come from two coordinators with small sequences, so conflicts, low watermarks and
reuse happen often.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.strategies.base import Crash, Driver, Observation, Rule, Setup
from reference.pending_ack import (
    AbortTxn,
    AckedPosition,
    ClosePendingAckHandle,
    CommitTxn,
    CumulativeAck,
    IndividualAck,
    NormalAck,
    PendingAckInitComplete,
    PendingAckInitFailed,
    ResetCursor,
    RetryPendingAckInit,
)
from spec.types import AckType, Position, TxnID

BATCH_SIZES: tuple[int, ...] = (1, 4, 1, 3, 1, 2)
ENTRIES = len(BATCH_SIZES)

txn_ids = st.builds(TxnID, st.integers(1, 2), st.integers(0, 3))
low_water_marks = st.integers(-1, 3)


@st.composite
def acked_positions(draw: st.DrawFn, *, allow_batch: bool = True) -> AckedPosition:
    entry = draw(st.integers(0, ENTRIES - 1))
    size = BATCH_SIZES[entry]
    position = Position(0, entry)
    if size == 1 or not allow_batch or draw(st.booleans()):
        return AckedPosition(position, None, size)
    indexes = draw(st.sets(st.integers(0, size - 1), min_size=1, max_size=size))
    return AckedPosition.of_indexes(position, size, indexes)


individual_acks = st.builds(IndividualAck, txn_ids, st.lists(acked_positions(), max_size=3).map(tuple))
cumulative_acks = st.builds(CumulativeAck, txn_ids, acked_positions().map(lambda a: (a,)))
normal_individual_acks = st.builds(
    NormalAck, st.just(AckType.INDIVIDUAL), st.lists(acked_positions(), min_size=1, max_size=2).map(tuple)
)
normal_cumulative_acks = st.builds(NormalAck, st.just(AckType.CUMULATIVE), acked_positions().map(lambda a: (a,)))
commits = st.builds(CommitTxn, txn_ids, low_water_marks)
aborts = st.builds(AbortTxn, txn_ids, low_water_marks)

ready_commands = st.one_of(
    individual_acks, cumulative_acks, normal_individual_acks, normal_cumulative_acks, commits, aborts
)


@st.composite
def resets(draw: st.DrawFn) -> ResetCursor:
    """A seek (PA-22): back or forward to any entry, sometimes to a batch index of it."""
    read = draw(st.integers(0, ENTRIES - 1))
    mark_delete = Position(0, read - 1)
    size = BATCH_SIZES[read]
    if size == 1 or draw(st.booleans()):
        return ResetCursor(mark_delete)
    first = draw(st.integers(1, size - 1))  # the seek's batch index: the ones before it stay deleted
    return ResetCursor(mark_delete, AckedPosition.of_indexes(Position(0, read), size, range(first)))


# --- the driver -------------------------------------------------------------------------------------

#: The log index fills and the log is trimmed within a short run (PA-16).
CONFIG: dict[str, Any] = {"transactionPendingAckLogIndexMinLag": 2}
TXN_COMMANDS = st.one_of(individual_acks, commits, aborts)
RETRYABLE = st.booleans()


class PendingAckDriver(Driver):
    """The subscription's surroundings: acks (with and without a txn), commits and aborts from the
    coordinator, seeks, the handle's initialisation, close, and crashes that replay the surviving
    pending-ack log over the cursor (PA-18 .. PA-20)."""

    machine = "pending_ack"

    def setup(self, data: st.DataObject) -> Setup:
        return Setup(dict(CONFIG), {})

    def rules(self) -> list[Rule]:
        return [
            Rule("individual_ack", lambda data, state: data.draw(ready_commands, label="command")),
            Rule("individual_ack", lambda data, state: data.draw(TXN_COMMANDS, label="command")),
            Rule("reset_cursor", lambda data, state: data.draw(resets(), label="reset")),
            Rule("init_complete", lambda data, state: PendingAckInitComplete()),
            Rule("init_failed", lambda data, state: PendingAckInitFailed(data.draw(RETRYABLE, label="retryable"))),
            Rule("retry_init", lambda data, state: RetryPendingAckInit()),
            Rule("close", lambda data, state: ClosePendingAckHandle()),
            Rule("crash", lambda data, state: Crash()),
        ]

    def observations(self, state: Any) -> list[Observation]:
        plain: list[Observation] = [
            (name, {})
            for name in (
                "handle_state",
                "cumulative_ack",
                "mark_delete_position",
                "low_water_marks",
                "log_index",
                "pending_txns",
            )
        ]
        positions: list[Observation] = []
        for entry, size in enumerate(BATCH_SIZES):
            position = [0, entry]
            positions.append(("message_state", {"position": position}))
            positions.append(("check_position_in_pending_ack_state", {"position": position}))
            for index in range(size if size > 1 else 0):
                positions.append(("message_state", {"position": position, "batch_index": index}))
            if size > 1:
                positions.append(("cursor_deleted_indexes", {"position": position}))
        txns: list[Observation] = [
            ("txn_positions", {"txn_id": [most, least]}) for most in (1, 2) for least in range(4)
        ]
        return plain + positions + txns
