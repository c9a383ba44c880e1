"""PIP-160's batched-entry envelope (spec.envelope) and batched positions (spec.types).

What "never a silent wrong decode" means here
---------------------------------------------
For every byte string, ``decode_entry`` either raises a typed input error (``TruncatedInput``,
``BadEnvelope``/``UnsupportedVersion`` or ``BadRecord``) whose offset lies in ``0..len(data)``,
or it returns exactly what the bytes say:

* ``batched`` is true exactly when the entry starts with the magic ``0E 01`` (the peek Pulsar
  does), and then the version bytes are ``00 01``;
* the records are, in order, what the protobuf wire format gives for the bytes: the repeated
  field of the batch message parsed from offset 4 for a batched entry, the one record parsed
  from offset 0 for a plain one (the protobuf runtime is the reference reader of that format);
* every record is one a log replay can apply: it carries its op, its enum fields hold declared
  values, and re-encoding the records gives an entry that decodes to the same records.

So a mutated input that still decodes is not an error of the codec: it is a different valid
entry, and the codec reports that entry faithfully.  One consequence is intrinsic to protobuf and
worth stating: protobuf messages are concatenations of fields, so cutting a record or a batch at
a field boundary leaves a valid, shorter record or batch.  No reader can detect that from the
bytes alone; BookKeeper's entry framing and checksums are what rule it out on a real ledger.
"""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError, Message
from hypothesis import given
from hypothesis import strategies as st

from spec.envelope import (
    MAGIC,
    PREFIX_LENGTH,
    VERSION,
    DecodedEntry,
    LogKind,
    decode_entry,
    encode_batch,
    encode_plain,
    is_batched,
)
from spec.errors import BadEnvelope, BadRecord, InputError, TruncatedInput, UnsupportedVersion
from spec.pb import PulsarApi_pb2 as api
from spec.pb import PulsarTransactionMetadata_pb2 as tc
from spec.pb import TransactionPendingAck_pb2 as pa
from spec.types import BatchedPosition, Position, bits_to_words, words_to_bits
from spec.wire import check_message

U64 = st.integers(0, (1 << 64) - 1)
I64 = st.integers(-(1 << 63), (1 << 63) - 1)
I32 = st.integers(-(1 << 31), (1 << 31) - 1)
NAMES = st.text(max_size=10)


