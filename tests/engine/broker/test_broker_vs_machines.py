"""The whole broker against the composition of the pure machines, step by step, with crashes.

The *engine* side is the simulated broker driven through the Pulsar-shaped client (ledgers,
record logs, the END_TXN path, the dispatcher).  The *model* side composes the pure machines by
hand, synchronously, exactly as the rules say they talk to each other: the client transaction
(:mod:`reference.client`) registers partitions and subscriptions with the coordinator
(:mod:`reference.coordinator`); END_TXN's phase 2 steps the transaction buffer
(:mod:`reference.buffer`) and the pending ack (:mod:`reference.pending_ack`) with the low
watermark; the dispatcher's auto-acknowledgement of markers and aborted messages (TB-17) is a
``NormalAck``.  A crash is the machines' own recovery: ``coordinator.after_crash`` (TC-25),
``buffer.restart`` + recovery (TB-24), ``pending_ack.recover`` over the surviving records (PA-18).

After every step the two must agree: the coordinator's live transactions with their status,
partitions and subscriptions; the buffer's status, max read position, ongoing and aborted
transactions, low watermarks and entries; and PIP-31's state of every message on the
subscription (PA-1) plus the pending ack's transactions and cumulative slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from engine.broker import partition_name
from engine.simulation.client import Cluster, Consumer, OperationFailed, Transaction
from engine.storage import memory_ledger as ml
from reference import buffer as tb
from reference import client as ct
from reference import coordinator as tc
from reference import pending_ack as pa
from reference.ledger import ledger_is_full
from spec.config import Config
from spec.result import Err, Ok
from spec.types import EARLIEST, AckType, Position, Subscription, TxnAction, TxnID

P = partition_name("t", 0)
S = "sub"
CONFIG = Config().with_overrides(
    {"managedLedgerMaxEntriesPerLedger": 4, "transactionBufferSnapshotMaxTransactionCount": 3}
)


@dataclass
class Pure:
    """The pure machines of one coordinator, one partition and one Exclusive subscription."""

    coordinator: tc.CoordinatorState = field(default_factory=lambda: tc.initial(CONFIG))
    buffer: tb.BufferState = field(default_factory=lambda: tb.initial(CONFIG, topic=P, ledger_id=0))
    pending: pa.PendingAckState = field(default_factory=lambda: pa.initial(CONFIG, sub_type=pa.SubType.Exclusive))
    clients: dict[TxnID, ct.ClientTxn] = field(default_factory=dict)
    pa_effects: list[Any] = field(default_factory=list)
    read_after: Position = EARLIEST
    pa_log_exists: bool = False
    # The subscription's durable cursor: the managed ledger's pure cursor rules, fed by the pending
    # ack's cursor effects.  Unlike the pending ack's own view it knows the ledger layout, so its
    # mark-delete crosses ledger boundaries (ManagedCursorImpl) -- and that is what a reload reads.
    ml_cursor: ml.CursorState = field(default_factory=lambda: ml.CursorState(Position(0, -1)))

    # -- the buffer and its managed ledger ------------------------------------------------------

    def buffer_step(self, command: Any) -> Ok[Any] | Err:
        self.buffer, result = tb.step(self.buffer, command)
        for effect in result.effects:
            if isinstance(effect, tb.AppendEntry):
                self._roll_if_full()
        return result

    def _roll_if_full(self) -> None:
        current = self.buffer.ledgers[-1]
        if ledger_is_full(current.entries, 0, CONFIG):
            self.buffer, _ = tb.step(self.buffer, tb.RollOverLedger())

    def append(self, txn: TxnID | None) -> Position | None:
        result = self.buffer_step(tb.PublishMessage() if txn is None else tb.AppendBufferToTxn(txn))
        if isinstance(result, Err):
            return None
        if isinstance(result.value, tb.Queued):  # TB-4: the first snapshot, then the parked append
            done = self.buffer_step(tb.CompleteFirstSnapshot())
            assert isinstance(done, Ok)
            outcome = done.value[-1]
            return outcome.position  # type: ignore[no-any-return]
        return result.value  # type: ignore[no-any-return]

    def trim(self) -> None:
        """Topic retention (TB-23): closed ledgers the cursor's mark-delete passed go, oldest first,
        while the buffer agrees."""
        ledgers = self.buffer.ledgers
        for ledger_id in ml.consumed_ledgers(ledgers, ledgers[-1].ledger_id, [self.ml_cursor.mark_delete]):
            buffer, result = tb.step(self.buffer, tb.DeleteLedger(ledger_id))
            if isinstance(result, Err):
                return
            self.buffer = buffer

    # -- the pending ack ----------------------------------------------------------------------------

    def _cursor(self, effects: tuple[Any, ...]) -> None:
        self.pa_effects.extend(effects)
        ledgers, lac = self.buffer.ledgers, tb.last_confirmed_entry(self.buffer)
        for effect in effects:
            if isinstance(effect, pa.CursorIndividualAck):
                self.ml_cursor = ml.apply_delete(
                    self.ml_cursor, [a.position for a in effect.positions], None, ledgers, lac
                )
            elif isinstance(effect, pa.CursorCumulativeAck):
                self.ml_cursor = ml.apply_mark_delete(self.ml_cursor, effect.position.position, ledgers, lac)

    def pending_step(self, command: Any) -> Ok[Any] | Err:
        self.pending, result = pa.step(self.pending, command)
        self._cursor(result.effects)
        if isinstance(result, Ok) and isinstance(result.value, pa.Queued):  # PA-17: lazy init
            self.pa_log_exists = True
            self.pending, done = pa.step(self.pending, pa.PendingAckInitComplete())
            self._cursor(done.effects)
            assert isinstance(done, Ok)
            outcome = done.value[-1]
            return outcome  # type: ignore[no-any-return]
        return result

    def dispatch(self) -> None:
        """TB-17: what a connected consumer reads past is auto-acknowledged when it is not delivered."""
        read = tb.dispatch(self.buffer, self.read_after)
        if read.auto_acked:
            self.pending_step(pa.NormalAck(AckType.INDIVIDUAL, tuple(pa.AckedPosition(p) for p in read.auto_acked)))
        seen = [*read.delivered, *read.auto_acked]
        if seen:
            self.read_after = max(self.read_after, *seen)

    # -- the client transaction and the coordinator ---------------------------------------------

    def client_step(self, txn: TxnID, command: Any) -> Ok[Any] | Err:
        self.clients[txn], result = ct.step(self.clients[txn], command)
        for effect in result.effects:
            if isinstance(effect, ct.SendAddPartitionToTxn):
                self.coordinator, added = tc.step(self.coordinator, tc.AddPartitionToTxn(txn, (effect.topic,), 0))
                assert isinstance(added, Ok), added
            elif isinstance(effect, ct.SendAddSubscriptionToTxn):
                self.coordinator, added = tc.step(
                    self.coordinator, tc.AddSubscriptionToTxn(txn, (effect.subscription,), 0)
                )
                assert isinstance(added, Ok), added
        return result

    def end(self, txn: TxnID, action: TxnAction) -> str | None:
        """The client's END_TXN through all three phases; returns the error the user sees."""
        result = self.client_step(txn, ct.Commit() if action is TxnAction.COMMIT else ct.Abort())
        if isinstance(result, Err):
            return result.error.name
        sent = [e for e in result.effects if isinstance(e, ct.SendEndTxn)]
        assert len(sent) == 1
        self.coordinator, ended = tc.step(self.coordinator, tc.EndTxn(txn, sent[0].action, 0))
        error = None
        if isinstance(ended, Err):
            error = ended.error.name
        else:
            (phase2,) = [e for e in ended.effects if isinstance(e, tc.EndTxnInTransactionBuffer)]
            lwm = phase2.low_water_mark
            for _ in phase2.partitions:
                done = self.buffer_step(
                    tb.CommitTxn(txn, lwm) if phase2.action is TxnAction.COMMIT else tb.AbortTxn(txn, lwm)
                )
                assert isinstance(done, Ok), done
            for _ in phase2.subscriptions:
                done = self.pending_step(
                    pa.CommitTxn(txn, lwm) if phase2.action is TxnAction.COMMIT else pa.AbortTxn(txn, lwm)
                )
                assert isinstance(done, Ok), done
            self.coordinator, finished = tc.step(
                self.coordinator, tc.EndTxnInTransactionBufferResult(txn, phase2.action, 0)
            )
            assert isinstance(finished, Ok), finished
        _, answered = ct.step(self.clients[txn], ct.EndTxnResponse(error))
        self.clients[txn] = _
        (complete,) = [e for e in answered.effects if isinstance(e, ct.CompleteEnd)]
        return complete.error

    def crash(self) -> None:
        """Every machine recovers from what it persisted (TC-25, TB-24, PA-18)."""
        self.coordinator = tc.after_crash(self.coordinator)
        buffer = tb.restart(self.buffer)
        buffer, _ = tb.step(buffer, tb.RollOverLedger())  # the managed ledger reopens on a new ledger
        buffer, _ = tb.step(buffer, tb.StartRecovery())
        self.buffer, _ = tb.step(buffer, tb.CompleteRecovery())
        cursor = pa.CursorView(self.ml_cursor.mark_delete, self.ml_cursor.individually_deleted)
        if self.pa_log_exists:
            records = pa.surviving_records(self.pa_effects)
            self.pending = pa.recover(CONFIG, records, cursor=cursor, sub_type=pa.SubType.Exclusive)
        else:
            self.pending = pa.initial(CONFIG, sub_type=pa.SubType.Exclusive, cursor=cursor)
        self.read_after = cursor.mark_delete_position


