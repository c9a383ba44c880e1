"""Faults on demand: seeded, logged, and what a client sees is the specified behaviour.

Under broker crashes, topic unloads, dropped connections, dropped and delayed responses and failed
ledger writes, the official client retries and reconnects; every message whose send it saw
acknowledged is delivered (at least once) once the faults stop.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import pulsar
import pytest

from engine.serve.faults import FAULT_RATES, parse_faults
from runners.serve import finish, start
from spec.types import Position
from tests.engine.serve.conftest import CONFIG, QUIET, drain, new_client, unique
from txnclient.client import WireClient, WireError, WireTimeout
from txnmodel.cli import main


def test_fault_specs() -> None:
    assert parse_faults("off") is None
    assert parse_faults("on") == FAULT_RATES
    on = parse_faults("on,broker_crash=0.9")
    assert on is not None and on["broker_crash"] == 0.9 and on["drop_request"] == FAULT_RATES["drop_request"]
    only = parse_faults("drop_response=0.5")
    assert only is not None and only["drop_response"] == 0.5 and only["broker_crash"] == 0.0
    for bad in ("sometimes", "broker_crash=2", "nothing=0.1", "drop_request=x"):
        with pytest.raises(ValueError):
            parse_faults(bad)
    assert main(["serve", "--port", "0", "--faults", "nothing=1"]) == 2


def test_nothing_acknowledged_is_lost_under_faults() -> None:
    history = tempfile.mkdtemp(prefix="serve-faults-")
    handle = start(
        config=CONFIG,
        seed=3,
        history=history,
        faults="drop_response=0.02,drop_request=0.02,max_extra_delay_ms=150,ledger_append=0.01",
    )
    client = pulsar.Client(handle.url, operation_timeout_seconds=3, logger=QUIET)
    topic = unique()
    acked: set[int] = set()
    received: set[int] = set()  # every message the consumer took, during the faults and after them

    def take(timeout_ms: int) -> None:
        received.update(int(m.data()[1:]) for m in drain(consumer, timeout_ms=timeout_ms))

    try:
        producer = client.create_producer(topic, send_timeout_millis=3000)
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        for round_ in range(4):
            for i in range(round_ * 30, round_ * 30 + 30):
                producer.send_async(
                    f"m{i}".encode(), lambda res, _mid, i=i: acked.add(i) if res == pulsar.Result.Ok else None
                )
            kind = ("topic_unload", "connection_drop", "coordinator_crash", "broker_crash")[round_]
            # Nothing to hit while a component reloads or the client reconnects (its backoff grows
            # with every failed attempt, and a loaded machine stretches it): a generous bound.
            deadline = time.monotonic() + 60
            while not handle.inject(kind):
                assert time.monotonic() < deadline, f"found nothing to {kind} in 60 s"
                time.sleep(0.05)
            take(100)  # acknowledged here, so never redelivered if the ack holds: counted now
        with contextlib.suppress(pulsar.Timeout):
            producer.flush()  # a send whose request or receipt a fault dropped: unknown outcome, not acked
        handle.heal()
        for i in range(1000, 1010):  # after the faults the client reconnects and its sends succeed
            for _ in range(10):
                try:
                    producer.send(f"m{i}".encode())
                except pulsar.Timeout:
                    continue
                acked.add(i)
                break
        # Redelivery after the faults brings what was dispatched but not acknowledged back; the
        # client may still be backing off its reconnection, so the drain has a generous bound.
        deadline = time.monotonic() + 120
        while not acked <= received and time.monotonic() < deadline:
            take(500)
        assert set(range(1000, 1010)) <= acked <= received
        kinds = {event["kind"] for event in handle.fault_events()}
        injected = {"topic-unload", "connection-dropped", "coordinator-crash", "broker-crash", "broker-restart"}
        assert injected | {"heal"} <= kinds
    finally:
        client.close()
        handle.stop()
        finish(handle)
    files = list(Path(history).glob("serve-*.parquet"))
    assert len(files) == 1
    from history_io.files import read_metadata

    metadata = read_metadata(files[0])
    assert metadata is not None
    (run,) = metadata["runs"].values()
    assert run["faults"] and any(e["kind"] == "broker-crash" for e in run["fault_schedule"])


def test_a_coordinator_crash_leaves_requests_unanswered_then_recovers() -> None:
    handle = start(config=CONFIG, faults={})
    try:
        with WireClient(handle.url, operation_timeout_seconds=1.0) as wire:
            txn = wire.new_transaction()
            handle.call(lambda server: server.broker.coordinator.crash())
            with pytest.raises(WireTimeout):
                txn.commit()  # a component that is down never answers
            handle.call(lambda server: server.broker.coordinator.load())
            # TC-21: the open transaction was replayed from the log; it can still be ended.
            with contextlib.suppress(WireError):
                txn.abort()
            assert wire.new_transaction().txn_id.least_sig_bits > txn.txn_id.least_sig_bits
    finally:
        handle.stop()
        finish(handle)


def test_a_command_nothing_answers_is_never_dropped() -> None:
    """``drop_request`` drops a request the client waits on: its timeout ends it and the client
    retries or gives up.  FLOW, REDELIVER_UNACKNOWLEDGED_MESSAGES and an ACK without a receipt are
    never answered, so nothing would ever tell the client: a dropped FLOW left a consumer without
    permits for as long as its connection lived (the faults test, when the drop came after the
    last reconnection).  TCP loses no frame on a live connection; these are never dropped."""
    handle = start(config=CONFIG, faults={})
    topic = f"persistent://public/default/{unique()}"
    try:
        with WireClient(handle.url) as wire, WireClient(handle.url, operation_timeout_seconds=1.0) as other:
            sent = wire.create_producer(topic).send(b"m0")
            consumer = wire.subscribe(
                topic, "sub", consumer_type="Shared", initial_position="Earliest", receiver_queue_size=0
            )
            handle.call(lambda server: server.faults.rates.update(drop_request=1.0))
            consumer.flow(1)
            first = consumer.receive(timeout_millis=30_000)
            assert first is not None and first.payload == b"m0"
            consumer.redeliver_unacknowledged_messages()
            again = consumer.receive(timeout_millis=30_000)
            assert again is not None and again.payload == b"m0" and again.redelivery_count() == 1
            consumer.acknowledge(again, receipt=False)
            wire.ping()  # every frame before it was handled
            sub = handle.call(lambda server: server.broker.partitions[topic].subscriptions["sub"])
            assert handle.call(lambda _: sub.cursor.mark_delete_position) == Position(sent.ledger_id(), sent.entry_id())
            with pytest.raises(WireTimeout):  # a request the client awaits is still dropped
                other.create_producer(topic)
        dropped = {event["kind"] for event in handle.fault_events()}
        # The client asks for the topic's partitions first, as Pulsar's clients do: that request goes.
        assert dropped == {"request-dropped-PARTITIONED_METADATA"}
    finally:
        handle.stop()
        finish(handle)


def test_a_partition_that_reloads_by_itself_sends_its_clients_away() -> None:
    """A failed write reloads the partition (``Component.reload``: its memory goes, it loads again
    from its ledgers), as an unload does, and the broker tells its producers and consumers to
    reconnect (CLOSE_PRODUCER / CLOSE_CONSUMER).  Without that, the consumer stayed attached to a
    subscription that no longer knew it and received nothing again, and every later send of the
    producer waited behind one sent while the partition was down, never answered."""
    handle = start(config=CONFIG, faults={})
    topic = f"persistent://public/default/{unique()}"
    receiving, sending = new_client(handle.url), new_client(handle.url)  # two connections
    try:
        consumer = receiving.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = sending.create_producer(topic, send_timeout_millis=3000)
        producer.send(b"before")
        consumer.acknowledge(consumer.receive(timeout_millis=30_000))
        handle.call(lambda server: server.broker.partitions[topic].reload())  # what a failed write does
        # The clients reconnect (with their backoff) once the partition is back: bounded generously.
        deadline = time.monotonic() + 120
        while True:
            try:
                producer.send(b"after")
                break
            except pulsar.Timeout:
                assert time.monotonic() < deadline, "the producer never recovered"
        # "before" may come again: the client acknowledges in groups, so its ack may not have
        # reached the broker before the reload (at least once).
        got = [consumer.receive(timeout_millis=120_000).data()]
        while got[-1] != b"after":
            got.append(consumer.receive(timeout_millis=120_000).data())
        assert set(got) <= {b"before", b"after"}
    finally:
        receiving.close()
        sending.close()
        handle.stop()
        finish(handle)
