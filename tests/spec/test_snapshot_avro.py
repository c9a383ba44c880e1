"""spec.snapshot_avro: the transaction buffer snapshots in Pulsar's Avro form.

The schema facts are restated here by hand (record names, namespaces, alphabetical field order,
nullable unions), the known bytes are hand-encoded from the Avro specification, and the round
trips and damage cases run against the codec.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import fastavro
import pytest
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from spec import snapshot_avro as sa
from spec.errors import BadRecord, InputError, TruncatedInput
from spec.pb import TransactionBufferSnapshot_pb2 as tb

I64 = st.integers(-(1 << 63), (1 << 63) - 1)
V1 = "org.apache.pulsar.broker.transaction.buffer.metadata"
V2 = "org.apache.pulsar.broker.transaction.buffer.metadata.v2"


def _zigzag(value: int) -> bytes:
    """Avro's long encoding, written independently of the codec."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _string(text: str) -> bytes:
    raw = text.encode()
    return _zigzag(len(raw)) + raw


# ---------------------------------------------------------------------------------------------
# The schemas, as ReflectData.AllowNull derives them.


def test_snapshot_schema_is_what_reflect_data_derives() -> None:
    abort = {
        "type": "record",
        "name": "AbortTxnMetadata",
        "namespace": V1,
        "fields": [
            {"name": "entryId", "type": "long"},
            {"name": "ledgerId", "type": "long"},
            {"name": "txnIdLeastBits", "type": "long"},
            {"name": "txnIdMostBits", "type": "long"},
        ],
    }
    expected = {
        "type": "record",
        "name": "TransactionBufferSnapshot",
        "namespace": V1,
        "fields": [
            {
                "name": "aborts",
                "type": ["null", {"type": "array", "items": abort, "java-class": "java.util.List"}],
                "default": None,
            },
            {"name": "maxReadPositionEntryId", "type": "long"},
            {"name": "maxReadPositionLedgerId", "type": "long"},
            {"name": "topicName", "type": ["null", "string"], "default": None},
        ],
    }
    assert expected == sa.SNAPSHOT_SCHEMA


def _fields(schema: dict[str, Any]) -> list[str]:
    return [f["name"] for f in schema["fields"]]


