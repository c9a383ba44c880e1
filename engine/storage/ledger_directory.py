"""A file ledger's directory at open: found or made, locked, then created durably when nothing
durable names a ledger there, else recovered into the handle's ledger files; and the private store
a ledger opened on its own keeps in its directory.

Opening checks everything first, read-only (:func:`~engine.storage.file_recovery.plan_recovery`,
or the plan the store kept when it checkpointed the ledger itself), and only then repairs
(:func:`~engine.storage.file_recovery.apply_recovery`), so a
:class:`~engine.storage.file_format.LedgerCorrupted` leaves the directory exactly as it was found.
A creation is a checkpoint: the first ledger file, ``METADATA`` and the directory's own entry are
durable before the ledger opens.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import MappingProxyType

from engine.storage.disk import FileSystem, makedirs_durably
from engine.storage.file_format import (
    LEDGER_HEADER,
    LOCK_NAME,
    METADATA_NAME,
    LedgerRecord,
    Metadata,
    decode_metadata,
    encode_ledger_header,
    ledger_file_name,
)
from engine.storage.file_recovery import (
    RecoveryPlan,
    RecoveryReport,
    apply_recovery,
    plan_recovery,
    read_whole,
    write_metadata_file,
)
from engine.storage.journal_store import JournalStore
from engine.storage.ledger_files import LedgerFile, LedgerFiles
from spec.config import Config

__all__ = ["OpenedDirectory", "check_name", "create_ledger", "lock_directory", "open_directory", "private_store"]


def check_name(fs: FileSystem, directory: str, name: str) -> None:
    """Refuse a directory whose ``METADATA`` names another managed ledger (ValueError)."""
    path = os.path.join(directory, METADATA_NAME)
    if fs.exists(path):
        found = decode_metadata(read_whole(fs, path), file=path).name
        if found != name:
            raise ValueError(f"{directory} holds managed ledger {found!r}, not {name!r}")


def private_store(
    fs: FileSystem,
    directory: str,
    config: Config,
    name: str | None,
    *,
    max_journal_records: int,
    max_journal_bytes: int,
) -> JournalStore:
    """The store of a ledger opened on its own: its journal in the ledger's own directory, which
    the ledger locks itself.  A wrong ``name`` is refused before the store's recovery touches
    anything."""
    if name is not None:
        check_name(fs, directory, name)
    return JournalStore(
        directory,
        config,
        fs=fs,
        lock_store=False,
        max_journal_records=max_journal_records,
        max_journal_bytes=max_journal_bytes,
    )


def lock_directory(fs: FileSystem, directory: str) -> int:
    """Make ``directory`` if it is missing and take its ``LOCK``; returns the lock's descriptor."""
    if not fs.exists(directory):
        # The directory's own entry is synced by the creation (a directory without METADATA
        # holds nothing that was acknowledged); its parents' entries now.
        makedirs_durably(fs, os.path.dirname(directory))
        fs.makedirs(directory)
    return fs.lock(os.path.join(directory, LOCK_NAME))


@dataclass(frozen=True)
class OpenedDirectory:
    """A locked directory, opened: its metadata, what was repaired, and whether it was created."""

    meta: Metadata
    report: RecoveryReport
    created: bool


def open_directory(
    fs: FileSystem,
    directory: str,
    store: JournalStore,
    key: str,
    files: LedgerFiles,
    name: str | None,
    first_ledger_id: int,
) -> OpenedDirectory:
    """Open the locked ``directory`` of ``key`` in ``store``: created if nothing durable names a
    ledger there, else recovered; every ledger file it holds joins ``files``."""
    earlier = store.take_rebuild_report(key)
    # A ledger this store checkpointed itself (closed, or rebuilt at its recovery) is known
    # exactly; anything else is checked from disk.
    known = store.take_plan(key)
    if known is not None and name is not None and known.meta is not None and known.meta.name != name:
        known = None
    plan = known if known is not None else plan_recovery(fs, directory, (), name=name)
    if plan.meta is None:
        meta = create_ledger(fs, directory, plan, store, key, files, name, first_ledger_id)
        report = RecoveryReport(created=True, removed=tuple(plan.leftovers), replayed=earlier.replayed)
        return OpenedDirectory(meta, report, created=True)
    recovered, truncated = apply_recovery(fs, plan)
    assert recovered is not None
    if store.first_open(key):
        # Its directory and the directory's entry must be durable before any record of it is
        # (a creation that failed after METADATA, before its syncs, left them unsynced).
        fs.sync_dir(directory)
        fs.sync_dir(os.path.dirname(directory))
    for file_plan in plan.files.values():
        files.add(LedgerFile.recovered(file_plan))
    report = RecoveryReport(
        truncated=earlier.truncated + truncated,
        removed=earlier.removed + tuple(plan.leftovers),
        replayed=earlier.replayed + plan.replayed,
    )
    return OpenedDirectory(recovered, report, created=False)


def create_ledger(
    fs: FileSystem,
    directory: str,
    plan: RecoveryPlan,
    store: JournalStore,
    key: str,
    files: LedgerFiles,
    name: str | None,
    first_ledger_id: int,
) -> Metadata:
    """A new managed ledger, created durably (its creation is a checkpoint): leftovers gone,
    the first ledger file synced, METADATA committed, the directory's own entry synced."""
    # Everything queued before is made durable first, so the store's journal order stays the
    # order of its changes: no power cut keeps this ledger and loses a change made before it.
    store.flush()
    apply_recovery(fs, plan)
    path = os.path.join(directory, ledger_file_name(first_ledger_id))
    fd = fs.open(path, create=True, truncate=True)
    files.add(LedgerFile(first_ledger_id, path, fd))
    fs.pwrite(fd, encode_ledger_header(first_ledger_id), 0)
    fs.sync(fd)
    # The file's name is durable before the METADATA naming it can be (a power cut may keep a
    # later directory operation, the rename, and lose an earlier one).
    fs.sync_dir(directory)
    meta = Metadata(
        name or os.path.basename(directory),
        0,
        first_ledger_id + 1,
        (LedgerRecord(first_ledger_id),),
        MappingProxyType({}),
        MappingProxyType({}),
        journal_lsn=store.journal.durable_lsn,
        open_synced=(0, LEDGER_HEADER.size),
    )
    write_metadata_file(fs, directory, meta)
    fs.sync_dir(os.path.dirname(directory))
    store.first_open(key)
    return meta
