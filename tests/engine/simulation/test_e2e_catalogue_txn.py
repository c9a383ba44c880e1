"""End-to-end tests of the remaining multi-machine scenarios of ``pulsar-txn-semantics.md`` section 7.6.

The companion of ``test_e2e_catalogue.py``: each test drives the simulated broker through the
Pulsar-shaped client and checks what the client observed; where the scenario is about the broker's
durable or in-memory state (snapshots, recovery, trimming, low watermarks) it reads it through the
public attributes of the broker's components.  ``docs/engine/catalogue.md`` maps every scenario of
the fact sheets to its test or conformance vector.
"""

from __future__ import annotations

import pytest

from engine.broker import (
    SNAPSHOT_TOPIC,
    BatchedMessage,
    BrokerError,
    latest_by_key,
    namespace_topic,
    partition_name,
)
from engine.simulation.client import BatchMessageId, Cluster, Consumer, ConsumerType, OperationFailed, OperationTimeout
from invariants.transactional import check_transactional
from reference import buffer as tb
from spec import snapshot_avro
from spec.config import Config
from spec.types import Position, TxnID

IN, OUT = partition_name("in", 0), partition_name("out", 0)


def _at(sent: Position | BatchMessageId) -> Position:
    """The position of a message sent without batching."""
    assert isinstance(sent, Position)
    return sent


def _cluster(**overrides: object) -> Cluster:
    config = Config().with_overrides(
        {"isDelayedDeliveryDeliverAtTimeStrict": True, "delayedDeliveryTickTimeMillis": 10, **overrides}
    )
    return Cluster.start(seed=11, topics={"in": 1, "out": 1}, config=config)


def _drain(consumer: Consumer, limit: int = 50) -> list[str]:
    got = []
    for _ in range(limit):
        msg = consumer.receive(50)
        if msg is None:
            break
        got.append(msg.data().decode())
        consumer.acknowledge(msg)
    return got


def _clean(cluster: Cluster) -> None:
    verdict = check_transactional(cluster.history())
    assert verdict.ok, [str(a) for a in verdict.anomalies]


def _buffer(cluster: Cluster, name: str = IN) -> tb.BufferState:
    state = cluster.broker.partition(name).state
    assert state is not None
    return state


def _lac(cluster: Cluster, name: str = IN) -> Position:
    ledger = cluster.broker.partition(name).ledger
    assert ledger is not None
    return ledger.last_confirmed()


def _live_txns(cluster: Cluster) -> set[int]:
    state = cluster.broker.coordinator.state
    assert state is not None
    return set(state.txns)


def _kinds_after(cluster: Cluster, start: Position, name: str = IN) -> list[tb.EntryKind]:
    messages = cluster.broker.partition(name).messages
    return [messages[p].entry.kind for p in sorted(messages) if p > start]


# --------------------------------------------------------------------------------------------
# Coordinator + participants


def test_s8_commit_reaches_every_participant_with_the_low_watermark() -> None:
    """S8 (TC-13, TC-14, TC-15, TC-17, TB-11, TB-13, PA-12, PA-14): ending a txn that produced to one
    partition and acked on another's subscription ends it once in each participant, with the low
    watermark (smallest live sequence - 1) computed before the txn is forgotten."""
    cluster = _cluster()
    client = cluster.client()
    client.create_producer("in").send("input")
    consumer = client.subscribe("in", "s", consumer_type=ConsumerType.Shared)
    out = client.create_producer("out")
    client.new_transaction(60_000).abort()  # sequence 0 ends, so the watermark below is not -1
    older = client.new_transaction(60_000)  # stays open: it pins the low watermark
    txn = client.new_transaction(60_000)
    assert txn.txn_id.least_sig_bits == older.txn_id.least_sig_bits + 1
    msg = consumer.receive(100)
    assert msg is not None
    produced = _at(out.send("result", txn=txn))
    consumer.acknowledge(msg, txn=txn)
    before = _lac(cluster, OUT)
    txn.commit()

    # The produced partition got exactly one commit marker, right after the message.
    assert produced == before
    assert _kinds_after(cluster, produced, OUT) == [tb.EntryKind.TXN_COMMIT]
    expected_lwm = older.txn_id.least_sig_bits - 1
    assert expected_lwm == 0
    assert _buffer(cluster, OUT).low_water_marks[0] == expected_lwm
    # The acked subscription committed the ack on its cursor and saw the same watermark.
    sub = cluster.broker.subscription(IN, "s")
    assert sub is not None and sub.cursor is not None and sub.state is not None
    assert sub.cursor.is_deleted(msg.position)
    assert sub.state.low_water_marks[0] == expected_lwm
    assert txn.txn_id not in sub.state.individual_ack_of_transaction
    # The coordinator forgot the txn (TC-9); the older one is still open.
    assert _live_txns(cluster) == {older.txn_id.least_sig_bits}
    assert _drain(client.subscribe("out", "verify")) == ["result"]
    _clean(cluster)


