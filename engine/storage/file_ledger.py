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

The bytes are :mod:`engine.storage.file_format`'s, recovery is
:mod:`engine.storage.file_recovery`'s, the ledger files and the descriptors they are read through
are :mod:`engine.storage.ledger_files`'s, and the journal, its group commit and checkpoints are
the store's (:mod:`engine.storage.journal_store`); this module is the ledger itself, and
re-exports the names its callers have always imported from it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Final

from engine.storage.disk import FileSystem, LedgerLocked, OsFileSystem
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
    RecoveryPlan,
    RecoveryReport,
    apply_recovery,
    plan_recovery,
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
from engine.storage.ledger_directory import lock_directory, open_directory, private_store
from engine.storage.ledger_files import LedgerFile, LedgerFiles, best_effort
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
        self._dir = os.path.abspath(os.fspath(directory))
        self._config = config or Config()
        self._group_commit = group_commit
        self._closed = False
        self.dirty = False  # journaled since the last checkpoint
        self._dir_dirty = False  # directory entries changed since the last checkpoint
        self._history: list[tuple[int, Metadata]] = []  # metadata versions not yet durable, by ticket
        self._lock_fd: int | None = None
        self._private = store is None
        if store is None:
            store = private_store(
                fs or OsFileSystem(),
                self._dir,
                self._config,
                name,
                max_journal_records=max_journal_records,
                max_journal_bytes=max_journal_bytes,
            )
        self._store = store
        self._fs: FileSystem = store.fs
        self._files = LedgerFiles(self._fs, max_open_sealed_files)
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
        try:
            self._settle(self._opening_ticket)
        except BaseException:
            # The opening's records failed and were reverted, and the caller gets no handle to close:
            # left attached, this handle would hold the directory's lock, and every later open of the
            # ledger on this store would be refused as locked for good.  It stops as a killed one
            # would; the next open recovers from what is durable.
            self.crash()
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
    def store(self) -> JournalStore:
        return self._store

    @property
    def metadata(self) -> Metadata:
        """The current metadata (every acknowledged change applied; ``journal_lsn`` is the last
        checkpoint's): the durable state as recovery would rebuild it."""
        with self._lock:
            return self._meta

    @property
    def _current(self) -> LedgerFile:
        return self._files[self._meta.ledgers[-1].ledger_id]

    # -- opening --------------------------------------------------------------------------------

    def _open(self, name: str | None, first_ledger_id: int) -> tuple[Metadata, RecoveryReport]:
        """Open the directory (:func:`~engine.storage.ledger_directory.open_directory`: created, or
        checked and only then repaired); a recovered ledger's open ledger is closed and a new one
        opened, as Pulsar's new owner does."""
        self._opening_ticket = -1
        self._lock_fd = lock_directory(self._fs, self._dir)
        opened = open_directory(self._fs, self._dir, self._store, self._key, self._files, name, first_ledger_id)
        if opened.created:
            return opened.meta, opened.report
        meta = self._meta = opened.meta
        last = self._files[meta.ledgers[-1].ledger_id]
        closed = replace(meta.ledgers[-1], entries=last.written_entries, length=last.written_end)
        self._opening_ticket = self._open_new_ledger(replace(meta, ledgers=(*meta.ledgers[:-1], closed)))
        for record in self._meta.ledgers[:-1]:
            self._files.seal(self._files[record.ledger_id])
        return self._meta, replace(opened.report, closed_ledger=closed.ledger_id)

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
        for opened in self._files:
            opened.durable_upto(ticket)

    def revert_locked(self) -> None:
        """A journal batch failed: nothing of this handle that was not durable survives (the
        journal was cut back), so memory goes back to the durable state; a ledger that lost
        entries takes no append until it is rolled over (Pulsar's rule after a failed add)."""
        self._meta = self._durable_meta
        self._history.clear()
        if self._files.revert({r.ledger_id for r in self._meta.ledgers}):
            self._dir_dirty = True
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
        self._files.sync_written()
        if self._dir_dirty:
            fs.sync_dir(self._dir)
        current = self._current
        meta = replace(self._meta, journal_lsn=lsn, open_synced=(current.written_entries, current.written_end))
        write_metadata_file(fs, self._dir, meta)
        self._files.mark_checkpointed()
        self._meta = self._durable_meta = meta
        self._history.clear()
        self._dir_dirty = False
        self.dirty = False

    def _open_new_ledger(self, meta: Metadata) -> int:
        """Create the next ledger's file (written behind) and journal ``meta`` with it as the open
        ledger; ``meta`` already records the previous ledger as closed.  Returns the ticket."""
        ledger_id = meta.next_ledger_id
        self._files.create(ledger_id, self._path(ledger_file_name(ledger_id)))
        self._dir_dirty = True
        try:
            return self._record_meta(
                replace(meta, next_ledger_id=ledger_id + 1, ledgers=(*meta.ledgers, LedgerRecord(ledger_id)))
            )
        except LedgerWriteFailed:
            self._files.uncreate(ledger_id)
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
        files = {record.ledger_id: self._files[record.ledger_id].as_plan(record) for record in self._meta.ledgers}
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
        self._files.release()
        lock_fd, self._lock_fd = self._lock_fd, None
        if lock_fd is not None:
            best_effort(lambda: self._fs.unlock(lock_fd))

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
                self._fs.pwrite(self._files.fd(ledger), encode_frame(entry_id, payload), offset)
            except OSError as exc:
                ledger.failed = ledger.dirty = True
                raise LedgerWriteFailed(f"write to {ledger.path} failed: {exc}") from exc
            ticket = self._record(RecordKind.ENTRY, encode_entry_body(ledger.ledger_id, entry_id, payload))
            ledger.wrote(offset, len(payload))
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

    def roll_owed(self) -> bool:
        # A question, not a write: a failed or closed ledger's next append reports it (soak seed 381)
        with self._lock:
            return not self._closed and self._current.full

    def roll_over(self) -> None:
        """Close the current ledger at its last written entry and open the next one."""
        self._write_op(lambda: self._roll_locked(self._current))

    def _roll_locked(self, old: LedgerFile) -> int:
        if self._closed or self._current is not old:
            return -1  # another thread rolled it (or closed the ledger)
        closed = LedgerRecord(old.ledger_id, old.written_entries, old.written_end)
        ticket = self._open_new_ledger(replace(self._meta, ledgers=(*self._meta.ledgers[:-1], closed)))
        self._files.seal(old)
        return ticket

    # -- reads ----------------------------------------------------------------------------------

    def read(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` durable entries at or after ``start``, crossing ledgers."""
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        with self._lock:
            self._check_readable()
            return self._files.read_entries(self._meta.ledgers, start, max_entries, self._store.corrupted)

    def read_entry(self, position: Position) -> bytes:
        with self._lock:
            self._check_readable()
            # A deleted ledger whose deletion is not durable yet still has its file, not a record.
            listed = any(r.ledger_id == position.ledger_id for r in self._meta.ledgers)
            ledger = self._files.get(position.ledger_id) if listed else None
            if ledger is None or not 0 <= position.entry_id < ledger.durable_entries:
                raise NoSuchEntry(f"no entry at {position} in {self.name}")
            return self._files.read(ledger, position.entry_id, self._store.corrupted)

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
            self._dir_dirty = True
            # The files stay known until the metadata without them is durable: a journal batch that
            # fails first brings back the metadata that lists them (revert_locked), and a handle
            # that has forgotten a file its metadata lists cannot read it or close.
            self._store.after_durable(ticket, partial(self._drop_deleted, doomed))
            return ticket

        self._write_op(change)
        return doomed

    def _drop_deleted(self, doomed: tuple[int, ...]) -> None:
        """The deletion of ``doomed`` is durable: forget their files and unlink them."""
        with self._lock:
            paths = [
                self._files.forget(ledger_id).path for ledger_id in doomed if self._files.get(ledger_id) is not None
            ]
        _unlink_all(self._fs, paths)

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


def _unlink_all(fs: FileSystem, paths: Sequence[str]) -> None:
    for path in paths:
        best_effort(partial(fs.unlink, path))
