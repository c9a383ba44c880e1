"""Each peer is bounded: what it may hold of the server, and for how long, is a broker.conf key.

A connection that never completes its handshake, or answers no PING, is closed after
``keepAliveIntervalSeconds``; connections past ``brokerMaxConnections`` (``...PerIp``) are closed as
they come; a consumer whose connection is not writable gets nothing more until it drains, and one
holding ``maxUnackedMessagesPerConsumer`` unacknowledged messages nothing more until it is down to
half; a peer that does not read is dropped past ``txnmodelConnectionMaxPendingOutputBytes``.
Every test also checks that what was held back arrives in the end: nothing is lost.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

from runners.serve import ServeHandle, finish, start
from spec.config import Config
from spec.frame import encode_command
from spec.pb import PulsarApi_pb2 as api
from tests.engine.serve.conftest import unique
from tests.engine.serve.rawpeer import RawPeer, address, message_bytes

T = api.BaseCommand


@contextlib.contextmanager
def serving(**keys: object) -> Iterator[ServeHandle]:
    handle = start(config=Config(transaction_coordinator_enabled=True).with_overrides(keys))
    try:
        yield handle
    finally:
        handle.stop()
        finish(handle)


def _connections(handle: ServeHandle) -> int:
    return int(handle.call(lambda server: len(server.network.connections())))


def _topic() -> str:
    return f"persistent://public/default/{unique('limits')}"


def _produce(url: str, topic: str, count: int, size: int = 100) -> None:
    with RawPeer(url) as peer:
        peer.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=1, request_id=1)))
        assert peer.read_type(T.PRODUCER_SUCCESS)
        for i in range(count):
            send = T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=i))
            peer.send(send, message_bytes(i.to_bytes(4, "big") + b"x" * size))
        for _ in range(count):
            assert peer.read_type(T.SEND_RECEIPT)


def _consumer(url: str, topic: str, permits: int, sub_type: int = api.CommandSubscribe.Shared) -> RawPeer:
    peer = RawPeer(url)
    body = api.CommandSubscribe(
        topic=topic,
        subscription="sub",
        subType=sub_type,
        consumer_id=1,
        request_id=2,
        initialPosition=api.CommandSubscribe.Earliest,
    )
    peer.send(T(type=T.SUBSCRIBE, subscribe=body))
    assert peer.read_type(T.SUCCESS)
    peer.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=permits)))
    return peer


def _messages(peer: RawPeer, quiet_s: float) -> list[api.CommandMessage]:
    """The MESSAGE frames that arrive until none has for ``quiet_s``."""
    out = []
    with contextlib.suppress(TimeoutError):
        while (frame := peer.read(quiet_s)) is not None:
            if frame.type == T.MESSAGE:
                out.append(frame.message)
    return out


def test_no_connect_within_the_keep_alive_interval_closes_the_connection() -> None:
    with serving(keepAliveIntervalSeconds=1) as handle:
        silent = RawPeer(handle.url, connect=False)
        slow = RawPeer(handle.url, connect=False)
        slow.send_bytes(encode_command(T(type=T.CONNECT, connect=api.CommandConnect(client_version="x")))[:5])
        assert silent.closed_by_server(timeout_s=10) and slow.closed_by_server(timeout_s=10)
        silent.close()
        slow.close()
        assert _connections(handle) == 0


def test_a_peer_that_answers_no_ping_is_closed_and_one_that_does_stays() -> None:
    with serving(keepAliveIntervalSeconds=1) as handle:
        deaf = RawPeer(handle.url)
        alive = RawPeer(handle.url)
        pings = 0
        deadline = time.monotonic() + 30
        while pings < 3 and time.monotonic() < deadline:  # three intervals, each PING answered
            frame = alive.read(5)
            if frame is not None and frame.type == T.PING:
                pings += 1
                alive.send(T(type=T.PONG, pong=api.CommandPong()))
        assert pings == 3
        assert deaf.closed_by_server(timeout_s=10)
        alive.send(T(type=T.PING, ping=api.CommandPing()))
        assert alive.read_type(T.PONG)
        deaf.close()
        alive.close()


def test_connections_past_the_cap_are_closed_as_they_come() -> None:
    with serving(brokerMaxConnections=3) as handle:
        peers = [RawPeer(handle.url) for _ in range(3)]
        extra = RawPeer(handle.url, connect=False)
        assert extra.closed_by_server(timeout_s=5)
        extra.close()
        peers.pop().close()
        deadline = time.monotonic() + 10
        while _connections(handle) > 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        with RawPeer(handle.url) as again:  # a place was freed
            again.send(T(type=T.PING, ping=api.CommandPing()))
            assert again.read_type(T.PONG)
        for peer in peers:
            peer.close()


def test_connections_past_the_cap_per_address_are_closed() -> None:
    with serving(brokerMaxConnectionsPerIp=2) as handle:
        peers = [RawPeer(handle.url) for _ in range(2)]
        extra = RawPeer(handle.url, connect=False)
        assert extra.closed_by_server(timeout_s=5)
        for peer in [*peers, extra]:
            peer.close()


def test_a_consumer_that_does_not_read_gets_no_more_than_its_connection_holds() -> None:
    # 10 MB to dispatch: more than the kernel's socket buffers take on loopback (a few MB), to a
    # connection whose high water mark is 64 KiB.
    size, count = 1000, 10_000
    with serving() as handle:
        topic = _topic()
        _produce(handle.url, topic, count, size)
        hoarder = _consumer(handle.url, topic, permits=1_000_000)
        time.sleep(1.0)

        def pending(server: object) -> int:
            return max(conn.pending_output for conn in server.network.connections())  # type: ignore[attr-defined]

        high = Config().pulsar_channel_write_buffer_high_water_mark
        assert handle.call(pending) <= high + size + 200  # one message may cross the mark
        ids = {bytes(m.message_id.SerializeToString()) for m in _messages(hoarder, quiet_s=2)}
        assert len(ids) == count  # held back, never lost
        hoarder.close()


def test_a_consumer_holding_max_unacked_messages_gets_no_more_until_down_to_half() -> None:
    with serving(maxUnackedMessagesPerConsumer=10) as handle:
        topic = _topic()
        _produce(handle.url, topic, 30)
        consumer = _consumer(handle.url, topic, permits=1000)
        first = _messages(consumer, quiet_s=0.5)
        assert len(first) == 10
        ack = api.CommandAck(consumer_id=1, ack_type=0, message_id=[m.message_id for m in first[:4]])
        consumer.send(T(type=T.ACK, ack=ack))
        assert _messages(consumer, quiet_s=0.5) == []  # 6 held: not yet down to half
        ack = api.CommandAck(consumer_id=1, ack_type=0, message_id=[first[4].message_id])
        consumer.send(T(type=T.ACK, ack=ack))
        assert len(_messages(consumer, quiet_s=0.5)) == 5  # 5 held: up to 10 again
        consumer.close()


def test_a_peer_that_does_not_read_is_dropped() -> None:
    limit = 256 * 1024
    with serving(txnmodelConnectionMaxPendingOutputBytes=limit) as handle:
        flooder = RawPeer(handle.url, receive_buffer=4096)
        ping = encode_command(T(type=T.PING, ping=api.CommandPing()))
        dropped = False
        try:
            for _ in range(200):  # up to 2,000,000 PINGs, never reading a PONG
                flooder.send_bytes(ping * 10_000)
        except OSError:
            dropped = True
        dropped = dropped or flooder.closed_by_server(timeout_s=10)
        assert dropped
        flooder.close()
        with RawPeer(handle.url) as other:
            other.send(T(type=T.PING, ping=api.CommandPing()))
            assert other.read_type(T.PONG)


def test_a_refused_connection_leaves_the_listener_serving() -> None:
    # A burst of connections far past the cap: each is closed, and the loop does not spin on them.
    with serving(brokerMaxConnections=1) as handle:
        keeper = RawPeer(handle.url)
        for _ in range(200):
            with contextlib.suppress(OSError):
                socket.create_connection(address(handle.url), timeout=5).close()
        keeper.send(T(type=T.PING, ping=api.CommandPing()))
        assert keeper.read_type(T.PONG)
        keeper.close()