def test_s14_timeouts_abort_open_txns_and_spare_a_committing_one() -> None:
    """S14 (TC-18, TC-19, TC-20, TB-12): a 50 ms txn is aborted at once; a 2 s txn is aborted at its
    deadline and its message never delivered; a txn already COMMITTING when its deadline passes is
    left alone and commits."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub")
    coordinator = cluster.broker.coordinator

    short = client.new_transaction(50)
    assert short.txn_id.least_sig_bits not in _live_txns(cluster)  # < 100 ms: aborted at creation
    assert coordinator.state is not None and coordinator.state.stats.timeout == 1

    start = cluster.sim.now
    doomed = client.new_transaction(2_000)
    producer.send("doomed", txn=doomed)
    cluster.sim.advance(1_800)
    assert doomed.txn_id.least_sig_bits in _live_txns(cluster)
    cluster.sim.advance(500)
    assert doomed.txn_id.least_sig_bits not in _live_txns(cluster)
    assert cluster.sim.now - start >= 2_000
    assert coordinator.state.stats.timeout == 2
    assert tb.is_txn_aborted(_buffer(cluster), doomed.txn_id)

    slow = client.new_transaction(1_000)
    producer.send("slow", txn=slow)
    part = cluster.broker.partition(IN)
    part.crash()  # the participant is down: the end stays COMMITTING past the deadline
    commit = slow.commit_async()
    cluster.sim.advance(1_500)
    state = coordinator.state
    assert state is not None and state.txns[slow.txn_id.least_sig_bits].status.name == "COMMITTING"
    assert part.load()
    cluster.sim.advance(2_000)
    assert commit.done and commit.error is None
    assert state.stats.timeout == 2 == coordinator.state.stats.timeout
    assert _drain(consumer) == ["slow"]
    _clean(cluster)


def test_s15_max_active_transactions_leaves_new_txn_unanswered() -> None:
    """S15 (TC-4): with maxActiveTransactionsPerCoordinator 2 the third NEW_TXN gets no answer at all,
    so the client's request times out; once one txn ends a new one is issued."""
    cluster = _cluster(maxActiveTransactionsPerCoordinator=2)
    client = cluster.client(operation_timeout_ms=2_000)
    first, second = client.new_transaction(60_000), client.new_transaction(60_000)
    with pytest.raises(OperationTimeout):
        client.new_transaction(60_000)
    assert [op.type.value for op in cluster.history() if op.f == "new_txn"] == ["ok", "ok", "info"]
    first.commit()
    third = client.new_transaction(60_000)
    assert third.txn_id.least_sig_bits > second.txn_id.least_sig_bits
    with pytest.raises(OperationTimeout):
        client.new_transaction(60_000)
    second.abort()
    third.abort()
    assert client.new_transaction(60_000) is not None


