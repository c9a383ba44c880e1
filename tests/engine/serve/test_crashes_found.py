"""Every input that once ended ``txnmodel serve`` for all its clients, or reloaded a topic under
them, each in a test of its own: the request gets Pulsar's error (or is ignored, where the protocol
has no answer), the connection stays, and the broker serves on.

The first four were found by a random-frame fuzzer (issue 31); the others by the structure-aware
fuzzer of :mod:`tests.engine.serve.fuzzing` (the batch of no messages by its run in stop 41's tests).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from engine.serve.schemas import Schemas
from runners.serve import ServeHandle, finish, start
from spec.config import Config
from spec.errors import ServerError
from spec.pb import PulsarApi_pb2 as api
from tests.engine.serve.conftest import unique
from tests.engine.serve.rawpeer import RawPeer, message_bytes

T = api.BaseCommand
U64 = (1 << 64) - 1
BELOW_MINUS_ONE = U64 - 4  # -5 as a Java long


@pytest.fixture(scope="module")
def handle() -> Iterator[ServeHandle]:
    # Two entries per ledger, so that a topic has closed ledgers after a few sends.
    config = Config(transaction_coordinator_enabled=True, managed_ledger_max_entries_per_ledger=2)
    running = start(config=config)
    try:
        yield running
    finally:
        running.stop()
        finish(running)


class ServerLog:
    """The server's records during a test: an error record is a crash contained (none is expected)."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog

    def __bool__(self) -> bool:
        return bool(self.failures())

    def failures(self) -> list[logging.LogRecord]:
        return [r for r in self.caplog.records if r.name.startswith("runners.serve") and r.levelno >= logging.ERROR]


@pytest.fixture
def errors(caplog: pytest.LogCaptureFixture) -> ServerLog:
    caplog.set_level(logging.WARNING, logger="runners.serve")
    return ServerLog(caplog)


def _topic() -> str:
    return f"persistent://public/default/{unique('crash')}"


def _producer(peer: RawPeer, topic: str, producer_id: int = 1) -> None:
    peer.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=producer_id, request_id=1)))
    assert peer.read_type(T.PRODUCER_SUCCESS)


def _subscribe(peer: RawPeer, topic: str, sub: str = "sub", sub_type: int = api.CommandSubscribe.Shared) -> None:
    body = api.CommandSubscribe(topic=topic, subscription=sub, subType=sub_type, consumer_id=1, request_id=2)
    peer.send(T(type=T.SUBSCRIBE, subscribe=body))
    assert peer.read_type(T.SUCCESS)


def _send(peer: RawPeer, sequence_id: int = 0, producer_id: int = 1) -> api.MessageIdData:
    peer.send(T(type=T.SEND, send=api.CommandSend(producer_id=producer_id, sequence_id=sequence_id)), message_bytes())
    return peer.read_type(T.SEND_RECEIPT).send_receipt.message_id


def _ack(message_ids: list[api.MessageIdData], **fields: object) -> api.BaseCommand:
    return T(type=T.ACK, ack=api.CommandAck(consumer_id=1, message_id=message_ids, **fields))


def _still_served(handle: ServeHandle, peer: RawPeer) -> None:
    """This connection answers a PING, and a new one produces: nothing ended."""
    peer.send(T(type=T.PING, ping=api.CommandPing()))
    assert peer.read_type(T.PONG)
    assert handle.thread.is_alive() and not handle.errors
    with RawPeer(handle.url) as other:
        _producer(other, _topic())
        _send(other)


@pytest.mark.parametrize(
    "topic",
    ["", "x" * 1025, "non-persistent://public/default/t", "persistent://public/default/a b\x01", "a/b/c/d"],
    ids=["empty", "over-1024", "non-persistent", "bad-characters", "four-parts"],
)
def test_producer_on_a_topic_name_the_parser_refuses(handle: ServeHandle, errors: ServerLog, topic: str) -> None:
    with RawPeer(handle.url) as peer:
        peer.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=1, request_id=7)))
        answer = peer.read_type(T.ERROR)
        assert answer.error.request_id == 7
        assert answer.error.error in (ServerError.InvalidTopicName, ServerError.NotAllowedError)
        _still_served(handle, peer)
    assert not errors


@pytest.mark.parametrize("topic", ["", "x" * 1025, "non-persistent://public/default/t"])
def test_subscribe_on_a_topic_name_the_parser_refuses(handle: ServeHandle, errors: ServerLog, topic: str) -> None:
    with RawPeer(handle.url) as peer:
        body = api.CommandSubscribe(topic=topic, subscription="s", subType=0, consumer_id=1, request_id=7)
        peer.send(T(type=T.SUBSCRIBE, subscribe=body))
        answer = peer.read_type(T.ERROR)
        assert answer.error.error in (ServerError.InvalidTopicName, ServerError.NotAllowedError)
        _still_served(handle, peer)
    assert not errors