def _named(schema: Any, found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    if isinstance(schema, list):
        for branch in schema:
            _named(branch, found)
    elif isinstance(schema, dict):
        if schema["type"] == "record":
            found[f"{schema['namespace']}.{schema['name']}"] = schema
            for field in schema["fields"]:
                _named(field["type"], found)
        elif schema["type"] == "array":
            _named(schema["items"], found)
    return found


def test_segment_and_index_schemas() -> None:
    segment = _named(sa.SEGMENT_SCHEMA, {})
    assert _fields(segment[f"{V2}.TransactionBufferSnapshotSegment"]) == [
        "aborts",
        "persistentPositionEntryId",
        "persistentPositionLedgerId",
        "sequenceId",
        "topicName",
    ]
    assert _fields(segment[f"{V2}.TxnIDData"]) == ["leastSigBits", "mostSigBits"]
    indexes = _named(sa.INDEXES_SCHEMA, {})
    assert _fields(indexes[f"{V2}.TransactionBufferSnapshotIndexes"]) == ["indexList", "snapshot", "topicName"]
    assert _fields(indexes[f"{V2}.TransactionBufferSnapshotIndex"]) == [
        "abortedMarkEntryID",
        "abortedMarkLedgerID",
        "segmentEntryID",
        "segmentLedgerID",
        "sequenceID",
    ]
    assert _fields(indexes[f"{V2}.TransactionBufferSnapshotIndexesMetadata"]) == [
        "aborts",
        "maxReadPositionEntryId",
        "maxReadPositionLedgerId",
    ]
    assert _fields(indexes[f"{V2}.TxnIDData"]) == ["leastSigBits", "mostSigBits"]


@pytest.mark.parametrize("schema", [sa.SNAPSHOT_SCHEMA, sa.SEGMENT_SCHEMA, sa.INDEXES_SCHEMA])
def test_only_primitive_longs_are_not_nullable(schema: dict[str, Any]) -> None:
    for record in _named(schema, {}).values():
        names = _fields(record)
        assert names == sorted(names)  # Java String order; all names are ASCII
        for field in record["fields"]:
            if field["type"] == "long":
                assert "default" not in field
            else:
                assert field["type"][0] == "null" and len(field["type"]) == 2 and field["default"] is None
    fastavro.parse_schema(json.loads(json.dumps(schema)))  # valid Avro, and plain JSON


def test_topics() -> None:
    assert sa.SNAPSHOT_TOPICS == {
        "TransactionBufferSnapshot": "__transaction_buffer_snapshot",
        "TransactionBufferSnapshotSegment": "__transaction_buffer_snapshot_segments",
        "TransactionBufferSnapshotIndexes": "__transaction_buffer_snapshot_indexes",
    }


# ---------------------------------------------------------------------------------------------
# Known bytes.

TOPIC = "persistent://public/default/t1"


def test_snapshot_known_bytes() -> None:
    # The record of Pulsar's PulsarInternalAvroTypesTrustTest: maxRead 1:2, one abort (3,4).
    snapshot = tb.TransactionBufferSnapshot(
        topicName=TOPIC,
        maxReadPositionLedgerId=1,
        maxReadPositionEntryId=2,
        aborts=[tb.AbortTxnMetadata(txnIdMostBits=3, txnIdLeastBits=4, ledgerId=0, entryId=0)],
    )
    data = (
        b"\x02"  # aborts: union branch 1 (array)
        b"\x02"  # one item in this block
        b"\x00\x00\x08\x06"  # entryId 0, ledgerId 0, txnIdLeastBits 4, txnIdMostBits 3
        b"\x00"  # end of array
        b"\x04"  # maxReadPositionEntryId 2
        b"\x02"  # maxReadPositionLedgerId 1
        b"\x02" + _string(TOPIC)  # topicName: union branch 1 (string)
    )
    assert sa.encode_snapshot(snapshot) == data
    assert sa.decode_snapshot(data) == snapshot


def test_segment_known_bytes() -> None:
    segment = tb.TransactionBufferSnapshotSegment(
        topicName="t",
        sequenceId=7,
        persistentPositionLedgerId=-1,
        persistentPositionEntryId=300,
        aborts=[tb.TxnIDData(mostSigBits=1, leastSigBits=2), tb.TxnIDData(mostSigBits=1, leastSigBits=3)],
    )
    data = (
        b"\x02\x04"
        + b"\x04\x02"
        + b"\x06\x02"
        + b"\x00"  # aborts: [(least 2, most 1), (least 3, most 1)]
        + _zigzag(300)  # persistentPositionEntryId
        + b"\x01"  # persistentPositionLedgerId -1
        + b"\x0e"  # sequenceId 7
        + b"\x02\x02t"  # topicName "t"
    )
    assert _zigzag(300) == b"\xd8\x04"
    assert sa.encode_segment(segment) == data
    assert sa.decode_segment(data) == segment


def test_indexes_known_bytes() -> None:
    indexes = tb.TransactionBufferSnapshotIndexes(
        topicName="t",
        indexList=[
            tb.TransactionBufferSnapshotIndex(
                sequenceID=1, abortedMarkLedgerID=2, abortedMarkEntryID=3, segmentLedgerID=4, segmentEntryID=5
            )
        ],
        snapshot=tb.TransactionBufferSnapshotIndexesMetadata(
            maxReadPositionLedgerId=6, maxReadPositionEntryId=7, aborts=[tb.TxnIDData(mostSigBits=0, leastSigBits=9)]
        ),
    )
    data = (
        b"\x02\x02"
        + b"\x06\x04\x0a\x08\x02"
        + b"\x00"  # indexList: entry 3, ledger 2, seg entry 5, seg ledger 4, seq 1
        + b"\x02"  # snapshot: union branch 1
        + b"\x02\x02"
        + b"\x12\x00"
        + b"\x00"  # aborts: [(least 9, most 0)]
        + b"\x0e\x0c"  # maxReadPositionEntryId 7, maxReadPositionLedgerId 6
        + b"\x02\x02t"  # topicName "t"
    )
    assert sa.encode_indexes(indexes) == data
    assert sa.decode_indexes(data) == indexes


def test_nulls_and_empty_lists() -> None:
    # What Pulsar's round-trip test encodes: a topic name, an empty index list, no metadata.
    indexes = tb.TransactionBufferSnapshotIndexes(topicName=TOPIC)
    data = b"\x02\x00" + b"\x00" + b"\x02" + _string(TOPIC)
    assert sa.encode_indexes(indexes) == data
    assert sa.decode_indexes(data) == indexes
    # A null list (never written by Pulsar) reads as empty; it is written back as an empty array.
    null_list = b"\x00" + b"\x00" + b"\x02" + _string(TOPIC)
    assert sa.decode_indexes(null_list) == indexes
    assert sa.encode_indexes(sa.decode_indexes(null_list)) == data
    # A null topic name stays unset; unset longs are Java's 0.
    assert sa.decode_snapshot(b"\x00\x00\x00\x00") == tb.TransactionBufferSnapshot(
        maxReadPositionLedgerId=0, maxReadPositionEntryId=0
    )
    assert sa.encode_snapshot(tb.TransactionBufferSnapshot()) == b"\x02\x00\x00\x00\x00"


def test_blocks_with_byte_sizes_are_read() -> None:
    # Avro lets a writer give a block as (-count, byte size); Java's Avro reads it.
    item = b"\x04\x02"
    data = b"\x02" + _zigzag(-2) + _zigzag(2 * len(item)) + item * 2 + b"\x00" + b"\x00\x00\x0e" + b"\x00"
    segment = sa.decode_segment(data)
    assert [(a.mostSigBits, a.leastSigBits) for a in segment.aborts] == [(1, 2), (1, 2)]
    wrong_size = b"\x02" + _zigzag(-2) + _zigzag(3) + item * 2 + b"\x00" + b"\x00\x00\x0e" + b"\x00"
    with pytest.raises(BadRecord) as info:
        sa.decode_segment(wrong_size)
    assert info.value.offset == 1


# ---------------------------------------------------------------------------------------------
# Round trips.

TXN_IDS = st.lists(st.builds(tb.TxnIDData, mostSigBits=I64, leastSigBits=I64), max_size=4)
TOPICS = st.none() | st.text(max_size=20)


def _with_topic(message: Message, topic: str | None) -> Message:
    if topic is not None:
        message.topicName = topic  # type: ignore[attr-defined]
    return message


snapshots = st.builds(
    lambda topic, ledger, entry, aborts: _with_topic(
        tb.TransactionBufferSnapshot(maxReadPositionLedgerId=ledger, maxReadPositionEntryId=entry, aborts=aborts),
        topic,
    ),
    TOPICS,
    I64,
    I64,
    st.lists(
        st.builds(tb.AbortTxnMetadata, txnIdMostBits=I64, txnIdLeastBits=I64, ledgerId=I64, entryId=I64), max_size=4
    ),
)
segments = st.builds(
    lambda topic, seq, ledger, entry, aborts: _with_topic(
        tb.TransactionBufferSnapshotSegment(
            sequenceId=seq, persistentPositionLedgerId=ledger, persistentPositionEntryId=entry, aborts=aborts
        ),
        topic,
    ),
    TOPICS,
    I64,
    I64,
    I64,
    TXN_IDS,
)


@st.composite
def indexes_records(draw: st.DrawFn) -> tb.TransactionBufferSnapshotIndexes:
    record = tb.TransactionBufferSnapshotIndexes(
        indexList=draw(
            st.lists(
                st.builds(
                    tb.TransactionBufferSnapshotIndex,
                    sequenceID=I64,
                    abortedMarkLedgerID=I64,
                    abortedMarkEntryID=I64,
                    segmentLedgerID=I64,
                    segmentEntryID=I64,
                ),
                max_size=4,
            )
        )
    )
    _with_topic(record, draw(TOPICS))
    if draw(st.booleans()):
        record.snapshot.CopyFrom(
            tb.TransactionBufferSnapshotIndexesMetadata(
                maxReadPositionLedgerId=draw(I64), maxReadPositionEntryId=draw(I64), aborts=draw(TXN_IDS)
            )
        )
    return record


Codec = tuple[Callable[[Any], bytes], Callable[..., Message]]
CODECS: dict[str, tuple[Codec, st.SearchStrategy[Any]]] = {
    "snapshot": ((sa.encode_snapshot, sa.decode_snapshot), snapshots),
    "segment": ((sa.encode_segment, sa.decode_segment), segments),
    "indexes": ((sa.encode_indexes, sa.decode_indexes), indexes_records()),
}
records = st.sampled_from(sorted(CODECS)).flatmap(lambda k: st.tuples(st.just(k), CODECS[k][1]))
encoded = records.map(lambda kr: (kr[0], CODECS[kr[0]][0][0](kr[1])))


@given(records)
def test_proto_to_avro_to_proto(kind_and_record: tuple[str, Message]) -> None:
    kind, record = kind_and_record
    (encode, decode), _ = CODECS[kind]
    data = encode(record)
    assert decode(data) == record
    assert encode(decode(data)) == data  # Avro -> proto -> Avro is byte-identical


@given(records)
def test_bytes_are_plain_avro(kind_and_record: tuple[str, Message]) -> None:
    # An independent Avro reader (fastavro with the JSON schema, no codec) reads the same bytes.
    kind, record = kind_and_record
    (encode, _), _ = CODECS[kind]
    data = encode(record)
    schema = {"snapshot": sa.SNAPSHOT_SCHEMA, "segment": sa.SEGMENT_SCHEMA, "indexes": sa.INDEXES_SCHEMA}[kind]
    stream = io.BytesIO(data)
    datum = fastavro.schemaless_reader(stream, fastavro.parse_schema(json.loads(json.dumps(schema))), None)
    assert stream.tell() == len(data)
    assert isinstance(datum, dict)
    topic = record.topicName if record.HasField("topicName") else None  # type: ignore[attr-defined]
    assert datum["topicName"] == topic


# ---------------------------------------------------------------------------------------------
# Damage.

WHERE = "__transaction_buffer_snapshot@public/default"


def _typed_error_or_consistent(kind: str, data: bytes) -> InputError | Message:
    (encode, decode), _ = CODECS[kind]
    try:
        record: Message = decode(data, where=WHERE)
    except InputError as exc:
        assert isinstance(exc, TruncatedInput | BadRecord), type(exc)
        assert 0 <= exc.offset <= len(data)
        assert str(exc).startswith(f"{WHERE}: ")
        return exc
    # It decoded: then it is a record whose own encoding decodes to it again.
    assert decode(encode(record)) == record
    return record


@given(encoded)
def test_every_truncation_is_a_truncated_input(kind_and_data: tuple[str, bytes]) -> None:
    kind, data = kind_and_data
    for cut in range(len(data)):
        outcome = _typed_error_or_consistent(kind, data[:cut])
        # An Avro record has no framing: every proper prefix ends inside some value.
        assert isinstance(outcome, TruncatedInput), (cut, outcome)


@given(encoded, st.integers(0, 10_000), st.integers(1, 255))
def test_flipped_bytes(kind_and_data: tuple[str, bytes], where: int, mask: int) -> None:
    kind, data = kind_and_data
    at = where % len(data)
    _typed_error_or_consistent(kind, data[:at] + bytes([data[at] ^ mask]) + data[at + 1 :])


@given(st.sampled_from(sorted(CODECS)), st.binary(max_size=80))
def test_garbage(kind: str, data: bytes) -> None:
    _typed_error_or_consistent(kind, data)


@given(encoded, st.binary(min_size=1, max_size=8))
def test_trailing_bytes(kind_and_data: tuple[str, bytes], extra: bytes) -> None:
    kind, data = kind_and_data
    outcome = _typed_error_or_consistent(kind, data + extra)
    assert isinstance(outcome, BadRecord) and outcome.offset == len(data)
    assert "left over" in str(outcome)


SNAPSHOT_TAIL = b"\x00\x00\x00"  # maxReadPositionEntryId 0, maxReadPositionLedgerId 0, topicName null


@pytest.mark.parametrize(
    ("name", "data", "error", "offset"),
    [
        ("union branch 2", b"\x04" + SNAPSHOT_TAIL, BadRecord, 0),
        ("union branch -1", b"\x01" + SNAPSHOT_TAIL, BadRecord, 0),
        ("topic union branch 2", b"\x00\x00\x00\x04", BadRecord, 3),
        ("negative string length", b"\x00\x00\x00\x02\x01", BadRecord, 4),
        ("string past the end", b"\x00\x00\x00\x02\x0aab", TruncatedInput, 4),
        ("string not UTF-8", b"\x00\x00\x00\x02\x06ab\xff", BadRecord, 7),
        ("long wider than 64 bits", b"\x00" + b"\xff" * 9 + b"\x7f" + b"\x00\x00", BadRecord, 1),
        ("long of 11 bytes", b"\x00" + b"\xff" * 10 + b"\x01" + b"\x00\x00", BadRecord, 1),
        ("long cut", b"\x00\x80", TruncatedInput, 1),
        ("array item cut", b"\x02\x02\x00\x00", TruncatedInput, 4),
        ("array without its end", b"\x02\x02\x00\x00\x00\x00", TruncatedInput, 6),
        ("negative block size", b"\x02\x01\x01", BadRecord, 2),
        ("empty input", b"", TruncatedInput, 0),
    ],
)
def test_known_damage(name: str, data: bytes, error: type[InputError], offset: int) -> None:
    with pytest.raises(error) as info:
        sa.decode_snapshot(data)
    assert type(info.value) is error
    assert info.value.offset == offset, str(info.value)  # type: ignore[attr-defined]


def test_extreme_longs_survive() -> None:
    lo, hi = -(1 << 63), (1 << 63) - 1
    snapshot = tb.TransactionBufferSnapshot(maxReadPositionLedgerId=hi, maxReadPositionEntryId=lo)
    data = sa.encode_snapshot(snapshot)
    assert data == b"\x02\x00" + b"\xff" * 9 + b"\x01" + b"\xfe" + b"\xff" * 8 + b"\x01" + b"\x00"
    assert sa.decode_snapshot(data) == snapshot
