"""The file ledger's system calls behind one interface, and the real file system.

:class:`FileSystem` is every call the file ledger and its store make (open, pread, pwrite,
truncate, fdatasync, directory fsync, rename, unlink, listdir, stat, locks).  Two implementations
pass the same contract tests (``tests/engine/storage/test_disk_contract.py``):

* :class:`OsFileSystem` -- POSIX calls through ``os``: the real thing, for durability claims.
* ``SimDisk`` -- the simulated substrate's deterministic in-memory disk
  (:mod:`engine.simulated.disk`), which says what a power cut may leave and injects disk faults.
  It builds on this module; nothing here knows of it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from typing import Protocol

from engine.storage.ledger import LedgerError

__all__ = ["FileSystem", "LedgerLocked", "OsFileSystem", "makedirs_durably"]


class LedgerLocked(LedgerError):
    """Another handle (in this process or another) owns the directory."""


class FileSystem(Protocol):
    """The calls the file ledger and its store make.  Paths are absolute strings; fds are ints.
    Errors are ``OSError`` with the errno a POSIX system would give (``FileNotFoundError`` for a
    missing path), except :class:`LedgerLocked` from :meth:`lock`."""

    def makedirs(self, path: str) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
    def exists(self, path: str) -> bool: ...
    def is_dir(self, path: str) -> bool: ...
    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> int: ...
    def close(self, fd: int) -> None: ...
    def size(self, fd: int) -> int: ...
    def pread(self, fd: int, size: int, offset: int) -> bytes: ...
    def pwrite(self, fd: int, data: bytes, offset: int) -> None: ...
    def truncate(self, fd: int, length: int) -> None: ...
    def sync(self, fd: int) -> None: ...
    def sync_dir(self, path: str) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def unlink(self, path: str) -> None: ...
    def rmtree(self, path: str) -> None: ...
    def lock(self, path: str) -> int: ...
    def unlock(self, fd: int) -> None: ...


class OsFileSystem:
    """The real thing: POSIX calls through ``os``."""

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> int:
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
        if create:
            flags |= os.O_CREAT
        if truncate:
            flags |= os.O_TRUNC
        return os.open(path, flags, 0o644)

    def close(self, fd: int) -> None:
        os.close(fd)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        chunks: list[bytes] = []
        while size > 0:
            chunk = os.pread(fd, size, offset)
            if not chunk:
                break
            chunks.append(chunk)
            size -= len(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view = view[written:]
            offset += written

    def truncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def free_bytes(self, path: str) -> int:
        """The bytes an unprivileged writer may still put on ``path``'s file system."""
        stat = os.statvfs(path)
        return stat.f_bavail * stat.f_frsize

    def sync(self, fd: int) -> None:
        # fdatasync persists the data and the file size (what a later read needs) without the
        # timestamps; that is all an append needs.
        if hasattr(os, "fdatasync"):
            os.fdatasync(fd)
        else:  # pragma: no cover - macOS
            os.fsync(fd)

    def sync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path)

    def lock(self, path: str) -> int:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise LedgerLocked(f"{path} is locked by another handle") from None
            raise
        return fd

    def unlock(self, fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def makedirs_durably(fs: FileSystem, path: str) -> None:
    """Create ``path`` and any missing parents, each made durable in its parent (synced from the
    top down), so a power cut cannot take a directory whose contents were made durable."""
    missing: list[str] = []
    at = path
    while not fs.exists(at):
        missing.append(at)
        parent = os.path.dirname(at)
        if parent == at:
            break
        at = parent
    if not missing:
        return
    fs.makedirs(path)
    for created in reversed(missing):
        fs.sync_dir(os.path.dirname(created))
