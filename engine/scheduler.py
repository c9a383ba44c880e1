"""The deterministic scheduler every engine component runs on.

One :class:`Simulation` owns the logical clock (milliseconds), one ``random.Random(seed)`` from
which every random choice of a run is drawn, and one queue of events ordered by ``(due time,
insertion number)``.  Events run one at a time; nothing runs concurrently and nothing reads a
wall clock, so the same seed gives the same run, event for event.

Asynchrony is expressed with :class:`Future` (a value that arrives later) and with *processes*:
generator functions that ``yield`` a future and are resumed, by the scheduler, with its value.
The synchronous client facade simply runs the scheduler until the future it waits for is done.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

__all__ = ["NETWORK_LATENCY_MS", "Future", "Network", "NetworkFaults", "Process", "SimTimeout", "Simulation", "spawn"]

T = TypeVar("T")


class SimTimeout(Exception):
    """The simulation ran out of events or of its time budget before a future completed."""


class Future(Generic[T]):
    """A value that a later event provides.  Completing twice is ignored (a duplicated response)."""

    __slots__ = ("_callbacks", "_done", "_error", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Future[T]], None]] = []

    @property
    def done(self) -> bool:
        return self._done

    def set_result(self, value: T) -> None:
        if self._done:
            return
        self._done, self._value = True, value
        self._fire()

    def set_exception(self, error: BaseException) -> None:
        if self._done:
            return
        self._done, self._error = True, error
        self._fire()

    def result(self) -> T:
        if not self._done:
            raise RuntimeError("future is not done")
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[no-any-return]

    @property
    def error(self) -> BaseException | None:
        return self._error

    def add_done_callback(self, callback: Callable[[Future[T]], None]) -> None:
        if self._done:
            callback(self)
        else:
            self._callbacks.append(callback)

    def _fire(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    @staticmethod
    def completed(value: T) -> Future[T]:
        future: Future[T] = Future()
        future.set_result(value)
        return future


# Bound once: every event is pushed and popped through them (millions in a main job).
_heappush: Final = heapq.heappush
_heappop: Final = heapq.heappop

# An event is ``(due, number, action)``: a plain tuple compares in C, and the unique insertion
# number settles every tie before the action would be compared.
_Event = tuple[int, int, Callable[[], None]]


class Simulation:
    """Logical time, one seeded random source, and the event queue."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 0
        self._queue: list[_Event] = []
        self._number = 0
        self.events_run = 0
        # Told of an exception an event raised; True: handled (the run goes on), False: raised on.
        # The cluster contains a broker component's failure with it (``Broker.contain``); without
        # it every exception ends the run, as before.
        self.on_error: Callable[[Exception], bool] | None = None

    def schedule(self, delay_ms: int, action: Callable[[], None]) -> None:
        """Run ``action`` ``delay_ms`` from now (0: after every event already due now)."""
        if delay_ms < 0:
            raise ValueError(f"delay_ms={delay_ms} must be >= 0")
        self._number = number = self._number + 1
        _heappush(self._queue, (self.now + delay_ms, number, action))

    def sleep(self, delay_ms: int) -> Future[None]:
        future: Future[None] = Future()
        self.schedule(delay_ms, lambda: future.set_result(None))
        return future

    @property
    def pending(self) -> int:
        return len(self._queue)

    def next_due(self) -> int | None:
        return self._queue[0][0] if self._queue else None

    def run_one(self) -> bool:
        """Run the next event; False when the queue is empty."""
        queue = self._queue
        if not queue:
            return False
        due, _, action = _heappop(queue)
        if due > self.now:
            self.now = due
        self.events_run += 1
        try:
            action()
        except Exception as exc:
            if self.on_error is None or not self.on_error(exc):
                raise
        return True

    def run_until(self, done: Callable[[], bool], *, max_time_ms: int | None = None) -> None:
        """Run events until ``done()``; raise :class:`SimTimeout` if the queue empties or the clock
        would pass ``max_time_ms`` first."""
        while not done():
            due = self.next_due()
            if due is None:
                raise SimTimeout(f"no more events at {self.now} ms")
            if max_time_ms is not None and due > max_time_ms:
                self.now = max(self.now, max_time_ms)
                raise SimTimeout(f"time budget {max_time_ms} ms reached")
            self.run_one()

    def wait(self, future: Future[T], *, timeout_ms: int | None = None) -> T:
        """Run the simulation until ``future`` is done and return its value (the synchronous facade)."""
        limit = None if timeout_ms is None else self.now + timeout_ms
        self.run_until(lambda: future.done, max_time_ms=limit)
        return future.result()

    def advance(self, ms: int) -> None:
        """Run every event due in the next ``ms`` and move the clock there."""
        target = self.now + ms
        while (due := self.next_due()) is not None and due <= target:
            self.run_one()
        self.now = target

    def run_all(self, *, max_time_ms: int | None = None) -> None:
        while (due := self.next_due()) is not None:
            if max_time_ms is not None and due > max_time_ms:
                break
            self.run_one()


