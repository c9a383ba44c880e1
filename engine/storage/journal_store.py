"""The journal a store's ledger handles commit through: group commit, checkpoints, recovery, crashes.

Every ledger handle of a store (a :class:`~engine.storage.file_ledger.FileLedger`, seen here as a
:class:`StoreHandle`) writes its changes as journal records (:mod:`engine.storage.journal`);
**group commit** lets writers of every ledger share one ``fdatasync``.  Two ways to wait for it:

* **sync** (the default): a write returns once its record is synced; concurrent writers (threads)
  share a sync, as BookKeeper's journal does.
* **deferred** (``deferred=True``, what the simulator uses): a write returns at once; the store asks
  its owner (``request_commit``) to run :meth:`JournalStore.commit` later, which writes everything
  queued as one batch and syncs it, or paces the batches by the disk's sync time itself
  (:mod:`engine.storage.group_commit`).  Nothing may leave the process before that:
  :meth:`JournalStore.barrier` calls back once everything written so far is durable (the
  simulator holds every answer until then, as a database flushes its log before it replies).

When the current segment is full (records or bytes) the store **checkpoints**: every open ledger
syncs the files it wrote behind and rewrites its ``METADATA``; then a new segment starts and the
older ones are deleted.  Opening the store recovers (:mod:`engine.storage.store_recovery`).  A
crash (:meth:`JournalStore.crash`) drops what was not synced; on the simulated disk a power cut
then drops or tears what the disk model allows, and the next open replays the journal.

A ledger opened on its own keeps a private :class:`JournalStore` in its own directory; the store
that opens managed ledgers by key is :class:`~engine.storage.file_store.FileStore`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from engine.storage.disk import FileSystem, OsFileSystem, makedirs_durably
from engine.storage.file_format import LedgerCorrupted
from engine.storage.file_recovery import RecoveryPlan, RecoveryReport, apply_recovery
from engine.storage.group_commit import AdaptiveBatches, AdaptiveCommit
from engine.storage.journal import Journal, JournalFailed, RecordKind, group_by_key, read_segments
from engine.storage.ledger import LedgerError, LedgerWriteFailed
from engine.storage.store_recovery import (
    StoreRecovery,
    delete_segments,
    ledger_dir,
    plan_for_key,
    recover_store,
)
from spec.config import Config

__all__ = [
    "MAX_JOURNAL_BYTES",
    "MAX_JOURNAL_RECORDS",
    "STORE_LOCK_NAME",
    "JournalStore",
    "StoreHandle",
    "StoreStats",
]

# Past either bound (records or bytes in the current journal segment) the store checkpoints: every
# ledger file written behind is synced, METADATA rewritten, and the journal starts a new segment.
MAX_JOURNAL_RECORDS: Final = 4096
MAX_JOURNAL_BYTES: Final = 4 << 20
STORE_LOCK_NAME: Final = "LOCK"


@dataclass
class StoreStats:
    """Counters over the store's life (across recoveries of one :class:`FileStore` object's owner)."""

    commits: int = 0
    records: int = 0
    checkpoints: int = 0
    recoveries: int = 0
    replayed: int = 0
    rebuilt: int = 0
    torn_bytes: int = 0
    queued_lost: int = 0  # records queued for the journal when the store crashed (never acknowledged)


@dataclass
class _Waiting:
    ticket: int
    action: Callable[[], None]


class StoreHandle(Protocol):
    """What the store needs of a ledger handle writing through it.  The store calls these with its
    lock held."""

    dirty: bool  # journaled since the handle's last checkpoint

    def revert_locked(self) -> None:
        """A journal batch failed: drop everything that is not durable."""

    def checkpoint_locked(self, lsn: int) -> None:
        """Make the handle's files self-sufficient up to journal lsn ``lsn``."""

    def close_locked(self, lsn: int | None) -> RecoveryPlan | None:
        """Close, checkpointed at ``lsn`` (None: not); returns the files as checkpointed, if exact."""

    def crash_locked(self) -> None:
        """Stop as a killed process would."""


