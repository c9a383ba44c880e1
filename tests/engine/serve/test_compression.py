"""Compressed messages through ``txnmodel serve``: the official client produces and consumes with
each of Pulsar's codecs, batched and not, on the memory and the file ledger (a restarted broker
reads its compressed batches back); the codec module reads and writes what the official client does.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pulsar
import pytest

from runners.serve import serve
from spec.compression import MAX_UNCOMPRESSED_SIZE, CorruptPayload, compress, decompress
from spec.errors import ServerError
from spec.frame import Frame, encode_command, encode_frame, encode_message, parse_frame
from spec.pb import PulsarApi_pb2 as api
from spec.topic_entry import decode_frame, decode_topic_entry, encode_message_entry
from tests.engine.serve.conftest import CONFIG, drain, new_client, unique

T = api.BaseCommand
CODECS = {
    "LZ4": (pulsar.CompressionType.LZ4, api.LZ4),
    "ZLib": (pulsar.CompressionType.ZLib, api.ZLIB),
    "ZSTD": (pulsar.CompressionType.ZSTD, api.ZSTD),
    "SNAPPY": (pulsar.CompressionType.SNAPPY, api.SNAPPY),
}
# Compressible, and long enough that every codec makes it shorter.
BODY = b"order placed; order paid; order shipped; " * 20


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("batched", [False, True], ids=["single", "batched"])
def test_the_official_client_produces_and_consumes_each_codec(client: pulsar.Client, codec: str, batched: bool) -> None:
    topic = unique()
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(
        topic,
        compression_type=CODECS[codec][0],
        batching_enabled=batched,
        batching_max_publish_delay_ms=5,
        send_timeout_millis=5000,
    )
    results: list[pulsar.Result] = []
    for i in range(40):
        producer.send_async(BODY + str(i).encode(), lambda res, _mid: results.append(res), partition_key=f"k{i % 3}")
    producer.flush()
    assert results == [pulsar.Result.Ok] * 40
    got = drain(consumer)
    assert sorted(m.data() for m in got) == sorted(BODY + str(i).encode() for i in range(40))
    assert {m.partition_key() for m in got} == {"k0", "k1", "k2"}
    if batched:
        assert any(m.message_id().batch_index() > 0 for m in got)


@pytest.mark.parametrize("codec", list(CODECS))
def test_key_shared_routes_the_keys_inside_a_compressed_batch(client: pulsar.Client, codec: str) -> None:
    topic = unique()
    consumers = [client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared) for _ in range(2)]
    producer = client.create_producer(
        topic,
        compression_type=CODECS[codec][0],
        batching_enabled=True,
        batching_type=pulsar.BatchingType.KeyBased,
        batching_max_publish_delay_ms=5,
    )
    for i in range(60):
        producer.send_async(f"{i}".encode(), None, partition_key=f"key-{i % 6}")
    producer.flush()
    seen: dict[str, list[int]] = {}
    owner: dict[str, int] = {}
    for index, consumer in enumerate(consumers):
        for message in drain(consumer):
            key = message.partition_key()
            seen.setdefault(key, []).append(int(message.data()))
            assert owner.setdefault(key, index) == index  # one consumer per key
    assert sorted(seen) == [f"key-{k}" for k in range(6)]
    assert all(values == sorted(values) for values in seen.values())


def test_compressed_batches_come_back_after_a_restart_on_the_file_ledger(tmp_path: Path) -> None:
    topic = unique()
    sent: list[bytes] = []
    with serve(config=CONFIG, ledger="file", data=tmp_path) as url:
        client = new_client(url)
        try:
            for codec in CODECS.values():
                producer = client.create_producer(
                    topic, compression_type=codec[0], batching_enabled=True, batching_max_publish_delay_ms=5
                )
                for i in range(10):
                    body = BODY + f"{codec[1]}-{i}".encode()
                    producer.send_async(body, None, partition_key=f"k{i % 2}")
                    sent.append(body)
                producer.flush()
                producer.close()
        finally:
            client.close()
    with serve(config=CONFIG, ledger="file", data=tmp_path) as url:
        client = new_client(url)
        try:
            consumer = client.subscribe(topic, "after-restart", initial_position=pulsar.InitialPosition.Earliest)
            assert [m.data() for m in drain(consumer)] == sent
        finally:
            client.close()


def test_a_stored_compressed_entry_decodes_uncompressed() -> None:
    inner = api.SingleMessageMetadata(payload_size=3, partition_key="k")
    raw = inner.SerializeToString()
    batch = len(raw).to_bytes(4, "big") + raw + b"abc"
    for value in (api.LZ4, api.ZLIB, api.ZSTD, api.SNAPPY):
        meta = api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=1)
        meta.compression = value  # type: ignore[assignment]
        meta.uncompressed_size = len(batch)
        entry = encode_message_entry(meta, compress(value, batch))
        decoded = decode_topic_entry(entry)
        assert decoded.batch is not None and decoded.batch[0].payload == b"abc"
        assert decoded.batch[0].partition_key == "k"
        assert decode_frame(entry).compressed


def test_the_codecs_refuse_what_is_not_their_payload() -> None:
    for value in (api.LZ4, api.ZLIB, api.ZSTD, api.SNAPPY):
        packed = compress(value, BODY)
        assert decompress(value, packed, len(BODY)) == BODY
        for size in (len(BODY) - 1, len(BODY) + 1):
            with pytest.raises(CorruptPayload):
                decompress(value, packed, size)
        with pytest.raises(CorruptPayload):
            decompress(value, b"\xff" * 12, 100)
        with pytest.raises(CorruptPayload):
            decompress(value, packed, MAX_UNCOMPRESSED_SIZE + 1)
    with pytest.raises(CorruptPayload, match="codec 9"):
        decompress(9, b"x", 1)


def test_what_the_codecs_write_the_official_client_reads(url: str) -> None:
    """The bytes spec.compression writes (the server never compresses, but a test client and the
    project's own client do) are what the official client's codecs read: sent raw over the wire
    and received through pulsar-client."""
    topic = f"persistent://public/default/{unique()}"
    client = new_client(url)
    try:
        consumer = client.subscribe(topic, "sub")
        with _Raw(url) as raw:
            raw.request(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=1, request_id=1)))
            for sequence, value in enumerate((api.LZ4, api.ZLIB, api.ZSTD, api.SNAPPY)):
                meta = api.MessageMetadata(producer_name="raw", sequence_id=sequence, publish_time=int(time.time()))
                meta.compression = value  # type: ignore[assignment]
                meta.uncompressed_size = len(BODY)
                send = api.CommandSend(producer_id=1, sequence_id=sequence)
                raw.send(encode_frame(T(type=T.SEND, send=send), encode_message(meta, compress(value, BODY))))
                assert raw.read().type == T.SEND_RECEIPT
        assert [consumer.receive(timeout_millis=3000).data() for _ in range(4)] == [BODY] * 4
    finally:
        client.close()


def test_a_compressed_batch_is_delivered_as_the_producer_sent_it(client: pulsar.Client, url: str) -> None:
    """As Pulsar's broker does: the entry is stored and dispatched compressed; the consumer's
    client decompresses."""
    topic = f"persistent://public/default/{unique()}"
    producer = client.create_producer(
        topic, compression_type=pulsar.CompressionType.LZ4, batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(5):
        producer.send_async(BODY + bytes([48 + i]), None)
    producer.flush()
    with _Raw(url) as raw:
        subscribe = api.CommandSubscribe(
            topic=topic,
            subscription="raw",
            subType=api.CommandSubscribe.Shared,
            consumer_id=1,
            request_id=2,
            initialPosition=api.CommandSubscribe.Earliest,
        )
        raw.request(T(type=T.SUBSCRIBE, subscribe=subscribe))
        raw.send(encode_command(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=1, messagePermits=100))))
        frame = raw.read_frame()
        assert frame.command.type == T.MESSAGE and frame.message is not None
        meta = frame.message.metadata
        assert meta.compression == api.LZ4 and meta.num_messages_in_batch == 5
        assert len(frame.message.payload) < meta.uncompressed_size
        batch = decompress(api.LZ4, frame.message.payload, meta.uncompressed_size)
        assert batch.count(BODY) == 5


def test_a_corrupt_compressed_payload_fails_that_send_with_checksum_error(url: str) -> None:
    topic = f"persistent://public/default/{unique()}"
    with _Raw(url) as raw:
        raw.request(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=1, request_id=1)))
        meta = api.MessageMetadata(producer_name="raw", sequence_id=0, publish_time=1, uncompressed_size=500)
        meta.compression = api.LZ4  # type: ignore[assignment]
        send = api.CommandSend(producer_id=1, sequence_id=0)
        raw.send(encode_frame(T(type=T.SEND, send=send), encode_message(meta, b"\x00not lz4 at all")))
        answer = raw.read()
        assert answer.type == T.SEND_ERROR and answer.send_error.error == ServerError.ChecksumError
        assert "LZ4" in answer.send_error.message


def test_an_encrypted_producer_is_refused_at_producer(url: str) -> None:
    with _Raw(url) as raw:
        producer = api.CommandProducer(topic=unique(), producer_id=1, request_id=1, encrypted=True)
        raw.send(encode_command(T(type=T.PRODUCER, producer=producer)))
        answer = raw.read()
        assert answer.type == T.ERROR and answer.error.error == ServerError.NotAllowedError
        assert "encrypted" in answer.error.message


# -- a raw connection, for frames the official client never sends ------------------------------------


class _Raw:
    """One connection that speaks frames: ``send``, ``read`` the next command, ``request``."""

    def __init__(self, url: str) -> None:
        host, _, port = url.removeprefix("pulsar://").rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.buffer = bytearray()

    def __enter__(self) -> _Raw:
        self.send(
            encode_command(T(type=T.CONNECT, connect=api.CommandConnect(client_version="raw", protocol_version=21)))
        )
        assert self.read().type == T.CONNECTED
        return self

    def __exit__(self, *_: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> Frame:
        while True:
            parsed = parse_frame(self.buffer)
            if parsed is not None:
                frame, used = parsed
                del self.buffer[:used]
                return frame
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            self.buffer += chunk

    def read(self) -> api.BaseCommand:
        return self.read_frame().command

    def request(self, command: api.BaseCommand) -> api.BaseCommand:
        self.send(encode_command(command))
        answer = self.read()
        assert answer.type != T.ERROR, answer.error.message
        return answer
