"""The protocol frame codec: hand-encoded bytes, round trips, and a fuzz test of the parser.

The parser reads untrusted bytes from a socket: whatever it is given, it returns a frame, asks for
more bytes, or raises a typed :class:`~spec.errors.InputError` with an offset; never anything else.
"""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spec.errors import BadRecord, ChecksumMismatch, FrameTooLarge, InputError, TruncatedInput
from spec.frame import (
    DEFAULT_MAX_MESSAGE_SIZE,
    MESSAGE_SIZE_FRAME_PADDING,
    BatchMessage,
    crc32c,
    decode_batch,
    decode_message,
    encode_batch,
    encode_command,
    encode_frame,
    encode_message,
    max_frame_size,
    parse_frame,
)
from spec.pb import PulsarApi_pb2 as api

PING = api.BaseCommand(type=api.BaseCommand.PING, ping=api.CommandPing())


def _send(payload: bytes = b"hello", **meta: object) -> bytes:
    command = api.BaseCommand(type=api.BaseCommand.SEND, send=api.CommandSend(producer_id=1, sequence_id=7))
    metadata = api.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1000, **meta)  # type: ignore[arg-type]
    return encode_frame(command, encode_message(metadata, payload))


def test_crc32c_is_castagnoli() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_ping_known_bytes() -> None:
    # BaseCommand{type: PING (18), ping: {}}: tag 0x08 varint 18, tag 0x92 0x01 (field 18, LEN) length 0.
    command = b"\x08\x12\x92\x01\x00"
    frame = struct.pack(">II", 4 + len(command), len(command)) + command
    assert encode_command(PING) == frame
    parsed, used = parse_frame(frame) or (None, 0)
    assert used == len(frame) and parsed is not None and parsed.command == PING and parsed.message is None


def test_send_known_layout() -> None:
    data = _send(b"xyz")
    total, size = struct.unpack_from(">II", data, 0)
    assert total == len(data) - 4
    message = data[8 + size :]
    assert message[:2] == b"\x0e\x01"
    (checksum,) = struct.unpack_from(">I", message, 2)
    assert checksum == crc32c(message[6:])
    (meta_size,) = struct.unpack_from(">I", message, 6)
    assert message[10 + meta_size :] == b"xyz"
    frame, used = parse_frame(data) or (None, 0)
    assert frame is not None and used == len(data)
    assert frame.checksum_ok is True and frame.raw_message == message
    assert frame.message is not None and frame.message.payload == b"xyz"
    assert frame.message.metadata.producer_name == "p" and not frame.message.is_batch


def test_message_without_checksum_is_read() -> None:
    metadata = api.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2)
    meta = metadata.SerializeToString()
    plain = struct.pack(">I", len(meta)) + meta + b"body"
    assert decode_message(plain).payload == b"body"


def test_checksum_mismatch_is_reported_not_raised_by_the_frame_parser() -> None:
    data = bytearray(_send(b"payload"))
    data[-1] ^= 0xFF
    frame, _ = parse_frame(bytes(data)) or (None, 0)
    assert frame is not None and frame.checksum_ok is False
    with pytest.raises(ChecksumMismatch) as caught:
        decode_message(frame.raw_message)
    assert caught.value.offset == 2


def test_every_prefix_asks_for_more() -> None:
    data = _send(b"p" * 40) + encode_command(PING)
    first = len(_send(b"p" * 40))
    for cut in range(first):
        assert parse_frame(data[:cut]) is None
    _frame, used = parse_frame(data) or (None, 0)
    assert used == first
    second = parse_frame(data[used:])
    assert second is not None and second[0].command == PING


