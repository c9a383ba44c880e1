"""The coordinator's strategies (``tests/coordinator/test_stateful.py`` draws from these) and its driver.

The driver plays the transaction log's runner as the stateful test does: it remembers the txns
issued, the ends sent to the participants (``EndTxnInTransactionBuffer`` effects, answered later
with success, retryable or final failures), the re-runs scheduled (``ScheduleResumeEndTxn``), and
the clock; a crash loses the ends in flight and keeps the re-drives the recovery asked for.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.strategies.base import Crash, Driver, Observation, Rule, Setup
from reference import coordinator as tc
from spec.result import Err, Ok
from spec.types import Subscription, TxnAction, TxnID, TxnStatus

__all__ = [
    "ACTIONS",
    "ADVANCES",
    "ANSWERS",
    "AUTH",
    "CALLERS",
    "COORDINATOR_IDS",
    "MAX_ACTIVE",
    "NEW_TXN_OWNERS",
    "OWNERS",
    "PARTICIPANT_ERRORS",
    "PARTITIONS",
    "PARTITION_LISTS",
    "STATUSES",
    "SUBSCRIPTIONS",
    "SUBSCRIPTION_LISTS",
    "TICKS",
    "TIMEOUTS",
    "CoordinatorDriver",
    "config_overrides",
]

OWNERS = (None, "alice", "bob")
PARTITIONS = ("p0", "p1", "p2")
SUBSCRIPTIONS = (Subscription("t0", "s"), Subscription("t1", "s"), Subscription("t0", "x"))
PARTICIPANT_ERRORS = ((), (), ("ServiceUnitNotReady",), ("PersistenceError", "RequestTimeout"), ("NotAllowed",))

COORDINATOR_IDS = st.integers(0, 3)
MAX_ACTIVE = st.sampled_from((0, 0, 2, 3))
AUTH = st.booleans()
TIMEOUTS = st.sampled_from((0, 50, 100, 1_000, 60_000))
NEW_TXN_OWNERS = st.sampled_from((*OWNERS, ""))
ADVANCES = st.integers(0, 500)
CALLERS = st.sampled_from((*OWNERS, "admin"))
PARTITION_LISTS = st.lists(st.sampled_from(PARTITIONS), min_size=1, max_size=3)
SUBSCRIPTION_LISTS = st.lists(st.sampled_from(SUBSCRIPTIONS), min_size=1, max_size=3)
STATUSES = st.sampled_from(TxnStatus)
ACTIONS = st.sampled_from((TxnAction.COMMIT, TxnAction.ABORT, TxnAction.ABORT, 2))
ANSWERS = st.sampled_from(PARTICIPANT_ERRORS)
TICKS = st.sampled_from((1, 100, 1_000, 70_000))


def config_overrides(max_active: int, auth: bool) -> dict[str, Any]:
    """The broker.conf keys the stateful test varies: the max-active limit (TC-4) and whether a
    super user ``admin`` may touch any txn (TC-12)."""
    return {
        "maxActiveTransactionsPerCoordinator": max_active,
        "authenticationEnabled": auth,
        "authorizationEnabled": auth,
        "superUserRoles": ["admin"],
    }


class CoordinatorDriver(Driver):
    machine = "coordinator"

    def __init__(self, commands: frozenset[str] | None = None, crashes: bool = True) -> None:
        super().__init__(commands, crashes)
        self.now = 0
        self.issued: list[TxnID] = []
        self.runs: list[tc.EndTxnInTransactionBuffer] = []
        self.scheduled: list[tc.ScheduleResumeEndTxn] = []

    def setup(self, data: st.DataObject) -> Setup:
        coordinator_id = data.draw(COORDINATOR_IDS, label="coordinator_id")
        max_active = data.draw(MAX_ACTIVE, label="max_active")
        auth = data.draw(AUTH, label="auth")
        return Setup(config_overrides(max_active, auth), {"coordinator_id": coordinator_id})

    def pick(self, data: st.DataObject, state: tc.CoordinatorState) -> TxnID:
        """A txn to name: one issued, one of another coordinator, or one never issued.  Three times
        in four it is one issued, as a client's requests mostly are: drawn evenly among all the
        names, a run with one txn named it a third of the time, and a txn rarely lived long enough
        to take two partitions; it shrinks towards the even draw."""
        if self.issued and data.draw(st.integers(0, 3), label="an issued txn") > 0:
            return data.draw(st.sampled_from(self.issued), label="txn")
        return data.draw(st.sampled_from(self.known(state)), label="txn")

    def known(self, state: tc.CoordinatorState) -> list[TxnID]:
        foreign = TxnID(state.coordinator_id + 1, 0)
        unknown = TxnID(state.coordinator_id, state.sequence_id + 5)
        return [*self.issued, foreign, unknown]

    def rules(self) -> list[Rule]:
        return [
            Rule("new_txn", self._new_txn),
            Rule("add_partition_to_txn", self._add_partition),
            Rule("add_subscription_to_txn", self._add_subscription),
            Rule("update_txn_status", self._update_status),
            Rule("end_txn", self._end_txn),
            Rule("end_txn_in_transaction_buffer_result", self._participants_answer, lambda s: bool(self.runs)),
            Rule("resume_end_txn", self._resume, lambda s: bool(self.scheduled)),
            Rule("tick", self._tick),
            Rule("get_txn_status", lambda data, state: tc.GetTxnStatus(self.pick(data, state))),
            Rule("get_txn_meta", lambda data, state: tc.GetTxnMeta(self.pick(data, state))),
            Rule("get_slow_transactions", lambda data, state: tc.GetSlowTransactions(data.draw(TIMEOUTS))),
            Rule("close_store", lambda data, state: tc.CloseStore()),
            Rule("transaction_log_closed", lambda data, state: tc.TransactionLogClosed()),
            Rule("crash", lambda data, state: Crash()),
        ]

    def _new_txn(self, data: st.DataObject, state: tc.CoordinatorState) -> tc.NewTxn:
        timeout = data.draw(TIMEOUTS, label="timeout")
        owner = data.draw(NEW_TXN_OWNERS, label="owner")
        self.now += data.draw(ADVANCES, label="advance")
        return tc.NewTxn(timeout, self.now, owner)

    def _add_partition(self, data: st.DataObject, state: tc.CoordinatorState) -> tc.AddPartitionToTxn:
        txn = self.pick(data, state)
        names = data.draw(PARTITION_LISTS, label="partitions")
        return tc.AddPartitionToTxn(txn, tuple(names), self.now, data.draw(CALLERS, label="caller"))

    def _add_subscription(self, data: st.DataObject, state: tc.CoordinatorState) -> tc.AddSubscriptionToTxn:
        txn = self.pick(data, state)
        subs = data.draw(SUBSCRIPTION_LISTS, label="subscriptions")
        return tc.AddSubscriptionToTxn(txn, tuple(subs), self.now, data.draw(CALLERS, label="caller"))

    def _update_status(self, data: st.DataObject, state: tc.CoordinatorState) -> tc.UpdateTxnStatus:
        txn = self.pick(data, state)
        new, expected = data.draw(STATUSES, label="new"), data.draw(STATUSES, label="expected")
        return tc.UpdateTxnStatus(txn, new, expected, self.now)

    def _end_txn(self, data: st.DataObject, state: tc.CoordinatorState) -> tc.EndTxn:
        txn = self.pick(data, state)
        action = data.draw(ACTIONS, label="action")
        return tc.EndTxn(txn, action, self.now, data.draw(CALLERS, label="caller"))

    def _participants_answer(
        self, data: st.DataObject, state: tc.CoordinatorState
    ) -> tc.EndTxnInTransactionBufferResult:
        run = self.runs.pop(data.draw(st.integers(0, len(self.runs) - 1), label="run"))
        errors = data.draw(ANSWERS, label="errors")
        if not run.partitions and not run.subscriptions:
            errors = ()  # nobody to fail
        return tc.EndTxnInTransactionBufferResult(run.txn_id, run.action, self.now, run.is_timeout, errors)

    def _resume(self, data: st.DataObject, state: tc.CoordinatorState) -> tc.ResumeEndTxn:
        due = self.scheduled.pop(data.draw(st.integers(0, len(self.scheduled) - 1), label="scheduled"))
        self.now += due.delay_ms
        return tc.ResumeEndTxn(due.txn_id, due.action, self.now, due.is_timeout)

    def _tick(self, data: st.DataObject, state: tc.CoordinatorState) -> tc.Tick:
        self.now += data.draw(TICKS, label="advance")
        return tc.Tick(self.now)

    def after(self, step: object, result: Ok[Any] | Err, state: tc.CoordinatorState) -> None:
        if isinstance(step, Crash):
            self.runs = []  # ends in flight are lost with the broker
            self.scheduled = []
        if isinstance(step, tc.NewTxn) and isinstance(result, Ok) and isinstance(result.value, TxnID):
            self.issued.append(result.value)
        for effect in result.effects:
            if isinstance(effect, tc.EndTxnInTransactionBuffer):
                self.runs.append(effect)
            elif isinstance(effect, tc.ScheduleResumeEndTxn):
                self.scheduled.append(effect)

    def observations(self, state: tc.CoordinatorState) -> list[Observation]:
        plain: list[Observation] = [
            (name, {})
            for name in (
                "store_state",
                "sequence_id",
                "ongoing_count",
                "live_txns",
                "live_record_ids",
                "low_water_mark",
                "stats",
            )
        ]
        per_txn = [
            (name, {"txn_id": [txn.most_sig_bits, txn.least_sig_bits]})
            for txn in self.known(state)
            for name in ("txn_status", "produced_partitions", "acked_subscriptions", "record_ids")
        ]
        return plain + per_txn
