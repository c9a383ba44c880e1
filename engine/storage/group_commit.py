"""The deferred store's adaptive group commit: when the batch gathering now is sealed, how long its
sync takes, and the answers that wait for it (:class:`AdaptiveCommit` says how it is paced).

:class:`AdaptiveBatches` drives the store it belongs to through :class:`BatchingStore`: it seals
what the store's journal has queued as one batch, starts its write and sync (on a worker thread
for a real disk), and once the batch's sync time is over lets the answers waiting on it go and
lets the store checkpoint.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from engine.storage.journal import Journal, JournalFailed

__all__ = ["AdaptiveBatches", "AdaptiveCommit", "BatchingStore", "InFlight"]


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
class InFlight:
    """A sealed batch being written and synced, and the answers that wait for it."""

    done: concurrent.futures.Future[None]
    barriers: list[Callable[[], None]]
    sync_ms: int


class BatchingStore(Protocol):
    """What the adaptive group commit needs of its store (a
    :class:`~engine.storage.journal_store.JournalStore`).  Calls that change it are made with
    ``lock`` held."""

    lock: threading.RLock
    journal: Journal
    adaptive: AdaptiveCommit | None
    closed: bool
    failed: BaseException | None

    def fail(self, error: BaseException) -> None:
        """The journal failed for good."""

    def run_ready(self) -> None:
        """Run what waited for records that are now durable."""

    def take_barriers(self) -> list[Callable[[], None]]:
        """The answers waiting for everything queued so far, handed over."""

    def committed(self) -> None:
        """A batch is durable: count it and run what waited for it."""

    def maybe_checkpoint(self) -> None: ...


class AdaptiveBatches:
    """The batches of one store's adaptive group commit: when the first record waiting for a batch
    was queued, whether a seal is scheduled, the batch being synced, and the thread that syncs it."""

    def __init__(self, store: BatchingStore) -> None:
        self._store = store
        self._first_queued_at: int | None = None
        self._seal_scheduled = False
        self._in_flight: InFlight | None = None
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self.sync_ms_used: list[int] = []  # each batch's sync time, for the owner's figures

    def _settings(self) -> AdaptiveCommit:
        adaptive = self._store.adaptive
        assert adaptive is not None
        return adaptive

    @property
    def syncing(self) -> bool:
        """A sealed batch is being written and synced."""
        return self._in_flight is not None

    def queued(self) -> bool:
        """A record was queued (the store's lock held): the first of a batch schedules its seal,
        unless a batch is being synced (its completion schedules the next).  True for the first
        record of a batch."""
        if self._first_queued_at is not None:
            return False
        adaptive = self._settings()
        self._first_queued_at = adaptive.now()
        if self._in_flight is None and not self._seal_scheduled:
            self._seal_scheduled = True
            adaptive.schedule(adaptive.group_wait_ms, self.seal)
        return True

    def hold(self, callback: Callable[[], None]) -> bool:
        """Hold ``callback`` until the batch being synced is durable (nothing is queued, so all it
        depends on is in that batch); False when no batch is being synced."""
        if self._in_flight is None:
            return False
        self._in_flight.barriers.append(callback)
        return True

    def sync_ms(self) -> int:
        """How long the batch being sealed takes, in the owner's ms (see :class:`AdaptiveCommit`)."""
        adaptive = self._settings()
        if adaptive.sync_ms is not None:
            return adaptive.sync_ms
        measured = self._store.journal.sync_seconds
        seconds = statistics.median(measured) if measured else 0.0
        return min(adaptive.max_sync_ms, max(1, math.ceil(seconds * 1000)))

    def seal(self) -> None:
        """Seal what is queued as one batch and start its write and sync; it is durable (and its
        answers go) ``sync_ms`` later, when :meth:`complete` has waited for the sync."""
        store = self._store
        adaptive = self._settings()
        barriers: list[Callable[[], None]] = []
        with store.lock:
            self._seal_scheduled = False
            if store.closed or store.failed is not None or self._in_flight is not None:
                return
            if not store.journal.pending:
                # Something else committed it all (a flush, a checkpoint): the answers may go.
                self._first_queued_at = None
                store.run_ready()
                barriers = store.take_barriers()
            else:
                sealed = store.take_barriers()
                executor = None
                if adaptive.background:
                    if self._executor is None:
                        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="journal-sync")
                    executor = self._executor
                sync_ms = self.sync_ms()
                try:
                    done = store.journal.commit_in_background(executor, recoverable=False)
                except JournalFailed:
                    store.fail(store.journal.failed or JournalFailed("journal commit failed"))
                    return
                self._first_queued_at = None
                assert done is not None
                in_flight = InFlight(done, sealed, sync_ms)
                self._in_flight = in_flight
                self.sync_ms_used.append(sync_ms)
                adaptive.schedule(sync_ms, lambda: self.complete(in_flight))
        for callback in barriers:
            callback()

    def complete(self, in_flight: InFlight) -> None:
        """The batch's sync time is over: wait for its sync, let its answers go, checkpoint if the
        segment is full, and schedule the next seal if records came meanwhile."""
        store = self._store
        adaptive = self._settings()
        with store.lock:
            if self._in_flight is not in_flight or store.closed or store.failed is not None:
                return
            self._in_flight = None
            try:
                in_flight.done.result()
            except JournalFailed:
                store.fail(store.journal.failed or JournalFailed("journal commit failed"))
                return
            store.committed()
            barriers = in_flight.barriers
            store.maybe_checkpoint()
            if store.failed is not None:
                return
            if not store.journal.pending:
                # The checkpoint committed the rest: everything written so far is durable.
                self._first_queued_at = None
                barriers += store.take_barriers()
            elif not self._seal_scheduled:
                first = self._first_queued_at if self._first_queued_at is not None else adaptive.now()
                self._seal_scheduled = True
                adaptive.schedule(max(0, first + adaptive.group_wait_ms - adaptive.now()), self.seal)
        for callback in barriers:
            callback()

    def settle(self) -> None:
        """Wait for a batch being synced (a crash or a close must not close its descriptor under
        it); its answers never go.  Callers hold the store's lock."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            with contextlib.suppress(JournalFailed, OSError):
                in_flight.done.result()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
