"""Read-only decoding of a file-ledger directory, a ledger file or one entry, for
``txnmodel inspect``.

Every function returns plain ``dict``/``list``/``str``/``int``/``bool``/``None`` values, ready
for ``json.dump``; :func:`render_text` prints the same report for people.  Nothing here writes:
a torn tail is reported, not truncated, and damage is reported where it is (file, byte offset)
instead of raised, so one bad frame does not hide the rest of a directory.  Frames whose header
is intact are all listed, each with its own CRC verdict; a damaged frame header ends the walk
of that file, because the next frame's position is no longer known.

Entries are decoded through :mod:`spec.envelope`: a PIP-160 batched envelope or a plain record
of the transaction log or of a pending-ack log.  With ``kind=None`` each entry is tried as both
and every kind it decodes as is shown (a plain protobuf record can be valid as both).

An entry that is a Pulsar message (a topic entry, :mod:`spec.topic_entry`: topic entries and the
transaction buffer's snapshot records on the namespace system topics) is also shown as one, with
its key and, for a snapshot topic, the Avro record (:mod:`spec.snapshot_avro`) decoded.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from engine.storage.disk import OsFileSystem
from engine.storage.file_format import (
    FRAME_HEADER,
    LEDGER_HEADER,
    LEDGER_MAGIC,
    METADATA_NAME,
    METADATA_TMP_NAME,
    VERSION,
    LedgerCorrupted,
    Metadata,
    crc32c,
    decode_cursor_body,
    decode_metadata,
    ledger_file_name,
    parse_ledger_file_name,
)
from engine.storage.file_recovery import plan_recovery
from engine.storage.journal import (
    RawRecord,
    RecordKind,
    SegmentScan,
    group_by_key,
    parse_segment_file_name,
    read_segments,
    scan_segment,
)
from reference.cursor import CursorState
from spec import snapshot_avro
from spec.envelope import LogKind, decode_entry
from spec.errors import BadTopicEntry, InputError
from spec.topic_entry import TXN_ABORT_MARKER, TXN_COMMIT_MARKER, decode_frame, iter_batch_payload
from spec.types import Position

__all__ = [
    "inspect_directory",
    "inspect_entry",
    "inspect_journal",
    "inspect_ledger_file",
    "inspect_metadata",
    "inspect_path",
    "inspect_store",
    "read_entry",
    "render_text",
]

Json = dict[str, Any]


def _error(exc: Exception) -> Json:
    out: Json = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, LedgerCorrupted):
        out.update(file=exc.file, offset=exc.offset)
    elif (offset := getattr(exc, "offset", None)) is not None:
        out["offset"] = offset
    return out


def _kinds(kind: LogKind | None) -> Iterable[LogKind]:
    return (kind,) if kind is not None else tuple(LogKind)


# ---------------------------------------------------------------------------------------------
# One entry.


_AVRO_DECODERS = {
    "TransactionBufferSnapshot": snapshot_avro.decode_snapshot,
    "TransactionBufferSnapshotSegment": snapshot_avro.decode_segment,
    "TransactionBufferSnapshotIndexes": snapshot_avro.decode_indexes,
}
_SYSTEM_TOPICS = {local: name for name, local in snapshot_avro.SNAPSHOT_TOPICS.items()}


def _snapshot_schema(topic: str | None) -> str | None:
    """The Avro record a managed ledger named ``topic`` holds, if it is a snapshot system topic."""
    if topic is None:
        return None
    return _SYSTEM_TOPICS.get(topic.rsplit("/", 1)[-1])


def inspect_message(data: bytes, *, topic: str | None = None, where: str | None = None) -> Json | None:
    """The entry as a Pulsar message (:mod:`spec.topic_entry`), or None if it is not one.

    Returns ``{"key", "null_value", "num_messages_in_batch", "record": {schema: json}, "errors":
    {schema: error}}``.  The payload is decoded as the snapshot record of ``topic``'s system topic;
    without ``topic``, as a segment when the key is ``multiple-...``, else as every snapshot
    schema it fits (a tombstone has no record).
    """
    try:
        frame = decode_frame(data, where=where)
    except BadTopicEntry:
        return None
    message = frame.entry
    key = message.partition_key
    txn = message.txn_id
    marker = message.marker_type
    out: Json = {
        "key": key,
        "null_value": message.null_value,
        "num_messages_in_batch": frame.num_messages_in_batch,
        "record": {},
        "errors": {},
        "txn": [txn.most_sig_bits, txn.least_sig_bits] if txn is not None else None,
        "marker": _MARKERS.get(marker, str(marker)) if marker is not None else None,
        "deliver_at": message.deliver_at,
        "publish_time": message.publish_time,
        "payload": None,
        "batch": None,
    }
    if message.null_value:
        return out
    schema = _snapshot_schema(topic)
    if schema is not None:
        schemas: tuple[str, ...] = (schema,)
    elif key is not None and key.startswith("multiple-"):
        schemas = ("TransactionBufferSnapshotSegment",)
    elif topic is None and key is not None and out["txn"] is None and out["marker"] is None:
        schemas = ("TransactionBufferSnapshot", "TransactionBufferSnapshotIndexes")
    else:
        _topic_payload(out, message.payload, where)
        return out
    for name in schemas:
        try:
            record = _AVRO_DECODERS[name](message.payload, where=where)
        except InputError as exc:
            out["errors"][name] = _error(exc)
            continue
        out["record"][name] = json_format.MessageToDict(record, preserving_proto_field_name=True)
    return out


_MARKERS = {TXN_COMMIT_MARKER: "TXN_COMMIT", TXN_ABORT_MARKER: "TXN_ABORT"}


def _text(payload: bytes) -> str:
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + payload[:32].hex() + ("..." if len(payload) > 32 else "")
    return text if len(text) <= 80 else text[:77] + "..."


def _topic_payload(out: Json, payload: bytes, where: str | None) -> None:
    """A topic entry's payload: one message, or a batch, listed message by message up to any damage
    (its offset is within the payload)."""
    count = out["num_messages_in_batch"]
    if out["marker"] is not None:
        return
    if count is None:
        out["payload"] = _text(payload)
        return
    messages: list[Json] = []
    try:
        for index, single in enumerate(iter_batch_payload(payload, count, where=where)):
            messages.append({"index": index, "key": single.partition_key, "payload": _text(single.payload)})
    except BadTopicEntry as exc:
        out["errors"]["batch"] = {"message": exc.reason, "offset": exc.offset}
    out["batch"] = messages


def inspect_entry(
    data: bytes, *, kind: LogKind | None = None, where: str | None = None, topic: str | None = None
) -> Json:
    """Decode one entry's bytes.

    Returns ``{"length", "hex_prefix", "decoded": {kind: {"batched", "version", "batch_size",
    "records"}}, "errors": {kind: error}, "message": ...}``; ``records`` are the protobuf records
    as JSON (proto field names, enums by name).  A kind that does not decode is listed under
    ``errors`` with the byte offset of the problem.  ``message`` is :func:`inspect_message`'s
    view (``topic``: the managed ledger's name, when known).
    """
    decoded: Json = {}
    errors: Json = {}
    for k in _kinds(kind):
        try:
            entry = decode_entry(data, k, where=where)
        except InputError as exc:
            errors[k.value] = _error(exc)
            continue
        decoded[k.value] = {
            "batched": entry.batched,
            "version": entry.version,
            "batch_size": entry.batch_size,
            "records": [
                json_format.MessageToDict(r, preserving_proto_field_name=True, use_integers_for_enums=False)
                for r in entry.records
            ],
        }
    return {
        "length": len(data),
        "hex_prefix": data[:32].hex(),
        "decoded": decoded,
        "errors": errors,
        "message": inspect_message(data, topic=topic, where=where),
    }


# ---------------------------------------------------------------------------------------------
# Files.


def _walk_frames(data: bytes, file: str, *, open_ledger: bool) -> tuple[list[Json], Json | None, Json | None]:
    """Frames of a ledger file body: (frames, torn tail or None, error or None).  Same rules
    as :func:`engine.storage.file_format.scan_ledger`, but a payload CRC mismatch is recorded
    on the frame and the walk goes on (its header, hence its length, is intact)."""
    frames: list[Json] = []
    offset = LEDGER_HEADER.size
    size = len(data)
    while offset < size:
        remaining = size - offset
        if remaining < FRAME_HEADER.size:
            problem = f"file ends inside a frame header ({remaining} of {FRAME_HEADER.size} bytes)"
            return frames, *_tail_or_error(open_ledger, file, offset, remaining, "incomplete frame header", problem)
        head = data[offset : offset + FRAME_HEADER.size]
        length, entry_id, head_crc, payload_crc = FRAME_HEADER.unpack(head)
        if head_crc != crc32c(head[:12]):
            if open_ledger and data[offset:].count(0) == remaining:
                return frames, {"offset": offset, "bytes": remaining, "reason": "zero-filled tail"}, None
            return frames, None, _error(LedgerCorrupted("frame header CRC mismatch", file=file, offset=offset))
        end = offset + FRAME_HEADER.size + length
        if end > size:
            problem = f"frame of {length} bytes runs past the end of the file ({size} bytes)"
            return frames, *_tail_or_error(open_ledger, file, offset, remaining, "incomplete last frame", problem)
        payload = data[offset + FRAME_HEADER.size : end]
        frames.append(
            {
                "entry_id": entry_id,
                "expected_entry_id": len(frames),
                "offset": offset,
                "length": length,
                "crc_ok": payload_crc == crc32c(payload),
                "payload": payload,
            }
        )
        offset = end
    return frames, None, None


def _tail_or_error(
    open_ledger: bool, file: str, offset: int, remaining: int, reason: str, problem: str
) -> tuple[Json | None, Json | None]:
    if open_ledger:
        return {"offset": offset, "bytes": remaining, "reason": reason}, None
    return None, _error(LedgerCorrupted(problem, file=file, offset=offset))


def inspect_ledger_file(
    path: str | os.PathLike[str],
    *,
    kind: LogKind | None = None,
    open_ledger: bool = True,
    decode: bool = True,
    expected_entries: int | None = None,
    expected_length: int | None = None,
    topic: str | None = None,
) -> Json:
    """One ledger file: its header, every frame (offset, length, CRC verdict, decoded entry),
    a torn tail (only an open ledger may have one) and the first damage found.

    ``expected_entries``/``expected_length`` are what the metadata records for a closed ledger;
    a mismatch is reported as an error, as recovery would.
    """
    file = os.fspath(path)
    data = Path(file).read_bytes()
    report: Json = {"file": file, "size": len(data), "header": None, "entries": [], "torn_tail": None, "error": None}
    if len(data) < LEDGER_HEADER.size:
        report["error"] = _error(
            LedgerCorrupted(f"file has {len(data)} bytes, shorter than the header", file=file, offset=len(data))
        )
        return report
    magic, version, flags, ledger_id, header_crc = LEDGER_HEADER.unpack_from(data)
    report["header"] = {
        "magic": magic.hex(),
        "version": version,
        "flags": flags,
        "ledger_id": ledger_id,
        "crc_ok": header_crc == crc32c(data[:16]),
    }
    named = parse_ledger_file_name(os.path.basename(file))
    problem: LedgerCorrupted | None = None
    if magic != LEDGER_MAGIC:
        problem = LedgerCorrupted(f"bad magic {magic!r}, expected {LEDGER_MAGIC!r}", file=file, offset=0)
    elif version != VERSION:
        problem = LedgerCorrupted(f"unsupported ledger file version {version}", file=file, offset=4)
    elif header_crc != crc32c(data[:16]):
        problem = LedgerCorrupted("ledger file header CRC mismatch", file=file, offset=16)
    elif named is not None and named != ledger_id:
        problem = LedgerCorrupted(f"header names ledger {ledger_id}, file is ledger {named}", file=file, offset=8)
    if problem is not None:
        report["error"] = _error(problem)
        return report
    frames, torn, error = _walk_frames(data, file, open_ledger=open_ledger)
    for frame in frames:
        payload: bytes = frame.pop("payload")
        frame["position"] = str(Position(ledger_id, frame["entry_id"]))
        if frame["entry_id"] != frame["expected_entry_id"]:
            frame["error"] = _error(
                LedgerCorrupted(
                    f"frame holds entry {frame['entry_id']}, expected {frame['expected_entry_id']}",
                    file=file,
                    offset=frame["offset"] + 4,
                )
            )
        if not frame["crc_ok"]:
            frame["error"] = _error(
                LedgerCorrupted(
                    f"payload CRC mismatch in entry {frame['entry_id']}",
                    file=file,
                    offset=frame["offset"] + FRAME_HEADER.size,
                )
            )
        if decode and frame["crc_ok"]:
            frame["entry"] = inspect_entry(payload, kind=kind, topic=topic)
        report["entries"].append(frame)
    report["torn_tail"] = torn
    first_bad = next((f["error"] for f in report["entries"] if "error" in f), None)
    report["error"] = first_bad or error
    mismatch = expected_entries is not None and (len(frames) != expected_entries or len(data) != expected_length)
    if report["error"] is None and not open_ledger and mismatch:
        report["error"] = _error(
            LedgerCorrupted(
                f"closed ledger should hold {expected_entries} entries in {expected_length} bytes, "
                f"found {len(frames)} entries in {len(data)} bytes",
                file=file,
                offset=min(len(data), expected_length or 0),
            )
        )
    return report


def _position_text(p: Position) -> str:
    return str(p)


def _metadata_json(meta: Metadata) -> Json:
    return {
        "name": meta.name,
        "generation": meta.generation,
        "next_ledger_id": meta.next_ledger_id,
        "ledgers": [
            {"ledger_id": r.ledger_id, "state": "open"}
            if r.is_open
            else {"ledger_id": r.ledger_id, "state": "closed", "entries": r.entries, "length": r.length}
            for r in meta.ledgers
        ],
        "properties": dict(meta.properties),
        "cursors": {name: _cursor_json(state) for name, state in sorted(meta.cursors.items())},
        "checkpoint": {
            "journal_lsn": meta.journal_lsn,
            "open_synced_entries": meta.open_synced[0],
            "open_synced_length": meta.open_synced[1],
        },
    }


def _cursor_json(state: CursorState) -> Json:
    return {
        "mark_delete": _position_text(state.mark_delete),
        "individually_deleted": [_position_text(p) for p in sorted(state.individually_deleted)],
        "batch_ack_sets": {_position_text(p): list(w) for p, w in sorted(state.ack_sets.items())},
        "properties": dict(state.properties),
    }


def _record_json(record: RawRecord, status: str | None) -> Json:
    out: Json = {
        "offset": record.offset,
        "lsn": record.lsn,
        "kind": record.kind.name,
        "ledger": record.key,
        "status": status,
    }
    try:
        if record.kind is RecordKind.ENTRY:
            ledger_id, entry_id, data = record.entry()
            out["position"] = str(Position(ledger_id, entry_id))
            out["length"] = len(data)
        elif record.kind is RecordKind.CURSOR:
            name, state = decode_cursor_body(record.body, file=record.file, offset=record.offset)
            out["cursor"] = name
            out["state"] = None if state is None else _cursor_json(state)
        elif record.kind is RecordKind.META:
            out["metadata"] = _metadata_json(decode_metadata(record.body, file=record.file))
    except LedgerCorrupted as exc:
        out["error"] = _error(exc)
    return out


def _segment_json(scan: SegmentScan, statuses: dict[int, str] | None = None) -> Json:
    return {
        "file": scan.file,
        "seq": scan.seq,
        "first_lsn": scan.first_lsn,
        "records": [_record_json(r, (statuses or {}).get(r.lsn)) for r in scan.records],
        "torn_tail": {"offset": scan.valid_length, "bytes": scan.torn_bytes, "reason": scan.torn_reason}
        if scan.torn_bytes
        else None,
        "error": None,
    }


def inspect_journal(path: str | os.PathLike[str]) -> Json:
    """One journal segment decoded: each record (lsn, kind, ledger, and the entry's position, the
    cursor's new state or the new metadata), a torn tail, or the first damage (the records
    before it are still listed)."""
    file = os.fspath(path)
    data = Path(file).read_bytes()
    seq = parse_segment_file_name(os.path.basename(file))
    try:
        scan = scan_segment(lambda o, n: data[o : o + n], len(data), file=file, seq=seq)
    except LedgerCorrupted as exc:
        report: Json = {"file": file, "size": len(data), "records": [], "torn_tail": None, "error": _error(exc)}
        # List the records before the damage: the bytes up to it scan as a segment with a torn tail.
        cut = exc.offset
        try:
            partial_scan = scan_segment(lambda o, n: data[o : min(o + n, cut)], cut, file=file, seq=seq)
        except LedgerCorrupted:
            return report
        return {**_segment_json(partial_scan), "size": len(data), "torn_tail": None, "error": _error(exc)}
    return {**_segment_json(scan), "size": len(data)}


def _journal_of(directory: str, names: list[str]) -> tuple[list[Json], dict[str, list[RawRecord]], Json | None]:
    """The journal segments among ``names``: their reports, the records by ledger key, and the
    damage recovery would refuse (None when the journal is sound)."""
    segment_names = [n for n in names if parse_segment_file_name(n) is not None]
    if not segment_names:
        return [], {}, None
    try:
        scans = read_segments(OsFileSystem(), directory, segment_names)
    except LedgerCorrupted as exc:
        reports = [inspect_journal(os.path.join(directory, n)) for n in sorted(segment_names)]
        return reports, {}, _error(exc)
    return [{**_segment_json(s), "size": os.path.getsize(s.file)} for s in scans], group_by_key(scans), None


def inspect_metadata(path: str | os.PathLike[str]) -> Json:
    """A ``METADATA`` file decoded, or ``{"file", "error"}``."""
    file = os.fspath(path)
    try:
        meta = decode_metadata(Path(file).read_bytes(), file=file)
    except LedgerCorrupted as exc:
        return {"file": file, "error": _error(exc)}
    return {"file": file, **_metadata_json(meta), "error": None}


def refuse_special(directory: str, names: Iterable[str]) -> None:
    """Refuse, before anything is read, a folder entry that is neither a file nor a folder: a FIFO
    (reading it would wait for a writer forever), a device, a socket, or a symbolic link that
    loops or leads nowhere; an :class:`InputError` naming the entry and what it is."""
    import errno
    import stat

    for name in names:
        entry = os.path.join(directory, name)
        try:
            mode = os.stat(entry).st_mode
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise InputError(
                    "a symbolic link loop (a link that leads back to itself); expected a file or a folder", where=entry
                ) from None
            if exc.errno == errno.ENOENT and os.path.islink(entry):
                raise InputError(
                    f"a symbolic link to {os.readlink(entry)!r}, which does not exist; expected a file or a folder",
                    where=entry,
                ) from None
            raise InputError(f"cannot read: {exc.strerror}", where=entry) from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            kind = next(
                (
                    what
                    for test, what in (
                        (stat.S_ISFIFO, "a FIFO"),
                        (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket"),
                    )
                    if test(mode)
                ),
                "not a regular file",
            )
            raise InputError(f"{kind}, not a file; a ledger folder holds files and folders only", where=entry)


def inspect_directory(
    path: str | os.PathLike[str],
    *,
    kind: LogKind | None = None,
    decode: bool = True,
    records: list[RawRecord] | None = None,
) -> Json:
    """A whole ledger directory: the checkpoint (``METADATA``), each ledger file (in id order,
    with its state from the checkpoint: open, closed, or ``unlisted`` for a file it does not
    name), the journal (a lone ledger's own segments, or ``records``: the store journal's
    records of this ledger) and any other files.  ``ok`` is what recovery's own read-only checks
    say (:func:`~engine.storage.file_recovery.plan_recovery`): it would open the directory."""
    directory = os.fspath(path)
    names = sorted(os.listdir(directory))
    refuse_special(directory, names)
    report: Json = {
        "directory": directory,
        "metadata": None,
        "journal": [],
        "ledgers": [],
        "other_files": [],
        "ok": True,
        "error": None,
    }
    segments, by_key, journal_error = _journal_of(directory, names)
    report["journal"] = segments
    mine = list(records) if records is not None else by_key.get(".", [])
    if records is None and not segments:
        # A managed ledger of a store: its changes since the checkpoint are in the store's journal.
        parent = os.path.dirname(os.path.abspath(directory))
        _, parent_records, parent_error = _journal_of(parent, sorted(os.listdir(parent)))
        mine = parent_records.get(os.path.basename(os.path.abspath(directory)), [])
        journal_error = journal_error or parent_error
    drop = mine[0].lsn if mine and mine[0].kind is RecordKind.DROP else None
    try:
        if journal_error is not None:
            raise LedgerCorrupted(journal_error["message"], file=journal_error["file"], offset=journal_error["offset"])
        plan = plan_recovery(OsFileSystem(), directory, mine[1:] if drop is not None else mine, drop_lsn=drop)
        report["replays"] = plan.replayed
    except (LedgerCorrupted, ValueError) as exc:
        report["ok"] = False
        report["error"] = _error(exc)
    ledger_records: dict[int, Any] = {}
    topic: str | None = None
    meta_path = os.path.join(directory, METADATA_NAME)
    meta: Metadata | None = None
    if METADATA_NAME in names:
        report["metadata"] = inspect_metadata(meta_path)
        if report["metadata"]["error"] is None:
            ledger_records = {r["ledger_id"]: r for r in report["metadata"]["ledgers"]}
            topic = report["metadata"]["name"]
            meta = decode_metadata(Path(meta_path).read_bytes(), file=meta_path)
    open_id = meta.ledgers[-1].ledger_id if meta is not None else None
    ledger_ids = sorted(lid for n in names if (lid := parse_ledger_file_name(n)) is not None)
    for ledger_id in sorted(set(ledger_ids) | set(ledger_records)):
        record = ledger_records.get(ledger_id)
        file = os.path.join(directory, ledger_file_name(ledger_id))
        state = record["state"] if record else "unlisted"
        if ledger_id not in ledger_ids:
            missing = LedgerCorrupted(
                f"ledger {ledger_id} is in the metadata but its file is missing", file=file, offset=0
            )
            report["ledgers"].append({"ledger_id": ledger_id, "state": state, "file": file, "error": _error(missing)})
            continue
        one = inspect_ledger_file(
            file,
            kind=kind,
            open_ledger=state != "closed",
            decode=decode,
            expected_entries=record.get("entries") if record else None,
            expected_length=record.get("length") if record else None,
            topic=topic,
        )
        if meta is not None and ledger_id == open_id:
            # Past the checkpoint's synced extent the file was written behind: recovery replaces
            # it from the journal, so what is there is shown but never judged.
            synced_entries, synced_length = meta.open_synced
            one["synced"] = {"entries": synced_entries, "length": synced_length}
            one["written_behind"] = [f["position"] for f in one["entries"] if f["offset"] >= synced_length]
        report["ledgers"].append({"ledger_id": ledger_id, "state": state, **one})
    report["other_files"] = [
        n
        for n in names
        if parse_ledger_file_name(n) is None and n != METADATA_NAME and parse_segment_file_name(n) is None
    ]
    if METADATA_TMP_NAME in names:
        report["uncommitted_metadata"] = inspect_metadata(os.path.join(directory, METADATA_TMP_NAME))
    return report


def read_entry(directory: str | os.PathLike[str], position: Position) -> bytes:
    """The payload of one entry of a ledger directory, CRC-checked (read-only)."""
    file = os.path.join(os.fspath(directory), ledger_file_name(position.ledger_id))
    report = inspect_ledger_file(file, decode=False)
    for frame in report["entries"]:
        if frame["entry_id"] == position.entry_id:
            if not frame["crc_ok"]:
                raise LedgerCorrupted(
                    f"payload CRC mismatch in entry {position}", file=file, offset=frame["offset"] + FRAME_HEADER.size
                )
            start = frame["offset"] + FRAME_HEADER.size
            with open(file, "rb") as f:
                f.seek(start)
                return f.read(frame["length"])
    if report["error"] is not None:
        raise LedgerCorrupted(report["error"]["message"], file=file, offset=report["error"].get("offset", 0))
    held = [frame["entry_id"] for frame in report["entries"]]
    span = f"entries {held[0]} to {held[-1]}" if held else "no entries"
    raise InputError(f"no entry {position}: the ledger file holds {span}", where=file)


def _is_store(directory: str) -> bool:
    """A folder of managed ledgers (what ``txnmodel simulate --data`` writes), not one ledger."""
    names = os.listdir(directory)
    if METADATA_NAME in names or any(parse_ledger_file_name(n) is not None for n in names):
        return False
    return any(parse_segment_file_name(n) is not None for n in names) or any(
        os.path.isfile(os.path.join(directory, n, METADATA_NAME)) for n in names
    )


def inspect_store(path: str | os.PathLike[str], *, kind: LogKind | None = None) -> Json:
    """A ledger store: its journal (every segment, record by record) and every managed ledger,
    by name, with the journal's records of it; ``ok`` when the store would open."""
    directory = os.fspath(path)
    names = sorted(os.listdir(directory))
    refuse_special(directory, names)
    segments, by_key, journal_error = _journal_of(directory, names)
    ledgers = []
    for name in names:
        if not os.path.isdir(os.path.join(directory, name)) or name.endswith(".deleted"):
            continue
        one = inspect_directory(os.path.join(directory, name), kind=kind, records=by_key.pop(name, []))
        one["key"] = name
        ledgers.append(one)
    # Records of a ledger whose directory is gone: a deletion (DROP) finished, or damage.
    for key, records in sorted(by_key.items()):
        if records and records[0].kind is not RecordKind.DROP:
            first = records[0]
            ledgers.append(
                {
                    "directory": os.path.join(directory, key),
                    "key": key,
                    "metadata": None,
                    "journal": [],
                    "ledgers": [],
                    "other_files": [],
                    "ok": False,
                    "error": _error(
                        LedgerCorrupted(
                            f"the journal holds records of {key} but it has no METADATA",
                            file=first.file,
                            offset=first.offset,
                        )
                    ),
                }
            )
    others = [n for n in names if not os.path.isdir(os.path.join(directory, n)) and parse_segment_file_name(n) is None]
    return {
        "kind": "store",
        "directory": directory,
        "journal": segments,
        "journal_error": journal_error,
        "managed_ledgers": ledgers,
        "other_files": others,
        "ok": journal_error is None and all(one["ok"] for one in ledgers),
    }


def inspect_path(path: str | os.PathLike[str], *, entry: Position | None = None, kind: LogKind | None = None) -> Json:
    """What ``txnmodel inspect PATH`` shows: a ledger store, a ledger directory (or one ``--entry
    L:E`` of it), a ledger file, a ``METADATA`` file, a journal segment, or any other file as one
    raw entry."""
    file = os.fspath(path)
    if os.path.isdir(file):
        if entry is not None:
            decoded = inspect_entry(read_entry(file, entry), kind=kind)
            return {"kind": "directory_entry", "directory": file, "position": str(entry), "entry": decoded}
        if _is_store(file):
            return inspect_store(file, kind=kind)
        return {"kind": "directory", **inspect_directory(file, kind=kind)}
    name = os.path.basename(file)
    if parse_ledger_file_name(name) is not None:
        return {"kind": "ledger_file", **inspect_ledger_file(file, kind=kind)}
    if name in (METADATA_NAME, METADATA_TMP_NAME):
        return {"kind": "metadata", **inspect_metadata(file)}
    if parse_segment_file_name(name) is not None:
        return {"kind": "journal_segment", **inspect_journal(file)}
    return {"kind": "entry", "file": file, **inspect_entry(Path(file).read_bytes(), kind=kind, where=file)}


# ---------------------------------------------------------------------------------------------
# Text.


def _err_text(error: Json | None) -> str:
    if not error:
        return ""
    return f"  !! {error['message']}"


def _entry_lines(entry: Json, indent: str) -> list[str]:
    lines = []
    for kind, decoded in entry["decoded"].items():
        head = (
            f"batched v{decoded['version']}, {decoded['batch_size']} records" if decoded["batched"] else "plain record"
        )
        lines.append(f"{indent}{kind}: {head}")
        for index, record in enumerate(decoded["records"]):
            lines.append(f"{indent}  [{index}] {record}")
    message = entry.get("message")
    if message is not None and (message["record"] or message["null_value"] or not entry["decoded"]):
        lines.append(f"{indent}{_message_head(message)}")
        for record in message["record"].values():
            lines.append(f"{indent}  {record}")
        for one in message.get("batch") or ():
            lines.append(f"{indent}  [{one['index']}] key {one['key']!r}: {one['payload']!r}")
        for error in message["errors"].values():
            lines.append(f"{indent}  !! {error['message']}")
        return lines
    if not entry["decoded"]:
        first = next(iter(entry["errors"].values()), None)
        lines.append(
            f"{indent}not a log entry ({first['message'] if first else 'no kind tried'}); "
            f"{entry['length']} bytes: {entry['hex_prefix']}{'...' if entry['length'] > 32 else ''}"
        )
    return lines


def _message_head(message: Json) -> str:
    if message["null_value"]:
        return f"message key {message['key']!r}: tombstone"
    if message["record"]:
        return f"message key {message['key']!r}: {', '.join(message['record'])}"
    parts = []
    if message.get("marker"):
        parts.append(f"marker {message['marker']}")
    elif message.get("batch") is not None:
        parts.append(f"batch of {len(message['batch'])}")
    else:
        parts.append("message")
    if message.get("txn") is not None:
        parts.append(f"txn ({message['txn'][0]},{message['txn'][1]})")
    if message["key"] is not None:
        parts.append(f"key {message['key']!r}")
    if message.get("deliver_at") is not None:
        parts.append(f"deliver at {message['deliver_at']}")
    if message.get("payload") is not None:
        parts.append(f"payload {message['payload']!r}")
    return ", ".join(parts)


def render_text(report: Json) -> str:
    """A human-readable rendering of any report this module returns."""
    lines: list[str] = []
    kind = report.get("kind")
    if kind == "directory_entry":
        lines.append(f"{report['directory']} entry {report['position']}:")
        lines.extend(_entry_lines(report["entry"], "  "))
    elif kind == "entry":
        lines.append(f"{report['file']}: {report['length']} bytes")
        lines.extend(_entry_lines(report, "  "))
    elif kind == "metadata":
        lines.extend(_metadata_lines(report))
    elif kind == "ledger_file":
        lines.extend(_ledger_lines(report, ""))
    elif kind == "journal_segment":
        lines.extend(_journal_lines(report, ""))
    elif kind == "store":
        damaged = sum(1 for one in report["managed_ledgers"] if not one["ok"])
        records = sum(len(segment["records"]) for segment in report["journal"])
        lines.append(
            f"{report['directory']}: ledger store, {len(report['managed_ledgers'])} managed ledgers, "
            f"journal {len(report['journal'])} segment(s) with {records} records after the checkpoints, "
            f"{'ok' if report['ok'] else f'{damaged} DAMAGED'}{_err_text(report.get('journal_error'))}"
        )
        for segment in report["journal"]:
            lines.extend(_journal_lines(segment, "  "))
        for one in report["managed_ledgers"]:
            lines.append("")
            lines.extend("  " + line for line in render_text({"kind": "directory", **one}).splitlines())
        if report["other_files"]:
            lines.append(f"  other files: {', '.join(report['other_files'])}")
    else:
        lines.append(f"{report['directory']}: {'ok' if report['ok'] else 'DAMAGED'}{_err_text(report.get('error'))}")
        if report["metadata"] is not None:
            lines.extend("  " + line for line in _metadata_lines(report["metadata"]))
        else:
            lines.append("  no METADATA")
        for segment in report.get("journal") or ():
            lines.extend(_journal_lines(segment, "  "))
        for ledger in report["ledgers"]:
            lines.extend(_ledger_lines(ledger, "  "))
        if report["other_files"]:
            lines.append(f"  other files: {', '.join(report['other_files'])}")
    return "\n".join(lines)


def _metadata_lines(meta: Json) -> list[str]:
    if meta.get("error"):
        return [f"{meta['file']}:{_err_text(meta['error'])}"]
    checkpoint = meta.get("checkpoint") or {}
    lines = [
        f"metadata generation {meta['generation']}: managed ledger {meta['name']!r}, "
        f"next ledger id {meta['next_ledger_id']}",
        f"  checkpoint: journal lsn {checkpoint.get('journal_lsn')}, open ledger synced "
        f"{checkpoint.get('open_synced_entries')} entries in {checkpoint.get('open_synced_length')} bytes",
        f"  properties: {meta['properties']}",
    ]
    for name, cursor in meta["cursors"].items():
        lines.append(
            f"  cursor {name!r}: mark-delete {cursor['mark_delete']}, individually deleted "
            f"{cursor['individually_deleted']}, batch ack sets {cursor['batch_ack_sets']}, "
            f"properties {cursor['properties']}"
        )
    return lines


def _journal_lines(journal: Json, indent: str) -> list[str]:
    lines = [
        f"{indent}journal segment: {journal['file']}, {journal.get('size', 0)} bytes, "
        f"{len(journal['records'])} records{_err_text(journal.get('error'))}"
    ]
    for record in journal["records"]:
        if record["kind"] == "ENTRY":
            what = f"entry {record.get('position')} ({record.get('length')} bytes)"
        elif record["kind"] == "CURSOR":
            state = record.get("state")
            what = f"cursor {record.get('cursor')!r} " + (
                "deleted"
                if state is None
                else f"mark-delete {state['mark_delete']}, individually deleted {state['individually_deleted']}, "
                f"batch ack sets {state['batch_ack_sets']}, properties {state['properties']}"
            )
        elif record["kind"] == "META":
            meta = record.get("metadata") or {}
            what = f"metadata generation {meta.get('generation')}, ledgers " + ", ".join(
                f"{r['ledger_id']}:{r['state']}" for r in meta.get("ledgers", [])
            )
        else:
            what = "managed ledger deleted"
        lines.append(f"{indent}  @{record['offset']} lsn {record['lsn']} [{record['ledger']}]: {what}")
    if journal.get("torn_tail"):
        torn = journal["torn_tail"]
        lines.append(f"{indent}  torn tail @{torn['offset']}: {torn['bytes']} bytes ({torn['reason']})")
    return lines


def _ledger_lines(ledger: Json, indent: str) -> list[str]:
    state = ledger.get("state", "file")
    header = ledger.get("header")
    count = len(ledger.get("entries", []))
    lines = [
        f"{indent}ledger {ledger.get('ledger_id', header['ledger_id'] if header else '?')} ({state}): "
        f"{ledger['file']}, {ledger.get('size', 0)} bytes, {count} entries{_err_text(ledger.get('error'))}"
    ]
    for frame in ledger.get("entries", []):
        crc = "crc ok" if frame["crc_ok"] else "CRC BAD"
        lines.append(f"{indent}  {frame['position']} @{frame['offset']} len {frame['length']} {crc}")
        if "entry" in frame:
            lines.extend(_entry_lines(frame["entry"], indent + "    "))
    if ledger.get("written_behind"):
        lines.append(
            f"{indent}  written after the checkpoint (replaced from the journal by recovery): "
            f"{', '.join(ledger['written_behind'])}"
        )
    if ledger.get("torn_tail"):
        torn = ledger["torn_tail"]
        lines.append(f"{indent}  torn tail @{torn['offset']}: {torn['bytes']} bytes ({torn['reason']})")
    return lines