Process = Generator["Future[Any]", Any, None]


def spawn(sim: Simulation, process: Process, on_exit: Callable[[BaseException | None], None] | None = None) -> None:
    """Drive a generator process: each yielded future resumes it with its value (or its exception)."""

    def resume(sent: Future[Any] | None) -> None:
        try:
            if sent is None:
                waiting = next(process)
            elif sent.error is not None:
                waiting = process.throw(sent.error)
            else:
                waiting = process.send(sent.result())
        except StopIteration:
            if on_exit is not None:
                on_exit(None)
            return
        except Exception as exc:  # a workload bug: surface it to whoever drives the run
            if on_exit is not None:
                on_exit(exc)
                return
            raise
        waiting.add_done_callback(lambda f: sim.schedule(0, lambda: resume(f)))

    sim.schedule(0, lambda: resume(None))


@dataclass
class NetworkFaults:
    """Probabilities of the network faults (each drawn from the simulation's random source)."""

    drop_request: float = 0.0
    drop_response: float = 0.0
    duplicate_request: float = 0.0
    max_extra_delay_ms: int = 0


# Each way, drawn uniformly from this range (ms).
NETWORK_LATENCY_MS = (1, 3)


class Network:
    """Client <-> broker messages with a latency, and the faults a network plays.

    :meth:`call` delivers a request to ``handler`` after a latency; the handler returns a future of
    the response, which travels back after another latency.  A dropped request never reaches the
    broker; a dropped response took effect but never comes back; a duplicated request runs the
    handler twice (the second answer is ignored).  Only requests marked ``idempotent`` are ever
    duplicated (TCP does not duplicate; a client's retry does, and clients retry only those).

    ``observer`` (a :class:`~engine.recorder.MachineObserver`, set by the cluster) learns
    when each delivery's handler runs and when its answer reaches the client, so the machine steps
    the handler made get the request's window in the history.

    ``barrier`` (set when the broker's store commits its journal in groups) holds every answer
    until what the broker wrote before it is durable: ``barrier(send)`` calls ``send`` then, or
    never if the power goes first -- as a database flushes its log before it replies.
    """

    def __init__(
        self,
        sim: Simulation,
        *,
        latency_ms: tuple[int, int] = NETWORK_LATENCY_MS,
        faults: NetworkFaults | None = None,
        barrier: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.sim = sim
        self.latency_ms = latency_ms
        self.faults = faults or NetworkFaults()
        self.barrier = barrier
        self.dropped = 0
        self.duplicated = 0
        self.observer: Any = None

    def _latency(self) -> int:
        low, high = self.latency_ms
        delay = self.sim.rng.randint(low, high)
        if self.faults.max_extra_delay_ms and self.sim.rng.random() < 0.1:
            delay += self.sim.rng.randint(0, self.faults.max_extra_delay_ms)
        return delay

    def _chance(self, p: float) -> bool:
        return p > 0 and self.sim.rng.random() < p

    def call(self, handler: Callable[[], Future[T]], *, idempotent: bool = False) -> Future[T]:
        answer: Future[T] = Future()
        copies = 2 if idempotent and self._chance(self.faults.duplicate_request) else 1
        self.duplicated += copies - 1
        sent_at = self.sim.now
        for _ in range(copies):
            if self._chance(self.faults.drop_request):
                self.dropped += 1
                continue
            self.sim.schedule(self._latency(), lambda: self._deliver(handler, answer, sent_at))
        return answer

    def _deliver(self, handler: Callable[[], Future[T]], answer: Future[T], sent_at: int = 0) -> None:
        observer = self.observer
        context = None
        if observer is not None:
            context = observer.begin_request(sent_at)
            try:
                response = handler()
            finally:
                observer.end_request()
        else:
            response = handler()

        def back(done: Future[T]) -> None:
            if self._chance(self.faults.drop_response):
                self.dropped += 1
                return

            def arrive() -> None:
                if context is not None:
                    observer.answered(context, done.error is None)
                if done.error is not None:
                    answer.set_exception(done.error)
                else:
                    answer.set_result(done.result())

            delay = self._latency()  # drawn now, with or without a barrier: the same random sequence
            if self.barrier is None:
                self.sim.schedule(delay, arrive)
            else:
                self.barrier(lambda: self.sim.schedule(delay, arrive))

        response.add_done_callback(back)
