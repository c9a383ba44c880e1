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
    ]
    found = {f.check: f for f in applicability(ops)}
    assert found["late-delivery"].applies and "bound of 70 ms" in found["late-delivery"].evidence
    assert found["early-delivery"].applies and found["lost-redelivery"].applies


def test_the_verdict_carries_the_statement() -> None:
    text = "\n".join(
        [
            "{:type :invoke, :f :add, :value 1, :time 1, :process 0}",
            "{:type :ok, :f :add, :value 1, :time 2, :process 0}",
            "{:type :invoke, :f :read, :time 3, :process 0}",
            "{:type :ok, :f :read, :value #{1}, :time 4, :process 0}",
        ]
    )
    (row,) = [
        r
        for r in check_histories({"s": parse_edn(text, history="s")}, "f", VerifyOptions())
        if r.checker == "transactional"
    ]
    statement = json.loads(row.detail)["applicability"]
    # every check, and each anomaly of Jepsen's Kafka taxonomy judged on Pulsar histories
    assert set(statement) == set(CHECKS) | set(PULSAR_CHECKS)
    assert statement["lost-message"]["applies"] and statement["garbage-read"]["applies"]
    # a Jepsen set has no positions: order and positions had nothing to judge, and say so
    assert not statement["out-of-order-delivery"]["applies"] and not statement["inconsistent-position"]["applies"]