def _optional(strategy: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    return st.none() | strategy


@st.composite
def tc_records(draw: st.DrawFn) -> tc.TransactionMetadataEntry:
    record = tc.TransactionMetadataEntry(
        metadata_op=draw(st.sampled_from(list(tc.TransactionMetadataEntry.TransactionMetadataOp.values()))),
        partitions=draw(st.lists(NAMES, max_size=3)),
        subscriptions=[
            api.Subscription(topic=t, subscription=s) for t, s in draw(st.lists(st.tuples(NAMES, NAMES), max_size=3))
        ],
    )
    for name, strategy in (
        ("txnid_least_bits", U64),
        ("txnid_most_bits", U64),
        ("expected_status", st.sampled_from(list(tc.TxnStatus.values()))),
        ("new_status", st.sampled_from(list(tc.TxnStatus.values()))),
        ("timeout_ms", U64),
        ("start_time", U64),
        ("last_modification_time", U64),
        ("max_local_txn_id", U64),
        ("owner", NAMES),
    ):
        value = draw(_optional(strategy))
        if value is not None:
            setattr(record, name, value)
    return record


@st.composite
def pa_records(draw: st.DrawFn) -> pa.PendingAckMetadataEntry:
    record = pa.PendingAckMetadataEntry(pending_ack_op=draw(st.sampled_from(list(pa.PendingAckOp.values()))))
    for name, strategy in (
        ("ack_type", st.sampled_from(list(api.CommandAck.AckType.values()))),
        ("txnid_least_bits", U64),
        ("txnid_most_bits", U64),
    ):
        value = draw(_optional(strategy))
        if value is not None:
            setattr(record, name, value)
    for _ in range(draw(st.integers(0, 3))):
        meta = record.pending_ack_metadata.add(
            ledgerId=draw(U64), entryId=draw(U64), ack_set=draw(st.lists(I64, max_size=4))
        )
        size = draw(_optional(I32))
        if size is not None:
            meta.batch_size = size
    return record


RECORDS = {LogKind.TRANSACTION_LOG: tc_records(), LogKind.PENDING_ACK: pa_records()}
MAX_BATCH = 16

# A kind together with a batch of its records (1..MAX_BATCH).
batches = st.sampled_from(list(LogKind)).flatmap(
    lambda kind: st.tuples(st.just(kind), st.lists(RECORDS[kind], min_size=1, max_size=MAX_BATCH))
)
plain = st.sampled_from(list(LogKind)).flatmap(lambda kind: st.tuples(st.just(kind), RECORDS[kind]))
entries = st.one_of(
    batches.map(lambda kb: (kb[0], encode_batch(kb[1], kb[0]))),
    plain.map(lambda kr: (kr[0], encode_plain(kr[1]))),
)
# For the every-offset walk: a handful of records already crosses every record boundary.
small_entries = st.one_of(
    st.sampled_from(list(LogKind)).flatmap(
        lambda kind: st.lists(RECORDS[kind], min_size=1, max_size=3).map(lambda rs: (kind, encode_batch(rs, kind)))
    ),
    plain.map(lambda kr: (kr[0], encode_plain(kr[1]))),
)

WHERE = "ledger 7 entry 3"


def _records_of(batch: Message, kind: LogKind) -> list[Message]:
    return list(getattr(batch, kind.batch_field))


def assert_says_what_its_bytes_say(data: bytes, kind: LogKind, entry: DecodedEntry) -> None:
    """The oracle of the module docstring."""
    assert entry.batched == (data[:2] == b"\x0e\x01") == is_batched(data)
    if entry.batched:
        assert data[2:4] == b"\x00\x01" and entry.version == VERSION
        expected = _records_of(kind.batch_type.FromString(data[PREFIX_LENGTH:]), kind)
    else:
        assert entry.version is None
        expected = [kind.record_type.FromString(data)]
    assert list(entry.records) == expected
    for record in entry.records:
        assert record.HasField(kind.op_field)
        check_message(record.SerializeToString(deterministic=True), kind.record_type.DESCRIPTOR)
    again = encode_batch(entry.records, kind) if entry.batched else encode_plain(entry.records[0])
    assert decode_entry(again, kind).records == entry.records


def decode_or_typed_error(data: bytes, kind: LogKind) -> DecodedEntry | InputError:
    """Decode; a typed error must name an offset inside the input and the caller's location."""
    try:
        entry = decode_entry(data, kind, where=WHERE)
    except InputError as exc:
        assert isinstance(exc, TruncatedInput | BadEnvelope | BadRecord), type(exc)
        assert 0 <= exc.offset <= len(data), (exc.offset, len(data))
        assert str(exc).startswith(f"{WHERE}: ") and f"at byte offset {exc.offset}" in str(exc)
        return exc
    assert_says_what_its_bytes_say(data, kind, entry)
    return entry


# ---------------------------------------------------------------------------------------------
# Round trips.


@given(batches)
def test_records_survive_batching(kind_and_records: tuple[LogKind, list[Message]]) -> None:
    kind, records = kind_and_records
    data = encode_batch(records, kind)
    assert data[:PREFIX_LENGTH] == b"\x0e\x01\x00\x01"
    entry = decode_entry(data, kind)
    assert entry == DecodedEntry(batched=True, records=tuple(records), version=1)
    assert entry.batch_size == len(records)


@pytest.mark.parametrize("kind", list(LogKind))
@pytest.mark.parametrize("size", range(1, MAX_BATCH + 1))
def test_every_batch_size_keeps_arrival_order(kind: LogKind, size: int) -> None:
    if kind is LogKind.TRANSACTION_LOG:
        records: list[Message] = [
            tc.TransactionMetadataEntry(metadata_op=tc.TransactionMetadataEntry.NEW, txnid_least_bits=i)
            for i in range(size)
        ]
    else:
        records = [pa.PendingAckMetadataEntry(pending_ack_op=pa.ACK, txnid_least_bits=i) for i in range(size)]
    entry = decode_entry(encode_batch(records, kind), kind)
    assert [r.txnid_least_bits for r in entry.records] == list(range(size))


@given(plain)
def test_plain_record_round_trips_and_is_never_taken_for_a_batch(kind_and_record: tuple[LogKind, Message]) -> None:
    kind, record = kind_and_record
    data = encode_plain(record)
    assert data[0] != MAGIC >> 8 and not is_batched(data)
    assert decode_entry(data, kind) == DecodedEntry(batched=False, records=(record,), version=None)


@pytest.mark.parametrize(
    "message",
    [
        tc.TransactionMetadataEntry,
        pa.PendingAckMetadataEntry,
        tc.BatchedTransactionMetadataEntry,
        pa.BatchedPendingAckMetadataEntry,
    ],
)
@given(tail=st.binary(max_size=32))
def test_no_protobuf_record_starts_with_0x0e(message: type[Message], tail: bytes) -> None:
    # 0x0E is a one-byte tag (no continuation bit) for field 1 with wire type 6, which protobuf
    # does not have; so the magic can never be the start of a record, for any message type.
    data = b"\x0e" + tail
    with pytest.raises(BadRecord) as info:
        check_message(data, message.DESCRIPTOR)
    assert info.value.offset == 0
    with pytest.raises(DecodeError):
        message.FromString(data)


def test_empty_batch_is_an_entry_with_no_records() -> None:
    # Pulsar skips such an entry on replay; the codec reports it as it is.
    entry = decode_entry(b"\x0e\x01\x00\x01", LogKind.PENDING_ACK)
    assert entry == DecodedEntry(batched=True, records=(), version=1)


# ---------------------------------------------------------------------------------------------
# Corrupt, truncated and foreign input.


@given(small_entries)
def test_truncation_at_every_offset(kind_and_data: tuple[LogKind, bytes]) -> None:
    kind, data = kind_and_data
    for cut in range(len(data)):
        outcome = decode_or_typed_error(data[:cut], kind)
        if cut == 0:
            assert isinstance(outcome, BadRecord) and outcome.offset == 0
        elif data[:2] == b"\x0e\x01" and cut < PREFIX_LENGTH:
            assert isinstance(outcome, TruncatedInput) and outcome.offset == cut


@given(entries, st.integers(0, 10_000), st.integers(1, 255))
def test_flipped_bytes(kind_and_data: tuple[LogKind, bytes], where: int, mask: int) -> None:
    kind, data = kind_and_data
    at = where % len(data)
    decode_or_typed_error(data[:at] + bytes([data[at] ^ mask]) + data[at + 1 :], kind)


@given(entries, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=6))
def test_overwritten_bytes(kind_and_data: tuple[LogKind, bytes], edits: list[tuple[int, int]]) -> None:
    kind, data = kind_and_data
    mutated = bytearray(data)
    for where, value in edits:
        mutated[where % len(mutated)] = value
    decode_or_typed_error(bytes(mutated), kind)


