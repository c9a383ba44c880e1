"""A watchdog for one simulation run: an event that never returns ends as a failure, not a hang.

The scheduler runs one event at a time on the run's thread, so a machine step that loops forever (a
programming error in a pure machine: a ``while`` whose exit its own state never reaches) stops the
whole run, as a broker thread stuck in a loop stops every client of its topic.  Nothing in the run
can notice: no event ends, no other event runs.  The watchdog is a second thread that watches the
run's count of events; when the same event has been running ``limit_s`` seconds of wall time, it
interrupts the run's thread, which raises :class:`EventHung` inside that event.  From there it is
any other exception of an event: the broker contains it as its component's failure (the step that
never returned is recorded as raised, the component crashes and is loaded again) and the run goes
on, so its history shows what the clients saw of a stuck component.

Clean events take microseconds; the limit is a wall-clock bound far above any of them, so a run
whose events all return is never touched and stays deterministic.  The interrupt is Python's own
(``_thread.interrupt_main`` with SIGALRM's handler set for the run): no signal reaches the process,
so no system call is interrupted.  It raises only inside an event (``Simulation.run_one`` on the
stack, and still the event it was asked for: one that ended just then leaves its successor alone);
the run's own bookkeeping between events (building its result, say) is left alone, and an
interrupt that lands in a collector's callback (whose exceptions the interpreter only reports) is
tried again at the watchdog's next look.
"""

from __future__ import annotations

import _thread
import gc
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from engine.scheduler import Simulation

__all__ = ["EVENT_LIMIT_S", "EventHung", "watchdog"]

# How long one event may run before it is taken for a loop that never ends (wall seconds).  The
# longest events of clean runs (a recovery replaying a log) take milliseconds, even on a loaded host.
EVENT_LIMIT_S = 60.0


class EventHung(Exception):
    """An event of the simulation ran longer than the watchdog's limit without returning."""


_RUN_ONE = Simulation.run_one.__code__


def _where(frame: FrameType | None) -> str:
    """``event`` when ``frame`` runs inside an event, ``callback`` when inside a collector's
    callback inside an event (the interpreter only reports what those raise), ``outside`` else."""
    callbacks = {getattr(c, "__code__", None) for c in gc.callbacks}
    in_callback = False
    while frame is not None:
        if frame.f_code is _RUN_ONE:
            return "callback" if in_callback else "event"
        in_callback = in_callback or frame.f_code in callbacks
        frame = frame.f_back
    return "outside"


@contextmanager
def watchdog(sim: Simulation, limit_s: float | None = EVENT_LIMIT_S) -> Iterator[None]:
    """While the body runs, an event of ``sim`` that runs ``limit_s`` wall seconds raises
    :class:`EventHung` inside itself (see the module docstring).  Off with ``None``, and off
    outside the main thread, where Python runs no signal handler."""
    if limit_s is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    limit = limit_s
    active = [True]
    again = [False]  # the interrupt landed where a raise is swallowed: try at the next look
    hung = [-1]  # the count of events when the interrupt was asked for: that event, and no later one
    stop = threading.Event()

    def interrupted(signum: int, frame: FrameType | None) -> None:
        where = _where(frame) if active[0] and sim.events_run == hung[0] else "outside"
        if where == "callback":  # a raise there is only reported, and the loop would go on
            again[0] = True
        if where != "event":
            return
        raise EventHung(f"an event ran for more than {limit:g} s without returning (a loop that never ends?)")

    def watch() -> None:
        seen, since = sim.events_run, time.monotonic()
        while not stop.wait(min(1.0, limit / 4)):
            now = time.monotonic()
            if sim.events_run != seen:
                seen, since = sim.events_run, now
            elif now - since >= limit or again[0]:
                since, again[0] = now, False  # once per limit: the contained event's successors get their own
                hung[0] = seen
                _thread.interrupt_main(signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, interrupted)
    thread = threading.Thread(target=watch, name="event-watchdog", daemon=True)
    thread.start()
    try:
        yield
    finally:
        active[0] = False
        stop.set()
        thread.join()
        signal.signal(signal.SIGALRM, previous)
