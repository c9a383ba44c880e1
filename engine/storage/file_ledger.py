"""A crash-safe managed ledger on a file system, written through a journal.

One directory per managed ledger::

    METADATA                    the last checkpoint: ledger list, properties, cursors, journal lsn
    METADATA.tmp                a checkpoint being written; never read, removed at open
    LOCK                        flock()ed by the one handle that owns the directory
    ledger-00000000000000000007.log   one file per ledger: a header, then framed entries

and a **journal** (:mod:`engine.storage.journal`): the store's, shared by every managed ledger
of a :class:`~engine.storage.file_store.FileStore`, or a ledger's own (segments
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

Every file-system call goes through a :class:`~engine.storage.disk.FileSystem`
(:class:`~engine.storage.disk.OsFileSystem` by default, or the simulated disk).

The bytes are :mod:`engine.storage.file_format`'s and recovery is
:mod:`engine.storage.file_recovery`'s; this module is the ledger itself, and re-exports the
names its callers have always imported from it.
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Final

from engine.storage.disk import FileSystem, LedgerLocked, OsFileSystem, makedirs_durably
from engine.storage.file_format import (
    FRAME_HEADER,
    LEDGER_HEADER,
    LEDGER_MAGIC,
    LOCK_NAME,
    MAX_ENTRY_BYTES,
    METADATA_HEADER,
    METADATA_MAGIC,
    METADATA_NAME,
    METADATA_TMP_NAME,
    METADATA_VERSION,
    VERSION,
    FrameInfo,
    LedgerCorrupted,
    LedgerRecord,
    LedgerScan,
    Metadata,
    crc32c,
    decode_cursor_body,
    decode_metadata,
    encode_cursor_body,
    encode_frame,
    encode_ledger_header,
    encode_metadata,
    ledger_file_name,
    parse_ledger_file_name,
    scan_ledger,
)
from engine.storage.file_recovery import (
    FilePlan,
    RecoveryPlan,
    RecoveryReport,
    apply_recovery,
    plan_recovery,
    read_whole,
    write_metadata_file,
)
from engine.storage.journal import RecordKind, encode_entry_body
from engine.storage.journal_store import MAX_JOURNAL_BYTES, MAX_JOURNAL_RECORDS, JournalStore
from engine.storage.ledger import (
    Entry,
    InitialPosition,
    LedgerClosed,
    LedgerError,
    LedgerWriteFailed,
    NoSuchEntry,
)
from engine.storage.memory_ledger import Cursor, check_cursor_name
from reference.cursor import CursorState, initial_cursor_state
from reference.ledger import consumed_ledgers, ledger_is_full
from spec.config import Config
from spec.types import LedgerInfo, Position

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

# Sealed ledgers are only read (dispatch catching up, recovery, inspection); keeping every one open would
# cost a descriptor per ledger for the life of the handle, so only the most recently read stay open.
MAX_OPEN_SEALED_FILES: Final = 8

_NO_CURSORS: Mapping[str, CursorState] = MappingProxyType({})


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


class FileLedger:
    """A file-backed :class:`~engine.storage.ledger.ManagedLedger`; see the module docstring.

    ``directory`` is created if missing.  ``config`` supplies the roll-over limits.  ``store`` is
    the store whose journal it writes through (a :class:`~engine.storage.file_store.FileStore`;
    ``key`` is its directory's name in the store); without one the ledger keeps its own journal
    in its directory, in a private :class:`~engine.storage.journal_store.JournalStore`.
    ``group_commit`` lets concurrent writers share one journal sync (without it a writer syncs
    while holding the lock).  ``max_journal_records`` / ``max_journal_bytes`` bound
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
        store: JournalStore | None = None,
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
            if name is not None:
                # Refused before the private store's recovery touches anything.
                _check_name(fs or OsFileSystem(), self._dir, name)

            store = JournalStore(
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
    def store(self) -> JournalStore:
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

    def revert_locked(self) -> None:
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

    def checkpoint_locked(self, lsn: int) -> None:
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

    def close_locked(self, lsn: int | None) -> RecoveryPlan | None:
        """The store's part of closing: checkpoint at ``lsn`` (None: it failed or was not wanted).
        Returns what a reopening needs to know of the files when they are exactly as checkpointed
        (the store keeps it, so the next handle need not scan them again)."""
        if self._closed:
            return None
        if lsn is not None and self.dirty:
            self.checkpoint_locked(lsn)
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
            files[record.ledger_id] = FilePlan(
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

    def crash_locked(self) -> None:
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
        # Verify on every read: damage after open must never be returned as data, and the store's
        # owner hears of it (corruption is not an ordinary ledger error).
        corrupted = self._store.corrupted
        if len(frame) != FRAME_HEADER.size + length:
            raise corrupted(
                LedgerCorrupted(f"entry {entry_id} is cut short", file=ledger.path, offset=offset + len(frame))
            )
        found_length, found_id, head_crc, payload_crc = FRAME_HEADER.unpack_from(frame)
        if head_crc != crc32c(frame[:12]) or found_length != length or found_id != entry_id:
            raise corrupted(
                LedgerCorrupted(f"frame header of entry {entry_id} changed on disk", file=ledger.path, offset=offset)
            )
        payload = frame[FRAME_HEADER.size :]
        if payload_crc != crc32c(payload):
            raise corrupted(
                LedgerCorrupted(
                    f"payload CRC mismatch in entry {entry_id}", file=ledger.path, offset=offset + FRAME_HEADER.size
                )
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
        found = decode_metadata(read_whole(fs, path), file=path).name
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
