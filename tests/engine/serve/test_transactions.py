"""Transactions over the wire: the project's wire client writes and acks in transactions while the
official client's consumers read.

What a reader may see is the transaction buffer's decision (TB-15, TB-16, TB-19): never a message of
an open or aborted transaction, never a marker, and a committed transaction's messages all at once
(none before its END_TXN was sent).  Errors come back with Pulsar's ServerError codes.
"""

from __future__ import annotations

import time

import pulsar
import pytest

from runners.serve import serve
from spec.errors import ServerError
from tests.engine.serve.conftest import CONFIG, drain, new_client, unique
from txnclient.client import WireClient, WireError


def _full(topic: str) -> str:
    return f"persistent://public/default/{topic}"


def test_readers_see_committed_transactions_whole_and_nothing_else(url: str) -> None:
    topic = unique("txn")
    client = new_client(url)
    readers = [
        client.subscribe(
            topic, "shared", consumer_type=pulsar.ConsumerType.Shared, initial_position=pulsar.InitialPosition.Earliest
        ),
        client.subscribe(topic, "excl", initial_position=pulsar.InitialPosition.Earliest),
    ]
    committed: dict[str, set[bytes]] = {}
    aborted: set[bytes] = set()
    commit_sent: dict[str, float] = {}
    with WireClient(url) as wire:
        producer = wire.create_producer(_full(topic))
        plain = wire.create_producer(_full(topic))
        for n in range(12):
            txn = wire.new_transaction(timeout_ms=30_000)
            payloads = {f"txn{n}-{i}".encode() for i in range(3)}
            for payload in sorted(payloads):
                producer.send(payload, txn=txn)
            plain.send(f"plain{n}".encode())
            name = f"txn{n}-"
            if n % 3 == 2:
                txn.abort()
                aborted |= payloads
            else:
                commit_sent[name] = time.time()
                txn.commit()
                committed[name] = payloads
    expected = set().union(*committed.values()) | {f"plain{n}".encode() for n in range(12)}
    for reader in readers:
        seen: list[tuple[bytes, float]] = []
        for message in drain(reader, timeout_ms=500):
            seen.append((message.data(), time.time()))
        payloads = [p for p, _ in seen]
        assert set(payloads) == expected, "a committed or plain message is missing, or another one arrived"
        assert not aborted & set(payloads)
        for name, members in committed.items():
            # All of a committed transaction's messages, in send order, none before END_TXN was sent.
            indexes = [i for i, p in enumerate(payloads) if p in members]
            assert [payloads[i] for i in indexes] == sorted(members)
            assert all(at >= commit_sent[name] for p, at in seen if p in members)
    client.close()


def test_an_open_transaction_holds_back_later_messages_until_it_times_out(url: str) -> None:
    # TB-15: max_read_position stops before the first message of an open transaction, so a normal
    # message published after it waits; when the coordinator times the transaction out (abort),
    # the normal message is delivered and the transaction's never is.
    topic = unique("open")
    client = new_client(url)
    reader = client.subscribe(topic, "r", initial_position=pulsar.InitialPosition.Earliest)
    with WireClient(url) as wire:
        producer = wire.create_producer(_full(topic))
        txn = wire.new_transaction(timeout_ms=800)
        producer.send(b"in-txn", txn=txn)
        producer.send(b"after")
        assert drain(reader, timeout_ms=300) == []
        late = reader.receive(timeout_millis=5000)
        assert late.data() == b"after"
        assert drain(reader, timeout_ms=300) == []
        with pytest.raises(WireError) as caught:
            txn.commit()
        assert caught.value.code in (ServerError.TransactionNotFound, ServerError.InvalidTxnStatus)
    client.close()


def test_acknowledging_in_a_transaction(url: str) -> None:
    topic = unique("ack")
    client = new_client(url)
    producer = client.create_producer(topic)
    for i in range(4):
        producer.send(f"m{i}".encode())
    with WireClient(url) as wire:
        consumer = wire.subscribe(_full(topic), "sub", consumer_type="Shared", initial_position="Earliest")
        messages = [consumer.receive(timeout_millis=2000) for _ in range(4)]
        assert all(m is not None for m in messages)
        keep = wire.new_transaction()
        for m in messages[:2]:
            assert m is not None
            consumer.acknowledge(m, txn=keep)
        keep.commit()
        drop = wire.new_transaction()
        for m in messages[2:]:
            assert m is not None
            consumer.acknowledge(m, txn=drop)
        # PA-6: a message acked by one open transaction cannot be acked by another.
        other = wire.new_transaction()
        with pytest.raises(WireError) as caught:
            assert messages[2] is not None
            consumer.acknowledge(messages[2], txn=other)
        assert caught.value.code == ServerError.TransactionConflict
        drop.abort()  # PA-13: the aborted acks' messages are redelivered
    again = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert sorted(m.data() for m in drain(again)) == [b"m2", b"m3"]
    client.close()


def test_transaction_errors_carry_pulsars_codes(url: str) -> None:
    with WireClient(url) as wire:
        txn = wire.new_transaction()
        txn.commit()
        with pytest.raises(WireError) as caught:
            txn.commit()  # TC-9, TC-11: a finished transaction is forgotten, so it is not found
        assert caught.value.code == ServerError.TransactionNotFound
        other = wire.new_transaction()
        other.abort()
        with pytest.raises(WireError) as caught:
            wire.end_transaction(other.txn_id, commit=True)
        assert caught.value.code in (ServerError.TransactionNotFound, ServerError.InvalidTxnStatus)


def test_transactions_disabled_are_refused() -> None:
    with serve(config=CONFIG.with_overrides({"transactionCoordinatorEnabled": False})) as address:
        with WireClient(address) as wire, pytest.raises(WireError) as caught:
            wire.new_transaction()
        assert caught.value.code == ServerError.NotAllowedError
