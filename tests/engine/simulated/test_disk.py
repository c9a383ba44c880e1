"""The simulated disk alone: its power cuts follow the model in ``engine.simulated.disk`` (synced data
kept, sector tears, reordering, lost directory entries, zeros), the same seed gives the same bytes,
and each injected fault fails the calls it names.  The contract it shares with the real file system
is ``tests/engine/storage/test_disk_contract.py``."""

from __future__ import annotations

import errno
import itertools
import posixpath

import pytest

from engine.simulated.disk import CRASH_DATA_VARIANTS, SECTOR, DiskFaults, SimDisk

# ---------------------------------------------------------------------------------------------
# The simulated disk's power-cut model.


def _disk_with(path: str, synced: bytes, unsynced: bytes, *, seed: int = 0) -> SimDisk:
    disk = SimDisk(seed=seed)
    disk.makedirs(posixpath.dirname(path))
    disk.sync_dir(posixpath.dirname(posixpath.dirname(path)))
    fd = disk.open(path, create=True)
    disk.sync_dir(posixpath.dirname(path))
    disk.pwrite(fd, synced, 0)
    disk.sync(fd)
    disk.pwrite(fd, unsynced, len(synced))
    return disk


def test_synced_data_and_synced_entries_survive_every_power_cut() -> None:
    for seed in range(40):
        disk = _disk_with("/d/f", b"s" * 700, b"u" * 1500, seed=seed)
        disk.power_cut()
        data = disk.read_file("/d/f")
        assert data[:700] == b"s" * 700
        assert len(data) in (700, 2200)
        assert disk.listdir("/d") == ["f"]
        with pytest.raises(OSError):
            disk.size(3)  # every descriptor is gone


