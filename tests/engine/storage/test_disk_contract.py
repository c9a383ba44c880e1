"""The file ledger's system-call interface: the real file system and the simulated disk pass the
same contract (the simulated disk's power cuts and faults: ``tests/engine/simulated/test_disk.py``)."""

from __future__ import annotations

import errno
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from engine.simulated.disk import SimDisk
from engine.storage.disk import FileSystem, LedgerLocked, OsFileSystem


@dataclass
class Root:
    fs: FileSystem
    path: str

    def __call__(self, *parts: str) -> str:
        return posixpath.join(self.path, *parts)


@pytest.fixture(params=["os", "sim"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Root]:
    if request.param == "os":
        yield Root(OsFileSystem(), str(tmp_path))
    else:
        disk = SimDisk(seed=1)
        disk.makedirs("/work/d")
        yield Root(disk, "/work/d")


def test_files_are_created_written_read_and_sized(root: Root) -> None:
    fs = root.fs
    fd = fs.open(root("f"), create=True)
    assert fs.size(fd) == 0 and fs.pread(fd, 10, 0) == b""
    fs.pwrite(fd, b"hello", 0)
    fs.pwrite(fd, b"world", 10)  # a gap reads as zeros
    assert fs.size(fd) == 15
    assert fs.pread(fd, 100, 0) == b"hello" + bytes(5) + b"world"
    assert fs.pread(fd, 3, 12) == b"rld" and fs.pread(fd, 5, 20) == b""
    fs.pwrite(fd, b"J", 0)
    assert fs.pread(fd, 5, 0) == b"Jello"
    fs.sync(fd)
    fs.close(fd)
    again = fs.open(root("f"))
    assert fs.pread(again, 5, 0) == b"Jello"
    fs.close(again)


def test_truncate_shrinks_and_extends_with_zeros(root: Root) -> None:
    fs = root.fs
    fd = fs.open(root("f"), create=True)
    fs.pwrite(fd, b"abcdef", 0)
    fs.truncate(fd, 2)
    assert fs.pread(fd, 10, 0) == b"ab"
    fs.truncate(fd, 4)
    assert fs.pread(fd, 10, 0) == b"ab\x00\x00"
    fs.close(fd)
    fd = fs.open(root("f"), create=True, truncate=True)
    assert fs.size(fd) == 0
    fs.close(fd)


def test_missing_paths_and_wrong_kinds_are_os_errors(root: Root) -> None:
    fs = root.fs
    with pytest.raises(FileNotFoundError):
        fs.open(root("missing"))
    with pytest.raises(FileNotFoundError):
        fs.open(root("no-dir", "f"), create=True)
    with pytest.raises(FileNotFoundError):
        fs.unlink(root("missing"))
    with pytest.raises(FileNotFoundError):
        fs.rename(root("missing"), root("other"))
    with pytest.raises(FileNotFoundError):
        fs.sync_dir(root("missing"))
    with pytest.raises(FileNotFoundError):
        fs.listdir(root("missing"))
    fs.makedirs(root("sub"))
    with pytest.raises(OSError) as caught:
        fs.open(root("sub"))
    assert caught.value.errno == errno.EISDIR
    fd = fs.open(root("f"), create=True)
    fs.close(fd)
    with pytest.raises(OSError) as caught:
        fs.size(fd)
    assert caught.value.errno == errno.EBADF


def test_directories_list_rename_unlink_and_remove(root: Root) -> None:
    fs = root.fs
    fs.makedirs(root("a", "b"))
    fs.makedirs(root("a", "b"))  # idempotent
    assert fs.is_dir(root("a")) and fs.exists(root("a", "b")) and not fs.exists(root("a", "c"))
    for name in ("z", "y"):
        fs.close(fs.open(root("a", name), create=True))
    assert fs.listdir(root("a")) == ["b", "y", "z"]
    assert not fs.is_dir(root("a", "y"))
    fd = fs.open(root("a", "y"))
    fs.pwrite(fd, b"new", 0)
    fs.close(fd)
    fs.rename(root("a", "y"), root("a", "z"))  # replaces
    assert fs.listdir(root("a")) == ["b", "z"]
    fd = fs.open(root("a", "z"))
    assert fs.pread(fd, 3, 0) == b"new"
    fs.close(fd)
    fs.rename(root("a", "b"), root("a", "c"))  # a directory
    assert fs.listdir(root("a")) == ["c", "z"]
    fs.unlink(root("a", "z"))
    fs.close(fs.open(root("a", "c", "deep"), create=True))
    fs.rmtree(root("a"))
    assert not fs.exists(root("a"))
    fs.sync_dir(root.path)


def test_an_unlinked_open_file_stays_readable(root: Root) -> None:
    fs = root.fs
    fd = fs.open(root("f"), create=True)
    fs.pwrite(fd, b"kept", 0)
    fs.unlink(root("f"))
    assert not fs.exists(root("f"))
    assert fs.pread(fd, 4, 0) == b"kept"
    fs.close(fd)


def test_a_lock_has_one_owner(root: Root) -> None:
    fs = root.fs
    held = fs.lock(root("LOCK"))
    with pytest.raises(LedgerLocked):
        fs.lock(root("LOCK"))
    fs.unlock(held)
    fs.unlock(fs.lock(root("LOCK")))
