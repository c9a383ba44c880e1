"""Untrusted input files, read bounded: one regular file of at most so many bytes (never a FIFO
waited on or a device read without end), UTF-8 checked, JSON bounded before it is parsed; every
refusal an :class:`~spec.errors.InputError` naming the file, the place (line, column, byte offset)
and what was expected."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import IO, Any

from spec.errors import InputError
from spec.history import BadHistory

__all__ = [
    "decode_utf8",
    "describe_os_error",
    "file_kind",
    "open_input",
    "printable",
    "read_input_bytes",
    "read_json_input",
    "text_place",
]


def printable(path: str | os.PathLike[str]) -> str:
    """A path as text that can be printed and written anywhere: a file name that is not UTF-8 (its
    bytes kept by Python as surrogates) with each such byte as ``\\xNN``, so it names the file in a
    message or a verdict without failing to encode."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def describe_os_error(exc: OSError) -> str:
    """``path: what the system said`` (both paths of a rename), without Python's ``[Errno n]``."""
    what = exc.strerror or type(exc).__name__
    if exc.filename is not None and exc.filename2 is not None:
        return f"{printable(exc.filename)} -> {printable(exc.filename2)}: {what}"
    if exc.filename is not None:
        return f"{printable(exc.filename)}: {what}"
    return str(exc) or what


def read_input_bytes(path: Path, *, limit: int, limit_name: str) -> bytes:
    """The bytes of one input file, refused with an :class:`~spec.errors.InputError` unless it is a
    regular file of at most ``limit`` bytes (named ``limit_name`` in the message).

    Opened without blocking and checked on the open descriptor, so a FIFO is refused instead of
    waiting for a writer, and a device such as /dev/zero instead of being read without end.
    """
    where = printable(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"cannot read: {_why(exc)}", where=where) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"not a regular file ({file_kind(info.st_mode)}); expected a file", where=where)
        if info.st_size > limit:
            raise InputError(f"{info.st_size:,} bytes, over the limit of {limit:,} ({limit_name})", where=where)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        data = handle.read(limit + 1)
    if len(data) > limit:  # it grew while being read
        raise InputError(f"more than {limit:,} bytes, over the limit ({limit_name})", where=where)
    return data


def read_json_input(path: Path, *, limit: int, limit_name: str, max_depth: int, max_digits: int = 40) -> Any:
    """One JSON input file, bounded before it is parsed (see :func:`read_input_bytes` and
    :func:`spec.json_limits.first_excess`); every refusal is an :class:`InputError` naming the
    file, the line and byte offset, and the limit."""
    from spec.json_limits import first_excess

    where = printable(path)
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


def _why(exc: OSError) -> str:
    """What the system said of a path it could not open, a symbolic link loop named as such (the
    system's words for it, "too many levels of symbolic links", are no help)."""
    import errno

    if exc.errno == errno.ELOOP:
        return "a symbolic link loop (a link that leads back to itself); expected a file"
    if exc.errno == errno.ENOENT and exc.filename is not None and os.path.islink(exc.filename):
        return f"a symbolic link to {printable(os.readlink(exc.filename))}, which does not exist"
    return exc.strerror or type(exc).__name__


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


def open_input(path: str | Path) -> IO[bytes]:
    """Open an input file for reading, refused with :class:`BadHistory` unless it is a regular file.

    Opened without blocking and checked on the descriptor: a FIFO is refused instead of waiting for
    a writer, a device such as /dev/zero instead of being read without end."""
    where = printable(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BadHistory(f"cannot read: {_why(exc)}", where=where) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise BadHistory(f"not a regular file ({file_kind(mode)}); expected a history file", where=where)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
