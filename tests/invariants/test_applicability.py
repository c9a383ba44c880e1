"""Each check states whether a history gave it anything to judge (``invariants.applicability``), and
``verify`` carries the statement beside the verdict: an absent check is never read as a pass."""

from __future__ import annotations

import json

from history_io.edn import parse_edn
from invariants.applicability import GROUPS, applicability, describe
from invariants.queue.taxonomy import PULSAR_CHECKS
from invariants.transactional import CHECKS
from invariants.verify import VerifyOptions, check_histories
from spec.history import Operation, object_id
from tests.invariants.synthetic import generate, op

P = "persistent://public/default/t"
PART = object_id("partition", P)
SUB = object_id("subscription", f"{P}#sub")


def _applies(ops: list[Operation]) -> dict[str, bool]:
    return {found.check: found.applies for found in applicability(ops)}


def test_one_statement_per_check_in_the_checks_order() -> None:
    found = applicability(generate(3))
    assert [f.check for f in found] == list(CHECKS)
    assert {f.check: f.group for f in found} == dict(GROUPS)
    assert all(f.evidence for f in found)


def test_without_transactions_the_transactional_checks_say_so() -> None:
    ops = [
        op(0, 0, "send", PART, {"message": "a", "txn": None}, {"position": [1, 0]}, at=0),
        op(1, 0, "send", PART, {"message": "b", "txn": None}, {"position": [1, 1]}, at=2),
        op(2, 1, "subscribe", SUB, {"initial_position": "Earliest", "sub_type": "Exclusive"}, at=0),
        op(3, 1, "receive", SUB, {}, {"message": "a", "position": [1, 0]}, at=4),
        op(4, 1, "receive", SUB, {}, {"message": "b", "position": [1, 1]}, at=6),
        op(5, 1, "receive", SUB, {}, None, at=8),
    ]
    found = {f.check: f for f in applicability(ops)}
    for name, group in GROUPS.items():
        if group == "transactional":
            assert not found[name].applies and "no transaction" in found[name].evidence, name
    assert found["lost-message"].applies and found["lost-message"].evidence == "1 subscription read to the end"
    assert found["out-of-order-delivery"].applies and found["realtime-order"].applies
    assert not found["early-delivery"].applies and found["early-delivery"].evidence == "no delayed message"
    assert not found["late-delivery"].applies and not found["lost-redelivery"].applies
    text = describe(list(found.values()), ops)
    assert "without transactions" in text and "nothing to judge" in text
    # without the final empty receive, loss has nothing to judge
    assert not _applies(ops[:-1])["lost-message"]


def test_stated_bounds_make_the_liveness_checks_apply() -> None:
    ops = [
        op(0, 2, "subscribe", SUB, {"initial_position": "Earliest", "sub_type": "Shared", "consumer": "c"}, at=0),
        op(
            1,
            0,
            "send",
            PART,
            {"message": "a", "txn": None, "deliver_at_ms": 50, "deliver_within_ms": 70},
            {"position": [1, 0]},
            at=1,
        ),
        op(2, 2, "receive", SUB, {"consumer": "c"}, {"message": "a", "position": [1, 0]}, at=40, done=60),
        op(3, 2, "negative_ack", SUB, {"position": [1, 0], "consumer": "c", "redeliver_within_ms": 10}, at=61),
        op(4, 2, "receive", SUB, {"consumer": "c"}, {"message": "a", "position": [1, 0]}, at=62, done=65),
        op(5, 2, "receive", SUB, {"consumer": "c"}, None, at=200),
    ]
    found = {f.check: f for f in applicability(ops)}
    assert found["late-delivery"].applies and "bound of 70 ms" in found["late-delivery"].evidence
    assert found["early-delivery"].applies and found["lost-redelivery"].applies


