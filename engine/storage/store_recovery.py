"""Recovery of a file store at open: every journal segment is checked
(:func:`~engine.storage.journal.scan_segment`), every managed ledger with records after its
checkpoint is planned (read-only, so damage anywhere is refused before anything is touched), then
rebuilt from them and checkpointed (:mod:`engine.storage.file_recovery`), deletions the journal
recorded are finished, and the journal starts a new segment with the old ones deleted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final

from engine.storage.disk import FileSystem
from engine.storage.file_recovery import RecoveryPlan, RecoveryReport, apply_recovery, plan_recovery
from engine.storage.journal import (
    Journal,
    RawRecord,
    RecordKind,
    group_by_key,
    parse_segment_file_name,
    read_segments,
)

__all__ = [
    "TOMBSTONE_SUFFIX",
    "RecoveredStore",
    "StoreRecovery",
    "delete_segments",
    "ledger_dir",
    "plan_for_key",
    "recover_store",
]

# A managed ledger being deleted: its directory renamed so, then removed (recovery finishes it).
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


@dataclass(frozen=True)
class RecoveredStore:
    """What recovery hands the store: its report, the ledgers it left exactly as checkpointed
    (so their next handle need not scan the files again), and what it repaired of each ledger
    (for that ledger's next handle to report)."""

    recovery: StoreRecovery
    plans: dict[str, RecoveryPlan]
    reports: dict[str, RecoveryReport]


def ledger_dir(root: str, key: str) -> str:
    """The directory of the managed ledger ``key`` ('.' is the root itself: a lone ledger)."""
    return root if key == "." else os.path.join(root, key)


def plan_for_key(fs: FileSystem, directory: str, records: list[RawRecord]) -> RecoveryPlan:
    """The read-only recovery plan of one managed ledger from its journal records (a leading
    DROP record: the ledger was being deleted)."""
    drop = records[0].lsn if records and records[0].kind is RecordKind.DROP else None
    rest = records[1:] if drop is not None else records
    return plan_recovery(fs, directory, rest, drop_lsn=drop)


def delete_segments(fs: FileSystem, root: str, seqs: Iterable[int], current: int) -> None:
    """Delete the journal segments ``seqs`` (never the ``current`` one), the root synced after."""
    doomed = [s for s in seqs if s != current]
    for name in fs.listdir(root):
        seq = parse_segment_file_name(name)
        if seq is not None and seq in doomed:
            fs.unlink(os.path.join(root, name))
    if doomed:
        fs.sync_dir(root)


def recover_store(fs: FileSystem, root: str, journal: Journal) -> RecoveredStore:
    """Recover the store under ``root`` (see the module docstring) and start ``journal``'s new
    segment.  Everything is checked before the first repair."""
    names = fs.listdir(root)
    scans = read_segments(fs, root, names)
    groups = group_by_key(scans)
    plans = [(key, plan_for_key(fs, ledger_dir(root, key), records)) for key, records in sorted(groups.items())]
    known: dict[str, RecoveryPlan] = {}
    reports: dict[str, RecoveryReport] = {}
    rebuilt, dropped, replayed = [], [], 0
    for key, plan in plans:
        meta, truncated = apply_recovery(fs, plan)
        if plan.stale or meta is None:
            dropped.append(key)
        else:
            known[key] = replace(plan, meta=meta, leftovers=[], replayed=0, last_lsn=meta.journal_lsn)
        if plan.replayed or truncated or plan.leftovers:
            rebuilt.append(key)
            reports[key] = RecoveryReport(truncated=truncated, removed=tuple(plan.leftovers), replayed=plan.replayed)
        replayed += plan.replayed
    for name in names:
        if name.endswith(TOMBSTONE_SUFFIX) and fs.is_dir(os.path.join(root, name)):
            fs.rmtree(os.path.join(root, name))
    live = [s for s in scans if s.valid_length]
    next_lsn = live[-1].next_lsn if live else 0
    next_seq = max((s.seq for s in scans), default=-1) + 1
    journal.start(next_seq, next_lsn)
    delete_segments(fs, root, (s.seq for s in scans), journal.seq)
    torn = tuple((s.file, s.valid_length, s.torn_bytes) for s in scans if s.torn_bytes)
    recovery = StoreRecovery(
        tuple(s.file for s in scans),
        sum(len(s.records) for s in scans),
        replayed,
        tuple(rebuilt),
        torn,
        tuple(dropped),
    )
    return RecoveredStore(recovery, known, reports)
