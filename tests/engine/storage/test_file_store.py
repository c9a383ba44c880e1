"""The file store: many managed ledgers, one journal, group commit, power cuts.

The crash test runs a workload over three managed ledgers of one store on the simulated disk and
keeps a copy of the disk before every mutating call.  Every crash image of every copy (the disk
model of ``engine.simulated.disk``) is recovered by a fresh store, and the state of every ledger
must be what memory models of them hold after a *prefix* of the workload: at least everything
acknowledged, at most everything issued -- and the same prefix for every ledger, because one
journal orders every change of the store.  In the sync mode an operation is acknowledged when it
returns; in the deferred mode (the simulator's) only when a later commit returns, so a cut may
land anywhere among the operations issued since.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from engine.scheduler import Simulation
from engine.simulated.disk import SimDisk
from engine.storage.disk import OsFileSystem
from engine.storage.file_ledger import FileLedger, LedgerCorrupted
from engine.storage.file_store import AdaptiveCommit, FileStore
from engine.storage.ledger import InitialPosition, LedgerWriteFailed
from engine.storage.memory_ledger import MemoryLedger
from spec.types import Position
from tests.engine.storage.test_file_ledger_crash import CONFIG, Snapshot, run_op, snapshot

P = Position
ROOT = "/data/store"
KEYS = ("a", "b", "c")

# (key, op) steps; ("open", key) creates a managed ledger; ("commit",) commits the deferred
# journal; ("reopen",) closes the store cleanly and opens it again; ("drop", key) deletes a managed
# ledger; ("checkpoint",) checkpoints.
STEPS: tuple[tuple[Any, ...], ...] = (
    ("open", "a"),
    ("open", "b"),
    ("a", ("append", b"a0")),
    ("b", ("append", b"b0")),
    ("a", ("open_cursor", "sub", InitialPosition.EARLIEST)),
    ("b", ("set_property", "p", "1")),
    ("commit",),
    ("a", ("append", b"a1")),
    ("a", ("append", b"a2")),  # fills a's ledger 0: a roll-over
    ("open", "c"),
    ("c", ("append", b"c0")),
    ("b", ("open_cursor", "s", InitialPosition.LATEST)),
    ("commit",),
    ("a", ("mark_delete", "sub", P(0, 2))),
    ("c", ("append", b"c1")),
    ("drop", "c"),
    ("a", ("delete_consumed_ledgers",)),
    ("b", ("append", b"b1" * 30)),
    ("commit",),
    ("checkpoint",),
    ("a", ("append", b"a3")),
    ("b", ("cursor_set_property", "s", "k", "v")),
    ("commit",),
    ("reopen",),
    ("open", "c"),
    ("c", ("append", b"c-again")),
    ("a", ("append", b"a4")),
    ("b", ("delete_cursor", "s")),
    ("commit",),
    ("a", ("append", b"a5")),
)

State = tuple[tuple[str, Snapshot | None], ...]


@dataclass
class Run:
    disk: SimDisk = field(default_factory=SimDisk)
    copies: list[tuple[SimDisk, int, int, str]] = field(default_factory=list)  # (disk, done, issued, call)
    states: list[State] = field(default_factory=list)  # the models' state after each step
    done: int = 0  # steps acknowledged (durable)
    issued: int = 0  # steps started


def _state(models: dict[str, MemoryLedger | None]) -> State:
    return tuple((k, None if m is None else snapshot(m, reopened=False)) for k, m in sorted(models.items()))


def _adaptive(sim: Simulation) -> AdaptiveCommit:
    """The adaptive commit on the simulated disk: synced inline, a fixed sync time (so the copies
    are the same on every run), a record bound that checkpoints as soon as it is reached."""
    return AdaptiveCommit(
        group_wait_ms=2, schedule=sim.schedule, now=lambda: sim.now, sync_ms=1, background=False, checkpoint_share=0
    )


def run_store_workload(*, deferred: bool, adaptive: bool = False) -> Run:
    """``adaptive``: the deferred store with the adaptive commit, paced by a simulation clock that
    moves 1 ms per step (seals and completions land between and inside steps); a step counts as
    acknowledged when a barrier registered after it is called, as the simulator's answers are."""
    run = Run()
    run.disk.makedirs(ROOT)
    run.disk.sync_dir("/")
    run.disk.sync_dir("/data")

    def before_call(call: str, path: str) -> None:
        run.copies.append((run.disk.clone(), run.done, run.issued, f"{call} {path}"))

    run.disk.on_call = before_call
    models: dict[str, MemoryLedger | None] = dict.fromkeys(KEYS)
    run.states.append(_state(models))
    sim = Simulation()
    pacing = _adaptive(sim) if adaptive else None
    store = FileStore(ROOT, CONFIG, fs=run.disk, deferred=deferred, adaptive=pacing)
    handles: dict[str, FileLedger] = {}

    def acknowledge(step: int) -> None:
        run.done = max(run.done, step)

    def handle(key: str) -> FileLedger:
        if key not in handles:
            handles[key] = store.open_ledger(key, name=key)
        return handles[key]

    for step in STEPS:
        run.issued += 1
        if adaptive:
            sim.advance(1)
        if step[0] == "commit":
            if adaptive:
                sim.run_all()
            else:
                store.commit()
        elif step[0] == "checkpoint":
            store.checkpoint()
        elif step[0] == "reopen":
            store.close()
            handles.clear()
            store = FileStore(ROOT, CONFIG, fs=run.disk, deferred=deferred, adaptive=pacing)
            models = {k: None if m is None else m.reopen() for k, m in models.items()}
            for key, model in models.items():
                if model is not None:
                    handle(key)  # reopening closes the last ledger and opens one, as recovery does
        elif step[0] == "drop":
            key = step[1]
            handles.pop(key, None)
            store.drop(key)
            models[key] = None
        elif step[0] == "open":
            handle(step[1])
            models[step[1]] = MemoryLedger(step[1], CONFIG)
        else:
            key, op = step
            run_op(handle(key), op)
            model = models[key]
            assert model is not None
            run_op(model, op)
        run.states.append(_state(models))
        for key, model in models.items():
            if model is not None and key in handles:
                assert snapshot(handles[key], reopened=False) == snapshot(model, reopened=False), step
        # Sync mode: a step is durable when it returns.  Deferred: at the commit (a drop or a
        # creation commits what was queued before it, then makes itself durable).  Adaptive: when
        # its barrier is called (a close makes everything durable).
        if adaptive:
            if step[0] == "reopen":
                run.done = run.issued
            store.barrier(partial(acknowledge, run.issued))
        elif not deferred or step[0] in ("commit", "reopen", "drop", "checkpoint", "open"):
            run.done = run.issued
    if adaptive:
        sim.run_all()
        assert run.done == run.issued, "every step's barrier was called once the commits ran"
        assert store.journal.commits >= 3
    run.disk.on_call = None
    store.close()
    return run


