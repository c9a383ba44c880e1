"""The run's watchdog (:mod:`engine.simulation.watchdog`): an event that never returns raises ``EventHung``
inside itself, which the simulation hands to its error hook as any event's exception, and the run
goes on; the run's own work between events is never interrupted; the process's SIGALRM handling is
left as it was found; off the main thread there is no watchdog.  A flipped branch of the pending
ack that loops forever (devtools.branches) is stopped, contained and flagged."""

from __future__ import annotations

import gc
import signal
import sys
import threading
import time

from engine.scheduler import Simulation
from engine.simulation.watchdog import EventHung, watchdog


def _spin(seconds: float) -> None:
    """Busy for ``seconds`` of wall time, running bytecode all along (as a machine's loop does)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        pass


def test_an_event_that_never_returns_raises_inside_itself_and_the_run_goes_on() -> None:
    sim = Simulation()
    caught: list[Exception] = []
    sim.on_error = lambda exc: caught.append(exc) or True
    ran: list[str] = []

    def forever() -> None:
        _spin(10.0)  # as good as forever to a 0.2 s limit; bounded, so a broken watchdog fails, not hangs

    sim.schedule(0, forever)
    sim.schedule(1, lambda: ran.append("next"))
    before = signal.getsignal(signal.SIGALRM)
    with watchdog(sim, 0.2):
        sim.run_one()
        sim.run_one()
    assert [type(exc) for exc in caught] == [EventHung] and "0.2 s" in str(caught[0])
    assert ran == ["next"], "the event after the hung one ran"
    assert signal.getsignal(signal.SIGALRM) is before


def test_an_interrupt_inside_a_collectors_callback_is_tried_again_in_the_loop() -> None:
    """The interpreter only reports what a gc callback raises, and the loop would go on: the
    watchdog does not raise there, and interrupts again at its next look."""
    sim = Simulation()
    caught: list[Exception] = []
    sim.on_error = lambda exc: caught.append(exc) or True
    spinning = [True]

    def slow_callback(phase: str, info: dict[str, int]) -> None:
        if spinning[0]:
            spinning[0] = False
            _spin(0.5)  # the interrupt arrives in here

    def forever() -> None:
        gc.collect()
        _spin(10.0)

    sim.schedule(0, forever)
    swallowed: list[object] = []
    gc.callbacks.append(slow_callback)
    hook, sys.unraisablehook = sys.unraisablehook, swallowed.append
    try:
        with watchdog(sim, 0.2):
            sim.run_one()
    finally:
        sys.unraisablehook = hook
        gc.callbacks.remove(slow_callback)
    assert [type(exc) for exc in caught] == [EventHung]
    assert swallowed == [], "no EventHung was raised where the interpreter only reports it"


def test_events_that_return_and_work_between_events_are_left_alone() -> None:
    sim = Simulation()
    sim.on_error = lambda exc: False
    for delay in range(5):
        sim.schedule(delay, lambda: _spin(0.05))
    # a limit far above the events' 50 ms, so a loaded host's stall cannot reach it
    with watchdog(sim, 1.0):
        while sim.run_one():
            pass
        _spin(2.5)  # the run's own bookkeeping after its events (no event on the stack)
    assert sim.events_run == 5


def test_no_watchdog_off_the_main_thread_or_when_off() -> None:
    sim = Simulation()
    before = signal.getsignal(signal.SIGALRM)
    seen: list[object] = []

    def elsewhere() -> None:
        with watchdog(sim, 0.1):
            seen.append(signal.getsignal(signal.SIGALRM))

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    with watchdog(sim, None):
        seen.append(signal.getsignal(signal.SIGALRM))
    assert seen == [before, before]


def test_a_flip_that_loops_forever_is_stopped_contained_and_flagged() -> None:
    from devtools.mutation import applied, flip_mutants
    from engine.simulation.options import main_job_spec
    from engine.simulation.workloads import run
    from invariants.verify import VerifyOptions, check_histories

    spec = main_job_spec("ctp", 3)
    # pending ack's end of a txn with the `if not has_individual` flipped: its abort below the low
    # watermark takes the same first txn again and again
    (mutant,) = [m for m in flip_mutants("pending_ack") if m.id == "pending_ack:487"]
    with applied(mutant):
        result = run(spec, event_limit_s=1.0)
    assert result.failures and all("EventHung" in f.error for f in result.failures)
    rows = check_histories({"hung": result.operations}, "test", VerifyOptions(counterexamples=False))
    assert any(r.checker == "linearizability" and r.verdict == "illegal" for r in rows)
