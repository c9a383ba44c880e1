"""The managed-ledger contract, run against every implementation.

Each test takes a ``harness`` that makes a ledger with a given config and reopens it the way a
new owner would (a broker restart: the old handle is gone, a new ledger is opened, everything
durable is still there).  The same assertions hold for the in-memory and the file ledger.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from engine.simulated.disk import SimDisk
from engine.simulated.faults import FaultyLedger, Op
from engine.storage.file_ledger import FileLedger, OsFileSystem
from engine.storage.file_store import FileStore
from engine.storage.ledger import (
    InitialPosition,
    InvalidCursorPosition,
    LedgerClosed,
    LedgerError,
    LedgerFenced,
    LedgerWriteFailed,
    ManagedCursor,
    ManagedLedger,
    NoSuchEntry,
)
from engine.storage.memory_ledger import MemoryLedger
from reference.ledger import MB
from spec.config import Config
from spec.errors import ManagedLedgerAlreadyClosed, ManagedLedgerFenced, PersistenceError
from spec.types import LedgerInfo, Position, bits_to_words, previous_position

P = Position


@dataclass
class Harness:
    kind: str
    make: Callable[[Config], ManagedLedger]
    reopen: Callable[[ManagedLedger], ManagedLedger]


def _memory_harness(_tmp: Path) -> Harness:
    def reopen(ml: ManagedLedger) -> ManagedLedger:
        assert isinstance(ml, MemoryLedger)
        return ml.reopen()

    return Harness("memory", lambda config: MemoryLedger("topic", config), reopen)


def _file_harness(tmp: Path, *, group_commit: bool = False) -> Harness:
    directory = tmp / "ml"
    configs: list[Config] = []

    def make(config: Config) -> ManagedLedger:
        configs.append(config)
        return FileLedger(directory, config, name="topic", group_commit=group_commit)

    def reopen(ml: ManagedLedger) -> ManagedLedger:
        ml.close()
        return FileLedger(directory, configs[-1], group_commit=group_commit)

    return Harness("file-group-commit" if group_commit else "file", make, reopen)


def _killed_file_harness(tmp: Path) -> Harness:
    # Reopened after the process was killed (no close, so no checkpoint: recovery replays the
    # journal), with journal segments so small that changes keep crossing checkpoints.
    directory = tmp / "ml"
    configs: list[Config] = []

    def make(config: Config) -> ManagedLedger:
        configs.append(config)
        return FileLedger(directory, config, name="topic", max_journal_records=2)

    def reopen(ml: ManagedLedger) -> ManagedLedger:
        assert isinstance(ml, FileLedger)
        ml.crash()
        return FileLedger(directory, configs[-1], max_journal_records=2)

    return Harness("file-killed-tiny-journal", make, reopen)


def _store_harness(tmp: Path, *, disk: str, deferred: bool = False) -> Harness:
    # A managed ledger of a file store (one journal for many ledgers), on the real disk (reopened
    # after a clean close) or on the simulated one (reopened after a power cut; in the deferred
    # mode the journal is committed first, as the simulator's answers wait for it).
    fs = SimDisk(seed=7) if disk == "sim" else OsFileSystem()
    root = "/data/store" if disk == "sim" else str(tmp / "store")
    stores: list[FileStore] = []

    def make(config: Config) -> ManagedLedger:
        stores.append(FileStore(root, config, fs=fs, deferred=deferred))
        return stores[-1].open_ledger("topic", name="topic")

    def reopen(ml: ManagedLedger) -> ManagedLedger:
        store = stores[-1]
        if disk == "sim":
            store.commit()
            store.crash()
            assert isinstance(fs, SimDisk)
            fs.power_cut()
        else:
            ml.close()
            store.close()
        stores.append(FileStore(root, store.config, fs=fs, deferred=deferred))
        return stores[-1].open_ledger("topic")

    name = f"store-{disk}" + ("-deferred" if deferred else "")
    return Harness(name, make, reopen)


def _faulty_memory_harness(_tmp: Path) -> Harness:
    # A fault wrapper with no rules is a transparent ledger: it must pass the whole contract.
    def reopen(ml: ManagedLedger) -> ManagedLedger:
        assert isinstance(ml, FaultyLedger) and isinstance(ml.inner, MemoryLedger)
        return FaultyLedger(ml.inner.reopen())

    return Harness("faulty-memory", lambda config: FaultyLedger(MemoryLedger("topic", config)), reopen)


HARNESSES = {
    "memory": _memory_harness,
    "file": _file_harness,
    "file-group-commit": partial(_file_harness, group_commit=True),
    "file-killed-tiny-journal": _killed_file_harness,
    "store-real": partial(_store_harness, disk="real"),
    "store-sim-power-cut": partial(_store_harness, disk="sim"),
    "store-sim-deferred-power-cut": partial(_store_harness, disk="sim", deferred=True),
    "faulty-memory": _faulty_memory_harness,
}


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    yield HARNESSES[request.param](tmp_path)


def entries_per_ledger(n: int) -> Config:
    return Config().with_overrides({"managedLedgerMaxEntriesPerLedger": n})


def fill(ml: ManagedLedger, n: int, prefix: str = "m") -> list[Position]:
    return [ml.append(f"{prefix}{i}".encode()) for i in range(n)]


# -- entries ---------------------------------------------------------------------------------------


def test_append_returns_consecutive_positions_and_reads_back(harness: Harness) -> None:
    ml = harness.make(Config())
    assert isinstance(ml, ManagedLedger)
    first = ml.last_confirmed()
    assert first.entry_id == -1
    positions = fill(ml, 5)
    assert positions == [P(first.ledger_id, i) for i in range(5)]
    assert [ml.read_entry(p) for p in positions] == [f"m{i}".encode() for i in range(5)]
    assert ml.last_confirmed() == positions[-1]


def test_empty_and_binary_payloads_round_trip(harness: Harness) -> None:
    ml = harness.make(Config())
    payloads = [b"", b"\x00" * 7, bytes(range(256)), b"\x0e\x01\x00\x01"]
    positions = [ml.append(p) for p in payloads]
    assert [e.data for e in ml.read(positions[0], 10)] == payloads


def test_read_ranges_cross_ledger_boundaries(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(3))
    positions = fill(ml, 8)
    assert [p.ledger_id for p in positions] == [0, 0, 0, 1, 1, 1, 2, 2]
    window = ml.read(P(0, 1), 4)
    assert [e.position for e in window] == [P(0, 1), P(0, 2), P(1, 0), P(1, 1)]
    assert [e.data for e in window] == [b"m1", b"m2", b"m3", b"m4"]
    assert [e.position for e in ml.read(P(1, -1), 100)] == positions[3:]
    assert ml.read(P(2, 2), 10) == []
    assert ml.read(P(0, 0), 0) == []
    with pytest.raises(ValueError):
        ml.read(P(0, 0), -1)


def test_read_of_a_missing_position_is_no_such_entry(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(2))
    fill(ml, 3)
    for missing in (P(0, 2), P(1, 1), P(7, 0), P(0, -1)):
        with pytest.raises(NoSuchEntry):
            ml.read_entry(missing)


# -- roll-over and the last confirmed entry ---------------------------------------------------------


def test_roll_over_by_entries(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(2))
    positions = fill(ml, 5)
    assert positions == [P(0, 0), P(0, 1), P(1, 0), P(1, 1), P(2, 0)]
    assert ml.ledgers() == (LedgerInfo(0, 2), LedgerInfo(1, 2), LedgerInfo(2, 1))


def test_roll_over_by_bytes(harness: Harness) -> None:
    # Pulsar's currentLedgerIsFull: the ledger is full once its payload bytes reach the limit.
    ml = harness.make(Config().with_overrides({"managedLedgerMaxSizePerLedgerMbytes": 1}))
    chunk = b"x" * (MB // 3 + 1)
    positions = [ml.append(chunk) for _ in range(4)]
    assert positions == [P(0, 0), P(0, 1), P(0, 2), P(1, 0)]
    assert ml.read_entry(P(0, 2)) == chunk


def test_last_confirmed_of_an_empty_current_ledger(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(2))
    assert ml.last_confirmed() == P(0, -1)
    fill(ml, 2)  # fills ledger 0, which rolls over at once
    assert ml.last_confirmed() == P(1, -1)
    ml.append(b"a")
    assert ml.last_confirmed() == P(1, 0)
    ml.roll_over()
    assert ml.last_confirmed() == P(2, -1)
    assert ml.ledgers()[-1] == LedgerInfo(2, 0)


def test_previous_position_skips_empty_ledgers(harness: Harness) -> None:
    ml = harness.make(Config())
    fill(ml, 3)
    ml.roll_over()  # ledger 1 stays empty
    ml.roll_over()
    first_of_2 = ml.append(b"x")
    assert first_of_2 == P(2, 0)
    ledgers = ml.ledgers()
    assert ledgers == (LedgerInfo(0, 3), LedgerInfo(1, 0), LedgerInfo(2, 1))
    assert previous_position(first_of_2, ledgers) == P(0, 2)
    assert previous_position(ml.last_confirmed(), ledgers) == P(0, 2)


# -- deletion of consumed ledgers ------------------------------------------------------------------


def test_ledgers_are_deleted_only_once_every_cursor_is_past_them(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(2))
    fast = ml.open_cursor("fast", InitialPosition.EARLIEST)
    slow = ml.open_cursor("slow", InitialPosition.EARLIEST)
    fill(ml, 5)  # ledgers 0:[0,1] 1:[0,1] 2:[0]
    fast.mark_delete(P(2, 0))
    slow.mark_delete(P(0, 0))
    assert ml.delete_consumed_ledgers() == ()
    slow.mark_delete(P(0, 1))
    assert ml.delete_consumed_ledgers() == (0,)
    slow.mark_delete(P(2, 0))
    # Ledger 2 is the current ledger and is never deleted, even when fully consumed.
    assert ml.delete_consumed_ledgers() == (1,)
    assert [i.ledger_id for i in ml.ledgers()] == [2]
    with pytest.raises(NoSuchEntry):
        ml.read_entry(P(0, 0))
    assert [e.position for e in ml.read(P(0, 0), 10)] == [P(2, 0)]
    assert previous_position(P(2, 0), ml.ledgers()) == P(2, -1)


def test_an_individually_deleted_tail_does_not_free_a_ledger(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(2))
    sub = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 3)
    sub.delete([P(0, 1)])
    assert sub.mark_delete_position == P(0, -1)
    assert ml.delete_consumed_ledgers() == ()


def test_without_cursors_every_closed_ledger_is_consumed(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(1))
    fill(ml, 3)
    assert ml.delete_consumed_ledgers() == (0, 1, 2)
    assert ml.ledgers() == (LedgerInfo(3, 0),)
    assert ml.last_confirmed() == P(3, -1)


def test_deletion_can_stop_at_a_ledger(harness: Harness) -> None:
    """``up_to``: the owner (the transaction buffer, TB-23) may keep consumed ledgers above a bound."""
    ml = harness.make(entries_per_ledger(1))
    fill(ml, 4)
    assert ml.delete_consumed_ledgers(up_to=-1) == ()
    assert ml.delete_consumed_ledgers(up_to=1) == (0, 1)
    assert [i.ledger_id for i in ml.ledgers()] == [2, 3, 4]
    assert ml.delete_consumed_ledgers(up_to=100) == (2, 3)
    assert ml.ledgers() == (LedgerInfo(4, 0),)


def test_a_deleted_cursor_no_longer_holds_ledgers(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(1))
    ml.open_cursor("gone", InitialPosition.EARLIEST)
    fill(ml, 2)
    assert ml.delete_consumed_ledgers() == ()
    ml.delete_cursor("gone")
    assert ml.cursors() == ()
    assert ml.delete_consumed_ledgers() == (0, 1)


# -- properties ------------------------------------------------------------------------------------


def test_ledger_properties(harness: Harness) -> None:
    ml = harness.make(Config())
    assert dict(ml.properties) == {}
    ml.set_property("max_local_txn_id", "17")
    ml.set_property("other", "x")
    ml.set_property("max_local_txn_id", "18")
    ml.remove_property("other")
    ml.remove_property("never-set")
    assert dict(ml.properties) == {"max_local_txn_id": "18"}
    with pytest.raises(TypeError):
        ml.set_property("n", 5)  # type: ignore[arg-type]


def test_cursor_properties(harness: Harness) -> None:
    ml = harness.make(Config())
    cursor = ml.open_cursor("bucket-sub")
    cursor.set_property("#pulsar.internal.delayed.bucket_1_5", "7")
    cursor.set_property("keep", "yes")
    cursor.remove_property("#pulsar.internal.delayed.bucket_1_5")
    assert dict(cursor.properties) == {"keep": "yes"}
    assert dict(ml.open_cursor("other").properties) == {}


# -- cursors ---------------------------------------------------------------------------------------


def test_open_cursor_latest_earliest_and_existing(harness: Harness) -> None:
    ml = harness.make(Config())
    fill(ml, 3)
    latest = ml.open_cursor("latest")
    earliest = ml.open_cursor("earliest", InitialPosition.EARLIEST)
    assert isinstance(latest, ManagedCursor)
    assert latest.mark_delete_position == P(0, 2)
    assert earliest.mark_delete_position == P(0, -1)
    assert not earliest.is_deleted(P(0, 0))
    latest.mark_delete(P(0, 2))
    again = ml.open_cursor("earliest", InitialPosition.LATEST)
    assert again.mark_delete_position == P(0, -1)
    assert [c.name for c in ml.cursors()] == ["earliest", "latest"]


def test_mark_delete_never_moves_backwards(harness: Harness) -> None:
    ml = harness.make(Config())
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 4)
    cursor.mark_delete(P(0, 2))
    cursor.mark_delete(P(0, 1))
    assert cursor.mark_delete_position == P(0, 2)
    assert cursor.is_deleted(P(0, 0)) and cursor.is_deleted(P(0, 2))
    assert not cursor.is_deleted(P(0, 3))


def test_positions_never_written_are_rejected(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(2))
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 3)  # 0:[0,1] 1:[0]
    for bad in (P(1, 1), P(5, 0), P(0, 2)):
        with pytest.raises(InvalidCursorPosition):
            cursor.mark_delete(bad)
        with pytest.raises(InvalidCursorPosition):
            cursor.delete([bad])
    # A rejected request applies nothing, not even its valid part.
    with pytest.raises(InvalidCursorPosition):
        cursor.delete([P(0, 0), P(9, 9)])
    assert cursor.mark_delete_position == P(0, -1)
    assert cursor.individually_deleted() == ()


def test_individual_deletes_advance_mark_delete_when_contiguous(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(2))
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 2)  # ledger 0 full
    ml.roll_over()  # ledger 1 empty, rolled by hand: 2 is current
    fill(ml, 2, "n")  # ledger 2 full, 3 current
    cursor.delete([P(0, 1), P(2, 1)])
    assert cursor.mark_delete_position == P(0, -1)
    assert cursor.individually_deleted() == (P(0, 1), P(2, 1))
    assert cursor.is_deleted(P(2, 1)) and not cursor.is_deleted(P(2, 0))
    cursor.delete([P(2, 0)])
    assert cursor.mark_delete_position == P(0, -1)
    # Deleting 0:0 makes 0:0..2:1 contiguous across the empty ledger 1.
    cursor.delete([P(0, 0)])
    assert cursor.mark_delete_position == P(2, 1)
    assert cursor.individually_deleted() == ()


def test_deleting_an_already_deleted_position_changes_nothing(harness: Harness) -> None:
    ml = harness.make(Config())
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 4)
    cursor.mark_delete(P(0, 1))
    cursor.delete([P(0, 0), P(0, 3)])
    cursor.delete([P(0, 3)])
    assert cursor.mark_delete_position == P(0, 1)
    assert cursor.individually_deleted() == (P(0, 3),)


def test_batch_ack_sets_are_anded_and_clear_to_a_whole_entry_delete(harness: Harness) -> None:
    ml = harness.make(Config())
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 2)
    entry = P(0, 0)
    # A batch of 4: ack index 1, then index 3 (bit set = still present).
    cursor.delete([entry], {entry: bits_to_words(0b1101)})
    assert cursor.batch_ack_set(entry) == bits_to_words(0b1101)
    cursor.delete([entry], {entry: bits_to_words(0b0111)})
    assert cursor.batch_ack_set(entry) == bits_to_words(0b0101)
    assert not cursor.is_deleted(entry)
    assert cursor.batch_ack_set(P(0, 1)) is None
    cursor.delete([entry], {entry: bits_to_words(0b1010)})
    assert cursor.batch_ack_set(entry) is None
    assert cursor.is_deleted(entry)
    assert cursor.mark_delete_position == entry


def test_batch_ack_sets_span_several_words(harness: Harness) -> None:
    ml = harness.make(Config())
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 2)
    entry = P(0, 1)
    full = (1 << 100) - 1
    cursor.delete([entry], {entry: bits_to_words(full & ~(1 << 70))})
    cursor.delete([entry], {entry: bits_to_words(full & ~(1 << 63))})
    assert cursor.batch_ack_set(entry) == bits_to_words(full & ~(1 << 70) & ~(1 << 63))
    cursor.delete([entry])  # a whole-entry delete drops the ack set
    assert cursor.batch_ack_set(entry) is None
    assert cursor.individually_deleted() == (entry,)


def test_ack_set_for_a_position_not_deleted_is_a_programming_error(harness: Harness) -> None:
    ml = harness.make(Config())
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 2)
    with pytest.raises(ValueError):
        cursor.delete([P(0, 0)], {P(0, 1): (1,)})


def test_mark_delete_drops_individual_deletes_and_ack_sets_below_it(harness: Harness) -> None:
    ml = harness.make(Config())
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 6)
    cursor.delete([P(0, 2), P(0, 5)])
    cursor.delete([P(0, 3)], {P(0, 3): (0b10,)})
    cursor.mark_delete(P(0, 3))
    assert cursor.mark_delete_position == P(0, 3)
    assert cursor.individually_deleted() == (P(0, 5),)
    assert cursor.batch_ack_set(P(0, 3)) is None
    cursor.mark_delete(P(0, 4))
    assert cursor.mark_delete_position == P(0, 5)
    assert cursor.individually_deleted() == ()


# -- reset (seek, PA-22) ---------------------------------------------------------------------------


def test_reset_rewinds_the_mark_delete_position_and_forgets_deletes(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(3))
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 7)  # 0:[0..2] 1:[0..2] 2:[0]
    cursor.mark_delete(P(1, 0))
    cursor.delete([P(1, 2)])
    cursor.delete([P(2, 0)], {P(2, 0): bits_to_words(0b1011)})
    cursor.set_property("k", "v")
    cursor.reset(P(0, 2))
    assert cursor.mark_delete_position == P(0, 1)
    assert cursor.individually_deleted() == ()
    assert cursor.batch_ack_set(P(2, 0)) is None
    assert dict(cursor.properties) == {"k": "v"}
    # Across a ledger boundary: the entry before the first entry of ledger 1 is ledger 0's last.
    cursor.reset(P(1, 0))
    assert cursor.mark_delete_position == P(0, 2)
    # Forward (skip) works too, and the durable state is what a new owner sees.
    cursor.reset(P(2, 0), bits_to_words(0b0110))
    reopened = harness.reopen(ml)
    again = reopened.open_cursor("sub")
    assert again.mark_delete_position == P(1, 2)
    assert again.batch_ack_set(P(2, 0)) == bits_to_words(0b0110)
    assert again.individually_deleted() == ()
    # After a reset the usual rules apply again.
    again.delete([P(2, 0)])
    assert again.mark_delete_position == P(2, 0)


def test_reset_to_earliest_latest_and_positions_that_name_no_entry(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(2))
    cursor = ml.open_cursor("sub")
    other = ml.open_cursor("other", InitialPosition.EARLIEST)
    fill(ml, 5)  # 0:[0,1] 1:[0,1] 2:[0]
    cursor.mark_delete(P(2, 0))
    other.mark_delete(P(1, 1))
    assert ml.delete_consumed_ledgers() == (0, 1)
    # Before the first live entry (EARLIEST, or a deleted ledger): just before the first live entry.
    cursor.reset(P(-1, -1))
    assert cursor.mark_delete_position == P(2, -1)
    cursor.reset(P(0, 1))
    assert cursor.mark_delete_position == P(2, -1)
    # Past the end of a closed ledger: the next live entry; past the last entry: the last entry.
    ml.append(b"x")
    ml.append(b"y")  # 2:[0,1] 3:[0,1]
    cursor.reset(P(2, 5))
    assert cursor.mark_delete_position == P(2, 1)
    cursor.reset(P((1 << 63) - 1, (1 << 63) - 1))
    assert cursor.mark_delete_position == ml.last_confirmed()
    # A reset never frees a ledger by itself, and a rewound cursor holds ledgers back again.
    cursor.reset(P(2, 0))
    other.mark_delete(ml.last_confirmed())
    assert ml.delete_consumed_ledgers() == ()


# -- lifecycle -------------------------------------------------------------------------------------


def test_reopen_preserves_everything(harness: Harness) -> None:
    ml = harness.make(entries_per_ledger(3))
    sub = ml.open_cursor("sub", InitialPosition.EARLIEST)
    other = ml.open_cursor("other")
    positions = fill(ml, 7)  # 0:[0..2] 1:[0..2] 2:[0]
    sub.mark_delete(P(0, 1))
    sub.delete([P(1, 0), P(1, 2)])
    sub.delete([P(2, 0)], {P(2, 0): bits_to_words(0b1011)})
    sub.set_property("k", "v")
    other.mark_delete(P(1, 1))
    ml.set_property("max_local_txn_id", "42")
    assert ml.delete_consumed_ledgers() == ()
    before = {c.name: (c.mark_delete_position, c.individually_deleted(), dict(c.properties)) for c in ml.cursors()}

    reopened = harness.reopen(ml)
    # The new owner writes to a new ledger; everything written before is still readable.
    assert [e.data for e in reopened.read(P(0, 0), 100)] == [f"m{i}".encode() for i in range(7)]
    assert [e.position for e in reopened.read(P(0, 0), 100)] == positions
    assert reopened.ledgers()[:3] == (LedgerInfo(0, 3), LedgerInfo(1, 3), LedgerInfo(2, 1))
    assert reopened.last_confirmed() == P(reopened.ledgers()[-1].ledger_id, -1)
    assert reopened.ledgers()[-1].ledger_id > 2
    assert dict(reopened.properties) == {"max_local_txn_id": "42"}
    after = {c.name: (c.mark_delete_position, c.individually_deleted(), dict(c.properties)) for c in reopened.cursors()}
    assert after == before
    cursor = reopened.open_cursor("sub")
    assert cursor.batch_ack_set(P(2, 0)) == bits_to_words(0b1011)
    assert reopened.append(b"after") == P(reopened.ledgers()[-1].ledger_id, 0)
    # And again, with the new state.
    cursor.mark_delete(P(2, 0))
    reopened.open_cursor("other").mark_delete(P(2, 0))
    assert reopened.delete_consumed_ledgers() == (0, 1, 2)
    third = harness.reopen(reopened)
    assert [e.data for e in third.read(P(0, 0), 100)] == [b"after"]
    assert third.open_cursor("sub").mark_delete_position == P(2, 0)


def test_a_closed_handle_refuses_everything(harness: Harness) -> None:
    ml = harness.make(Config())
    cursor = ml.open_cursor("sub")
    ml.append(b"a")
    ml.close()
    ml.close()  # idempotent
    for operation in (
        lambda: ml.append(b"b"),
        lambda: ml.read(P(0, 0), 1),
        lambda: ml.read_entry(P(0, 0)),
        ml.last_confirmed,
        ml.ledgers,
        ml.roll_over,
        ml.delete_consumed_ledgers,
        lambda: ml.set_property("a", "b"),
        lambda: ml.open_cursor("x"),
        lambda: cursor.mark_delete(P(0, 0)),
    ):
        with pytest.raises(LedgerClosed):
            operation()
    assert LedgerClosed("x").domain_error() == ManagedLedgerAlreadyClosed("x")


def test_errors_map_to_pulsar_domain_errors() -> None:
    assert LedgerFenced("f").domain_error() == ManagedLedgerFenced("f")
    assert NoSuchEntry("n").domain_error() == PersistenceError("n")
    assert isinstance(InvalidCursorPosition("i"), LedgerError)


def test_memory_reopen_fences_the_previous_owner() -> None:
    ml = MemoryLedger("topic")
    ml.append(b"a")
    new = ml.reopen()
    with pytest.raises(LedgerFenced):
        ml.append(b"b")
    assert new.append(b"c") == P(1, 0)


# -- the fault wrapper ------------------------------------------------------------------------------


def test_fault_wrapper_fails_the_next_appends_before_they_happen() -> None:
    ml = FaultyLedger(MemoryLedger("topic"))
    ml.append(b"a")
    ml.fail_appends(2)
    for _ in range(2):
        with pytest.raises(LedgerWriteFailed):
            ml.append(b"lost")
    assert ml.append(b"b") == P(0, 1)
    assert [e.data for e in ml.read(P(0, 0), 10)] == [b"a", b"b"]
    assert [f.operation.data for f in ml.injected] == [b"lost", b"lost"]


def test_fault_wrapper_after_faults_take_effect_but_report_failure() -> None:
    ml = FaultyLedger(MemoryLedger("topic"))
    ml.fail_appends(after=True)
    with pytest.raises(LedgerWriteFailed):
        ml.append(b"maybe")
    assert ml.read_entry(P(0, 0)) == b"maybe"
    assert ml.injected[0].after


def test_fault_wrapper_reads_predicates_and_custom_errors() -> None:
    ml = FaultyLedger(MemoryLedger("topic"))
    fill(ml, 3)
    ml.fail_reads(1)
    with pytest.raises(LedgerWriteFailed):
        ml.read(P(0, 0), 1)
    assert ml.read_entry(P(0, 0)) == b"m0"
    rule = ml.fail_when(
        lambda op: op.position == P(0, 2), ops=[Op.READ_ENTRY], error=lambda op: NoSuchEntry(f"{op.position}")
    )
    with pytest.raises(NoSuchEntry):
        ml.read_entry(P(0, 2))
    assert ml.read_entry(P(0, 1)) == b"m1"
    ml.remove(rule)
    assert ml.read_entry(P(0, 2)) == b"m2"


def test_fault_wrapper_cursor_operations_pass_through_the_rules() -> None:
    ml = FaultyLedger(MemoryLedger("topic"))
    cursor = ml.open_cursor("sub", InitialPosition.EARLIEST)
    fill(ml, 2)
    ml.fail_next(Op.MARK_DELETE)
    with pytest.raises(LedgerWriteFailed):
        cursor.mark_delete(P(0, 0))
    assert cursor.mark_delete_position == P(0, -1)
    cursor.mark_delete(P(0, 0))
    assert ml.open_cursor("sub").mark_delete_position == P(0, 0)


def test_fault_wrapper_roll_after_append_failure_plays_pulsars_closed_ledger() -> None:
    ml = FaultyLedger(MemoryLedger("topic"), roll_after_append_failure=True)
    ml.append(b"a")
    ml.fail_appends()
    with pytest.raises(LedgerWriteFailed):
        ml.append(b"b")
    with pytest.raises(LedgerClosed):
        ml.append(b"c")
    ml.roll_over()
    assert ml.append(b"d") == P(1, 0)


def test_fault_wrapper_random_faults_are_reproducible_from_the_seed() -> None:
    def run(seed: int) -> list[bool]:
        ml = FaultyLedger(MemoryLedger("topic"), rng=random.Random(seed))
        ml.fail_randomly(0.5, ops=[Op.APPEND])
        outcomes = []
        for i in range(40):
            try:
                ml.append(b"%d" % i)
                outcomes.append(True)
            except LedgerWriteFailed:
                outcomes.append(False)
        return outcomes

    assert run(7) == run(7)
    assert run(7) != run(8)
    assert 0 < sum(run(7)) < 40
    with pytest.raises(ValueError):
        FaultyLedger(MemoryLedger("t")).fail_randomly(0.5)


def test_fault_wrapper_fence_and_close() -> None:
    inner = MemoryLedger("topic")
    ml = FaultyLedger(inner)
    ml.fence()
    with pytest.raises(LedgerFenced):
        ml.append(b"a")
    assert inner.append(b"b") == P(0, 0)
    other = FaultyLedger(inner)
    other.close()
    with pytest.raises(LedgerClosed):
        other.read_entry(P(0, 0))


# -- differential: the file ledger behaves exactly as the memory ledger -----------------------------


class _NoSyncFileSystem(OsFileSystem):
    """OS calls without the syncs: this test is about behaviour, the crash test about durability."""

    def sync(self, fd: int) -> None:
        pass

    def sync_dir(self, path: str) -> None:
        pass


def _outcome(action: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", action()
    except (LedgerError, ValueError) as exc:
        return "error", type(exc).__name__


def _view(ml: ManagedLedger) -> tuple[Any, ...]:
    cursors = {
        c.name: (
            c.mark_delete_position,
            c.individually_deleted(),
            dict(c.properties),
            {p: c.batch_ack_set(p) for p in (e.position for e in ml.read(P(0, 0), 10_000))},
        )
        for c in ml.cursors()
    }
    entries = [(e.position, e.data) for e in ml.read(P(0, 0), 10_000)]
    return ml.ledgers(), ml.last_confirmed(), entries, dict(ml.properties), cursors


def test_file_ledger_matches_memory_ledger_step_by_step(tmp_path: Path) -> None:
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

    config = entries_per_ledger(3)
    counter = iter(range(1_000_000))
    names = st.sampled_from(["a", "b"])

    class Differential(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.directory = tmp_path / f"run{next(counter)}"
            self.fs = _NoSyncFileSystem()
            self.memory: ManagedLedger = MemoryLedger("d", config)
            self.file: ManagedLedger = FileLedger(self.directory, config, name="d", fs=self.fs)

        def both(self, action: Callable[[ManagedLedger], Any]) -> None:
            expected = _outcome(lambda: action(self.memory))
            found = _outcome(lambda: action(self.file))
            assert found == expected

        def position(self, data: Any) -> Position:
            ledgers = self.memory.ledgers()
            info = data.draw(st.sampled_from(ledgers))
            entry = data.draw(st.integers(-1, info.entries))
            return P(info.ledger_id, entry)

        @rule(payload=st.binary(max_size=12))
        def append(self, payload: bytes) -> None:
            self.both(lambda ml: ml.append(payload))

        @rule()
        def roll_over(self) -> None:
            self.both(lambda ml: ml.roll_over())

        @rule(name=names, earliest=st.booleans())
        def open_cursor(self, name: str, earliest: bool) -> None:
            initial = InitialPosition.EARLIEST if earliest else InitialPosition.LATEST
            self.both(lambda ml: ml.open_cursor(name, initial).mark_delete_position)

        @rule(name=names, data=st.data())
        def mark_delete(self, name: str, data: Any) -> None:
            position = self.position(data)
            self.both(lambda ml: ml.open_cursor(name).mark_delete(position))

        @rule(name=names, data=st.data(), bits=st.lists(st.integers(0, 7), max_size=3))
        def delete(self, name: str, data: Any, bits: list[int]) -> None:
            positions = [self.position(data) for _ in range(data.draw(st.integers(1, 3)))]
            ack_sets = None
            if bits:
                ack_sets = {positions[0]: bits_to_words(sum(1 << b for b in set(bits)))}
            self.both(lambda ml: ml.open_cursor(name).delete(positions, ack_sets))

        @rule(key=st.sampled_from(["x", "y"]), value=st.text(max_size=3), remove=st.booleans(), cursor=st.booleans())
        def property(self, key: str, value: str, remove: bool, cursor: bool) -> None:
            def change(ml: ManagedLedger) -> None:
                target: Any = ml.open_cursor("a") if cursor else ml
                if remove:
                    target.remove_property(key)
                else:
                    target.set_property(key, value)

            self.both(change)

        @rule()
        def delete_consumed_ledgers(self) -> None:
            self.both(lambda ml: ml.delete_consumed_ledgers())

        @rule(name=names)
        def delete_cursor(self, name: str) -> None:
            self.both(lambda ml: ml.delete_cursor(name))

        @rule()
        def reopen(self) -> None:
            assert isinstance(self.memory, MemoryLedger)
            self.memory = self.memory.reopen()
            self.file.close()
            self.file = FileLedger(self.directory, config, fs=self.fs)

        @rule()
        def kill_and_reopen(self) -> None:
            # No close: the cursor changes since the last commit come back from the journal.
            assert isinstance(self.memory, MemoryLedger) and isinstance(self.file, FileLedger)
            self.memory = self.memory.reopen()
            self.file.crash()
            self.file = FileLedger(self.directory, config, fs=self.fs)

        @invariant()
        def same_view(self) -> None:
            assert _view(self.file) == _view(self.memory)

        def teardown(self) -> None:
            self.file.close()

    run_state_machine_as_test(Differential)