def recovered_state(image: SimDisk) -> State:
    store = FileStore(ROOT, CONFIG, fs=image)
    try:
        out = []
        for key in KEYS:
            if not store.exists(key):
                out.append((key, None))
                continue
            ledger = store.open_ledger(key)
            out.append((key, snapshot(ledger, reopened=True)))
        return tuple(out)
    finally:
        store.crash()


@pytest.mark.parametrize(
    ("deferred", "adaptive"), [(False, False), (True, False), (True, True)], ids=["sync", "deferred", "adaptive"]
)
def test_a_power_cut_anywhere_leaves_one_prefix_of_the_store_s_changes(deferred: bool, adaptive: bool) -> None:
    run = run_store_workload(deferred=deferred, adaptive=adaptive)
    assert len(run.copies) > 100
    failures: list[str] = []
    checked = 0
    for copy, done, issued, call in run.copies:
        acceptable = run.states[done : issued + 1]
        for variant, image in copy.crash_images():
            checked += 1
            where = f"cut before {call} [{variant}], {done} steps acknowledged, {issued} issued"
            try:
                state = recovered_state(image)
            except LedgerCorrupted as exc:
                failures.append(f"{where}: recovery failed: {exc}")
                continue
            if state not in acceptable:
                failures.append(f"{where}: recovered {state}\nacceptable: {acceptable}")
        if len(failures) > 3:
            break
    assert not failures, "\n".join(failures[:3])
    assert checked > 1000


