"""Where a simulated broker's managed ledgers live: in memory or in files, optionally faulty.

A :class:`LedgerStore` opens managed ledgers by name.  Opening a name again (after a crash) gives
a new owner's handle on the same durable data: for the memory store the same storage, for the
file store the same directory, reopened and recovered.  What the previous owner had acknowledged
is there; nothing else is.  With ``faults`` each handle is wrapped in
:class:`~engine.simulated.faults.FaultyLedger` and its appends (and reads) fail with the given
probability, drawn from the simulation's random source.

The file store is a :class:`~engine.storage.file_store.FileStore`: every managed ledger in one
directory, all writing through one journal, on a :class:`~engine.storage.disk.FileSystem` (the
real one, or the simulated disk).  With ``schedule`` its group commit is *deferred*: a write
returns at once, a commit runs as a scheduled event, and :meth:`LedgerStore.barrier` holds
whatever must not leave before it (the simulator's answers).  :meth:`LedgerStore.close_all` is a
crash: the store stops where it is (what was queued for the journal is lost) and, on the
simulated disk, the power goes (unsynced writes lost, torn or reordered as the disk models it);
the next open recovers the store from its journal.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TypeVar

from engine.simulated.faults import FaultyLedger, InjectedFault, Op
from engine.storage.disk import FileSystem, OsFileSystem
from engine.storage.file_ledger import MAX_JOURNAL_BYTES, MAX_JOURNAL_RECORDS, LedgerCorrupted
from engine.storage.file_store import AdaptiveCommit, FileStore, StoreRecovery, StoreStats
from engine.storage.ledger import LedgerWriteFailed, ManagedLedger
from engine.storage.memory_ledger import MemoryLedger, MemoryLedgerStorage
from spec.config import Config

__all__ = ["LedgerFaults", "LedgerStore", "ledger_key", "storage_lost"]

_T = TypeVar("_T")


@dataclass
class LedgerFaults:
    """Probabilities of injected ledger failures (a failed append did not happen)."""

    append: float = 0.0
    read: float = 0.0


# Kept: every open of a ledger asks for its key, and a component whose store failed retries its
# load every restart delay until the run ends (hundreds of thousands of opens in a long run).
@functools.lru_cache(maxsize=4096)
def ledger_key(name: str) -> str:
    """The directory name of managed ledger ``name`` in a file store: readable, and unique by its hash."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:80]
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


_file_name = ledger_key  # the name it had before (tests and tools still use it)


