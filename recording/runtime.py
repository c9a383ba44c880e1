"""What every workload shares: options, stated bounds, fresh names, the budget, threads, the drain.

The **final drain** is what makes loss checkable: once the workload's writers are done, every
consumer keeps receiving until all of them have found nothing, while connected, for a quiet
period, at the same time.  Their empty receives, invoked after every send and commit completed,
are the history's proof that each subscription was read to its end (``lost-message``) and, past a
stated bound, that a delayed or given-back message did not come (``late-delivery``,
``lost-redelivery``).  A consumer's queue is empty while its receive waits, so a message the broker
dispatched to it would have been returned: with the official client's prefetch, only every
consumer's empty receive together says something about a subscription.
"""

from __future__ import annotations

import random
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recording.log import HistoryLog

__all__ = [
    "ACK_TIMEOUT_TICK_MS",
    "NACK_SPACING",
    "Bounds",
    "Budget",
    "Drain",
    "RecordOptions",
    "Run",
    "RunStopped",
    "nack_timer_ms",
]

# The final drain's quiet period after a disturbance (faults injected, a consumer disconnected): the
# official client reconnects with a growing backoff, and its queue refills only then.
DISTURBED_QUIET_MS = 5_000

# The official (C++) client checks its unacknowledged messages once per tick (its default,
# ConsumerConfiguration's tickDurationInMs), so a message comes back between the ack timeout and
# the ack timeout plus a tick.
ACK_TIMEOUT_TICK_MS = 1_000
# The official (C++) client refuses an ack timeout under 10 s.
MIN_ACK_TIMEOUT_MS = 10_000
# The official (C++) client re-arms its one negative-ack timer at every negative ack (since 3.3.0:
# NegativeAcksTracker::add calls scheduleTimer, which sets the timer to fire a third of the delay
# from now), so a consumer that negatively acknowledges more often than that never has its timer
# fire, and asks for none of its redeliveries until it pauses.  Measured against txnmodel serve
# (pulsar-client 3.13.0, delay 300 ms): a nack every 20 or 50 ms for 3 s, first redelivery at
# 3.1 s; every 150 or 250 ms, at 0.47 and 0.52 s.  A nack consumer therefore spaces its negative
# acks by this many timer intervals, and then its timer fires within two intervals after a nack is
# due (one re-arm at most before it fires): the bound it states is delay + 2 intervals + slack.
NACK_SPACING = 2


def nack_timer_ms(delay_ms: int) -> int:
    """The interval of the official client's negative-ack timer: a third of the delay (at least 100 ms)."""
    return max(delay_ms, 100) // 3


@dataclass(frozen=True)
class RecordOptions:
    """``txnmodel record``'s options as values (see :mod:`txnmodel.commands.record`)."""

    url: str
    workload: str
    out: str
    clients: int = 4
    seconds: float | None = None
    ops: int | None = None
    seed: int = 0
    txn: bool = True
    jsonl: bool = False
    partitions: int | None = None
    namespace: str = "public/default"
    operation_timeout_s: int = 5
    send_timeout_ms: int = 3_000
    receive_timeout_ms: int = 100
    broker_tick_ms: int = 1_000
    broker_strict_delay: bool = False
    slack_ms: int = 500
    liveness: bool = True
    quiet_ms: int | None = None  # None: 600 ms, or 5 s with liveness off or once disturbed (clients reconnect slowly)
    max_delay_ms: int | None = None  # None: three broker ticks (longest_delay_ms)
    nack_delay_ms: int = 300
    ack_timeout_ms: int = MIN_ACK_TIMEOUT_MS
    txn_timeout_ms: int = 10_000
    max_drain_s: float = 60.0
    admin_url: str | None = None
    progress: bool = True
    broker_gone_s: float = 10.0  # a broker that refuses connections this long ends the run early
    overwrite: bool = False  # replace a run folder of the same name
    # Python API only: called once the writers are done, before the final drain (a test heals its
    # faults there, as a Jepsen test stops its nemesis before the final reads).
    before_drain: Callable[[], None] | None = field(default=None, compare=False)

    @property
    def quiet(self) -> int:
        """How long every consumer must find nothing, together, to end the final drain.  Under
        faults the official client reconnects with a growing backoff and its consumer's queue
        refills only then: a drain that ends sooner would see a subscription still catching up."""
        if self.quiet_ms is not None:
            return self.quiet_ms
        return 600 if self.liveness else DISTURBED_QUIET_MS

    @property
    def quiet_disturbed(self) -> int:
        """The quiet period once the run saw a consumer disconnected (:meth:`Run.disturbed`): the
        one for faults, unless ``quiet_ms`` was given.  Such a run's clients reconnect with a growing
        backoff as under injected faults, and a drain that ended after the fault-free period had
        reported as lost what a subscription still catching up delivered a second later (found in
        CI: the delayed workload under a nemesis with liveness on, its Shared or Key_Shared
        subscription silent for 0.7 s after its consumers came back)."""
        if self.quiet_ms is not None:
            return self.quiet_ms
        return DISTURBED_QUIET_MS

    @property
    def longest_delay_ms(self) -> int:
        """The delayed workload's longest delay: three broker ticks unless given.  A non-strict broker
        may deliver a tick early, so only a delay past a tick can be caught early: with three ticks,
        two thirds of the delayed messages can."""
        return self.max_delay_ms if self.max_delay_ms is not None else 3 * self.broker_tick_ms

    @property
    def budget_ops(self) -> int | None:
        if self.ops is None and self.seconds is None:
            return 200
        return self.ops


