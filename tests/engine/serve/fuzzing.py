"""A structure-aware fuzzer of Pulsar's binary protocol, for ``txnmodel serve``'s boundary.

Frames are built from the protocol's own descriptors (``spec/proto/PulsarApi.proto``): every command
type, each field at its edge values (empty and huge strings, non-UTF-8, ids at 0 and 2^64-1,
negative Java longs, unknown enum values, a field repeated that is not, a required field missing,
unknown fields), written by a wire encoder of its own so that it can say what the protobuf runtime
would refuse to build.  Most frames are well formed, so that they reach the command handlers; a
few are not, and close their connection.

Knowledge is shared across connections (:class:`Pools`): the message ids of the receipts and the
MESSAGE frames that came back, the transactions the coordinator opened, the topics and
subscriptions in play.  So a command names what another connection made (its transaction, its
message, its subscription), and ids repeat on purpose (a producer id reused, a consumer closed
twice).  :class:`Campaign` keeps several connections open at once and opens, breaks and abandons
them in the patterns a hostile or broken peer uses (a command before CONNECT, a second CONNECT, a
frame cut short, garbage bytes, a close without reading).

A campaign is seeded: the same seed sends the same frames to a server that answers the same way.
"""

from __future__ import annotations

import contextlib
import math
import random
import selectors
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from spec.frame import MAGIC_CRC32C, crc32c, parse_frame
from spec.pb import PulsarApi_pb2 as api
from tests.engine.serve.rawpeer import address

__all__ = ["Campaign", "CampaignStats", "FrameGenerator", "Pools", "garbage_connection"]

T = api.BaseCommand
U64 = (1 << 64) - 1
_U32 = struct.Struct(">I")
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_WIRE = {
    FieldDescriptor.TYPE_DOUBLE: _I64,
    FieldDescriptor.TYPE_FIXED64: _I64,
    FieldDescriptor.TYPE_SFIXED64: _I64,
    FieldDescriptor.TYPE_FLOAT: _I32,
    FieldDescriptor.TYPE_FIXED32: _I32,
    FieldDescriptor.TYPE_SFIXED32: _I32,
    FieldDescriptor.TYPE_STRING: _LEN,
    FieldDescriptor.TYPE_BYTES: _LEN,
    FieldDescriptor.TYPE_MESSAGE: _LEN,
}
# Edge values of an integer on the wire (a negative one is a ten-byte varint, as protobuf writes it).
INT_EDGES = (0, 1, 2, 3, 127, 128, (1 << 31) - 1, 1 << 31, (1 << 32) - 1, (1 << 63) - 1, 1 << 63, U64 - 1, U64)
NEGATIVE_EDGES = (-1, -2, -5, -(1 << 31), -(1 << 63))
# The commands a client sends carry most of the weight; the rest (the server's own answers and
# commands this broker does not serve) still come, less often.
CLIENT_COMMANDS = {
    T.PRODUCER: 8,
    T.SEND: 14,
    T.SUBSCRIBE: 8,
    T.FLOW: 8,
    T.ACK: 10,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: 3,
    T.SEEK: 3,
    T.GET_LAST_MESSAGE_ID: 2,
    T.CLOSE_PRODUCER: 3,
    T.CLOSE_CONSUMER: 3,
    T.UNSUBSCRIBE: 2,
    T.PING: 2,
    T.PONG: 1,
    T.LOOKUP: 2,
    T.PARTITIONED_METADATA: 2,
    T.GET_TOPICS_OF_NAMESPACE: 1,
    T.GET_SCHEMA: 1,
    T.GET_OR_CREATE_SCHEMA: 1,
    T.TC_CLIENT_CONNECT_REQUEST: 1,
    T.NEW_TXN: 5,
    T.ADD_PARTITION_TO_TXN: 4,
    T.ADD_SUBSCRIPTION_TO_TXN: 4,
    T.END_TXN: 4,
    T.CONNECT: 1,
}
# BaseCommand's field of each command type (the field number equals the type's number).
SUB_FIELD = {f.number: f for f in T.DESCRIPTOR.fields if f.name != "type"}


