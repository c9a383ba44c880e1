"""The coordinator driven by Hypothesis, with the test playing the transaction log and the runner.

Every command of ``reference.coordinator`` is driven: new transactions (short and long
timeouts, owners, the max-active limit), adds, direct status updates, END_TXN with every action
and caller, participants' answers (success, retryable and final failures), re-runs, ticks, the
store's lifecycle, and a crash that reloads the coordinator from the records still live in the
log.  After every step all invariants (TC-3, TC-9, TC-17 ...) and step properties hold, and:

* the log the effects built is exactly the records of the live txns (TC-8, TC-9, TC-10);
* a crash-and-recover yields ``after_crash(live state)`` (TC-25), whose next TxnID is above
  every TxnID ever issued (TC-23);
* the low watermark sent with every end is below the ending txn and never decreases (TC-14, TC-17).
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conformance.strategies import coordinator as cs
from invariants.base import violated, violated_steps
from invariants.coordinator import INVARIANTS, STEP_PROPERTIES
from reference import coordinator as tc
from spec.config import Config
from spec.result import Err, Ok
from spec.types import Subscription, TxnAction, TxnID, TxnStatus

OWNERS = cs.OWNERS
PARTITIONS = cs.PARTITIONS
SUBSCRIPTIONS = cs.SUBSCRIPTIONS
PARTICIPANT_ERRORS = cs.PARTICIPANT_ERRORS


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = tc.initial(Config())
        self.log: dict[int, tc.TxnLogRecord] = {}
        self.last_max_local_txn_id = -1
        self.now = 0
        self.issued: list[TxnID] = []
        self.runs: list[tc.EndTxnInTransactionBuffer] = []
        self.scheduled: list[tc.ScheduleResumeEndTxn] = []
        self.sent_lwm = -(1 << 62)

    @initialize(coordinator_id=cs.COORDINATOR_IDS, max_active=cs.MAX_ACTIVE, auth=cs.AUTH)
    def setup(self, coordinator_id: int, max_active: int, auth: bool) -> None:
        config = Config().with_overrides(cs.config_overrides(max_active, auth))
        self.state = tc.initial(config, coordinator_id)

    # --- the runner --------------------------------------------------------------------------

    def apply(self, command: object) -> tc.Result:
        before = self.state
        after, result = tc.step(before, command)  # type: ignore[arg-type]
        assert violated_steps(STEP_PROPERTIES, before, command, result, after) == []
        for effect in result.effects:
            if isinstance(effect, tc.AppendRecord):
                assert effect.record_id not in self.log, "TC-28: a live record id was reused"
                self.log[effect.record_id] = effect.record
                assert effect.record.max_local_txn_id is not None
                self.last_max_local_txn_id = effect.record.max_local_txn_id
            elif isinstance(effect, tc.DeleteRecords):
                for rid in effect.record_ids:
                    assert rid in self.log, f"deleting record {rid} that is not in the log"
                    del self.log[rid]
            elif isinstance(effect, tc.EndTxnInTransactionBuffer):
                # TC-14: the lwm is below the ending txn and the values sent never decrease.
                assert effect.low_water_mark < effect.txn_id.least_sig_bits
                if after.store_state is tc.StoreState.READY:
                    assert effect.low_water_mark >= self.sent_lwm
                    self.sent_lwm = effect.low_water_mark
                self.runs.append(effect)
            elif isinstance(effect, tc.ScheduleResumeEndTxn):
                self.scheduled.append(effect)
        if isinstance(result, Err) and isinstance(command, tc.NewTxn):
            assert after == before
        self.state = after
        return result

    def pick(self, data: st.DataObject) -> TxnID:
        foreign = TxnID(self.state.coordinator_id + 1, 0)
        unknown = TxnID(self.state.coordinator_id, self.state.sequence_id + 5)
        return data.draw(st.sampled_from([*self.issued, foreign, unknown]))

    # --- client operations -------------------------------------------------------------------

    @rule(timeout=cs.TIMEOUTS, owner=cs.NEW_TXN_OWNERS, advance=cs.ADVANCES)
    def new_txn(self, timeout: int, owner: str | None, advance: int) -> None:
        self.now += advance
        result = self.apply(tc.NewTxn(timeout, self.now, owner))
        if isinstance(result, Ok):
            txn = result.value
            assert isinstance(txn, TxnID)
            assert all(txn > old for old in self.issued), "TC-3/TC-23: ids are fresh and increasing"
            self.issued.append(txn)

    @rule(data=st.data(), names=cs.PARTITION_LISTS, caller=cs.CALLERS)
    def add_partition_to_txn(self, data: st.DataObject, names: list[str], caller: str | None) -> None:
        self.apply(tc.AddPartitionToTxn(self.pick(data), tuple(names), self.now, caller))

    @rule(data=st.data(), subs=cs.SUBSCRIPTION_LISTS, caller=cs.CALLERS)
    def add_subscription_to_txn(self, data: st.DataObject, subs: list[Subscription], caller: str | None) -> None:
        self.apply(tc.AddSubscriptionToTxn(self.pick(data), tuple(subs), self.now, caller))

    @rule(data=st.data(), new=cs.STATUSES, expected=cs.STATUSES)
    def update_txn_status(self, data: st.DataObject, new: TxnStatus, expected: TxnStatus) -> None:
        self.apply(tc.UpdateTxnStatus(self.pick(data), new, expected, self.now))

    @rule(data=st.data(), action=cs.ACTIONS, caller=cs.CALLERS)
    def end_txn(self, data: st.DataObject, action: TxnAction | int, caller: str | None) -> None:
        self.apply(tc.EndTxn(self.pick(data), action, self.now, caller))

    # --- the runner's follow-ups -------------------------------------------------------------

    @precondition(lambda self: bool(self.runs))
    @rule(data=st.data(), errors=cs.ANSWERS)
    def participants_answer(self, data: st.DataObject, errors: tuple[str, ...]) -> None:
        run = self.runs.pop(data.draw(st.integers(0, len(self.runs) - 1)))
        if not run.partitions and not run.subscriptions:
            errors = ()  # nobody to fail
        self.apply(tc.EndTxnInTransactionBufferResult(run.txn_id, run.action, self.now, run.is_timeout, errors))

    @precondition(lambda self: bool(self.scheduled))
    @rule(data=st.data())
    def resume_end_txn(self, data: st.DataObject) -> None:
        due = self.scheduled.pop(data.draw(st.integers(0, len(self.scheduled) - 1)))
        self.now += due.delay_ms
        self.apply(tc.ResumeEndTxn(due.txn_id, due.action, self.now, due.is_timeout))

    @rule(advance=cs.TICKS)
    def tick(self, advance: int) -> None:
        self.now += advance
        self.apply(tc.Tick(self.now))

    @rule(data=st.data())
    def get_txn_meta(self, data: st.DataObject) -> None:
        txn = self.pick(data)
        result = self.apply(tc.GetTxnStatus(txn))
        assert isinstance(result, Ok) == (tc.txn_status(self.state, txn) is not None)

    @rule()
    def close_store(self) -> None:
        self.apply(tc.CloseStore())

    @rule()
    def transaction_log_closed(self) -> None:
        self.apply(tc.TransactionLogClosed())

    # --- crash and recovery (TC-21 .. TC-25) --------------------------------------------------

    @rule()
    def crash_and_recover(self) -> None:
        expected = tc.after_crash(self.state)
        recovered, effects = tc.recover(
            self.state.config, self.state.coordinator_id, sorted(self.log.items()), self.last_max_local_txn_id
        )
        assert recovered == expected, "TC-25"
        assert all(seq <= recovered.sequence_id for seq in (t.least_sig_bits for t in self.issued)), "TC-23"
        assert all(isinstance(e, tc.ScheduleResumeEndTxn) for e in effects), "a live run leaves no orphans"
        self.state = recovered
        self.runs = []  # ends in flight are lost with the broker
        self.scheduled = list(effects)  # type: ignore[arg-type]

    # --- checks ------------------------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        assert violated(INVARIANTS, self.state) == []

    @invariant()
    def log_is_the_live_records(self) -> None:
        live = {rid: None for meta in self.state.txns.values() for rid in meta.record_ids}
        assert set(self.log) == set(live)
        for seq, meta in self.state.txns.items():
            assert self.log[meta.record_ids[0]].metadata_op is tc.TxnMetadataOp.NEW
            assert all(self.log[rid].txn_id.least_sig_bits == seq for rid in meta.record_ids)

    @invariant()
    def max_active_respected_by_new_txn(self) -> None:
        limit = self.state.config.max_active_transactions_per_coordinator
        assert limit == 0 or len(self.state.txns) <= limit  # TC-4


TestCoordinator = CoordinatorMachine.TestCase
