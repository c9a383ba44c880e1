"""The topic-entry codec (spec.topic_entry): one format for every topic entry the project writes.

Three properties: every entry round-trips; every byte string either decodes or raises
``BadTopicEntry`` with an offset inside it; and the bytes of a few fixed entries are pinned, so a
change of format is a deliberate edit of this file (the broker's on-disk histories depend on it).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.broker import encode_entry, encode_keyed_message
from reference import buffer as tb
from spec.errors import BadTopicEntry, InputError
from spec.frame import crc32c
from spec.topic_entry import (
    TXN_ABORT_MARKER,
    TXN_COMMIT_MARKER,
    BatchedMessage,
    TopicEntry,
    UnsupportedTopicEntryFormat,
    decode_batch_payload,
    decode_frame,
    decode_topic_entry,
    encode_batch_payload,
    encode_topic_entry,
    iter_batch_payload,
    message_metadata,
)
from spec.types import Position, TxnID

U64 = st.integers(0, 2**64 - 1)
KEYS = st.none() | st.text(max_size=8)
BATCHES = st.lists(st.builds(BatchedMessage, st.binary(max_size=12), KEYS), min_size=1, max_size=4).map(tuple)


@st.composite
def entries(draw: st.DrawFn) -> TopicEntry:
    batch = draw(st.none() | BATCHES)
    return TopicEntry(
        producer_name=draw(st.text(max_size=10)),
        sequence_id=draw(U64),
        publish_time=draw(U64),
        txn_id=draw(st.none() | st.builds(TxnID, U64, U64)),
        marker_type=draw(st.none() | st.sampled_from([TXN_COMMIT_MARKER, TXN_ABORT_MARKER])),
        deliver_at=draw(st.none() | st.integers(-(2**63), 2**63 - 1)),
        partition_key=draw(KEYS),
        null_value=draw(st.booleans()),
        payload=b"" if batch is not None else draw(st.binary(max_size=16)),
        batch=batch,
    )


@given(entries())
def test_every_entry_round_trips(entry: TopicEntry) -> None:
    assert decode_topic_entry(encode_topic_entry(entry)) == entry


@given(entries())
def test_the_frame_is_the_metadata_then_the_payload_as_stored(entry: TopicEntry) -> None:
    data = encode_topic_entry(entry)
    frame = decode_frame(data)
    assert frame.num_messages_in_batch == (None if entry.batch is None else len(entry.batch))
    assert data[frame.payload_offset :] == frame.entry.payload
    stored = entry.payload if entry.batch is None else encode_batch_payload(entry.batch)
    assert frame.entry.payload == stored
    assert data[:2] == b"\x0e\x01" and int.from_bytes(data[2:6], "big") == crc32c(data[6:])
    assert (
        int.from_bytes(data[6:10], "big")
        == frame.payload_offset - 10
        == len(message_metadata(entry).SerializeToString())
    )


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_a_located_error(data: bytes) -> None:
    try:
        decode_topic_entry(data, where="w")
    except BadTopicEntry as exc:
        assert 0 <= exc.offset <= len(data) and str(exc).startswith("w: ")
        assert isinstance(exc, InputError) and isinstance(exc, ValueError)


@given(entries(), st.data())
def test_a_cut_entry_is_an_error_or_a_shorter_entry(entry: TopicEntry, data: st.DataObject) -> None:
    whole = encode_topic_entry(entry)
    cut = data.draw(st.integers(0, len(whole) - 1))
    try:
        decoded = decode_topic_entry(whole[:cut])
    except BadTopicEntry as exc:
        assert 0 <= exc.offset <= cut
    else:  # only a single message's payload can be cut without the frame noticing
        assert entry.batch is None and decoded.payload == entry.payload[: len(decoded.payload)]


def _framed(body: bytes) -> bytes:
    return b"\x0e\x01" + crc32c(body).to_bytes(4, "big") + body


@pytest.mark.parametrize(
    ("data", "reason", "offset"),
    [
        (b"\x0e\x01\x00\x00", "no room for the checksum and the 4-byte metadata size", 4),
        (_framed(b"\x00\x00\x00\x09abc"), "metadata of 9 bytes runs past the end", 10),
        (_framed(b"\x00\x00\x00\x02\x0a\x00"), "lacks a required field", 10),
        (_framed(b"\x00\x00\x00\x01\xff"), "MessageMetadata", 10),
        (_framed(b"\x00\x00\x00\x00")[:-1] + b"\x01", "CRC32C", 2),
        (b"\x00\x00", "no topic-entry magic 0x0e01", 0),
    ],
)
def test_bad_frames_are_located(data: bytes, reason: str, offset: int) -> None:
    with pytest.raises(BadTopicEntry, match=reason) as caught:
        decode_topic_entry(data)
    assert caught.value.offset == offset and reason in caught.value.reason


def test_the_earlier_format_is_refused_by_name() -> None:
    """Entries txnmodel wrote before topic entries became Pulsar's bytes ([size][metadata][payload])
    are not read: the error says which format they are in."""
    meta = message_metadata(TopicEntry(producer_name="txnmodel", sequence_id=4, publish_time=1, payload=b"x"))
    raw = meta.SerializeToString()
    old = len(raw).to_bytes(4, "big") + raw + b"x"
    with pytest.raises(UnsupportedTopicEntryFormat, match="earlier topic-entry format") as caught:
        decode_topic_entry(old, where="ledger 3 entry 4")
    assert caught.value.offset == 0 and str(caught.value).startswith("ledger 3 entry 4: ")


def test_bad_batches_are_located_and_the_messages_before_are_kept() -> None:
    payload = encode_batch_payload([BatchedMessage(b"a", "k"), BatchedMessage(b"bc")])
    assert decode_batch_payload(payload, 2) == (BatchedMessage(b"a", "k"), BatchedMessage(b"bc"))
    seen: list[BatchedMessage] = []
    with pytest.raises(BadTopicEntry, match="batch message 2 is cut short") as caught:
        seen.extend(iter_batch_payload(payload, 3, base=10))
    assert seen == [BatchedMessage(b"a", "k"), BatchedMessage(b"bc")] and caught.value.offset == 10 + len(payload)
    with pytest.raises(BadTopicEntry, match="1 bytes after the 2 messages") as caught:
        decode_batch_payload(payload + b"x", 2)
    assert caught.value.offset == len(payload)
    with pytest.raises(BadTopicEntry, match="runs past the end"):
        decode_batch_payload(payload[:-1], 2)


# The bytes the broker writes: Pulsar's message bytes, magic 0x0E01 and CRC32C first (a deliberate
# format change edits these).  The commit marker's producer is pulsar.txn.marker, sequence id -1 (TB-16).
PINNED = [
    (
        encode_entry(
            tb.LogEntry(Position(3, 4), tb.EntryKind.TXN_DATA, TxnID(1, 2)), b"body", 99, 1234, partition_key="k"
        ),
        "0e01316141040000001b0a0874786e6d6f64656c100418d20932016b980163b00102b80101626f6479",
    ),
    (
        encode_entry(tb.LogEntry(Position(3, 5), tb.EntryKind.TXN_COMMIT, TxnID(1, 2)), publish_time=1235),
        "0e01433631640000002a0a1170756c7361722e74786e2e6d61726b657210ffffffffffffffffff0118d309a00115b00102b80101",
    ),
    (
        encode_entry(
            tb.LogEntry(Position(3, 6), tb.EntryKind.NORMAL),
            publish_time=7,
            batch=[BatchedMessage(b"a", "x"), BatchedMessage(b"bc")],
        ),
        "0e01427aff4d000000100a0874786e6d6f64656c10061807580200000007120178180140006100000004180240016263",
    ),
    (
        encode_keyed_message("t", None, 8),
        "0e01b1770e5d000000200a1474786e6d6f64656c2d74622d736e617073686f7410001808320174c80101",
    ),
]


@pytest.mark.parametrize(("data", "pinned"), PINNED)
def test_the_broker_writes_the_pinned_bytes(data: bytes, pinned: str) -> None:
    assert data.hex() == pinned


def test_a_marker_written_by_the_broker_reads_back_as_the_buffer_classifies_it() -> None:
    """TB-16: the broker's entries and the buffer's classification agree through the codec."""
    decoded = decode_topic_entry(bytes.fromhex(PINNED[1][1]))
    assert decoded.marker_type == TXN_COMMIT_MARKER and decoded.txn_id == TxnID(1, 2) and decoded.payload == b""
    assert tb.classify_entry(Position(3, 5), decoded.marker_type, decoded.txn_id) == tb.LogEntry(
        Position(3, 5), tb.EntryKind.TXN_COMMIT, TxnID(1, 2)
    )
