"""A crash-safe managed ledger on a file system, written through a journal.

One directory per managed ledger::

    METADATA                    the last checkpoint: ledger list, properties, cursors, journal lsn
    METADATA.tmp                a checkpoint being written; never read, removed at open
    LOCK                        flock()ed by the one handle that owns the directory
    ledger-00000000000000000007.log   one file per ledger: a header, then framed entries

and a **journal** (:mod:`reference.engine.journal`): the store's, shared by every managed ledger
of a :class:`~reference.engine.file_store.FileStore`, or a ledger's own (segments
``journal-<seq>.log`` in its directory) when it is opened on its own.  The byte layouts, the
durability argument and the recovery rules are in ``docs/engine/ledgers.md``; the short version:

* Every change is one journal record, durable once the journal is synced past it: an append (the
  entry's frame is also written to the ledger file, behind: not synced), a cursor's new state,
  a new metadata version (roll-over, properties, deleted ledgers).  Concurrent writers of every
  ledger of a store share one ``fdatasync`` (group commit).
* A **checkpoint** makes the files self-sufficient: every ledger file written since the last
  one is synced, the directory synced, and ``METADATA`` replaced atomically (``METADATA.tmp``,
  sync, rename, directory sync) with the journal lsn it covers and the open ledger's synced
  extent.  The store checkpoints every ledger it holds when the journal's segment is full, then
  deletes the older segments; a handle checkpoints when it closes.  A managed ledger's creation
  is a checkpoint: its directory, first ledger file and ``METADATA`` are durable before it opens.
* Opening recovers: ``METADATA`` is checked, every file it calls synced is checked frame by frame
  (closed ledgers exactly, the open one up to its synced extent), the journal's records after the
  checkpoint are replayed into the files (bytes after the synced extent were written behind and
  are replaced), leftovers of a crash are removed, and a checkpoint is written; then the last
  ledger is closed and a new one opened, as a new owner of a Pulsar topic does.  Anything that
  does not check out raises :class:`LedgerCorrupted` naming the file and the byte offset; the
  checks all run before the first repair, so a refused directory is left exactly as found.

Every file-system call goes through a :class:`~reference.engine.disk.FileSystem`
(:class:`~reference.engine.disk.OsFileSystem` by default, or the simulated disk).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import struct
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import google_crc32c

from spec.config import Config
from spec.errors import InputError
from spec.types import INT64_MAX, INT64_MIN, LedgerInfo, Position

from .disk import FileSystem, LedgerLocked, OsFileSystem, makedirs_durably
from .journal import JOURNAL_RECORD, RawRecord, RecordKind, encode_entry_body
from .ledger import (
    Entry,
    InitialPosition,
    LedgerClosed,
    LedgerError,
    LedgerWriteFailed,
    NoSuchEntry,
)
from .memory_ledger import (
    Cursor,
    CursorState,
    check_cursor_name,
    consumed_ledgers,
    initial_cursor_state,
    ledger_is_full,
)

if TYPE_CHECKING:
    from .file_store import FileStore

__all__ = [
    "FRAME_HEADER",
    "LEDGER_HEADER",
    "LEDGER_MAGIC",
    "LOCK_NAME",
    "MAX_ENTRY_BYTES",
    "MAX_JOURNAL_BYTES",
    "MAX_JOURNAL_RECORDS",
    "METADATA_HEADER",
    "METADATA_MAGIC",
    "METADATA_NAME",
    "METADATA_TMP_NAME",
    "METADATA_VERSION",
    "VERSION",
    "FileLedger",
    "FileSystem",
    "FrameInfo",
    "LedgerCorrupted",
    "LedgerLocked",
    "LedgerRecord",
    "LedgerScan",
    "Metadata",
    "OsFileSystem",
    "RecoveryPlan",
    "RecoveryReport",
    "apply_recovery",
    "crc32c",
    "decode_cursor_body",
    "decode_metadata",
    "encode_cursor_body",
    "encode_frame",
    "encode_ledger_header",
    "encode_metadata",
    "ledger_file_name",
    "parse_ledger_file_name",
    "plan_recovery",
    "scan_ledger",
]

# ---------------------------------------------------------------------------------------------
# Errors.


class LedgerCorrupted(InputError, LedgerError):
    """A ledger directory holds bytes that are not what this format wrote: names the file and
    the byte offset of the first damage.  Raised at open (recovery) and by a read that finds a
    frame damaged after open.  It is both an :class:`InputError` (bad input, with a location)
    and a :class:`LedgerError` (so a broker reports it as a persistence error)."""

    def __init__(self, message: str, *, file: str, offset: int) -> None:
        self.file = file
        self.offset = offset
        super().__init__(f"{message} (at byte offset {offset})", where=file)


# ---------------------------------------------------------------------------------------------
# Formats.

VERSION: Final = 1
LEDGER_MAGIC: Final = b"TMLL"
METADATA_MAGIC: Final = b"TMLM"
METADATA_NAME: Final = "METADATA"
METADATA_TMP_NAME: Final = "METADATA.tmp"
LOCK_NAME: Final = "LOCK"
# The METADATA format: version 2 records the journal checkpoint (lsn, open ledger's synced extent).
METADATA_VERSION: Final = 2
# Past either bound (records or bytes in the current journal segment) the store checkpoints: every
# ledger file written behind is synced, METADATA rewritten, and the journal starts a new segment.
MAX_JOURNAL_RECORDS: Final = 4096
MAX_JOURNAL_BYTES: Final = 4 << 20
# magic, version, flags, ledger id, CRC32C of the 16 bytes before it.
LEDGER_HEADER: Final = struct.Struct(">4sHHQI")
# payload length, entry id, CRC32C of those 12 bytes, CRC32C of the payload.
FRAME_HEADER: Final = struct.Struct(">IQII")
# magic, version, flags, generation, payload length, CRC32C of the 20 bytes before it + payload.
METADATA_HEADER: Final = struct.Struct(">4sHHQII")
MAX_ENTRY_BYTES: Final = 0xFFFF_FFFF
# Sealed ledgers are only read (dispatch catching up, recovery, inspection); keeping every one open would
# cost a descriptor per ledger for the life of the handle, so only the most recently read stay open.
MAX_OPEN_SEALED_FILES: Final = 8

_LEDGER_FILE = re.compile(r"^ledger-(\d{20})\.log$")


def crc32c(*parts: bytes) -> int:
    """CRC32C (Castagnoli) of the concatenated parts, as every checksum of this format."""
    value = 0
    for part in parts:
        value = google_crc32c.extend(value, part)
    return int(value)


def ledger_file_name(ledger_id: int) -> str:
    return f"ledger-{ledger_id:020d}.log"


def parse_ledger_file_name(name: str) -> int | None:
    match = _LEDGER_FILE.match(name)
    return int(match.group(1)) if match else None


def encode_ledger_header(ledger_id: int) -> bytes:
    head = struct.pack(">4sHHQ", LEDGER_MAGIC, VERSION, 0, ledger_id)
    return head + struct.pack(">I", crc32c(head))


def encode_frame(entry_id: int, payload: bytes) -> bytes:
    head = struct.pack(">IQ", len(payload), entry_id)
    return head + struct.pack(">II", crc32c(head), crc32c(payload)) + payload


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """One frame of a ledger file: where it starts, its entry id and its payload length."""

    entry_id: int
    offset: int
    length: int

    @property
    def payload_offset(self) -> int:
        return self.offset + FRAME_HEADER.size

    @property
    def end(self) -> int:
        return self.payload_offset + self.length


@dataclass(frozen=True, slots=True)
class LedgerScan:
    """What a scan of a ledger file found.  ``valid_length`` is where the last good frame ends;
    ``torn_bytes`` is how many bytes after it form a torn tail (0 when the file ends cleanly)."""

    ledger_id: int
    frames: tuple[FrameInfo, ...]
    valid_length: int
    torn_bytes: int
    torn_reason: str | None = None


ReadAt = Callable[[int, int], bytes]


def scan_ledger(
    read_at: ReadAt, size: int, *, file: str, ledger_id: int | None = None, allow_torn_tail: bool
) -> LedgerScan:
    """Check a ledger file frame by frame.

    ``read_at(offset, n)`` returns up to ``n`` bytes at ``offset`` of a file of ``size`` bytes.
    With ``allow_torn_tail`` (the last ledger only), an incomplete last frame, or a tail of zero
    bytes after the last good frame, is reported as torn instead of raising: those are what a
    power cut leaves of writes that were never synced, hence never acknowledged.  A complete
    frame with a bad CRC is never torn (a sync makes whole frames durable), so it raises, as
    does every other inconsistency.
    """
    if size < LEDGER_HEADER.size:
        raise LedgerCorrupted(
            f"file has {size} bytes, shorter than the {LEDGER_HEADER.size}-byte header", file=file, offset=size
        )
    header = read_at(0, LEDGER_HEADER.size)
    magic, version, flags, found_id, header_crc = LEDGER_HEADER.unpack(header)
    if magic != LEDGER_MAGIC:
        raise LedgerCorrupted(f"bad magic {magic!r}, expected {LEDGER_MAGIC!r}", file=file, offset=0)
    if version != VERSION:
        raise LedgerCorrupted(
            f"unsupported ledger file version {version} (this reader knows {VERSION})", file=file, offset=4
        )
    if header_crc != crc32c(header[:16]):
        raise LedgerCorrupted("ledger file header CRC mismatch", file=file, offset=16)
    if flags != 0:
        raise LedgerCorrupted(f"unknown header flags 0x{flags:04x}", file=file, offset=6)
    if ledger_id is not None and found_id != ledger_id:
        raise LedgerCorrupted(f"header names ledger {found_id}, file is ledger {ledger_id}", file=file, offset=8)
    frames: list[FrameInfo] = []
    offset = LEDGER_HEADER.size
    while offset < size:
        remaining = size - offset
        if remaining < FRAME_HEADER.size:
            if allow_torn_tail:
                return LedgerScan(found_id, tuple(frames), offset, remaining, "incomplete frame header")
            raise LedgerCorrupted(
                f"file ends inside a frame header ({remaining} of {FRAME_HEADER.size} bytes)", file=file, offset=offset
            )
        head = read_at(offset, FRAME_HEADER.size)
        length, entry_id, head_crc, payload_crc = FRAME_HEADER.unpack(head)
        if head_crc != crc32c(head[:12]):
            if allow_torn_tail and _zero_tail(read_at, offset, size):
                return LedgerScan(found_id, tuple(frames), offset, remaining, "zero-filled tail")
            raise LedgerCorrupted("frame header CRC mismatch", file=file, offset=offset)
        if entry_id != len(frames):
            raise LedgerCorrupted(
                f"frame holds entry {entry_id}, expected entry {len(frames)}", file=file, offset=offset + 4
            )
        end = offset + FRAME_HEADER.size + length
        if end > size:
            if allow_torn_tail:
                return LedgerScan(found_id, tuple(frames), offset, remaining, "incomplete last frame")
            raise LedgerCorrupted(
                f"frame of {length} bytes runs past the end of the file ({size} bytes)", file=file, offset=offset
            )
        if payload_crc != crc32c(read_at(offset + FRAME_HEADER.size, length)):
            raise LedgerCorrupted(
                f"payload CRC mismatch in entry {entry_id}", file=file, offset=offset + FRAME_HEADER.size
            )
        frames.append(FrameInfo(entry_id, offset, length))
        offset = end
    return LedgerScan(found_id, tuple(frames), offset, 0)


def _zero_tail(read_at: ReadAt, offset: int, size: int) -> bool:
    # A file extended by a write whose data never reached the disk reads back as zeros (ext4,
    # XFS after a power cut).  No intact frame starts with zeros only (the CRC32C of a zero
    # header is 0x2B6A8F5D, not 0), so a zero tail holds no entry.  Read in chunks to bound memory.
    position = offset
    while position < size:
        chunk = read_at(position, min(1 << 20, size - position))
        if not chunk or chunk.count(0) != len(chunk):
            return not chunk
        position += len(chunk)
    return True


# -- metadata -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """One ledger in the metadata.  ``entries`` and ``length`` (the file size) are recorded when
    the ledger is closed; both are None for the open ledger, whose file is the truth."""

    ledger_id: int
    entries: int | None = None
    length: int | None = None

    @property
    def is_open(self) -> bool:
        return self.entries is None


@dataclass(frozen=True, slots=True)
class Metadata:
    """A managed ledger's metadata.  ``generation`` counts metadata changes.  ``journal_lsn`` and
    ``open_synced`` are the checkpoint: every journal record up to ``journal_lsn`` is in the files,
    and the open ledger's first ``open_synced`` (entries, bytes) were synced by it."""

    name: str
    generation: int
    next_ledger_id: int
    ledgers: tuple[LedgerRecord, ...]
    properties: Mapping[str, str]
    cursors: Mapping[str, CursorState]
    journal_lsn: int = -1
    open_synced: tuple[int, int] = (0, 20)


