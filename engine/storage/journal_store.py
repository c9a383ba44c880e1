"""The journal a store's ledger handles commit through: group commit, checkpoints, recovery, crashes.

Every ledger handle of a store (a :class:`~engine.storage.file_ledger.FileLedger`, seen here as a
:class:`StoreHandle`) writes its changes as journal records (:mod:`engine.storage.journal`);
**group commit** lets writers of every ledger share one ``fdatasync``.  Two ways to wait for it:

* **sync** (the default): a write returns once its record is synced; concurrent writers (threads)
  share a sync, as BookKeeper's journal does.
* **deferred** (``deferred=True``, what the simulator uses): a write returns at once; the store asks
  its owner (``request_commit``) to run :meth:`JournalStore.commit` later, which writes everything
  queued as one batch and syncs it.  Nothing may leave the process before that:
  :meth:`JournalStore.barrier` calls back once everything written so far is durable (the
  simulator holds every answer until then, as a database flushes its log before it replies).

When the current segment is full (records or bytes) the store **checkpoints**: every open ledger
syncs the files it wrote behind and rewrites its ``METADATA``; then a new segment starts and the
older ones are deleted.  Opening the store recovers: every segment is checked
(:func:`~engine.storage.journal.scan_segment`), every ledger with records after its checkpoint is
rebuilt from them and checkpointed, and a new segment starts.  A crash (:meth:`JournalStore.crash`)
drops what was not synced; on the simulated disk a power cut then drops or tears what the disk
model allows, and the next open replays the journal.

A ledger opened on its own keeps a private :class:`JournalStore` in its own directory; the store
that opens managed ledgers by key is :class:`~engine.storage.file_store.FileStore`.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
import statistics
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Final, Protocol

from engine.storage.disk import FileSystem, OsFileSystem, makedirs_durably
from engine.storage.file_format import LedgerCorrupted
from engine.storage.file_recovery import RecoveryPlan, RecoveryReport, apply_recovery, plan_recovery
from engine.storage.journal import (
    Journal,
    JournalFailed,
    RawRecord,
    RecordKind,
    SegmentScan,
    group_by_key,
    parse_segment_file_name,
    read_segments,
)
from engine.storage.ledger import LedgerError, LedgerWriteFailed
from spec.config import Config

__all__ = [
    "MAX_JOURNAL_BYTES",
    "MAX_JOURNAL_RECORDS",
    "STORE_LOCK_NAME",
    "TOMBSTONE_SUFFIX",
    "AdaptiveCommit",
    "JournalStore",
    "StoreHandle",
    "StoreRecovery",
    "StoreStats",
]

# Past either bound (records or bytes in the current journal segment) the store checkpoints: every
# ledger file written behind is synced, METADATA rewritten, and the journal starts a new segment.
MAX_JOURNAL_RECORDS: Final = 4096
MAX_JOURNAL_BYTES: Final = 4 << 20
STORE_LOCK_NAME: Final = "LOCK"
TOMBSTONE_SUFFIX: Final = ".deleted"


@dataclass(frozen=True)
class StoreRecovery:
    """What opening the store found and repaired."""

    segments: tuple[str, ...] = ()  # segment files scanned
    records: int = 0  # intact records in them
    replayed: int = 0  # records applied on top of ledgers' checkpoints
    rebuilt: tuple[str, ...] = ()  # keys of the ledgers rebuilt from the journal
    torn: tuple[tuple[str, int, int], ...] = ()  # (segment, valid length, torn bytes)
    dropped: tuple[str, ...] = ()  # keys whose deletion the journal finished


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


@dataclass(frozen=True)
class AdaptiveCommit:
    """The deferred store's adaptive group commit, paced by its owner's clock (BookKeeper's journal:
    a batch gathers for at most ``journalMaxGroupWaitMSec``, and its force-write thread syncs
    whatever was written while the previous sync ran).

    A batch is sealed ``group_wait_ms`` after its first record is queued, but never before the
    previous batch is durable; a sealed batch takes the disk's sync time (``sync_ms``, or when
    None the median of the journal's latest measured write-and-sync times, rounded up to whole
    ms, between 1 and ``max_sync_ms``) before it counts as durable and the answers waiting on it
    go.  Records queued meanwhile wait for the next batch.  So a commit never comes sooner than
    the disk can sync, and a fast disk still gathers a round trip's worth of requests per sync.

    ``schedule(delay_ms, action)`` runs ``action`` later on the owner's clock, ``now()`` reads
    it.  ``background``: the write and sync run on a worker thread while the owner goes on with
    its work until the batch is due (a real disk); otherwise they run inline at the seal (the
    simulated disk, where the run must stay the same for a seed: then give ``sync_ms``).

    Checkpoints are paced by their cost too: a full segment (``max_journal_records``) is
    checkpointed only once the journal has made at least ``checkpoint_share`` times as many
    commits since the last checkpoint as the checkpoint will cost syncs (about three per dirty
    ledger: its file, its ``METADATA``, its directory), so they add at most 1/``checkpoint_share``
    to the syncs; ``max_journal_bytes`` still bounds a segment, and so the replay, whatever the
    cost (0: the record bound alone, as without the adaptive commit)."""

    group_wait_ms: int
    schedule: Callable[[int, Callable[[], None]], None]
    now: Callable[[], int]
    sync_ms: int | None = None
    max_sync_ms: int = 50
    background: bool = True
    checkpoint_share: int = 32

    def __post_init__(self) -> None:
        if self.group_wait_ms < 0 or self.max_sync_ms < 1 or (self.sync_ms is not None and self.sync_ms < 0):
            raise ValueError(
                f"group_wait_ms >= 0, max_sync_ms >= 1 and sync_ms >= 0 expected, got {self.group_wait_ms}, "
                f"{self.max_sync_ms}, {self.sync_ms}"
            )


@dataclass
class _InFlight:
    """A sealed batch being written and synced, and the answers that wait for it."""

    done: concurrent.futures.Future[None]
    barriers: list[Callable[[], None]]
    sync_ms: int


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
    deferred mode.  ``max_journal_records`` / ``max_journal_bytes``: the segment bound that
    triggers a checkpoint (0: after every change).  ``on_failure`` is told when the journal
    fails for good (a write or sync that could not be undone): every handle then refuses
    writes, and the owner must crash and reopen the store."""

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
        # The adaptive commit's state: when the first record waiting for a batch was queued, whether
        # a seal is scheduled, the batch being synced, and the thread that syncs it.
        self._first_queued_at: int | None = None
        self._seal_scheduled = False
        self._in_flight: _InFlight | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.sync_ms_used: list[int] = []  # each adaptive batch's sync time, for the owner's figures
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

    # -- keys ---------------------------------------------------------------------------------------

    def dir_of(self, key: str) -> str:
        """The directory of the managed ledger ``key`` ('.' is the root itself: a lone ledger)."""
        return self.root if key == "." else os.path.join(self.root, key)

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
        fs = self.fs
        names = fs.listdir(self.root)
        scans = read_segments(fs, self.root, names)
        groups = group_by_key(scans)
        # Check everything first (read-only); repair only once every ledger checked out.
        plans = [(key, self._plan(key, records)) for key, records in sorted(groups.items())]
        rebuilt, dropped, replayed = [], [], 0
        for key, plan in plans:
            meta, truncated = apply_recovery(fs, plan)
            if plan.stale or meta is None:
                dropped.append(key)
            else:
                self._plans[key] = replace(plan, meta=meta, leftovers=[], replayed=0, last_lsn=meta.journal_lsn)
            if plan.replayed or truncated or plan.leftovers:
                rebuilt.append(key)
                self._reports[key] = RecoveryReport(
                    truncated=truncated, removed=tuple(plan.leftovers), replayed=plan.replayed
                )
            replayed += plan.replayed
        for name in names:
            if name.endswith(TOMBSTONE_SUFFIX) and fs.is_dir(os.path.join(self.root, name)):
                fs.rmtree(os.path.join(self.root, name))
        live = [s for s in scans if s.valid_length]
        next_lsn = live[-1].next_lsn if live else 0
        next_seq = max((s.seq for s in scans), default=-1) + 1
        self.journal.start(next_seq, next_lsn)
        self._delete_segments(s.seq for s in scans)
        torn = tuple((s.file, s.valid_length, s.torn_bytes) for s in scans if s.torn_bytes)
        self.stats.recoveries += 1
        self.stats.replayed += replayed
        self.stats.rebuilt += len(rebuilt)
        self.stats.torn_bytes += sum(t[2] for t in torn)
        return StoreRecovery(
            tuple(s.file for s in scans),
            sum(len(s.records) for s in scans),
            replayed,
            tuple(rebuilt),
            torn,
            tuple(dropped),
        )

    def _plan(self, key: str, records: list[RawRecord]) -> RecoveryPlan:
        drop = records[0].lsn if records and records[0].kind is RecordKind.DROP else None
        rest = records[1:] if drop is not None else records
        return plan_recovery(self.fs, self.dir_of(key), rest, drop_lsn=drop)

    def _delete_segments(self, seqs: Iterable[int]) -> None:
        doomed = [s for s in seqs if s != self.journal.seq]
        for name in self.fs.listdir(self.root):
            seq = parse_segment_file_name(name)
            if seq is not None and seq in doomed:
                self.fs.unlink(os.path.join(self.root, name))
        if doomed:
            self.fs.sync_dir(self.root)

    def rebuild_crashed(self, keys: list[str]) -> None:
        """Ledgers whose handles were killed while the store lived: their records after their
        checkpoint are only in the journal; replay them from it (committed first)."""
        self.journal.commit(recoverable=not self.deferred)
        scans: list[SegmentScan] = read_segments(self.fs, self.root, self.fs.listdir(self.root))
        groups = group_by_key(scans)
        for key in keys:
            plan = self._plan(key, groups.get(key, []))
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
        adaptive = self.adaptive
        if adaptive is not None:
            if self._first_queued_at is None:
                self._first_queued_at = adaptive.now()
                if self._in_flight is None and not self._seal_scheduled:
                    self._seal_scheduled = True
                    adaptive.schedule(adaptive.group_wait_ms, self._seal)
                if self.request_commit is not None:
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
        self._run_ready()

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
        self._run_ready()

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

    def _run_ready(self) -> None:
        durable = self.journal.durable_ticket
        if not self._waiting or self._waiting[0].ticket > durable:
            return
        with self.lock:
            ready = [w for w in self._waiting if w.ticket <= durable]
            self._waiting = [w for w in self._waiting if w.ticket > durable]
        for waiting in ready:
            with contextlib.suppress(OSError):
                waiting.action()

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
            self.stats.commits = self.journal.commits
            self.stats.records = self.journal.records_committed
            self._run_ready()
            barriers, self._barriers = self._barriers, []
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
            elif self._in_flight is not None:
                self._in_flight.barriers.append(callback)  # all it depends on is in that batch
            else:
                self._run_ready()
                callback()
        elif not self.journal.pending and not self._waiting:
            callback()
        else:
            self._barriers.append(callback)

    @property
    def busy(self) -> bool:
        """Records are waiting for a commit (or, adaptive, being synced)."""
        return self.journal.pending or self._in_flight is not None

    # -- the adaptive group commit --------------------------------------------------------------

    def _sync_ms(self) -> int:
        """How long the batch being sealed takes, in the owner's ms (see :class:`AdaptiveCommit`)."""
        adaptive = self.adaptive
        assert adaptive is not None
        if adaptive.sync_ms is not None:
            return adaptive.sync_ms
        measured = self.journal.sync_seconds
        seconds = statistics.median(measured) if measured else 0.0
        return min(adaptive.max_sync_ms, max(1, math.ceil(seconds * 1000)))

    def _seal(self) -> None:
        """Seal what is queued as one batch and start its write and sync; it is durable (and its
        answers go) ``sync_ms`` later, when :meth:`_complete` has waited for the sync."""
        adaptive = self.adaptive
        assert adaptive is not None
        barriers: list[Callable[[], None]] = []
        with self.lock:
            self._seal_scheduled = False
            if self.closed or self.failed is not None or self._in_flight is not None:
                return
            if not self.journal.pending:
                # Something else committed it all (a flush, a checkpoint): the answers may go.
                self._first_queued_at = None
                self._run_ready()
                barriers, self._barriers = self._barriers, []
            else:
                sealed, self._barriers = self._barriers, []
                executor = None
                if adaptive.background:
                    if self._executor is None:
                        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal-sync")
                    executor = self._executor
                sync_ms = self._sync_ms()
                try:
                    done = self.journal.commit_in_background(executor, recoverable=False)
                except JournalFailed:
                    self.fail(self.journal.failed or JournalFailed("journal commit failed"))
                    return
                self._first_queued_at = None
                assert done is not None
                in_flight = _InFlight(done, sealed, sync_ms)
                self._in_flight = in_flight
                self.sync_ms_used.append(sync_ms)
                adaptive.schedule(sync_ms, lambda: self._complete(in_flight))
        for callback in barriers:
            callback()

    def _complete(self, in_flight: _InFlight) -> None:
        """The batch's sync time is over: wait for its sync, let its answers go, checkpoint if the
        segment is full, and schedule the next seal if records came meanwhile."""
        adaptive = self.adaptive
        assert adaptive is not None
        with self.lock:
            if self._in_flight is not in_flight or self.closed or self.failed is not None:
                return
            self._in_flight = None
            try:
                in_flight.done.result()
            except JournalFailed:
                self.fail(self.journal.failed or JournalFailed("journal commit failed"))
                return
            self.stats.commits = self.journal.commits
            self.stats.records = self.journal.records_committed
            self._run_ready()
            barriers = in_flight.barriers
            self.maybe_checkpoint()
            if self.failed is not None:
                return
            if not self.journal.pending:
                # The checkpoint committed the rest: everything written so far is durable.
                self._first_queued_at = None
                barriers += self._barriers
                self._barriers = []
            elif not self._seal_scheduled:
                first = self._first_queued_at if self._first_queued_at is not None else adaptive.now()
                self._seal_scheduled = True
                adaptive.schedule(max(0, first + adaptive.group_wait_ms - adaptive.now()), self._seal)
        for callback in barriers:
            callback()

    def _settle(self) -> None:
        """Wait for a batch being synced (a crash or a close must not close its descriptor under
        it); its answers never go.  Callers hold the lock."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            with contextlib.suppress(JournalFailed, OSError):
                in_flight.done.result()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

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
                self._delete_segments([old])
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
                    self._run_ready()
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
            self._settle()
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
            self._settle()
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