# -- the wire, written by hand --------------------------------------------------------------------


def varint(value: int) -> bytes:
    value &= U64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def length_delimited(number: int, body: bytes) -> bytes:
    return tag(number, _LEN) + varint(len(body)) + body


def frame_of(command: bytes, message: bytes | None = None) -> bytes:
    """A frame around raw command bytes (and a SEND's message)."""
    rest = b"" if message is None else message
    return _U32.pack(4 + len(command) + len(rest)) + _U32.pack(len(command)) + command + rest


def message_of(metadata: bytes, payload: bytes, *, checksum: bool = True) -> bytes:
    body = _U32.pack(len(metadata)) + metadata + payload
    if not checksum:
        return body
    return struct.pack(">H", MAGIC_CRC32C) + _U32.pack(crc32c(body)) + body


# -- what the connections learned -----------------------------------------------------------------


@dataclass
class Pools:
    """What every connection may name: topics, subscriptions, and what the server handed out."""

    topics: list[str]
    subscriptions: list[str] = field(default_factory=lambda: ["sub", "sub-2", "reader", "dlq"])
    txns: list[tuple[int, int]] = field(default_factory=list)
    message_ids: list[tuple[int, int]] = field(default_factory=list)
    request_ids: Iterator[int] = field(default_factory=lambda: iter(range(1, 1 << 62)))

    @classmethod
    def of(cls, prefix: str, count: int = 6) -> Pools:
        return cls([f"persistent://public/default/{prefix}-{i}" for i in range(count)])

    def learn(self, command: Any) -> None:
        """Keep the ids an answer names (bounded: the newest win)."""
        kind = command.type
        if kind == T.SEND_RECEIPT:
            mid = command.send_receipt.message_id
            self._keep(self.message_ids, (mid.ledgerId, mid.entryId))
        elif kind == T.MESSAGE:
            mid = command.message.message_id
            self._keep(self.message_ids, (mid.ledgerId, mid.entryId))
        elif kind == T.NEW_TXN_RESPONSE and not command.newTxnResponse.HasField("error"):
            body = command.newTxnResponse
            self._keep(self.txns, (body.txnid_most_bits, body.txnid_least_bits))

    @staticmethod
    def _keep(pool: list[tuple[int, int]], item: tuple[int, int]) -> None:
        pool.append(item)
        if len(pool) > 200:
            del pool[:100]


# -- frames ---------------------------------------------------------------------------------------