def test_a_stated_bound_nothing_can_prove_missed_cannot_judge() -> None:
    """A liveness check judges a message only once every consumer found nothing after its bound: a
    history with bounds but no such receive says so, with the reason, and is not counted as applied."""
    ops = [
        op(0, 2, "subscribe", SUB, {"initial_position": "Earliest", "sub_type": "Shared", "consumer": "c"}, at=0),
        op(
            1,
            0,
            "send",
            PART,
            {"message": "a", "txn": None, "deliver_at_ms": 50, "deliver_within_ms": 70},
            {"position": [1, 0]},
            at=1,
        ),
        op(2, 2, "receive", SUB, {"consumer": "c"}, {"message": "a", "position": [1, 0]}, at=40, done=60),
        op(3, 2, "negative_ack", SUB, {"position": [1, 0], "consumer": "c", "redeliver_within_ms": 10}, at=61),
    ]
    found = {f.check: f for f in applicability(ops)}
    for name in ("late-delivery", "lost-redelivery"):
        assert not found[name].applies, name
        assert found[name].evidence.startswith("cannot judge: no consumer found nothing after it was due"), name


def test_delays_within_the_allowed_earliness_cannot_be_seen_early() -> None:
    """``record --workload delayed`` at its default options: delays of at most 400 ms, a non-strict
    broker allowed one tick (1000 ms) early: no delivery can be early enough to see, so early
    delivery cannot judge the history, and says why."""
    sends = [
        op(
            i + 1,
            0,
            "send",
            PART,
            {"message": f"m{i}", "txn": None, "deliver_at_ms": 10 * i + 400, "deliver_early_ms": 1000},
            {"position": [1, i]},
            at=10 * i,
        )
        for i in range(3)
    ]
    receives = [
        op(i + 4, 2, "receive", SUB, {"consumer": "c"}, {"message": f"m{i}", "position": [1, i]}, at=30, done=31)
        for i in range(3)
    ]
    ops = [op(0, 2, "subscribe", SUB, {"sub_type": "Shared", "consumer": "c"}, at=0), *sends, *receives]
    early = {f.check: f for f in applicability(ops)}["early-delivery"]
    assert not early.applies
    assert early.evidence.startswith("cannot judge: every delay (at most 400 ms) is within the allowed earliness")
    # a delay past the earliness can be seen early: the same history with a strict broker applies
    strict = [o if o.f != "send" else _strict(o) for o in ops]
    assert {f.check: f for f in applicability(strict)}["early-delivery"].applies


def _strict(send: Operation) -> Operation:
    import dataclasses

    args = dict(send.args)
    args["deliver_early_ms"] = 0
    return dataclasses.replace(send, value=json.dumps(args), _value=args)


def test_the_verdict_carries_the_statement() -> None:
    text = "\n".join(
        [
            "{:type :invoke, :f :add, :value 1, :time 1, :process 0}",
            "{:type :ok, :f :add, :value 1, :time 2, :process 0}",
            "{:type :invoke, :f :read, :time 3, :process 0}",
            "{:type :ok, :f :read, :value #{1}, :time 4, :process 0}",
        ]
    )
    rows = check_histories({"s": parse_edn(text, history="s")}, "f", VerifyOptions())
    # each row states its own checks: the transactional group's, and the delivery group's with each
    # anomaly of Jepsen's Kafka taxonomy judged on Pulsar histories (invariants.queue)
    statement = {}
    for checker in ("transactional", "delivery"):
        (row,) = [r for r in rows if r.checker == checker]
        mine = json.loads(row.detail)["applicability"]
        assert {GROUPS.get(name, "delivery") for name in mine} == {checker}
        statement.update(mine)
    assert set(statement) == set(CHECKS) | set(PULSAR_CHECKS)
    # a set has no transaction: the transactional checker had nothing to judge, which is no pass
    assert {r.checker: r.verdict for r in rows}["transactional"] == "skipped"
    assert statement["lost-message"]["applies"] and statement["garbage-read"]["applies"]
    # a Jepsen set has no positions: order and positions had nothing to judge, and say so
    assert not statement["out-of-order-delivery"]["applies"] and not statement["inconsistent-position"]["applies"]
