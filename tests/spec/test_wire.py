"""spec.wire.check_message: every kind of damage is reported at its exact byte offset.

Each case below is hand-made: the bytes are written out with the offset of the damage counted
by hand, so the test pins the checker's offsets, not just "some error".  The fuzz test at the end
checks the other half of the contract: whatever the checker accepts, the protobuf runtime parses
(so a reader that checks first never meets the runtime's untyped "Error parsing message").
"""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError, Message
from hypothesis import given
from hypothesis import strategies as st

from spec.errors import BadRecord, InputError, TruncatedInput
from spec.pb import PulsarApi_pb2 as api
from spec.pb import PulsarTransactionMetadata_pb2 as tc
from spec.pb import TransactionPendingAck_pb2 as pa
from spec.wire import check_message

TC = tc.TransactionMetadataEntry
PA = pa.PendingAckMetadataEntry
ACK = pa.PendingAckMetadata
BATCH = pa.BatchedPendingAckMetadataEntry

# (name, message type, bytes, error type, offset)
CASES: list[tuple[str, type[Message], bytes, type[InputError], int]] = [
    ("tag varint cut", TC, b"\x08\x00\x90", TruncatedInput, 2),
    ("value varint cut", TC, b"\x08\x00\x10\xff", TruncatedInput, 3),
    ("length varint cut", PA, b"\x08\x01\x2a\x80", TruncatedInput, 3),
    ("length past the end", PA, b"\x08\x01\x2a\x05\x08\x01", TruncatedInput, 3),
    ("wire type 6", TC, b"\x08\x00\x16", BadRecord, 2),
    ("wire type 7", TC, b"\x08\x00\x17", BadRecord, 2),
    ("start group", TC, b"\x0b", BadRecord, 0),
    ("end group", TC, b"\x08\x00\x0c", BadRecord, 2),
    ("field number 0", TC, b"\x08\x00\x00", BadRecord, 2),
    ("field number 2^29", TC, b"\x08\x00\x80\x80\x80\x80\x10\x00", BadRecord, 2),
    ("varint where LEN expected", PA, b"\x08\x01\x28\x05", BadRecord, 2),
    ("LEN where varint expected", TC, b"\x12\x00", BadRecord, 0),
    ("fixed64 where varint expected", TC, b"\x08\x00\x11" + bytes(8), BadRecord, 2),
    ("varint wider than 64 bits", TC, b"\x08\x00\x10" + b"\xff" * 9 + b"\x7f", BadRecord, 3),
    ("varint of 11 bytes", TC, b"\x10" + b"\xff" * 10 + b"\x01", BadRecord, 1),
    ("unknown enum number", TC, b"\x08\x09", BadRecord, 1),
    ("unknown status", TC, b"\x08\x03\x20\x01\x28\x07", BadRecord, 5),
    ("negative enum number", PA, b"\x08" + b"\xff" * 9 + b"\x01", BadRecord, 1),
    ("unknown ack type", PA, b"\x08\x01\x10\x02", BadRecord, 3),
    ("string not UTF-8", TC, b"\x08\x00\x32\x03ab\xff", BadRecord, 6),
    ("owner not UTF-8", TC, b"\x08\x00\x62\x02\xc3\x28", BadRecord, 4),
    ("nested required field missing", PA, b"\x08\x01\x2a\x02\x08\x01", BadRecord, 4),
    ("nested varint cut at the nested end", PA, b"\x08\x01\x2a\x03\x08\x01\x10\x05", TruncatedInput, 7),
    ("nested subscription missing topic", TC, b"\x08\x02\x3a\x03\x12\x01s", BadRecord, 4),
    ("packed varint cut", ACK, b"\x08\x01\x10\x02\x1a\x02\x05\xff\x20\x01", TruncatedInput, 7),
    ("unknown fixed64 cut", TC, b"\x08\x00\x79\x01\x02\x03", TruncatedInput, 3),
    ("unknown fixed32 cut", TC, b"\x08\x00\x7d\x01", TruncatedInput, 3),
    ("unknown LEN past the end", TC, b"\x08\x00\x7a\x09abc", TruncatedInput, 3),
    ("top-level required missing", ACK, b"\x08\x01", BadRecord, 0),
    (
        "damage in the second record of a batch",
        BATCH,
        b"\x0a\x02\x08\x01" + b"\x0a\x04\x08\x01\x10\x05",
        BadRecord,
        9,
    ),
]


