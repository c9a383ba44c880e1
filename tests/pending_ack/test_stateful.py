"""A Hypothesis state machine that drives every pending-ack command, crashes and recovers.

After every step all of ``invariants.pending_ack.INVARIANTS`` and ``STEP_PROPERTIES`` must hold.
A crash replays the surviving pending-ack log over the cursor (PA-18); the recovered cursor and
pending-ack maps must equal the live ones (PA-19), and what differs is only what PA-20 lists.
"""

from __future__ import annotations

from typing import Any

from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from conformance.strategies import pending_ack as pst
from invariants.base import violated, violated_steps
from invariants.pending_ack import INVARIANTS, STEP_PROPERTIES
from reference.pending_ack import (
    ClosePendingAckHandle,
    HandleState,
    PendingAckInitComplete,
    PendingAckInitFailed,
    PendingAckState,
    RetryPendingAckInit,
    initial,
    pending_ack_view,
    recover,
    step,
    surviving_records,
)
from spec.config import Config
from spec.result import Effect


class PendingAckMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # A small minLag so the log index fills and the log is trimmed within a short run (PA-16).
        self.config = Config().with_overrides(pst.CONFIG)
        self.state: PendingAckState = initial(self.config)
        self.log: list[Effect] = []

    def _do(self, command: Any) -> Any:
        before = self.state
        after, result = step(before, command)
        broken = violated_steps(STEP_PROPERTIES, before, command, result, after)
        assert broken == [], f"{broken} after {command!r} -> {result!r}"
        self.log.extend(result.effects)
        self.state = after
        return result

    @rule(command=pst.ready_commands)
    def txn_or_normal_command(self, command: Any) -> None:
        self._do(command)

    @rule(command=pst.TXN_COMMANDS)
    def txn_command(self, command: Any) -> None:
        # Weighted towards txn traffic, which is what grows the pending state.
        self._do(command)

    @rule(command=pst.resets())
    def reset_cursor(self, command: Any) -> None:
        """PA-22: a seek, refused while anything is pending; the crash rule then checks that
        replay over the reset cursor is still exact (PA-19)."""
        self._do(command)

    @rule()
    def init_complete(self) -> None:
        self._do(PendingAckInitComplete())

    @rule(retryable=pst.RETRYABLE)
    def init_failed(self, retryable: bool) -> None:
        self._do(PendingAckInitFailed(retryable))

    @rule()
    def retry_init(self) -> None:
        self._do(RetryPendingAckInit())

    @rule()
    def close(self) -> None:
        self._do(ClosePendingAckHandle())

    @rule()
    def crash_and_recover(self) -> None:
        """PA-18, PA-19, PA-20: replay the surviving log over the persisted cursor."""
        live = self.state
        records = surviving_records(self.log)
        recovered = recover(
            self.config,
            records,
            cursor=live.cursor,
            log_mark_delete=live.log_mark_delete,
            next_record_id=live.next_record_id,
        )
        assert pending_ack_view(recovered) == pending_ack_view(live)
        assert sorted(recovered.txn_order) == sorted(live.txn_order)  # PA-20: the order may differ
        assert recovered.handle_state is HandleState.READY
        assert recovered.queued == ()
        assert not recovered.low_water_marks  # PA-20
        assert recovered.next_record_id == live.next_record_id
        assert violated(INVARIANTS, recovered) == []
        self.state = recovered

    @invariant()
    def invariants_hold(self) -> None:
        assert violated(INVARIANTS, self.state) == []


TestPendingAckMachine = PendingAckMachine.TestCase
