"""A Hypothesis state machine over a topic that rolls ledgers: the pending ack follows the durable
cursor across every boundary (PA-25).

The topic's ledgers close after one to three entries each.  Every cursor effect the pending ack
emits is written to a durable cursor (:mod:`reference.cursor`, which folds contiguous deletes
across ledgers, as both of the engine's ledgers do), and after each write the pending ack is told
to follow the cursor's mark-delete position when it is past its view's, as the broker does.  After
every step the view must be the cursor: the same mark-delete position and the same individual
deletes, so it never holds more than the cursor does, however many ledgers the subscription has
read through; and every invariant and step property of the machine holds.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from invariants.base import violated, violated_steps
from invariants.pending_ack import INVARIANTS, STEP_PROPERTIES
from reference.cursor import CursorState, apply_delete, apply_mark_delete
from reference.pending_ack import (
    AbortTxn,
    AckedPosition,
    CommitTxn,
    CumulativeAck,
    CursorCumulativeAck,
    CursorIndividualAck,
    FollowCursor,
    HandleState,
    IndividualAck,
    NormalAck,
    PendingAckState,
    SubType,
    initial,
    message_state,
    step,
)
from reference.persistent import evolve
from spec.config import Config
from spec.types import AckType, LedgerInfo, MessageState, Position, TxnID

TXNS = st.builds(TxnID, st.just(1), st.integers(0, 3))


class RollingTopic(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.config = Config().with_overrides({"transactionPendingAckLogIndexMinLag": 2})
        # Failover: cumulative acks count (PA-10), and the handle's store is open (PA-17).
        state = initial(self.config, sub_type=SubType.Failover)
        self.state: PendingAckState = evolve(state, handle_state=HandleState.READY)
        self.cursor = CursorState(mark_delete=Position(0, -1))
        self.ledgers: list[LedgerInfo] = [LedgerInfo(0, 0)]
        self.capacity = 1
        self.follows = 0

    # -- the topic --------------------------------------------------------------------------------

    @property
    def last_confirmed(self) -> Position:
        current = self.ledgers[-1]
        return Position(current.ledger_id, current.entries - 1)

    def written(self) -> list[Position]:
        return [Position(info.ledger_id, e) for info in self.ledgers for e in range(info.entries)]

    @rule(count=st.integers(1, 4), capacity=st.integers(1, 3))
    def publish(self, count: int, capacity: int) -> None:
        """Entries go to the current ledger, which rolls over once it holds ``capacity`` of them."""
        for _ in range(count):
            current = self.ledgers[-1]
            self.ledgers[-1] = LedgerInfo(current.ledger_id, current.entries + 1)
            if current.entries + 1 >= self.capacity:
                self.ledgers.append(LedgerInfo(current.ledger_id + 1, 0))
                self.capacity = capacity

    # -- the subscription -------------------------------------------------------------------------

    def _do(self, command: Any) -> Any:
        before = self.state
        after, result = step(before, command)
        broken = violated_steps(STEP_PROPERTIES, before, command, result, after)
        assert broken == [], f"{broken} after {command!r} -> {result!r}"
        self.state = after
        for effect in result.effects:
            if isinstance(effect, CursorIndividualAck):
                positions = [a.position for a in effect.positions]
                self.cursor = apply_delete(self.cursor, positions, None, self.ledgers, self.last_confirmed)
            elif isinstance(effect, CursorCumulativeAck):
                position = effect.position.position
                self.cursor = apply_mark_delete(self.cursor, position, self.ledgers, self.last_confirmed)
        if self.cursor.mark_delete > self.state.cursor.mark_delete_position:
            # The broker's side of PA-25: the durable cursor folded past the view's reach.
            self.follows += 1
            self._do(FollowCursor(self.cursor.mark_delete))
        return result

    def _entry(self, data: st.DataObject) -> AckedPosition:
        return AckedPosition(data.draw(st.sampled_from(self.written())))

    @precondition(lambda self: self.written())
    @rule(data=st.data(), cumulative=st.booleans())
    def normal_ack(self, data: st.DataObject, cumulative: bool) -> None:
        ack_type = AckType.CUMULATIVE if cumulative else AckType.INDIVIDUAL
        self._do(NormalAck(ack_type, (self._entry(data),)))

    @precondition(lambda self: self.written())
    @rule(data=st.data(), txn=TXNS)
    def txn_individual_ack(self, data: st.DataObject, txn: TxnID) -> None:
        self._do(IndividualAck(txn, (self._entry(data),)))

    @precondition(lambda self: self.written())
    @rule(data=st.data(), txn=TXNS)
    def txn_cumulative_ack(self, data: st.DataObject, txn: TxnID) -> None:
        self._do(CumulativeAck(txn, (self._entry(data),)))

    @rule(txn=TXNS, commit=st.booleans())
    def end_txn(self, txn: TxnID, commit: bool) -> None:
        self._do(CommitTxn(txn, -1) if commit else AbortTxn(txn, -1))

    # -- what must hold ---------------------------------------------------------------------------

    @invariant()
    def view_is_the_cursor(self) -> None:
        view = self.state.cursor
        assert view.mark_delete_position == self.cursor.mark_delete
        assert view.individually_deleted == self.cursor.individually_deleted
        for position in self.written():
            deleted = message_state(self.state, position) is MessageState.DELETED
            assert deleted == self.cursor.is_deleted(position), position

    @invariant()
    def invariants_hold(self) -> None:
        assert violated(INVARIANTS, self.state) == []


TestRollingTopic = RollingTopic.TestCase