def test_unsynced_writes_are_lost_or_torn_at_sector_granularity_and_reordered() -> None:
    synced, unsynced = b"s" * 100, bytes(range(256)) * 8  # 2,048 unsynced bytes over five sectors
    seen_shapes: set[tuple[bool, ...]] = set()
    for seed in range(200):
        disk = _disk_with("/d/f", synced, unsynced, seed=seed)
        disk.power_cut()
        data = disk.read_file("/d/f")
        if len(data) == len(synced):
            seen_shapes.add(())
            continue
        shape = []
        for sector in range(0, (len(data) - 1) // SECTOR + 1):
            lo, hi = max(sector * SECTOR, len(synced)), min((sector + 1) * SECTOR, len(data))
            piece = data[lo:hi]
            new, zero = unsynced[lo - len(synced) : hi - len(synced)], bytes(hi - lo)
            assert piece in (new, zero), f"seed {seed}: sector {sector} is neither old nor new"
            shape.append(piece == new and piece != zero)
        seen_shapes.add(tuple(shape))
    assert () in seen_shapes  # lost entirely
    assert any(all(s) for s in seen_shapes if s)  # arrived entirely
    # reordered: a later sector arrived while an earlier one did not
    assert any(any(not a and b for a, b in itertools.combinations(s, 2)) for s in seen_shapes)


def test_a_new_directory_entry_is_lost_until_the_directory_is_synced() -> None:
    disk = SimDisk(seed=3)
    disk.makedirs("/d")
    disk.sync_dir("/")
    fd = disk.open("/d/new", create=True)
    disk.pwrite(fd, b"data", 0)
    disk.sync(fd)  # the data is durable, its name is not
    images = dict(disk.crash_images())
    assert not images["dir-synced/all"].exists("/d/new")
    assert images["dir-all/synced"].read_file("/d/new") == b"data"
    disk.sync_dir("/d")
    assert all(image.read_file("/d/new") == b"data" for _, image in disk.crash_images())


def test_crash_images_enumerate_the_model_and_leave_the_disk_unchanged() -> None:
    disk = _disk_with("/d/f", b"s" * 10, b"u" * 1000)
    disk.close(3)
    fd = disk.open("/d/g", create=True)  # two pending directory operations
    disk.pwrite(fd, b"g", 0)
    disk.rename("/d/g", "/d/h")
    images = dict(disk.crash_images())
    assert {name.split("/")[1] for name in images if name.startswith("dir-all/")} == set(CRASH_DATA_VARIANTS)
    assert images["dir-all/synced"].read_file("/d/f") == b"s" * 10
    assert images["dir-all/all"].read_file("/d/f") == b"s" * 10 + b"u" * 1000
    assert images["dir-all/zeros"].read_file("/d/f") == b"s" * 10 + bytes(1000)
    assert images["dir-all/torn-byte"].read_file("/d/f") == b"s" * 10 + b"u" * 500
    torn = images["dir-all/torn"].read_file("/d/f")
    assert torn[:SECTOR] == (b"s" * 10 + b"u" * 1000)[:SECTOR] and torn[SECTOR:] == bytes(len(torn) - SECTOR)
    reordered = images["dir-all/reordered"].read_file("/d/f")
    assert reordered[10:SECTOR] == bytes(SECTOR - 10) and reordered[SECTOR * 2 :] == b"u" * (1010 - SECTOR * 2)
    alone = [name for name in images if name.startswith("dir-only-")]
    assert len(alone) == 2 * 2  # the create alone, the rename alone; synced and all data each
    assert disk.listdir("/d") == ["f", "h"] and disk.read_file("/d/f") == b"s" * 10 + b"u" * 1000


def test_same_seed_same_bytes() -> None:
    def run(seed: int) -> list[tuple[str, bytes]]:
        disk = _disk_with("/d/f", b"s" * 300, bytes(range(256)) * 9, seed=seed)
        disk.power_cut()
        return list(disk.walk_files())

    assert run(5) == run(5)
    assert any(run(5) != run(other) for other in range(6, 20))


# ---------------------------------------------------------------------------------------------
# Injected faults.


def test_named_faults_fail_the_chosen_calls_with_their_errno() -> None:
    disk = _disk_with("/d/f", b"s", b"")
    fd = disk.open("/d/f")
    disk.fail_next("pwrite", path="/d/f")
    with pytest.raises(OSError) as caught:
        disk.pwrite(fd, b"x", 1)
    assert caught.value.errno == errno.EIO
    disk.pwrite(fd, b"x", 1)  # only the next one
    disk.fail_next("sync", code=errno.EIO)
    with pytest.raises(OSError):
        disk.sync(fd)
    # A failed sync leaves the write unsynced: the synced-only image does not have it.
    assert dict(disk.crash_images())["dir-synced/synced"].read_file("/d/f") == b"s"
    disk.fail_next("pread")
    with pytest.raises(OSError):
        disk.pread(fd, 1, 0)
    assert [(call, code) for call, _, code in disk.injected] == [
        ("pwrite", errno.EIO),
        ("sync", errno.EIO),
        ("pread", errno.EIO),
    ]


def test_a_full_disk_refuses_growth_with_enospc() -> None:
    disk = SimDisk(faults=DiskFaults(capacity=100))
    disk.makedirs("/d")
    fd = disk.open("/d/f", create=True)
    disk.pwrite(fd, bytes(100), 0)
    with pytest.raises(OSError) as caught:
        disk.pwrite(fd, b"x", 100)
    assert caught.value.errno == errno.ENOSPC
    disk.pwrite(fd, b"x", 50)  # overwriting needs no space
    disk.truncate(fd, 10)
    disk.pwrite(fd, bytes(90), 10)


def test_random_faults_come_from_the_disks_seed() -> None:
    def failures(seed: int) -> list[int]:
        disk = SimDisk(seed=seed, faults=DiskFaults(write_eio=0.3, read_eio=0.3, sync_eio=0.3))
        disk.makedirs("/d")
        fd = disk.open("/d/f", create=True)
        out = []
        for i in range(60):
            try:
                [disk.pwrite, lambda *a: disk.sync(fd), lambda *a: disk.pread(fd, 1, 0)][i % 3](fd, b"x", i)
                out.append(0)
            except OSError as exc:
                out.append(exc.errno or 0)
        return out

    assert failures(1) == failures(1) and failures(1) != failures(2)
    assert 5 < sum(1 for f in failures(1) if f) < 40


def test_a_corrupted_sector_reads_back_different_bytes() -> None:
    disk = _disk_with("/d/f", b"abc", b"")
    disk.corrupt("/d/f", 1, bit=0)
    assert disk.read_file("/d/f") == b"acc"
    cut = SimDisk(seed=4, faults=DiskFaults(corrupt_sector=1.0))
    cut.makedirs("/d")
    fd = cut.open("/d/f", create=True)
    cut.pwrite(fd, b"\x00" * 64, 0)
    cut.sync(fd)
    cut.sync_dir("/d")
    cut.sync_dir("/")
    report = cut.power_cut()
    assert report.corrupted is not None and cut.read_file("/d/f") != b"\x00" * 64
