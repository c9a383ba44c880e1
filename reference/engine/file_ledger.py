"""A crash-safe managed ledger on a real file system.

One directory per managed ledger::

    METADATA                    the committed metadata (ledger list, properties, cursors)
    METADATA.tmp                a metadata version being written; never read, removed at open
    CURSORS.log                 the cursor journal: a header, then framed cursor states
    LOCK                        flock()ed by the one handle that owns the directory
    ledger-00000000000000000007.log   one file per ledger: a header, then framed entries

The byte layouts, the durability argument and the recovery rules are in
``docs/engine/ledgers.md``; the short version:

* An append writes one frame (length, entry id, a CRC32C of the frame header, a CRC32C of the
  payload, the payload) and returns only after ``fdatasync`` of the ledger file.  With
  ``group_commit=True`` concurrent appenders share one sync: the first waiter syncs everything
  written so far while the others queue behind it.
* Metadata is replaced atomically: write ``METADATA.tmp``, sync it, rename it over
  ``METADATA``, sync the directory.  The rename is the commit point.
* A cursor change (create, mark-delete, individual deletes, properties, delete) appends one
  framed record holding that cursor's whole new state (or its deletion) and the metadata
  generation it applies on top of to ``CURSORS.log``, and returns after one ``fdatasync`` of it.
  Every metadata commit folds the current cursors in, so records of an older generation are
  stale; the journal is then cut back to its header (best effort: stale records are ignored).
  A journal past its bound (records or bytes) is folded by a metadata commit instead.
* A new ledger file is created, its header written and synced and the directory synced
  *before* the metadata that names it is committed, so a committed ledger always exists.
* Opening the directory recovers: it truncates a torn tail (an incomplete last frame, or a tail
  of zero bytes) of the last ledger, applies the journal's records of the committed generation
  in order (a torn journal tail is cut the same way; a record of a newer generation is damage),
  removes files a crash left behind (an uncommitted new ledger that holds no entry, a deleted
  ledger whose unlink did not happen, ``METADATA.tmp``),
  closes the last ledger and opens a new one, as a new owner of a Pulsar topic does.  Anything
  else that does not check out (a bad CRC, a bad header, a closed ledger of the wrong length, a
  missing file, corrupt metadata) raises :class:`LedgerCorrupted` naming the file and the byte
  offset; nothing is skipped.

Every file-system call goes through a :class:`FileSystem` (``OsFileSystem`` by default), so a
test can record the calls and replay what a power cut at any point would leave.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Final

from spec.config import Config
from spec.types import LedgerInfo, Position

from .file_format import (
    FRAME_HEADER,
    JOURNAL_HEADER,
    JOURNAL_MAGIC,
    JOURNAL_NAME,
    LEDGER_HEADER,
    LEDGER_MAGIC,
    LOCK_NAME,
    MAX_ENTRY_BYTES,
    MAX_JOURNAL_BYTES,
    MAX_JOURNAL_RECORDS,
    METADATA_HEADER,
    METADATA_MAGIC,
    METADATA_NAME,
    METADATA_TMP_NAME,
    VERSION,
    FrameInfo,
    JournalRecord,
    JournalScan,
    LedgerCorrupted,
    LedgerLocked,
    LedgerRecord,
    LedgerScan,
    Metadata,
    apply_journal,
    crc32c,
    decode_metadata,
    encode_frame,
    encode_journal_header,
    encode_journal_record,
    encode_ledger_header,
    encode_metadata,
    ledger_file_name,
    parse_ledger_file_name,
    scan_journal,
    scan_ledger,
)
from .file_system import FileSystem, OsFileSystem
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

__all__ = [
    "FRAME_HEADER",
    "JOURNAL_HEADER",
    "JOURNAL_MAGIC",
    "JOURNAL_NAME",
    "LEDGER_HEADER",
    "LEDGER_MAGIC",
    "LOCK_NAME",
    "MAX_ENTRY_BYTES",
    "METADATA_HEADER",
    "METADATA_MAGIC",
    "METADATA_NAME",
    "METADATA_TMP_NAME",
    "VERSION",
    "FileLedger",
    "FileSystem",
    "FrameInfo",
    "JournalRecord",
    "JournalScan",
    "LedgerCorrupted",
    "LedgerLocked",
    "LedgerRecord",
    "LedgerScan",
    "Metadata",
    "OsFileSystem",
    "RecoveryReport",
    "apply_journal",
    "crc32c",
    "decode_metadata",
    "encode_frame",
    "encode_journal_header",
    "encode_journal_record",
    "encode_ledger_header",
    "encode_metadata",
    "ledger_file_name",
    "parse_ledger_file_name",
    "scan_journal",
    "scan_ledger",
]

# Sealed ledgers are only read (dispatch catching up, recovery, inspection); keeping every one open would
# cost a descriptor per ledger for the life of the handle, so only the most recently read stay open.
MAX_OPEN_SEALED_FILES: Final = 8


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
    durable_entries: int = 0
    durable_end: int = LEDGER_HEADER.size
    written_end: int = LEDGER_HEADER.size
    payload_bytes: int = 0
    failed: bool = False  # a write or sync failed: no more appends, roll over
    sealed: bool = False  # rolled over: closed at durable_entries
    full: bool = False  # full, but the eager roll-over failed: roll before the next append

    @property
    def written_entries(self) -> int:
        return len(self.offsets)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the directory repaired (all of it is what a crash can leave behind)."""

    created: bool = False
    truncated: tuple[tuple[str, int, int], ...] = ()  # (file, new length, bytes removed)
    removed: tuple[str, ...] = ()
    closed_ledger: int | None = None