@given(st.sampled_from(list(LogKind)), st.integers(0, 255).filter(lambda b: b != 0x01), st.binary(max_size=40))
def test_bad_magic(kind: LogKind, second: int, rest: bytes) -> None:
    outcome = decode_or_typed_error(bytes([0x0E, second]) + rest, kind)
    assert type(outcome) is BadEnvelope and outcome.offset == 0
    assert "unknown magic" in str(outcome)


@given(st.sampled_from(list(LogKind)), st.integers(0, 0xFFFF).filter(lambda v: v != VERSION), st.binary(max_size=40))
def test_unknown_versions(kind: LogKind, version: int, rest: bytes) -> None:
    outcome = decode_or_typed_error(b"\x0e\x01" + version.to_bytes(2, "big") + rest, kind)
    assert type(outcome) is UnsupportedVersion and outcome.offset == 2
    assert isinstance(outcome, BadEnvelope)


@given(st.sampled_from(list(LogKind)), st.binary(max_size=120))
def test_garbage(kind: LogKind, data: bytes) -> None:
    decode_or_typed_error(data, kind)


@given(st.sampled_from(list(LogKind)), st.binary(max_size=120))
def test_garbage_behind_a_valid_prefix(kind: LogKind, body: bytes) -> None:
    decode_or_typed_error(b"\x0e\x01\x00\x01" + body, kind)


