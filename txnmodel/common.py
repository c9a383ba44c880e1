"""Shared pieces of the command line: exit codes, the error boundary's message helpers, argument
types and output helpers.

Exit codes, the same for every subcommand:

* 0 (:data:`EXIT_OK`) -- everything checked passed;
* 1 (:data:`EXIT_FAILED`) -- a check failed (a vector mismatch, a counterexample, an unproved
  property, a violation);
* 2 (:data:`EXIT_BAD_INPUT`) -- bad input or usage: an unreadable, damaged or invalid file, a
  value out of range, a file system that refused (missing, not permitted, full); the one-line
  message names the input, the place (file, line, byte offset, JSON path) and what was expected;
* 3 (:data:`EXIT_BUG`) -- an unexpected exception: a bug in txnmodel, never in the input.  One
  line says so and where its traceback was written (a file in a private temporary folder);
  ``txnmodel --debug`` prints the traceback instead.

An output pipe closed early (``txnmodel prove --json | head -1``) ends the command quietly with
:data:`EXIT_PIPE_CLOSED` (141, what a shell reports for a process ended by SIGPIPE).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from spec.errors import InputError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_BUG = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE
DEFAULT_VECTORS = Path(__file__).resolve().parent.parent / "spec" / "vectors"

#: The longest message the error boundary prints; longer ones (an exception quoting its whole
#: input) are cut, saying how much was left out.
MESSAGE_LIMIT = 400

INT64_MAX = 2**63 - 1


class UsageError(Exception):
    """A usage error found after parsing (an option's value checked against the file system or
    another option): exit 2 before any work, with this message."""


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` on one line (line breaks and the whitespace around them become one space), at
    most ``limit`` characters; what is cut is counted, never printed."""
    flat = re.sub(r"\s*[\r\n]+\s*", " ", text).strip()
    if len(flat) <= limit:
        return flat
    return f"{flat[:limit]}... ({len(flat) - limit:,} more characters)"


def describe_os_error(exc: OSError) -> str:
    """``path: what the system said`` (both paths of a rename), without Python's ``[Errno n]``."""
    what = exc.strerror or type(exc).__name__
    if exc.filename is not None and exc.filename2 is not None:
        return f"{exc.filename} -> {exc.filename2}: {what}"
    if exc.filename is not None:
        return f"{exc.filename}: {what}"
    return str(exc) or what


def read_input_bytes(path: Path, *, limit: int, limit_name: str) -> bytes:
    """The bytes of one input file, refused with an :class:`~spec.errors.InputError` unless it is a
    regular file of at most ``limit`` bytes (named ``limit_name`` in the message).

    Opened without blocking and checked on the open descriptor, so a FIFO is refused instead of
    waiting for a writer, and a device such as /dev/zero instead of being read without end.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"not a regular file ({file_kind(info.st_mode)}); expected a file", where=str(path))
        if info.st_size > limit:
            raise InputError(f"{info.st_size:,} bytes, over the limit of {limit:,} ({limit_name})", where=str(path))
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise InputError(f"more than {limit:,} bytes, over the limit ({limit_name})", where=str(path))
    return data


def read_json_input(path: Path, *, limit: int, limit_name: str, max_depth: int, max_digits: int = 40) -> Any:
    """One JSON input file, bounded before it is parsed (see :func:`read_input_bytes` and
    :func:`spec.json_limits.first_excess`); every refusal is an :class:`InputError` naming the
    file, the line and byte offset, and the limit."""
    from spec.json_limits import first_excess

    where = str(path)
    text = decode_utf8(read_input_bytes(path, limit=limit, limit_name=limit_name), where)
    excess = first_excess(text, max_depth=max_depth, max_digits=max_digits)
    if excess is not None:
        raise InputError(f"JSON {excess[0]} at {text_place(text, excess[1])}", where=where)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not JSON: {exc.msg} at {text_place(text, exc.pos)}", where=where) from None


def text_place(text: str, index: int) -> str:
    """``line L column C (byte offset B)`` of the character at ``index``."""
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return f"line {line} column {column} (byte offset {len(text[:index].encode('utf-8'))})"


def port_int(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    return _bounded_int(text, 0, 65535, "a port from 0 to 65535")


def file_kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text; an invalid byte is an input error naming its offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} (byte offset {exc.start}) {exc.reason}",
            where=where,
        ) from None


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


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a usage error otherwise, before any work)."""
    return _bounded_int(text, 1, INT64_MAX, "a whole number from 1")


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {one_line(repr(text), 60)}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text}")
    return value


def z3_rlimit(text: str) -> int:
    """An argparse type: a Z3 resource budget (Z3 takes an unsigned 32-bit ``rlimit``)."""
    return _bounded_int(text, 1, 2**32 - 1, f"a Z3 rlimit from 1 to {2**32 - 1}")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    return _bounded_int(text, 0, INT64_MAX, "a whole number from 0")


def seed_int(text: str) -> int:
    """An argparse type: a seed, which histories store as a signed 64-bit integer."""
    return _bounded_int(text, -INT64_MAX - 1, INT64_MAX, f"a seed from {-INT64_MAX - 1} to {INT64_MAX}")


_SPARK_MASTER = re.compile(
    r"local(\[(\d+|\*)(,\d+)?\])?"  # local, local[N], local[*], local[N,F]
    r"|local-cluster\[\d+,\d+,\d+\]"
    r"|spark://[\w.-]+:\d{1,5}(,[\w.-]+:\d{1,5})*"
    r"|yarn"
    r"|k8s://(https?://)?[\w.-]+(:\d{1,5})?"
    r"|mesos://[\w.@:/-]+"
)


def spark_master(text: str) -> str:
    """An argparse type: a Spark master URL in one of the forms Spark accepts (passed on unchanged)."""
    if not _SPARK_MASTER.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected a Spark master URL (local, local[N], local[*], local-cluster[N,C,M], spark://HOST:PORT, "
            f"yarn or k8s://HOST:PORT), got {one_line(repr(text), 80)}"
        )
    return text


def _bounded_int(text: str, low: int, high: int, what: str) -> int:
    shown = one_line(repr(text), 60)
    if len(text) > 40:  # int() of a huge digit string is slow (and refused past 4300 digits)
        raise argparse.ArgumentTypeError(f"expected {what}, got {shown}")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {shown}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value