def test_too_large_is_refused_from_the_size_alone() -> None:
    announced = struct.pack(">I", max_frame_size() + 1)
    with pytest.raises(FrameTooLarge) as caught:
        parse_frame(announced)
    assert caught.value.limit == DEFAULT_MAX_MESSAGE_SIZE + MESSAGE_SIZE_FRAME_PADDING


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (struct.pack(">I", 2) + b"\x00\x00", BadRecord),  # no room for the command size
        (struct.pack(">II", 4, 0), BadRecord),  # empty command
        (struct.pack(">II", 5, 9) + b"\x08", BadRecord),  # command longer than the frame
        (struct.pack(">II", 6, 2) + b"\x08\x01", BadRecord),  # type 1 is no command
        (struct.pack(">II", 15, 11) + b"\x08" + b"\xff" * 10, BadRecord),  # a huge varint
        (struct.pack(">II", 6, 2) + b"\x08\x06", TruncatedInput),  # SEND without its message
        (encode_command(PING)[:-1] + b"\x00\x01", BadRecord),  # wrong nested length
    ],
)
def test_malformed_frames_are_typed(data: bytes, error: type[InputError]) -> None:
    fixed = struct.pack(">I", len(data) - 4) + data[4:]
    with pytest.raises(error):
        parse_frame(fixed)


def test_bytes_after_a_simple_command_are_refused() -> None:
    cmd = PING.SerializeToString()
    data = struct.pack(">II", 4 + len(cmd) + 3, len(cmd)) + cmd + b"abc"
    with pytest.raises(BadRecord, match="3 bytes after a PING"):
        parse_frame(data)


def test_batch_round_trip_and_damage() -> None:
    messages = [
        BatchMessage(api.SingleMessageMetadata(payload_size=len(p), partition_key=f"k{i}", sequence_id=i), p)
        for i, p in enumerate([b"a", b"", b"ccc"])
    ]
    payload = encode_batch(messages)
    assert decode_batch(payload, 3) == tuple(messages)
    with pytest.raises(BadRecord, match="after the 2 messages"):
        decode_batch(payload, 2)
    with pytest.raises(TruncatedInput):
        decode_batch(payload[:-1], 3)
    with pytest.raises(ValueError, match="payload_size"):
        encode_batch([BatchMessage(api.SingleMessageMetadata(payload_size=5), b"x")])


def test_batch_entry_flag_is_the_field_presence() -> None:
    one = decode_message(encode_message(api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0), b""))
    assert not one.is_batch
    meta = api.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0, num_messages_in_batch=1)
    assert decode_message(encode_message(meta, b"")).is_batch


# ---------------------------------------------------------------------------------------------
# Fuzz: random bytes, and valid frames with random damage.


@given(st.binary(max_size=300))
def test_parser_never_fails_untyped_on_random_bytes(data: bytes) -> None:
    with contextlib.suppress(InputError):
        parse_frame(data, max_frame_size=1 << 16)


@given(
    st.binary(max_size=60),
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
    st.integers(0, 400),
)
def test_parser_never_fails_untyped_on_damaged_frames(payload: bytes, flips: list[tuple[int, int]], cut: int) -> None:
    data = bytearray(_send(payload, partition_key="k", properties=[api.KeyValue(key="a", value="b")]))
    for at, value in flips:
        data[at % len(data)] = value
    try:
        parsed = parse_frame(bytes(data[: max(cut, 4)]), max_frame_size=1 << 16)
    except InputError as exc:
        assert getattr(exc, "offset", 0) >= 0
        return
    if parsed is not None and parsed[0].message is not None and parsed[0].message.is_batch:
        with contextlib.suppress(InputError):
            decode_batch(parsed[0].message.payload, parsed[0].message.metadata.num_messages_in_batch)


@given(st.lists(st.binary(max_size=30), min_size=1, max_size=4), st.integers(1, 50))
def test_a_stream_split_anywhere_parses_to_the_same_frames(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(_send(p) + encode_command(PING) for p in payloads)
    buffer = b""
    got = []
    for start in range(0, len(stream), chunk):
        buffer += stream[start : start + chunk]
        while (parsed := parse_frame(buffer)) is not None:
            frame, used = parsed
            buffer = buffer[used:]
            got.append(frame.message.payload if frame.message is not None else b"PING")
    assert buffer == b""
    assert got == [item for p in payloads for item in (p, b"PING")]