@dataclass(frozen=True)
class Bounds:
    """The liveness bounds the recorder states in the history, for a fault-free run.

    * A delayed message: the broker releases it at the latest one tick after it is due
      (``broker_tick_ms``), dispatches it to a consumer with permits, and a consumer's receive loop
      takes it within one receive timeout (``receive_timeout_ms``); ``slack_ms`` covers the network,
      a busy machine and the clocks (the recorder reads one clock; a broker's that runs ahead of it
      delivers that much early, one that runs behind that much late).
    * A negative ack: the official client asks for the redelivery once the negative-ack delay has
      passed, on a timer that runs every third of that delay and that every negative ack re-arms
      (the nack workload spaces its negative acks by :data:`NACK_SPACING` intervals, so the timer
      fires within two intervals after a nack is due), then as above.
    * An ack timeout: the client redelivers between the timeout and one of its ticks later
      (:data:`ACK_TIMEOUT_TICK_MS`), then as above.

    With ``liveness`` off (faults injected, a cluster being disturbed) no bound is stated and the
    two liveness checks have nothing to judge: they say so in the verdict.  A run with liveness on
    that sees a consumer disconnected withdraws its bounds when the history is written
    (:meth:`Run.disturbed`).
    """

    tick_ms: int
    strict: bool
    receive_ms: int
    slack_ms: int
    liveness: bool

    def deliver_within(self) -> int | None:
        return self.tick_ms + self.receive_ms + self.slack_ms if self.liveness else None

    def deliver_early(self) -> int:
        return 0 if self.strict else self.tick_ms

    def nack_within(self, delay_ms: int) -> int | None:
        return delay_ms + 2 * nack_timer_ms(delay_ms) + self.receive_ms + self.slack_ms if self.liveness else None

    def ack_timeout_within(self) -> int | None:
        return ACK_TIMEOUT_TICK_MS + self.receive_ms + self.slack_ms if self.liveness else None

    def to_json(self) -> dict[str, Any]:
        return {
            "broker_tick_ms": self.tick_ms,
            "broker_strict_delay": self.strict,
            "receive_timeout_ms": self.receive_ms,
            "slack_ms": self.slack_ms,
            "liveness": self.liveness,
            "deliver_within_ms": self.deliver_within(),
            "deliver_early_ms": self.deliver_early(),
        }


class Budget:
    """How much work the writers do: ``ops`` units in all, or until ``seconds`` passed."""

    def __init__(self, ops: int | None, seconds: float | None, on_take: Callable[[], None] = lambda: None) -> None:
        self._left = ops
        self.total = ops
        self.taken = 0
        self._deadline = None if seconds is None else time.monotonic() + seconds
        self._lock = threading.Lock()
        self._on_take = on_take
        self.stopped = threading.Event()

    def left_s(self, elapsed: float) -> float | None:
        """About how long the writers still run: to the deadline, or at the rate so far."""
        if self._deadline is not None:
            return max(0.0, self._deadline - time.monotonic())
        if self.total is None or not self.taken:
            return None
        return elapsed / self.taken * max(0, self.total - self.taken)

    def take(self) -> bool:
        """One more unit of work, if the budget allows."""
        if self.stopped.is_set():
            return False
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self.stopped.set()
            return False
        with self._lock:
            if self._left is not None:
                if self._left <= 0:
                    self.stopped.set()
                    return False
                self._left -= 1
            self.taken += 1
        self._on_take()
        return True


class RunStopped(Exception):
    """The run was stopped (Ctrl-C, SIGTERM, a broker gone) while setting up or winding down."""