class FrameGenerator:
    """Frames for one campaign: ``connected()`` after CONNECT, ``before_connect()`` before it.

    ``broken`` is the chance that a frame is malformed in a way the protocol refuses (the server
    closes the connection); the rest are well formed with edge values in every field."""

    def __init__(self, rng: random.Random, pools: Pools, *, broken: float = 0.02, huge: float = 0.01) -> None:
        self.rng = rng
        self.pools = pools
        self.broken = broken
        self.huge = huge
        kinds = list(CLIENT_COMMANDS)
        others = [v for v in T.Type.values() if v not in CLIENT_COMMANDS]
        self._kinds = kinds + others
        self._weights = [CLIENT_COMMANDS[k] for k in kinds] + [0.05] * len(others)
        self._sequence = 0

    def connect(self) -> bytes:
        body = api.CommandConnect(client_version="fuzz", protocol_version=self.rng.choice((1, 6, 15, 19, 21, 99)))
        return frame_of(T(type=T.CONNECT, connect=body).SerializeToString())

    def connected(self) -> tuple[str, bytes]:
        """The next frame on a connected connection, and what it is (for the report)."""
        rng = self.rng
        roll = rng.random()
        if roll < self.broken:
            return self._broken_frame()
        kind = rng.choices(self._kinds, self._weights)[0]
        name = T.Type.Name(kind)
        sub_field = SUB_FIELD.get(kind)
        parts = [tag(1, _VARINT) + varint(kind)]
        if sub_field is not None and rng.random() < 0.97:
            parts.append(length_delimited(sub_field.number, self.message(sub_field.message_type, kind=kind)))
        elif rng.random() < 0.5:
            other = rng.choice(list(SUB_FIELD.values()))  # the type says one thing, the body another
            parts.append(length_delimited(other.number, self.message(other.message_type, kind=other.number)))
            name += f"+{other.name}"
        command = b"".join(parts)
        if kind in (T.SEND, T.MESSAGE):
            return name, frame_of(command, self.send_message())
        return name, frame_of(command)

    def _broken_frame(self) -> tuple[str, bytes]:
        rng = self.rng
        choice = rng.randrange(7)
        if choice == 0:
            return "garbage", rng.randbytes(rng.randint(1, 200))
        if choice == 1:  # an unknown command type
            return "unknown-type", frame_of(tag(1, _VARINT) + varint(rng.choice((0, 1, 41, 99, 1 << 20))))
        if choice == 2:  # a required field missing: BaseCommand.type
            return "no-type", frame_of(length_delimited(5, b""))
        if choice == 3:  # a string field that is not UTF-8
            body = length_delimited(1, b"\xff\xfe\xc3(") + tag(2, _VARINT) + varint(1) + tag(3, _VARINT) + varint(1)
            return "not-utf8", frame_of(tag(1, _VARINT) + varint(T.PRODUCER) + length_delimited(5, body))
        if choice == 4:  # an unknown enum value
            body = tag(1, _VARINT) + varint(9) + tag(2, _VARINT) + varint(1)
            return "bad-enum", frame_of(tag(1, _VARINT) + varint(T.ACK) + length_delimited(10, body))
        if choice == 5:  # sizes that disagree
            command = tag(1, _VARINT) + varint(T.PING) + length_delimited(18, b"")
            return "bad-sizes", _U32.pack(4 + len(command)) + _U32.pack(len(command) + 7) + command
        return "payload-missing", frame_of(tag(1, _VARINT) + varint(T.SEND) + length_delimited(6, b"\x08\x01\x10\x01"))

    # -- values ----------------------------------------------------------------------------------

    def message(self, descriptor: Descriptor, *, kind: int | None = None, depth: int = 0) -> bytes:
        """The fields of one message, each present, absent, repeated or at an edge value."""
        rng = self.rng
        out = bytearray()
        txn = rng.choice(self.pools.txns) if self.pools.txns and rng.random() < 0.8 else None
        mid = rng.choice(self.pools.message_ids) if self.pools.message_ids and rng.random() < 0.7 else None
        for fd in descriptor.fields:
            if fd.is_required:
                present = rng.random() < 0.995
            elif fd.is_repeated:
                present = rng.random() < 0.6
            else:
                present = rng.random() < self._presence(fd)
            if not present:
                continue
            count = 1
            if fd.is_repeated:
                count = rng.choice((1, 1, 1, 2, 3, 8)) if rng.random() > self.huge else 2000
            elif rng.random() < 0.02:
                count = 2  # a field that is not repeated, twice: the last one wins
            for _ in range(count):
                out += self._field(fd, kind, depth, txn, mid)
        if rng.random() < 0.01:
            out += tag(rng.choice((99, 1000, 536870911)), _VARINT) + varint(rng.getrandbits(64))  # an unknown field
        return bytes(out)

    def _presence(self, fd: FieldDescriptor) -> float:
        if fd.name.startswith("txnid_"):
            return 0.25
        if fd.name in ("start_message_id", "message_id", "request_id"):
            return 0.7
        return 0.45

    def _field(
        self,
        fd: FieldDescriptor,
        kind: int | None,
        depth: int,
        txn: tuple[int, int] | None,
        mid: tuple[int, int] | None,
    ) -> bytes:
        rng = self.rng
        if fd.type == FieldDescriptor.TYPE_MESSAGE:
            if depth > 4:
                return length_delimited(fd.number, b"")
            return length_delimited(fd.number, self.message(fd.message_type, kind=kind, depth=depth + 1))
        if fd.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
            return length_delimited(fd.number, self._bytes(fd))
        wire = _WIRE.get(fd.type, _VARINT)
        if wire == _I64:
            value = struct.pack("<d", rng.choice((0.0, -0.0, math.inf, math.nan, 1e308)))
            return tag(fd.number, wire) + (value if fd.type == FieldDescriptor.TYPE_DOUBLE else rng.randbytes(8))
        if wire == _I32:
            return tag(fd.number, wire) + rng.randbytes(4)
        return tag(fd.number, _VARINT) + varint(self._integer(fd, txn, mid))

    def _integer(self, fd: FieldDescriptor, txn: tuple[int, int] | None, mid: tuple[int, int] | None) -> int:
        rng = self.rng
        name = fd.name
        if fd.type == FieldDescriptor.TYPE_ENUM:
            values = [v.number for v in fd.enum_type.values]
            return rng.choice(values)
        if fd.type == FieldDescriptor.TYPE_BOOL:
            return rng.choice((0, 1, 1))
        if txn is not None and name == "txnid_most_bits":
            return txn[0]
        if txn is not None and name == "txnid_least_bits":
            return txn[1]
        if mid is not None and name in ("ledgerId", "entryId"):
            near = mid[0] if name == "ledgerId" else mid[1]
            return rng.choice((near, near, near, near + 1, max(0, near - 1), U64))
        if name in ("producer_id", "consumer_id"):
            return rng.choice((0, 1, 1, 1, 1, 2, 3)) if rng.random() < 0.9 else rng.choice(INT_EDGES)
        if name == "request_id":
            return next(self.pools.request_ids) if rng.random() < 0.9 else rng.choice(INT_EDGES)
        if name == "sequence_id" or name == "highest_sequence_id":
            self._sequence += 1
            return self._sequence if rng.random() < 0.9 else rng.choice(INT_EDGES)
        if name == "tc_id":
            return 0 if rng.random() < 0.9 else rng.choice(INT_EDGES)
        if name == "messagePermits":
            return rng.choice((0, 1, 10, 100, 1000, (1 << 32) - 1))
        if name in ("txn_ttl_seconds", "deliver_at_time", "message_publish_time", "publish_time"):
            return rng.choice((0, 1, 50, 60_000, int(time.time() * 1000) + rng.randint(-5000, 5000), U64, -1))
        if name == "batch_index" or name == "batch_size" or name == "num_messages_in_batch":
            return rng.choice((0, 1, 2, 5, 64, -1, (1 << 31) - 1))
        if fd.type in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_INT64) and rng.random() < 0.3:
            return rng.choice(NEGATIVE_EDGES)
        return rng.choice(INT_EDGES) if rng.random() < 0.5 else rng.randint(0, 10)

    def _bytes(self, fd: FieldDescriptor) -> bytes:
        rng = self.rng
        name = fd.name
        if rng.random() < self.huge:
            return b"x" * rng.choice((1025, 70_000, 1_000_000))
        if name in ("topic", "partitions") and rng.random() < 0.85:
            return rng.choice(self.pools.topics).encode()
        if name == "subscription" and rng.random() < 0.85:
            return rng.choice(self.pools.subscriptions).encode()
        if name == "namespace" and rng.random() < 0.7:
            return b"public/default"
        if fd.type == FieldDescriptor.TYPE_BYTES:
            return rng.choice((b"", b"\x00", rng.randbytes(rng.randint(1, 64)), b"\xff" * 8))
        return rng.choice(
            (
                "",
                " ",
                "a",
                "x" * 300,
                "persistent://public/default/",
                "non-persistent://public/default/t",
                "persistent://a/b/c/d",
                "../../etc/passwd",
                "ü€😀",
                "\x00",
                "public/default",
                "AUTO_SPLIT",
            )
        ).encode()

    def _plain_metadata(self) -> bytes:
        """A message's metadata as a client writes it, with now and then a key, a delivery time."""
        rng = self.rng
        self._sequence += 1
        now_ms = int(time.time() * 1000)
        meta = api.MessageMetadata(producer_name="fuzz", sequence_id=self._sequence, publish_time=now_ms)
        if rng.random() < 0.3:
            meta.partition_key = rng.choice(("k1", "k2", "k3"))
        if rng.random() < 0.2:
            meta.deliver_at_time = int(time.time() * 1000) + rng.choice((-1000, 0, 50, 300, 2000))
        return meta.SerializeToString()

    def setup(self) -> list[tuple[str, bytes]]:
        """What a client does first: a producer and a consumer (ids 1) on topics of the pool, permits."""
        rng = self.rng
        producer = api.CommandProducer(
            topic=rng.choice(self.pools.topics), producer_id=1, request_id=next(self.pools.request_ids)
        )
        subscribe = api.CommandSubscribe(
            topic=rng.choice(self.pools.topics),
            subscription=rng.choice(self.pools.subscriptions),
            subType=rng.choice(list(api.CommandSubscribe.SubType.values())),
            consumer_id=1,
            request_id=next(self.pools.request_ids),
            durable=rng.random() < 0.8,
        )
        flow = api.CommandFlow(consumer_id=1, messagePermits=rng.choice((1, 10, 1000)))
        return [
            ("setup:PRODUCER", frame_of(T(type=T.PRODUCER, producer=producer).SerializeToString())),
            ("setup:SUBSCRIBE", frame_of(T(type=T.SUBSCRIBE, subscribe=subscribe).SerializeToString())),
            ("setup:FLOW", frame_of(T(type=T.FLOW, flow=flow).SerializeToString())),
        ]

    def send_message(self) -> bytes:
        """A SEND's message: metadata from its descriptor, a payload (a batch when it says so)."""
        rng = self.rng
        plain = rng.random() < 0.6
        metadata = self._plain_metadata() if plain else self.message(api.MessageMetadata.DESCRIPTOR)
        payload = rng.randbytes(rng.choice((0, 1, 16, 200)))
        if rng.random() < 0.3:
            count = rng.choice((1, 2, 3, 5))
            singles = bytearray()
            for _ in range(count):
                body = rng.randbytes(rng.randint(0, 20))
                single = tag(5, _VARINT) + varint(len(body))  # SingleMessageMetadata.payload_size
                if rng.random() < 0.5:
                    single += length_delimited(2, rng.choice(("k1", "k2", "")).encode())  # partition_key
                singles += _U32.pack(len(single)) + single + body
            metadata = metadata + tag(11, _VARINT) + varint(count)  # num_messages_in_batch, last one wins
            payload = bytes(singles)
        return message_of(metadata, payload, checksum=rng.random() < 0.9)


