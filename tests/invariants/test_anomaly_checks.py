"""One check per anomaly (``invariants.transactional.CHECKS``) over one shared analysis.

Each anomaly's check, run alone on a history that shows that anomaly and nothing else, finds it;
every other check finds nothing there; the whole of ``check_transactional`` is exactly the checks
run one after the other; and each check says in its docstring which anomaly it finds, its Adya or
Elle name where one exists, and the rules it rests on.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invariants.queue import QUEUE_ANOMALIES
from invariants.transactional import (
    ANOMALIES,
    CHECKS,
    REDELIVERY_BOUND_MS,
    Collector,
    TxnAnalysis,
    check_transactional,
    find,
)
from spec.history import Operation, OpType, object_id
from spec.rules import RULES_DIR, parse_rules
from tests.invariants.synthetic import generate, op, renumber

P = "persistent://public/default/t-partition-0"
PART = object_id("partition", P)
SUB = object_id("subscription", f"{P}#sub")
TC = object_id("coordinator", 0)
T1, T2 = [0, 1], [0, 2]
EXCL = {"initial_position": "Earliest", "sub_type": "Exclusive"}
SHARED = {"initial_position": "Earliest", "sub_type": "Shared"}


def _send(index: int, message: str, position: list[int], at: int, txn: list[int] | None = None) -> Operation:
    return op(index, 0, "send", PART, {"message": message, "txn": txn}, {"position": position}, at=at)


def _recv(index: int, message: str | None, position: list[int] | None, at: int, **extra: int) -> Operation:
    result = None if message is None else {"message": message, "position": position, **extra}
    return op(index, 2, "receive", SUB, {}, result, at=at)


def _committed_pair() -> list[Operation]:
    return [
        _send(0, "a", [1, 0], 0, T1),
        _send(1, "b", [1, 1], 2, T1),
        op(2, 0, "commit", TC, {"txn": T1}, at=4),
        _send(3, "c", [1, 2], 6),
        _recv(4, "a", [1, 0], 8),
        _recv(5, "b", [1, 1], 10),
        _recv(6, "c", [1, 2], 12),
        _recv(7, None, None, 14),
    ]


def _cycle() -> list[Operation]:
    a, b = "persistent://public/default/a-partition-0", "persistent://public/default/b-partition-0"
    sub_a, sub_b = object_id("subscription", f"{a}#s"), object_id("subscription", f"{b}#s")
    return [
        op(0, 0, "send", object_id("partition", a), {"message": "x", "txn": T1}, {"position": [1, 0]}, at=0),
        op(1, 1, "send", object_id("partition", b), {"message": "y", "txn": T2}, {"position": [2, 0]}, at=0),
        op(2, 0, "commit", TC, {"txn": T1}, at=10, done=30),
        op(3, 1, "commit", TC, {"txn": T2}, at=10, done=30),
        op(4, 2, "receive", sub_b, {}, {"message": "y", "position": [2, 0]}, at=12),
        op(5, 2, "ack", sub_b, {"position": [2, 0], "txn": T1}, at=14),
        op(6, 3, "receive", sub_a, {}, {"message": "x", "position": [1, 0]}, at=12),
        op(7, 3, "ack", sub_a, {"position": [1, 0], "txn": T2}, at=14),
    ]


# One history per anomaly showing it and nothing else.
SCENARIOS: dict[str, Callable[[], list[Operation]]] = {
    "commit-and-abort": lambda: [op(0, 0, "commit", TC, {"txn": T1}, at=0), op(1, 0, "abort", TC, {"txn": T1}, at=2)],
    "garbage-read": lambda: [_recv(0, "ghost", [1, 0], 4)],
    "aborted-read": lambda: [
        _send(0, "a", [1, 0], 0, T1),
        op(1, 0, "abort", TC, {"txn": T1}, at=2),
        _recv(2, "a", [1, 0], 4),
    ],
    "uncommitted-read": lambda: [_send(0, "a", [1, 0], 0, T1), _recv(1, "a", [1, 0], 4)],
    "premature-read": lambda: [
        _send(0, "a", [1, 0], 0, T1),
        _recv(1, "a", [1, 0], 2),
        op(2, 0, "commit", TC, {"txn": T1}, at=5),
    ],
    "fractured-read": lambda: [o for o in _committed_pair() if o.index != 5],
    "lost-message": lambda: [o for o in _committed_pair() if o.index != 6],
    "duplicate-after-commit": lambda: [
        _send(0, "a", [1, 0], 0),
        _recv(1, "a", [1, 0], 2),
        op(2, 2, "ack", SUB, {"position": [1, 0], "txn": T2}, at=4),
        op(3, 2, "commit", TC, {"txn": T2}, at=6),
        _recv(4, "a", [1, 0], 9, redelivery_count=1),
    ],
    "missing-redelivery": lambda: [
        _send(0, "a", [1, 0], 0),
        op(1, 2, "subscribe", SUB, EXCL, at=1),
        _recv(2, "a", [1, 0], 4),
        op(3, 2, "ack", SUB, {"position": [1, 0], "txn": T2}, at=6),
        op(4, 2, "abort", TC, {"txn": T2}, at=8, done=11),
        _recv(5, None, None, 11 + REDELIVERY_BOUND_MS),
    ],
    "inconsistent-position": lambda: [_send(0, "a", [1, 0], 0), _recv(1, "a", [1, 5], 4)],
    "realtime-order": lambda: [_send(0, "a", [1, 1], 0), _send(1, "b", [1, 0], 3)],
    "out-of-order-delivery": lambda: [
        _send(0, "a", [1, 0], 0),
        _send(1, "b", [1, 1], 2),
        _recv(2, "b", [1, 1], 4),
        _recv(3, "a", [1, 0], 6),
    ],
    "early-delivery": lambda: [
        op(0, 0, "send", PART, {"message": "a", "txn": None, "deliver_at_ms": 100}, {"position": [1, 0]}, at=0),
        op(1, 2, "receive", SUB, {}, {"message": "a", "position": [1, 0]}, at=40, done=60),
    ],
    "cyclic-information-flow": _cycle,
    # Due at 100, within 50: the one consumer found nothing at 200 and got it only at 300.
    "late-delivery": lambda: [
        op(0, 2, "subscribe", SUB, {**SHARED, "consumer": "c"}, at=0),
        op(
            1,
            0,
            "send",
            PART,
            {"message": "a", "txn": None, "deliver_at_ms": 100, "deliver_within_ms": 50},
            {"position": [1, 0]},
            at=5,
        ),
        op(2, 2, "receive", SUB, {"consumer": "c"}, None, at=200, done=210),
        op(3, 2, "receive", SUB, {"consumer": "c"}, {"message": "a", "position": [1, 0]}, at=290, done=300),
    ],
    # Negatively acked at 20, to be redelivered within 100: nothing by 500, then never again.
    "lost-redelivery": lambda: [
        op(0, 2, "subscribe", SUB, {**SHARED, "consumer": "c"}, at=0),
        _send(1, "a", [1, 0], 2),
        op(2, 2, "receive", SUB, {"consumer": "c"}, {"message": "a", "position": [1, 0]}, at=10, done=12),
        op(3, 2, "negative_ack", SUB, {"position": [1, 0], "consumer": "c", "redeliver_within_ms": 100}, at=20),
        op(4, 2, "receive", SUB, {"consumer": "c"}, None, at=500, done=510),
    ],
}


def test_every_anomaly_has_one_check_and_one_scenario() -> None:
    assert list(CHECKS) == [
        "commit-and-abort",
        "inconsistent-position",
        "garbage-read",
        "early-delivery",
        "aborted-read",
        "uncommitted-read",
        "premature-read",
        "fractured-read",
        "lost-message",
        "duplicate-after-commit",
        "missing-redelivery",
        "cyclic-information-flow",
        "realtime-order",
        "out-of-order-delivery",
        "late-delivery",
        "lost-redelivery",
    ]
    # Jepsen's Kafka-workload taxonomy is registered beside them and tested in test_queue_kafka.py
    assert set(CHECKS) == set(SCENARIOS) == set(ANOMALIES) - set(QUEUE_ANOMALIES)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_check_alone_finds_its_anomaly_and_the_others_find_nothing(name: str) -> None:
    ops = SCENARIOS[name]()
    found = find(name, ops)
    assert found and {a.name for a in found} == {name}
    assert all(a.ops and a.explanation for a in found)
    for other in CHECKS:
        if other != name:
            assert find(other, ops) == [], (name, other)
    assert set(check_transactional(ops).counts) == {name}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_each_check_documents_its_anomaly_its_adya_or_elle_name_and_its_rules(name: str) -> None:
    doc = CHECKS[name].__doc__ or ""
    assert f"``{name}``" in doc, name
    adya = ANOMALIES[name]
    if adya is not None:
        assert adya in doc, (name, adya)
    cited = set(re.findall(r"\b(?:TC|TB|PA|DD)-\d+\b", doc))
    known = {r.id for page in RULES_DIR.glob("*.md") for r in parse_rules(page.read_text(), page.stem)}
    assert cited <= known, cited - known
    # garbage-read rests on the history contract (unique payloads), not on a machine's rule
    assert cited or name == "garbage-read", f"{name} cites no rule"


def test_the_analysis_is_built_once_and_only_read() -> None:
    ops = SCENARIOS["fractured-read"]()
    analysis = TxnAnalysis.build(ops)
    before = (dict(analysis.fates), list(analysis.deliveries), len(analysis.messages))
    for check in CHECKS.values():
        check(analysis, Collector(analysis.history, 20, ANOMALIES))
    assert (dict(analysis.fates), list(analysis.deliveries), len(analysis.messages)) == before
    assert analysis.fate((0, 1)).value == "committed" and analysis.fate((9, 9)).value == "open"


@given(st.integers(0, 10_000), st.sampled_from(["drop", "info", "flip"]))
def test_check_transactional_is_the_checks_one_after_the_other(seed: int, mutation: str) -> None:
    """On generated histories, whole or mutated, the counts of the whole check are the union of
    what each check finds alone."""
    ops = generate(seed)
    victim = ops[seed % len(ops)]
    if mutation == "drop":
        ops = renumber([o for o in ops if o is not victim])
    elif mutation == "info":
        ops = [o if o is not victim else dataclasses.replace(o, type=OpType.INFO) for o in ops]
    else:
        flipped = {"commit": "abort", "abort": "commit"}.get(victim.f, victim.f)
        ops = [o if o is not victim else dataclasses.replace(o, f=flipped) for o in ops]
    whole = check_transactional(ops, cap=1000).counts
    alone = {name: len(find(name, ops, cap=1000)) for name in CHECKS}
    assert whole == {name: n for name, n in alone.items() if n}
