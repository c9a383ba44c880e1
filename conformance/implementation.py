"""The implementation under test: a child process speaking the conformance protocol on its stdio.

Its standard output is untrusted input.  Every line must be one JSON object (at most
:data:`MAX_LINE_BYTES` bytes, nested at most :data:`MAX_DEPTH` levels, numbers of at most
:data:`MAX_DIGITS` digits); anything else is a :class:`ProtocolBroken` naming the line.  Every
exchange (a step and the observations after it) has a time limit: when it passes, the child's whole
process group is killed and :class:`ImplementationHung` names what it was asked.  A child that exits
is :class:`ImplementationDied`, with the end of what it wrote on standard error.  Nothing here
waits without a deadline.

:class:`InProcess` is the same interface over a Python callable (the reference's own
:class:`reference.sessions.Session`, a mutant of it): requests and answers still go through JSON
text, so the spelling is what a child would see.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from spec import conform
from spec.json_limits import first_excess

__all__ = [
    "MAX_DEPTH",
    "MAX_DIGITS",
    "MAX_LINE_BYTES",
    "Channel",
    "ImplementationDied",
    "ImplementationFailed",
    "ImplementationHung",
    "InProcess",
    "ProtocolBroken",
    "Subprocess",
]

#: The longest answer line read (a coordinator state's observation is a few kilobytes).
MAX_LINE_BYTES = 8 * 1024 * 1024
#: The deepest nesting of an answer (the deepest value a machine answers has about 10 levels).
MAX_DEPTH = 64
#: The longest number in an answer: any 64-bit value, far below where parsing gets slow.
MAX_DIGITS = 40
#: How long a child may take to exit after ``close`` before it is killed.
CLOSE_GRACE_SECONDS = 2.0
#: How much of the child's standard error a report quotes.
STDERR_TAIL_BYTES = 2000


class ImplementationFailed(Exception):
    """The implementation could not be talked to any more; the message says why and where."""


class ProtocolBroken(ImplementationFailed):
    """A line of its output that is not an answer the protocol allows."""


class ImplementationHung(ImplementationFailed):
    """No answer within the time limit; the child was killed."""


class ImplementationDied(ImplementationFailed):
    """The child exited (or closed its output) while an answer was awaited."""


class Channel:
    """Requests in, checked answers out, in order."""

    def exchange(self, requests: Sequence[dict[str, Any]], *, timeout: float | None = None) -> list[conform.Answer]:
        """The answers to ``requests``; ``timeout`` (seconds) replaces the per-step time limit."""
        raise NotImplementedError

    def close(self) -> None:
        """Say ``close`` and end the implementation (never raises)."""


class InProcess(Channel):
    """An implementation that is a Python callable from a request to its answer (JSON objects)."""

    def __init__(self, handle: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self._handle = handle
        self.line = 0

    def exchange(self, requests: Sequence[dict[str, Any]], *, timeout: float | None = None) -> list[conform.Answer]:
        answers = []
        for request in requests:
            self.line += 1
            text = json.dumps(self._handle(json.loads(json.dumps(request))))
            answers.append(_parsed(text, self.line, request))
        return answers


class Subprocess(Channel):
    """A child process: ``argv``, started in a process group of its own."""

    def __init__(self, argv: Sequence[str], *, timeout: float, cwd: str | None = None) -> None:
        """Start it; an ``argv`` that cannot be started raises :class:`OSError`."""
        self.argv = list(argv)
        self.timeout = timeout
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=cwd,
            start_new_session=True,  # its own process group: a kill reaches whatever it started
            bufsize=0,
        )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin, self._stdout = self._proc.stdin, self._proc.stdout
        os.set_blocking(self._stdin.fileno(), False)
        os.set_blocking(self._stdout.fileno(), False)
        self._buffer = b""
        self.line = 0  # lines of its output read so far
        self._dead = False

    def exchange(self, requests: Sequence[dict[str, Any]], *, timeout: float | None = None) -> list[conform.Answer]:
        """Send ``requests`` and read one answer each, all within the time limit."""
        if self._dead:
            raise ImplementationDied("the implementation is no longer running")
        pending = b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in requests)
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        answers: list[conform.Answer] = []
        with selectors.DefaultSelector() as selector:
            if pending:
                selector.register(self._stdin, selectors.EVENT_WRITE)
            selector.register(self._stdout, selectors.EVENT_READ)
            while len(answers) < len(requests):
                answers.extend(self._complete_lines(requests[len(answers) :]))
                if len(answers) >= len(requests):
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    self._hung(requests[len(answers)], limit)
                for key, _ in selector.select(timeout=left):
                    if key.fileobj is self._stdin:
                        pending = self._write(pending)
                        if not pending:
                            selector.unregister(self._stdin)
                    else:
                        self._read()
        return answers

    def _write(self, pending: bytes) -> bytes:
        try:
            written = os.write(self._stdin.fileno(), pending[:65536])
        except BlockingIOError:
            return pending
        except (BrokenPipeError, ConnectionResetError):
            self._died("it closed its standard input")
        return pending[written:]

    def _read(self) -> None:
        try:
            chunk = os.read(self._stdout.fileno(), 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            self._died("it closed its standard output")
        self._buffer += chunk
        if b"\n" not in self._buffer and len(self._buffer) > MAX_LINE_BYTES:
            self._kill()
            raise ProtocolBroken(
                f"line {self.line + 1} of the implementation's output is longer than {MAX_LINE_BYTES:,} bytes "
                "(MAX_LINE_BYTES)"
            )

    def _complete_lines(self, waiting: Sequence[dict[str, Any]]) -> list[conform.Answer]:
        out: list[conform.Answer] = []
        while waiting[len(out) :] and b"\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n", 1)
            self.line += 1
            if len(raw) > MAX_LINE_BYTES:
                self._kill()
                raise ProtocolBroken(
                    f"line {self.line} of the implementation's output is longer than {MAX_LINE_BYTES:,} bytes"
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self._kill()
                raise ProtocolBroken(f"line {self.line} of the implementation's output is not UTF-8 ({exc})") from None
            try:
                out.append(_parsed(text, self.line, waiting[len(out)]))
            except ProtocolBroken:
                self._kill()
                raise
        return out

    def _hung(self, request: dict[str, Any], limit: float) -> None:
        self._kill()
        raise ImplementationHung(
            f"the implementation did not answer within {limit:g} s (the time limit) when asked "
            f"{_short(request)}; it was killed"
        )

    def _died(self, how: str) -> None:
        code = self._reap()
        self._dead = True
        if code is None:
            status = f"stopped answering ({how}) and did not exit; it was killed"
        elif code >= 0:
            status = f"exited with status {code} ({how})"
        else:
            status = f"was killed by signal {-code}"
        raise ImplementationDied(f"the implementation {status}{self._stderr_tail()}")

    def _reap(self) -> int | None:
        try:
            return self._proc.wait(timeout=CLOSE_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self._kill()
            return None

    def _stderr_tail(self) -> str:
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - STDERR_TAIL_BYTES))
            tail = self._stderr.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"; the end of its standard error: {tail}" if tail else ""

    def _kill(self) -> None:
        self._dead = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=CLOSE_GRACE_SECONDS)

    def close(self) -> None:
        if not self._dead:
            try:
                os.set_blocking(self._stdin.fileno(), True)
                self._stdin.write(json.dumps(conform.close()).encode() + b"\n")
                self._stdin.close()
                self._proc.wait(timeout=CLOSE_GRACE_SECONDS)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._kill()
        for stream in (self._stdout, self._stderr):
            with contextlib.suppress(OSError):
                stream.close()

    @property
    def stderr_tail(self) -> str:
        return self._stderr_tail()


def _parsed(text: str, line: int, request: dict[str, Any]) -> conform.Answer:
    """Line ``line`` of the implementation's output, the answer to ``request``."""
    where = f"line {line} of the implementation's output (the answer to {_short(request)})"
    excess = first_excess(text, max_depth=MAX_DEPTH, max_digits=MAX_DIGITS)
    if excess is not None:
        raise ProtocolBroken(f"{where}: JSON {excess[0]} at character {excess[1]}")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ProtocolBroken(f"{where} is not JSON: {_cut(text)} ({exc})") from None
    try:
        return conform.check_answer(value, str(request.get("op")))
    except conform.ProtocolError as exc:
        raise ProtocolBroken(f"{where}: {exc}: {_cut(text)}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _short(request: dict[str, Any]) -> str:
    return _cut(json.dumps(request, separators=(",", ":")), 200)


def _cut(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