def test_s16_restart_keeps_open_deadlines_and_redrives_committing() -> None:
    """S16 (TC-21, TC-23, TC-24, TB-24): the broker dies with txn 0 OPEN and txn 1 COMMITTING.  After
    the restart txn 1 is re-driven to COMMITTED (its message is delivered), txn 0 is OPEN with its
    original deadline (start + timeout, not restart + timeout), and the next id is 2."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub")
    start = cluster.sim.now
    open_txn = client.new_transaction(10_000)
    committing = cluster.client().new_transaction(60_000)  # its own process: its commit stays open
    assert (open_txn.txn_id.least_sig_bits, committing.txn_id.least_sig_bits) == (0, 1)
    producer.send("open", txn=open_txn)
    producer.send("committed", txn=committing)
    cluster.broker.partition(IN).crash()  # phase 2 cannot complete
    committing.commit_async()  # never answered: the coordinator dies with the request
    cluster.sim.advance(200)
    state = cluster.broker.coordinator.state
    assert state is not None and state.txns[1].status.name == "COMMITTING"
    cluster.sim.advance(3_000)
    cluster.broker.crash()
    cluster.broker.restart()
    cluster.sim.advance(1_500)
    assert _live_txns(cluster) == {0}
    assert cluster.broker.coordinator.state is not None
    assert cluster.broker.coordinator.state.txns[0].status.name == "OPEN"
    # Only "open" is in front of "committed": nothing is readable until txn 0 ends.
    assert consumer.receive(50) is None
    cluster.sim.advance(start + 10_000 - cluster.sim.now - 200)
    assert _live_txns(cluster) == {0}  # not yet: the deadline is start + 10 s
    cluster.sim.advance(400)
    assert _live_txns(cluster) == set()  # aborted at its original deadline
    assert _drain(consumer) == ["committed"]
    assert client.new_transaction(60_000).txn_id.least_sig_bits == 2
    _clean(cluster)


def test_s24_no_snapshot_abort_writes_nothing_but_commit_writes_a_marker() -> None:
    """S24 (TB-11, TB-12): a txn registered on a partition that holds no txn message (NoSnapshot):
    its abort writes nothing, but a commit of such a txn writes a commit marker."""
    cluster = _cluster()
    client = cluster.client()
    client.create_producer("in").send("normal")
    coordinator = cluster.broker.coordinator

    def register(txn_id: TxnID) -> None:
        # ADD_PARTITION_TO_TXN as a client sends it before its first send (TC-30); the send never comes.
        added = coordinator.add_partition(txn_id, IN)
        cluster.sim.run_until(lambda: added.done)
        assert added.error is None

    aborted = client.new_transaction(60_000)
    register(aborted.txn_id)
    lac = _lac(cluster)
    aborted.abort()
    assert _lac(cluster) == lac
    assert _buffer(cluster).status is tb.BufferStatus.NO_SNAPSHOT
    assert not tb.is_txn_aborted(_buffer(cluster), aborted.txn_id)

    committed = client.new_transaction(60_000)
    register(committed.txn_id)
    committed.commit()
    assert _kinds_after(cluster, lac) == [tb.EntryKind.TXN_COMMIT]
    assert _buffer(cluster).status is tb.BufferStatus.NO_SNAPSHOT
    assert _drain(client.subscribe("in", "sub")) == ["normal"]  # the marker is never delivered


# --------------------------------------------------------------------------------------------
# Transaction buffer + dispatch


def test_s20_commit_after_normal_publishes() -> None:
    """S20 (TB-1, TB-4, TB-7, TB-9, TB-11, TB-15, TB-16, TB-20): normal m0, m1 in NoSnapshot move
    maxReadPosition; the first txn message m2 writes the first snapshot (maxRead m1) and makes the
    buffer Ready; normal m3 stays behind the open txn; the commit marker m4 becomes maxReadPosition;
    the consumer sees m0, m1, m2, m3 and never the marker."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub")
    m0, m1 = _at(producer.send("m0")), _at(producer.send("m1"))
    state = _buffer(cluster)
    assert state.status is tb.BufferStatus.NO_SNAPSHOT and state.max_read_position == m1
    assert state.snapshot_store.snapshot is None
    txn = client.new_transaction(60_000)
    m2 = _at(producer.send("m2", txn=txn))
    state = _buffer(cluster)
    assert state.status is tb.BufferStatus.READY
    assert state.snapshot_store.snapshot is not None
    assert state.snapshot_store.snapshot.max_read_position == m1  # the first snapshot
    assert state.max_read_position == m1
    m3 = _at(producer.send("m3"))
    assert _buffer(cluster).max_read_position == m1
    assert _drain(consumer) == ["m0", "m1"]
    txn.commit()
    m4 = Position(m3.ledger_id, m3.entry_id + 1)
    assert [m0, m1, m2, m3] == [Position(m0.ledger_id, m0.entry_id + i) for i in range(4)]
    assert _buffer(cluster).max_read_position == m4 == _lac(cluster)
    assert _kinds_after(cluster, m3) == [tb.EntryKind.TXN_COMMIT]
    assert _drain(consumer) == ["m2", "m3"]
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.cursor is not None
    assert sub.cursor.mark_delete_position == m4  # the marker was acknowledged by the dispatcher
    _clean(cluster)


