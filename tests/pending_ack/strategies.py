"""Hypothesis strategies for pending-ack commands and states over a small, fixed topic.

The topic is one ledger (id 0) of ``len(BATCH_SIZES)`` entries; entry e holds ``BATCH_SIZES[e]``
messages.  Txns come from two coordinators with small sequences, so conflicts, low watermarks and
reuse happen often.
"""

from __future__ import annotations

from hypothesis import strategies as st

from reference.pending_ack import (
    AbortTxn,
    AckedPosition,
    CommitTxn,
    CumulativeAck,
    IndividualAck,
    NormalAck,
    ResetCursor,
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
