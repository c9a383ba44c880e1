"""Progress for the long commands: ``run``, ``simulate``, ``verify``, ``prove``, the benchmarks.

One API, two faces:

* **on a terminal** (standard error is a TTY): a live ``rich`` display per phase with its name,
  a bar, done/total, the rate and the time left (the elapsed time when the total is unknown);
* **piped or redirected** (CI logs, ``make run | tee``): plain lines on standard error, one when a
  phase starts, one when it ends, and one at least every :data:`HEARTBEAT` seconds while it runs,
  so a log is never silent for longer than that, even while one item takes minutes.

Use::

    from views.progress import Reporter

    progress = Reporter()                       # Reporter(enabled=False) for --quiet / --json
    with progress.phase("simulate", total=210, unit="histories") as phase:
        for spec in specs:
            run(spec)
            phase.advance(note=spec.name)       # or phase.update(done=...)
    progress.say("wrote out/run/histories")    # a line that goes with the progress, not under it

A phase that learns its total late calls ``phase.set_total(n)``; one that waits on something
else (a Spark job) can be fed from another thread: every method is thread-safe.  Nothing here
writes to standard output, which stays the command's result.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

__all__ = ["HEARTBEAT", "Phase", "Reporter", "format_seconds"]

HEARTBEAT = 10.0  # seconds: the longest a piped log goes without a line while a phase runs


def format_seconds(seconds: float) -> str:
    """``0:07``, ``2:41``, ``1:02:05``."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@dataclass
class Phase:
    """One phase's counters; made by :meth:`Reporter.phase`."""

    name: str
    total: int | None
    unit: str
    started: float
    done: int = 0
    note: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _changed: Callable[[Phase], None] = field(default=lambda _: None, repr=False)

    def advance(self, amount: int = 1, *, note: str | None = None) -> None:
        with self._lock:
            self.done += amount
            if note is not None:
                self.note = note
        self._changed(self)

    def update(self, *, done: int | None = None, note: str | None = None) -> None:
        with self._lock:
            if done is not None:
                self.done = done
            if note is not None:
                self.note = note
        self._changed(self)

    def set_total(self, total: int | None) -> None:
        with self._lock:
            self.total = total
        self._changed(self)

    def line(self, now: float, *, final: bool = False) -> str:
        """The plain-text state: ``simulate: 12/210 histories (6%), 1.3 histories/s, 0:09 elapsed,
        about 2:30 left``."""
        with self._lock:
            done, total, note = self.done, self.total, self.note
        elapsed = now - self.started
        parts = []
        if self.unit:  # a phase without a unit (waiting for a JVM) has only its time
            count = f"{done}/{total} {self.unit}" if total is not None else f"{done} {self.unit}"
            if total:
                count += f" ({100 * done // total}%)"
            parts.append(count)
        if done and elapsed > 0 and self.unit:
            rate = done / elapsed
            parts.append(
                f"{rate:.1f} {self.unit}/s" if rate >= 0.1 else f"{elapsed / done:.0f} s per {_one(self.unit)}"
            )
        parts.append(f"{format_seconds(elapsed)} elapsed")
        if not final and total and done and done < total:
            parts.append(f"about {format_seconds(elapsed / done * (total - done))} left")
        text = f"{self.name}: " + ", ".join(parts)
        if note and not final:
            text += f" [{note}]"
        return text


def _one(unit: str) -> str:
    """The singular of a unit: histories -> history, tasks -> task."""
    if unit.endswith("ies"):
        return unit[:-3] + "y"
    return unit[:-1] if unit.endswith("s") and not unit.endswith("ss") else unit


class Reporter:
    """Where a command's progress goes (see the module docstring).

    ``stream`` defaults to standard error; ``live`` forces the terminal display on or off (default:
    whether ``stream`` is a TTY); ``enabled=False`` reports nothing at all.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        stream: IO[str] | None = None,
        live: bool | None = None,
        heartbeat: float = HEARTBEAT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(self.stream.isatty()) if live is None else live
        self.heartbeat = heartbeat
        self.clock = clock
        self._lock = threading.Lock()
        self._console: Any = None
        self._display: Any = None  # the live display the running phases share
        self._displayed = 0  # how many phases it shows

    # -- lines that go with the progress ---------------------------------------------------------

    def say(self, text: str) -> None:
        """A line for the reader, printed above a live display instead of through it."""
        if not self.enabled:
            return
        with self._lock:
            if self._console is not None:
                self._console.print(text, highlight=False, markup=False, soft_wrap=True)
            else:
                self.stream.write(text + "\n")
                self.stream.flush()

    # -- phases ----------------------------------------------------------------------------------

    @contextmanager
    def phase(self, name: str, *, total: int | None = None, unit: str = "items") -> Iterator[Phase]:
        """A phase of the command: reported while it runs and once when it ends (with its time)."""
        current = Phase(name, total, unit, self.clock())
        if not self.enabled:
            yield current
            return
        if self.live:
            with self._live(current):
                yield current
            return
        with self._plain(current):
            yield current

    @contextmanager
    def _plain(self, current: Phase) -> Iterator[None]:
        stop = threading.Event()
        last = [self.clock()]

        def emit(text: str) -> None:
            with self._lock:
                self.stream.write(text + "\n")
                self.stream.flush()
            last[0] = self.clock()

        def changed(phase: Phase) -> None:
            # items finishing quickly are summed up: a line at most every heartbeat
            if self.clock() - last[0] >= self.heartbeat:
                emit(phase.line(self.clock()))

        def beat() -> None:
            while not stop.wait(min(1.0, self.heartbeat / 4)):
                if self.clock() - last[0] >= self.heartbeat:
                    emit(current.line(self.clock()))

        current._changed = changed
        total = f" ({current.total} {current.unit})" if current.total is not None else ""
        emit(f"== {current.name}{total}")
        thread = threading.Thread(target=beat, name=f"progress-{current.name}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            emit(current.line(self.clock(), final=True).replace(f"{current.name}: ", f"{current.name} done: ", 1))

    @contextmanager
    def _live(self, current: Phase) -> Iterator[None]:
        # Phases may overlap (the main job proves, simulates and verifies at once): they share one
        # live display, a bar each, for as long as any of them runs.
        with self._lock:
            if self._display is None:
                self._display = self._new_display()
                self._console = self._display.console
                self._display.start()
            display, console = self._display, self._console
            self._displayed += 1
        task = display.add_task(current.name, total=current.total, unit=current.unit, rate="", note="")

        def changed(phase: Phase) -> None:
            elapsed = self.clock() - phase.started
            rate = f"{phase.done / elapsed:.1f}/s" if phase.done and elapsed > 0 else ""
            display.update(task, completed=phase.done, total=phase.total, rate=rate, note=phase.note[:40])

        current._changed = changed
        try:
            yield
        finally:
            changed(current)
            display.remove_task(task)
            console.print(
                current.line(self.clock(), final=True).replace(f"{current.name}: ", f"{current.name} done: ", 1)
            )
            with self._lock:
                self._displayed -= 1
                if self._displayed == 0:
                    display.stop()
                    self._display = self._console = None

    def _new_display(self) -> Any:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        console = Console(file=self.stream, stderr=self.stream is sys.stderr)
        columns = [
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[unit]}"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[note]}", style="dim"),
        ]
        return Progress(*columns, console=console, transient=False, refresh_per_second=4)