class Drain:
    """The final drain of some consumers (see the module docstring)."""

    def __init__(
        self,
        names: list[str],
        quiet_ms: int,
        now_ms: Callable[[], int],
        *,
        disturbed_quiet_ms: int | None = None,
        disturbed: Callable[[], bool] = lambda: False,
    ) -> None:
        self.quiet_ms = quiet_ms
        # Once ``disturbed()`` says the run was not fault-free, the drain waits this long instead.
        self.disturbed_quiet_ms = max(quiet_ms, disturbed_quiet_ms or 0)
        self._disturbed = disturbed
        self._now = now_ms
        self._lock = threading.Lock()
        self._busy: dict[str, int] = dict.fromkeys(names, 0)
        self._idle: dict[str, bool] = dict.fromkeys(names, False)
        # when each consumer's last receive was invoked: an idle consumer's proves the subscription
        # empty only from then on
        self._invoked: dict[str, int] = dict.fromkeys(names, 0)
        self.draining = threading.Event()
        self.done = threading.Event()
        self.timed_out = False
        self.cancelled = threading.Event()  # the run stopped: no drain, the consumers stop now
        self._started_ms: int | None = None

    def saw(self, name: str, *, message: bool, connected: bool, invoked_ms: int) -> None:
        """A consumer's receive, invoked at ``invoked_ms`` (the history's clock, read before the call),
        returned: a message, or nothing (while connected or not).  Only a receive invoked after the
        drain started, so after every send and commit completed, makes its consumer idle: an empty
        receive invoked before (one that returned late on a busy machine) proves nothing about the
        end of the subscription, and a drain ended on it left no such receive in the history."""
        with self._lock:
            after_start = self._started_ms is not None and invoked_ms > self._started_ms
            self._idle[name] = not message and connected and after_start
            self._invoked[name] = invoked_ms
            if message or not connected:
                self._busy[name] = self._now()

    def start(self) -> None:
        now = self._now()
        with self._lock:
            self._started_ms = now
            for name in self._busy:
                self._busy[name] = max(self._busy[name], now)
        self.draining.set()

    def idle_count(self) -> tuple[int, int]:
        """How many consumers found nothing on their last receive, of how many."""
        with self._lock:
            return sum(self._idle.values()), len(self._idle)

    def period_ms(self) -> int:
        """The quiet period that ends the drain now: longer once the run was disturbed."""
        return self.disturbed_quiet_ms if self._disturbed() else self.quiet_ms

    def quiet(self, not_before_ms: int = 0) -> bool:
        """Every consumer found nothing, on a receive invoked at or after ``not_before_ms``, and has
        been quiet for the period."""
        period = self.period_ms()
        now = self._now()
        with self._lock:
            return (
                all(self._idle.values())
                and all(invoked >= not_before_ms for invoked in self._invoked.values())
                and all(now - busy >= period for busy in self._busy.values())
            )

    def wait(self, not_before_ms: int, max_s: float) -> None:
        """Start the drain and return once every consumer is quiet with an empty receive invoked at
        or after ``not_before_ms`` (or ``max_s`` passed): a workload that states a liveness bound
        passes the time by which everything must have come, so that the history shows every consumer
        finding nothing after it (what ``late-delivery`` judges)."""
        self.start()
        deadline = time.monotonic() + max_s
        while not self.cancelled.is_set():
            if self.quiet(not_before_ms):
                break
            if time.monotonic() >= deadline:
                self.timed_out = True
                break
            time.sleep(0.02)
        self.done.set()

    def cancel(self) -> None:
        """The run stopped: end the drain (and with it the consumers' loops) now."""
        self.cancelled.set()
        self.done.set()