def test_s21_abort_after_normal_publishes() -> None:
    """S21 (TB-12, TB-16, TB-17): the abort variant of S20: abort writes marker m4 and remembers
    {T: m4}; the consumer sees m0, m1, m3; m2 and m4 are acknowledged by the dispatcher when read."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub")
    producer.send("m0")
    producer.send("m1")
    txn = client.new_transaction(60_000)
    m2 = _at(producer.send("m2", txn=txn))
    m3 = _at(producer.send("m3"))
    txn.abort()
    m4 = Position(m3.ledger_id, m3.entry_id + 1)
    state = _buffer(cluster)
    assert dict(state.aborted) == {txn.txn_id: m4}
    assert state.max_read_position == m4
    assert _drain(consumer) == ["m0", "m1", "m3"]
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.cursor is not None
    assert sub.cursor.is_deleted(m2) and sub.cursor.is_deleted(m4)
    assert sub.cursor.mark_delete_position == m4
    _clean(cluster)


def _snapshot(cluster: Cluster) -> tb.TransactionBufferSnapshot:
    """The partition's record on the namespace's compacted ``__transaction_buffer_snapshot`` topic
    (its latest value for the topic's key), decoded from Avro."""
    table = latest_by_key(cluster.broker.system_topic(namespace_topic(IN, SNAPSHOT_TOPIC)))
    return tb.TransactionBufferSnapshot.from_pb(snapshot_avro.decode_snapshot(table[IN], where=IN))


def test_s28_snapshot_content_after_commit_and_abort() -> None:
    """S28 (TB-20, TB-21): the periodic snapshot after T1's commit holds maxRead = T1's commit marker
    and no aborts; after T3's abort it holds aborts = [T3 at its abort marker], maxRead = that marker."""
    cluster = _cluster()
    interval = cluster.broker.config.transaction_buffer_snapshot_min_time_in_millis
    client = cluster.client()
    producer = client.create_producer("in")
    t1 = client.new_transaction(600_000)
    producer.send("t1", txn=t1)
    t1.commit()
    commit_marker = _lac(cluster)
    cluster.sim.advance(interval + 10)
    snapshot = _snapshot(cluster)
    assert snapshot.max_read_position == commit_marker and snapshot.aborts == ()
    t3 = client.new_transaction(600_000)
    producer.send("t3", txn=t3)
    t3.abort()
    abort_marker = _lac(cluster)
    cluster.sim.advance(interval + 10)
    snapshot = _snapshot(cluster)
    assert snapshot.max_read_position == abort_marker
    assert [(a.txn_id, a.marker_position) for a in snapshot.aborts] == [(t3.txn_id, abort_marker)]
    assert _buffer(cluster).snapshot_store.snapshot == snapshot


def test_s29_recovery_from_snapshot_and_replay() -> None:
    """S29 (TB-24): snapshot {maxRead, aborts=[X]}; after it the log holds T's message, T's abort
    marker and U's message.  After a restart the buffer is Ready with aborted = {X, T}, ongoing = {U}
    and maxRead = previous(U's message); committing U then delivers exactly the committed messages."""
    cluster = _cluster()
    interval = cluster.broker.config.transaction_buffer_snapshot_min_time_in_millis
    client = cluster.client()
    producer = client.create_producer("in")
    producer.send("before")
    x = client.new_transaction(600_000)
    producer.send("x", txn=x)
    x.abort()
    cluster.sim.advance(interval + 10)
    snapshot = _snapshot(cluster)
    assert [a.txn_id for a in snapshot.aborts] == [x.txn_id]
    t, u = client.new_transaction(600_000), client.new_transaction(600_000)
    producer.send("t", txn=t)
    t.abort()
    u_msg = _at(producer.send("u", txn=u))
    assert _snapshot(cluster) == snapshot  # nothing after it was snapshotted
    cluster.broker.crash()
    cluster.broker.restart()
    state = _buffer(cluster)
    assert state.status is tb.BufferStatus.READY
    assert set(state.aborted) == {x.txn_id, t.txn_id}
    assert dict(state.ongoing) == {u.txn_id: u_msg}
    assert state.max_read_position == Position(u_msg.ledger_id, u_msg.entry_id - 1)
    consumer = client.subscribe("in", "sub")
    assert _drain(consumer) == ["before"]
    u.commit()
    assert _drain(consumer) == ["u"]
    _clean(cluster)


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_s49_recover_test_end_then_reload(end: str) -> None:
    """TopicTransactionBufferRecoverTest.recoverTest (the fact sheet's "S49", referenced in 7.3 but
    not defined in 7.6) (TB-11, TB-12, TB-24): txn messages are ended, the topic is reloaded; the
    recovered buffer delivers the committed messages (or none of the aborted ones) and nothing else."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    txn = client.new_transaction(60_000)
    for i in range(3):
        producer.send(f"t{i}", txn=txn)
    getattr(txn, end)()
    producer.send("after")
    cluster.broker.crash()
    cluster.broker.restart()
    assert _buffer(cluster).status is tb.BufferStatus.READY
    assert not _buffer(cluster).ongoing
    expected = (["t0", "t1", "t2"] if end == "commit" else []) + ["after"]
    assert _drain(client.subscribe("in", "sub")) == expected
    _clean(cluster)


def test_s30_aborted_txn_forgotten_once_its_marker_ledger_is_deleted() -> None:
    """S30 (TB-23): X is aborted with its marker in ledger L; L is deleted by the broker's retention
    once every cursor is past it and the buffer agrees; the next end of a txn trims X from the
    aborted set."""
    cluster = _cluster()
    interval = cluster.broker.config.transaction_buffer_snapshot_min_time_in_millis
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub")
    x = client.new_transaction(600_000)
    producer.send("x", txn=x)
    x.abort()
    marker_ledger = _lac(cluster).ledger_id
    producer.send("n")
    assert _drain(consumer) == ["n"]
    cluster.sim.advance(interval + 10)
    assert [a.txn_id for a in _snapshot(cluster).aborts] == [x.txn_id]
    cluster.broker.crash()
    cluster.broker.restart()  # the reload closes ledger L and opens a new one
    assert tb.is_txn_aborted(_buffer(cluster), x.txn_id)
    producer.send("n2")
    assert _drain(consumer) == ["n2"]
    cluster.sim.advance(10)
    # Retention: L is consumed by every cursor and holds nothing after maxReadPosition.
    part = cluster.broker.partition(IN)
    assert marker_ledger in part.trimmed_ledgers
    assert part.ledger is not None and marker_ledger not in [info.ledger_id for info in part.ledger.ledgers()]
    assert tb.is_txn_aborted(_buffer(cluster), x.txn_id)  # not yet: the aborted set is trimmed at the next end
    y = client.new_transaction(600_000)
    producer.send("y", txn=y)
    y.commit()  # TB-23: the end trims aborted txns whose marker ledger is gone
    assert not tb.is_txn_aborted(_buffer(cluster), x.txn_id)
    assert _drain(consumer) == ["y"]


# --------------------------------------------------------------------------------------------
# Pending ack + dispatch


def test_s33_individual_ack_conflicts_end_to_end() -> None:
    """S33 (PA-4, PA-5, PA-6, PA-7, PA-12): T1 acks m1; T2's ack of m1 conflicts and leaves T2 holding
    nothing; T1's commit deletes m1 on the cursor; T3's ack of m1 then conflicts with the deletion."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    producer.send("m0")
    producer.send("m1")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    got = [consumer.receive(100), consumer.receive(100)]
    assert [m.data() for m in got if m is not None] == [b"m0", b"m1"]
    m1 = got[1]
    assert m1 is not None
    t1, t2 = client.new_transaction(60_000), client.new_transaction(60_000)
    consumer.acknowledge(m1, txn=t1)
    with pytest.raises(OperationFailed) as conflict:
        consumer.acknowledge(m1, txn=t2)
    assert conflict.value.error.name == "TransactionConflict"
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.state is not None and sub.cursor is not None
    assert t2.txn_id not in sub.state.individual_ack_of_transaction
    t1.commit()
    assert sub.cursor.is_deleted(m1.position)
    t3 = client.new_transaction(60_000)
    with pytest.raises(OperationFailed) as deleted:
        consumer.acknowledge(m1, txn=t3)
    assert deleted.value.error.name == "TransactionConflict"
    _clean(cluster)


def test_s37_cumulative_ack_slot_end_to_end() -> None:
    """S37 (PA-9, PA-12): on an Exclusive subscription T1 cumulatively acks m2, cannot repeat m2 or
    go back to m1, advances to m4; T2 cannot take the slot (m7); T1's commit mark-deletes m4; T2's
    cumulative ack of m3 then conflicts (at or below the mark-delete position)."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    m = [_at(producer.send(f"m{i}")) for i in range(8)]
    consumer = client.subscribe("in", "sub")
    t1, t2 = client.new_transaction(60_000), client.new_transaction(60_000)

    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.cursor is not None

    def refused(position: Position, txn: object) -> str:
        with pytest.raises(OperationFailed) as failed:
            consumer.acknowledge_cumulative(position, txn=txn)  # type: ignore[arg-type]
        return failed.value.error.name

    def refused_raw(position: Position, txn_id: TxnID) -> str:
        # The bare CommandAck: through the client a refused ack would mark T1 failed, and its commit
        # would become an abort (TC-32), which is not what S37 goes on to check.
        answer = sub.acknowledge(consumer.consumer_id, position, txn_id, True)
        cluster.sim.run_until(lambda: answer.done)
        assert isinstance(answer.error, BrokerError)
        return answer.error.error.name

    consumer.acknowledge_cumulative(m[2], txn=t1)
    assert refused_raw(m[2], t1.txn_id) == "TransactionConflict"
    assert refused_raw(m[1], t1.txn_id) == "TransactionConflict"
    consumer.acknowledge_cumulative(m[4], txn=t1)
    assert refused(m[7], t2) == "TransactionConflict"
    assert sub.cursor.mark_delete_position < m[0]  # nothing is acked before the commit
    t1.commit()
    assert sub.cursor.mark_delete_position == m[4]
    assert refused(m[3], t2) == "TransactionConflict"
    assert [msg.data() for msg in iter(lambda: consumer.receive(50), None)][-3:] == [b"m5", b"m6", b"m7"]


def test_s41_replayed_abort_frees_the_positions() -> None:
    """S41 (PA-13, PA-18): T1 acks m0 and aborts; after a broker restart the replayed ABORT record
    leaves m0 free, so T2 can ack it and commit it."""
    cluster = _cluster()
    client = cluster.client()
    client.create_producer("in").send("m0")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    msg = consumer.receive(100)
    assert msg is not None
    t1 = client.new_transaction(60_000)
    consumer.acknowledge(msg, txn=t1)
    t1.abort()
    cluster.broker.crash()
    cluster.broker.restart()
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.state is not None
    assert not sub.state.individual_ack_positions
    again = consumer.receive(100)
    assert again is not None and again.position == msg.position
    t2 = client.new_transaction(60_000)
    consumer.acknowledge(again, txn=t2)
    t2.commit()
    assert sub.cursor is not None and sub.cursor.is_deleted(msg.position)
    _clean(cluster)


def test_s44_txn_cumulative_ack_on_shared_is_ignored() -> None:
    """S44 (PA-10): a cumulative ack in a txn on a Shared subscription is answered with success and
    does nothing: nothing is pending, the commit acknowledges nothing, the message comes back."""
    cluster = _cluster()
    client = cluster.client()
    client.create_producer("in").send("m0")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    msg = consumer.receive(100)
    assert msg is not None
    txn = client.new_transaction(60_000)
    consumer.acknowledge_cumulative(msg, txn=txn)
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.state is not None and sub.cursor is not None
    assert sub.state.cumulative_ack is None and not sub.state.individual_ack_positions
    txn.commit()
    assert not sub.cursor.is_deleted(msg.position)
    consumer.redeliver_unacknowledged_messages()
    again = consumer.receive(100)
    assert again is not None and again.position == msg.position


def _batch_of_five(cluster: Cluster) -> Position:
    """One batch entry of five messages, as a batching producer writes it (one CommandSend)."""
    messages = [BatchedMessage(f"b{i}".encode()) for i in range(5)]
    written = cluster.broker.partition(IN).publish(b"", None, None, batch=messages)
    cluster.sim.run_until(lambda: written.done)
    return written.result()


def _batch_scenario(cluster: Cluster, entry: Position) -> None:
    client = cluster.client()
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    got = [consumer.receive(100) for _ in range(5)]
    assert [(m.position, m.batch_index) for m in got if m is not None] == [(entry, i) for i in range(5)]
    first, second = got[0], got[1]
    assert first is not None and second is not None
    t1, t2 = client.new_transaction(60_000), client.new_transaction(60_000)
    consumer.acknowledge(first, txn=t1)
    consumer.acknowledge(second, txn=t2)
    t1.commit()
    sub = cluster.broker.subscription(IN, "sub")
    assert sub is not None and sub.cursor is not None
    assert not sub.cursor.is_deleted(entry)
    ack_set = sub.cursor.batch_ack_set(entry)
    assert ack_set is not None and not ack_set[0] & 1 and ack_set[0] & 0b11110 == 0b11110  # only index 0 gone
    t2.abort()  # index 1 is available again and the entry is redelivered without index 0
    again = [m for m in iter(lambda: consumer.receive(100), None)]
    assert (entry, 1) in [(m.position, m.batch_index) for m in again]
    assert (entry, 0) not in [(m.position, m.batch_index) for m in again]
    t3 = client.new_transaction(60_000)
    consumer.acknowledge(second, txn=t3)
    t4 = client.new_transaction(60_000)
    with pytest.raises(OperationFailed) as conflict:
        consumer.acknowledge(first, txn=t4)
    assert conflict.value.error.name == "TransactionConflict"
    t3.commit()
    ack_set = sub.cursor.batch_ack_set(entry)
    assert ack_set is not None and ack_set[0] & 0b11 == 0  # indexes 0 and 1 both deleted


def test_s35_batch_index_acks_on_a_batch_entry() -> None:
    """S35 (PA-2, PA-6, PA-8, PA-12, PA-13; 5.9): a batch entry of 5: T1 acks index 0, T2 index 1;
    T1's commit deletes index 0 only; T2's abort makes index 1 available and redelivers the entry
    without index 0; T3 can ack index 1; T4 conflicts on index 0.  The batch is written by a bare
    CommandSend (see the client variant below)."""
    cluster = _cluster()
    _batch_scenario(cluster, _batch_of_five(cluster))


def test_s35_batch_written_by_a_batching_producer() -> None:
    """S35 with the batch formed by the client's batching producer: five sends in flight (one
    process each, through ``Producer.share``) become one entry of five messages."""
    cluster = _cluster()
    producer = cluster.client().create_producer("in", batching_enabled=True, batching_max_messages=5)
    sent = [producer.share(cluster.client()).send_async(f"b{i}") for i in range(5)]
    cluster.sim.run_until(lambda: all(s.done for s in sent))
    ids = [s.result() for s in sent]
    batch_ids = [i for i in ids if isinstance(i, BatchMessageId)]
    assert len(batch_ids) == len(ids)
    entry = batch_ids[0].position
    assert [(i.position, i.batch_index, i.batch_size) for i in batch_ids] == [(entry, n, 5) for n in range(5)]
    _batch_scenario(cluster, entry)


# --------------------------------------------------------------------------------------------
# End-to-end tests of section 7.5 (not catalogue items, same machinery)


def test_7_5_no_sorted_open_txn_holds_back_later_normal_messages() -> None:
    """TransactionConsumeTest.noSortedTest (TB-7, TB-15, TB-17): 10 normal, 10 in an open txn, 10
    normal: only the first 10 are delivered until the commit, then the other 20 in log order."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    txn = client.new_transaction(60_000)
    first = [f"a{i}" for i in range(10)]
    held = [f"t{i}" for i in range(10)]
    later = [f"b{i}" for i in range(10)]
    for text in first:
        producer.send(text)
    for text in held:
        producer.send(text, txn=txn)
    for text in later:
        producer.send(text)
    assert _drain(consumer) == first
    txn.commit()
    assert _drain(consumer) == held + later
    _clean(cluster)


