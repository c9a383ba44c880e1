"""A partition's entries: the buffer's :class:`~reference.buffer.LogEntry` and a send's body, in
and out of the topic-entry codec (:mod:`spec.topic_entry`, which owns the bytes).

What the broker chooses on top of the codec: a message it writes has producer ``txnmodel`` and the
entry id as its sequence id; a transaction marker has what the buffer's rule gives it
(``pulsar.txn.marker`` and -1, TB-16); a stored entry is classified by the buffer's rule
(:func:`reference.buffer.classify_entry`, TB-16).  :class:`StoredMessage` is what a partition
keeps of an entry it wrote or read back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reference import buffer as tb
from spec.pb import PulsarApi_pb2 as api_pb
from spec.topic_entry import (
    TXN_ABORT_MARKER,
    TXN_COMMIT_MARKER,
    BatchedMessage,
    TopicEntry,
    decode_batch_payload,
    decode_topic_entry,
    encode_batch_payload,
    encode_message_entry,
    encode_topic_entry,
)
from spec.types import Position

__all__ = [
    "MARKER_ABORT",
    "MARKER_COMMIT",
    "NO_BODY",
    "PRODUCER_NAME",
    "BatchedMessage",
    "MessageBody",
    "StoredMessage",
    "decode_batch_payload",
    "decode_stored_message",
    "encode_batch_payload",
    "encode_entry",
]

MARKER_COMMIT = TXN_COMMIT_MARKER
MARKER_ABORT = TXN_ABORT_MARKER
PRODUCER_NAME = "txnmodel"  # the producer of every entry the broker writes


@dataclass(frozen=True, slots=True)
class MessageBody:
    """What a producer's send carries besides the transaction: one message, or a batch of them."""

    payload: bytes = b""
    deliver_at: int | None = None
    partition_key: str | None = None
    batch: tuple[BatchedMessage, ...] | None = None  # a batch entry (num_messages_in_batch = len)
    # A real producer's message (txnmodel serve): its metadata and payload are stored as sent, with
    # the transaction the buffer placed it in; None: the broker writes its own metadata.
    sent: tuple[api_pb.MessageMetadata, bytes] | None = None


NO_BODY = MessageBody()


@dataclass(frozen=True, slots=True)
class StoredMessage:
    entry: tb.LogEntry
    payload: bytes = b""
    deliver_at: int | None = None
    partition_key: str | None = None
    batch: tuple[BatchedMessage, ...] | None = None
    publish_time: int = 0  # MessageMetadata.publish_time: what a seek by time compares (PA-23)

    @property
    def batch_size(self) -> int:
        return 1 if self.batch is None else len(self.batch)


def encode_entry(
    entry: tb.LogEntry,
    payload: bytes = b"",
    deliver_at: int | None = None,
    publish_time: int = 0,
    *,
    partition_key: str | None = None,
    batch: Sequence[BatchedMessage] | None = None,
    null_value: bool = False,
    sent: tuple[api_pb.MessageMetadata, bytes] | None = None,
) -> bytes:
    """The bytes the broker writes for ``entry`` placed by the buffer, with a send's body.  The
    buffer's rule names a marker's producer and sequence id (``pulsar.txn.marker``, -1: TB-16).
    A producer's message ``sent`` over the wire keeps its metadata and payload; only the
    transaction is the broker's (the one the buffer placed it in)."""
    if sent is not None and not entry.kind.is_marker:
        metadata = api_pb.MessageMetadata()
        metadata.CopyFrom(sent[0])
        for name in ("txnid_most_bits", "txnid_least_bits", "marker_type"):
            metadata.ClearField(name)
        if entry.txn_id is not None:
            metadata.txnid_most_bits = entry.txn_id.most_sig_bits
            metadata.txnid_least_bits = entry.txn_id.least_sig_bits
        return encode_message_entry(metadata, sent[1])
    named = tb.entry_metadata(
        entry, publish_time_ms=publish_time, producer_name=PRODUCER_NAME, sequence_id=entry.position.entry_id
    )
    return encode_topic_entry(
        TopicEntry(
            producer_name=named.producer_name,
            sequence_id=named.sequence_id,
            publish_time=publish_time,
            txn_id=entry.txn_id,
            marker_type=tb.marker_type(entry.kind),
            deliver_at=deliver_at,
            partition_key=partition_key,
            null_value=null_value,
            payload=payload,
            batch=None if batch is None else tuple(batch),
        )
    )


def decode_stored_message(position: Position, data: bytes) -> StoredMessage:
    """An entry read back from the topic's ledger at ``position``: the buffer's view of it and its body."""
    decoded = decode_topic_entry(data, where=str(position))
    entry = tb.classify_entry(position, decoded.marker_type, decoded.txn_id)
    return StoredMessage(
        entry, decoded.payload, decoded.deliver_at, decoded.partition_key, decoded.batch, decoded.publish_time
    )
