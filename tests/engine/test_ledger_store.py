"""A store lost for good stops a simulated run instead of passing for a ledger error.

Corrupted ledger data (a flipped METADATA byte: recovery refuses the directory) and a full disk
(the simulated disk's capacity, which no fault mix injects) are not faults the broker rides out:
the run stops where it is, its history is what was recorded until then, and the run's metadata
says it is incomplete and why.  Before, the broker swallowed LedgerCorrupted as an ordinary ledger
error and the run reported 0 commits as if all were well.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from engine.ledger_store import LedgerStore, storage_lost
from engine.simulated.disk import SimDisk
from engine.simulation.workloads import RunSpec, run
from engine.storage.file_ledger import METADATA_NAME, LedgerCorrupted
from engine.storage.ledger import LedgerWriteFailed
from spec.config import Config


def _spec(data: Path, **overrides: object) -> RunSpec:
    fields: dict[str, object] = {"workload": "ctp", "seed": 3, "ops": 20, "ledger": "file", "data_dir": str(data)}
    fields.update(overrides)
    return RunSpec(**fields)  # type: ignore[arg-type]


def test_a_corrupted_store_stops_the_run(tmp_path: Path) -> None:
    data = tmp_path / "store"
    first = run(_spec(data))
    assert first.incomplete is None and first.committed > 0
    # One byte of one managed ledger's checkpoint flipped: its CRC no longer matches.
    metadata = sorted(data.rglob(METADATA_NAME))
    assert metadata
    target = metadata[0]
    raw = bytearray(target.read_bytes())
    raw[len(raw) // 2] ^= 0x20
    target.write_bytes(bytes(raw))
    again = run(_spec(data))
    assert again.incomplete is not None
    assert "corrupted ledger data" in again.incomplete and str(target) in again.incomplete
    assert again.metadata()["incomplete"] == again.incomplete
    assert any(f.kind == "storage-lost" for f in again.faults)
    # Stopped where it was: far fewer commits than a whole run makes.
    assert again.committed < first.committed


def test_a_full_simulated_disk_stops_the_run() -> None:
    whole = run(RunSpec(workload="ctp", seed=5, ops=40, ledger="file", disk="sim"))
    assert whole.incomplete is None
    full = run(RunSpec(workload="ctp", seed=5, ops=40, ledger="file", disk="sim", disk_capacity=64 * 1024))
    assert full.incomplete is not None and "no room to write" in full.incomplete
    assert full.metadata()["incomplete"] == full.incomplete
    assert 0 < len(full.operations) < len(whole.operations)  # what was recorded until then is kept


def test_which_errors_lose_a_store() -> None:
    assert storage_lost(LedgerCorrupted("metadata CRC mismatch", file="f", offset=20)) is not None
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        assert storage_lost(OSError(code, "full")) is not None
    # an error raised from one: the cause counts
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            raise RuntimeError("journal failed") from exc
    except RuntimeError as wrapped:
        assert storage_lost(wrapped) is not None
    # faults a store recovers from (the simulated disk's injected EIO) are not
    assert storage_lost(OSError(errno.EIO, "Input/output error")) is None
    assert storage_lost(ValueError("x")) is None


@pytest.mark.parametrize("disk", ["real", "sim"])
def test_a_faulty_run_is_not_stopped(tmp_path: Path, disk: str) -> None:
    """The fault mix's own disk and ledger faults are ridden out, as before."""
    spec = _spec(tmp_path / "d", faults=True, disk=disk, seed=11, ops=30)
    if disk == "sim":
        spec.data_dir = None
    assert run(spec).incomplete is None


def test_a_store_failure_before_anyone_listens_is_told_when_someone_does() -> None:
    """The broker's first loads open ledgers before its cluster listens for store failures: a
    journal that failed then is told as soon as a listener is set (once), else nobody would crash
    and reopen the store, and every later open would fail."""
    disk = SimDisk()
    store = LedgerStore("file", Config(), directory="/data", disk=disk)
    disk.fail_next("sync_dir")
    with pytest.raises(LedgerWriteFailed):
        store.open("persistent://public/default/t-partition-0")
    told: list[BaseException] = []
    store.on_failure = told.append
    assert len(told) == 1 and isinstance(told[0], OSError)
    store.on_failure = told.append
    assert len(told) == 1  # told once
    # The owner's crash reopens the store from what is durable: opens work again.
    store.close_all()
    store.open("persistent://public/default/t-partition-0")
    store.close()


def test_a_store_failure_moot_after_a_crash_is_not_told() -> None:
    disk = SimDisk()
    store = LedgerStore("file", Config(), directory="/data", disk=disk)
    disk.fail_next("sync_dir")
    with pytest.raises(LedgerWriteFailed):
        store.open("persistent://public/default/t-partition-0")
    store.close_all()
    told: list[BaseException] = []
    store.on_failure = told.append
    assert told == []