def test_7_5_one_txn_acks_one_message_on_two_subscriptions() -> None:
    """TransactionEndToEndTest.oneTransactionOneTopicWithMultiSubTest (TC-10, TC-30, PA-12): one txn
    acks the same message on two subscriptions: the coordinator records both, the commit deletes it
    on both cursors."""
    cluster = _cluster()
    client = cluster.client()
    position = _at(client.create_producer("in").send("m"))
    subs = [client.subscribe("in", name) for name in ("sub1", "sub2")]
    txn = client.new_transaction(60_000)
    for consumer in subs:
        msg = consumer.receive(100)
        assert msg is not None
        consumer.acknowledge(msg, txn=txn)
    state = cluster.broker.coordinator.state
    assert state is not None
    assert {s.subscription for s in state.txns[txn.txn_id.least_sig_bits].acked_subscriptions} == {"sub1", "sub2"}
    txn.commit()
    for name in ("sub1", "sub2"):
        sub = cluster.broker.subscription(IN, name)
        assert sub is not None and sub.cursor is not None and sub.cursor.is_deleted(position)
    assert all(consumer.receive(50) is None for consumer in subs)
    _clean(cluster)


def test_7_5_pending_ack_messages_filtered_for_a_new_consumer() -> None:
    """TransactionEndToEndTest.testFilterMsgsInPendingAckStateWhenConsumerDisconnect (5.9; PA-6,
    PA-12, PA-13): txn1 holds m0..m4, txn2 acks m5..m9 and commits; a re-created consumer receives
    nothing; after txn1 aborts it receives exactly m0..m4, in order."""
    cluster = _cluster()
    client = cluster.client()
    producer = client.create_producer("in")
    for i in range(10):
        producer.send(f"m{i}")
    consumer = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    msgs = [consumer.receive(100) for _ in range(10)]
    t1, t2 = client.new_transaction(60_000), client.new_transaction(60_000)
    for i, msg in enumerate(msgs):
        assert msg is not None
        consumer.acknowledge(msg, txn=t1 if i < 5 else t2)
    t2.commit()
    consumer.close()
    fresh = client.subscribe("in", "sub", consumer_type=ConsumerType.Shared)
    assert fresh.receive(100) is None
    t1.abort()
    assert _drain(fresh) == [f"m{i}" for i in range(5)]
    _clean(cluster)
