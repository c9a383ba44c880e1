"""Jepsen's Kafka-workload anomalies on Pulsar histories (``invariants.queue.pulsar``): each planted
and found where Pulsar's guarantees make it conclusive, and each explanation a correct broker may
have (another subscription type, an ack, a seek, an unknown outcome, an aborted transaction) leaves
the history alone."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from invariants.analysis import covers
from invariants.queue.pulsar import _AckIndex, _Restarts
from invariants.transactional import TxnResult, check_transactional
from spec.history import Operation, OpType
from tests.invariants.history_builder import SUB, H

T1 = (0, 1)


def _three(h: H, *, sub_type: str = "Exclusive") -> None:
    """A subscriber, then a, b and c at 1:0..1:2."""
    h.subscribe(at=0, sub_type=sub_type)
    for i, message in enumerate("abc"):
        h.send(message, (1, i), at=10 + 10 * i)


def _run(h: H) -> TxnResult:
    return check_transactional(h.ops)


def test_poll_skip_an_exclusive_consumer_jumps_over_a_committed_message() -> None:
    h = H()
    _three(h)
    h.receive("a", (1, 0), at=50, done=51)
    h.receive("c", (1, 2), at=52, done=53)
    result = _run(h)
    (skip,) = [a for a in result.anomalies if a.name == "poll-skip"]
    assert "skipping 'b'" in skip.explanation and not result.ok
    assert "lost-write" in result.counts  # and b, before c, never arrived
    h.receive("b", (1, 1), at=54, done=55)  # arriving later heals the loss, not the skip
    assert set(_run(h).counts) == {"poll-skip", "out-of-order-delivery"}


def test_no_skip_in_order() -> None:
    h = H()
    _three(h)
    for i, message in enumerate("abc"):
        h.receive(message, (1, i), at=50 + 2 * i, done=51 + 2 * i)
    result = _run(h)
    assert result.ok and not {"poll-skip", "lost-write"} & set(result.notes)


def test_a_shared_subscription_is_not_judged() -> None:
    h = H()
    _three(h, sub_type="Shared")
    h.receive("a", (1, 0), at=50, done=51)
    h.receive("c", (1, 2), at=52, done=53)
    assert not {"poll-skip", "lost-write"} & set(_run(h).counts)


def test_an_aborted_transactions_message_may_be_passed() -> None:
    h = H()
    h.subscribe(at=0)
    h.send("a", (1, 0), at=10)
    h.new_txn(T1, at=12)
    h.send("t", (1, 1), at=14, txn=T1)
    h.end("abort", T1, at=16, done=18)
    h.send("c", (1, 2), at=20)
    h.receive("a", (1, 0), at=50, done=51)
    h.receive("c", (1, 2), at=52, done=53)
    assert _run(h).ok
    committed = H()
    committed.ops = [op for op in h.ops if op.f != "abort"]
    committed.end("commit", T1, at=16, done=18)
    assert {"poll-skip", "lost-write"} <= set(_run(committed).counts)


def test_an_ack_or_a_seek_or_an_unknown_receive_explains_the_gap() -> None:
    def base() -> H:
        h = H()
        _three(h)
        h.receive("a", (1, 0), at=50, done=51)
        return h

    acked = base()
    acked.ack((1, 1), at=52)  # b acknowledged without being received: nothing owed any more
    acked.receive("c", (1, 2), at=54, done=55)
    assert not {"poll-skip", "lost-write"} & set(_run(acked).counts)
    sought = base()
    sought.op("seek", SUB, {"publish_time": 25}, None, 52, 53, process=9)
    sought.receive("c", (1, 2), at=54, done=55)
    assert not {"poll-skip", "lost-write"} & set(_run(sought).counts)
    blind = base()
    blind.op("receive", SUB, {}, None, 52, None, process=8, kind=OpType.INFO)  # may have taken b
    blind.receive("c", (1, 2), at=54, done=55)
    assert not {"poll-skip", "lost-write"} & set(_run(blind).counts)


def test_lost_write_before_the_first_delivery() -> None:
    h = H()
    _three(h)
    h.receive("b", (1, 1), at=50, done=51)  # a, at 1:0, never came
    h.receive("c", (1, 2), at=52, done=53)
    result = _run(h)
    (lost,) = [a for a in result.anomalies if a.name == "lost-write"]
    assert "'a'" in lost.explanation and "poll-skip" not in result.counts  # no earlier delivery to skip from


def test_duplicate_a_message_delivered_at_two_positions() -> None:
    h = H(distinct_processes=True)
    h.subscribe(at=0, sub_type="Shared")
    h.send("a", (1, 0), at=10, kind=OpType.INFO)  # its position never returned
    h.receive("a", (1, 0), at=50, done=51)
    h.receive("a", (1, 3), at=52, done=53)
    result = _run(h)
    assert "duplicate" in result.counts and not result.ok
    # with the position returned, a delivery elsewhere is an inconsistent-position, not again a duplicate
    known = H(distinct_processes=True)
    known.subscribe(at=0, sub_type="Shared")
    known.send("a", (1, 0), at=10)
    known.receive("a", (1, 0), at=50, done=51)
    known.receive("a", (1, 3), at=52, done=53)
    counts = _run(known).counts
    assert "inconsistent-position" in counts and "duplicate" not in counts


def test_unseen_and_realtime_lag_inform_only() -> None:
    h = H()
    _three(h)
    h.receive("a", (1, 0), at=100, done=101)  # b and c sent by 32, never received
    result = _run(h)
    assert result.ok and {"unseen", "realtime-lag"} <= set(result.notes)
    (unseen,) = [a for a in result.informational if a.name == "unseen"]
    assert "2 message(s)" in unseen.explanation
    (lag,) = [a for a in result.informational if a.name == "realtime-lag"]
    assert "worst realtime lag 88 ms" in lag.explanation  # a was there from 12; the receive began at 100


def test_the_pulsar_statements_say_what_had_something_to_judge() -> None:
    h = H()
    _three(h, sub_type="Shared")
    h.receive("a", (1, 0), at=50, done=51)
    statements = {s.check: s for s in _run(h).statements}
    assert set(statements) == {"poll-skip", "lost-write", "duplicate", "unseen", "realtime-lag"}
    assert not statements["poll-skip"].applies and "Exclusive" in statements["poll-skip"].evidence
    assert statements["realtime-lag"].applies and "informational" in statements["realtime-lag"].evidence


def _restart(invoked: int, took: int | None) -> Operation:
    return Operation(
        history="h",
        index=invoked,
        process=0,
        type=OpType.OK if took is not None else OpType.INFO,
        f="seek",
        object=SUB,
        invoked_at=invoked,
        completed_at=None if took is None else invoked + took,
    )


@given(
    # small times, so that a receive often starts or ends just as a restart does
    st.lists(st.tuples(st.integers(0, 10), st.none() | st.integers(0, 4)), max_size=8),
    st.integers(0, 16),
    st.integers(0, 4),
)
@example([(2, 3)], 5, 0)  # the restart completes as the receive starts: they overlap
@example([(5, 1)], 1, 4)  # invoked as the receive ends: they overlap
def test_restarts_answer_as_a_walk_over_every_restart_would(
    restarts: list[tuple[int, int | None]], start: int, length: int
) -> None:
    """poll-skip's restarts are asked per delivery in O(log r) (:class:`_Restarts`); the answers are
    the definition's: some restart invoked by the receive's end and not completed before its start,
    and how many completed before it."""
    ops = [_restart(invoked, took) for invoked, took in restarts]
    index = _Restarts(ops)
    end = start + length
    never = float("inf")
    assert index.overlap(start, end) == any(r.invoked_at <= end and start <= (r.completed_at or never) for r in ops)
    assert index.ended_before(start) == sum(1 for r in ops if (r.completed_at or never) < start)


def _ack_op(i: int, cumulative: bool, entry: int, index: int | None, invoked: int) -> Operation:
    value = {"position": [0, entry], **({} if index is None else {"batch_index": index})}
    return Operation(
        history="h",
        index=i,
        process=0,
        type=OpType.OK,
        f="ack_cumulative" if cumulative else "ack",
        object=SUB,
        value=json.dumps(value),
        invoked_at=invoked,
        completed_at=invoked + 1,
    )


@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 3), st.none() | st.integers(0, 3), st.integers(0, 10)), max_size=10
    ),
    st.integers(0, 3),
    st.integers(-1, 3),
    st.integers(0, 12),
)
@example([(True, 1, None, 2)], 1, 2, 3)  # a cumulative ack of a whole entry covers its indexes
@example([(False, 1, 2, 5)], 1, 2, 5)  # invoked at the question's time: not before it
@example([(True, 1, 2, 0)], 1, 2, 5)  # a cumulative ack covers its own batch index
@example([(False, 1, None, 0)], 1, 2, 5)  # an individual ack of the whole entry covers each index
def test_ack_index_answers_as_a_walk_over_every_ack_would(
    acks: list[tuple[bool, int, int | None, int]], entry: int, index: int, when: int
) -> None:
    """poll-skip's "acked before" is asked once per owed message (:class:`_AckIndex`, O(log a)); the
    answers are the definition's: some ack invoked before ``when`` covers the position."""
    ops = [_ack_op(i, *ack) for i, ack in enumerate(acks)]
    position = (0, entry, index)
    expected = any(
        op.invoked_at < when and covers((0, e, -1 if i is None else i), cumulative, position)
        for op, (cumulative, e, i, _) in zip(ops, acks, strict=True)
    )
    assert _AckIndex(ops).acked_before(position, when) == expected
