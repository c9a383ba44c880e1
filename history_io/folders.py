"""Folders a run writes: a private scratch folder per process, output folders checked before any
work, and folders one run alone may write (a lock inside, nothing of an earlier run read back)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from history_io.inputs import describe_os_error

__all__ = ["LOCK_NAME", "UsageError", "exclusive_folder", "output_folder", "scratch_folder"]


class UsageError(Exception):
    """A usage error found after parsing (an option's value checked against the file system or
    another option): exit 2 before any work, with this message."""


_SCRATCH: Path | None = None


def scratch_folder(name: str) -> Path:
    """A folder ``name`` inside this process's private scratch folder, made on first use.

    The scratch folder is one ``tempfile.mkdtemp`` per run: a fresh, unguessable name, mode 0700,
    made with ``mkdir`` (which never follows a planted symlink); everything a run writes for
    itself (Spark's log4j configuration, its local and JVM temporary folders, packages shipped to
    executors) goes under it, and it is removed when the process exits."""
    global _SCRATCH
    if _SCRATCH is None:
        import atexit
        import shutil
        import tempfile

        _SCRATCH = Path(tempfile.mkdtemp(prefix="txnmodel-run-"))
        atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)
    folder = _SCRATCH / name
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def output_folder(path: Path, option: str) -> Path:
    """``path`` as a folder the command may write into, created if missing; a usage error, before any
    work, when it is a file, cannot be created, or cannot be written."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path}: exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot create the folder: {describe_os_error(exc)}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: the folder is not writable")
    return path


#: The lock file a command holds in a folder it writes (hidden: history readers skip dot files).
LOCK_NAME = ".txnmodel.lock"


@contextlib.contextmanager
def exclusive_folder(path: Path, option: str, *, overwrite: bool, ours: Callable[[Path], bool]) -> Iterator[Path]:
    """``path`` as a folder this command alone writes, for the duration of the ``with``.

    Checked before any work: a usage error when it is a file, cannot be made or written, is held by
    another txnmodel run (an ``fcntl`` lock on :data:`LOCK_NAME` inside it, so two runs can never
    write one folder), or is not empty.  With ``overwrite`` a non-empty folder is accepted and the
    entries this command writes (``ours``) are removed first, so nothing of an earlier run is read
    back as part of this one; other entries are left alone."""
    import fcntl
    import shutil

    output_folder(path, option)
    lock = path / LOCK_NAME
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot take its lock {LOCK_NAME}: {describe_os_error(exc)}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "?"
            raise UsageError(f"{option} {path}: in use by another txnmodel run (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        entries = sorted(entry for entry in path.iterdir() if entry.name != LOCK_NAME)
        if entries and not overwrite:
            raise UsageError(
                f"{option} {path}: not empty ({len(entries)} entries, such as {entries[0].name}); "
                "--overwrite replaces what this command writes there"
            )
        for entry in entries:
            if ours(entry):
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        yield path
    finally:
        os.close(fd)  # releases the lock; the (empty of meaning) lock file stays