class BrokerVersusMachines(RuleBasedStateMachine):
    batching = False

    def __init__(self) -> None:
        super().__init__()
        self.cluster = Cluster.start(seed=0, topics={"t": 1}, config=CONFIG, batching=self.batching)
        self.client = self.cluster.client()
        self.producer = self.client.create_producer("t")
        self.consumer: Consumer = self.client.subscribe("t", S)
        self.model = Pure()
        self.txns: list[Transaction] = []
        self.positions: list[Position] = []
        self.sent = 0

    def _open(self) -> list[Transaction]:
        return [t for t in self.txns if t.txn_state.name == "OPEN"]

    def _txn(self, index: int) -> Transaction | None:
        """Mostly an open transaction (index < 3), sometimes none, sometimes an ended one."""
        live = self._open()
        if index < 3 and live:
            return live[index % len(live)]
        if index == 3 and self.txns:
            return self.txns[index % len(self.txns)]
        return None

    @precondition(lambda self: len([t for t in self.txns if t.txn_state.name == "OPEN"]) < 3)
    @rule()
    def new_txn(self) -> None:
        txn = self.client.new_transaction(600_000)
        self.model.coordinator, made = tc.step(self.model.coordinator, tc.NewTxn(600_000, 0))
        assert isinstance(made, Ok) and made.value == txn.txn_id
        self.model.clients[txn.txn_id] = ct.initial(CONFIG, txn.txn_id, 600_000)
        self.txns.append(txn)

    @rule(which=st.integers(0, 4))
    def send(self, which: int) -> None:
        txn = self._txn(which)
        self.sent += 1
        engine: Position | None
        try:
            engine = self.producer.send(f"m{self.sent}", txn=txn)
        except OperationFailed:
            engine = None
        model: Position | None
        if txn is None:
            model = self.model.append(None)
        else:
            registered = self.model.client_step(txn.txn_id, ct.Send(P))
            model = None if isinstance(registered, Err) else self.model.append(txn.txn_id)
            if isinstance(registered, Ok):
                self.model.client_step(txn.txn_id, ct.OpCompleted(failed=model is None))
        assert engine == model
        if engine is not None:
            self.positions.append(engine)

    @precondition(lambda self: bool(self.positions))
    @rule(index=st.integers(0, 50), which=st.integers(0, 4), cumulative=st.booleans())
    def ack(self, index: int, which: int, cumulative: bool) -> None:
        position = self.positions[index % len(self.positions)]
        txn = self._txn(which)
        engine_error = None
        try:
            if cumulative:
                self.consumer.acknowledge_cumulative(position, txn=txn)
            else:
                self.consumer.acknowledge(position, txn=txn)
        except OperationFailed as failed:
            engine_error = failed.error.name
        acked = (pa.AckedPosition(position),)
        model_error = None
        if txn is None:
            result = self.model.pending_step(
                pa.NormalAck(AckType.CUMULATIVE if cumulative else AckType.INDIVIDUAL, acked)
            )
        else:
            result = self.model.client_step(txn.txn_id, ct.Ack(Subscription(P, S)))
            if isinstance(result, Ok):
                result = self.model.pending_step(
                    pa.CumulativeAck(txn.txn_id, acked) if cumulative else pa.IndividualAck(txn.txn_id, acked)
                )
                self.model.client_step(txn.txn_id, ct.OpCompleted(failed=isinstance(result, Err)))
        if isinstance(result, Err):
            model_error = result.error.name
        assert engine_error == model_error

    @precondition(lambda self: bool(self.txns))
    @rule(which=st.integers(0, 8), commit=st.booleans())
    def end(self, which: int, commit: bool) -> None:
        live = self._open()
        txn = live[which % len(live)] if live and which < 7 else self.txns[which % len(self.txns)]
        engine_error = None
        try:
            txn.commit() if commit else txn.abort()
        except OperationFailed as failed:
            engine_error = failed.error.name
        model_error = self.model.end(txn.txn_id, TxnAction.COMMIT if commit else TxnAction.ABORT)
        assert engine_error == model_error

    @rule()
    def crash_and_restart(self) -> None:
        self.cluster.broker.crash()
        self.cluster.broker.restart()
        sub = self.cluster.broker.subscription(P, S)
        assert sub is not None and sub.ready
        sub.add_consumer(self.consumer.consumer_id)  # the consumer reconnects
        self.model.crash()

    @invariant()
    def agree(self) -> None:
        self.cluster.sim.advance(5)  # let the answers of the last step settle
        self.model.dispatch()
        self.model.trim()
        broker = self.cluster.broker
        engine_tc, model_tc = broker.coordinator.state, self.model.coordinator
        assert engine_tc is not None

        def txns(state: tc.CoordinatorState) -> dict[int, tuple[Any, ...]]:
            return {seq: (m.status, m.sorted_partitions(), m.sorted_subscriptions()) for seq, m in state.txns.items()}

        assert txns(engine_tc) == txns(model_tc)
        assert engine_tc.sequence_id == model_tc.sequence_id
        engine_tb, model_tb = broker.partition(P).state, self.model.buffer
        assert engine_tb is not None
        for name in ("status", "max_read_position", "ongoing", "aborted", "low_water_marks", "ledgers", "entries"):
            assert getattr(engine_tb, name) == getattr(model_tb, name), name
        sub = broker.subscription(P, S)
        assert sub is not None and sub.state is not None
        engine_pa, model_pa = sub.state, self.model.pending
        for position in self.positions:
            assert pa.message_state(engine_pa, position) == pa.message_state(model_pa, position), position
        assert engine_pa.handle_state == model_pa.handle_state
        assert engine_pa.cumulative_ack == model_pa.cumulative_ack
        assert dict(engine_pa.individual_ack_of_transaction) == dict(model_pa.individual_ack_of_transaction)


class BatchedBrokerVersusMachines(BrokerVersusMachines):
    """The same, with PIP-160 batching on the transaction and pending-ack logs: batching changes where
    records land and when they are durable, never what the machines decide."""

    batching = True


TestBrokerVersusMachines = BrokerVersusMachines.TestCase
TestBatchedBrokerVersusMachines = BatchedBrokerVersusMachines.TestCase