class JournalSyncDroppingDisk(SimDisk):
    """A store with a sync removed by hand: the journal's, as if the code never made it."""

    def sync(self, fd: int) -> None:
        if "journal-" not in self.path_of(fd):
            super().sync(fd)


def test_a_hand_removed_journal_sync_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Run, "__init__", _run_on(JournalSyncDroppingDisk))
    run = run_store_workload(deferred=False)
    for copy, done, issued, _ in run.copies:
        for _, image in copy.crash_images():
            try:
                if recovered_state(image) not in run.states[done : issued + 1]:
                    return
            except LedgerCorrupted:
                return
    pytest.fail("the crash checker missed the removed journal sync")


def _run_on(disk_type: type[SimDisk]) -> Any:
    def init(self: Run) -> None:
        self.disk = disk_type()
        self.copies, self.states, self.done, self.issued = [], [], 0, 0

    return init


def test_the_deferred_store_commits_many_ledgers_changes_with_one_sync() -> None:
    disk = SimDisk()
    requested: list[int] = []
    store = FileStore("/s", CONFIG, fs=disk, deferred=True, request_commit=lambda: requested.append(1))
    a, b = store.open_ledger("a"), store.open_ledger("b")
    released: list[str] = []
    store.barrier(lambda: released.append("nothing pending"))
    syncs = disk.syncs
    for i in range(5):
        a.append(b"a%d" % i)
        b.append(b"b%d" % i)
    a.open_cursor("c", InitialPosition.EARLIEST).mark_delete(P(0, 1))
    store.barrier(lambda: released.append("after commit"))
    assert requested == [1] and disk.syncs == syncs and released == ["nothing pending"]
    store.commit()
    assert disk.syncs == syncs + 1 and released == ["nothing pending", "after commit"]
    # A crash before the next commit loses what was queued, never what was committed.
    a.append(b"lost")
    store.crash()
    disk.power_cut()
    again = FileStore("/s", CONFIG, fs=disk)
    assert again.recovery.replayed > 0 and set(again.recovery.rebuilt) >= {"a", "b"}
    reopened = again.open_ledger("a")
    assert [e.data for e in reopened.read(P(0, 0), 10)] == [b"a%d" % i for i in range(5)]
    assert reopened.open_cursor("c").mark_delete_position == P(0, 1)
    again.close()


def test_threads_appending_to_many_ledgers_share_syncs(tmp_path: Path) -> None:
    store = FileStore(tmp_path / "store", CONFIG)
    ledgers = [store.open_ledger(f"l{i}") for i in range(4)]
    written: dict[int, list[bytes]] = {i: [] for i in range(4)}
    lock = threading.Lock()

    def worker(thread: int) -> None:
        for n in range(20):
            data = b"%d-%d" % (thread, n)
            ledgers[thread % 4].append(data)
            with lock:
                written[thread % 4].append(data)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.journal.records_committed >= 160
    assert store.journal.commits <= store.journal.records_committed  # (shared when threads overlap)
    for i, ledger in enumerate(ledgers):
        assert sorted(e.data for e in ledger.read(P(0, 0), 1000)) == sorted(written[i])
    store.crash()
    again = FileStore(tmp_path / "store", CONFIG)
    for i in range(4):
        assert sorted(e.data for e in again.open_ledger(f"l{i}").read(P(0, 0), 1000)) == sorted(written[i])
    again.close()