# -- a campaign ------------------------------------------------------------------------------------


@dataclass
class CampaignStats:
    frames: int = 0
    connections: int = 0
    closed_by_server: int = 0
    answers: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    by_answer: dict[str, int] = field(default_factory=dict)


class _Peer:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.connected = False
        self.budget = 0
        self.script: list[tuple[str, bytes]] = []


class Campaign:
    """Up to ``width`` fuzzing connections at once against ``url``, each living a few dozen frames."""

    def __init__(
        self, url: str, seed: int, *, prefix: str = "fuzz", width: int = 6, pools: Pools | None = None
    ) -> None:
        self.url = url
        self.rng = random.Random(seed)
        self.pools = pools or Pools.of(prefix)
        self.generator = FrameGenerator(self.rng, self.pools)
        self.width = width
        self.stats = CampaignStats()
        self._peers: list[_Peer] = []
        self._selector = selectors.DefaultSelector()

    def run(self, seconds: float, *, stop: Callable[[], bool] = lambda: False) -> CampaignStats:
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline and not stop():
                self.step()
        finally:
            for peer in list(self._peers):
                self._drop(peer)
            self._selector.close()
        return self.stats

    def step(self) -> None:
        rng = self.rng
        if len(self._peers) < self.width or rng.random() < 0.02:
            self._open()
        if not self._peers:
            return
        peer = rng.choice(self._peers)
        if peer.budget <= 0:
            self._end(peer)
            return
        peer.budget -= 1
        if not peer.connected:
            data, what = (self.generator.connect(), "CONNECT") if rng.random() < 0.95 else self._before_connect()
            peer.connected = what == "CONNECT"
            if peer.connected and rng.random() < 0.7:
                peer.script = self.generator.setup()
        elif peer.script:
            what, data = peer.script.pop(0)
        else:
            what, data = self.generator.connected()
        self._count(what)
        try:
            peer.sock.sendall(data)
        except OSError:
            self._closed(peer)
            return
        self._read_all(0.0)

    def _before_connect(self) -> tuple[bytes, str]:
        what, data = self.generator.connected()
        return data, f"before-CONNECT:{what}"

    def _count(self, what: str) -> None:
        self.stats.frames += 1
        self.stats.by_kind[what] = self.stats.by_kind.get(what, 0) + 1

    def _open(self) -> None:
        try:
            sock = socket.create_connection(address(self.url), timeout=5)
        except OSError:
            return
        sock.setblocking(False)
        peer = _Peer(sock)
        peer.budget = self.rng.choice((1, 5, 20, 60, 200, 400))
        self._peers.append(peer)
        self._selector.register(sock, selectors.EVENT_READ, peer)
        self.stats.connections += 1

    def _end(self, peer: _Peer) -> None:
        """A connection's last act: a clean close, a frame cut short, a close with unread input."""
        roll = self.rng.random()
        with contextlib.suppress(OSError):
            if roll < 0.2:
                peer.sock.sendall(self.generator.connected()[1][:5])
            elif roll < 0.3:
                peer.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST
        self._drop(peer)

    def _drop(self, peer: _Peer) -> None:
        if peer in self._peers:
            self._peers.remove(peer)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(peer.sock)
        with contextlib.suppress(OSError):
            peer.sock.close()

    def _closed(self, peer: _Peer) -> None:
        self.stats.closed_by_server += 1
        self._drop(peer)

    def _read_all(self, wait_s: float) -> None:
        for key, _ in self._selector.select(wait_s):
            peer: _Peer = key.data
            try:
                chunk = peer.sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self._closed(peer)
                continue
            peer.buffer += chunk
            while True:
                try:
                    parsed = parse_frame(peer.buffer, max_frame_size=1 << 30)
                except Exception:  # the server never sends a bad frame; if it did, drop the peer
                    self._closed(peer)
                    break
                if parsed is None:
                    break
                frame, used = parsed
                peer.buffer = peer.buffer[used:]
                self.stats.answers += 1
                answer = _answer_name(frame.command)
                self.stats.by_answer[answer] = self.stats.by_answer.get(answer, 0) + 1
                self.pools.learn(frame.command)


