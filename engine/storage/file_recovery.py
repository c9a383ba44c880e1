"""Recovery of a file ledger's directory: a read-only plan (:func:`plan_recovery` checks
``METADATA``, every file it calls synced and the journal's records after the checkpoint, and raises
:class:`~engine.storage.file_format.LedgerCorrupted` on damage before anything is touched), then
the repair (:func:`apply_recovery`: leftovers removed, files rewritten from their synced part and the
replayed entries, synced, and a checkpoint written).  The rules are in ``docs/engine/ledgers.md``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from engine.storage.disk import FileSystem
from engine.storage.file_format import (
    FRAME_HEADER,
    LEDGER_HEADER,
    LOCK_NAME,
    METADATA_NAME,
    METADATA_TMP_NAME,
    FrameInfo,
    LedgerCorrupted,
    Metadata,
    decode_cursor_body,
    decode_metadata,
    encode_frame,
    encode_ledger_header,
    encode_metadata,
    ledger_file_name,
    parse_ledger_file_name,
    scan_ledger,
)
from engine.storage.journal import JOURNAL_RECORD, RawRecord, RecordKind


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


# ---------------------------------------------------------------------------------------------
# Recovery: a read-only plan, then the repair.


@dataclass
class FilePlan:
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
    files: dict[int, FilePlan]
    leftovers: list[str]  # file names a crash left behind
    stale: bool  # the directory is an earlier incarnation its deletion (a DROP record) removed
    replayed: int  # journal records applied on top of the checkpoint
    last_lsn: int  # the journal lsn the repaired files cover

    @property
    def changed(self) -> bool:
        return bool(
            self.leftovers or self.stale or self.replayed or any(f.rewrite or f.unsynced for f in self.files.values())
        )


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the directory repaired (all of it is what a crash can leave behind)."""

    created: bool = False
    truncated: tuple[tuple[str, int, int], ...] = ()  # (file, new length, bytes removed)
    removed: tuple[str, ...] = ()
    closed_ledger: int | None = None
    replayed: int = 0  # journal records applied on top of the last checkpoint


def read_whole(fs: FileSystem, path: str) -> bytes:
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
        base = decode_metadata(read_whole(fs, meta_path), file=meta_path)
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
    meta, replayed = _replay(base, tail, {lid: entries for lid, (entries, _) in synced.items()})
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
    files: dict[int, FilePlan] = {}
    for info in meta.ledgers:
        lid = info.ledger_id
        path = os.path.join(directory, ledger_file_name(lid))
        present = lid in ledger_names
        extent = synced.get(lid)
        plan = FilePlan(lid, path, 0, extent, extent is not None and lid != open_at_checkpoint, [])
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


def _replay(
    base: Metadata, tail: Sequence[RawRecord], counts: dict[int, int]
) -> tuple[Metadata, dict[int, list[bytes]]]:
    """Apply the journal's records after the checkpoint (``tail``) to its metadata: the last
    metadata record, every cursor's last state, and each ledger's entries in order (``counts``:
    the entries each ledger holds so far, from the checkpoint).  Returns the metadata and the
    entries to append, by ledger."""
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
    return replace(meta, cursors=MappingProxyType(cursors)), replayed


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