def test_a_journal_that_fails_for_good_takes_the_store_down_and_recovery_brings_it_back() -> None:
    disk = SimDisk()
    failures: list[BaseException] = []
    store = FileStore("/s", CONFIG, fs=disk, deferred=True)
    store.on_failure = failures.append
    ledger = store.open_ledger("a")
    ledger.append(b"kept")
    store.commit()
    ledger.append(b"lost")
    disk.fail_next("sync", path="journal-")
    store.commit()
    assert len(failures) == 1 and store.failed is not None
    # Deferred: a change after the failure is taken and dropped (never acknowledged: no commit
    # will come, and no answer waiting on it is let go), as if the crash had already happened.
    ledger.append(b"dropped")
    released: list[int] = []
    store.barrier(lambda: released.append(1))
    assert released == []
    store.crash()
    disk.power_cut()
    again = FileStore("/s", CONFIG, fs=disk)
    data = [e.data for e in again.open_ledger("a").read(P(0, 0), 10)]
    assert data[0] == b"kept" and data in ([b"kept"], [b"kept", b"lost"])  # "lost" was never acknowledged
    again.close()


def test_a_sync_store_whose_journal_failed_for_good_refuses_writes() -> None:
    disk = SimDisk()
    store = FileStore("/s", CONFIG, fs=disk)
    ledger = store.open_ledger("a")
    ledger.append(b"kept")
    disk.fail_next("sync", path="journal-", count=2)  # the commit's sync, and its cut's
    with pytest.raises(LedgerWriteFailed):
        ledger.append(b"lost")
    with pytest.raises(LedgerWriteFailed, match="failed"):
        ledger.append(b"refused")
    store.crash()


def test_an_open_whose_journal_commit_failed_leaves_the_ledger_free_to_open_again() -> None:
    # Found by the soak (ctp seed 553 on the simulated disk): reopening the coordinator's log wrote
    # its new ledger's record, whose journal sync failed once; the store went on (the journal cut
    # the batch off), but the handle the open gave up on kept the directory's lock, so every later
    # load of the coordinator failed as locked and a committing txn was never finished.
    disk = SimDisk()
    store = FileStore("/s", CONFIG, fs=disk)
    ledger = store.open_ledger("a")
    ledger.append(b"kept")
    ledger.close()
    disk.fail_next("sync", path="journal-")
    with pytest.raises(LedgerWriteFailed):
        store.open_ledger("a")
    assert store.failed is None
    again = store.open_ledger("a")
    assert [e.data for e in again.read(P(0, 0), 10)] == [b"kept"]
    again.append(b"after")
    store.close()
    third = FileStore("/s", CONFIG, fs=disk)
    assert [e.data for e in third.open_ledger("a").read(P(0, 0), 10)] == [b"kept", b"after"]
    third.close()


def test_a_dropped_ledger_stays_dropped_and_its_name_can_be_reused() -> None:
    disk = SimDisk()
    store = FileStore("/s", CONFIG, fs=disk)
    store.open_ledger("x").append(b"old")
    store.drop("x")
    assert not store.exists("x") and not disk.exists("/s/x")
    store.open_ledger("x").append(b"new")
    store.crash()
    disk.power_cut()
    again = FileStore("/s", CONFIG, fs=disk)
    assert [e.data for e in again.open_ledger("x").read(P(0, 0), 10)] == [b"new"]
    again.close()


def test_journal_records_of_a_ledger_without_its_directory_are_refused() -> None:
    disk = SimDisk()
    store = FileStore("/s", CONFIG, fs=disk)
    store.open_ledger("x").append(b"entry")
    store.crash()
    disk.rmtree("/s/x")
    with pytest.raises(LedgerCorrupted, match="has no METADATA"):
        FileStore("/s", CONFIG, fs=disk)


def test_a_second_store_on_one_directory_is_refused(tmp_path: Path) -> None:
    from engine.storage.file_ledger import LedgerLocked

    store = FileStore(tmp_path / "s", CONFIG)
    with pytest.raises(LedgerLocked):
        FileStore(tmp_path / "s", CONFIG)
    store.close()
    FileStore(tmp_path / "s", CONFIG).close()


