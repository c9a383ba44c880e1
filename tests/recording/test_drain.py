"""The final drain ends only on empty receives invoked after it started: those are what the history
needs to prove a subscription was read to its end (``invariants.analysis._final_drain``)."""

from __future__ import annotations

from recording.runtime import Drain, RecordOptions


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


def test_a_disturbed_run_drains_for_the_longer_period() -> None:
    """Found in CI: a run recorded with liveness on (a 600 ms quiet period) whose consumers were
    disconnected by a nemesis ended its drain while a subscription was still catching up after
    they came back, and the messages it delivered a second later were reported lost.  Once the run
    is disturbed, the drain waits the quiet period of a run with faults."""
    clock = Clock()
    disturbed = [False]
    drain = Drain(["c0"], quiet_ms=600, now_ms=clock.now_ms, disturbed_quiet_ms=5_000, disturbed=lambda: disturbed[0])
    drain.start()
    clock.ms = 100
    drain.saw("c0", message=False, connected=True, invoked_ms=50)
    clock.ms = 700
    assert drain.quiet() and drain.period_ms() == 600  # undisturbed: the short period ends it
    disturbed[0] = True
    assert not drain.quiet() and drain.period_ms() == 5_000
    clock.ms = 5_000
    assert drain.quiet()


def test_a_given_quiet_period_is_kept_when_disturbed() -> None:
    """``--quiet-ms`` is the user's: a disturbance does not lengthen it."""
    given = RecordOptions(url="pulsar://127.0.0.1:6650", workload="delayed", out="o", quiet_ms=700)
    assert given.quiet == given.quiet_disturbed == 700
    default = RecordOptions(url="pulsar://127.0.0.1:6650", workload="delayed", out="o")
    assert (default.quiet, default.quiet_disturbed) == (600, 5_000)
    off = RecordOptions(url="pulsar://127.0.0.1:6650", workload="delayed", out="o", liveness=False)
    assert (off.quiet, off.quiet_disturbed) == (5_000, 5_000)


def test_the_drain_goes_on_until_every_consumer_found_nothing_after_the_bound() -> None:
    """Found in CI: the delayed workload sent its 60 messages within 60 ms, each delayed by at most
    three 20 ms ticks, and its drain ended after the 600 ms quiet period, before any message's
    deliver time plus the 620 ms bound its sends stated: no consumer's empty receive came after a
    bound, and late-delivery had nothing to judge.  The workload passes that time as the drain's
    ``not_before_ms``; only empty receives invoked from then on end it."""
    clock = Clock()
    drain = Drain(["c0", "c1"], quiet_ms=600, now_ms=clock.now_ms)
    drain.start()
    clock.ms = 700
    drain.saw("c0", message=False, connected=True, invoked_ms=600)
    drain.saw("c1", message=False, connected=True, invoked_ms=650)
    assert drain.quiet() and not drain.quiet(not_before_ms=660)
    clock.ms = 800
    drain.saw("c0", message=False, connected=True, invoked_ms=700)
    assert not drain.quiet(not_before_ms=660)  # c1's last empty receive was invoked before the bound
    drain.saw("c1", message=False, connected=True, invoked_ms=700)
    assert drain.quiet(not_before_ms=660)
