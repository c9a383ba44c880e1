"""The file-system calls a :class:`~reference.engine.file_ledger.FileLedger` makes, as one interface.

:class:`OsFileSystem` makes them on the real file system; a test records them through its own
:class:`FileSystem` and replays what a power cut at any point would leave.
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Protocol

from .file_format import LedgerLocked

__all__ = ["FileSystem", "OsFileSystem"]


# ---------------------------------------------------------------------------------------------
# The file-system layer.


class FileSystem(Protocol):
    """The calls the file ledger makes.  Paths are absolute strings; fds are ints."""

    def makedirs(self, path: str) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
    def exists(self, path: str) -> bool: ...
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
