"""The bytes of a file ledger's directory: ledger files (a header, then framed entries), ``METADATA``
(a header, then canonical JSON) and the body of a journal's CURSOR record; pure encoders, decoders
and a frame-by-frame scanner, and :class:`LedgerCorrupted`, which names the file and the byte
offset of the first damage.  The layouts are drawn in ``docs/engine/ledgers.md``; the ledger that
writes them is :class:`~engine.storage.file_ledger.FileLedger`, the repair that reads them
:mod:`engine.storage.file_recovery`, the tool that prints them :mod:`engine.storage.inspect`.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

import google_crc32c

from engine.storage.ledger import LedgerError
from reference.cursor import CursorState
from spec.errors import InputError
from spec.types import INT64_MAX, INT64_MIN, Position

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
# magic, version, flags, ledger id, CRC32C of the 16 bytes before it.
LEDGER_HEADER: Final = struct.Struct(">4sHHQI")
# payload length, entry id, CRC32C of those 12 bytes, CRC32C of the payload.
FRAME_HEADER: Final = struct.Struct(">IQII")
# magic, version, flags, generation, payload length, CRC32C of the 20 bytes before it + payload.
METADATA_HEADER: Final = struct.Struct(">4sHHQII")
MAX_ENTRY_BYTES: Final = 0xFFFF_FFFF

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


def read_metadata_file(path: str | os.PathLike[str]) -> Metadata:
    """Decode a ``METADATA`` file (read-only; for inspection)."""
    blob = Path(path).read_bytes()
    return decode_metadata(blob, file=os.fspath(path))


def entries_of(scan: LedgerScan, data: bytes) -> Sequence[bytes]:
    """The payloads of a scanned in-memory ledger file."""
    return [data[f.payload_offset : f.end] for f in scan.frames]