@dataclass
class JournalStore:
    """Ledger directories under ``root`` sharing one journal; see the module docstring.

    ``lock``: take the store's ``LOCK`` (a ledger opened on its own keeps a private store in its
    own directory and locks that directory instead).  ``deferred`` and ``request_commit``: the
    deferred mode, ``adaptive`` its adaptive group commit.  ``max_journal_records`` /
    ``max_journal_bytes``: the segment bound that triggers a checkpoint (0: after every change).
    ``on_failure`` is told when the journal fails for good (a write or sync that could not be
    undone): every handle then refuses writes, and the owner must crash and reopen the store."""

    root: str
    config: Config = field(default_factory=Config)
    fs: FileSystem = field(default_factory=OsFileSystem)
    lock_store: bool = True
    deferred: bool = False
    request_commit: Callable[[], None] | None = None
    max_journal_records: int = MAX_JOURNAL_RECORDS
    max_journal_bytes: int = MAX_JOURNAL_BYTES
    adaptive: AdaptiveCommit | None = None

    def __post_init__(self) -> None:
        if self.max_journal_records < 0 or self.max_journal_bytes < 0:
            raise ValueError(f"journal bounds must be >= 0, got {self.max_journal_records}, {self.max_journal_bytes}")
        if self.adaptive is not None and not self.deferred:
            raise ValueError("the adaptive group commit is a deferred store's")
        self.batches = AdaptiveBatches(self)
        self._commits_at_checkpoint = 0
        self.root = os.path.abspath(os.fspath(self.root))
        self.lock: threading.RLock = threading.RLock()
        self.journal = Journal(self.fs, self.root)
        self.handles: dict[str, StoreHandle] = {}
        self.crashed: set[str] = set()  # keys whose handle was killed: rebuilt before reuse
        self.failed: BaseException | None = None
        self.closed = False
        self.on_failure: Callable[[BaseException], None] | None = None
        # Told of damage a read finds after open (a CRC that no longer matches): never an ordinary
        # ledger error to its owner (see LedgerStore.fatal).
        self.on_corruption: Callable[[LedgerCorrupted], None] | None = None
        self.stats = StoreStats()
        self._waiting: list[_Waiting] = []  # actions to run once a ticket is durable
        self._barriers: list[Callable[[], None]] = []
        self._commit_requested = False
        self._reports: dict[str, RecoveryReport] = {}
        self._plans: dict[str, RecoveryPlan] = {}  # ledgers known exactly as checkpointed by this store
        self._opened: set[str] = set()  # keys whose directory entry this store made durable
        self._lock_fd: int | None = None
        fs = self.fs
        makedirs_durably(fs, self.root)
        if self.lock_store:
            self._lock_fd = fs.lock(os.path.join(self.root, STORE_LOCK_NAME))
        try:
            with self.lock:
                self.recovery = self._recover()
        except BaseException:
            self._release()
            raise

    @property
    def sync_ms_used(self) -> list[int]:
        """Each adaptive batch's sync time, for the owner's figures."""
        return self.batches.sync_ms_used

    # -- keys ---------------------------------------------------------------------------------------

    def dir_of(self, key: str) -> str:
        """The directory of the managed ledger ``key`` ('.' is the root itself: a lone ledger)."""
        return ledger_dir(self.root, key)

    def attach(self, key: str, handle: StoreHandle) -> None:
        current = self.handles.get(key)
        if current is not None and current is not handle:
            raise LedgerError(f"managed ledger {key} of {self.root} already has an open handle")
        self.handles[key] = handle

    def take_rebuild_report(self, key: str) -> RecoveryReport:
        return self._reports.pop(key, RecoveryReport())

    def first_open(self, key: str) -> bool:
        """True the first time ``key`` is opened (or created) by this store: its directory's entry
        is then synced in the store's directory before any record of it is written."""
        if key in self._opened:
            return False
        self._opened.add(key)
        return True

    def take_plan(self, key: str) -> RecoveryPlan | None:
        """The files of ``key`` as this store last checkpointed them, if nothing touched them since."""
        return self._plans.pop(key, None)

    def check_usable(self) -> None:
        """Raise unless the store takes changes: LedgerError once closed, LedgerWriteFailed once
        its journal failed."""
        if self.closed:
            raise LedgerError(f"the store {self.root} is closed")
        if self.failed is not None:
            raise LedgerWriteFailed(f"the journal of {self.root} failed: {self.failed}")

    # -- recovery ---------------------------------------------------------------------------------

    def _recover(self) -> StoreRecovery:
        recovered = recover_store(self.fs, self.root, self.journal)
        self._plans.update(recovered.plans)
        self._reports.update(recovered.reports)
        recovery = recovered.recovery
        self.stats.recoveries += 1
        self.stats.replayed += recovery.replayed
        self.stats.rebuilt += len(recovery.rebuilt)
        self.stats.torn_bytes += sum(t[2] for t in recovery.torn)
        return recovery

    def rebuild_crashed(self, keys: list[str]) -> None:
        """Ledgers whose handles were killed while the store lived: their records after their
        checkpoint are only in the journal; replay them from it (committed first)."""
        self.journal.commit(recoverable=not self.deferred)
        groups = group_by_key(read_segments(self.fs, self.root, self.fs.listdir(self.root)))
        for key in keys:
            plan = plan_for_key(self.fs, self.dir_of(key), groups.get(key, []))
            self._plans.pop(key, None)
            apply_recovery(self.fs, plan)
            if plan.replayed:
                self._reports[key] = RecoveryReport(replayed=plan.replayed)
            self.crashed.discard(key)

    # -- writing ----------------------------------------------------------------------------------

    def record(self, key: str, kind: RecordKind, body: bytes) -> int:
        """Queue one record of ledger ``key`` (callers hold the lock); returns its ticket.

        A deferred store whose journal failed takes the record and drops it: nothing queued in a
        deferred store is acknowledged before a commit, none will come, and its owner was told to
        crash it (so the change is lost as at any crash, and no answer waiting on it leaves)."""
        if self.deferred and self.failed is not None and not self.closed:
            return -1
        self.check_usable()
        try:
            ticket = self.journal.append(kind, key, body)
        except JournalFailed as exc:
            raise LedgerWriteFailed(str(exc)) from exc
        if self.adaptive is not None:
            if self.batches.queued() and self.request_commit is not None:
                self.request_commit()  # the owner's notice that a commit is coming (no scheduling)
        elif self.deferred and not self._commit_requested and self.request_commit is not None:
            self._commit_requested = True
            self.request_commit()
        return ticket

    def wait(self, ticket: int) -> None:
        """Sync mode: return once ``ticket`` is durable (group commit); LedgerWriteFailed if not."""
        try:
            self.journal.wait(ticket)
        except JournalFailed as exc:
            if self.journal.failed is not None:
                self.fail(self.journal.failed)
            raise LedgerWriteFailed(str(exc)) from exc
        self.run_ready()

    def flush(self) -> None:
        """Make everything queued durable now, whatever the mode (a creation or a deletion of a
        managed ledger is ordered after every change queued before it)."""
        try:
            self.journal.commit(recoverable=not self.deferred)
        except JournalFailed as exc:
            if self.deferred or self.journal.failed is not None:
                self.fail(self.journal.failed or exc)
            else:
                self.revert_all()
            raise LedgerWriteFailed(str(exc)) from exc
        self.run_ready()

    def revert_all(self) -> None:
        """After a failed batch every handle drops what is not durable (callers hold the lock);
        if the journal could cut the batch off, it then takes records again."""
        if self.journal.suspended is None and self.journal.failed is None:
            return
        for handle in self.handles.values():
            handle.revert_locked()
        durable = self.journal.durable_ticket
        self._waiting = [w for w in self._waiting if w.ticket <= durable]
        if self.journal.suspended is not None:
            self.journal.resume()

    def after_durable(self, ticket: int, action: Callable[[], None]) -> None:
        """Run ``action`` once record ``ticket`` is durable (deleting files the record let go)."""
        self._waiting.append(_Waiting(ticket, action))

    def run_ready(self) -> None:
        """Run the actions whose records are durable now (:meth:`after_durable`)."""
        durable = self.journal.durable_ticket
        if not self._waiting or self._waiting[0].ticket > durable:
            return
        with self.lock:
            ready = [w for w in self._waiting if w.ticket <= durable]
            self._waiting = [w for w in self._waiting if w.ticket > durable]
        for waiting in ready:
            with contextlib.suppress(OSError):
                waiting.action()

    def committed(self) -> None:
        """A deferred batch is durable: count it and run what waited for it."""
        self.stats.commits = self.journal.commits
        self.stats.records = self.journal.records_committed
        self.run_ready()

    def take_barriers(self) -> list[Callable[[], None]]:
        """The answers waiting for everything queued so far (:meth:`barrier`), handed over."""
        barriers, self._barriers = self._barriers, []
        return barriers

    def commit(self) -> None:
        """Deferred mode's group commit: write and sync everything queued, then let the waiting
        answers go (:meth:`barrier`) and checkpoint if the segment is full.  A failure here is
        the journal's end: the store fails and its owner is told."""
        with self.lock:
            self._commit_requested = False
            if self.closed or self.failed is not None:
                return
            try:
                self.journal.commit(recoverable=False)
            except JournalFailed:
                self.fail(self.journal.failed or JournalFailed("journal commit failed"))
                return
            self.committed()
            barriers = self.take_barriers()
            self.maybe_checkpoint()
        for callback in barriers:
            callback()

    def barrier(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once everything written so far is durable: at once when nothing is
        queued, else after the next commit (never, if the store crashes or fails first)."""
        if self.failed is not None or self.closed:
            return
        if self.adaptive is not None:
            if self.journal.pending:
                self._barriers.append(callback)
            elif not self.batches.hold(callback):
                self.run_ready()
                callback()
        elif not self.journal.pending and not self._waiting:
            callback()
        else:
            self._barriers.append(callback)

    @property
    def busy(self) -> bool:
        """Records are waiting for a commit (or, adaptive, being synced)."""
        return self.journal.pending or self.batches.syncing

    def corrupted(self, error: LedgerCorrupted) -> LedgerCorrupted:
        """``error``, once the owner has been told of it (for the caller to raise)."""
        if self.on_corruption is not None:
            self.on_corruption(error)
        return error

    def fail(self, error: BaseException) -> None:
        """The journal failed for good: every handle refuses writes, nothing waiting is answered,
        and the owner is told (it must crash and reopen the store)."""
        if self.failed is not None:
            return
        self.failed = error
        self.journal.fail(error)
        self._barriers.clear()
        self._waiting.clear()
        if self.on_failure is not None:
            self.on_failure(error)

    # -- checkpoints ------------------------------------------------------------------------------

    def maybe_checkpoint(self) -> None:
        journal = self.journal
        if journal.end > self.max_journal_bytes:
            self.checkpoint()
        elif journal.segment_records >= max(1, self.max_journal_records):
            adaptive = self.adaptive
            if adaptive is not None and adaptive.checkpoint_share:
                cost = 3 * sum(1 for handle in self.handles.values() if handle.dirty) + 2
                if journal.commits - self._commits_at_checkpoint < adaptive.checkpoint_share * cost:
                    return
            self.checkpoint()

    def checkpoint(self) -> None:
        """Make every ledger's files self-sufficient, start a new segment, delete the old ones."""
        with self.lock:
            if self.closed or self.failed is not None:
                return
            dirty = [h for h in self.handles.values() if h.dirty]
            if not dirty and not self.crashed and not self.journal.pending and self.journal.segment_records == 0:
                return
            try:
                self.journal.commit(recoverable=False)
                lsn = self.journal.durable_lsn
                if self.crashed:
                    self.rebuild_crashed(sorted(self.crashed))
                for handle in list(self.handles.values()):
                    if handle.dirty:
                        handle.checkpoint_locked(lsn)
                old = self.journal.seq
                self.journal.start(old + 1, lsn + 1)
                delete_segments(self.fs, self.root, [old], self.journal.seq)
            except (OSError, JournalFailed, LedgerCorrupted) as exc:
                self.fail(exc)
                return
            self.stats.checkpoints += 1
            self._commits_at_checkpoint = self.journal.commits

    # -- closing and crashing ---------------------------------------------------------------------

    def close_ledger(self, key: str, handle: StoreHandle) -> None:
        """Close one handle: its records made durable, its files checkpointed."""
        with self.lock:
            if self.handles.get(key) is not handle:
                handle.close_locked(None)
                return
            del self.handles[key]
            if self.failed is None and not self.closed:
                try:
                    if handle.dirty:
                        self.journal.commit(recoverable=False)
                    known = handle.close_locked(self.journal.durable_lsn)
                    if known is not None:
                        self._plans[key] = known
                    self.run_ready()
                    return
                except (OSError, JournalFailed) as exc:
                    self.fail(exc)
            if handle.dirty:
                self.crashed.add(key)
            handle.close_locked(None)

    def crash_ledger(self, key: str, handle: StoreHandle) -> None:
        """Kill one handle: nothing synced or checkpointed; its journaled changes stay."""
        with self.lock:
            self._plans.pop(key, None)
            if self.handles.get(key) is handle:
                del self.handles[key]
                if handle.dirty:
                    self.crashed.add(key)
            handle.crash_locked()

    def close(self) -> None:
        """Checkpoint everything, leave one empty segment, release every handle.  Idempotent."""
        with self.lock:
            if self.closed:
                return
            self.batches.settle()
            if self.failed is None:
                self.checkpoint()
            for handle in list(self.handles.values()):
                handle.close_locked(None)
            self.handles.clear()
            self.closed = True
            self.journal.close()
            self._barriers.clear()
            self._release()

    def crash(self) -> None:
        """Stop as a killed process would: every handle gone, nothing more written or synced;
        what was queued is lost.  (A power cut is this plus the disk's own losses.)"""
        with self.lock:
            if self.closed:
                return
            self.batches.settle()
            for handle in list(self.handles.values()):
                handle.crash_locked()
            self.handles.clear()
            self.closed = True
            self.stats.queued_lost += self.journal.queued
            self.journal.close()
            self._barriers.clear()
            self._waiting.clear()
            self._release()

    def _release(self) -> None:
        lock_fd, self._lock_fd = self._lock_fd, None
        if lock_fd is not None:
            with contextlib.suppress(OSError):
                self.fs.unlock(lock_fd)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.root!r}, ledgers={sorted(self.handles)})"
