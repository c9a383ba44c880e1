"""The file ledger's reader on corrupted bytes.

Flip bits, truncate and insert bytes at random offsets of a ledger file, the metadata (the
checkpoint) or the journal, then open the directory (recovery) or read after open.  The outcome is
always one of:

* a correct read of what was acknowledged: the checkpointed entries and cursor unchanged, and the
  changes journaled after the checkpoint replayed in order -- all of them, or (only when the
  journal itself was cut short, or damaged in its last batch, which no log can tell from a torn
  write) a prefix of them; bytes a ledger file holds past its checkpoint are replaced from the
  journal, so damage there changes nothing;
* a :class:`LedgerCorrupted` (an ``InputError``) naming the damaged file and a byte offset in it.

Never another exception type, and never different bytes, positions, properties or cursors.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from engine.storage.file_ledger import (
    METADATA_NAME,
    FileLedger,
    LedgerCorrupted,
    LedgerRecord,
    Metadata,
    OsFileSystem,
    decode_metadata,
    encode_frame,
    encode_ledger_header,
    encode_metadata,
    ledger_file_name,
    scan_ledger,
)
from engine.storage.inspect import (
    inspect_directory,
    inspect_entry,
    inspect_path,
    read_entry,
    render_text,
)
from engine.storage.journal import (
    JOURNAL_RECORD,
    JOURNAL_SEGMENT,
    RecordKind,
    encode_record,
    encode_record_payload,
    encode_segment_header,
    scan_segment,
    segment_file_name,
)
from engine.storage.ledger import InitialPosition
from reference.cursor import CursorState
from spec.errors import InputError
from spec.types import Position, bits_to_words

P = Position

# ---------------------------------------------------------------------------------------------
# Mutations.


@dataclass(frozen=True)
class Flip:
    offset: int
    bit: int

    def apply(self, data: bytes) -> tuple[bytes, int]:
        if not data:
            return data, 0
        at = self.offset % len(data)
        out = bytearray(data)
        out[at] ^= 1 << self.bit
        return bytes(out), at


@dataclass(frozen=True)
class Truncate:
    offset: int

    def apply(self, data: bytes) -> tuple[bytes, int]:
        at = self.offset % (len(data) + 1)
        return data[:at], at


@dataclass(frozen=True)
class Insert:
    offset: int
    chunk: bytes

    def apply(self, data: bytes) -> tuple[bytes, int]:
        at = self.offset % (len(data) + 1)
        return data[:at] + self.chunk + data[at:], at


offsets = st.integers(min_value=0, max_value=1 << 20)
mutation = st.one_of(
    st.builds(Flip, offsets, st.integers(0, 7)),
    st.builds(Truncate, offsets),
    st.builds(Insert, offsets, st.binary(min_size=1, max_size=40)),
)
mutations = st.lists(mutation, min_size=1, max_size=3)
# One mutation most of the time: several rarely leave anything readable to check.
few_mutations = st.one_of(st.lists(mutation, min_size=1, max_size=1), mutations)


Mutation = Flip | Truncate | Insert


def mutate(data: bytes, chosen: list[Mutation]) -> bytes:
    for m in chosen:
        data, _ = m.apply(data)
    return data


def first_difference(a: bytes, b: bytes) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


# ---------------------------------------------------------------------------------------------
# The directory under test: a checkpoint holding ledger 0 closed, ledger 1 open with two entries,
# a cursor and a property; then five changes only in the journal (two entries, three cursor
# changes), each its own batch; then the handle killed.

CLOSED = [b"closed-0", b"", b"closed-2" * 20]
OPEN = [b"open-0", b"\x0e\x01\x00\x01batched?", b"open-2" * 7, b"open-3"]
CHECKPOINT_AFTER = 8  # records: the cursor, the property, three entries, the roll-over, two entries
SEGMENT = segment_file_name(1)  # the segment the checkpoint started


def _build(directory: Path) -> dict[str, bytes]:
    ml = FileLedger(directory, name="fuzzed", max_journal_records=CHECKPOINT_AFTER)
    sub = ml.open_cursor("sub", InitialPosition.EARLIEST)
    ml.set_property("max_local_txn_id", "41")
    for data in CLOSED:
        ml.append(data)
    ml.roll_over()
    for data in OPEN[:2]:
        ml.append(data)
    assert decode_metadata((directory / METADATA_NAME).read_bytes(), file="m").open_synced[0] == 2
    for data in OPEN[2:]:
        ml.append(data)
    sub.delete([P(0, 1)])
    sub.delete([P(1, 2)], {P(1, 2): bits_to_words(0b1101)})
    sub.set_property("bucket", "1")
    ml.crash()  # the last five changes are only in the journal (and written behind)
    files = {p.name: p.read_bytes() for p in directory.iterdir() if p.name != "LOCK"}
    assert SEGMENT in files and len([n for n in files if n.startswith("journal-")]) == 1
    return files


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    return _build(tmp_path_factory.mktemp("pristine") / "ml")


class NoSyncFileSystem(OsFileSystem):
    # Each fuzzed directory is read once; durability of recovery's own writes is the crash test's.
    def sync(self, fd: int) -> None:
        pass

    def sync_dir(self, path: str) -> None:
        pass


NO_SYNC = NoSyncFileSystem()
_counter = itertools.count()
TARGETS = [ledger_file_name(0), ledger_file_name(1), METADATA_NAME, SEGMENT]
# The cursor's acknowledged states, oldest first: the first is what the checkpoint holds, each
# later one a journal record of _build.
SUB_HISTORY = [
    CursorState(P(0, -1)),
    CursorState(P(0, -1), frozenset({P(0, 1)})),
    CursorState(P(0, -1), frozenset({P(0, 1)}), {P(1, 2): bits_to_words(0b1101)}),
    CursorState(P(0, -1), frozenset({P(0, 1)}), {P(1, 2): bits_to_words(0b1101)}, {"bucket": "1"}),
]


def _after(changes: int) -> tuple[list[tuple[Position, bytes]], CursorState]:
    """The acknowledged state after the first ``changes`` journaled changes."""
    entries = [(P(0, i), d) for i, d in enumerate(CLOSED)] + [(P(1, i), d) for i, d in enumerate(OPEN)]
    return entries[: len(CLOSED) + 2 + min(changes, 2)], SUB_HISTORY[max(0, changes - 2)]


def _batches(segment: bytes) -> list[int]:
    """Where each batch of a segment starts (every change of _build is its own batch)."""
    scan = scan_segment(lambda o, n: segment[o : o + n], len(segment), file="s")
    starts: list[int] = []
    for record in scan.records:
        batch_start = int.from_bytes(segment[record.offset + 16 : record.offset + 24], "big")
        if not starts or starts[-1] != batch_start:
            starts.append(batch_start)
    return starts


@given(target=st.sampled_from(TARGETS), chosen=few_mutations)
def test_recovery_reads_an_acknowledged_prefix_or_names_the_damage(
    pristine: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory, target: str, chosen: list[Mutation]
) -> None:
    directory = tmp_path_factory.getbasetemp() / "fuzz" / f"d{next(_counter)}"
    directory.mkdir(parents=True)
    for name, data in pristine.items():
        (directory / name).write_bytes(data)
    original = pristine[target]
    damaged = mutate(original, chosen)
    (directory / target).write_bytes(damaged)
    damage_at = first_difference(original, damaged)
    # The inspector (read-only) must agree with recovery on whether the directory is sound.
    report = inspect_directory(directory)
    json.dumps(report)
    try:
        ml = FileLedger(directory, fs=NO_SYNC)
    except LedgerCorrupted as exc:
        assert not report["ok"], f"inspect found nothing wrong, recovery raised {exc}"
        assert isinstance(exc, InputError)
        assert exc.file == str(directory / target), f"damage in {target} reported in {exc.file}"
        assert 0 <= exc.offset <= len(damaged)
        if target != METADATA_NAME:
            # The report points at the damaged structure: at or before the first changed byte,
            # give or take the header the damage was found in.
            assert exc.offset <= damage_at + JOURNAL_RECORD.size, (exc, damage_at)
        return
    assert report["ok"], report
    try:
        entries = [(e.position, e.data) for e in ml.read(P(0, 0), 100)]
        assert ml.name == "fuzzed"
        assert dict(ml.properties) == {"max_local_txn_id": "41"}
        sub = ml.open_cursor("sub").state()
        kept = next((k for k in range(5, -1, -1) if _after(k) == (entries, sub)), None)
        assert kept is not None, f"recovered a state that was never acknowledged: {entries}, {sub}"
        if kept < 5:
            # Changes are lost only when the journal lost them: cut short, or damaged in its last
            # batch (which reads as a torn write); a damaged earlier batch is refused as damage.
            assert target == SEGMENT, f"damage in {target} lost journaled changes"
            batches = _batches(original)
            ends = [*batches[1:], len(original)]
            if original.startswith(damaged):
                # Cut short: every batch wholly kept survives (a segment cut inside its header
                # reads as a creation cut short, which holds nothing).
                if len(damaged) >= JOURNAL_SEGMENT.size:
                    assert kept >= sum(1 for end in ends if end <= len(damaged)), (chosen, kept)
            elif len(chosen) == 1:
                # One damaged spot before the last batch leaves a later batch intact, which proves
                # the spot was synced: that is refused as damage, never read as a torn write.
                # (Several spots can take the proof with them; then only safety is checked.)
                assert damage_at >= batches[-1] and kept >= len(batches) - 1, (chosen, kept)
    finally:
        ml.close()


@given(ledger=st.sampled_from([0, 1]), chosen=few_mutations)
def test_reads_after_open_never_return_damaged_bytes(
    pristine: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory, ledger: int, chosen: list[Mutation]
) -> None:
    directory = tmp_path_factory.getbasetemp() / "fuzz-live" / f"d{next(_counter)}"
    directory.mkdir(parents=True)
    for name, data in pristine.items():
        (directory / name).write_bytes(data)
    ml = FileLedger(directory, fs=NO_SYNC)
    try:
        path = directory / ledger_file_name(ledger)
        original = path.read_bytes()
        damaged = mutate(original, chosen)
        # Damage under a live handle: rewrite in place so its open file sees the new bytes.
        with open(path, "r+b") as f:
            f.write(damaged)
            f.truncate(len(damaged))
        written = CLOSED if ledger == 0 else OPEN
        for entry_id, data in enumerate(written):
            try:
                assert ml.read_entry(P(ledger, entry_id)) == data
            except LedgerCorrupted as exc:
                assert exc.file == str(path)
                assert 0 <= exc.offset <= max(len(damaged), len(original))
    finally:
        ml.close()


# ---------------------------------------------------------------------------------------------
# The pure decoders, at a higher rate.


@given(
    payloads=st.lists(st.binary(max_size=64), min_size=1, max_size=6),
    chosen=few_mutations,
    torn_allowed=st.booleans(),
)
@example(payloads=[b"abc", b"defgh"], chosen=[Truncate(20 + 23 + 20 + 2)], torn_allowed=False)
@example(payloads=[b"abc", b"defgh"], chosen=[Truncate(20 + 23 + 20 + 2)], torn_allowed=True)
@example(payloads=[b"abc", b"defgh"], chosen=[Insert(68, bytes(30))], torn_allowed=True)
@example(payloads=[b"abc", b"defgh"], chosen=[Flip(20 + 20 + 1, 0)], torn_allowed=True)
def test_scan_of_damaged_ledger_bytes(payloads: list[bytes], chosen: list[Mutation], torn_allowed: bool) -> None:
    original = encode_ledger_header(9) + b"".join(encode_frame(i, p) for i, p in enumerate(payloads))
    damaged = mutate(original, chosen)
    try:
        scan = scan_ledger(
            lambda o, n: damaged[o : o + n], len(damaged), file="f", ledger_id=9, allow_torn_tail=torn_allowed
        )
    except LedgerCorrupted as exc:
        assert exc.file == "f" and 0 <= exc.offset <= len(damaged)
        return
    found = [damaged[f.payload_offset : f.end] for f in scan.frames]
    assert found == payloads[: len(found)]
    assert scan.valid_length + scan.torn_bytes == len(damaged)
    if not torn_allowed:
        assert scan.torn_bytes == 0


@given(
    batches=st.lists(
        st.lists(st.tuples(st.sampled_from(list(RecordKind)), st.binary(max_size=48)), min_size=1, max_size=3),
        min_size=1,
        max_size=5,
    ),
    chosen=few_mutations,
)
@example(batches=[[(RecordKind.ENTRY, bytes(20))], [(RecordKind.CURSOR, b"x")]], chosen=[Truncate(40)])
@example(batches=[[(RecordKind.ENTRY, bytes(20))]], chosen=[Insert(1 << 20, bytes(9))])
@example(batches=[[(RecordKind.META, b"m")], [(RecordKind.META, b"n")]], chosen=[Flip(JOURNAL_SEGMENT.size + 40, 3)])
def test_scan_of_damaged_journal_bytes(batches: list[list[tuple[RecordKind, bytes]]], chosen: list[Mutation]) -> None:
    original = bytearray(encode_segment_header(4, 100))
    written: list[tuple[RecordKind, bytes]] = []
    starts: list[int] = []
    lsn = 100
    for batch in batches:
        start = len(original)
        starts.append(start)
        for kind, body in batch:
            if kind is RecordKind.ENTRY:
                body = bytes(16) + body  # an entry's body starts with its ledger and entry ids
            original += encode_record(lsn, start, encode_record_payload(kind, "k", body))
            written.append((kind, body))
            lsn += 1
    damaged = mutate(bytes(original), chosen)
    damage_at = first_difference(bytes(original), damaged)
    try:
        scan = scan_segment(lambda o, n: damaged[o : o + n], len(damaged), file="j", seq=4)
    except LedgerCorrupted as exc:
        assert exc.file == "j" and 0 <= exc.offset <= len(damaged)
        assert exc.offset <= damage_at + JOURNAL_RECORD.size, (exc, damage_at)
        return
    found = [(r.kind, r.body) for r in scan.records]
    assert found == written[: len(found)]
    assert [r.lsn for r in scan.records] == list(range(100, 100 + len(found)))
    assert scan.valid_length + scan.torn_bytes == len(damaged)
    # What is kept is the original bytes; what is cut is a torn tail, never a whole record.
    assert bytes(original).startswith(damaged[: scan.valid_length])
    if len(found) < len(written) and len(chosen) == 1:
        # Only cutting the segment short, damage in its last batch, or a zero tail loses records
        # (one damaged spot before the last batch leaves a later batch intact, which proves the
        # spot was synced; several spots can take that proof with them).
        tail = damaged[scan.valid_length :]
        assert len(damaged) < len(original) or damage_at >= starts[-1] or tail.count(0) == len(tail), chosen


def _metadata() -> Metadata:
    cursor = CursorState(P(3, 4), frozenset({P(3, 6), P(4, 0)}), {P(3, 7): (-1, 5)}, {"k": "v", "é": "ü"})
    return Metadata(
        name="t",
        generation=12,
        next_ledger_id=6,
        ledgers=(LedgerRecord(3, 8, 400), LedgerRecord(4, 0, 20), LedgerRecord(5)),
        properties={"max_local_txn_id": "99"},
        cursors={"sub": cursor, "other": CursorState(P(2, -1))},
        journal_lsn=77,
        open_synced=(3, 120),
    )


def test_metadata_round_trips() -> None:
    meta = _metadata()
    decoded = decode_metadata(encode_metadata(meta), file="m")
    assert decoded == meta
    assert encode_metadata(decoded) == encode_metadata(meta)


@given(chosen=mutations)
def test_damaged_metadata_is_detected(chosen: list[Mutation]) -> None:
    original = encode_metadata(_metadata())
    damaged = mutate(original, chosen)
    try:
        decoded = decode_metadata(damaged, file="m")
    except LedgerCorrupted as exc:
        assert exc.file == "m" and 0 <= exc.offset <= len(damaged)
        return
    assert damaged == original and decoded == _metadata()


# ---------------------------------------------------------------------------------------------
# The inspector.


def test_inspect_decodes_plain_and_batched_log_entries(tmp_path: Path) -> None:
    from spec.envelope import LogKind, encode_batch, encode_plain
    from spec.pb import PulsarTransactionMetadata_pb2 as tc_pb
    from spec.pb import TransactionPendingAck_pb2 as pa_pb

    record = tc_pb.TransactionMetadataEntry(metadata_op=tc_pb.TransactionMetadataEntry.NEW, txnid_least_bits=5)
    ack = pa_pb.PendingAckMetadataEntry(pending_ack_op=pa_pb.PendingAckOp.ACK, txnid_least_bits=7)
    directory = tmp_path / "ml"
    ml = FileLedger(directory)
    ml.append(encode_plain(record))
    ml.append(encode_batch([record, record], LogKind.TRANSACTION_LOG))
    ml.append(encode_batch([ack], LogKind.PENDING_ACK))
    ml.append(b"\x0e\x02not an envelope")
    ml.open_cursor("sub").set_property("k", "v")
    ml.close()

    report = inspect_path(directory, kind=LogKind.TRANSACTION_LOG)
    json.dumps(report)
    assert report["kind"] == "directory" and report["ok"]
    assert report["metadata"]["cursors"]["sub"]["properties"] == {"k": "v"}
    frames = report["ledgers"][0]["entries"]
    assert [f["position"] for f in frames] == ["0:0", "0:1", "0:2", "0:3"]
    assert all(f["crc_ok"] for f in frames)
    plain = frames[0]["entry"]["decoded"]["transaction_log"]
    assert not plain["batched"] and plain["records"][0]["metadata_op"] == "NEW"
    batch = frames[1]["entry"]["decoded"]["transaction_log"]
    assert batch["batched"] and batch["batch_size"] == 2 and batch["version"] == 1
    assert frames[3]["entry"]["decoded"] == {}
    assert frames[3]["entry"]["errors"]["transaction_log"]["offset"] == 0
    pending = inspect_entry(read_entry(directory, P(0, 2)))
    assert pending["decoded"]["pending_ack"]["records"][0]["pending_ack_op"] == "ACK"
    assert "pending_ack" in inspect_path(directory, entry=P(0, 2))["entry"]["decoded"]
    text = render_text(report)
    assert "batched v1, 2 records" in text and "crc ok" in text
    assert render_text(inspect_path(directory / METADATA_NAME)).startswith("metadata generation")
    assert "ledger 0" in render_text(inspect_path(directory / ledger_file_name(0)))


def test_inspect_reports_damage_without_raising(tmp_path: Path) -> None:
    directory = tmp_path / "ml"
    ml = FileLedger(directory)
    for data in (b"one", b"two", b"three"):
        ml.append(data)
    ml.close()
    path = directory / ledger_file_name(0)
    data = bytearray(path.read_bytes())
    data[20 + 20 + 1] ^= 0x01  # the first payload
    path.write_bytes(bytes(data) + b"\x00\x01")  # and a torn tail
    report = inspect_directory(directory)
    assert not report["ok"]
    ledger = report["ledgers"][0]
    assert [f["crc_ok"] for f in ledger["entries"]] == [False, True, True]
    assert ledger["error"]["file"] == str(path) and ledger["error"]["offset"] == 40
    assert ledger["torn_tail"] == {"offset": len(data), "bytes": 2, "reason": "incomplete frame header"}
    assert "CRC BAD" in render_text(report)
    with pytest.raises(LedgerCorrupted):
        read_entry(directory, P(0, 0))
    assert read_entry(directory, P(0, 2)) == b"three"


def test_inspect_shows_the_journal(pristine: dict[str, bytes], tmp_path: Path) -> None:
    directory = tmp_path / "ml"
    directory.mkdir()
    for name, data in pristine.items():
        (directory / name).write_bytes(data)
    report = inspect_path(directory)
    json.dumps(report)
    assert report["ok"] and report["replays"] == 5 and SEGMENT not in report["other_files"]
    (segment,) = report["journal"]
    assert segment["error"] is None and segment["torn_tail"] is None
    kinds = [(r["kind"], r.get("position") or r.get("cursor")) for r in segment["records"]]
    assert kinds == [("ENTRY", "1:2"), ("ENTRY", "1:3"), ("CURSOR", "sub"), ("CURSOR", "sub"), ("CURSOR", "sub")]
    assert segment["records"][0]["offset"] == JOURNAL_SEGMENT.size
    assert segment["records"][-1]["state"] == {
        "mark_delete": "0:-1",
        "individually_deleted": ["0:1"],
        "batch_ack_sets": {"1:2": [13]},
        "properties": {"bucket": "1"},
    }
    assert report["metadata"]["checkpoint"]["open_synced_entries"] == 2
    (open_ledger,) = [one for one in report["ledgers"] if one["state"] == "open"]
    assert open_ledger["written_behind"] == ["1:2", "1:3"]
    text = render_text(report)
    assert "journal segment: " in text and "5 records" in text and "cursor 'sub' mark-delete 0:-1" in text
    assert "written after the checkpoint" in text
    # The segment on its own, and its damage, reported without raising.
    alone = inspect_path(directory / SEGMENT)
    assert alone["kind"] == "journal_segment" and len(alone["records"]) == 5
    assert "journal segment" in render_text(alone)
    bad = bytearray(pristine[SEGMENT])
    bad[JOURNAL_SEGMENT.size + JOURNAL_RECORD.size + 2] ^= 0x01  # the first record's payload
    (directory / SEGMENT).write_bytes(bytes(bad))
    damaged = inspect_directory(directory)
    assert not damaged["ok"]
    assert damaged["error"]["file"] == str(directory / SEGMENT)
    assert "payload CRC mismatch" in render_text({"kind": "directory", **damaged})
    (directory / SEGMENT).write_bytes(pristine[SEGMENT] + b"\x00\x01")
    torn = inspect_directory(directory)
    assert torn["ok"] and torn["journal"][0]["torn_tail"] == {
        "offset": len(pristine[SEGMENT]),
        "bytes": 2,
        "reason": "incomplete record header",
    }


def _opens(directory: Path) -> bool:
    try:
        FileLedger(directory, fs=NO_SYNC).close()
    except LedgerCorrupted:
        return False
    return True


@pytest.mark.parametrize("target", TARGETS)
def test_inspect_says_ok_exactly_when_recovery_opens_every_flip_and_cut(
    pristine: dict[str, bytes], tmp_path: Path, target: str
) -> None:
    """Every single-byte flip and every truncation of each file, not a sample: ``inspect``'s
    ``ok`` (recovery's own read-only plan) is True exactly when recovery opens the directory."""
    original = pristine[target]
    damaged_copies = [Flip(offset, offset % 8).apply(original)[0] for offset in range(len(original))]
    damaged_copies += [original[:length] for length in range(len(original))]
    disagreements = []
    for number, damaged in enumerate(damaged_copies):
        directory = tmp_path / f"d{number}"
        directory.mkdir()
        for name, data in pristine.items():
            (directory / name).write_bytes(damaged if name == target else data)
        ok = inspect_directory(directory)["ok"]
        if ok != _opens(directory):
            disagreements.append((number, ok))
    assert len(damaged_copies) == 2 * len(original)
    assert disagreements == [], f"inspect and recovery disagree on {len(disagreements)} copies: {disagreements[:5]}"
