"""The project's transactional wire client as a Pulsar user expects it: it follows LOOKUP redirects
and partitioned-topic metadata, its timeouts name the command and what the silence means, a
transaction is a context manager (commit on success, abort on an exception), it spells what it
shares with the official client as the official client does, and its compressed messages are the
official client's.  Brokers are ``txnmodel serve`` on loopback, or a few lines of fake broker for
what serve never does (redirect, stay silent).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pulsar
import pytest

from runners.serve import ServeHandle, finish, start
from spec.config import Config
from spec.frame import Frame, encode_command, parse_frame
from spec.pb import PulsarApi_pb2 as api
from txnclient.client import WireClient, WireError, WireTimeout

T = api.BaseCommand
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture(scope="module")
def served() -> Iterator[ServeHandle]:
    handle = start(config=Config(transaction_coordinator_enabled=True))
    try:
        yield handle
    finally:
        handle.stop()
        finish(handle)


def _topic(name: str) -> str:
    import uuid

    return f"persistent://public/default/{name}-{uuid.uuid4().hex[:8]}"


class FakeBroker:
    """Accepts connections, answers CONNECT, and hands every other command to ``answer``
    (which returns the commands to send back, or nothing)."""

    def __init__(self, answer: Callable[[FakeBroker, api.BaseCommand], list[api.BaseCommand]]) -> None:
        self.answer = answer
        self.seen: list[api.BaseCommand] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"pulsar://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        buffer = bytearray()
        with sock:
            while True:
                parsed = parse_frame(buffer)
                if parsed is None:
                    try:
                        chunk = sock.recv(65536)
                    except OSError:
                        return
                    if not chunk:
                        return
                    buffer += chunk
                    continue
                frame, used = parsed
                del buffer[:used]
                self._one(sock, frame)

    def _one(self, sock: socket.socket, frame: Frame) -> None:
        cmd = frame.command
        self.seen.append(cmd)
        if cmd.type == T.CONNECT:
            connected = api.CommandConnected(server_version="fake", protocol_version=19)
            sock.sendall(encode_command(T(type=T.CONNECTED, connected=connected)))
            return
        for reply in self.answer(self, cmd):
            sock.sendall(encode_command(reply))


def _metadata(cmd: api.BaseCommand) -> list[api.BaseCommand]:
    body = api.CommandPartitionedTopicMetadataResponse(
        request_id=cmd.partitionMetadata.request_id,
        partitions=0,
        response=api.CommandPartitionedTopicMetadataResponse.Success,
    )
    return [T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=body)]


def _lookup(cmd: api.BaseCommand, url: str, kind: int, *, authoritative: bool = False) -> list[api.BaseCommand]:
    body = api.CommandLookupTopicResponse(
        request_id=cmd.lookupTopic.request_id, brokerServiceUrl=url, response=kind, authoritative=authoritative
    )
    return [T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=body)]


def test_a_lookup_redirect_is_followed_to_the_owning_broker() -> None:
    def owner(broker: FakeBroker, cmd: api.BaseCommand) -> list[api.BaseCommand]:
        if cmd.type == T.LOOKUP:
            return _lookup(cmd, broker.url, api.CommandLookupTopicResponse.Connect, authoritative=True)
        if cmd.type == T.PRODUCER:
            success = api.CommandProducerSuccess(request_id=cmd.producer.request_id, producer_name="on-b")
            return [T(type=T.PRODUCER_SUCCESS, producer_success=success)]
        return []

    b = FakeBroker(owner)

    def front(broker: FakeBroker, cmd: api.BaseCommand) -> list[api.BaseCommand]:
        if cmd.type == T.PARTITIONED_METADATA:
            return _metadata(cmd)
        if cmd.type == T.LOOKUP:
            return _lookup(cmd, b.url, api.CommandLookupTopicResponse.Redirect, authoritative=True)
        return []

    a = FakeBroker(front)
    try:
        with WireClient(a.url, operation_timeout_seconds=5) as client:
            producer = client.create_producer("persistent://public/default/t")
            assert producer.producer_name() == "on-b"
        assert [c.type for c in a.seen] == [T.CONNECT, T.PARTITIONED_METADATA, T.LOOKUP]
        lookups = [c.lookupTopic for c in b.seen if c.type == T.LOOKUP]
        assert len(lookups) == 1 and lookups[0].authoritative  # the redirect said so
        assert [c.producer.topic for c in b.seen if c.type == T.PRODUCER] == ["persistent://public/default/t"]
    finally:
        a.close()
        b.close()


def test_a_timeout_names_the_command_and_what_the_silence_means() -> None:
    def no_transactions(broker: FakeBroker, cmd: api.BaseCommand) -> list[api.BaseCommand]:
        if cmd.type == T.LOOKUP:
            return _lookup(cmd, broker.url, api.CommandLookupTopicResponse.Connect)
        return []  # TC_CLIENT_CONNECT: never answered

    broker = FakeBroker(no_transactions)
    try:
        with WireClient(broker.url, operation_timeout_seconds=0.3) as client, pytest.raises(WireTimeout) as caught:
            client.new_transaction()
        assert str(caught.value) == (
            "no answer to TC_CLIENT_CONNECT_REQUEST in 0.3 s: the broker may not support transactions "
            "(transactionCoordinatorEnabled)"
        )
    finally:
        broker.close()


def test_partitioned_topics_are_produced_and_consumed_per_partition(served: ServeHandle) -> None:
    topic = _topic("parted")
    served.call(lambda server: server.topics.create_topic(topic, 3))
    with WireClient(served.url, operation_timeout_seconds=5) as client:
        consumer = client.subscribe(topic, "sub", consumer_type="Shared", initial_position="Earliest")
        producer = client.create_producer(topic)
        ids = [producer.send(f"m{i}".encode(), partition_key=None if i % 2 else f"k{i}") for i in range(12)]
        assert {mid.partition() for mid in ids} == {0, 1, 2}  # keyless ones go round robin
        got = [consumer.receive(timeout_millis=3000) for _ in range(12)]
        assert sorted(m.data() for m in got if m is not None) == sorted(f"m{i}".encode() for i in range(12))
        for message in got:
            assert message is not None
            consumer.acknowledge(message)
        assert consumer.receive(timeout_millis=200) is None


def test_a_transaction_commits_when_its_block_ends_and_aborts_when_it_raises(served: ServeHandle) -> None:
    topic = _topic("ctx")
    with WireClient(served.url, operation_timeout_seconds=5) as client:
        consumer = client.subscribe(topic, "sub", consumer_type="Shared", initial_position="Earliest")
        producer = client.create_producer(topic)
        with client.new_transaction(timeout_ms=30_000) as txn:
            producer.send(b"committed", txn=txn)
        assert txn.ended
        with pytest.raises(RuntimeError, match="the block failed"), client.new_transaction(timeout_ms=30_000) as txn:
            producer.send(b"aborted", txn=txn)
            raise RuntimeError("the block failed")
        assert txn.ended
        producer.send(b"after")
        received = [consumer.receive(timeout_millis=3000) for _ in range(2)]
        assert [m.data() for m in received if m is not None] == [b"committed", b"after"]
        assert consumer.receive(timeout_millis=300) is None


def test_compressed_messages_cross_between_this_client_and_the_official_one(served: ServeHandle) -> None:
    topic = _topic("codec")
    official = pulsar.Client(served.url, operation_timeout_seconds=5, logger=QUIET)
    try:
        reader = official.subscribe(topic, "official", initial_position=pulsar.InitialPosition.Earliest)
        with WireClient(served.url, operation_timeout_seconds=5) as client:
            mine = client.subscribe(topic, "mine", initial_position="Earliest")
            for codec in (api.LZ4, api.ZLIB, api.ZSTD, api.SNAPPY):
                client.create_producer(topic, compression_type=codec).send(b"wire " * 50, properties={"c": str(codec)})
            theirs = official.create_producer(
                topic, compression_type=pulsar.CompressionType.ZSTD, batching_enabled=True
            )
            theirs.send(b"official " * 50, partition_key="k")
            assert [reader.receive(timeout_millis=3000).data() for _ in range(5)] == [b"wire " * 50] * 4 + [
                b"official " * 50
            ]
            got = [mine.receive(timeout_millis=3000) for _ in range(5)]
            assert [m.data() for m in got if m is not None] == [b"wire " * 50] * 4 + [b"official " * 50]
            assert got[0] is not None and got[0].properties() == {"c": str(api.LZ4)}
            assert got[4] is not None and got[4].partition_key() == "k"
    finally:
        official.close()


def test_a_consumer_the_broker_sends_away_hands_out_nothing_it_had_queued() -> None:
    """Issue 28: a topic unload sends the consumer away (CLOSE_CONSUMER); what the broker had pushed
    to it goes back to the subscription, another consumer acknowledges it in a transaction that
    commits, and the first must not then hand out its queued copy (a Pulsar client clears its
    receiver queue before it subscribes again).  Serve's faults on demand only, one topic: the unload
    hits it, and the PONG after it orders the CLOSE_CONSUMER before the receive."""
    handle = start(config=Config(transaction_coordinator_enabled=True), seed=28, faults={})
    topic = _topic("sent-away")
    try:
        with WireClient(handle.url, operation_timeout_seconds=5) as first, WireClient(handle.url) as second:
            held = first.subscribe(topic, "sub", consumer_type="Shared", initial_position="Earliest")
            producer = first.create_producer(topic)
            for i in range(3):
                producer.send(f"m{i}".encode())
            taken = held.receive(timeout_millis=3000)  # the other two wait unpacked, in its queue
            assert taken is not None and not held.closed_by_broker
            assert handle.inject("topic_unload")
            first.ping()
            assert held.closed_by_broker
            deadline = time.monotonic() + 30
            while True:  # the topic reloads after the unload: until then a subscribe is refused
                try:
                    other = second.subscribe(topic, "sub", consumer_type="Shared", initial_position="Earliest")
                    break
                except WireError:
                    assert time.monotonic() < deadline, "the unloaded topic did not reload in 30 s"
                    time.sleep(0.05)
            with second.new_transaction(timeout_ms=30_000) as txn:
                txn.use_subscription(topic, "sub")
                for _ in range(3):
                    message = other.receive(timeout_millis=3000)
                    assert message is not None
                    other.acknowledge(message, txn=txn)
            assert held.receive(timeout_millis=300) is None
    finally:
        handle.stop()
        finish(handle)