def _pos(p: Position) -> list[int]:
    return [p.ledger_id, p.entry_id]


def _cursor_json(state: CursorState) -> dict[str, object]:
    # Sorted by plain (ledger, entry) pairs: the same order as Position's, far cheaper to compare.
    return {
        "mark_delete": _pos(state.mark_delete),
        "individually_deleted": sorted([p.ledger_id, p.entry_id] for p in state.individually_deleted),
        "batch_ack_sets": sorted([[p.ledger_id, p.entry_id], list(words)] for p, words in state.ack_sets.items()),
        "properties": dict(state.properties),
    }


def _canonical_json(body: object) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def encode_metadata(meta: Metadata) -> bytes:
    """The metadata file: a header, then canonical JSON (sorted keys, no spaces)."""
    body = {
        "name": meta.name,
        "next_ledger_id": meta.next_ledger_id,
        "ledgers": [
            {"id": r.ledger_id} if r.is_open else {"id": r.ledger_id, "entries": r.entries, "length": r.length}
            for r in meta.ledgers
        ],
        "properties": dict(meta.properties),
        "cursors": {name: _cursor_json(state) for name, state in meta.cursors.items()},
        "journal_lsn": meta.journal_lsn,
        "open_synced": list(meta.open_synced),
    }
    payload = _canonical_json(body)
    head = struct.pack(">4sHHQI", METADATA_MAGIC, METADATA_VERSION, 0, meta.generation, len(payload))
    return head + struct.pack(">I", crc32c(head, payload)) + payload


class _Bad(Exception):
    """A schema problem inside the metadata JSON (turned into LedgerCorrupted by the caller)."""