@pytest.mark.parametrize("step", ["sync", "sync_dir"])
def test_a_creation_that_fails_midway_fails_the_store_and_recovery_starts_from_what_is_durable(step: str) -> None:
    # Found by the simulator: a creation whose METADATA rename was not synced, retried in the same
    # store, wrote records of a ledger whose METADATA a power cut then took.  Now the store fails.
    disk = SimDisk(seed=5)
    store = FileStore("/s", CONFIG, fs=disk, deferred=True)
    failures: list[BaseException] = []
    store.on_failure = failures.append
    store.open_ledger("a").append(b"kept")
    store.commit()
    disk.fail_next(step, path="/s/b")
    with pytest.raises(LedgerWriteFailed):
        store.open_ledger("b")
    assert failures and store.failed is not None
    store.crash()
    disk.power_cut()
    again = FileStore("/s", CONFIG, fs=disk, deferred=True)  # no "records without METADATA"
    b = again.open_ledger("b")
    b.append(b"new")
    again.commit()
    assert [e.data for e in again.open_ledger("a").read(P(0, 0), 10)] == [b"kept"]
    again.crash()
    disk.power_cut()
    third = FileStore("/s", CONFIG, fs=disk)
    assert [e.data for e in third.open_ledger("b").read(P(0, 0), 10)] == [b"new"]
    third.close()


class GatedSyncs(OsFileSystem):
    """The real file system whose journal syncs, once ``armed``, wait for ``gate``: a sync that
    had to finish before the caller could go on would wait until the timeout."""

    def __init__(self) -> None:
        self.armed = False
        self.gate = threading.Event()
        self.waited: list[bool] = []  # per gated sync: was the gate opened (not timed out)

    def sync(self, fd: int) -> None:
        super().sync(fd)
        if self.armed:
            self.waited.append(self.gate.wait(timeout=30))


def test_the_adaptive_commit_overlaps_its_sync_and_answers_only_once_it_is_done(tmp_path: Path) -> None:
    sim = Simulation()
    fs = GatedSyncs()
    pacing = AdaptiveCommit(group_wait_ms=6, schedule=sim.schedule, now=lambda: sim.now)
    store = FileStore(tmp_path / "s", CONFIG, fs=fs, deferred=True, adaptive=pacing)
    a, b = store.open_ledger("a"), store.open_ledger("b")
    fs.armed = True
    released: list[tuple[str, int, int]] = []

    def answer(name: str) -> None:
        released.append((name, sim.now, store.journal.durable_ticket))

    a.append(b"a0")
    first = store.journal._next_ticket - 1
    sim.schedule(3, lambda: b.append(b"b0"))  # joins the same batch (sealed at 6 ms)
    sim.schedule(3, lambda: store.barrier(partial(answer, "first")))
    seen: list[tuple[bool, int]] = []

    def meanwhile() -> None:
        # The batch is sealed and its sync is running (gated): the simulation goes on meanwhile.
        seen.append((store.busy, store.journal.durable_ticket))
        a.append(b"a1")  # queued for the next batch
        store.barrier(partial(answer, "second"))
        fs.gate.set()

    sim.schedule(6, meanwhile)
    sim.run_all()
    assert len(seen) == 1 and seen[0][0] and seen[0][1] < first, seen
    assert fs.waited and all(fs.waited), "a gated sync timed out: the commit did not overlap it"
    assert [name for name, _, _ in released] == ["first", "second"]
    (_, t1, durable1), (_, t2, durable2) = released
    assert durable1 >= first + 1 and durable2 >= first + 2  # each answer after its records' sync
    assert 6 < t1 < t2  # the first batch was sealed at 6 ms and took its sync time
    assert store.journal.commits == 2 and all(1 <= ms <= pacing.max_sync_ms for ms in store.sync_ms_used)
    store.crash()
    again = FileStore(tmp_path / "s", CONFIG)
    assert [e.data for e in again.open_ledger("a").read(P(0, 0), 10)] == [b"a0", b"a1"]
    assert [e.data for e in again.open_ledger("b").read(P(0, 0), 10)] == [b"b0"]
    again.close()


