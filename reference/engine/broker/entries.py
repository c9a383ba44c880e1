"""Topic entries as the broker writes them: ``[4-byte metadata size][MessageMetadata][payload]``.

A transaction marker has ``marker_type`` (21 commit, 22 abort); a batch entry has
``num_messages_in_batch`` and a payload of ``[4-byte size][SingleMessageMetadata][payload]`` per
message.  A system-topic message (a transaction-buffer snapshot record) is keyed:
``partition_key`` is its key, ``null_value`` makes it a tombstone.  :class:`StoredMessage` is
what a partition keeps of an entry it wrote or read back.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from reference import buffer as tb
from spec.pb import PulsarApi_pb2
from spec.types import Position, TxnID

__all__ = [
    "MARKER_ABORT",
    "MARKER_COMMIT",
    "NO_BODY",
    "BatchedMessage",
    "MessageBody",
    "StoredMessage",
    "decode_batch_payload",
    "decode_entry",
    "decode_keyed_message",
    "encode_batch_payload",
    "encode_entry",
    "encode_keyed_message",
    "entry_metadata",
]

MARKER_COMMIT = 21  # PulsarMarkers.proto MarkerType.TXN_COMMIT
MARKER_ABORT = 22  # MarkerType.TXN_ABORT
_SIZE = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class BatchedMessage:
    """One message of a batch entry: its ``SingleMessageMetadata`` frame and payload."""

    payload: bytes
    partition_key: str | None = None


@dataclass(frozen=True, slots=True)
class MessageBody:
    """What a producer's send carries besides the transaction: one message, or a batch of them."""

    payload: bytes = b""
    deliver_at: int | None = None
    partition_key: str | None = None
    batch: tuple[BatchedMessage, ...] | None = None  # a batch entry (num_messages_in_batch = len)


NO_BODY = MessageBody()


@dataclass(frozen=True, slots=True)
class StoredMessage:
    entry: tb.LogEntry
    payload: bytes = b""
    deliver_at: int | None = None
    partition_key: str | None = None
    batch: tuple[BatchedMessage, ...] | None = None

    @property
    def batch_size(self) -> int:
        return 1 if self.batch is None else len(self.batch)


def encode_batch_payload(messages: Sequence[BatchedMessage]) -> bytes:
    """A batch entry's payload: per message ``[4-byte size][SingleMessageMetadata][payload]``."""
    out = bytearray()
    for index, message in enumerate(messages):
        single = PulsarApi_pb2.SingleMessageMetadata(payload_size=len(message.payload), sequence_id=index)
        if message.partition_key is not None:
            single.partition_key = message.partition_key
        meta = single.SerializeToString()
        out += _SIZE.pack(len(meta)) + meta + message.payload
    return bytes(out)


def decode_batch_payload(data: bytes, count: int) -> tuple[BatchedMessage, ...]:
    out = []
    pos = 0
    for _ in range(count):
        (size,) = _SIZE.unpack_from(data, pos)
        single = PulsarApi_pb2.SingleMessageMetadata()
        try:
            single.ParseFromString(data[pos + 4 : pos + 4 + size])
        except DecodeError as exc:
            raise ValueError(f"SingleMessageMetadata at byte {pos + 4} of a batch: {exc}") from None
        pos += 4 + size
        length = single.payload_size
        key = single.partition_key if single.HasField("partition_key") else None
        out.append(BatchedMessage(data[pos : pos + length], key))
        pos += length
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes after the {count} messages of a batch")
    return tuple(out)


def encode_entry(
    entry: tb.LogEntry,
    payload: bytes = b"",
    deliver_at: int | None = None,
    publish_time: int = 0,
    *,
    partition_key: str | None = None,
    batch: Sequence[BatchedMessage] | None = None,
    null_value: bool = False,
) -> bytes:
    meta = PulsarApi_pb2.MessageMetadata(
        producer_name="txnmodel", sequence_id=entry.position.entry_id, publish_time=publish_time
    )
    if entry.txn_id is not None:
        meta.txnid_most_bits = entry.txn_id.most_sig_bits
        meta.txnid_least_bits = entry.txn_id.least_sig_bits
    if entry.kind is tb.EntryKind.TXN_COMMIT:
        meta.marker_type = MARKER_COMMIT
    elif entry.kind is tb.EntryKind.TXN_ABORT:
        meta.marker_type = MARKER_ABORT
    if deliver_at is not None:
        meta.deliver_at_time = deliver_at
    if partition_key is not None:
        meta.partition_key = partition_key
    if null_value:
        meta.null_value = True  # a tombstone: the key's value is deleted (compaction drops the key)
    if batch is not None:
        meta.num_messages_in_batch = len(batch)
        payload = encode_batch_payload(batch)
    raw = meta.SerializeToString()
    return _SIZE.pack(len(raw)) + raw + payload


def decode_entry(position: Position, data: bytes) -> StoredMessage:
    meta = entry_metadata(data)
    txn = TxnID(meta.txnid_most_bits, meta.txnid_least_bits) if meta.HasField("txnid_most_bits") else None
    if meta.HasField("marker_type"):
        kind = tb.EntryKind.TXN_COMMIT if meta.marker_type == MARKER_COMMIT else tb.EntryKind.TXN_ABORT
    else:
        kind = tb.EntryKind.NORMAL if txn is None else tb.EntryKind.TXN_DATA
    deliver_at = meta.deliver_at_time if meta.HasField("deliver_at_time") else None
    key = meta.partition_key if meta.HasField("partition_key") else None
    (size,) = _SIZE.unpack_from(data, 0)
    payload = data[4 + size :]
    batch = (
        decode_batch_payload(payload, meta.num_messages_in_batch) if meta.HasField("num_messages_in_batch") else None
    )
    return StoredMessage(tb.LogEntry(position, kind, txn), payload if batch is None else b"", deliver_at, key, batch)


def entry_metadata(data: bytes) -> PulsarApi_pb2.MessageMetadata:
    (size,) = _SIZE.unpack_from(data, 0)
    meta = PulsarApi_pb2.MessageMetadata()
    meta.ParseFromString(data[4 : 4 + size])
    return meta


def encode_keyed_message(key: str, value: bytes | None, publish_time: int = 0, sequence_id: int = 0) -> bytes:
    """A system-topic message: ``[4-byte size][MessageMetadata with partition_key][payload]``;
    ``value=None`` is a tombstone (``null_value``, empty payload)."""
    meta = PulsarApi_pb2.MessageMetadata(
        producer_name="txnmodel-tb-snapshot", sequence_id=sequence_id, publish_time=publish_time, partition_key=key
    )
    if value is None:
        meta.null_value = True
    raw = meta.SerializeToString()
    return _SIZE.pack(len(raw)) + raw + (value or b"")


def decode_keyed_message(data: bytes) -> tuple[str, bytes | None]:
    """(key, value) of a system-topic message; value None for a tombstone."""
    meta = entry_metadata(data)
    if not meta.HasField("partition_key"):
        raise ValueError("a snapshot-topic message without a key")
    (size,) = _SIZE.unpack_from(data, 0)
    return meta.partition_key, None if meta.null_value else data[4 + size :]