def _answer_name(command: Any) -> str:
    """An answer's type, and its error code when it carries one."""
    name = T.Type.Name(command.type)
    for descriptor, body in command.ListFields():
        if descriptor.message_type is None:
            continue
        for error_field in ("error", "error_code"):
            if error_field in descriptor.message_type.fields_by_name and body.HasField(error_field):
                return f"{name}:{api.ServerError.Name(getattr(body, error_field))}"
    return name


def garbage_connection(url: str, rng: random.Random) -> str:
    """One connection that sends something no client would and leaves; what it did."""
    sock = socket.create_connection(address(url), timeout=5)
    pools = Pools.of("garbage", 2)
    generator = FrameGenerator(rng, pools, broken=1.0)
    kind = rng.randrange(6)
    try:
        if kind == 0:
            sock.sendall(rng.randbytes(rng.randint(1, 512)))
            what = "random bytes"
        elif kind == 1:
            sock.sendall(generator.connect() + generator.connected()[1])
            what = "CONNECT then a broken frame"
        elif kind == 2:
            sock.sendall(generator.connect()[:3])
            what = "a CONNECT cut short"
        elif kind == 3:
            sock.sendall(_U32.pack(0x7FFFFFF0))
            what = "a huge frame announced"
        elif kind == 4:
            sock.sendall(generator.connect() + generator.connect())
            what = "two CONNECTs"
        else:
            what = "nothing"
        if rng.random() < 0.5:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        sock.close()
    return what