@pytest.mark.parametrize(("name", "message", "data", "error", "offset"), CASES, ids=[c[0] for c in CASES])
def test_damage_is_reported_where_it_is(
    name: str, message: type[Message], data: bytes, error: type[InputError], offset: int
) -> None:
    with pytest.raises(error) as info:
        check_message(data, message.DESCRIPTOR)
    assert type(info.value) is error
    assert info.value.offset == offset, str(info.value)
    assert f"at byte offset {offset}" in str(info.value)


@pytest.mark.parametrize(("name", "message", "data", "error", "offset"), CASES, ids=[c[0] for c in CASES])
def test_offsets_shift_with_base_and_start(
    name: str, message: type[Message], data: bytes, error: type[InputError], offset: int
) -> None:
    prefix = b"\x0e\x01\x00\x01"
    # The same bytes behind a prefix, checked from `start`: offsets are into the whole buffer.
    with pytest.raises(error) as info:
        check_message(prefix + data, message.DESCRIPTOR, start=len(prefix))
    assert info.value.offset == offset + len(prefix)
    # The bytes alone with `base`: offsets are as if the prefix were there.
    with pytest.raises(error) as info:
        check_message(data, message.DESCRIPTOR, base=len(prefix))
    assert info.value.offset == offset + len(prefix)


def test_end_bounds_the_walk() -> None:
    data = b"\x08\x00\x10\x05" + b"\xff\xff"
    check_message(data, TC.DESCRIPTOR, end=4)
    with pytest.raises(TruncatedInput) as info:
        check_message(data, TC.DESCRIPTOR, end=5)
    assert info.value.offset == 4


def test_what_the_runtime_writes_passes() -> None:
    entry = PA(pending_ack_op=pa.ABORT, ack_type=api.CommandAck.Individual, txnid_least_bits=1)
    entry.pending_ack_metadata.add(ledgerId=3, entryId=4, ack_set=[-1, 7], batch_size=70)
    check_message(entry.SerializeToString(), PA.DESCRIPTOR)
    # Unknown fields of every non-group wire type are skipped, as a protobuf reader does.
    check_message(b"\x08\x00" + b"\x78\x01" + b"\x79" + bytes(8) + b"\x7a\x01z" + b"\x7d" + bytes(4), TC.DESCRIPTOR)


def _sample_records() -> list[tuple[type[Message], bytes]]:
    entry = TC(metadata_op=tc.TransactionMetadataEntry.ADD_SUBSCRIPTION, txnid_least_bits=300, owner="b")
    entry.subscriptions.add(topic="persistent://t", subscription="sub")
    entry.partitions.extend(["p1", "p2"])
    ack = PA(pending_ack_op=pa.ACK, ack_type=api.CommandAck.Cumulative, txnid_most_bits=2)
    ack.pending_ack_metadata.add(ledgerId=1, entryId=2, ack_set=[-2, 3], batch_size=65)
    batch = BATCH(pending_ack_logs=[ack, ack])
    marker = api.MessageMetadata(producer_name="pulsar.txn.marker", sequence_id=1, publish_time=2, marker_type=21)
    return [
        (TC, entry.SerializeToString()),
        (PA, ack.SerializeToString()),
        (BATCH, batch.SerializeToString()),
        (api.MessageMetadata, marker.SerializeToString()),
    ]


SAMPLES = _sample_records()


@given(
    st.sampled_from(SAMPLES),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255), st.sampled_from("sid")), min_size=1, max_size=4),
)
def test_accepted_bytes_always_parse(sample: tuple[type[Message], bytes], edits: list[tuple[int, int, str]]) -> None:
    message, original = sample
    data = bytearray(original)
    for where, value, kind in edits:
        at = where % (len(data) + 1)
        if kind == "s" and at < len(data):
            data[at] = value
        elif kind == "i":
            data.insert(at, value)
        elif kind == "d" and at < len(data):
            del data[at]
    mutated = bytes(data)
    try:
        check_message(mutated, message.DESCRIPTOR)
    except InputError as exc:
        assert 0 <= getattr(exc, "offset", -1) <= len(mutated)
        return
    try:
        message.FromString(mutated)
    except DecodeError as exc:  # pragma: no cover - this is the failure the test exists to find
        pytest.fail(f"check_message accepted {mutated.hex()} but the runtime rejects it: {exc}")


@given(st.binary(max_size=64))
def test_garbage_gives_typed_errors_or_parses(data: bytes) -> None:
    for message in (TC, PA, BATCH):
        try:
            check_message(data, message.DESCRIPTOR)
        except InputError as exc:
            assert 0 <= getattr(exc, "offset", -1) <= len(data)
        else:
            message.FromString(data)
