"""A liveness miss is its own verdict (``late``), apart from a safety violation (``illegal``), and
says how late against which bound; a checker with nothing to judge is ``skipped``, never ``ok``;
each anomaly goes to the row its group in the taxonomy names (issue 28, items 1, 2 and 6)."""

from __future__ import annotations

import dataclasses
import json

from invariants.queue.taxonomy import PULSAR_CHECKS
from invariants.transactional import GROUPS, LIVENESS, TAXONOMY
from invariants.verify import VerdictRow, VerifyOptions, check_history
from invariants.words import Words, seconds
from spec.history import Operation, object_id
from tests.invariants.synthetic import op
from views.report import rendered

P = "persistent://public/default/txnmodel-nack-8d2dd818bee3-p0"
PART = object_id("partition", P)
SUB = object_id("subscription", f"{P}#shared")
SHARED_C = {"initial_position": "Earliest", "sub_type": "Shared", "consumer": "c"}


def _nacked(redelivered_at: int | None = None) -> list[Operation]:
    """A message nacked with a bound of 1000 ms (counted from the negative ack's completion, 21: due
    by 1021), the consumer idle at 1100, and the message redelivered at ``redelivered_at`` (never:
    None)."""
    ops = [
        op(0, 2, "subscribe", SUB, SHARED_C, at=0),
        op(1, 0, "send", PART, {"message": "a", "txn": None}, {"position": [1, 0]}, at=2),
        op(2, 2, "receive", SUB, {"consumer": "c"}, {"message": "a", "position": [1, 0]}, at=10, done=12),
        op(3, 2, "negative_ack", SUB, {"position": [1, 0], "consumer": "c", "redeliver_within_ms": 1000}, at=20),
        op(4, 2, "receive", SUB, {"consumer": "c"}, None, at=1100, done=1150),
    ]
    if redelivered_at is not None:
        got = {"message": "a", "position": [1, 0], "redelivery_count": 1}
        ops.append(op(5, 2, "receive", SUB, {"consumer": "c"}, got, at=redelivered_at - 10, done=redelivered_at))
    return ops


def _rows(ops: list[Operation]) -> dict[str, VerdictRow]:
    return {row.checker: row for row in check_history("h", ops, "f", VerifyOptions())}


def test_the_taxonomy_marks_its_liveness_checks() -> None:
    assert {"late-delivery", "lost-redelivery", "missing-redelivery"} == LIVENESS
    assert all(kind.liveness == (kind.name in LIVENESS) for kind in TAXONOMY)


def test_a_redelivery_past_its_bound_is_late_not_illegal() -> None:
    rows = _rows(_nacked(redelivered_at=1181))
    assert rows["delivery"].verdict == "late"
    # no transaction in the history: the transactional checker had nothing to judge
    assert rows["transactional"].verdict == "skipped"
    (anomaly,) = json.loads(rows["delivery"].detail)["anomalies"]
    assert anomaly["name"] == "lost-redelivery" and anomaly["object"] == "p0#shared"
    # how late, against which bound: 1.160 s after the negative ack, whose bound is 1.000 s
    assert (anomaly["late_ms"], anomaly["bound_ms"]) == (160, 1000)
    assert (
        "redelivered 1.160 s after the negative ack (receive op 5 at +1.181 s), bound 1.000 s"
        in (anomaly["explanation"])
    )
    (shown,) = [r for r in rendered([rows["delivery"]]) if r.checker == "delivery"]
    assert shown.counterexample is not None
    assert "DELIVERY ANOMALIES: 1 liveness (late)" in shown.counterexample
    assert "lost-redelivery x1 [liveness: a bound missed]" in shown.counterexample
    assert "topics without 'persistent://public/default/txnmodel-nack-8d2dd818bee3-'" in shown.counterexample
    # on time: ok
    assert _rows(_nacked(redelivered_at=1000))["delivery"].verdict == "ok"


def test_a_redelivery_that_never_comes_is_late_with_no_lateness_but_its_bound() -> None:
    rows = _rows(_nacked())
    (anomaly,) = json.loads(rows["delivery"].detail)["anomalies"]
    assert rows["delivery"].verdict == "late"
    assert anomaly["late_ms"] is None and anomaly["bound_ms"] == 1000
    assert "never redelivered, bound 1.000 s after the negative ack" in anomaly["explanation"]


