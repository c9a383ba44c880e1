"""The questions that change nothing -- ``get_last_message_id`` (TB-18) and the admin
``check_position_in_pending_ack`` (PA-21) -- in the engine's client, in the main job's workloads,
and judged by the client-visible oracle: each check flags a hand-written bad history and passes its
good twin."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from engine.simulation.client import Cluster, ConsumerType
from engine.simulation.workloads import RunSpec, main_job_spec, run
from invariants.client_visible import CHECKS, check_client_visible
from reference import pending_ack as pa
from spec.history import TXN_FUNCTIONS, OpType, is_query, make_operation
from tests.invariants.history_builder import SUB, H, P

T = (0, 1)


def counts(h: H) -> dict[str, int]:
    return check_client_visible(h.ops).counts


def test_the_queries_are_in_the_vocabulary_and_their_checks_name_their_rules() -> None:
    assert TXN_FUNCTIONS["get_last_message_id"] == TXN_FUNCTIONS["check_position_in_pending_ack"] == "subscription"
    assert CHECKS["undispatchable-last-id"] == ("TB-18",)
    assert CHECKS["pending-ack-without-ack"] == ("PA-21",)


# --- undispatchable-last-id (TB-18) -----------------------------------------------------------------


def test_last_id_on_an_open_txns_entry_is_flagged_and_after_its_commit_is_not() -> None:
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.send("t", (0, 1), 5, txn=T)
    h.last_id((0, 1), 20)
    h.end("commit", T, 30, 35)
    assert counts(h) == {"undispatchable-last-id": 1}
    # the commit invoked before the answer: the entry may be the last dispatchable one
    h.ops[-1] = dataclasses.replace(h.ops[-1], invoked_at=15, completed_at=40)
    assert counts(h) == {}


def test_last_id_on_an_aborted_txns_entry_is_flagged() -> None:
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.send("t", (0, 1), 5, txn=T)
    h.end("abort", T, 10, 12)
    h.last_id((0, 1), 20)
    assert counts(h) == {"undispatchable-last-id": 1}
    # asked while the abort was still on its way: nothing certain, nothing flagged
    h.ops[-1] = dataclasses.replace(h.ops[-1], invoked_at=11, completed_at=13)
    h.ops[-2] = dataclasses.replace(h.ops[-2], completed_at=12)
    assert counts(h) == {"undispatchable-last-id": 1}  # the commit was never invoked either
    h.end("commit", T, 9, 30, kind=OpType.INFO)
    assert counts(h) == {}


def test_last_id_of_a_message_without_txn_or_no_message_is_not_judged_bad() -> None:
    h = H(distinct_processes=True)
    h.send("plain", (0, 0), 1)
    h.last_id((0, 0), 5)
    h.last_id((0, 7), 6)  # a marker or maxReadPosition itself: nobody's message
    result = check_client_visible(h.ops)
    assert result.counts == {} and result.judged["undispatchable-last-id"] == 2


# --- pending-ack-without-ack (PA-21) ----------------------------------------------------------------


def test_pending_ack_without_a_txn_ack_is_flagged() -> None:
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.check((0, 3), "PendingAck", 10)
    assert counts(h) == {"pending-ack-without-ack": 1}
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.ack((0, 3), 5)  # a plain ack makes nothing pending
    h.check((0, 3), "PendingAck", 10)
    assert counts(h) == {"pending-ack-without-ack": 1}


def test_pending_ack_after_a_txn_ack_is_not_flagged_and_other_answers_are_not_judged() -> None:
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.ack((0, 3), 5, txn=T)
    h.check((0, 3), "PendingAck", 10)
    h.check((0, 4), "NotInPendingAck", 11)
    result = check_client_visible(h.ops)
    assert result.counts == {} and result.judged["pending-ack-without-ack"] == 1


def test_pending_ack_needs_the_ack_before_the_answer_and_of_that_batch_index() -> None:
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.check((0, 3), "PendingAck", 10)
    h.ack((0, 3), 20, txn=T)  # invoked after the answer came back
    assert counts(h) == {"pending-ack-without-ack": 1}
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.ack((0, 3), 5, txn=T, batch_index=1)
    h.check((0, 3), "PendingAck", 10, batch_index=2)
    assert counts(h) == {"pending-ack-without-ack": 1}
    h.check((0, 3), "PendingAck", 12, batch_index=1)
    assert counts(h) == {"pending-ack-without-ack": 1}


def test_a_txn_ack_of_unknown_outcome_may_have_made_it_pending() -> None:
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.op("ack", SUB, {"position": [0, 3], "txn": list(T)}, None, 5, None, kind=OpType.INFO)
    h.check((0, 3), "PendingAck", 10)
    assert counts(h) == {}


# --- missing-pending-ack (PA-21, the other way round) -----------------------------------------------


def _held(answer: str) -> H:
    """A transaction acked (0, 3) individually (ok at 7), and the admin check answered ``answer`` at 10-12."""
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.ack((0, 3), 5, txn=T)
    h.check((0, 3), answer, 10)
    return h


def test_a_position_an_open_txn_holds_is_not_reported_unheld() -> None:
    for answer in ("NotInPendingAck", "MarkDelete", "InvalidPosition"):
        assert counts(_held(answer)) == {"missing-pending-ack": 1}, answer
    # the handle may be recovering whatever it holds; and PendingAck is the right answer
    for answer in ("PendingAckNotReady", "PendingAck"):
        assert counts(_held(answer)) == {}, answer


def test_missing_pending_ack_is_judged_only_while_the_txn_certainly_holds_it() -> None:
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.ack((0, 3), 5, txn=T)
    h.end("commit", T, 8, 20)  # an end invoked before the answer: it may have released the position
    h.check((0, 3), "MarkDelete", 10)
    assert counts(h) == {}
    h = H(distinct_processes=True)
    h.new_txn(T, 0, timeout=9)  # timed out by the answer
    h.ack((0, 3), 5, txn=T)
    h.check((0, 3), "NotInPendingAck", 10)
    assert counts(h) == {}
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.ack((0, 3), 5, txn=T, batch_index=1)  # another index of the entry
    h.check((0, 3), "NotInPendingAck", 10, batch_index=2)
    assert counts(h) == {}
    h = H(distinct_processes=True)
    h.new_txn(T, 0)
    h.ack((0, 3), 8, txn=T)  # returned at 10, after the check was invoked by another process
    h.check((0, 3), "NotInPendingAck", 9)
    assert counts(h) == {}


def test_missing_pending_ack_spares_what_else_may_have_moved_the_cursor() -> None:
    h = _held("MarkDelete")
    h.ack((0, 3), 8)  # a plain ack of that entry
    assert counts(h) == {}
    h = _held("MarkDelete")
    h.op("seek", SUB, {"publish_time": 0}, None, 8, 9)
    assert counts(h) == {}


def test_missing_pending_ack_has_teeth_on_a_main_job_history() -> None:
    """A planted bug at the workload's default options: the admin check reports what a transaction
    holds as not held.  ctp's queries variant (seed 9) asks the check of the input each processor
    just acked in its transaction; the unmutated history passes."""
    spec = main_job_spec("ctp", 9)
    assert spec.queries
    assert check_client_visible(run(spec).operations).ok
    original = pa.check_position_in_pending_ack_state

    def unheld(*args: Any, **kwargs: Any) -> pa.PositionInPendingAck:
        answer = original(*args, **kwargs)
        return pa.PositionInPendingAck.NotInPendingAck if answer is pa.PositionInPendingAck.PendingAck else answer

    pa.check_position_in_pending_ack_state = unheld
    try:
        result = check_client_visible(run(spec).operations)
    finally:
        pa.check_position_in_pending_ack_state = original
    assert set(result.counts) == {"missing-pending-ack"}, result.counts


def _planted(module: Any, name: str, wrong: Any) -> tuple[list[Any], list[Any]]:
    """The ctp queries history of seed 9 with ``module.name`` replaced by ``wrong`` (given the
    original), and its verdict rows."""
    from invariants.verify import VerifyOptions, check_histories

    spec = main_job_spec("ctp", 9)
    original = getattr(module, name)
    setattr(module, name, wrong(original))
    try:
        ops = run(spec).operations
    finally:
        setattr(module, name, original)
    return ops, check_histories({"ctp-seed9": ops}, "f", VerifyOptions())


def test_the_answers_are_query_rows_the_per_object_check_judges() -> None:
    """Each answer is recorded as a query row of the machine that gave it (format version 5), and
    the per-object check asks the same observer of the state the recorded steps built.  From the
    client's side either planted answer is allowed (a handle or a buffer may be recovering at any
    time), so only the query rows show them: a pending ack that answers not-ready while ready
    (PA-21), and a buffer that answers not-ready once recovered (TB-18)."""
    from invariants.verify import VerifyOptions, check_histories
    from reference import buffer as tb
    from spec.errors import ServiceUnitNotReady
    from spec.history import is_query
    from spec.result import Err

    clean = run(main_job_spec("ctp", 9)).operations
    asked = {op.f for op in clean if is_query(op)}
    assert asked == {"check_position_in_pending_ack_state", "last_message_id", "stats"}

    def not_ready_pending_ack(original: Any) -> Any:
        def answer(state: pa.PendingAckState, *args: Any) -> pa.PositionInPendingAck:
            if state.handle_state is pa.HandleState.READY:
                return pa.PositionInPendingAck.PendingAckNotReady
            return original(state, *args)

        return answer

    def not_ready_buffer(original: Any) -> Any:
        def answer(state: Any) -> Any:
            return Err(ServiceUnitNotReady("planted")) if state.status is tb.BufferStatus.READY else original(state)

        return answer

    for module, name, wrong, kind in (
        (pa, "check_position_in_pending_ack_state", not_ready_pending_ack, "subscription:"),
        (tb, "get_last_message_id", not_ready_buffer, "partition:"),
    ):
        ops, rows = _planted(module, name, wrong)
        assert check_client_visible(ops).ok, name  # no rule of the clients' operations judges it
        verdicts = {row.checker: row for row in rows}
        assert {c: r.verdict for c, r in verdicts.items()} == {
            "linearizability": "illegal",
            "transactional": "ok",
            "delivery": "ok",
        }, name
        failing = verdicts["linearizability"].failing_object
        assert failing is not None and failing.startswith(kind), (name, failing)
        # and it is the query rows that show it: the steps alone are the machine's
        without = [op for op in ops if not is_query(op)]
        again = check_histories({"ctp-seed9": without}, "f", VerifyOptions())
        assert {r.verdict for r in again} == {"ok"}, name


# --- the engine and the workloads ------------------------------------------------------------------


def test_the_engine_answers_the_last_dispatchable_position_and_the_pending_ack_state() -> None:
    cluster = Cluster.start(seed=3, topics={"t": 1})
    client = cluster.client()
    consumer = client.subscribe("t", "sub", consumer_type=ConsumerType.Exclusive)
    producer = client.create_producer("t")
    first = producer.send(b"plain")
    assert consumer.get_last_message_id() == first
    txn = client.new_transaction()
    producer.send(b"in-txn", txn=txn)
    # the open txn's entry holds maxReadPosition before it: the last id stays at the plain message
    assert consumer.get_last_message_id() == first
    message = consumer.receive(100)
    assert message is not None and message.position == first
    # no txn has acked here yet: the pending-ack handle starts with the first txn ack (PA-17)
    assert consumer.check_position_in_pending_ack(message) == "PendingAckNotReady"
    consumer.acknowledge(message, txn=txn)
    assert consumer.check_position_in_pending_ack(message) == "PendingAck"
    txn.commit()
    assert consumer.check_position_in_pending_ack(message) == "MarkDelete"
    assert consumer.get_last_message_id() > first
    fs = [op.f for op in cluster.history()]
    assert fs.count("get_last_message_id") == 3 and fs.count("check_position_in_pending_ack") == 3
    everything = cluster.history(machines=True)
    assert check_client_visible(everything).ok
    # every answer is also the machine's query row, with the answer the client got
    queries = [(op.f, op.returned) for op in everything if is_query(op)]
    assert queries == [
        ("last_message_id", [first.ledger_id, first.entry_id]),
        ("last_message_id", [first.ledger_id, first.entry_id]),
        ("check_position_in_pending_ack_state", "PendingAckNotReady"),
        ("check_position_in_pending_ack_state", "PendingAck"),
        ("check_position_in_pending_ack_state", "MarkDelete"),
        ("last_message_id", queries[-1][1]),
    ]


def test_a_txn_ended_after_its_subscription_was_unsubscribed_ends_as_pulsar_does() -> None:
    """END_TXN_ON_SUBSCRIPTION to a subscription that is gone succeeds (Pulsar's ServerCnx: topic
    loaded, subscription absent), so the commit completes; the pending-ack log's writer was closed."""
    cluster = Cluster.start(seed=4, topics={"t": 1})
    client = cluster.client()
    consumer = client.subscribe("t", "sub")
    client.create_producer("t").send(b"m")
    message = consumer.receive(100)
    assert message is not None
    txn = client.new_transaction()
    consumer.acknowledge(message, txn=txn)
    log = cluster.broker.subscription(message.partition, "sub")
    assert log is not None and log.log is not None
    writer = log.log
    consumer.unsubscribe()
    assert cluster.broker.subscription(message.partition, "sub") is None
    assert not writer._alive
    txn.commit()


