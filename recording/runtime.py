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
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recording.log import HistoryLog

__all__ = ["ACK_TIMEOUT_TICK_MS", "Bounds", "Budget", "Drain", "RecordOptions", "Run"]

# The official (C++) client checks its unacknowledged messages once per tick (its default,
# ConsumerConfiguration's tickDurationInMs), so a message comes back between the ack timeout and
# the ack timeout plus a tick.
ACK_TIMEOUT_TICK_MS = 1_000
# The official (C++) client refuses an ack timeout under 10 s.
MIN_ACK_TIMEOUT_MS = 10_000


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
    quiet_ms: int | None = None  # None: 600 ms, or 5 s with liveness off (faults: clients reconnect slowly)
    max_delay_ms: int = 400
    nack_delay_ms: int = 300
    ack_timeout_ms: int = MIN_ACK_TIMEOUT_MS
    txn_timeout_ms: int = 10_000
    max_drain_s: float = 60.0
    admin_url: str | None = None
    progress: bool = True
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
        return 600 if self.liveness else 5_000

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
    * A negative ack: the official client redelivers once the negative-ack delay has passed, on a
      timer that runs every third of that delay, then as above.
    * An ack timeout: the client redelivers between the timeout and one of its ticks later
      (:data:`ACK_TIMEOUT_TICK_MS`), then as above.

    With ``liveness`` off (faults injected, a cluster being disturbed) no bound is stated and the
    two liveness checks have nothing to judge: they say so in the verdict.
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
        return delay_ms + delay_ms // 3 + self.receive_ms + self.slack_ms if self.liveness else None

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
        self._deadline = None if seconds is None else time.monotonic() + seconds
        self._lock = threading.Lock()
        self._on_take = on_take
        self.stopped = threading.Event()

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
        self._on_take()
        return True


class Drain:
    """The final drain of some consumers (see the module docstring)."""

    def __init__(self, names: list[str], quiet_ms: int, now_ms: Callable[[], int]) -> None:
        self.quiet_ms = quiet_ms
        self._now = now_ms
        self._lock = threading.Lock()
        self._busy: dict[str, int] = dict.fromkeys(names, 0)
        self._idle: dict[str, bool] = dict.fromkeys(names, False)
        self.draining = threading.Event()
        self.done = threading.Event()
        self.timed_out = False
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
            if message or not connected:
                self._busy[name] = self._now()

    def start(self) -> None:
        now = self._now()
        with self._lock:
            self._started_ms = now
            for name in self._busy:
                self._busy[name] = max(self._busy[name], now)
        self.draining.set()

    def quiet(self) -> bool:
        now = self._now()
        with self._lock:
            return all(self._idle.values()) and all(now - busy >= self.quiet_ms for busy in self._busy.values())

    def wait(self, not_before_ms: int, max_s: float) -> None:
        """Start the drain and return once every consumer is quiet (or ``max_s`` passed)."""
        self.start()
        deadline = time.monotonic() + max_s
        while True:
            if self._now() >= not_before_ms and self.quiet():
                break
            if time.monotonic() >= deadline:
                self.timed_out = True
                break
            time.sleep(0.02)
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

    def close_clients(self) -> None:
        for session in self.sessions:
            session.close()
        for client in self._clients:
            try:
                client.close()
            except Exception as exc:  # closing is best effort; a client that cannot close is noted
                self.notes.append(f"closing a client: {type(exc).__name__}: {exc}")
