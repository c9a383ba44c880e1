"""views/progress.py: what a terminal and a log see of a long command."""

from __future__ import annotations

import io
import threading
from collections.abc import Callable

from views.progress import Reporter, format_seconds


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def tick(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def _wait_for(condition: Callable[[], bool]) -> None:
    """Until the heartbeat thread has written (an event, not a timing: the bound only stops a hang)."""
    done = threading.Event()
    for _ in range(400):
        if condition():
            return
        done.wait(0.05)
    raise AssertionError("the heartbeat never wrote")


def test_format_seconds() -> None:
    assert [format_seconds(s) for s in (0, 7.4, 161, 3725)] == ["0:00", "0:07", "2:41", "1:02:05"]


def test_piped_phase_start_heartbeat_and_end_lines() -> None:
    out, clock = io.StringIO(), Clock()
    reporter = Reporter(stream=out, live=False, heartbeat=10.0, clock=clock)
    with reporter.phase("simulate", total=4, unit="histories") as phase:
        phase.advance(note="ctp seed 1")
        clock.tick(5)
        phase.advance(note="ctp seed 2")  # quicker than the heartbeat: no line of its own
        assert out.getvalue().splitlines() == ["== simulate (4 histories)"]
        clock.tick(12)  # a long item: the heartbeat speaks although nothing advanced
        _wait_for(lambda: len(out.getvalue().splitlines()) >= 2)
        reporter.say("a message")
        phase.advance(2)
    lines = out.getvalue().splitlines()
    assert lines[1] == "simulate: 2/4 histories (50%), 0.1 histories/s, 0:17 elapsed, about 0:17 left [ctp seed 2]"
    assert "a message" in lines
    assert lines[-1] == "simulate done: 4/4 histories (100%), 0.2 histories/s, 0:17 elapsed"


def test_a_phase_without_a_total_and_a_slow_rate() -> None:
    out, clock = io.StringIO(), Clock()
    with Reporter(stream=out, live=False, clock=clock).phase("verify", unit="tasks") as phase:
        clock.tick(30)
        phase.advance()
        clock.tick(30)
    assert out.getvalue().splitlines()[-1] == "verify done: 1 tasks, 60 s per task, 1:00 elapsed"
    waiting = io.StringIO()
    with Reporter(stream=waiting, live=False, clock=clock).phase("start Spark", unit=""):
        clock.tick(40)
    assert waiting.getvalue().splitlines() == ["== start Spark", "start Spark done: 0:40 elapsed"]
    assert _one_of("histories") == "history"


def _one_of(unit: str) -> str:
    from views.progress import _one

    return _one(unit)


def test_disabled_reports_nothing_and_live_mode_draws_and_ends_with_a_line() -> None:
    quiet = io.StringIO()
    with Reporter(stream=quiet, enabled=False).phase("x", total=2) as phase:
        phase.advance(2)
    assert quiet.getvalue() == "" and phase.done == 2
    screen = io.StringIO()
    reporter = Reporter(stream=screen, live=True)
    with reporter.phase("proofs: buffer", total=3, unit="properties") as phase:
        phase.advance(3, note="TB-7")
        reporter.say("NOT PROVED nothing")  # printed above the bar, not through it
    text = screen.getvalue()
    assert "proofs: buffer done: 3/3 properties (100%)" in text and "NOT PROVED nothing" in text


def test_live_phases_may_overlap() -> None:
    """The main job proves, simulates and verifies at once: its phases share one live display and
    each ends on its own (rich allows one live display at a time; a second one would raise)."""
    screen = io.StringIO()
    reporter = Reporter(stream=screen, live=True)
    proofs = reporter.phase("proofs", total=2, unit="properties")
    proving = proofs.__enter__()
    with reporter.phase("simulate", total=1, unit="histories") as simulating:
        simulating.advance(note="ctp-file-seed1")
        proving.advance(2)
        proofs.__exit__(None, None, None)  # ends while simulate still runs
        reporter.say("a line above both")
    with reporter.phase("verify", total=1, unit="histories") as verifying:  # a new display after the last ended
        verifying.advance()
    text = screen.getvalue()
    for line in (
        "proofs done: 2/2 properties (100%)",
        "simulate done: 1/1 histories (100%)",
        "verify done: 1/1 histories (100%)",
        "a line above both",
    ):
        assert line in text
    assert text.index("proofs done") < text.index("simulate done")