def test_the_adaptive_commit_paces_checkpoints_by_their_cost() -> None:
    sim = Simulation()
    disk = SimDisk()
    pacing = AdaptiveCommit(
        group_wait_ms=1, schedule=sim.schedule, now=lambda: sim.now, sync_ms=1, background=False, checkpoint_share=4
    )
    store = FileStore("/s", CONFIG, fs=disk, deferred=True, adaptive=pacing, max_journal_records=2)
    ledgers = [store.open_ledger(k) for k in ("a", "b")]
    for i in range(40):
        for ledger in ledgers:
            ledger.append(b"%d" % i)
        sim.advance(3)  # one batch per round: sealed, synced, completed
    # Every completion found the segment past its 2-record bound; a checkpoint of two dirty
    # ledgers costs about 3 * 2 + 2 = 8 syncs, so it waits for 4 * 8 = 32 commits.
    assert store.journal.commits >= 40
    assert 1 <= store.stats.checkpoints <= store.journal.commits // 32
    store.crash()
    disk.power_cut()
    again = FileStore("/s", CONFIG, fs=disk)
    assert [e.data for e in again.open_ledger("b").read(P(0, 0), 100)] == [b"%d" % i for i in range(40)]
    again.close()


def test_the_adaptive_commit_s_journal_failure_takes_the_store_down_and_answers_nothing() -> None:
    sim = Simulation()
    disk = SimDisk()
    failures: list[BaseException] = []
    store = FileStore("/s", CONFIG, fs=disk, deferred=True, adaptive=_adaptive(sim))
    store.on_failure = failures.append
    ledger = store.open_ledger("a")
    ledger.append(b"kept")
    sim.run_all()
    ledger.append(b"lost")
    released: list[int] = []
    store.barrier(lambda: released.append(1))
    disk.fail_next("sync", path="journal-")
    sim.run_all()
    assert len(failures) == 1 and store.failed is not None and released == []
    store.crash()
    disk.power_cut()
    again = FileStore("/s", CONFIG, fs=disk)
    data = [e.data for e in again.open_ledger("a").read(P(0, 0), 10)]
    assert data in ([b"kept"], [b"kept", b"lost"])  # "lost" was never answered
    again.close()


def _ctp_history(**start: Any) -> tuple[list[Any], Any]:
    """A few consume-transform-produce transactions through the client API; the client history."""
    from engine.simulation.client import Cluster, ConsumerType

    cluster = Cluster.start(seed=4, topics={"in": 1, "out": 1}, ledger="file", group_commit_ms="adaptive", **start)
    try:
        client = cluster.client()
        source = client.subscribe("in", "ctp", consumer_type=ConsumerType.Shared)
        feeder, sink = client.create_producer("in"), client.create_producer("out")
        for i in range(4):
            feeder.send(f"in-{i}")
        for i in range(4):
            txn = client.new_transaction(10_000)
            msg = source.receive(100)
            assert msg is not None
            sink.send(f"out-{i}", txn=txn)
            source.acknowledge(msg, txn=txn)
            txn.commit()
        files = cluster.broker.store._files
        return cluster.history(), files
    finally:
        cluster.close()


def test_the_cluster_s_adaptive_commit_on_the_simulated_disk_gives_a_seed_one_history() -> None:
    first, files = _ctp_history(disk="sim")
    second, _ = _ctp_history(disk="sim")
    assert first == second and len(first) > 10
    assert files.adaptive is not None and not files.adaptive.background
    assert set(files.sync_ms_used) == {1} and files.journal.commits > 0


def test_the_cluster_s_adaptive_commit_on_a_real_disk_commits_through_its_worker(tmp_path: Path) -> None:
    history, files = _ctp_history(data_dir=str(tmp_path / "data"))
    assert all(op.type.name == "OK" for op in history)
    assert files.adaptive is not None and files.adaptive.background
    assert files.journal.commits > 0 and all(1 <= ms <= files.adaptive.max_sync_ms for ms in files.sync_ms_used)