def test_the_queries_variant_asks_both_questions_and_only_on_its_seeds() -> None:
    assert [s for s in range(1, 21) if main_job_spec("ctp", s).queries] == [4, 9, 14, 19]
    result = run(RunSpec(workload="ctp", seed=2, ops=10, queries=True, unsubscribe=True))
    fs = [op.f for op in result.operations]
    assert "get_last_message_id" in fs and "check_position_in_pending_ack" in fs
    # the processors unsubscribe too: their subscriptions had pending-ack logs
    gone = {op.object for op in result.operations if op.f == "unsubscribe" and op.type is OpType.OK}
    assert any("#ctp" in name for name in gone)
    assert check_client_visible(result.operations).ok


# --- readers and seek by publish time (PA-23, PA-24) ----------------------------------------------

READER = f"subscription:{P}#look1"


def _reader_history(first_after_seek: str, *, durable: bool = False) -> H:
    h = H(distinct_processes=True)
    reader: dict[str, Any] = {} if durable else {"durable": False, "start_message": [0, 1]}
    h.send("old", (0, 0), 1)  # completed at 3
    h.send("new", (0, 1), 10)  # completed at 12
    h.op(
        "subscribe",
        READER,
        {"initial_position": "Earliest", "sub_type": "Exclusive", **reader},
        None,
        20,
        21,
    )
    h.op("receive", READER, {}, {"message": "new", "position": [0, 1], "redelivery_count": 0}, 22, 23)
    h.op("seek", READER, {"publish_time": 5}, None, 30, 32)
    position = [0, 0] if first_after_seek == "old" else [0, 1]
    h.op("receive", READER, {}, {"message": first_after_seek, "position": position, "redelivery_count": 0}, 32, 34)
    h.op("receive", READER, {}, None, 40, 45)
    return h