class Run:
    """One recording: its history log, fresh names, threads and the clients to close."""

    def __init__(self, options: RecordOptions, log: HistoryLog) -> None:
        self.options = options
        self.log = log
        self.run_id = uuid.uuid4().hex[:12]
        self.prefix = f"txnmodel-{options.workload}-{self.run_id}"
        self.topics: list[str] = []
        self.consumers: list[Any] = []  # OfficialConsumer, for the cleanup
        self.sessions: list[Any] = []  # WireSession, closed at the end
        self._clients: list[Any] = []
        self._threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.notes: list[str] = []
        self.bounds = Bounds(
            options.broker_tick_ms,
            options.broker_strict_delay,
            options.receive_timeout_ms,
            options.slack_ms,
            options.liveness,
        )
        self._payloads = 0
        self._lock = threading.Lock()
        self.drains: list[Drain] = []
        self.budget: Budget | None = None
        self.stopping = threading.Event()
        self.finished = threading.Event()  # the run is over (stopped or not): the watchdog leaves
        self.broker_gone = False
        self.disturbance: str | None = None  # the first sign that the run was not fault-free
        self.stop_reason: str | None = None
        self.stopped_at_ms: int | None = None
        self.phase = "setup"  # setup, writers, drain, cleanup, write: where a stop found the run

    def drain(self, names: list[str], quiet_ms: int) -> Drain:
        """A final drain of ``names``, cancelled if the run stops."""
        drain = Drain(
            names,
            quiet_ms,
            self.log.clock.now_ms,
            disturbed_quiet_ms=self.options.quiet_disturbed,
            disturbed=lambda: self.disturbance is not None,
        )
        with self._lock:
            self.drains.append(drain)
            stopped = self.stopping.is_set()
        if stopped:
            drain.cancel()
        return drain

    def stop(self, reason: str) -> None:
        """Stop the run (any thread, once; the first reason is kept): the writers take no more work,
        every drain ends now, the setup's retries give up (:meth:`check`)."""
        with self._lock:
            if self.stop_reason is None:
                self.stop_reason = reason
                self.stopped_at_ms = self.log.clock.now_ms()
            drains = list(self.drains)
        self.stopping.set()
        if self.budget is not None:
            self.budget.stopped.set()
        for drain in drains:
            drain.cancel()

    def at(self, unix_ms: int) -> str:
        """A time of the run as the reports say it: ``+1.2 s`` from its start."""
        return f"+{(unix_ms - self.log.clock.unix_ms_at_start()) / 1000:.1f} s"

    def disturbed(self, what: str) -> None:
        """A sign that the run is not fault-free (a consumer disconnected): the liveness bounds the
        recorder stated hold for a fault-free run only, and are withdrawn when the history is written."""
        with self._lock:
            if self.disturbance is None:
                self.disturbance = what

    def check(self) -> None:
        """Raise :class:`RunStopped` once the run was stopped (the setup's retry loops call it)."""
        if self.stopping.is_set():
            raise RunStopped(self.stop_reason or "stopped")

    def pause(self, seconds: float) -> None:
        """Sleep between retries; :class:`RunStopped` at once if the run stops meanwhile."""
        self.check()
        if self.stopping.wait(seconds):
            self.check()

    def watch_broker(self, host: str, port: int) -> threading.Thread:
        """Stop the run once the broker has been unreachable for ``broker_gone_s`` seconds (it died:
        nothing more can be recorded, and what was is kept).  Unreachable: every consumer of the
        run is disconnected (or none is attached yet) and a TCP connection to it is refused, so a
        run whose consumers are connected never opens a connection of its own."""

        def reachable() -> bool:
            if any(consumer.connected() for consumer in list(self.consumers)):
                return True
            try:
                with socket.create_connection((host, port), timeout=1.0):
                    return True
            except OSError:
                return False

        def watch() -> None:
            since: float | None = None
            while not self.stopping.wait(0.5) and not self.finished.is_set():
                if reachable():
                    since = None
                    continue
                now = time.monotonic()
                since = now if since is None else since
                if now - since >= self.options.broker_gone_s:
                    gone_ms = self.log.clock.now_ms() - int((now - since) * 1000)
                    self.broker_gone = True
                    self.stop(f"the broker at {self.options.url} has been unreachable since {self.at(gone_ms)}")
                    return

        thread = threading.Thread(target=watch, name="record-watchdog", daemon=True)
        thread.start()
        return thread

    def topic(self, name: str) -> str:
        full = f"persistent://{self.options.namespace}/{self.prefix}-{name}"
        self.topics.append(full)
        return full

    def payload(self, label: str, n: int) -> str:
        """Unique in the run (and across runs: the prefix holds a random run id)."""
        return f"{self.run_id}:{label}:{n}"

    def rng(self, label: str) -> random.Random:
        return random.Random(f"{self.options.seed}:{label}")

    def client(self) -> Any:
        """A new official client (one connection pool) with the run's short timeouts."""
        import pulsar

        client = pulsar.Client(
            self.options.url,
            operation_timeout_seconds=self.options.operation_timeout_s,
            connection_timeout_ms=3_000,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        with self._lock:
            self._clients.append(client)
        return client

    def thread(self, target: Callable[..., None], *args: Any, name: str) -> threading.Thread:
        def body() -> None:
            try:
                target(*args)
            except RunStopped:
                return  # the run stopped while this thread was setting something up
            except BaseException as exc:  # surfaced by the run: a recorder bug is never silent
                with self._lock:
                    self.errors.append(exc)

        thread = threading.Thread(target=body, name=f"record-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def join(self, threads: list[threading.Thread], timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                self.notes.append(f"thread {thread.name} did not finish within {timeout_s:.0f} s")

    def wind_down(self, timeout_s: float) -> list[str]:
        """After a stop: wait up to ``timeout_s`` for every thread of the run to finish its call in
        flight; the names of those still busy (their operations stay open: unknown outcomes)."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [thread.name for thread in self._threads if thread.is_alive()]

    def close_clients(self) -> None:
        for session in self.sessions:
            session.close()
        for client in self._clients:
            try:
                client.close()
            except Exception as exc:  # closing is best effort; a client that cannot close is noted
                self.notes.append(f"closing a client: {type(exc).__name__}: {exc}")