@pytest.mark.parametrize("name", ["", "  "])
def test_an_empty_subscription_name(handle: ServeHandle, errors: ServerLog, name: str) -> None:
    with RawPeer(handle.url) as peer:
        body = api.CommandSubscribe(topic=_topic(), subscription=name, subType=0, consumer_id=1, request_id=7)
        peer.send(T(type=T.SUBSCRIBE, subscribe=body))
        answer = peer.read_type(T.ERROR)
        # Pulsar's broker answers its NamingException("Empty subscription name") as ProducerBusy.
        assert answer.error.error == ServerError.ProducerBusy and "Empty subscription name" in answer.error.message
        _still_served(handle, peer)
    assert not errors


def test_an_ack_of_a_message_id_below_minus_one(handle: ServeHandle, errors: ServerLog) -> None:
    with RawPeer(handle.url) as peer:
        topic = _topic()
        _producer(peer, topic)
        _subscribe(peer, topic)
        _send(peer)
        peer.send(_ack([api.MessageIdData(ledgerId=BELOW_MINUS_ONE, entryId=0)], ack_type=0))  # no answer
        peer.send(_ack([api.MessageIdData(ledgerId=0, entryId=BELOW_MINUS_ONE)], ack_type=1, request_id=9))
        answer = peer.read_type(T.ACK_RESPONSE).ackResponse
        assert answer.request_id == 9 and answer.error == ServerError.NotAllowedError
        _still_served(handle, peer)
    assert not errors


def test_a_seek_to_a_message_id_below_minus_one(handle: ServeHandle, errors: ServerLog) -> None:
    with RawPeer(handle.url) as peer:
        topic = _topic()
        _subscribe(peer, topic)
        mid = api.MessageIdData(ledgerId=BELOW_MINUS_ONE, entryId=BELOW_MINUS_ONE)
        peer.send(T(type=T.SEEK, seek=api.CommandSeek(consumer_id=1, request_id=9, message_id=mid)))
        answer = peer.read_type(T.ERROR)
        assert answer.error.request_id == 9 and answer.error.error == ServerError.NotAllowedError
        _still_served(handle, peer)
    assert not errors


def test_a_redelivery_of_a_message_id_below_minus_one(handle: ServeHandle, errors: ServerLog) -> None:
    with RawPeer(handle.url) as peer:
        topic = _topic()
        _subscribe(peer, topic)
        body = api.CommandRedeliverUnacknowledgedMessages(
            consumer_id=1, message_ids=[api.MessageIdData(ledgerId=BELOW_MINUS_ONE, entryId=0)]
        )
        peer.send(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=body))
        _still_served(handle, peer)  # no answer: the protocol has none
    assert not errors


def test_a_reader_starting_below_minus_one(handle: ServeHandle, errors: ServerLog) -> None:
    with RawPeer(handle.url) as peer:
        body = api.CommandSubscribe(
            topic=_topic(),
            subscription="reader",
            subType=api.CommandSubscribe.Exclusive,
            consumer_id=1,
            request_id=7,
            durable=False,
            start_message_id=api.MessageIdData(ledgerId=BELOW_MINUS_ONE, entryId=BELOW_MINUS_ONE),
        )
        peer.send(T(type=T.SUBSCRIBE, subscribe=body))
        assert peer.read_type(T.ERROR).error.error == ServerError.NotAllowedError
        _still_served(handle, peer)
    assert not errors


def _transaction(peer: RawPeer, topic: str) -> tuple[int, int]:
    peer.send(T(type=T.NEW_TXN, newTxn=api.CommandNewTxn(request_id=20, txn_ttl_seconds=60_000, tc_id=0)))
    new = peer.read_type(T.NEW_TXN_RESPONSE).newTxnResponse
    txn = (new.txnid_most_bits, new.txnid_least_bits)
    body = api.CommandAddSubscriptionToTxn(
        request_id=21,
        txnid_most_bits=txn[0],
        txnid_least_bits=txn[1],
        subscription=[api.Subscription(topic=topic, subscription="sub")],
    )
    peer.send(T(type=T.ADD_SUBSCRIPTION_TO_TXN, addSubscriptionToTxn=body))
    assert not peer.read_type(T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE).addSubscriptionToTxnResponse.HasField("error")
    return txn


def test_a_transactional_ack_of_entry_minus_one(handle: ServeHandle, errors: ServerLog) -> None:
    with RawPeer(handle.url) as peer:
        topic = _topic()
        _producer(peer, topic)
        _subscribe(peer, topic)
        for i in range(3):
            _send(peer, i)  # ledger 1 is open, past the mark-delete position
        most, least = _transaction(peer, topic)
        mid = api.MessageIdData(ledgerId=1, entryId=U64)
        peer.send(_ack([mid], ack_type=0, request_id=9, txnid_most_bits=most, txnid_least_bits=least))
        answer = peer.read_type(T.ACK_RESPONSE).ackResponse
        assert answer.error == ServerError.NotAllowedError
        _still_served(handle, peer)
    assert not errors