def test_a_safety_violation_beside_a_liveness_miss_is_illegal() -> None:
    garbage = op(6, 2, "receive", SUB, {"consumer": "c"}, {"message": "nobody sent it"}, at=1700, done=1701)
    rows = _rows([*_nacked(redelivered_at=1181), garbage])
    assert rows["delivery"].verdict == "illegal"
    counts = json.loads(rows["delivery"].detail)["counts"]
    assert counts == {"lost-redelivery": 1, "garbage-read": 1}
    (shown,) = rendered([rows["delivery"]])
    assert shown.counterexample is not None
    text = shown.counterexample
    assert "1 safety (illegal), 1 liveness (late)" in text
    # the safety kinds first, each anomaly one line under its kind, led by its object
    assert text.index("garbage-read x1 [safety]") < text.index("lost-redelivery x1 [liveness")
    assert "\n  p0#shared  ops [6]: receive op 6 returned 'nobody sent it'" in text


def test_a_check_that_cannot_judge_says_why_and_is_not_counted() -> None:
    """The nack's bound states liveness, but no consumer found nothing after it was due: nothing can
    prove the redelivery late, so the check cannot judge the history and says so."""
    busy = _nacked()[:-1]
    statements = json.loads(_rows(busy)["delivery"].detail)["applicability"]
    assert not statements["lost-redelivery"]["applies"]
    assert statements["lost-redelivery"]["evidence"].startswith(
        "cannot judge: no consumer found nothing after it was due"
    )
    # the delivery row states the delivery group's checks and Jepsen's judged on Pulsar histories
    assert {GROUPS[name] for name in statements if name in GROUPS} == {"delivery"}
    assert set(statements) - set(GROUPS) == set(PULSAR_CHECKS)


def test_words_write_times_from_the_start_and_names_without_the_shared_prefix() -> None:
    ops = _nacked(redelivered_at=1181)
    ops = [dataclasses.replace(o, invoked_at=o.invoked_at + 1_795_931_165_000) for o in ops]
    words = Words(ops)
    assert words.at(1_795_931_165_000 + 1162) == "+1.162 s"
    assert (
        words.name(SUB) == "p0#shared" and words.name(PART) == "p0" and words.name("coordinator:0") == "coordinator 0"
    )
    assert seconds(850) == "0.850 s" and seconds(float("inf")) == "never"


def test_a_negative_ack_of_a_batch_entry_owes_nothing_for_an_index_acked_before_it() -> None:
    """The delayed workload's seed 679 on the bucket tracker: a consumer received both messages of a
    batch entry, acked the first by its batch index, then negatively acked the entry (a negative ack
    names an entry, not an index).  Only the second is given back and redelivered; the first, acked,
    is owed nothing (it was reported as lost-redelivery)."""

    def at(index: int, message: str | None = None, **more: object) -> dict[str, object]:
        found = {"position": [1, 0], "batch_index": index, "batch_size": 2, **more}
        return found if message is None else {"message": message, **found}

    c = {"consumer": "c"}
    ops = [
        op(0, 2, "subscribe", SUB, SHARED_C, at=0),
        op(1, 0, "send", PART, {"message": "a", "txn": None}, at(0), at=2),
        op(2, 1, "send", PART, {"message": "b", "txn": None}, at(1), at=2),
        op(3, 2, "receive", SUB, c, at(0, "a"), at=10, done=12),
        op(4, 2, "ack", SUB, {"position": [1, 0], "batch_index": 0, **c}, at=13, done=15),
        op(5, 2, "receive", SUB, c, at(1, "b"), at=16, done=18),
        op(6, 2, "negative_ack", SUB, {"position": [1, 0], "redeliver_within_ms": 1000, **c}, at=20),
        op(7, 2, "receive", SUB, c, at(1, "b", redelivery_count=1), at=900, done=1000),
        op(8, 2, "ack", SUB, {"position": [1, 0], "batch_index": 1, **c}, at=1001, done=1002),
        op(9, 2, "receive", SUB, c, None, at=1100, done=1150),
    ]
    rows = _rows(ops)
    assert rows["delivery"].verdict == "ok", rows["delivery"].detail
    statements = json.loads(rows["delivery"].detail)["applicability"]
    assert statements["lost-redelivery"]["applies"]
    # teeth: without the redelivery of the index still owed, the miss is reported, for it alone
    rows = _rows([o for o in ops if o.index not in (7, 8)])
    (anomaly,) = json.loads(rows["delivery"].detail)["anomalies"]
    assert rows["delivery"].verdict == "late" and "'b'" in anomaly["explanation"]
