"""The socket is untrusted input: bad frames close that connection (or get Pulsar's error where
the protocol has one) and every other client is served on, losing nothing acknowledged."""

from __future__ import annotations

import random
import socket
import struct
import threading
import time

import pulsar
import pytest

from runners.serve import serve
from spec.errors import ServerError
from spec.frame import encode_command, encode_frame, encode_message, parse_frame
from spec.pb import PulsarApi_pb2 as api
from tests.engine.serve.conftest import CONFIG, drain, new_client, unique
from txnclient.client import WireClient

T = api.BaseCommand
CONNECT = encode_command(T(type=T.CONNECT, connect=api.CommandConnect(client_version="raw", protocol_version=19)))


def _address(url: str) -> tuple[str, int]:
    host, port = url[len("pulsar://") :].rsplit(":", 1)
    return host, int(port)


def _raw(url: str) -> socket.socket:
    sock = socket.create_connection(_address(url), timeout=5)
    return sock


def _closed_by_server(sock: socket.socket, timeout: float = 5.0) -> bool:
    """Read until the server closes (True) or the timeout passes (False)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def _read_frame(sock: socket.socket) -> api.BaseCommand:
    buffer = b""
    while (parsed := parse_frame(buffer)) is None:
        chunk = sock.recv(4096)
        assert chunk, "closed before a frame arrived"
        buffer += chunk
    return parsed[0].command


@pytest.mark.parametrize(
    "garbage",
    [
        pytest.param(b"\x00\x00\x00\x05\x00\x00\x00\x09\x08", id="command-longer-than-frame"),
        pytest.param(struct.pack(">II", 6, 2) + b"\x08\x01", id="unknown-command-type"),
        pytest.param(struct.pack(">II", 15, 11) + b"\x08" + b"\xff" * 10, id="huge-varint"),
        pytest.param(struct.pack(">I", 0x7FFFFFFF), id="frame-over-max-message-size"),
        pytest.param(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", id="http"),
    ],
)
def test_garbage_after_connect_closes_only_that_connection(url: str, garbage: bytes) -> None:
    sock = _raw(url)
    sock.sendall(CONNECT)
    assert _read_frame(sock).type == T.CONNECTED
    sock.sendall(garbage)
    assert _closed_by_server(sock)
    sock.close()
    with WireClient(url) as wire:  # the server serves on
        assert wire.create_producer(f"persistent://public/default/{unique()}").send(b"ok")


def test_a_command_before_connect_closes_the_connection(url: str) -> None:
    sock = _raw(url)
    sock.sendall(encode_command(T(type=T.PING, ping=api.CommandPing())))
    assert _closed_by_server(sock)
    sock.close()


def test_a_wrong_checksum_gets_send_error_checksum(url: str) -> None:
    sock = _raw(url)
    sock.sendall(CONNECT)
    _read_frame(sock)
    topic = f"persistent://public/default/{unique()}"
    sock.sendall(
        encode_command(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=1, request_id=1)))
    )
    assert _read_frame(sock).type == T.PRODUCER_SUCCESS
    message = bytearray(encode_message(api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"body"))
    message[-1] ^= 0x55
    sock.sendall(encode_frame(T(type=T.SEND, send=api.CommandSend(producer_id=1, sequence_id=0)), bytes(message)))
    answer = _read_frame(sock)
    assert answer.type == T.SEND_ERROR and answer.send_error.error == ServerError.ChecksumError
    sock.close()


def test_an_unsupported_request_gets_an_error_not_a_close(url: str) -> None:
    sock = _raw(url)
    sock.sendall(CONNECT)
    _read_frame(sock)
    sock.sendall(
        encode_command(T(type=T.CONSUMER_STATS, consumerStats=api.CommandConsumerStats(request_id=7, consumer_id=1)))
    )
    answer = _read_frame(sock)
    assert answer.type == T.ERROR and answer.error.request_id == 7 and answer.error.error == ServerError.NotAllowedError
    sock.close()


def test_many_connections_some_sending_garbage_while_others_produce_and_consume() -> None:
    # Bounded: 40 garbage connections over at most a few seconds, on loopback, beside one real
    # producer and consumer whose every acknowledged message must arrive.
    rng = random.Random(7)
    with serve(config=CONFIG) as url:
        stop = threading.Event()
        opened = [0]

        def vandal() -> None:
            deadline = time.monotonic() + 8
            while not stop.is_set() and opened[0] < 40 and time.monotonic() < deadline:
                try:
                    sock = socket.create_connection(_address(url), timeout=2)
                except OSError:
                    continue
                opened[0] += 1
                try:
                    if rng.random() < 0.5:
                        sock.sendall(CONNECT)
                    sock.sendall(rng.randbytes(rng.randint(1, 300)))
                    _closed_by_server(sock, timeout=0.3)
                except OSError:
                    pass
                finally:
                    sock.close()

        vandals = [threading.Thread(target=vandal) for _ in range(4)]
        for thread in vandals:
            thread.start()
        client = new_client(url)
        topic = unique()
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=2)
        acked: list[int] = []
        for i in range(200):
            producer.send_async(
                f"m{i}".encode(), lambda res, _mid, i=i: acked.append(i) if res == pulsar.Result.Ok else None
            )
        producer.flush()
        received = {int(m.data()[1:]) for m in drain(consumer, timeout_ms=800)}
        stop.set()
        for thread in vandals:
            thread.join(timeout=15)
        client.close()
    assert opened[0] > 0
    assert sorted(acked) == list(range(200))
    assert received == set(acked)