@pytest.mark.parametrize(
    ("ledger", "entry", "ack_type"),
    [(1, 5, 0), (1, 5, 1), (0, 2, 0), (0, 2, 1), ((1 << 63) - 1, 0, 0)],
    ids=[
        "beyond-last-individual",
        "beyond-last-cumulative",
        "past-ledger-end-individual",
        "past-ledger-end-cumulative",
        "far-ledger",
    ],
)
def test_an_ack_the_cursor_would_refuse_fails_alone(
    handle: ServeHandle, errors: ServerLog, ledger: int, entry: int, ack_type: int
) -> None:
    # Once the pending ack had taken it, the cursor's refusal reloaded the topic: every producer
    # and consumer on it was sent away (CLOSE_PRODUCER / CLOSE_CONSUMER).
    with RawPeer(handle.url) as peer:
        topic = _topic()
        _producer(peer, topic)
        _subscribe(peer, topic)
        for i in range(3):
            _send(peer, i)  # ledger 0 holds entries 0 and 1; ledger 1 entry 0
        mid = api.MessageIdData(ledgerId=ledger, entryId=entry)
        peer.send(_ack([mid], ack_type=ack_type, request_id=9))
        answer = peer.read_type(T.ACK_RESPONSE).ackResponse
        assert answer.error == ServerError.NotAllowedError
        _send(peer, 3)  # the producer was not sent away
        peer.send(T(type=T.PING, ping=api.CommandPing()))
        while (frame := peer.read()) is not None and frame.type != T.PONG:
            assert frame.type not in (T.CLOSE_PRODUCER, T.CLOSE_CONSUMER)
        _still_served(handle, peer)
    assert not errors


def test_a_batch_of_no_messages_is_refused_and_a_seek_into_it_cannot_follow(
    handle: ServeHandle, errors: ServerLog
) -> None:
    """Found by the structure-aware fuzzer (stop 41): a SEND whose metadata says
    ``num_messages_in_batch: 0`` with an empty payload was stored as a batch of size 0, and a SEEK
    to it with an ack set ended its connection (the cursor's reset needs a batch of at least one)."""
    with RawPeer(handle.url) as peer:
        topic = _topic()
        _producer(peer, topic)
        _subscribe(peer, topic, sub_type=api.CommandSubscribe.Exclusive)
        peer.send(
            T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=0)),
            message_bytes(b"", num_messages_in_batch=0),
        )
        refused = peer.read_type(T.SEND_ERROR).send_error
        assert refused.error == ServerError.UnknownError and "num_messages_in_batch is 0" in refused.message
        mid = _send(peer, sequence_id=1)
        seek = api.CommandSeek(
            consumer_id=1,
            request_id=9,
            message_id=api.MessageIdData(ledgerId=mid.ledgerId, entryId=mid.entryId, ack_set=[0]),
        )
        peer.send(T(type=T.SEEK, seek=seek))
        assert peer.read_type(T.SUCCESS).success.request_id == 9
        _still_served(handle, peer)
    assert not errors


@pytest.mark.parametrize("version", [b"", b"\x01", b"\xff" * 2000])
def test_get_schema_with_a_version_that_is_not_a_long(handle: ServeHandle, errors: ServerLog, version: bytes) -> None:
    with RawPeer(handle.url) as peer:
        body = api.CommandGetSchema(request_id=7, topic=_topic(), schema_version=version)
        peer.send(T(type=T.GET_SCHEMA, getSchema=body))
        answer = peer.read_type(T.GET_SCHEMA_RESPONSE).getSchemaResponse
        assert answer.request_id == 7 and answer.error_code == ServerError.NotAllowedError
        _still_served(handle, peer)
    assert not errors


def test_a_handler_that_raises_closes_its_connection_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A bug in a handler, whatever input reached it: the request gets UnknownError, this
    # connection closes, the failure is logged once with the peer, and the others are served.
    def broken(self: Schemas, *_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Schemas, "get_schema", broken)
    caplog.set_level(logging.ERROR, logger="runners.serve")
    running = start()
    try:
        with RawPeer(running.url) as bystander, RawPeer(running.url) as peer:
            topic = _topic()
            _producer(bystander, topic)
            peer.send(T(type=T.GET_SCHEMA, getSchema=api.CommandGetSchema(request_id=7, topic=topic)))
            answer = peer.read_type(T.GET_SCHEMA_RESPONSE).getSchemaResponse
            assert answer.error_code == ServerError.UnknownError
            assert peer.closed_by_server()
            _send(bystander)
            _still_served(running, bystander)
        failures = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(failures) == 1 and "internal error handling GET_SCHEMA" in failures[0].getMessage()
        assert failures[0].exc_info is not None
    finally:
        running.stop()
        finish(running)