def _get(obj: object, key: str, kind: type | tuple[type, ...]) -> object:
    if not isinstance(obj, dict) or key not in obj:
        raise _Bad(f"missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _Bad(f"{key!r} has the wrong type ({type(value).__name__})")
    return value


def _int(value: object, what: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise _Bad(f"{what} must be an integer in [{low}, {high}], got {value!r}")
    return value


def _position(value: object, what: str) -> Position:
    if not isinstance(value, list) or len(value) != 2:
        raise _Bad(f"{what} must be [ledger_id, entry_id], got {value!r}")
    return Position(_int(value[0], what, -1, INT64_MAX), _int(value[1], what, -1, INT64_MAX))


def _string_map(value: object, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise _Bad(f"{what} must map strings to strings")
    return dict(value)


def decode_metadata(blob: bytes, *, file: str) -> Metadata:
    """Parse and check a metadata file; any damage is a :class:`LedgerCorrupted`."""
    size = METADATA_HEADER.size
    if len(blob) < size:
        raise LedgerCorrupted(
            f"metadata has {len(blob)} bytes, shorter than its {size}-byte header", file=file, offset=len(blob)
        )
    magic, version, flags, generation, length, crc = METADATA_HEADER.unpack_from(blob)
    if magic != METADATA_MAGIC:
        raise LedgerCorrupted(f"bad magic {magic!r}, expected {METADATA_MAGIC!r}", file=file, offset=0)
    if version != METADATA_VERSION:
        raise LedgerCorrupted(
            f"unsupported metadata version {version} (this reader knows {METADATA_VERSION})", file=file, offset=4
        )
    if len(blob) != size + length:
        raise LedgerCorrupted(
            f"metadata payload should be {length} bytes, file holds {len(blob) - size}",
            file=file,
            offset=min(len(blob), size + length),
        )
    payload = blob[size:]
    if crc != crc32c(blob[:20], payload):
        raise LedgerCorrupted("metadata CRC mismatch", file=file, offset=20)
    if flags != 0:
        raise LedgerCorrupted(f"unknown metadata flags 0x{flags:04x}", file=file, offset=6)
    try:
        body = json.loads(payload.decode())
    except UnicodeDecodeError as exc:
        raise LedgerCorrupted(f"metadata is not UTF-8: {exc.reason}", file=file, offset=size + exc.start) from None
    except json.JSONDecodeError as exc:
        raise LedgerCorrupted(f"metadata is not JSON: {exc.msg}", file=file, offset=size + exc.pos) from None
    try:
        return _metadata_from_json(body, generation)
    except (_Bad, ValueError, TypeError) as exc:
        # The CRC matched, so this is a writer bug or a foreign file, not bit rot; say where.
        raise LedgerCorrupted(f"metadata does not follow the schema: {exc}", file=file, offset=size) from None


def _metadata_from_json(body: object, generation: int) -> Metadata:
    name = _get(body, "name", str)
    next_id = _int(_get(body, "next_ledger_id", int), "next_ledger_id", 0, INT64_MAX)
    records: list[LedgerRecord] = []
    raw_ledgers = _get(body, "ledgers", list)
    assert isinstance(raw_ledgers, list)
    for index, raw in enumerate(raw_ledgers):
        ledger_id = _int(_get(raw, "id", int), f"ledgers[{index}].id", 0, INT64_MAX)
        if isinstance(raw, dict) and "entries" in raw:
            entries = _int(_get(raw, "entries", int), f"ledgers[{index}].entries", 0, INT64_MAX)
            length = _int(_get(raw, "length", int), f"ledgers[{index}].length", LEDGER_HEADER.size, INT64_MAX)
            records.append(LedgerRecord(ledger_id, entries, length))
        else:
            records.append(LedgerRecord(ledger_id))
    ids = [r.ledger_id for r in records]
    if ids != sorted(set(ids)):
        raise _Bad(f"ledger ids must increase: {ids}")
    if not records or not records[-1].is_open or any(r.is_open for r in records[:-1]):
        raise _Bad("exactly the last ledger must be open")
    if next_id <= ids[-1]:
        raise _Bad(f"next_ledger_id {next_id} is not above the last ledger {ids[-1]}")
    cursors: dict[str, CursorState] = {}
    raw_cursors = _get(body, "cursors", dict)
    assert isinstance(raw_cursors, dict)
    for cursor_name, raw in raw_cursors.items():
        cursors[cursor_name] = _cursor_from_json(raw, f"cursors[{cursor_name!r}]")
    journal_lsn = _int(_get(body, "journal_lsn", int), "journal_lsn", -1, INT64_MAX)
    synced = _get(body, "open_synced", list)
    assert isinstance(synced, list)
    if len(synced) != 2:
        raise _Bad(f"open_synced must be [entries, length], got {synced!r}")
    open_synced = (
        _int(synced[0], "open_synced entries", 0, INT64_MAX),
        _int(synced[1], "open_synced length", LEDGER_HEADER.size, INT64_MAX),
    )
    return Metadata(
        name=str(name),
        generation=generation,
        next_ledger_id=next_id,
        ledgers=tuple(records),
        properties=MappingProxyType(_string_map(_get(body, "properties", dict), "properties")),
        cursors=MappingProxyType(cursors),
        journal_lsn=journal_lsn,
        open_synced=open_synced,
    )


def _cursor_from_json(raw: object, where: str) -> CursorState:
    mark = _position(_get(raw, "mark_delete", list), f"{where}.mark_delete")
    deleted = frozenset(
        _position(p, f"{where}.individually_deleted") for p in _as_list(_get(raw, "individually_deleted", list))
    )
    ack_sets: dict[Position, tuple[int, ...]] = {}
    for item in _as_list(_get(raw, "batch_ack_sets", list)):
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], list):
            raise _Bad(f"{where}.batch_ack_sets entries are [position, words]")
        words = tuple(_int(w, f"{where} ack set word", INT64_MIN, INT64_MAX) for w in item[1])
        ack_sets[_position(item[0], f"{where}.batch_ack_sets")] = words
    if any(p <= mark for p in deleted) or any(p <= mark or p in deleted for p in ack_sets):
        raise _Bad(f"{where} records deletions at or below its mark-delete position")
    props = _string_map(_get(raw, "properties", dict), f"{where}.properties")
    return CursorState(mark, deleted, MappingProxyType(ack_sets), MappingProxyType(props))


def _as_list(value: object) -> list[object]:
    assert isinstance(value, list)
    return value


# -- journal record bodies --------------------------------------------------------------------------


def encode_cursor_body(name: str, state: CursorState | None) -> bytes:
    """A CURSOR record's body: the cursor's whole new state, or null when it was deleted."""
    return _canonical_json({"cursor": name, "state": None if state is None else _cursor_json(state)})


def decode_cursor_body(body: bytes, *, file: str, offset: int) -> tuple[str, CursorState | None]:
    try:
        raw_body = json.loads(body.decode())
        name = _get(raw_body, "cursor", str)
        assert isinstance(raw_body, dict) and isinstance(name, str)
        if "state" not in raw_body:
            raise _Bad("missing 'state'")
        raw = raw_body["state"]
        return name, None if raw is None else _cursor_from_json(raw, f"journal cursor {name!r}")
    except UnicodeDecodeError as exc:
        raise LedgerCorrupted(
            f"cursor record is not UTF-8: {exc.reason}", file=file, offset=offset + exc.start
        ) from None
    except json.JSONDecodeError as exc:
        raise LedgerCorrupted(f"cursor record is not JSON: {exc.msg}", file=file, offset=offset + exc.pos) from None
    except (_Bad, ValueError, TypeError) as exc:
        raise LedgerCorrupted(f"cursor record does not follow the schema: {exc}", file=file, offset=offset) from None


def _body_offset(record: RawRecord) -> int:
    return record.offset + JOURNAL_RECORD.size + 3 + len(record.key.encode())


def _meta_of(record: RawRecord) -> Metadata:
    try:
        return decode_metadata(record.body, file=record.file)
    except LedgerCorrupted as exc:
        raise LedgerCorrupted(
            f"metadata record: {exc.args[0].rsplit(' (at byte offset', 1)[0]}",
            file=record.file,
            offset=_body_offset(record) + exc.offset,
        ) from None


_NO_CURSORS: Mapping[str, CursorState] = MappingProxyType({})

# ---------------------------------------------------------------------------------------------
# Recovery: a read-only plan, then the repair.


@dataclass
class _FilePlan:
    """One ledger file of a recovery: what the checkpoint synced of it, and what to append."""

    ledger_id: int
    path: str
    size: int  # bytes the file holds now (0: missing)
    synced: tuple[int, int] | None  # (entries, length) the checkpoint synced; None: created after it
    exact: bool  # closed at the checkpoint: the file must be exactly its synced length
    frames: list[FrameInfo]  # the synced part's frames
    replayed: list[bytes] = field(default_factory=list)  # entries from the journal, after the synced part

    @property
    def base_length(self) -> int:
        return self.synced[1] if self.synced is not None else LEDGER_HEADER.size

    matches: bool = False  # the file already holds exactly what the replay would write (unsynced)

    @property
    def rewrite(self) -> bool:
        if self.matches:
            return False
        return self.synced is None or bool(self.replayed) or self.size != self.base_length

    @property
    def unsynced(self) -> bool:
        """Bytes the checkpoint did not sync are part of the ledger: sync them."""
        return self.synced is None or bool(self.replayed)

    def expected_tail(self) -> bytes:
        """What the file holds after its synced part once the replayed entries are appended."""
        head = encode_ledger_header(self.ledger_id) if self.synced is None else b""
        first = len(self.frames)
        return head + b"".join(encode_frame(first + i, data) for i, data in enumerate(self.replayed))

    def layout(self) -> tuple[list[int], list[int], int]:
        """Frame offsets, payload lengths and end once the replayed entries are appended."""
        offsets = [f.offset for f in self.frames]
        lengths = [f.length for f in self.frames]
        end = self.base_length
        for data in self.replayed:
            offsets.append(end)
            lengths.append(len(data))
            end += FRAME_HEADER.size + len(data)
        return offsets, lengths, end


@dataclass
class RecoveryPlan:
    """What opening a ledger directory will find and repair; made read-only by :func:`plan_recovery`
    (which raises on damage), carried out by :func:`apply_recovery`."""

    directory: str
    meta: Metadata | None  # None: nothing durable names a ledger here (create it)
    files: dict[int, _FilePlan]
    leftovers: list[str]  # file names a crash left behind
    stale: bool  # the directory is an earlier incarnation its deletion (a DROP record) removed
    replayed: int  # journal records applied on top of the checkpoint
    last_lsn: int  # the journal lsn the repaired files cover

    @property
    def changed(self) -> bool:
        return bool(
            self.leftovers or self.stale or self.replayed or any(f.rewrite or f.unsynced for f in self.files.values())
        )


def _read_whole(fs: FileSystem, path: str) -> bytes:
    fd = fs.open(path)
    try:
        return fs.pread(fd, fs.size(fd), 0)
    finally:
        fs.close(fd)


def plan_recovery(
    fs: FileSystem,
    directory: str,
    records: Sequence[RawRecord] = (),
    *,
    name: str | None = None,
    drop_lsn: int | None = None,
) -> RecoveryPlan:
    """Check a ledger directory and the journal ``records`` of it (lsn order), read-only.

    ``drop_lsn``: the journal says the managed ledger was deleted at that lsn, so a directory
    checkpointed before it is a leftover of the deleted incarnation."""
    names = fs.listdir(directory) if fs.exists(directory) else []
    ledger_names = {lid: n for n in names if (lid := parse_ledger_file_name(n)) is not None}
    leftovers = [METADATA_TMP_NAME] if METADATA_TMP_NAME in names else []
    base: Metadata | None = None
    meta_path = os.path.join(directory, METADATA_NAME)
    if METADATA_NAME in names:
        base = decode_metadata(_read_whole(fs, meta_path), file=meta_path)
    if base is not None and drop_lsn is not None and base.journal_lsn < drop_lsn:
        return RecoveryPlan(directory, None, {}, [n for n in names if n != LOCK_NAME], True, 0, drop_lsn)
    if base is not None and name is not None and base.name != name:
        raise ValueError(f"{directory} holds managed ledger {base.name!r}, not {name!r}")
    if base is None:
        # A ledger's creation is a checkpoint, durable before any record of it is written: without
        # METADATA no record can be ours, and no ledger file can hold an acknowledged entry.
        if records:
            first = records[0]
            raise LedgerCorrupted(
                f"the journal holds records of {directory} but it has no METADATA", file=first.file, offset=first.offset
            )
        for lid, file_name in sorted(ledger_names.items()):
            _check_entryless_orphan(fs, os.path.join(directory, file_name), lid)
            leftovers.append(file_name)
        return RecoveryPlan(directory, None, {}, leftovers, False, 0, -1)
    tail = [r for r in records if r.lsn > base.journal_lsn]
    synced: dict[int, tuple[int, int]] = {r.ledger_id: (r.entries or 0, r.length or 0) for r in base.ledgers[:-1]}
    synced[base.ledgers[-1].ledger_id] = base.open_synced
    counts = {lid: entries for lid, (entries, _) in synced.items()}
    replayed: dict[int, list[bytes]] = {}
    meta = base
    cursors = dict(base.cursors)
    for record in tail:
        if record.kind is RecordKind.META:
            new = _meta_of(record)
            if new.name != meta.name:
                raise LedgerCorrupted(
                    f"metadata record names managed ledger {new.name!r}, the directory holds {meta.name!r}",
                    file=record.file,
                    offset=record.offset,
                )
            for info in new.ledgers:
                counts.setdefault(info.ledger_id, 0)
            meta = new  # (a metadata record holds no cursors: those are the CURSOR records')
        elif record.kind is RecordKind.ENTRY:
            ledger_id, entry_id, data = record.entry()
            open_id = meta.ledgers[-1].ledger_id
            if ledger_id != open_id or entry_id != counts.get(ledger_id, 0):
                raise LedgerCorrupted(
                    f"entry record {ledger_id}:{entry_id} does not follow the ledger (open ledger {open_id} "
                    f"holds {counts.get(open_id, 0)} entries)",
                    file=record.file,
                    offset=record.offset,
                )
            counts[ledger_id] = entry_id + 1
            replayed.setdefault(ledger_id, []).append(data)
        elif record.kind is RecordKind.CURSOR:
            cursor, state = decode_cursor_body(record.body, file=record.file, offset=_body_offset(record))
            if state is None:
                cursors.pop(cursor, None)
            else:
                cursors[cursor] = state
        else:
            raise LedgerCorrupted("a DROP record in the middle of a ledger's records", file=record.file, offset=0)
    meta = replace(meta, cursors=MappingProxyType(cursors))
    listed = {r.ledger_id for r in meta.ledgers}
    for lid, file_name in sorted(ledger_names.items()):
        if lid in listed:
            continue
        if lid < meta.ledgers[0].ledger_id or lid >= meta.next_ledger_id:
            # Deleted (the metadata without it is durable, the unlink was not), or created by a
            # roll-over whose metadata never became durable (so none of its entries did either).
            leftovers.append(file_name)
        else:
            raise LedgerCorrupted(
                f"ledger file {file_name} is not in the metadata but lies between ledgers it lists",
                file=os.path.join(directory, file_name),
                offset=0,
            )
    open_at_checkpoint = base.ledgers[-1].ledger_id
    files: dict[int, _FilePlan] = {}
    for info in meta.ledgers:
        lid = info.ledger_id
        path = os.path.join(directory, ledger_file_name(lid))
        present = lid in ledger_names
        extent = synced.get(lid)
        plan = _FilePlan(lid, path, 0, extent, extent is not None and lid != open_at_checkpoint, [])
        plan.replayed = replayed.get(lid, [])
        if extent is not None:
            if not present:
                raise LedgerCorrupted(f"ledger {lid} is in the metadata but its file is missing", file=path, offset=0)
            plan.frames, plan.size = _check_synced(fs, path, lid, extent, exact=plan.exact)
        elif present:
            fd = fs.open(path)
            try:
                plan.size = fs.size(fd)
            finally:
                fs.close(fd)
        if present and (plan.replayed or plan.synced is None):
            # After a process crash (not a power cut) the file holds what the journal replays:
            # then only a sync is missing, and nothing needs rewriting.
            start = 0 if extent is None else extent[1]
            expected = plan.expected_tail()
            if plan.size == start + len(expected):
                fd = fs.open(path)
                try:
                    plan.matches = fs.pread(fd, len(expected), start) == expected
                finally:
                    fs.close(fd)
        if not info.is_open:
            _, _, end = plan.layout()
            total = len(plan.frames) + len(plan.replayed)
            if total != info.entries or end != info.length:
                raise LedgerCorrupted(
                    f"closed ledger {lid} should hold {info.entries} entries in {info.length} bytes, "
                    f"the checkpoint and the journal give {total} entries in {end} bytes",
                    file=path,
                    offset=min(plan.size, info.length or 0),
                )
        files[lid] = plan
    last_lsn = tail[-1].lsn if tail else base.journal_lsn
    return RecoveryPlan(directory, meta, files, leftovers, False, len(tail), last_lsn)


def _check_synced(
    fs: FileSystem, path: str, ledger_id: int, extent: tuple[int, int], *, exact: bool
) -> tuple[list[FrameInfo], int]:
    """A file's checkpointed part must hold exactly its entries (bytes after it were written
    behind, unless the ledger was already closed then)."""
    entries, length = extent
    fd = fs.open(path)
    try:
        size = fs.size(fd)
        # Scan first, so damage is reported where it is rather than as a wrong length.
        scan = scan_ledger(
            lambda o, n: fs.pread(fd, n, o), min(size, length), file=path, ledger_id=ledger_id, allow_torn_tail=False
        )
    finally:
        fs.close(fd)
    if exact and size > length:
        raise LedgerCorrupted(
            f"closed ledger {ledger_id} should hold {entries} entries in {length} bytes, the file holds {size}",
            file=path,
            offset=length,
        )
    if size < length or len(scan.frames) != entries:
        raise LedgerCorrupted(
            f"ledger {ledger_id} should hold {entries} synced entries in {length} bytes, "
            f"found {len(scan.frames)} entries in {min(size, length)} bytes",
            file=path,
            offset=scan.valid_length,
        )
    return list(scan.frames), size


def _check_entryless_orphan(fs: FileSystem, path: str, ledger_id: int) -> None:
    """A ledger file nothing durable names may go only if it holds no entry."""
    fd = fs.open(path)
    try:
        size = fs.size(fd)
        if size > LEDGER_HEADER.size:
            scan = scan_ledger(
                lambda o, n: fs.pread(fd, n, o), size, file=path, ledger_id=ledger_id, allow_torn_tail=True
            )
            if scan.frames:
                raise LedgerCorrupted(
                    f"ledger file {os.path.basename(path)} holds {len(scan.frames)} entries but no METADATA names it",
                    file=path,
                    offset=scan.frames[0].offset,
                )
    finally:
        fs.close(fd)


def apply_recovery(fs: FileSystem, plan: RecoveryPlan) -> tuple[Metadata | None, tuple[tuple[str, int, int], ...]]:
    """Repair what :func:`plan_recovery` found: remove leftovers, rewrite every file from its
    synced part and the replayed entries, sync, and checkpoint.  Returns the checkpointed
    metadata (None when the directory holds no ledger) and the files cut back (path, new length,
    bytes removed).  Raises OSError when a step fails (nothing acknowledged is lost by that)."""
    directory = plan.directory
    if plan.stale:
        if fs.exists(directory):
            fs.rmtree(directory)
            fs.sync_dir(os.path.dirname(directory))
        return None, ()
    for file_name in plan.leftovers:
        fs.unlink(os.path.join(directory, file_name))
    if plan.meta is None:
        if plan.leftovers:
            fs.sync_dir(directory)
        return None, ()
    truncated: list[tuple[str, int, int]] = []
    for file_plan in plan.files.values():
        if not file_plan.rewrite:
            if file_plan.unsynced:
                fd = fs.open(file_plan.path)
                try:
                    fs.sync(fd)
                finally:
                    fs.close(fd)
            continue
        fd = fs.open(file_plan.path, create=True)
        try:
            # Cut back to what the checkpoint synced (a file created after it: its header), then
            # append what the journal replays.
            if file_plan.synced is None:
                fs.truncate(fd, 0)
                fs.pwrite(fd, encode_ledger_header(file_plan.ledger_id), 0)
            elif file_plan.size != file_plan.base_length:
                fs.truncate(fd, file_plan.base_length)
            if file_plan.size > file_plan.base_length:
                truncated.append((file_plan.path, file_plan.base_length, file_plan.size - file_plan.base_length))
            at, entry_id = file_plan.base_length, len(file_plan.frames)
            for data in file_plan.replayed:
                frame = encode_frame(entry_id, data)
                fs.pwrite(fd, frame, at)
                at += len(frame)
                entry_id += 1
            fs.sync(fd)
        finally:
            fs.close(fd)
    current = plan.files[plan.meta.ledgers[-1].ledger_id]
    offsets, _, end = current.layout()
    meta = replace(plan.meta, journal_lsn=plan.last_lsn, open_synced=(len(offsets), end))
    if plan.changed:
        fs.sync_dir(directory)
        write_metadata_file(fs, directory, meta)
    # The plan now describes the files as they are: every entry synced.
    for file_plan in plan.files.values():
        offsets, lengths, end = file_plan.layout()
        file_plan.frames = [FrameInfo(i, o, n) for i, (o, n) in enumerate(zip(offsets, lengths, strict=True))]
        file_plan.replayed = []
        file_plan.synced = (len(offsets), end)
        file_plan.size = end
        file_plan.matches = False
    return meta, tuple(truncated)


def write_metadata_file(fs: FileSystem, directory: str, meta: Metadata) -> None:
    """Replace ``METADATA`` atomically: write ``METADATA.tmp``, sync it, rename it, sync the directory."""
    tmp = os.path.join(directory, METADATA_TMP_NAME)
    fd = fs.open(tmp, create=True, truncate=True)
    try:
        fs.pwrite(fd, encode_metadata(meta), 0)
        fs.sync(fd)
    finally:
        fs.close(fd)
    fs.rename(tmp, os.path.join(directory, METADATA_NAME))
    fs.sync_dir(directory)


# ---------------------------------------------------------------------------------------------
# The ledger.


@dataclass
class _OpenFile:
    """A ledger file this handle reads (and, for the current ledger, writes)."""

    ledger_id: int
    path: str
    fd: int | None  # None: a sealed ledger whose descriptor was given back; reopened to read
    offsets: list[int] = field(default_factory=list)  # frame start of each written entry
    lengths: list[int] = field(default_factory=list)  # payload length of each written entry
    durable_entries: int = 0  # acknowledged: in the journal, synced (or, in a deferred store, written)
    written_end: int = LEDGER_HEADER.size
    payload_bytes: int = 0
    failed: bool = False  # a write failed: no more appends, roll over
    sealed: bool = False  # rolled over: closed at written_entries
    full: bool = False  # full, but the eager roll-over failed: roll before the next append
    dirty: bool = False  # written since the last checkpoint: synced by the next one
    pending: list[tuple[int, int]] = field(default_factory=list)  # (journal ticket, entries) not yet durable

    @property
    def written_entries(self) -> int:
        return len(self.offsets)

    def end_of(self, entries: int) -> int:
        return self.offsets[entries] if entries < len(self.offsets) else self.written_end


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the directory repaired (all of it is what a crash can leave behind)."""

    created: bool = False
    truncated: tuple[tuple[str, int, int], ...] = ()  # (file, new length, bytes removed)
    removed: tuple[str, ...] = ()
    closed_ledger: int | None = None
    replayed: int = 0  # journal records applied on top of the last checkpoint


class FileLedger:
    """A file-backed :class:`~reference.engine.ledger.ManagedLedger`; see the module docstring.

    ``directory`` is created if missing.  ``config`` supplies the roll-over limits.  ``store`` is
    the :class:`~reference.engine.file_store.FileStore` whose journal it writes through (``key`` is
    its directory's name in the store); without one the ledger keeps its own journal in its
    directory.  ``group_commit`` lets concurrent writers share one journal sync (without it a
    writer syncs while holding the lock).  ``max_journal_records`` / ``max_journal_bytes`` bound
    a private journal's segment before a checkpoint (0: checkpoint after every change).  ``fs``
    replaces the OS calls.  Opening recovers the directory (:attr:`recovery` says what it
    repaired) and starts a new ledger; a second handle on an open directory raises
    :class:`LedgerLocked`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: Config | None = None,
        *,
        name: str | None = None,
        group_commit: bool = False,
        first_ledger_id: int = 0,
        fs: FileSystem | None = None,
        max_open_sealed_files: int = MAX_OPEN_SEALED_FILES,
        max_journal_records: int = MAX_JOURNAL_RECORDS,
        max_journal_bytes: int = MAX_JOURNAL_BYTES,
        store: FileStore | None = None,
        key: str = ".",
    ) -> None:
        if max_open_sealed_files < 0:
            raise ValueError(f"max_open_sealed_files must be >= 0, got {max_open_sealed_files}")
        # The file being read stays open during the read, so the bound is never below one.
        self._max_open_sealed = max(1, max_open_sealed_files)
        self._open_sealed: OrderedDict[int, None] = OrderedDict()  # least recently read first
        self._dir = os.path.abspath(os.fspath(directory))
        self._config = config or Config()
        self._group_commit = group_commit
        self._closed = False
        self._files: dict[int, _OpenFile] = {}
        self.dirty = False  # journaled since the last checkpoint
        self._dir_dirty = False  # directory entries changed since the last checkpoint
        self._history: list[tuple[int, Metadata]] = []  # metadata versions not yet durable, by ticket
        self._lock_fd: int | None = None
        self._private = store is None
        if store is None:
            from .file_store import FileStore

            if name is not None:
                # Refused before the private store's recovery touches anything.
                _check_name(fs or OsFileSystem(), self._dir, name)

            store = FileStore(
                self._dir,
                self._config,
                fs=fs or OsFileSystem(),
                lock_store=False,
                max_journal_records=max_journal_records,
                max_journal_bytes=max_journal_bytes,
            )
        self._store = store
        self._fs: FileSystem = store.fs
        self._key = key
        self._lock = store.lock
        try:
            with self._lock:
                self._meta, self.recovery = self._open(name, first_ledger_id)
                self._durable_meta = self._meta
                store.attach(key, self)
        except BaseException:
            self._release_files()
            if self._private:
                store.crash()
            raise
        self._settle(self._opening_ticket)

    # -- paths and small helpers ----------------------------------------------------------------

    def _path(self, file_name: str) -> str:
        return os.path.join(self._dir, file_name)

    @property
    def directory(self) -> Path:
        return Path(self._dir)

    @property
    def name(self) -> str:
        return self._meta.name

    @property
    def config(self) -> Config:
        return self._config

    @property
    def store(self) -> FileStore:
        return self._store

    @property
    def metadata(self) -> Metadata:
        """The current metadata (every acknowledged change applied; ``journal_lsn`` is the last
        checkpoint's): the durable state as recovery would rebuild it."""
        with self._lock:
            return self._meta

    @property
    def _current(self) -> _OpenFile:
        return self._files[self._meta.ledgers[-1].ledger_id]

    # -- opening --------------------------------------------------------------------------------

    def _open(self, name: str | None, first_ledger_id: int) -> tuple[Metadata, RecoveryReport]:
        """Check everything first, read-only; only then repair, so a :class:`LedgerCorrupted`
        leaves the directory exactly as it was found."""
        fs = self._fs
        self._opening_ticket = -1
        if not fs.exists(self._dir):
            # The directory's own entry is synced by the creation (a directory without METADATA
            # holds nothing that was acknowledged); its parents' entries now.
            makedirs_durably(fs, os.path.dirname(self._dir))
            fs.makedirs(self._dir)
        self._lock_fd = fs.lock(self._path(LOCK_NAME))
        earlier = self._store.take_rebuild_report(self._key)
        # A ledger this store checkpointed itself (closed, or rebuilt at its recovery) is known
        # exactly; anything else is checked from disk.
        known = self._store.take_plan(self._key)
        if known is not None and name is not None and known.meta is not None and known.meta.name != name:
            known = None
        plan = known if known is not None else plan_recovery(fs, self._dir, (), name=name)
        if plan.meta is None:
            meta = self._create(plan, name, first_ledger_id)
            return meta, RecoveryReport(created=True, removed=tuple(plan.leftovers), replayed=earlier.replayed)
        recovered, truncated = apply_recovery(fs, plan)
        assert recovered is not None
        meta = recovered
        if self._store.first_open(self._key):
            # Its directory and the directory's entry must be durable before any record of it is
            # (a creation that failed after METADATA, before its syncs, left them unsynced).
            fs.sync_dir(self._dir)
            fs.sync_dir(os.path.dirname(self._dir))
        for file_plan in plan.files.values():
            opened = _OpenFile(file_plan.ledger_id, file_plan.path, None)
            opened.offsets = [f.offset for f in file_plan.frames]
            opened.lengths = [f.length for f in file_plan.frames]
            opened.durable_entries = len(opened.offsets)
            opened.written_end = file_plan.base_length
            opened.payload_bytes = sum(opened.lengths)
            self._files[file_plan.ledger_id] = opened
        self._meta = meta
        # Close the recovered open ledger and start a new one, as Pulsar's new owner does.
        last = self._files[meta.ledgers[-1].ledger_id]
        closed = replace(meta.ledgers[-1], entries=last.written_entries, length=last.written_end)
        self._opening_ticket = self._open_new_ledger(replace(meta, ledgers=(*meta.ledgers[:-1], closed)))
        for record in self._meta.ledgers[:-1]:
            self._seal_file(self._files[record.ledger_id])
        report = RecoveryReport(
            truncated=earlier.truncated + truncated,
            removed=earlier.removed + tuple(plan.leftovers),
            closed_ledger=closed.ledger_id,
            replayed=earlier.replayed + plan.replayed,
        )
        return self._meta, report

    def _create(self, plan: RecoveryPlan, name: str | None, first_ledger_id: int) -> Metadata:
        """A new managed ledger, created durably (its creation is a checkpoint): leftovers gone,
        the first ledger file synced, METADATA committed, the directory's own entry synced."""
        fs = self._fs
        # Everything queued before is made durable first, so the store's journal order stays the
        # order of its changes: no power cut keeps this ledger and loses a change made before it.
        self._store.flush()
        apply_recovery(fs, plan)
        path = self._path(ledger_file_name(first_ledger_id))
        fd = fs.open(path, create=True, truncate=True)
        self._files[first_ledger_id] = _OpenFile(first_ledger_id, path, fd)
        fs.pwrite(fd, encode_ledger_header(first_ledger_id), 0)
        fs.sync(fd)
        # The file's name is durable before the METADATA naming it can be (a power cut may keep a
        # later directory operation, the rename, and lose an earlier one).
        fs.sync_dir(self._dir)
        meta = Metadata(
            name or os.path.basename(self._dir),
            0,
            first_ledger_id + 1,
            (LedgerRecord(first_ledger_id),),
            MappingProxyType({}),
            MappingProxyType({}),
            journal_lsn=self._store.journal.durable_lsn,
            open_synced=(0, LEDGER_HEADER.size),
        )
        write_metadata_file(fs, self._dir, meta)
        fs.sync_dir(os.path.dirname(self._dir))
        self._store.first_open(self._key)
        return meta

    # -- journal records (callers hold the lock) ------------------------------------------------

    def _record(self, kind: RecordKind, body: bytes) -> int:
        ticket = self._store.record(self._key, kind, body)
        self.dirty = True
        return ticket

    def _record_meta(self, meta: Metadata) -> int:
        """Journal a new metadata version and adopt it; returns the record's ticket."""
        meta = replace(meta, generation=meta.generation + 1)
        # Cursors are not in a metadata record: each change of one is its own CURSOR record.
        ticket = self._record(RecordKind.META, encode_metadata(replace(meta, cursors=_NO_CURSORS)))
        self._adopt(ticket, meta)
        return ticket

    def _adopt(self, ticket: int, meta: Metadata) -> None:
        self._meta = meta
        if not self._store.deferred:
            self._history.append((ticket, meta))

    def _settle(self, ticket: int) -> None:
        """Wait until the record ``ticket`` (and so every earlier one) is durable; on failure,
        undo everything of this handle that is not durable and raise LedgerWriteFailed."""
        if ticket < 0 or self._store.deferred:
            return
        try:
            self._store.wait(ticket)
        except LedgerWriteFailed:
            with self._lock:
                self._store.revert_all()
            raise
        with self._lock:
            self._durable_upto(ticket)
        self._store.maybe_checkpoint()

    def _durable_upto(self, ticket: int) -> None:
        while self._history and self._history[0][0] <= ticket:
            _, self._durable_meta = self._history.pop(0)
        for opened in self._files.values():
            while opened.pending and opened.pending[0][0] <= ticket:
                _, entries = opened.pending.pop(0)
                opened.durable_entries = max(opened.durable_entries, entries)

    def _revert(self) -> None:
        """A journal batch failed: nothing of this handle that was not durable survives (the
        journal was cut back), so memory goes back to the durable state; a ledger that lost
        entries takes no append until it is rolled over (Pulsar's rule after a failed add)."""
        self._meta = self._durable_meta
        self._history.clear()
        listed = {r.ledger_id for r in self._meta.ledgers}
        for ledger_id in [lid for lid in self._files if lid not in listed]:
            gone = self._files.pop(ledger_id)
            self._open_sealed.pop(ledger_id, None)
            if gone.fd is not None:
                _best_effort(partial(self._fs.close, gone.fd))
            _best_effort(partial(self._fs.unlink, gone.path))
            self._dir_dirty = True
        for opened in self._files.values():
            opened.pending.clear()
            if opened.written_entries > opened.durable_entries:
                end = opened.end_of(opened.durable_entries)
                del opened.offsets[opened.durable_entries :]
                del opened.lengths[opened.durable_entries :]
                opened.written_end = end
                opened.payload_bytes = sum(opened.lengths)
                opened.failed = True
                opened.dirty = True
                if opened.fd is not None:
                    _best_effort(partial(self._fs.truncate, opened.fd, end))
        current = self._current
        current.sealed = False

    def _write_op(self, change: Callable[[], int]) -> None:
        """Run ``change`` (which journals and returns a ticket) under the lock, then settle it:
        inside the lock without group commit, outside it (so others can queue) with it."""
        with self._lock:
            self._check_open()
            ticket = change()
            if not self._group_commit:
                self._settle(ticket)
                return
        self._settle(ticket)

    # -- checkpoints (the store calls these with its lock held) --------------------------------

    def _checkpoint_locked(self, lsn: int) -> None:
        """Make the files self-sufficient up to journal lsn ``lsn``: sync every ledger file written
        since the last checkpoint, sync the directory, commit METADATA saying so."""
        fs = self._fs
        for opened in self._files.values():
            if opened.dirty:
                fd = self._fd(opened)
                if fs.size(fd) != opened.written_end:
                    fs.truncate(fd, opened.written_end)  # a failed write's bytes after the last entry
                fs.sync(fd)
        if self._dir_dirty:
            fs.sync_dir(self._dir)
        current = self._current
        meta = replace(self._meta, journal_lsn=lsn, open_synced=(current.written_entries, current.written_end))
        write_metadata_file(fs, self._dir, meta)
        for opened in self._files.values():
            opened.dirty = False
        self._meta = self._durable_meta = meta
        self._history.clear()
        self._dir_dirty = False
        self.dirty = False

    def _open_new_ledger(self, meta: Metadata) -> int:
        """Create the next ledger's file (written behind) and journal ``meta`` with it as the open
        ledger; ``meta`` already records the previous ledger as closed.  Returns the ticket."""
        fs = self._fs
        ledger_id = meta.next_ledger_id
        path = self._path(ledger_file_name(ledger_id))
        fd: int | None = None
        try:
            fd = fs.open(path, create=True, truncate=True)
            fs.pwrite(fd, encode_ledger_header(ledger_id), 0)
        except OSError as exc:
            if fd is not None:
                _best_effort(partial(fs.close, fd))
            _best_effort(partial(fs.unlink, path))
            raise LedgerWriteFailed(f"cannot create {path}: {exc}") from exc
        self._files[ledger_id] = _OpenFile(ledger_id, path, fd, dirty=True)
        self._dir_dirty = True
        try:
            return self._record_meta(
                replace(meta, next_ledger_id=ledger_id + 1, ledgers=(*meta.ledgers, LedgerRecord(ledger_id)))
            )
        except LedgerWriteFailed:
            del self._files[ledger_id]
            _best_effort(partial(fs.close, fd))
            _best_effort(partial(fs.unlink, path))
            raise

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Make everything written durable, checkpoint, release the files and the lock.
        Idempotent.  If the checkpoint fails the journal still holds every acknowledged change."""
        if self._private:
            with self._lock:
                if self._closed:
                    return
            self._store.close()
            return
        self._store.close_ledger(self._key, self)

    def _close_locked(self, lsn: int | None) -> RecoveryPlan | None:
        """The store's part of closing: checkpoint at ``lsn`` (None: it failed or was not wanted).
        Returns what a reopening needs to know of the files when they are exactly as checkpointed
        (the store keeps it, so the next handle need not scan them again)."""
        if self._closed:
            return None
        if lsn is not None and self.dirty:
            self._checkpoint_locked(lsn)
        known = None if self.dirty or self._dir_dirty else self._as_plan()
        self._closed = True
        self._release_files()
        return known

    def _as_plan(self) -> RecoveryPlan:
        files = {}
        for record in self._meta.ledgers:
            opened = self._files[record.ledger_id]
            frames = [FrameInfo(i, o, n) for i, (o, n) in enumerate(zip(opened.offsets, opened.lengths, strict=True))]
            extent = (opened.written_entries, opened.written_end)
            files[record.ledger_id] = _FilePlan(
                record.ledger_id, opened.path, opened.written_end, extent, not record.is_open, frames
            )
        return RecoveryPlan(self._dir, self._meta, files, [], False, 0, self._meta.journal_lsn)

    def crash(self) -> None:
        """Stop as a killed process would: no sync, no checkpoint, files and lock released.
        What the journal already holds stays (it is the store's; a lone ledger's is its own)."""
        if self._private:
            self._store.crash()
            return
        self._store.crash_ledger(self._key, self)

    def _crash_locked(self) -> None:
        self._closed = True
        self._release_files()

    def _release_files(self) -> None:
        for opened in self._files.values():
            if opened.fd is not None:
                _best_effort(partial(self._fs.close, opened.fd))
                opened.fd = None
        self._open_sealed.clear()
        lock_fd, self._lock_fd = self._lock_fd, None
        if lock_fd is not None:
            _best_effort(lambda: self._fs.unlock(lock_fd))

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosed(f"managed ledger {self.name} is closed")
        if self._store.failed is not None and not self._store.deferred:
            raise LedgerWriteFailed(f"the journal of {self.name} failed: {self._store.failed}")

    # -- appends --------------------------------------------------------------------------------

    def append(self, data: bytes) -> Position:
        """Append one entry; returns its position once it is durable (its journal record synced)."""
        payload = bytes(data)
        if len(payload) > MAX_ENTRY_BYTES:
            raise ValueError(f"an entry holds at most {MAX_ENTRY_BYTES} bytes, got {len(payload)}")
        with self._lock:
            self._check_open()
            while self._current.full:
                # Full, and its roll-over failed: roll it now (or find it rolled).
                self._settle_locked(self._roll_locked(self._current))
                self._check_open()
            ledger = self._current
            if ledger.failed:
                raise LedgerClosed(f"ledger {ledger.ledger_id} of {self.name} had a write failure; roll over first")
            entry_id = ledger.written_entries
            offset = ledger.written_end
            try:
                self._fs.pwrite(self._fd(ledger), encode_frame(entry_id, payload), offset)
            except OSError as exc:
                ledger.failed = ledger.dirty = True
                raise LedgerWriteFailed(f"write to {ledger.path} failed: {exc}") from exc
            ticket = self._record(RecordKind.ENTRY, encode_entry_body(ledger.ledger_id, entry_id, payload))
            ledger.offsets.append(offset)
            ledger.lengths.append(len(payload))
            ledger.written_end = offset + FRAME_HEADER.size + len(payload)
            ledger.payload_bytes += len(payload)
            ledger.dirty = True
            if self._store.deferred:
                ledger.durable_entries = ledger.written_entries  # the store's barrier holds the answers
            else:
                ledger.pending.append((ticket, ledger.written_entries))
            if ledger_is_full(ledger.written_entries, ledger.payload_bytes, self._config):
                # Mark it first: no other appender may write into a full ledger meanwhile.
                ledger.full = True
                with contextlib.suppress(LedgerError):
                    # If the roll fails the entry may still be durable (below); the next append retries it.
                    ticket = max(ticket, self._roll_locked(ledger))
            position = Position(ledger.ledger_id, entry_id)
            if not self._group_commit:
                self._settle(ticket)
                return position
        self._settle(ticket)
        return position

    def _settle_locked(self, ticket: int) -> None:
        self._settle(ticket)

    def roll_over(self) -> None:
        """Close the current ledger at its last written entry and open the next one."""
        self._write_op(lambda: self._roll_locked(self._current))

    def _roll_locked(self, old: _OpenFile) -> int:
        if self._closed or self._current is not old:
            return -1  # another thread rolled it (or closed the ledger)
        closed = LedgerRecord(old.ledger_id, old.written_entries, old.written_end)
        ticket = self._open_new_ledger(replace(self._meta, ledgers=(*self._meta.ledgers[:-1], closed)))
        self._seal_file(old)
        return ticket

    # -- descriptors of sealed ledgers ----------------------------------------------------------

    def _seal_file(self, ledger: _OpenFile) -> None:
        """``ledger`` takes no more appends: its descriptor joins the bounded set kept for reads."""
        ledger.sealed = True
        if ledger.fd is not None:
            self._touch(ledger)

    def _touch(self, ledger: _OpenFile) -> None:
        self._open_sealed[ledger.ledger_id] = None
        self._open_sealed.move_to_end(ledger.ledger_id)
        while len(self._open_sealed) > self._max_open_sealed:
            victim_id, _ = self._open_sealed.popitem(last=False)
            victim = self._files.get(victim_id)
            if victim is not None and victim.fd is not None:
                fd, victim.fd = victim.fd, None
                _best_effort(partial(self._fs.close, fd))

    def _fd(self, ledger: _OpenFile) -> int:
        """The descriptor to read ``ledger`` through, reopening a sealed ledger's file if it was closed."""
        if ledger.fd is None:
            try:
                ledger.fd = self._fs.open(ledger.path)
            except OSError as exc:
                raise LedgerError(f"cannot reopen sealed ledger file {ledger.path}: {exc}") from exc
        if ledger.sealed:
            self._touch(ledger)
        return ledger.fd

    # -- reads ----------------------------------------------------------------------------------

    def _read_locked(self, ledger: _OpenFile, entry_id: int) -> bytes:
        offset = ledger.offsets[entry_id]
        length = ledger.lengths[entry_id]
        try:
            frame = self._fs.pread(self._fd(ledger), FRAME_HEADER.size + length, offset)
        except OSError as exc:
            raise LedgerError(f"read of {ledger.path} failed: {exc}") from exc
        # Verify on every read: damage after open must never be returned as data.
        if len(frame) != FRAME_HEADER.size + length:
            raise LedgerCorrupted(f"entry {entry_id} is cut short", file=ledger.path, offset=offset + len(frame))
        found_length, found_id, head_crc, payload_crc = FRAME_HEADER.unpack_from(frame)
        if head_crc != crc32c(frame[:12]) or found_length != length or found_id != entry_id:
            raise LedgerCorrupted(f"frame header of entry {entry_id} changed on disk", file=ledger.path, offset=offset)
        payload = frame[FRAME_HEADER.size :]
        if payload_crc != crc32c(payload):
            raise LedgerCorrupted(
                f"payload CRC mismatch in entry {entry_id}", file=ledger.path, offset=offset + FRAME_HEADER.size
            )
        return payload

    def read(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` durable entries at or after ``start``, crossing ledgers."""
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        with self._lock:
            self._check_readable()
            out: list[Entry] = []
            for record in self._meta.ledgers:
                if len(out) >= max_entries:
                    break
                if record.ledger_id < start.ledger_id:
                    continue
                ledger = self._files[record.ledger_id]
                first = max(start.entry_id, 0) if record.ledger_id == start.ledger_id else 0
                for entry_id in range(first, min(ledger.durable_entries, first + max_entries - len(out))):
                    out.append(Entry(Position(record.ledger_id, entry_id), self._read_locked(ledger, entry_id)))
            return out

    def read_entry(self, position: Position) -> bytes:
        with self._lock:
            self._check_readable()
            ledger = self._files.get(position.ledger_id)
            if ledger is None or not 0 <= position.entry_id < ledger.durable_entries:
                raise NoSuchEntry(f"no entry at {position} in {self.name}")
            return self._read_locked(ledger, position.entry_id)

    def _check_readable(self) -> None:
        if self._closed:
            raise LedgerClosed(f"managed ledger {self.name} is closed")

    def _infos_locked(self) -> tuple[LedgerInfo, ...]:
        return tuple(LedgerInfo(r.ledger_id, self._files[r.ledger_id].durable_entries) for r in self._meta.ledgers)

    def _last_confirmed_locked(self) -> Position:
        current = self._current
        return Position(current.ledger_id, current.durable_entries - 1)

    def last_confirmed(self) -> Position:
        with self._lock:
            self._check_readable()
            return self._last_confirmed_locked()

    def ledgers(self) -> tuple[LedgerInfo, ...]:
        with self._lock:
            self._check_readable()
            return self._infos_locked()

    # -- deletion -------------------------------------------------------------------------------

    def delete_consumed_ledgers(self, up_to: int | None = None) -> tuple[int, ...]:
        """Delete every non-current ledger all cursors have mark-deleted (with ``up_to``, only ids
        at most ``up_to``).  The metadata without them is journaled first; their files are
        unlinked once it is durable (a crash before leaves files recovery removes)."""
        doomed: tuple[int, ...] = ()

        def change() -> int:
            nonlocal doomed
            doomed = consumed_ledgers(
                self._infos_locked(),
                self._current.ledger_id,
                [c.mark_delete for c in self._meta.cursors.values()],
                up_to,
            )
            if not doomed:
                return -1
            gone = set(doomed)
            ticket = self._record_meta(
                replace(self._meta, ledgers=tuple(r for r in self._meta.ledgers if r.ledger_id not in gone))
            )
            paths = []
            for ledger_id in doomed:
                opened = self._files.pop(ledger_id)
                self._open_sealed.pop(ledger_id, None)
                if opened.fd is not None:
                    _best_effort(partial(self._fs.close, opened.fd))
                paths.append(opened.path)
            self._dir_dirty = True
            self._store.after_durable(ticket, partial(_unlink_all, self._fs, paths))
            return ticket

        self._write_op(change)
        return doomed

    # -- properties -----------------------------------------------------------------------------

    @property
    def properties(self) -> Mapping[str, str]:
        with self._lock:
            return self._meta.properties

    def _set_properties(self, change: Callable[[dict[str, str]], None]) -> None:
        def journal() -> int:
            props = dict(self._meta.properties)
            change(props)
            return self._record_meta(replace(self._meta, properties=MappingProxyType(props)))

        self._write_op(journal)

    def set_property(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"property keys and values are str, got {type(key).__name__}={type(value).__name__}")
        self._set_properties(lambda props: props.__setitem__(key, value))

    def remove_property(self, key: str) -> None:
        def remove(props: dict[str, str]) -> None:
            props.pop(key, None)

        self._set_properties(remove)

    # -- cursors --------------------------------------------------------------------------------

    def _journal_cursor(self, name: str, state: CursorState | None) -> int:
        """Journal cursor ``name``'s new state (None: deleted) and adopt it; returns the ticket."""
        cursors = dict(self._meta.cursors)
        if state is None:
            cursors.pop(name, None)
        else:
            cursors[name] = state
        ticket = self._record(RecordKind.CURSOR, encode_cursor_body(name, state))
        self._adopt(ticket, replace(self._meta, cursors=MappingProxyType(cursors)))
        return ticket

    def open_cursor(self, name: str, initial_position: InitialPosition = InitialPosition.LATEST) -> Cursor:
        check_cursor_name(name)

        def create() -> int:
            if name in self._meta.cursors:
                return -1
            state = initial_cursor_state(initial_position, self._infos_locked(), self._last_confirmed_locked())
            return self._journal_cursor(name, state)

        self._write_op(create)
        return Cursor(self, name)

    def delete_cursor(self, name: str) -> None:
        self._write_op(lambda: self._journal_cursor(name, None) if name in self._meta.cursors else -1)

    def cursors(self) -> tuple[Cursor, ...]:
        with self._lock:
            return tuple(Cursor(self, name) for name in sorted(self._meta.cursors))

    def cursor_state(self, name: str) -> CursorState:
        with self._lock:
            try:
                return self._meta.cursors[name]
            except KeyError:
                raise LedgerClosed(f"cursor {name} of {self.name} was deleted") from None

    def update_cursor(
        self, name: str, change: Callable[[CursorState, tuple[LedgerInfo, ...], Position], CursorState]
    ) -> None:
        def journal() -> int:
            try:
                state = self._meta.cursors[name]
            except KeyError:
                raise LedgerClosed(f"cursor {name} of {self.name} was deleted") from None
            new = change(state, self._infos_locked(), self._last_confirmed_locked())
            return self._journal_cursor(name, new) if new != state else -1

        self._write_op(journal)

    def __repr__(self) -> str:
        return f"FileLedger({self._dir!r}, ledgers={[r.ledger_id for r in self._meta.ledgers]})"


def _check_name(fs: FileSystem, directory: str, name: str) -> None:
    path = os.path.join(directory, METADATA_NAME)
    if fs.exists(path):
        found = decode_metadata(_read_whole(fs, path), file=path).name
        if found != name:
            raise ValueError(f"{directory} holds managed ledger {found!r}, not {name!r}")


def _unlink_all(fs: FileSystem, paths: Sequence[str]) -> None:
    for path in paths:
        _best_effort(partial(fs.unlink, path))


def _best_effort(action: Callable[[], object]) -> None:
    # Clean-up after a failure, or of state recovery also repairs: a second error here must
    # not hide the first, and leaves nothing recovery cannot handle.
    with contextlib.suppress(OSError):
        action()


def read_metadata_file(path: str | os.PathLike[str]) -> Metadata:
    """Decode a ``METADATA`` file (read-only; for inspection)."""
    blob = Path(path).read_bytes()
    return decode_metadata(blob, file=os.fspath(path))


def entries_of(scan: LedgerScan, data: bytes) -> Sequence[bytes]:
    """The payloads of a scanned in-memory ledger file."""
    return [data[f.payload_offset : f.end] for f in scan.frames]