class FileLedger:
    """A file-backed :class:`~reference.engine.ledger.ManagedLedger`; see the module docstring.

    ``directory`` is created if missing.  ``config`` supplies the roll-over limits.
    ``group_commit`` lets concurrent appenders share one sync.  Past ``max_journal_records``
    records or ``max_journal_bytes`` bytes in the cursor journal, a cursor change is folded into
    a metadata commit instead (0 folds every change).  ``fs`` replaces the OS calls
    (tests).  Opening recovers the directory (:attr:`recovery` says what it repaired) and starts
    a new ledger; a second handle on a directory that is open raises :class:`LedgerLocked`.
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
    ) -> None:
        if max_journal_records < 0 or max_journal_bytes < 0:
            raise ValueError(f"journal bounds must be >= 0, got {max_journal_records}, {max_journal_bytes}")
        self._max_journal_records = max_journal_records
        self._max_journal_bytes = max_journal_bytes
        # The journal's descriptor is opened at the first record, not at open, so a ledger that
        # never changes a cursor holds no extra descriptor.
        self._journal_fd: int | None = None
        self._journal_end = 0  # where the next record goes; 0: the journal is not known good
        self._journal_records = 0
        self._journal_ready = False  # recovery has not yet reset the journal: commits leave it alone
        if max_open_sealed_files < 0:
            raise ValueError(f"max_open_sealed_files must be >= 0, got {max_open_sealed_files}")
        # The file being read stays open during the read, so the bound is never below one.
        self._max_open_sealed = max(1, max_open_sealed_files)
        self._open_sealed: OrderedDict[int, None] = OrderedDict()  # least recently read first
        self._dir = os.path.abspath(os.fspath(directory))
        self._config = config or Config()
        self._group_commit = group_commit
        self._fs: FileSystem = fs or OsFileSystem()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._syncing = False
        self._closed = False
        self._files: dict[int, _OpenFile] = {}
        fs_ = self._fs
        if not fs_.exists(self._dir):
            fs_.makedirs(self._dir)
            fs_.sync_dir(os.path.dirname(self._dir))
        self._lock_fd: int | None = fs_.lock(self._path(LOCK_NAME))
        try:
            self._meta, self.recovery = self._recover(name, first_ledger_id)
        except BaseException:
            self._release_files()
            raise

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
    def metadata(self) -> Metadata:
        """The last committed metadata (its ``generation`` counts commits) with the cursor
        changes journaled since applied: the durable state as recovery would rebuild it."""
        with self._lock:
            return self._meta

    @property
    def _current(self) -> _OpenFile:
        return self._files[self._meta.ledgers[-1].ledger_id]

    # -- recovery -------------------------------------------------------------------------------

    def _recover(self, name: str | None, first_ledger_id: int) -> tuple[Metadata, RecoveryReport]:
        """Check everything first, read-only; only then repair (remove leftovers, cut the torn
        tail), so a :class:`LedgerCorrupted` leaves the directory exactly as it was found."""
        fs = self._fs
        names = fs.listdir(self._dir)
        ledger_names = {lid: n for n in names if (lid := parse_ledger_file_name(n)) is not None}
        # METADATA.tmp was never committed (the rename is the commit point).
        leftovers = [METADATA_TMP_NAME] if METADATA_TMP_NAME in names else []
        if METADATA_NAME not in names:
            # The first metadata commit never happened: the only files a crash can have left
            # are ledger files without entries.
            for ledger_id, file_name in sorted(ledger_names.items()):
                self._check_entryless_orphan(ledger_id, file_name)
                leftovers.append(file_name)
            if JOURNAL_NAME in names:
                # The journal is created after the first commit; without one it can hold no record.
                orphan = self._scan_journal()
                if orphan.records:
                    raise LedgerCorrupted(
                        "the cursor journal holds records but there is no METADATA",
                        file=self._path(JOURNAL_NAME),
                        offset=orphan.records[0].offset,
                    )
                leftovers.append(JOURNAL_NAME)
            self._remove(leftovers)
            fresh = name or os.path.basename(self._dir)
            meta = Metadata(fresh, 0, first_ledger_id, (), MappingProxyType({}), MappingProxyType({}))
            meta = self._open_new_ledger(meta)
            self._reset_journal()
            return meta, RecoveryReport(created=True, removed=tuple(leftovers))
        meta = self._read_metadata()
        if name is not None and name != meta.name:
            raise ValueError(f"{self._dir} holds managed ledger {meta.name!r}, not {name!r}")
        journal_torn: tuple[tuple[str, int, int], ...] = ()
        if JOURNAL_NAME in names:
            journal = self._scan_journal()
            meta = apply_journal(meta, journal, file=self._path(JOURNAL_NAME))
            if journal.torn_bytes:
                # Cut by the reset below, after the commit that folds the records in.
                journal_torn = ((self._path(JOURNAL_NAME), journal.valid_length, journal.torn_bytes),)
        listed = {r.ledger_id for r in meta.ledgers}
        for ledger_id, file_name in sorted(ledger_names.items()):
            if ledger_id in listed:
                continue
            if ledger_id < meta.ledgers[0].ledger_id:
                pass  # deleted: the metadata without it was committed, the unlink did not happen
            elif ledger_id >= meta.next_ledger_id:
                # A roll-over that created the file but never committed the metadata naming it.
                self._check_entryless_orphan(ledger_id, file_name)
            else:
                raise LedgerCorrupted(
                    f"ledger file {file_name} is not in the metadata but lies between ledgers it lists",
                    file=self._path(file_name),
                    offset=0,
                )
            leftovers.append(file_name)
        torn: list[tuple[_OpenFile, LedgerScan]] = []
        for record in meta.ledgers:
            path = self._path(ledger_file_name(record.ledger_id))
            if record.ledger_id not in ledger_names:
                raise LedgerCorrupted(
                    f"ledger {record.ledger_id} is in the metadata but its file is missing", file=path, offset=0
                )
            opened, scan = self._open_existing(record, path)
            if scan.torn_bytes:
                torn.append((opened, scan))
        # Everything checked out: repair.
        self._remove(leftovers)
        truncated: list[tuple[str, int, int]] = []
        for opened, scan in torn:
            # Only never-acknowledged bytes can be torn: an append returns after its sync.
            fs.truncate(self._fd(opened), scan.valid_length)
            fs.sync(self._fd(opened))
            truncated.append((opened.path, scan.valid_length, scan.torn_bytes))
        # Close the recovered open ledger and start a new one, as Pulsar's new owner does.
        last = self._files[meta.ledgers[-1].ledger_id]
        closed = replace(meta.ledgers[-1], entries=last.durable_entries, length=last.durable_end)
        # This commit folds the journal's records in; only then may the journal be emptied.
        meta = self._open_new_ledger(replace(meta, ledgers=(*meta.ledgers[:-1], closed)))
        self._reset_journal()
        truncated.extend(journal_torn)
        report = RecoveryReport(truncated=tuple(truncated), removed=tuple(leftovers), closed_ledger=closed.ledger_id)
        for record in meta.ledgers[:-1]:
            self._seal_file(self._files[record.ledger_id])
        return meta, report

    def _remove(self, file_names: Sequence[str]) -> None:
        for file_name in file_names:
            self._fs.unlink(self._path(file_name))
        if file_names:
            self._fs.sync_dir(self._dir)

    def _read_metadata(self) -> Metadata:
        path = self._path(METADATA_NAME)
        fd = self._fs.open(path)
        try:
            blob = self._fs.pread(fd, self._fs.size(fd), 0)
        finally:
            self._fs.close(fd)
        return decode_metadata(blob, file=path)

    def _scan_journal(self) -> JournalScan:
        path = self._path(JOURNAL_NAME)
        fd = self._fs.open(path)
        try:
            return scan_journal(lambda o, n: self._fs.pread(fd, n, o), self._fs.size(fd), file=path)
        finally:
            self._fs.close(fd)

    def _reset_journal(self) -> None:
        """Start an empty journal (recovery, after the commit that folded the old records in)."""
        fs = self._fs
        path = self._path(JOURNAL_NAME)
        fd = fs.open(path, create=True, truncate=True)
        try:
            fs.pwrite(fd, encode_journal_header(), 0)
            fs.sync(fd)
        finally:
            fs.close(fd)
        # A record is acknowledged only in a journal the directory durably names.  Synced even
        # when the file was there: a crashed earlier recovery may have created it unsynced.
        fs.sync_dir(self._dir)
        self._journal_end, self._journal_records, self._journal_ready = JOURNAL_HEADER.size, 0, True

    def _check_entryless_orphan(self, ledger_id: int, file_name: str) -> None:
        """A ledger file no committed metadata names may be removed only if it holds no entry:
        entries are appended only to a ledger the committed metadata names."""
        path = self._path(file_name)
        fd = self._fs.open(path)
        try:
            size = self._fs.size(fd)
            if size > LEDGER_HEADER.size:
                scan = scan_ledger(
                    lambda o, n: self._fs.pread(fd, n, o), size, file=path, ledger_id=ledger_id, allow_torn_tail=True
                )
                if scan.frames:
                    raise LedgerCorrupted(
                        f"ledger file {file_name} holds {len(scan.frames)} entries but no committed metadata names it",
                        file=path,
                        offset=scan.frames[0].offset,
                    )
        finally:
            self._fs.close(fd)

    def _open_existing(self, record: LedgerRecord, path: str) -> tuple[_OpenFile, LedgerScan]:
        fs = self._fs
        fd = fs.open(path)
        opened = _OpenFile(record.ledger_id, path, fd)
        self._files[record.ledger_id] = opened
        size = fs.size(fd)
        scan = scan_ledger(
            lambda o, n: fs.pread(fd, n, o), size, file=path, ledger_id=record.ledger_id, allow_torn_tail=record.is_open
        )
        if not record.is_open and (len(scan.frames) != record.entries or size != record.length):
            raise LedgerCorrupted(
                f"closed ledger {record.ledger_id} should hold {record.entries} entries in {record.length} bytes, "
                f"found {len(scan.frames)} entries in {size} bytes",
                file=path,
                offset=min(size, record.length or 0, scan.valid_length),
            )
        opened.offsets = [f.offset for f in scan.frames]
        opened.lengths = [f.length for f in scan.frames]
        opened.durable_entries = len(scan.frames)
        opened.durable_end = opened.written_end = scan.valid_length
        opened.payload_bytes = sum(opened.lengths)
        opened.sealed = not record.is_open
        return opened, scan

    # -- metadata commits and new ledgers (callers hold the lock, or are the constructor) ------

    def _commit(self, meta: Metadata) -> Metadata:
        """Make ``meta`` (with the next generation) the committed metadata; returns it.  Raises
        :class:`LedgerWriteFailed` if any step fails: the old or the new version is then on disk
        and this handle keeps the old one."""
        meta = replace(meta, generation=meta.generation + 1)
        blob = encode_metadata(meta)
        fs = self._fs
        tmp = self._path(METADATA_TMP_NAME)
        try:
            fd = fs.open(tmp, create=True, truncate=True)
            try:
                fs.pwrite(fd, blob, 0)
                fs.sync(fd)
            finally:
                fs.close(fd)
            fs.rename(tmp, self._path(METADATA_NAME))
            fs.sync_dir(self._dir)
        except OSError as exc:
            # METADATA may now be of the next generation: a record of this one would be stale
            # at recovery, so the next cursor change must commit (fold) instead.
            self._journal_end = 0
            raise LedgerWriteFailed(f"metadata commit of {self._dir} failed: {exc}") from exc
        self._meta = meta
        self._empty_journal()
        return meta

    def _empty_journal(self) -> None:
        """Cut the journal back to its header after a commit folded its records in.  Best effort:
        its records are stale now, so a crash (or a failure) before the cut is harmless; after a
        failure the journal is not trusted until a later commit cuts it."""
        if not self._journal_ready or (self._journal_end == JOURNAL_HEADER.size and not self._journal_records):
            return
        self._journal_end = 0
        fs = self._fs
        try:
            if self._journal_fd is None:
                self._journal_fd = fs.open(self._path(JOURNAL_NAME))
            fs.truncate(self._journal_fd, JOURNAL_HEADER.size)
            # Synced before the next record overwrites the cut bytes, so no stale record can
            # show through a torn write of a new one.
            fs.sync(self._journal_fd)
        except OSError:
            return
        self._journal_end, self._journal_records = JOURNAL_HEADER.size, 0

    def _cut_journal(self, fd: int, length: int) -> None:
        self._fs.truncate(fd, length)
        self._fs.sync(fd)

    def _journal_cursor(self, name: str, state: CursorState | None) -> None:
        """Make cursor ``name``'s new state (None: deleted) durable: one journal record and one
        sync, or a metadata commit when the journal is full or not trusted."""
        cursors = dict(self._meta.cursors)
        if state is None:
            cursors.pop(name, None)
        else:
            cursors[name] = state
        record = encode_journal_record(self._meta.generation, name, state)
        end = self._journal_end
        if (
            not self._journal_ready
            or end == 0
            or self._journal_records >= self._max_journal_records
            or end + len(record) > self._max_journal_bytes
        ):
            self._commit_cursors(cursors)
            return
        fs = self._fs
        try:
            if self._journal_fd is None:
                self._journal_fd = fs.open(self._path(JOURNAL_NAME))
            fs.pwrite(self._journal_fd, record, end)
            fs.sync(self._journal_fd)
        except OSError as exc:
            # Not acknowledged: cut it off so it cannot resurface, and fold the next change so a
            # new generation makes it stale should the cut not have reached the disk.
            self._journal_end = 0
            fd = self._journal_fd
            if fd is not None:
                _best_effort(partial(self._cut_journal, fd, end))
            raise LedgerWriteFailed(f"cursor journal write of {self._dir} failed: {exc}") from exc
        self._journal_end = end + len(record)
        self._journal_records += 1
        self._meta = replace(self._meta, cursors=MappingProxyType(cursors))

    def _open_new_ledger(self, meta: Metadata) -> Metadata:
        """Create the next ledger's file durably, then commit ``meta`` with it as the open
        ledger.  ``meta`` already records the previous ledger as closed."""
        fs = self._fs
        ledger_id = meta.next_ledger_id
        path = self._path(ledger_file_name(ledger_id))
        try:
            fd = fs.open(path, create=True, truncate=True)
        except OSError as exc:
            raise LedgerWriteFailed(f"cannot create {path}: {exc}") from exc
        try:
            fs.pwrite(fd, encode_ledger_header(ledger_id), 0)
            fs.sync(fd)
            fs.sync_dir(self._dir)
            committed = self._commit(
                replace(meta, next_ledger_id=ledger_id + 1, ledgers=(*meta.ledgers, LedgerRecord(ledger_id)))
            )
        except (OSError, LedgerWriteFailed) as exc:
            fs.close(fd)
            _best_effort(lambda: fs.unlink(path))
            if isinstance(exc, LedgerWriteFailed):
                raise
            raise LedgerWriteFailed(f"cannot create {path}: {exc}") from exc
        self._files[ledger_id] = _OpenFile(ledger_id, path, fd)
        return committed

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Sync what was written, release the files and the lock.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            while self._syncing:
                self._cond.wait()
            current = self._current
            if not current.failed and current.written_entries > current.durable_entries:
                # Appenders still waiting get their answer from this sync; if it fails they get
                # LedgerWriteFailed and the handle closes anyway.
                with contextlib.suppress(LedgerWriteFailed):
                    self._sync_locked(current)
            if self._journal_records:
                # Fold the journal so a cleanly closed directory's METADATA is the whole state;
                # if the commit fails the journal still holds it.
                with contextlib.suppress(LedgerWriteFailed):
                    self._commit(self._meta)
            self._closed = True
            self._cond.notify_all()
            self._release_files()

    def crash(self) -> None:
        """Stop as a killed process would: no sync, no metadata, files and lock released.
        Whatever the OS already has stays (a process crash is not a power cut)."""
        with self._lock:
            self._closed = True
            self._cond.notify_all()
            self._release_files()

    def _release_files(self) -> None:
        for opened in self._files.values():
            if opened.fd is not None:
                _best_effort(partial(self._fs.close, opened.fd))
        self._files.clear()
        self._open_sealed.clear()
        journal_fd, self._journal_fd = self._journal_fd, None
        if journal_fd is not None:
            _best_effort(partial(self._fs.close, journal_fd))
        lock_fd, self._lock_fd = self._lock_fd, None
        if lock_fd is not None:
            _best_effort(lambda: self._fs.unlock(lock_fd))

    def _check_open(self) -> None:
        if self._closed:
            raise LedgerClosed(f"managed ledger {self.name} is closed")

    # -- appends --------------------------------------------------------------------------------

    def append(self, data: bytes) -> Position:
        """Append one entry; returns its position once it is durable (after the sync)."""
        payload = bytes(data)
        if len(payload) > MAX_ENTRY_BYTES:
            raise ValueError(f"an entry holds at most {MAX_ENTRY_BYTES} bytes, got {len(payload)}")
        with self._lock:
            self._check_open()
            while self._current.full:
                # Full, and its roll-over failed or is in progress in another thread (which
                # may be waiting for a sync): roll it, or find it rolled.
                self._roll_locked(self._current)
                self._check_open()
            ledger = self._current
            if ledger.failed:
                raise LedgerClosed(f"ledger {ledger.ledger_id} of {self.name} had a write failure; roll over first")
            entry_id = ledger.written_entries
            offset = ledger.written_end
            frame = encode_frame(entry_id, payload)
            try:
                self._fs.pwrite(self._fd(ledger), frame, offset)
            except OSError as exc:
                self._fail_locked(ledger)
                raise LedgerWriteFailed(f"write to {ledger.path} failed: {exc}") from exc
            ledger.offsets.append(offset)
            ledger.lengths.append(len(payload))
            ledger.written_end = offset + len(frame)
            ledger.payload_bytes += len(payload)
            if not self._group_commit:
                self._sync_locked(ledger)
            if ledger_is_full(ledger.written_entries, ledger.payload_bytes, self._config):
                # Mark it first: rolling may wait for a group sync, and no other appender may
                # write into a full ledger meanwhile.
                ledger.full = True
                with contextlib.suppress(LedgerError):
                    # If the roll fails the entry may still be durable (below); the next append
                    # retries the roll.
                    self._roll_locked(ledger)
            self._await_durable_locked(ledger, entry_id)
            return Position(ledger.ledger_id, entry_id)

    def _await_durable_locked(self, ledger: _OpenFile, entry_id: int) -> None:
        # Group commit: the first waiter to find no sync running syncs everything written so
        # far, with the lock released so others can write and queue; the rest wait for it.
        while True:
            if entry_id < ledger.durable_entries:
                return
            if ledger.failed or ledger.sealed or self._closed:
                raise LedgerWriteFailed(f"entry {ledger.ledger_id}:{entry_id} of {self.name} was not made durable")
            if self._syncing:
                self._cond.wait()
                continue
            self._syncing = True
            target_entries, target_end = ledger.written_entries, ledger.written_end
            self._lock.release()
            error: OSError | None = None
            try:
                self._fs.sync(self._fd(ledger))
            except OSError as exc:
                error = exc
            finally:
                self._lock.acquire()
                self._syncing = False
                self._cond.notify_all()
            if ledger.failed:
                # Another writer failed while we synced and cut the unsynced tail off: what we
                # synced is not all there any more, so nothing past durable_entries counts.
                continue
            if error is not None:
                self._fail_locked(ledger)
            else:
                ledger.durable_entries = max(ledger.durable_entries, target_entries)
                ledger.durable_end = max(ledger.durable_end, target_end)

    def _sync_locked(self, ledger: _OpenFile) -> None:
        while self._syncing:
            self._cond.wait()
        target_entries, target_end = ledger.written_entries, ledger.written_end
        try:
            self._fs.sync(self._fd(ledger))
        except OSError as exc:
            self._fail_locked(ledger)
            raise LedgerWriteFailed(f"sync of {ledger.path} failed: {exc}") from exc
        ledger.durable_entries, ledger.durable_end = target_entries, target_end
        self._cond.notify_all()

    def _fail_locked(self, ledger: _OpenFile) -> None:
        """A write or sync failed: what was not synced is not acknowledged and is cut off the
        file, so it cannot resurface after a crash as an entry its writer saw fail."""
        ledger.failed = True
        del ledger.offsets[ledger.durable_entries :]
        del ledger.lengths[ledger.durable_entries :]
        ledger.written_end = ledger.durable_end
        ledger.payload_bytes = sum(ledger.lengths)
        _best_effort(lambda: self._truncate_tail(ledger))
        self._cond.notify_all()

    def _truncate_tail(self, ledger: _OpenFile) -> None:
        self._fs.truncate(self._fd(ledger), ledger.durable_end)
        self._fs.sync(self._fd(ledger))

    def roll_over(self) -> None:
        """Close the current ledger at its last durable entry and open the next one."""
        with self._lock:
            self._check_open()
            self._roll_locked(self._current)

    def _roll_locked(self, old: _OpenFile) -> None:
        while self._syncing:
            self._cond.wait()
        if self._closed or self._current is not old:
            return  # another thread rolled it (or closed the ledger) while we waited
        if old.failed:
            try:
                self._truncate_tail(old)
            except OSError as exc:
                raise LedgerWriteFailed(f"cannot cut the failed tail of {old.path}: {exc}") from exc
        elif old.written_entries > old.durable_entries:
            self._sync_locked(old)
        closed = LedgerRecord(old.ledger_id, old.durable_entries, old.durable_end)
        self._open_new_ledger(replace(self._meta, ledgers=(*self._meta.ledgers[:-1], closed)))
        self._seal_file(old)

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
            self._check_open()
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
            self._check_open()
            ledger = self._files.get(position.ledger_id)
            if ledger is None or not 0 <= position.entry_id < ledger.durable_entries:
                raise NoSuchEntry(f"no entry at {position} in {self.name}")
            return self._read_locked(ledger, position.entry_id)

    def _infos_locked(self) -> tuple[LedgerInfo, ...]:
        return tuple(LedgerInfo(r.ledger_id, self._files[r.ledger_id].durable_entries) for r in self._meta.ledgers)

    def _last_confirmed_locked(self) -> Position:
        current = self._current
        return Position(current.ledger_id, current.durable_entries - 1)

    def last_confirmed(self) -> Position:
        with self._lock:
            self._check_open()
            return self._last_confirmed_locked()

    def ledgers(self) -> tuple[LedgerInfo, ...]:
        with self._lock:
            self._check_open()
            return self._infos_locked()

    # -- deletion -------------------------------------------------------------------------------

    def delete_consumed_ledgers(self, up_to: int | None = None) -> tuple[int, ...]:
        """Delete every non-current ledger all cursors have mark-deleted (with ``up_to``, only ids
        at most ``up_to``).  The metadata without them is committed first; a crash before the
        unlinks leaves files recovery removes."""
        with self._lock:
            self._check_open()
            doomed = consumed_ledgers(
                self._infos_locked(),
                self._current.ledger_id,
                [c.mark_delete for c in self._meta.cursors.values()],
                up_to,
            )
            if not doomed:
                return ()
            gone = set(doomed)
            self._commit(replace(self._meta, ledgers=tuple(r for r in self._meta.ledgers if r.ledger_id not in gone)))
            for ledger_id in doomed:
                opened = self._files.pop(ledger_id)
                self._open_sealed.pop(ledger_id, None)
                if opened.fd is not None:
                    _best_effort(partial(self._fs.close, opened.fd))
                _best_effort(partial(self._fs.unlink, opened.path))
            _best_effort(lambda: self._fs.sync_dir(self._dir))
            return doomed

    # -- properties -----------------------------------------------------------------------------

    @property
    def properties(self) -> Mapping[str, str]:
        with self._lock:
            return self._meta.properties

    def _set_properties(self, change: Callable[[dict[str, str]], None]) -> None:
        with self._lock:
            self._check_open()
            props = dict(self._meta.properties)
            change(props)
            self._commit(replace(self._meta, properties=MappingProxyType(props)))

    def set_property(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"property keys and values are str, got {type(key).__name__}={type(value).__name__}")
        self._set_properties(lambda props: props.__setitem__(key, value))

    def remove_property(self, key: str) -> None:
        def remove(props: dict[str, str]) -> None:
            props.pop(key, None)

        self._set_properties(remove)

    # -- cursors --------------------------------------------------------------------------------

    def open_cursor(self, name: str, initial_position: InitialPosition = InitialPosition.LATEST) -> Cursor:
        check_cursor_name(name)
        with self._lock:
            self._check_open()
            if name not in self._meta.cursors:
                state = initial_cursor_state(initial_position, self._infos_locked(), self._last_confirmed_locked())
                self._journal_cursor(name, state)
            return Cursor(self, name)

    def delete_cursor(self, name: str) -> None:
        with self._lock:
            self._check_open()
            if name in self._meta.cursors:
                self._journal_cursor(name, None)

    def cursors(self) -> tuple[Cursor, ...]:
        with self._lock:
            return tuple(Cursor(self, name) for name in sorted(self._meta.cursors))

    def _commit_cursors(self, cursors: Mapping[str, CursorState]) -> None:
        self._commit(replace(self._meta, cursors=MappingProxyType(dict(cursors))))

    def cursor_state(self, name: str) -> CursorState:
        with self._lock:
            try:
                return self._meta.cursors[name]
            except KeyError:
                raise LedgerClosed(f"cursor {name} of {self.name} was deleted") from None

    def update_cursor(
        self, name: str, change: Callable[[CursorState, tuple[LedgerInfo, ...], Position], CursorState]
    ) -> None:
        with self._lock:
            self._check_open()
            try:
                state = self._meta.cursors[name]
            except KeyError:
                raise LedgerClosed(f"cursor {name} of {self.name} was deleted") from None
            new = change(state, self._infos_locked(), self._last_confirmed_locked())
            if new != state:
                self._journal_cursor(name, new)

    def __repr__(self) -> str:
        return f"FileLedger({self._dir!r}, ledgers={[r.ledger_id for r in self._meta.ledgers]})"


def _best_effort(action: Callable[[], object]) -> None:
    # Clean-up after a failure, or of state recovery also repairs: a second error here must
    # not hide the first, and leaves nothing recovery cannot handle.
    with contextlib.suppress(OSError):
        action()
