"""Progress of ``txnmodel record``, inside the run: operations recorded, their rate, time left.

A recording has phases (``record <workload>`` while the writers run, ``final drain``, ``cleanup``,
``write``); each prints a line when it starts, a line at least every heartbeat while it runs (every
second on a terminal, every :data:`views.progress.HEARTBEAT` seconds in a log) and one when it ends:
``done`` only when it ran to its end, ``stopped`` with the reason when the run was stopped during
it (Ctrl-C, SIGTERM, a broker gone), so no phase cut short ever reads as done.  Lines go to
standard error; standard output stays the command's result.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

from recording.log import HistoryLog
from views.progress import HEARTBEAT, format_seconds

__all__ = ["RecordProgress"]


@dataclass
class _Phase:
    name: str
    started: float
    ops_before: int
    left: Callable[[float], float | None]  # seconds left at a given elapsed time, if known
    note: Callable[[], str]
    counts: bool  # whether the phase records operations (its lines count them)


class RecordProgress:
    """Progress lines of one recording; ``stopped()`` says whether (and why) the run was stopped."""

    def __init__(
        self,
        log: HistoryLog,
        stopped: Callable[[], str | None],
        *,
        enabled: bool = True,
        stream: IO[str] | None = None,
        heartbeat: float | None = None,
    ) -> None:
        self.log = log
        self.stopped = stopped
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        if heartbeat is None:
            heartbeat = 1.0 if self.stream.isatty() else HEARTBEAT
        self.heartbeat = heartbeat
        self._lock = threading.Lock()

    def say(self, text: str) -> None:
        if not self.enabled:
            return
        with self._lock:
            self.stream.write(text + "\n")
            self.stream.flush()

    @contextmanager
    def phase(
        self,
        name: str,
        *,
        left: Callable[[float], float | None] = lambda elapsed: None,
        note: Callable[[], str] = lambda: "",
        counts: bool = True,
    ) -> Iterator[None]:
        """A phase: its lines while it runs, and ``done`` or ``stopped`` when it ends (an exception
        that leaves the phase, such as Ctrl-C's, ends it ``stopped`` too)."""
        phase = _Phase(name, time.monotonic(), len(self.log), left, note, counts)
        self.say(f"== {name}")
        quit_beating = threading.Event()

        def beat() -> None:
            while not quit_beating.wait(self.heartbeat):
                self.say(self._line(phase))

        thread = threading.Thread(target=beat, name=f"record-progress-{name}", daemon=True)
        if self.enabled:
            thread.start()
        # Only a stop that comes while the phase runs cuts it short: the phases a stopped run goes
        # through after it (winding down, writing) end "done" when they run to their end.
        before = self.stopped()
        reason: str | None = None
        try:
            yield
        except BaseException as exc:
            reason = self.stopped() or (
                "interrupted" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__}: {exc}"
            )
            raise
        finally:
            quit_beating.set()
            if thread.is_alive():
                thread.join()
            if reason is None and before is None:
                reason = self.stopped()
            self.say(self._line(phase, final=f"stopped ({reason})" if reason else "done"))

    def _line(self, phase: _Phase, *, final: str | None = None) -> str:
        elapsed = time.monotonic() - phase.started
        ops = len(self.log) - phase.ops_before
        parts = [f"{ops:,} operations"] if phase.counts else []
        if phase.counts and ops and elapsed > 0:
            parts.append(f"{ops / elapsed:,.0f} op/s")
        parts.append(f"{format_seconds(elapsed)} elapsed")
        left = phase.left(elapsed)
        if final is None and left is not None:
            parts.append(f"about {format_seconds(left)} left")
        head = f"{phase.name} {final}" if final else phase.name
        text = f"{head}: " + ", ".join(parts)
        note = phase.note()
        if note and final is None:
            text += f" [{note}]"
        return text
