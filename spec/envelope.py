"""PIP-160's batched-entry envelope and the codec that tells batched from plain entries.

Layout of a batched entry (big-endian, outside protobuf)::

    offset 0  2 bytes  magic   0x0E01   (BATCHED_ENTRY_DATA_PREFIX_MAGIC_NUMBER)
    offset 2  2 bytes  version 0x0001   (BATCHED_ENTRY_DATA_PREFIX_VERSION)
    offset 4  ...      BatchedTransactionMetadataEntry | BatchedPendingAckMetadataEntry

A plain entry is one serialized record with no prefix.  A valid protobuf message can never start
with byte 0x0E (field 1, wire type 6 does not exist), so the magic cannot collide with a plain
record.  Pulsar does not check the version on read; this codec does and rejects anything but 1
(rule BW-23 in ``spec/rules/batched_log.md``), because a reader that guesses at a future
layout can only decode it wrongly.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from google.protobuf.message import DecodeError, Message

from spec.errors import BadEnvelope, BadRecord, TruncatedInput, UnsupportedVersion
from spec.pb import PulsarTransactionMetadata_pb2 as tc_pb
from spec.pb import TransactionPendingAck_pb2 as pa_pb
from spec.types import PulsarName
from spec.wire import check_message

__all__ = [
    "MAGIC",
    "PREFIX_LENGTH",
    "VERSION",
    "DecodedEntry",
    "LogKind",
    "decode_entry",
    "encode_batch",
    "encode_plain",
    "is_batched",
]

MAGIC: Final = 0x0E01
VERSION: Final = 1
PREFIX_LENGTH: Final = 4
_PREFIX: Final = struct.Struct(">HH")


class LogKind(PulsarName, enum.Enum):
    """Which log an entry belongs to; each has its own record and batch message."""

    TRANSACTION_LOG = "transaction_log"
    PENDING_ACK = "pending_ack"

    @property
    def record_type(self) -> type[Message]:
        return tc_pb.TransactionMetadataEntry if self is _TRANSACTION_LOG else pa_pb.PendingAckMetadataEntry

    @property
    def batch_type(self) -> type[Message]:
        if self is _TRANSACTION_LOG:
            return tc_pb.BatchedTransactionMetadataEntry
        return pa_pb.BatchedPendingAckMetadataEntry

    @property
    def batch_field(self) -> str:
        return "transaction_logs" if self is _TRANSACTION_LOG else "pending_ack_logs"

    @property
    def op_field(self) -> str:
        return "metadata_op" if self is _TRANSACTION_LOG else "pending_ack_op"


# read by the properties above on every record: a module constant, not a member read off the
# class (which goes through EnumType's __getattr__ hook on Python 3.11)
_TRANSACTION_LOG: Final = LogKind.TRANSACTION_LOG


@dataclass(frozen=True, slots=True)
class DecodedEntry:
    """One ledger entry of a transaction or pending-ack log, decoded."""

    batched: bool
    records: tuple[Message, ...]
    version: int | None = None

    @property
    def batch_size(self) -> int:
        return len(self.records)


def encode_plain(record: Message) -> bytes:
    return record.SerializeToString(deterministic=True)


def encode_batch(records: Sequence[Message], kind: LogKind) -> bytes:
    """The envelope around ``records`` in arrival order (batch index order)."""
    batch = kind.batch_type()
    getattr(batch, kind.batch_field).extend(records)
    return _PREFIX.pack(MAGIC, VERSION) + batch.SerializeToString(deterministic=True)


def is_batched(data: bytes) -> bool:
    """Peek the first two bytes as Pulsar does; nothing is consumed or validated."""
    return len(data) >= 2 and data[0] == MAGIC >> 8 and data[1] == MAGIC & 0xFF


def decode_entry(data: bytes, kind: LogKind, *, where: str | None = None) -> DecodedEntry:
    """Decode one entry, batched or plain; a typed error names the byte offset of any damage."""
    if is_batched(data):
        if len(data) < PREFIX_LENGTH:
            raise TruncatedInput(
                f"batched entry prefix needs {PREFIX_LENGTH} bytes, got {len(data)}",
                offset=len(data),
                where=where,
            )
        _, version = _PREFIX.unpack_from(data, 0)
        if version != VERSION:
            raise UnsupportedVersion(
                f"batched entry version {version} is not supported (this reader knows {VERSION})",
                offset=2,
                where=where,
            )
        batch = _parse(data, kind.batch_type, PREFIX_LENGTH, where)
        records = tuple(getattr(batch, kind.batch_field))
        for index, record in enumerate(records):
            _check_record(record, kind, where, offset=PREFIX_LENGTH, index=index)
        return DecodedEntry(batched=True, records=records, version=version)
    if not data:
        raise BadRecord("empty entry: neither a batched envelope nor a record", offset=0, where=where)
    if data[0] == MAGIC >> 8:
        # 0x0E starts no protobuf record (wire type 6), so this is a damaged or foreign envelope.
        if len(data) < 2:
            raise TruncatedInput("entry ends inside the 2-byte magic", offset=1, where=where)
        raise BadEnvelope(
            f"unknown magic 0x{data[0]:02X}{data[1]:02X} (batched entries start with 0x{MAGIC:04X})",
            offset=0,
            where=where,
        )
    record = _parse(data, kind.record_type, 0, where)
    _check_record(record, kind, where, offset=0, index=None)
    return DecodedEntry(batched=False, records=(record,))


def _parse(data: bytes, message_type: type[Message], start: int, where: str | None) -> Message:
    try:
        check_message(data, message_type.DESCRIPTOR, start=start)
    except (TruncatedInput, BadRecord) as exc:
        # Re-raise with the caller's location; the offset is already absolute.
        raise type(exc)(str(exc).rsplit(" (at byte offset", 1)[0], offset=exc.offset, where=where) from None
    message = message_type()
    try:
        message.ParseFromString(data[start:])
    except DecodeError as exc:  # the structural check should have caught it; keep a typed error anyway
        raise BadRecord(f"{message_type.DESCRIPTOR.full_name}: {exc}", offset=start, where=where) from None
    return message


def _check_record(record: Message, kind: LogKind, where: str | None, *, offset: int, index: int | None) -> None:
    # A record without its op cannot be replayed; Pulsar would throw at replay time.  Reject it
    # at decode time so no reader silently skips or misreads it.
    if not record.HasField(kind.op_field):
        at = f"record {index} of the batch" if index is not None else "record"
        raise BadRecord(f"{at} has no {kind.op_field}", offset=offset, where=where)