def test_a_first_delivery_after_a_seek_published_before_its_time_is_flagged() -> None:
    assert CHECKS["delivered-before-seek-time"] == ("PA-23",)
    assert counts(_reader_history("old")) == {"delivered-before-seek-time": 1}
    good = check_client_visible(_reader_history("new").ops)
    assert good.counts == {} and good.judged["delivered-before-seek-time"] == 1


def test_a_reader_is_judged_for_what_it_receives_not_for_what_it_misses() -> None:
    from invariants.transactional import check_transactional

    # The Reader started at (0, 1) and never received "old": not a lost message (it holds back no
    # ledger deletion, and its start was after it).
    h = _reader_history("new")
    assert check_transactional(h.ops).ok
    assert check_client_visible(h.ops).ok
    # the same history on a durable subscription: "old" was never received by a drained one
    assert "lost-message" in check_transactional(_reader_history("new", durable=True).ops).counts


def test_out_of_order_restarts_at_a_seek() -> None:
    from invariants.transactional import check_transactional

    h = H(distinct_processes=True)
    h.send("a", (0, 0), 1)
    h.send("b", (0, 1), 2)
    h.op("subscribe", READER, {"initial_position": "Earliest", "sub_type": "Exclusive"}, None, 5, 6)
    h.op("receive", READER, {}, {"message": "b", "position": [0, 1], "redelivery_count": 0}, 7, 8, process=50)
    h.op("receive", READER, {}, {"message": "a", "position": [0, 0], "redelivery_count": 0}, 20, 22, process=50)
    assert "out-of-order-delivery" in check_transactional(h.ops).counts
    h.ops.insert(
        4,
        make_operation(
            "h", 99, 98, OpType.OK, "seek", READER, {"publish_time": 0}, None, invoked_at=10, completed_at=12
        ),
    )
    h.ops = [dataclasses.replace(op, index=i) for i, op in enumerate(h.ops)]
    assert "out-of-order-delivery" not in check_transactional(h.ops).counts


