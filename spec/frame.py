"""Pulsar's binary protocol frame: the bytes on the socket, and the message bytes on a topic.

A frame (big-endian sizes, outside protobuf)::

    [4 total size][4 command size][BaseCommand]                              a simple command
    [4 total size][4 command size][BaseCommand][message]                     SEND and MESSAGE

    message = [2 magic 0x0E01][4 CRC32C][4 metadata size][MessageMetadata][payload]

``total size`` counts every byte after itself; the CRC32C covers every byte after itself (metadata
size, metadata and payload).  ``message`` is what a producer sends, what a topic entry holds and
what a consumer receives: one codec for all three (:func:`encode_message`, :func:`decode_message`).
A batch's payload is, per message, ``[4 size][SingleMessageMetadata][payload]``
(:func:`encode_batch`, :func:`decode_batch`), present exactly when the metadata has the
``num_messages_in_batch`` field.  A payload may be compressed as a whole (``compression``,
``uncompressed_size``: :mod:`spec.compression`); :func:`message_payload` undoes it and
:func:`decode_message_batch` reads a batch through it.

Everything here is pure: :func:`parse_frame` reads one frame from the front of a buffer and says
how many bytes it used, or that more bytes are needed; the caller owns the buffer.  Bad bytes are
typed errors with the byte offset of the problem: :class:`~spec.errors.TruncatedInput`,
:class:`~spec.errors.BadRecord` (a malformed command or metadata, an unknown command type),
:class:`~spec.errors.ChecksumMismatch` and :class:`~spec.errors.FrameTooLarge`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, TypeVar

import google_crc32c
from google.protobuf.message import DecodeError

from spec.compression import decompress
from spec.errors import BadRecord, ChecksumMismatch, FrameTooLarge, TruncatedInput
from spec.pb import PulsarApi_pb2 as api
from spec.wire import check_message

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MAGIC_CRC32C",
    "MESSAGE_SIZE_FRAME_PADDING",
    "PAYLOAD_COMMANDS",
    "BatchMessage",
    "Frame",
    "Message",
    "checksum_ok",
    "crc32c",
    "decode_batch",
    "decode_message",
    "decode_message_batch",
    "encode_batch",
    "encode_command",
    "encode_frame",
    "encode_message",
    "max_frame_size",
    "message_payload",
    "parse_frame",
]

# Commands.DEFAULT_MAX_MESSAGE_SIZE (broker.conf maxMessageSize's default) and
# Commands.MESSAGE_SIZE_FRAME_PADDING: a frame may be that much longer than the largest message,
# for the command and the metadata around it.
DEFAULT_MAX_MESSAGE_SIZE: Final = 5 * 1024 * 1024
MESSAGE_SIZE_FRAME_PADDING: Final = 10 * 1024
MAGIC_CRC32C: Final = 0x0E01
# The commands followed by a message on the wire.
PAYLOAD_COMMANDS: Final = frozenset({api.BaseCommand.SEND, api.BaseCommand.MESSAGE})

_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_MESSAGE_HEADER = 2 + 4 + 4  # magic, checksum, metadata size


def max_frame_size(max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> int:
    """The largest ``total size`` a connection accepts."""
    return max_message_size + MESSAGE_SIZE_FRAME_PADDING


def crc32c(data: bytes) -> int:
    return int(google_crc32c.value(data))


@dataclass(frozen=True, slots=True)
class Message:
    """A message as a producer sends it and a topic stores it: its metadata and its payload."""

    metadata: api.MessageMetadata
    payload: bytes

    @property
    def is_batch(self) -> bool:
        return self.metadata.HasField("num_messages_in_batch")


@dataclass(frozen=True, slots=True)
class BatchMessage:
    """One message of a batch: its ``SingleMessageMetadata`` and payload."""

    metadata: api.SingleMessageMetadata
    payload: bytes


@dataclass(frozen=True, slots=True)
class Frame:
    """One decoded frame.  ``message`` is set for SEND and MESSAGE; ``raw_message`` is its bytes as
    they came (magic to the end), which a broker stores unchanged.  ``checksum_ok`` is False when
    the message's CRC32C does not match (the broker answers SEND_ERROR ChecksumError), None when the
    message carries none."""

    command: api.BaseCommand
    message: Message | None = None
    raw_message: bytes = b""
    checksum_ok: bool | None = None

    @property
    def type(self) -> int:
        return int(self.command.type)


# ---------------------------------------------------------------------------------------------
# Encoding


def encode_message(metadata: api.MessageMetadata, payload: bytes) -> bytes:
    """``[magic][CRC32C][metadata size][metadata][payload]``."""
    meta = metadata.SerializeToString()
    body = _U32.pack(len(meta)) + meta + payload
    return _U16.pack(MAGIC_CRC32C) + _U32.pack(crc32c(body)) + body


def encode_command(command: api.BaseCommand) -> bytes:
    """A frame holding only ``command``."""
    cmd = command.SerializeToString()
    return _U32.pack(4 + len(cmd)) + _U32.pack(len(cmd)) + cmd


def encode_frame(command: api.BaseCommand, message: bytes) -> bytes:
    """A SEND or MESSAGE frame: ``command`` followed by ``message`` (from :func:`encode_message`,
    or a topic entry's bytes as stored)."""
    cmd = command.SerializeToString()
    return _U32.pack(4 + len(cmd) + len(message)) + _U32.pack(len(cmd)) + cmd + message


def encode_batch(messages: Sequence[BatchMessage]) -> bytes:
    """A batch payload: per message ``[4 size][SingleMessageMetadata][payload]``.  Each metadata's
    ``payload_size`` must be its payload's length."""
    out = bytearray()
    for index, message in enumerate(messages):
        if message.metadata.payload_size != len(message.payload):
            raise ValueError(
                f"batch message {index}: payload_size {message.metadata.payload_size} != {len(message.payload)}"
            )
        meta = message.metadata.SerializeToString()
        out += _U32.pack(len(meta)) + meta + message.payload
    return bytes(out)


# ---------------------------------------------------------------------------------------------
# Decoding


def parse_frame(
    buffer: bytes | bytearray | memoryview, *, max_frame_size: int = max_frame_size(), base: int = 0
) -> tuple[Frame, int] | None:
    """The frame at the front of ``buffer`` and the bytes it took, or None when more bytes are needed.

    The total size is checked against ``max_frame_size`` as soon as its four bytes are there, so an
    announced huge frame is refused before it is read.  ``base`` is added to reported offsets (the
    buffer's position in the connection's stream)."""
    if len(buffer) < 4:
        return None
    (total,) = _U32.unpack_from(buffer, 0)
    if total > max_frame_size:
        raise FrameTooLarge("frame larger than the connection allows", size=total, limit=max_frame_size)
    if total < 4:
        raise BadRecord(f"frame total size {total} leaves no room for the command size", offset=base)
    if len(buffer) < 4 + total:
        return None
    data = bytes(buffer[4 : 4 + total])
    (size,) = _U32.unpack_from(data, 0)
    if size > total - 4:
        raise BadRecord(f"command size {size} exceeds the frame's {total - 4} bytes", offset=base + 4)
    if size == 0:
        raise BadRecord("empty command", offset=base + 4)
    command = _parse(data, api.BaseCommand, 4, 4 + size, base + 4)
    rest = data[4 + size :]
    if command.type in PAYLOAD_COMMANDS:
        if not rest:
            name = api.BaseCommand.Type.Name(command.type)
            raise TruncatedInput(f"{name} without its message", offset=base + 8 + size)
        message = decode_message(rest, base=base + 8 + size, verify_checksum=False)
        return Frame(command, message, rest, checksum_ok(rest)), 4 + total
    if rest:
        raise BadRecord(
            f"{len(rest)} bytes after a {api.BaseCommand.Type.Name(command.type)} command", offset=base + 8 + size
        )
    return Frame(command), 4 + total


def checksum_ok(message: bytes) -> bool | None:
    """Whether ``message``'s CRC32C matches its bytes; None when it has no checksum header."""
    if len(message) < _MESSAGE_HEADER or _U16.unpack_from(message, 0)[0] != MAGIC_CRC32C:
        return None
    expected: int = _U32.unpack_from(message, 2)[0]
    return crc32c(message[6:]) == expected


def decode_message(data: bytes, *, base: int = 0, verify_checksum: bool = True) -> Message:
    """Decode ``[magic][CRC32C][metadata size][metadata][payload]``.

    A message without the magic is Pulsar's checksum-less form (``[metadata size][metadata][payload]``,
    from protocol versions before v6) and is read as such."""
    pos = 0
    if len(data) >= 2 and _U16.unpack_from(data, 0)[0] == MAGIC_CRC32C:
        if len(data) < _MESSAGE_HEADER:
            raise TruncatedInput("message ends inside its checksum header", offset=base + len(data))
        (expected,) = _U32.unpack_from(data, 2)
        if verify_checksum:
            actual = crc32c(data[6:])
            if actual != expected:
                raise ChecksumMismatch(
                    f"CRC32C 0x{actual:08x} of the message does not match 0x{expected:08x}", offset=base + 2
                )
        pos = 6
    if len(data) < pos + 4:
        raise TruncatedInput("message ends inside its metadata size", offset=base + len(data))
    (size,) = _U32.unpack_from(data, pos)
    start = pos + 4
    if start + size > len(data):
        raise TruncatedInput(
            f"metadata size {size} runs past the end ({len(data) - start} bytes left)", offset=base + pos
        )
    metadata = _parse(data, api.MessageMetadata, start, start + size, base)
    return Message(metadata, data[start + size :])


def decode_batch(payload: bytes, count: int, *, base: int = 0) -> tuple[BatchMessage, ...]:
    """The ``count`` messages of a batch payload; every byte must belong to one of them."""
    if count < 0:
        raise BadRecord(f"num_messages_in_batch {count} is negative", offset=base)
    out = []
    pos = 0
    for index in range(count):
        if pos + 4 > len(payload):
            raise TruncatedInput(f"batch message {index} of {count}: no size", offset=base + pos)
        (size,) = _U32.unpack_from(payload, pos)
        start = pos + 4
        if start + size > len(payload):
            raise TruncatedInput(f"batch message {index}: metadata size {size} runs past the end", offset=base + pos)
        single = _parse(payload, api.SingleMessageMetadata, start, start + size, base)
        pos = start + size
        length = single.payload_size
        if length < 0 or pos + length > len(payload):
            raise TruncatedInput(f"batch message {index}: payload_size {length} runs past the end", offset=base + start)
        out.append(BatchMessage(single, payload[pos : pos + length]))
        pos += length
    if pos != len(payload):
        raise BadRecord(f"{len(payload) - pos} bytes after the {count} messages of a batch", offset=base + pos)
    return tuple(out)


def message_payload(message: Message, *, base: int = 0) -> bytes:
    """``message``'s payload uncompressed (its metadata's ``compression`` undone; as it is when
    NONE).  Raises :class:`~spec.compression.CorruptPayload` (offset ``base``: where the payload
    starts) when it does not decompress to its ``uncompressed_size``."""
    meta = message.metadata
    return decompress(meta.compression, message.payload, meta.uncompressed_size, base=base)


def decode_message_batch(message: Message, *, base: int = 0) -> tuple[BatchMessage, ...]:
    """The messages of a batch ``message``, its payload decompressed first (:func:`message_payload`)."""
    count = message.metadata.num_messages_in_batch
    return decode_batch(message_payload(message, base=base), count, base=base)


_M = TypeVar("_M", api.BaseCommand, api.MessageMetadata, api.SingleMessageMetadata)


def _parse(data: bytes, message_type: type[_M], start: int, end: int, base: int) -> _M:
    # The structural walk names the byte offset of any damage (the runtime cannot), then parses.
    check_message(data, message_type.DESCRIPTOR, base=base, start=start, end=end)
    message = message_type()
    try:
        message.ParseFromString(data[start:end])
    except DecodeError as exc:  # pragma: no cover - the walk above rejects what the runtime would
        raise BadRecord(f"{message_type.DESCRIPTOR.full_name}: {exc}", offset=base + start) from None
    return message
