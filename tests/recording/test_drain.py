"""The final drain ends only on empty receives invoked after it started: those are what the history
needs to prove a subscription was read to its end (``invariants.analysis._final_drain``)."""

from __future__ import annotations

from recording.runtime import Drain


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def now_ms(self) -> int:
        return self.ms


def test_an_empty_receive_invoked_before_the_drain_started_does_not_end_it() -> None:
    """Found under load: a receive invoked before the last send completed returned nothing a second
    later, after the drain had started; the drain ended on it and the consumer stopped, so the
    history had no empty receive after every send and lost-message judged nothing."""
    clock = Clock()
    drain = Drain(["c0"], quiet_ms=900, now_ms=clock.now_ms)
    clock.ms = 1_000  # the receive is invoked; the last send completes at 1,050 and the drain starts
    invoked = clock.ms
    clock.ms = 1_050
    drain.start()
    clock.ms = 2_100  # the receive comes back empty, late
    drain.saw("c0", message=False, connected=True, invoked_ms=invoked)
    assert not drain.quiet()
    clock.ms = 2_200
    drain.saw("c0", message=False, connected=True, invoked_ms=2_100)  # the next receive, invoked after
    assert drain.quiet()


def test_every_consumer_must_be_idle_and_quiet_for_the_period() -> None:
    clock = Clock()
    drain = Drain(["c0", "c1"], quiet_ms=900, now_ms=clock.now_ms)
    clock.ms = 100
    drain.start()
    clock.ms = 200
    drain.saw("c0", message=False, connected=True, invoked_ms=150)
    clock.ms = 1_500
    assert not drain.quiet()  # c1 has not come back empty yet
    drain.saw("c1", message=True, connected=True, invoked_ms=1_400)
    drain.saw("c1", message=False, connected=True, invoked_ms=1_501)
    clock.ms = 2_000
    assert not drain.quiet()  # c1 received at 1,500: quiet only 900 ms after
    clock.ms = 2_400
    assert drain.quiet()
    drain.saw("c0", message=False, connected=False, invoked_ms=2_400)  # disconnected: not idle
    assert not drain.quiet()