def test_the_engine_reader_starts_at_its_start_message_and_seeks_by_publish_time() -> None:
    cluster = Cluster.start(seed=7, topics={"t": 1})
    client = cluster.client()
    producer = client.create_producer("t")
    sent = []
    for i in range(4):
        sent.append((producer.send(f"m{i}"), cluster.sim.now))
        cluster.sim.advance(100)
    reader = client.create_reader_async("t", "look", sent[2][0])
    cluster.sim.run_until(lambda: reader.done)
    look = reader.result()
    got = []
    while (message := look.receive(50)) is not None:
        got.append(message.payload.decode())
    assert got == ["m2", "m3"]  # the start message is delivered again
    look.seek(sent[1][1])  # published at or after m1's send returned: m2 on (m1 was published before)
    again = []
    while (message := look.receive(50)) is not None:
        again.append(message.payload.decode())
    assert again == ["m2", "m3"]
    look.seek(0)
    assert look.receive(50).payload == b"m0"
    look.close()
    assert cluster.broker.subscription(look.partition, "look") is None  # PA-24: it dies with its consumer
    assert check_client_visible(cluster.history(machines=True)).ok


def test_the_readers_variant_looks_back_on_its_seeds() -> None:
    assert [s for s in range(1, 21) if main_job_spec("multi", s).readers] == [3, 8, 13, 18]
    result = run(RunSpec(workload="multi", seed=3, ops=10, readers=True))
    subscribes = [op for op in result.operations if op.f == "subscribe" and "#look" in op.object]
    seeks = [op for op in result.operations if op.f == "seek"]
    assert len(subscribes) == 2 and all(op.args["durable"] is False for op in subscribes)
    assert len(seeks) == 2 and all(op.type is OpType.OK for op in seeks)
    assert check_client_visible(result.operations).ok


