"""A store of file ledgers that commit through one journal: managed ledgers opened, found and
deleted by key.

The store's root holds the journal's segments and one directory per managed ledger::

    journal-00000000000000000003.log   the journal: every change of every ledger, in order
    LOCK                                flock()ed by the one process that owns the store
    <key>/                              a managed ledger (see engine.storage.file_ledger)
    <key>.deleted/                      a managed ledger being deleted (removed at open)

Every ledger handle the store opens writes its changes as journal records; the journal's group
commit (sync, deferred or adaptive), its checkpoints, the store's recovery at open and its crash
are :class:`~engine.storage.journal_store.JournalStore`'s, which a :class:`FileStore` is.
"""

from __future__ import annotations

import contextlib
import os

from engine.storage.file_format import METADATA_NAME
from engine.storage.file_ledger import FileLedger
from engine.storage.group_commit import AdaptiveCommit
from engine.storage.journal import RecordKind
from engine.storage.journal_store import STORE_LOCK_NAME, JournalStore, StoreStats
from engine.storage.ledger import LedgerWriteFailed
from engine.storage.store_recovery import TOMBSTONE_SUFFIX, StoreRecovery

__all__ = ["STORE_LOCK_NAME", "TOMBSTONE_SUFFIX", "AdaptiveCommit", "FileStore", "StoreRecovery", "StoreStats"]


class FileStore(JournalStore):
    """Managed ledgers under ``root`` sharing one journal, by key; see the module docstring and
    :class:`~engine.storage.journal_store.JournalStore` for the arguments."""

    def open_ledger(self, key: str, *, name: str | None = None, group_commit: bool = True) -> FileLedger:
        """A handle on the managed ledger ``key`` (created if missing), writing through this store."""
        with self.lock:
            self.check_usable()
            try:
                if key in self.crashed:
                    self.rebuild_crashed([key])
                return FileLedger(
                    self.dir_of(key), self.config, name=name, store=self, key=key, group_commit=group_commit
                )
            except OSError as exc:
                # What a failed write or sync left is unknown (in the page cache, not durable): the
                # store fails, and is reopened only after a crash, from what is durable.
                self.fail(exc)
                raise LedgerWriteFailed(f"cannot open managed ledger {key} of {self.root}: {exc}") from exc

    def exists(self, key: str) -> bool:
        return self.fs.exists(os.path.join(self.dir_of(key), METADATA_NAME))

    def drop(self, key: str) -> None:
        """Delete the managed ledger ``key`` for good (missing is fine): a DROP record made durable
        at once, then its directory renamed out of the way (the root synced) and removed."""
        with self.lock:
            self.check_usable()
            handle = self.handles.get(key)
            if handle is not None:
                self.close_ledger(key, handle)
            self.crashed.discard(key)
            self.take_plan(key)  # its files are about to go
            path = self.dir_of(key)
            if not self.fs.exists(path):
                return
            self.record(key, RecordKind.DROP, b"")
            self.flush()
            tombstone = path + TOMBSTONE_SUFFIX
            try:
                if self.fs.exists(tombstone):
                    self.fs.rmtree(tombstone)
                self.fs.rename(path, tombstone)
                self.fs.sync_dir(self.root)
            except OSError as exc:
                # The DROP record is durable: recovery finishes the deletion; until then the store
                # cannot say what is there, so it fails.
                self.fail(exc)
                raise LedgerWriteFailed(f"cannot delete {key} of {self.root}: {exc}") from exc
            with contextlib.suppress(OSError):
                self.fs.rmtree(tombstone)
