"""Topic entries: the bytes one entry of a topic's managed ledger holds, and the one codec for them.

Every reader and writer of topic entries goes through this module: the broker writes and reads
back its partitions' entries and the keyed messages of the namespace system topics
(``engine.broker``), the transaction buffer's rule says what metadata an entry carries
(``reference.buffer.entry_metadata``, TB-16), and ``txnmodel inspect`` shows entries
(``engine.storage.inspect``).  Change the format here and nowhere else.

Layout of an entry (big-endian sizes, outside protobuf): Pulsar's message bytes, exactly what a
producer's SEND carries and a consumer's MESSAGE delivers (:mod:`spec.frame` owns the frame)::

    offset 0       2 bytes   magic 0x0E01
    offset 2       4 bytes   CRC32C of every byte after it
    offset 6       4 bytes   metadata size N
    offset 10      N bytes   MessageMetadata (PulsarApi.proto)
    offset 10 + N  ...       payload

An entry without the magic is refused with :class:`UnsupportedTopicEntryFormat`, which names
txnmodel's earlier format (``[metadata size][metadata][payload]``, no magic or checksum) when the
bytes are in it: stores written before the change are not read.
The metadata fields used:

* ``producer_name``, ``sequence_id``, ``publish_time`` (required by the proto);
* ``txnid_most_bits`` / ``txnid_least_bits``: the entry belongs to a transaction;
* ``marker_type``: a transaction marker (:data:`TXN_COMMIT_MARKER` 21, :data:`TXN_ABORT_MARKER` 22),
  which carries no payload;
* ``deliver_at_time``: delayed delivery; ``partition_key``: the message key (Key_Shared routing,
  and the key of a system-topic message);
* ``null_value``: a tombstone (the key's value is deleted; compaction drops the key), no payload;
* ``num_messages_in_batch``: a batch entry, whose payload is, per message,
  ``[4-byte size][SingleMessageMetadata][payload]`` with ``payload_size``, ``sequence_id`` (the
  index in the batch) and ``partition_key``;
* ``compression`` and ``uncompressed_size``: the payload (a batch's as a whole) as a producer
  compressed it (:mod:`spec.compression`).  An entry is stored as the producer sent it; decoding
  undoes the compression, so a :class:`TopicEntry`'s payload and batch are always uncompressed.

:class:`TopicEntry` is the decoded form; :func:`encode_topic_entry` and :func:`decode_topic_entry`
are inverses on every entry this module writes.  :func:`decode_frame` splits an entry at its
metadata without decoding a batch, for readers that show damaged batches message by message
(:func:`iter_batch_payload`).  Bad bytes raise :class:`spec.errors.BadTopicEntry` with the byte
offset of the problem.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final

from google.protobuf.message import DecodeError

from spec.compression import CorruptPayload, decompress
from spec.errors import BadTopicEntry
from spec.frame import MAGIC_CRC32C, crc32c
from spec.pb import PulsarApi_pb2 as api_pb
from spec.pb import PulsarMarkers_pb2 as markers_pb
from spec.types import TxnID

__all__ = [
    "HEADER_SIZE",
    "TXN_ABORT_MARKER",
    "TXN_COMMIT_MARKER",
    "BatchedMessage",
    "Frame",
    "TopicEntry",
    "UnsupportedTopicEntryFormat",
    "decode_batch_payload",
    "decode_frame",
    "decode_topic_entry",
    "encode_batch_payload",
    "encode_message_entry",
    "encode_topic_entry",
    "entry_from_metadata",
    "iter_batch_payload",
    "message_metadata",
]

TXN_COMMIT_MARKER: Final[int] = markers_pb.TXN_COMMIT  # 21
TXN_ABORT_MARKER: Final[int] = markers_pb.TXN_ABORT  # 22
_SIZE: Final = struct.Struct(">I")
_MAGIC: Final = struct.Struct(">H")
HEADER_SIZE: Final = 2 + 4  # the magic and the checksum, before the metadata size


@dataclass(frozen=True, slots=True)
class BatchedMessage:
    """One message of a batch entry: its payload and key (``SingleMessageMetadata``)."""

    payload: bytes
    partition_key: str | None = None


@dataclass(frozen=True, slots=True)
class TopicEntry:
    """One topic entry, decoded.  ``None`` (or ``False``) is a field the metadata does not carry."""

    producer_name: str
    sequence_id: int
    publish_time: int
    txn_id: TxnID | None = None
    marker_type: int | None = None
    deliver_at: int | None = None
    partition_key: str | None = None
    null_value: bool = False
    payload: bytes = b""  # one message's payload; empty for a batch (see ``batch``)
    batch: tuple[BatchedMessage, ...] | None = None  # a batch entry's messages (num_messages_in_batch)


@dataclass(frozen=True, slots=True)
class Frame:
    """An entry split at its metadata: the metadata as a :class:`TopicEntry` whose ``payload`` is
    the stored payload uncompressed (a batch's still encoded, ``batch`` None), the batch's message
    count (``num_messages_in_batch``, None for a single message), the stored payload's byte offset,
    and whether it was compressed (then offsets inside the payload are the uncompressed bytes')."""

    entry: TopicEntry
    num_messages_in_batch: int | None
    payload_offset: int
    compressed: bool = False


def message_metadata(entry: TopicEntry) -> api_pb.MessageMetadata:
    """The ``MessageMetadata`` of ``entry``: the required fields, and each optional one it carries."""
    meta = api_pb.MessageMetadata(
        producer_name=entry.producer_name, sequence_id=entry.sequence_id, publish_time=entry.publish_time
    )
    if entry.txn_id is not None:
        meta.txnid_most_bits = entry.txn_id.most_sig_bits
        meta.txnid_least_bits = entry.txn_id.least_sig_bits
    if entry.marker_type is not None:
        meta.marker_type = entry.marker_type
    if entry.deliver_at is not None:
        meta.deliver_at_time = entry.deliver_at
    if entry.partition_key is not None:
        meta.partition_key = entry.partition_key
    if entry.null_value:
        meta.null_value = True
    if entry.batch is not None:
        meta.num_messages_in_batch = len(entry.batch)
    return meta


def entry_from_metadata(meta: api_pb.MessageMetadata, payload: bytes = b"") -> TopicEntry:
    """The :class:`TopicEntry` a ``MessageMetadata`` describes, with ``payload`` as is."""
    return TopicEntry(
        producer_name=meta.producer_name,
        sequence_id=meta.sequence_id,
        publish_time=meta.publish_time,
        txn_id=TxnID(meta.txnid_most_bits, meta.txnid_least_bits) if meta.HasField("txnid_most_bits") else None,
        marker_type=meta.marker_type if meta.HasField("marker_type") else None,
        deliver_at=meta.deliver_at_time if meta.HasField("deliver_at_time") else None,
        partition_key=meta.partition_key if meta.HasField("partition_key") else None,
        null_value=meta.null_value,
        payload=payload,
    )


def encode_topic_entry(entry: TopicEntry) -> bytes:
    """The bytes of ``entry``: ``[magic][CRC32C][metadata size][MessageMetadata][payload]``, a
    batch's payload being its messages (:func:`encode_batch_payload`)."""
    payload = entry.payload if entry.batch is None else encode_batch_payload(entry.batch)
    return encode_message_entry(message_metadata(entry), payload)


def encode_message_entry(metadata: api_pb.MessageMetadata, payload: bytes) -> bytes:
    """An entry holding a producer's message as it was sent: ``metadata`` (all of it: properties,
    event time, producer name and sequence id) and ``payload`` (a batch's as sent)."""
    raw = metadata.SerializeToString()
    body = _SIZE.pack(len(raw)) + raw + payload
    return _MAGIC.pack(MAGIC_CRC32C) + _SIZE.pack(crc32c(body)) + body


def decode_frame(data: bytes, *, where: str | None = None) -> Frame:
    """Split ``data`` at its metadata and decode the metadata (a batch stays encoded).  Raises
    :class:`BadTopicEntry` if the bytes are not an entry: too short for the size, a size that runs
    past the end, metadata that does not parse or lacks a required field."""
    if len(data) < 2 or _MAGIC.unpack_from(data, 0)[0] != MAGIC_CRC32C:
        raise UnsupportedTopicEntryFormat(_format_of(data), offset=0, where=where)
    if len(data) < HEADER_SIZE + _SIZE.size:
        raise BadTopicEntry(
            f"{len(data)} bytes: no room for the checksum and the 4-byte metadata size", offset=len(data), where=where
        )
    (expected,) = _SIZE.unpack_from(data, 2)
    actual = crc32c(data[HEADER_SIZE:])
    if actual != expected:
        raise BadTopicEntry(
            f"CRC32C 0x{actual:08x} of the entry does not match 0x{expected:08x}", offset=2, where=where
        )
    (size,) = _SIZE.unpack_from(data, HEADER_SIZE)
    start = HEADER_SIZE + _SIZE.size
    if size > len(data) - start:
        raise BadTopicEntry(
            f"metadata of {size} bytes runs past the end ({len(data) - start} left)", offset=start, where=where
        )
    meta = api_pb.MessageMetadata()
    try:
        meta.ParseFromString(data[start : start + size])
    except DecodeError as exc:
        raise BadTopicEntry(f"MessageMetadata: {exc}", offset=start, where=where) from None
    if not meta.IsInitialized():
        raise BadTopicEntry(
            "MessageMetadata lacks a required field (producer_name, sequence_id, publish_time)",
            offset=start,
            where=where,
        )
    count = meta.num_messages_in_batch if meta.HasField("num_messages_in_batch") else None
    offset = start + size
    payload = data[offset:]
    compressed = meta.compression != api_pb.NONE
    if compressed:
        try:
            payload = decompress(meta.compression, payload, meta.uncompressed_size, base=offset, where=where)
        except CorruptPayload as exc:
            raise BadTopicEntry(exc.reason, offset=offset, where=where) from None
    return Frame(entry_from_metadata(meta, payload), count, offset, compressed)


class UnsupportedTopicEntryFormat(BadTopicEntry):
    """Bytes that do not start with Pulsar's magic 0x0E01: not a topic entry of this format (the
    message says whether they are txnmodel's earlier format)."""


def _format_of(data: bytes) -> str:
    """Why ``data`` is not an entry: txnmodel's earlier format, or something else."""
    if len(data) >= 4:
        (size,) = _SIZE.unpack_from(data, 0)
        meta = api_pb.MessageMetadata()
        try:
            if 4 + size <= len(data):
                meta.ParseFromString(data[4 : 4 + size])
                if meta.IsInitialized():
                    return (
                        "an entry in txnmodel's earlier topic-entry format ([metadata size][metadata][payload], "
                        "no 0x0E01 magic and no CRC32C), which is no longer read: recreate the store"
                    )
        except DecodeError:
            pass
    head = data[:2].hex() or "nothing"
    return f"no topic-entry magic 0x0e01 (the entry starts with {head})"


def decode_topic_entry(data: bytes, *, where: str | None = None) -> TopicEntry:
    """Decode one entry: its metadata and its payload, a batch as its messages (``payload`` empty)."""
    frame = decode_frame(data, where=where)
    if frame.num_messages_in_batch is None:
        return frame.entry
    base = 0 if frame.compressed else frame.payload_offset
    batch = decode_batch_payload(frame.entry.payload, frame.num_messages_in_batch, where=where, base=base)
    return replace(frame.entry, payload=b"", batch=batch)


def encode_batch_payload(messages: Sequence[BatchedMessage]) -> bytes:
    """A batch entry's payload: per message ``[4-byte size][SingleMessageMetadata][payload]``,
    ``sequence_id`` the message's index in the batch."""
    out = bytearray()
    for index, message in enumerate(messages):
        single = api_pb.SingleMessageMetadata(payload_size=len(message.payload), sequence_id=index)
        if message.partition_key is not None:
            single.partition_key = message.partition_key
        meta = single.SerializeToString()
        out += _SIZE.pack(len(meta)) + meta + message.payload
    return bytes(out)


def iter_batch_payload(data: bytes, count: int, *, where: str | None = None, base: int = 0) -> Iterator[BatchedMessage]:
    """The ``count`` messages of a batch payload, in order; raises :class:`BadTopicEntry` at the
    first one that is cut short or does not parse (offsets are ``base`` + the offset in ``data``),
    after yielding the ones before it."""
    pos = 0
    for index in range(count):
        if pos + _SIZE.size > len(data):
            raise BadTopicEntry(f"batch message {index} is cut short", offset=base + pos, where=where)
        (size,) = _SIZE.unpack_from(data, pos)
        if pos + 4 + size > len(data):
            raise BadTopicEntry(
                f"SingleMessageMetadata of message {index}: {size} bytes run past the end",
                offset=base + pos + 4,
                where=where,
            )
        single = api_pb.SingleMessageMetadata()
        try:
            single.ParseFromString(data[pos + 4 : pos + 4 + size])
        except DecodeError as exc:
            raise BadTopicEntry(
                f"SingleMessageMetadata of message {index}: {exc}", offset=base + pos + 4, where=where
            ) from None
        pos += 4 + size
        length = single.payload_size
        if pos + length > len(data):
            raise BadTopicEntry(
                f"batch message {index}: payload of {length} bytes runs past the end", offset=base + pos, where=where
            )
        key = single.partition_key if single.HasField("partition_key") else None
        yield BatchedMessage(data[pos : pos + length], key)
        pos += length
    if pos != len(data):
        raise BadTopicEntry(
            f"{len(data) - pos} bytes after the {count} messages of a batch", offset=base + pos, where=where
        )


def decode_batch_payload(
    data: bytes, count: int, *, where: str | None = None, base: int = 0
) -> tuple[BatchedMessage, ...]:
    """The ``count`` messages of a batch payload; every byte must belong to one of them."""
    return tuple(iter_batch_payload(data, count, where=where, base=base))