# --- the end of a run's metrics scrape ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("workload", "seed", "machine", "function", "condition", "kind"),
    [
        # the coordinator's counter of timed-out transactions (TransactionMetadataStoreStats)
        ("ctp", 9, "coordinator", "_update_txn_status", "if new is TxnStatus.ABORTING and is_timeout", "coordinator:"),
        # the bucket tracker's stats (DD-28) read as the in-memory tracker's
        ("delayed", 14, "delayed", "metrics", "if isinstance(state, InMemoryTracker)", "tracker:"),
    ],
)
def test_the_metrics_scrape_is_query_rows_the_per_object_check_judges(
    workload: str, seed: int, machine: str, function: str, condition: str, kind: str
) -> None:
    """With the queries variant on, the run ends with a scrape of the broker's metrics: the
    coordinator's stats and every subscription tracker's, each a query row (``stats``, ``metrics``)
    that the per-object check asks of the state the recorded steps built.  Counters no client
    operation shows: planted at the workload's default options (a branch-flip that counts the
    wrong thing), only the scrape's rows show it."""
    from devtools.mutation import applied, flip_mutants
    from invariants.verify import VerifyOptions, check_histories

    spec = main_job_spec(workload, seed)
    assert spec.queries
    clean = run(spec).operations
    scraped = {op.f for op in clean if is_query(op) and op.object.startswith(kind)}
    assert scraped >= {"stats" if machine == "coordinator" else "metrics"}
    assert {r.verdict for r in check_histories({"clean": clean}, "f", VerifyOptions())} == {"ok"}
    (flip,) = [m for m in flip_mutants(machine) if m.function == function and m.before == condition]
    with applied(flip):
        ops = run(spec).operations
    rows = {r.checker: r for r in check_histories({"flipped": ops}, "f", VerifyOptions())}
    assert rows["linearizability"].verdict == "illegal"
    assert rows["transactional"].verdict in ("ok", "skipped") and rows["delivery"].verdict == "ok"
    failing = rows["linearizability"].failing_object
    assert failing is not None and failing.startswith(kind), failing
    without = [op for op in ops if not (is_query(op) and op.f in ("stats", "metrics"))]
    assert {r.verdict for r in check_histories({"unscraped": without}, "f", VerifyOptions())} <= {"ok", "skipped"}