class LedgerStore:
    """Opens managed ledgers by name on one backend (``memory`` or ``file``).

    ``disk`` is the file store's file system (the real one by default).  ``schedule`` turns on
    the deferred group commit: ``schedule(action)`` must run ``action`` later (the simulation
    schedules it ``group commit`` milliseconds ahead); ``adaptive`` turns it on paced by the
    disk instead (:class:`~engine.storage.file_store.AdaptiveCommit`).  ``max_journal_records`` /
    ``max_journal_bytes`` bound a journal segment before the store checkpoints."""

    def __init__(
        self,
        kind: str,
        config: Config,
        *,
        directory: str | os.PathLike[str] | None = None,
        rng: random.Random | None = None,
        faults: LedgerFaults | None = None,
        disk: FileSystem | None = None,
        schedule: Callable[[Callable[[], None]], None] | None = None,
        adaptive: AdaptiveCommit | None = None,
        max_journal_records: int = MAX_JOURNAL_RECORDS,
        max_journal_bytes: int = MAX_JOURNAL_BYTES,
        room_reserve: int = 0,
        full_disk_fatal: bool = True,
    ) -> None:
        if kind not in ("memory", "file"):
            raise ValueError(f"ledger kind must be memory or file, not {kind!r}")
        if kind == "file" and directory is None:
            raise ValueError("a file ledger store needs a directory")
        self.kind = kind
        self.config = config
        self.directory = Path(directory) if directory is not None else None
        self.rng = rng
        self.faults = faults or LedgerFaults()
        self.disk: FileSystem = disk if disk is not None else OsFileSystem()
        if schedule is not None and adaptive is not None:
            raise ValueError("a store's group commit is either scheduled at a fixed wait or adaptive, not both")
        self.schedule = schedule
        self.adaptive = adaptive
        self.max_journal_records = max_journal_records
        self.max_journal_bytes = max_journal_bytes
        self._memory: dict[str, MemoryLedgerStorage] = {}
        self._open: dict[str, ManagedLedger] = {}
        self._faulty: list[FaultyLedger] = []
        self._enabled = True
        self._files: FileStore | None = None
        # Every file store this object opened (one per crash), for the run's figures.
        self.recoveries: list[StoreRecovery] = []
        self._past = StoreStats()
        self.power_cuts = 0
        self.power_cut_bytes_lost = 0  # unsynced bytes the simulated disk's power cuts dropped or tore
        # Told of each fault injected on any handle this store opened, so a run's fault schedule lists them.
        self.on_fault: Callable[[InjectedFault], None] | None = None
        # Told when the file store's journal failed for good (a disk error it could not undo): the
        # owner must crash and reopen the store, as a bookie restarts after a journal failure.  A
        # failure before anyone listens (the broker's first loads, before its cluster hooks this)
        # is kept and told as soon as someone does: nothing else would ever reopen the store.
        self._on_failure: Callable[[BaseException], None] | None = None
        self._untold_failure: BaseException | None = None
        # Told when a change is queued for the journal's next group commit (the simulator's
        # power cuts use it to find a busy moment).
        self.on_queue: Callable[[], None] | None = None
        # The first error that lost the store for good (:func:`storage_lost`: corruption, a full
        # disk), and who is told of it: its owner must stop, not retry as after a disk fault.
        self.fatal: BaseException | None = None
        self.on_fatal: Callable[[BaseException], None] | None = None
        # A full disk, for an owner that serves on (``full_disk_fatal`` False): why writes are
        # refused now (None: they are not).  A write that failed for want of room sets it, and so
        # does :meth:`check_room` when less than ``room_reserve`` bytes are free; it clears once
        # there is room again.
        self.room_reserve = room_reserve
        self.full_disk_fatal = full_disk_fatal
        self.no_room: str | None = None

    @property
    def deferred(self) -> bool:
        return self.kind == "file" and (self.schedule is not None or self.adaptive is not None)

    def file_store(self) -> FileStore:
        """The file store, opened (and so recovered) at first use after a crash."""
        if self._files is None:
            assert self.directory is not None
            try:
                store = FileStore(
                    os.path.abspath(os.fspath(self.directory)),
                    self.config,
                    fs=_Watched(self.disk, self._note_fatal),
                    deferred=self.deferred,
                    request_commit=self._request_commit,
                    max_journal_records=self.max_journal_records,
                    max_journal_bytes=self.max_journal_bytes,
                    adaptive=self.adaptive,
                )
            except LedgerCorrupted as exc:
                self._note_fatal(exc)
                raise
            except OSError as exc:
                # A disk error during recovery: what it had repaired may be in the page cache but not
                # durable, so the store is reopened only after a crash (a power cut, on the simulated
                # disk), from what is durable; the owner is told, as of any failed journal.
                self._store_failed(exc)
                raise LedgerWriteFailed(f"cannot recover the store {self.directory}: {exc}") from exc
            store.on_failure = self._store_failed
            store.on_corruption = self._note_fatal
            self.recoveries.append(store.recovery)
            self._files = store
        return self._files

    def _request_commit(self) -> None:
        store = self._files
        assert store is not None
        if self.schedule is not None:  # the adaptive commit schedules its own seals
            self.schedule(store.commit)
        if self.on_queue is not None:
            self.on_queue()

    @property
    def on_failure(self) -> Callable[[BaseException], None] | None:
        return self._on_failure

    @on_failure.setter
    def on_failure(self, listener: Callable[[BaseException], None] | None) -> None:
        self._on_failure = listener
        untold = self._untold_failure
        if listener is not None and untold is not None:
            self._untold_failure = None
            listener(untold)

    def _store_failed(self, error: BaseException) -> None:
        self._note_fatal(error)
        if self._on_failure is not None:
            self._on_failure(error)
        elif self._untold_failure is None:
            self._untold_failure = error

    def _note_fatal(self, error: BaseException) -> None:
        full = _no_room(error)
        if full is not None and not self.full_disk_fatal:
            self.no_room = f"a write failed for want of room: {full}"
            return
        if self.fatal is None and storage_lost(error) is not None:
            self.fatal = error
            if self.on_fatal is not None:
                self.on_fatal(error)

    def check_room(self) -> str | None:
        """Whether a file store has room to write: why writes are refused now, None while they are
        not.  Less than ``room_reserve`` bytes free refuses them (a checkpoint and the writes let
        through before still fit); once refused, they resume when the reserve is free again and a
        probe file can be written and synced (a quota the free space does not show)."""
        if self.kind != "file" or self.directory is None:
            return None
        directory = os.fspath(self.directory)
        free_bytes = getattr(self.disk, "free_bytes", None)
        try:
            free = free_bytes(directory) if callable(free_bytes) else None
        except OSError:
            free = None
        if free is not None and free < self.room_reserve:
            self.no_room = f"{free} bytes free in {directory}, fewer than the {self.room_reserve} kept free"
        elif self.no_room is not None and self._probe(directory):
            self.no_room = None
        return self.no_room

    def _probe(self, directory: str) -> bool:
        """Whether a small file can be written and synced in ``directory`` (and is removed after)."""
        path = os.path.join(directory, ".room-probe")
        try:
            fd = self.disk.open(path, create=True, truncate=True)
            try:
                self.disk.pwrite(fd, bytes(_PROBE_BYTES), 0)
                self.disk.sync(fd)
            finally:
                self.disk.close(fd)
            self.disk.unlink(path)
        except OSError:
            with contextlib.suppress(OSError):
                self.disk.unlink(path)
            return False
        return True

    def barrier(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once everything written so far is durable (at once unless deferred)."""
        if self._files is None or not self.deferred:
            callback()
        else:
            self._files.barrier(callback)

    def open(self, name: str, *, closes_on_write_failure: bool = False) -> ManagedLedger:
        """A new owner's handle on ``name`` (created empty if it never existed).

        ``closes_on_write_failure``: with injected append faults, a failed append leaves the ledger
        refusing appends (``ManagedLedgerAlreadyClosed``) until its owner rolls it over, as the
        record logs' users meet it in Pulsar (BW-26); without injected faults it changes nothing."""
        old = self._open.pop(name, None)
        if old is not None:
            old.close()
        ledger: ManagedLedger
        if self.kind == "memory":
            storage = self._memory.get(name)
            if storage is None:
                memory = MemoryLedger(name, self.config)
                self._memory[name] = memory.storage
                ledger = memory
            else:
                ledger = MemoryLedger(storage=storage)
        else:
            try:
                ledger = self.file_store().open_ledger(ledger_key(name), name=name)
            except LedgerCorrupted as exc:
                self._note_fatal(exc)
                raise
        self._open[name] = ledger
        if self.faults.append or self.faults.read:
            if self.rng is None:
                raise ValueError("injected ledger faults need the simulation's random source")
            faulty = FaultyLedger(
                ledger, rng=self.rng, on_inject=self._injected, roll_after_append_failure=closes_on_write_failure
            )
            if self.faults.append:
                faulty.fail_randomly(self.faults.append, ops={Op.APPEND})
            if self.faults.read:
                faulty.fail_randomly(self.faults.read, ops={Op.READ})
            self._faulty.append(faulty)
            return faulty
        return ledger

    def _injected(self, fault: InjectedFault) -> None:
        if self.on_fault is not None:
            self.on_fault(fault)

    def exists(self, name: str) -> bool:
        """Whether a managed ledger ``name`` was ever created (Pulsar's ledger-exists check)."""
        if self.kind == "memory":
            return name in self._memory
        return self.file_store().exists(ledger_key(name))

    def delete(self, name: str) -> None:
        """Delete the managed ledger ``name`` for good (missing is fine), as a BookKeeper client
        deletes a bucket snapshot's ledger.  In a file store the deletion is a journal record made
        durable at once, then the directory is renamed out of the way (the store's directory
        synced) and removed: a crash mid-way leaves the whole ledger (if the record was lost) or a
        tombstone the next open removes, never a half-deleted ledger."""
        handle = self._open.pop(name, None)
        if handle is not None:
            handle.close()
        if self.kind == "memory":
            self._memory.pop(name, None)
            return
        self.file_store().drop(ledger_key(name))

    def set_faults(self, enabled: bool) -> None:
        """Suspend or resume injected faults (a run heals before its final checks)."""
        for faulty in self._faulty:
            if not enabled:
                faulty.clear()
        if enabled and not self._enabled:
            raise ValueError("faults cannot be re-enabled on open handles; open the ledgers again")
        self._enabled = enabled
        if not enabled:
            self.faults = LedgerFaults()

    def close_all(self) -> None:
        """A crash: every handle goes away.  In a file store nothing more is written or synced
        (what waited for the journal is lost), and on the simulated disk the power goes; the next
        open recovers the store from its journal."""
        self._open.clear()
        self._faulty.clear()
        if self.kind == "memory":
            return
        # A failure nobody was told of is moot: the store it failed is gone, reopened from the journal.
        self._untold_failure = None
        if self._files is not None:
            self._files.crash()
            self._retire(self._files)
            self._files = None
        power_cut = getattr(self.disk, "power_cut", None)
        if callable(power_cut):
            cut = power_cut()
            self.power_cuts += 1
            self.power_cut_bytes_lost += getattr(cut, "bytes_lost", 0)

    def close(self) -> None:
        """Shut down cleanly: every handle closed, the file store checkpointed and released."""
        for ledger in self._open.values():
            ledger.close()
        self._open.clear()
        self._faulty.clear()
        if self._files is not None:
            self._files.close()
            self._retire(self._files)
            self._files = None

    def _retire(self, store: FileStore) -> None:
        store.stats.commits = store.journal.commits
        store.stats.records = store.journal.records_committed
        for item in fields(StoreStats):
            setattr(self._past, item.name, getattr(self._past, item.name) + getattr(store.stats, item.name))

    def journal_stats(self) -> dict[str, int]:
        """The file store's figures over this object's life (every recovery after a crash
        included): commits (syncs of the journal), records, checkpoints, recoveries, records
        replayed, ledgers rebuilt, torn journal bytes cut, records queued and lost at a crash,
        power cuts and the unsynced bytes they dropped or tore."""
        totals = StoreStats(**{f.name: getattr(self._past, f.name) for f in fields(StoreStats)})
        if self._files is not None:
            live = self._files
            totals.commits += live.journal.commits
            totals.records += live.journal.records_committed
            for name in ("checkpoints", "recoveries", "replayed", "rebuilt", "torn_bytes", "queued_lost"):
                setattr(totals, name, getattr(totals, name) + getattr(live.stats, name))
        return {
            **{f.name: getattr(totals, f.name) for f in fields(StoreStats)},
            "power_cuts": self.power_cuts,
            "power_cut_bytes_lost": self.power_cut_bytes_lost,
        }


# A full disk, a quota or a file-size limit: the store cannot go on, whatever is retried.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


_PROBE_BYTES = 4096


def _no_room(error: BaseException) -> OSError | None:
    """The OSError of a full disk (ENOSPC, EDQUOT, EFBIG) ``error`` is or was raised from, if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL:
            return current
        current = current.__cause__ or current.__context__
    return None


def storage_lost(error: BaseException) -> str | None:
    """Why ``error`` (or an error it was raised from) loses the store for good, or None when it is
    a fault the store recovers from (an EIO the simulated disk injects, a failed write the fault
    mix draws).  Corruption (:class:`LedgerCorrupted`: what is durable is not what was written) and
    a full disk (ENOSPC, EDQUOT, EFBIG: every write after it fails too) are such errors: a run must
    stop on them, with what it recorded kept, instead of counting them as ledger errors."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, LedgerCorrupted):
            return f"corrupted ledger data: {current}"
        if isinstance(current, OSError) and current.errno in _FULL:
            return f"no room to write (a full disk, a quota or a file-size limit): {current}"
        current = current.__cause__ or current.__context__
    return None


class _Watched:
    """The store's file system, every call passed on; an error that loses the store for good
    (:func:`storage_lost`: a full disk) is told to ``lost`` before it is raised, wherever the
    store then handles it (a failed append is otherwise reverted and reported as a ledger error)."""

    def __init__(self, fs: FileSystem, lost: Callable[[BaseException], None]) -> None:
        self._fs = fs
        self._lost = lost

    def _call(self, call: Callable[[], _T]) -> _T:
        try:
            return call()
        except OSError as exc:
            if exc.errno in _FULL:
                self._lost(exc)
            raise

    def makedirs(self, path: str) -> None:
        self._call(lambda: self._fs.makedirs(path))

    def listdir(self, path: str) -> list[str]:
        return self._call(lambda: self._fs.listdir(path))

    def exists(self, path: str) -> bool:
        return self._fs.exists(path)

    def is_dir(self, path: str) -> bool:
        return self._fs.is_dir(path)

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> int:
        return self._call(lambda: self._fs.open(path, create=create, truncate=truncate))

    def close(self, fd: int) -> None:
        self._call(lambda: self._fs.close(fd))

    def size(self, fd: int) -> int:
        return self._call(lambda: self._fs.size(fd))

    def pread(self, fd: int, size: int, offset: int) -> bytes:  # hot: no closure
        try:
            return self._fs.pread(fd, size, offset)
        except OSError as exc:
            if exc.errno in _FULL:
                self._lost(exc)
            raise

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:  # hot: no closure
        try:
            self._fs.pwrite(fd, data, offset)
        except OSError as exc:
            if exc.errno in _FULL:
                self._lost(exc)
            raise

    def truncate(self, fd: int, length: int) -> None:
        self._call(lambda: self._fs.truncate(fd, length))

    def sync(self, fd: int) -> None:  # hot: no closure
        try:
            self._fs.sync(fd)
        except OSError as exc:
            if exc.errno in _FULL:
                self._lost(exc)
            raise

    def sync_dir(self, path: str) -> None:
        self._call(lambda: self._fs.sync_dir(path))

    def rename(self, src: str, dst: str) -> None:
        self._call(lambda: self._fs.rename(src, dst))

    def unlink(self, path: str) -> None:
        self._call(lambda: self._fs.unlink(path))

    def rmtree(self, path: str) -> None:
        self._call(lambda: self._fs.rmtree(path))

    def lock(self, path: str) -> int:
        return self._call(lambda: self._fs.lock(path))

    def unlock(self, fd: int) -> None:
        self._call(lambda: self._fs.unlock(fd))