@pytest.mark.parametrize(
    ("data", "error", "offset"),
    [
        (b"", BadRecord, 0),
        (b"\x0e", TruncatedInput, 1),
        (b"\x0e\x01", TruncatedInput, 2),
        (b"\x0e\x01\x00", TruncatedInput, 3),
        (b"\x0e\x02\x00\x01", BadEnvelope, 0),
        (b"\x0e\x01\x00\x02", UnsupportedVersion, 2),
        (b"\x0e\x01\x01\x00", UnsupportedVersion, 2),
        (b"\x0e\x01\x00\x01\x0a\x05\x08\x01", TruncatedInput, 5),  # record length runs past the end
        (b"\x0e\x01\x00\x01\x0a\x00", BadRecord, 4),  # an empty record: no op
        (b"\x0e\x01\x00\x01\x0a\x02\x08\x09", BadRecord, 7),  # op 9 does not exist
        (b"\x18\x05", BadRecord, 0),  # a plain record without its op
        (b"\x08\x01\x2a\x02\x08\x01", BadRecord, 4),  # pending ack position without entryId
    ],
)
def test_known_damage(data: bytes, error: type[InputError], offset: int) -> None:
    outcome = decode_or_typed_error(data, LogKind.PENDING_ACK)
    assert type(outcome) is error and outcome.offset == offset


# ---------------------------------------------------------------------------------------------
# Batched positions: TxnBatchedPositionImpl's ack sets and its equality with plain positions.

# (size, index) -> the words of Java's BitSet.toLongArray(), written out by hand.
CATALOGUE = {
    (10, 5): (0b11_1101_1111,),
    (64, 0): (-2,),
    (64, 63): ((1 << 63) - 1,),
    (230, 120): (-1, -(1 << 56) - 1, -1, (1 << 38) - 1),
    (256, 255): (-1, -1, -1, (1 << 63) - 1),
}


@pytest.mark.parametrize(("size", "index"), sorted(CATALOGUE))
def test_ack_set_catalogue(size: int, index: int) -> None:
    assert BatchedPosition(3, 4, size, index).ack_set() == CATALOGUE[(size, index)]


def test_single_record_batch_has_no_ack_set() -> None:
    assert BatchedPosition(3, 4, 1, 0).ack_set() is None


@given(st.integers(2, 300).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))))
def test_ack_set_clears_exactly_one_bit(size_index: tuple[int, int]) -> None:
    size, index = size_index
    words = BatchedPosition(0, 0, size, index).ack_set()
    assert words is not None
    assert words_to_bits(words) == ((1 << size) - 1) ^ (1 << index)
    assert all(-(1 << 63) <= w < (1 << 63) for w in words)
    assert words[-1] != 0  # trailing zero words are cut, as BitSet.toLongArray does
    assert bits_to_words(words_to_bits(words)) == words


def test_batched_and_plain_positions_are_interchangeable() -> None:
    batched, same = BatchedPosition(1, 1, 2, 0), Position(1, 1)
    assert batched == same and same == batched
    assert BatchedPosition(1, 1, 5, 3) == batched  # batch size and index do not take part
    assert hash(batched) == hash(same)
    assert not batched < same and not same < batched and batched <= same and same >= batched
    assert {same: "plain"}[batched] == "plain" and {batched: "batched"}[same] == "batched"
    assert len({batched, same, BatchedPosition(1, 1, 9, 8)}) == 1
    assert Position(1, 0) < batched < Position(1, 2) and Position(0, 9) < batched < Position(2, 0)
    assert batched < BatchedPosition(1, 2, 2, 0)
    mixed = [Position(2, 0), BatchedPosition(1, 5, 3, 1), Position(1, 4), BatchedPosition(0, 0, 2, 1)]
    assert [(p.ledger_id, p.entry_id) for p in sorted(mixed)] == [(0, 0), (1, 4), (1, 5), (2, 0)]
    assert batched != (1, 1)
