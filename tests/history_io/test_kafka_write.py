"""A Pulsar history written in the shape of Jepsen's Kafka workload (``history_io.kafka_write``): what
each operation becomes, read back by Jepsen's reader shape (``history_io.kafka``), and a correct
history never showing an anomaly whose meaning Kafka and Pulsar share."""

from __future__ import annotations

import re

import pytest

from history_io.edn import parse_edn
from history_io.kafka_write import write_kafka_edn
from invariants.queue import check_kafka
from spec.history import OpType, validate_history
from tests.invariants.history_builder import SUB, H
from tests.invariants.synthetic import generate

T1, T2, T3, T4 = (0, 1), (0, 2), (0, 3), (0, 4)


def _events(text: str) -> list[dict[str, str]]:
    fields = re.compile(r":(\w+) (\[.*?\]\]|\[.*?\]|\S+?)(?=, :|\})")
    return [dict(fields.findall(line)) for line in text.splitlines()]


def _history() -> H:
    h = H()
    h.subscribe(at=0)
    h.send("a", (1, 0), at=10)
    h.new_txn(T1, at=20)
    h.send("b", (1, 1), at=22, txn=T1)
    h.end("commit", T1, at=24, done=26)
    h.receive("a", (1, 0), at=30, done=31)
    h.new_txn(T2, at=32)
    h.ack((1, 0), at=33, txn=T2)
    h.end("abort", T2, at=36, done=38)
    h.receive("b", (1, 1), at=40, done=41)
    h.new_txn(T3, at=42)
    h.send("c", (1, 2), at=43, txn=T3)  # nobody ends T3
    h.receive(None, None, at=50, done=51)
    return h


def test_each_operation_becomes_the_workloads_own() -> None:
    text = write_kafka_edn(_history().ops)
    events = _events(text)
    kinds = [(e["type"], e["f"]) for e in events if e["type"] != ":invoke"]
    assert kinds == [
        (":ok", ":assign"),
        (":ok", ":send"),
        (":ok", ":send"),  # T1, where it committed: it only sent
        (":fail", ":poll"),  # T2 aborted: the message it acknowledged is its poll
        (":ok", ":poll"),  # b, which no transaction acknowledged
        (":info", ":send"),  # T3: nobody ended it, on a process of its own
        (":ok", ":poll"),  # the empty receive
    ]
    assert '[:send 0 [1 "b"]]' in text and '[:poll {0 [[0 "a"]]}]' in text and "[:poll {}]" in text
    assert all(int(e["time"]) % 1_000_000 == 0 for e in events)  # milliseconds as nanoseconds
    assert [int(e["index"]) for e in events] == list(range(len(events)))


def test_what_it_writes_reads_back_as_the_workload() -> None:
    ops = _history().ops
    back = parse_edn(write_kafka_edn(ops), history="k")
    validate_history(back)
    sends = {(o.args["message"], o.returned["position"][1] if o.returned else None) for o in back if o.f == "send"}
    assert sends == {('"a"', 0), ('"b"', 1), ('"c"', 2)}
    fates = [o.type for o in back if o.f == "commit" and o.args["jepsen"]["f"] in ("send", "txn", "poll")]
    assert OpType.FAIL in fates and OpType.INFO in fates


def test_a_crashed_process_carries_on_as_another() -> None:
    h = H()
    h.subscribe(at=0)
    h.op("receive", SUB, {}, None, 10, None, process=9, kind=OpType.INFO)
    text = write_kafka_edn(h.ops)
    processes = [int(e["process"]) for e in _events(text)]
    assert len(set(processes)) == 1  # the subscribe and the receive: one process until the info
    h.op("receive", SUB, {}, None, 20, 21, process=7)
    assert parse_edn(write_kafka_edn(h.ops), history="k")


@pytest.mark.parametrize("seed", range(8))
def test_a_correct_history_shows_no_anomaly_kafka_and_pulsar_share(seed: int) -> None:
    ops = generate(seed)
    back = parse_edn(write_kafka_edn(ops), history="k")
    validate_history(back)
    found = check_kafka(back).findings.counts
    # Pulsar redelivers and lets Shared consumers skip, so poll order and loss read differently in Kafka;
    # what a message is, where it lies and whose it is mean the same in both
    shared = {"garbage-read", "G1a", "inconsistent-offsets", "duplicate", "precommitted-read", "G1c", "G1c-realtime"}
    assert not shared & set(found), found
