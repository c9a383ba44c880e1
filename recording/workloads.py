"""The named workloads of ``txnmodel record``.

==================  ========================================================================  ==========
workload            what the clients do                                                       needs txns
==================  ========================================================================  ==========
produce-consume     writers send keyed messages (some through a batching producer); one       no
                    subscription of each type reads them: Exclusive (1 consumer), Failover,
                    Shared and Key_Shared (2 each); consumers acknowledge, Exclusive and
                    Failover cumulatively now and then.  Loss, positions, order, Key_Shared
                    per-key order.
nack                a Shared (2 consumers) and an Exclusive subscription negatively           no
                    acknowledge about a third of first deliveries (at most one per
                    consumer every two timer intervals, 200 ms: ``NACK_SPACING``) and
                    acknowledge the rest.  Loss and redelivery after a negative ack
                    within the stated bound.
ack-timeout         a Shared subscription (2 consumers, ack timeout 10 s) leaves about a      no
                    quarter of first deliveries unacknowledged.  Redelivery after the ack
                    timeout within the stated bound (the run lasts at least 12 s).
delayed             writers send plain messages and messages delayed by ``deliver_after``    no
                    and by ``deliver_at`` (up to three broker ticks); Shared, Key_Shared and
                    Exclusive subscriptions read them.  Never early, and within the stated
                    bound after due.
ctp                 consume-transform-produce: a plain writer fills an input topic; each      yes
                    transformer (wire client) takes messages from a Shared subscription,
                    sends a transformed message per input to an output topic and acks the
                    input inside one transaction, then commits (85%) or aborts, and asks
                    to abort one committed transaction in ten again; after every fourth
                    transaction it restarts (reconnects).  Readers (official client)
                    read the outputs committed.
multi               atomic multi-partition produce: writers send one message to each output  yes
                    topic inside a transaction and commit (80%) or abort (and ask to abort
                    one committed transaction in ten again), beside a plain writer;
                    non-transactional readers read every topic concurrently.
==================  ========================================================================  ==========

Every workload's topics are fresh (the run's unique prefix); every subscription starts at
Earliest and is attached before anything is sent, so every message must reach it.

**The checks a workload names** (:data:`CHECKS`, also in each history's run metadata) are the
checks of ``txnmodel verify`` it is built to exercise, and every one of them can fire at the
workload's default options: ``tests/recording/test_teeth.py`` records ``txnmodel serve`` with a
quirk that breaks each check (``engine/serve/quirks.py``) at the defaults and sees exactly that
anomaly flagged.  That is why the delayed workload's longest delay defaults to three broker ticks
(a non-strict broker may deliver a tick early, so shorter delays could never be caught early), why
ctp and multi now and then ask to abort a transaction they committed (a correct broker refuses;
one that accepts both ends is caught by commit-and-abort), and why a nack consumer spaces its
negative acks (below).  The checks that hold of every history (garbage-read,
inconsistent-position, ...) are named where a workload exercises them on purpose.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from recording.clients import OfficialConsumer, OfficialProducer, WireSession
from recording.log import Process
from recording.runtime import NACK_SPACING, Budget, Drain, Run, nack_timer_ms

__all__ = ["CHECKS", "NEEDS_TXN", "WORKLOADS", "WorkloadResult"]


@dataclass
class WorkloadResult:
    """What a workload reports besides its history (goes into the run metadata)."""

    topics: list[str] = field(default_factory=list)
    subscriptions: list[str] = field(default_factory=list)
    units: int = 0
    drain_timed_out: bool = False
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class _Sub:
    name: str
    sub_type: str
    consumers: int


def _consumer_loop(
    run: Run,
    consumer: OfficialConsumer,
    process: Process,
    drain: Drain,
    on_message: Callable[[Process, OfficialConsumer, Any], None],
) -> None:
    """Receive until the drain is done; ``on_message`` acknowledges (or not) what arrived."""
    timeout = run.options.receive_timeout_ms
    while not drain.done.is_set():
        # Connected before and after, as the receive's own record says (OfficialConsumer.receive): an
        # empty receive across a reconnection is not a drain in the history, nor an idle one here.
        invoked, before = run.log.clock.now_ms(), consumer.connected()
        message = consumer.receive(process, timeout)
        connected = before and consumer.connected()
        if not connected and not run.stopping.is_set():
            run.disturbed(f"consumer {consumer.name} was disconnected at {run.at(invoked)}")
        drain.saw(consumer.name, message=message is not None, connected=connected, invoked_ms=invoked)
        if message is not None:
            on_message(process, consumer, message)


def _attach(
    run: Run,
    topics: list[str],
    subs: list[_Sub],
    *,
    options: dict[str, Any] | None = None,
    stated: dict[str, Any] | None = None,
) -> list[tuple[OfficialConsumer, Process]]:
    """Subscribe every consumer of every subscription (one client per subscription) before anything
    is sent.  A subscribe that does not return ok is retried with a fresh process (its consumer may
    or may not exist: the history says so) until it does or the run gives up."""
    attached = []
    if not run.options.liveness:
        stated = {**(stated or {}), "liveness": False}  # no liveness bound holds: said on every subscribe
    for topic in topics:
        for sub in subs:
            client = run.client()
            for i in range(sub.consumers):
                name = f"{sub.name}-{topic.rsplit('-', 1)[-1]}-c{i}"
                process = Process(run.log)
                consumer = None
                for _ in range(20):
                    run.check()
                    consumer = OfficialConsumer.subscribe(
                        process,
                        client,
                        topic,
                        sub.name,
                        sub_type=sub.sub_type,
                        name=name,
                        options=options,
                        stated=stated,
                    )
                    if consumer is not None:
                        break
                    run.pause(0.2)
                if consumer is None:
                    raise RuntimeError(f"could not subscribe {name} to {topic} ({sub.name})")
                run.consumers.append(consumer)
                attached.append((consumer, process))
    return attached


def _start_consumers(
    run: Run,
    attached: list[tuple[OfficialConsumer, Process]],
    on_message: Callable[[Process, OfficialConsumer, Any], None],
    quiet_ms: int,
) -> tuple[Drain, list[threading.Thread]]:
    drain = run.drain([c.name for c, _ in attached], quiet_ms)
    threads = [
        run.thread(_consumer_loop, run, consumer, process, drain, on_message, name=consumer.name)
        for consumer, process in attached
    ]
    return drain, threads


def _finish(
    run: Run, drain: Drain, consumers: list[threading.Thread], not_before_ms: int = 0, extra_s: float = 0.0
) -> bool:
    """Heal hook, final drain, consumers joined; whether the drain timed out."""
    run.phase = "drain"
    if run.options.before_drain is not None:
        run.options.before_drain()
    drain.wait(not_before_ms, run.options.max_drain_s + extra_s)
    run.join(consumers)
    return drain.timed_out


def _acknowledger(run: Run, cumulative_every: int = 0) -> Callable[[Process, OfficialConsumer, Any], None]:
    counts: dict[str, int] = {}

    def on_message(process: Process, consumer: OfficialConsumer, message: Any) -> None:
        counts[consumer.name] = counts.get(consumer.name, 0) + 1
        cumulative = (
            cumulative_every > 0
            and consumer.sub_type in ("Exclusive", "Failover")
            and counts[consumer.name] % cumulative_every == 0
        )
        consumer.acknowledge(process, message, cumulative=cumulative)

    return on_message


def _create_producer(run: Run, client: Any, topic: str, **options: Any) -> Any:
    """A producer, retried while the broker does not answer (a lost answer, a broker restarting)."""
    last: Exception | None = None
    for _ in range(20):
        run.check()
        try:
            return client.create_producer(topic, send_timeout_millis=run.options.send_timeout_ms, **options)
        except Exception as exc:  # the official client's errors: retried, the last one raised
            last = exc
            run.pause(0.2)
    raise RuntimeError(f"could not create a producer on {topic}: {last}")


class _Txns:
    """When every transaction the writers may have left open has surely ended at the broker: one
    whose end did not return ok stays open until its coordinator times it out (TC-18), and until
    then it holds back every later message of its partitions (TB-15).  The final drain waits for
    that, or a committed message behind it would look lost."""

    def __init__(self, timeout_ms: int, slack_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.slack_ms = slack_ms
        self.until = 0
        self._lock = threading.Lock()

    def ended(self, started_ms: int, ok: bool) -> None:
        if not ok:
            with self._lock:
                self.until = max(self.until, started_ms + self.timeout_ms + self.slack_ms)


def _producers(run: Run, topics: list[str], writers: int) -> list[dict[str, OfficialProducer]]:
    """One producer map per writer thread: writers pair up on a client; the even pairs share one
    batching producer per topic (their concurrent sends batch together), the others send alone."""
    maps: list[dict[str, OfficialProducer]] = []
    shared: dict[tuple[int, str], OfficialProducer] = {}
    clients: dict[int, Any] = {}
    for writer in range(writers):
        pair = writer // 2
        client = clients.setdefault(pair, run.client())
        mine = {}
        for topic in topics:
            if pair % 2 == 0:
                if (pair, topic) not in shared:
                    shared[(pair, topic)] = OfficialProducer(
                        _create_producer(run, client, topic, batching_enabled=True, batching_max_publish_delay_ms=5),
                        topic,
                    )
                mine[topic] = shared[(pair, topic)]
            else:
                mine[topic] = OfficialProducer(_create_producer(run, client, topic), topic)
        maps.append(mine)
    return maps


def _writer(
    run: Run,
    budget: Budget,
    label: str,
    producers: dict[str, OfficialProducer],
    choose: Callable[[Any, int], dict[str, Any]],
) -> None:
    process = Process(run.log)
    rng = run.rng(label)
    topics = sorted(producers)
    n = 0
    while budget.take():
        topic = topics[rng.randrange(len(topics))]
        producers[topic].send(process, run.payload(label, n), **choose(rng, n))
        n += 1


def _plain_writers(run: Run, budget: Budget, topics: list[str], keys: int = 8) -> list[threading.Thread]:
    def choose(rng: Any, n: int) -> dict[str, Any]:
        return {"key": f"k{rng.randrange(keys)}"}

    maps = _producers(run, topics, run.options.clients)
    return [run.thread(_writer, run, budget, f"w{i}", maps[i], choose, name=f"w{i}") for i in range(len(maps))]


def _partitions(run: Run, default: int) -> int:
    return run.options.partitions if run.options.partitions is not None else default


# -- the workloads ---------------------------------------------------------------------------------


def produce_consume(run: Run, budget: Budget) -> WorkloadResult:
    topics = [run.topic(f"p{i}") for i in range(_partitions(run, 1))]
    subs = [_Sub("exclusive", "Exclusive", 1), _Sub("failover", "Failover", 2), _Sub("shared", "Shared", 2)]
    subs.append(_Sub("key-shared", "Key_Shared", 2))
    attached = _attach(run, topics, subs)
    drain, consumers = _start_consumers(run, attached, _acknowledger(run, cumulative_every=4), run.options.quiet)
    run.join(_plain_writers(run, budget, topics))
    timed_out = _finish(run, drain, consumers)
    return WorkloadResult(topics, [s.name for s in subs], drain_timed_out=timed_out)


def nack(run: Run, budget: Budget) -> WorkloadResult:
    topics = [run.topic(f"p{i}") for i in range(_partitions(run, 1))]
    delay = run.options.nack_delay_ms
    within = run.bounds.nack_within(delay)
    subs = [_Sub("shared", "Shared", 2), _Sub("exclusive", "Exclusive", 1)]
    attached = _attach(run, topics, subs, options={"negative_ack_redelivery_delay_ms": delay})
    rngs: dict[str, Any] = {}
    last_nack: dict[str, int] = {}
    spacing = NACK_SPACING * nack_timer_ms(delay)
    nacked = [0]

    def on_message(process: Process, consumer: OfficialConsumer, message: Any) -> None:
        rng = rngs.setdefault(consumer.name, run.rng(consumer.name))
        now = run.log.clock.now_ms()
        spaced = now - last_nack.get(consumer.name, -spacing) >= spacing
        if message.redelivery_count() == 0 and rng.random() < 0.33 and spaced:
            nacked[0] += 1
            consumer.negative_acknowledge(process, message, within_ms=within)
            last_nack[consumer.name] = run.log.clock.now_ms()
        else:
            consumer.acknowledge(process, message)

    # Quiet for longer than the stated bound: a negative ack made just before the drain started
    # must still have an empty receive after its redelivery was due.
    quiet = max(run.options.quiet, (within or delay) + 2 * run.options.receive_timeout_ms)
    drain, consumers = _start_consumers(run, attached, on_message, quiet)
    run.join(_plain_writers(run, budget, topics))
    timed_out = _finish(run, drain, consumers)
    return WorkloadResult(topics, [s.name for s in subs], drain_timed_out=timed_out, details={"nacked": nacked[0]})


def ack_timeout(run: Run, budget: Budget) -> WorkloadResult:
    topics = [run.topic(f"p{i}") for i in range(_partitions(run, 1))]
    timeout = run.options.ack_timeout_ms
    stated: dict[str, Any] = {"ack_timeout_ms": timeout}
    within = run.bounds.ack_timeout_within()
    if within is not None:
        stated["redeliver_within_ms"] = within
    subs = [_Sub("shared", "Shared", 2)]
    attached = _attach(run, topics, subs, options={"unacked_messages_timeout_ms": timeout}, stated=stated)
    rngs: dict[str, Any] = {}
    left = [0]

    def on_message(process: Process, consumer: OfficialConsumer, message: Any) -> None:
        rng = rngs.setdefault(consumer.name, run.rng(consumer.name))
        if message.redelivery_count() == 0 and rng.random() < 0.25:
            left[0] += 1  # not acknowledged: the client redelivers it after the ack timeout
            return
        consumer.acknowledge(process, message)

    quiet = max(run.options.quiet, timeout + 2 * 1_000 + run.options.slack_ms)
    drain, consumers = _start_consumers(run, attached, on_message, quiet)
    run.join(_plain_writers(run, budget, topics))
    timed_out = _finish(run, drain, consumers, extra_s=timeout / 1000)
    return WorkloadResult(topics, [s.name for s in subs], drain_timed_out=timed_out, details={"left_unacked": left[0]})


def delayed(run: Run, budget: Budget) -> WorkloadResult:
    topics = [run.topic(f"p{i}") for i in range(_partitions(run, 1))]
    subs = [_Sub("shared", "Shared", 2), _Sub("key-shared", "Key_Shared", 2), _Sub("exclusive", "Exclusive", 1)]
    attached = _attach(run, topics, subs)
    drain, consumers = _start_consumers(run, attached, _acknowledger(run), run.options.quiet)
    stated: dict[str, Any] = {"deliver_early_ms": run.bounds.deliver_early()}
    within = run.bounds.deliver_within()
    if within is not None:
        stated["deliver_within_ms"] = within
    latest = [0]
    clock = run.log.clock

    longest = run.options.longest_delay_ms

    def choose(rng: Any, n: int) -> dict[str, Any]:
        kind = rng.random()
        delay = rng.randrange(longest + 1)
        args: dict[str, Any] = {"key": f"k{rng.randrange(8)}"}
        if kind < 0.4:
            return args
        if kind < 0.7:
            args["deliver_after_ms"] = delay
        else:
            args["deliver_at_ms"] = clock.now_ms() + delay
        latest[0] = max(latest[0], clock.now_ms() + delay)
        return {**args, "extra": stated}

    maps = _producers(run, topics, run.options.clients)
    writers = [run.thread(_writer, run, budget, f"w{i}", maps[i], choose, name=f"w{i}") for i in range(len(maps))]
    run.join(writers)
    # Every delayed message must have come by its time plus the bound the sends state: the drain
    # goes on until each consumer found nothing after that, so late-delivery can judge the last ones
    # too (with a drain ending at the quiet period, a burst of sends, all delayed by a few ticks,
    # could leave no empty receive past any message's bound).  The bound is counted from the send's
    # invocation, a moment after ``choose`` read the clock: one receive timeout covers that.
    bound = within if within is not None else run.options.broker_tick_ms + run.options.slack_ms
    not_before = latest[0] + bound + run.options.receive_timeout_ms
    timed_out = _finish(run, drain, consumers, not_before_ms=not_before)
    return WorkloadResult(topics, [s.name for s in subs], drain_timed_out=timed_out)


def _end_again(session: WireSession, process: Process, txn: Any, rng: Any, *, committed: bool) -> None:
    """Now and then, ask to abort a transaction that committed: a transaction ends once (TC-6), so a
    correct broker refuses (the abort fails and changes nothing); one that accepts is caught by
    commit-and-abort.  A refused second end leaves nothing open, so the drain need not wait for it."""
    if committed and rng.random() < END_AGAIN:
        session.end(process, txn, commit=False)


def _reader_subs() -> list[_Sub]:
    return [_Sub("reader", "Exclusive", 1), _Sub("shared-reader", "Shared", 2)]


def ctp(run: Run, budget: Budget) -> WorkloadResult:
    """Consume-transform-produce (see the module docstring)."""
    source = run.topic("in")
    outputs = [run.topic(f"out{i}") for i in range(_partitions(run, 2))]
    attached = _attach(run, outputs, _reader_subs())
    drain, readers = _start_consumers(run, attached, _acknowledger(run), run.options.quiet)
    # The input's writer: the budget counts input messages.
    input_producer = OfficialProducer(_create_producer(run, run.client(), source), source)
    names = [f"ctp-t{i}" for i in range(run.options.clients)]
    sessions = [WireSession(run.options.url, run.options.operation_timeout_s) for _ in names]
    run.sessions.extend(sessions)
    for session, name in zip(sessions, names, strict=True):
        process = Process(run.log)
        for _ in range(20):
            run.check()
            if session.subscribe(process, source, "ctp", "Shared", name, liveness=run.options.liveness):
                break
            run.pause(0.2)
        else:
            raise RuntimeError(f"could not subscribe {name} to {source}")
    transform_drain = run.drain(names, run.options.quiet)
    counts = {"committed": 0, "aborted": 0, "unknown": 0, "restarts": 0}
    lock = threading.Lock()
    txns = _Txns(run.options.txn_timeout_ms, 2_000 + run.options.slack_ms)

    def transformer(index: int, session: WireSession) -> None:
        name = names[index]
        rng = run.rng(name)
        process = Process(run.log)
        n = done = 0
        while not transform_drain.done.is_set():
            invoked = run.log.clock.now_ms()
            if not session.ensure_consumer(process):
                transform_drain.saw(name, message=False, connected=False, invoked_ms=invoked)
                time.sleep(0.1)
                continue
            message = session.receive(process, run.options.receive_timeout_ms / 1000)
            connected = session.consumer is not None
            transform_drain.saw(name, message=message is not None, connected=connected, invoked_ms=invoked)
            if message is None:
                continue
            # A transaction per batch of 1-3 inputs, opened once there is something to transform.
            started = run.log.clock.now_ms()
            txn = session.new_txn(process, run.options.txn_timeout_ms)
            if txn is None:
                txns.ended(started, False)  # a new_txn of unknown outcome may have opened one
                continue  # the message stays with this consumer, or went back with its connection
            alive = True
            for i in range(rng.randint(1, 3)):
                if i > 0:
                    invoked = run.log.clock.now_ms()
                    message = session.receive(process, run.options.receive_timeout_ms / 1000)
                    connected = session.consumer is not None
                    transform_drain.saw(name, message=message is not None, connected=connected, invoked_ms=invoked)
                    if message is None:
                        alive = session.consumer is not None
                        break
                out = outputs[rng.randrange(len(outputs))]
                payload = f"{message.payload.decode('utf-8', 'backslashreplace')}>{name}:{n}"
                n += 1
                if not (session.send(process, txn, out, payload) and session.acknowledge(process, message, txn)):
                    alive = False
                    break
            commit = alive and rng.random() < 0.85
            ended = session.end(process, txn, commit=commit)
            txns.ended(started, ended)
            _end_again(session, process, txn, rng, committed=commit and ended)
            with lock:
                key = "unknown" if not ended and commit else ("committed" if commit and ended else "aborted")
                counts[key] += 1
            done += 1
            if done % RESTART_EVERY == 0:  # a transformer restarts: what its consumer held goes back
                session.reset()
                with lock:
                    counts["restarts"] += 1

    workers = [run.thread(transformer, i, s, name=names[i]) for i, s in enumerate(sessions)]
    writer_process = Process(run.log)
    n = 0
    while budget.take():
        input_producer.send(writer_process, run.payload("in", n))
        n += 1
    run.phase = "drain"
    if run.options.before_drain is not None:
        run.options.before_drain()
    transform_drain.wait(0, run.options.max_drain_s)
    run.join(workers)
    # Every transaction has ended, or will have once its timeout passed: then the readers drain.
    drain.wait(txns.until, run.options.max_drain_s + txns.timeout_ms / 1000)
    run.join(readers)
    timed_out = transform_drain.timed_out or drain.timed_out
    return WorkloadResult(
        [source, *outputs], ["ctp", *[s.name for s in _reader_subs()]], drain_timed_out=timed_out, details=counts
    )


def multi(run: Run, budget: Budget) -> WorkloadResult:
    """Atomic multi-partition produce beside a plain writer (see the module docstring)."""
    outputs = [run.topic(f"p{i}") for i in range(_partitions(run, 2))]
    attached = _attach(run, outputs, [_Sub("reader", "Exclusive", 1)])
    drain, readers = _start_consumers(run, attached, _acknowledger(run), run.options.quiet)
    counts = {"committed": 0, "aborted": 0, "unknown": 0}
    lock = threading.Lock()
    txns = _Txns(run.options.txn_timeout_ms, 2_000 + run.options.slack_ms)

    def writer(index: int) -> None:
        label = f"t{index}"
        session = WireSession(run.options.url, run.options.operation_timeout_s)
        run.sessions.append(session)
        rng = run.rng(label)
        process = Process(run.log)
        n = 0
        while budget.take():
            started = run.log.clock.now_ms()
            txn = session.new_txn(process, run.options.txn_timeout_ms)
            if txn is None:
                txns.ended(started, False)
                time.sleep(0.05)
                continue
            alive = True
            for out in outputs:
                for _ in range(rng.randint(1, 2)):
                    alive = alive and session.send(process, txn, out, run.payload(label, n))
                    n += 1
            commit = alive and rng.random() < 0.8
            ended = session.end(process, txn, commit=commit)
            txns.ended(started, ended)
            _end_again(session, process, txn, rng, committed=commit and ended)
            with lock:
                key = "unknown" if not ended and commit else ("committed" if commit and ended else "aborted")
                counts[key] += 1

    plain = OfficialProducer(_create_producer(run, run.client(), outputs[0]), outputs[0])
    stop = threading.Event()

    def plain_writer() -> None:
        process = Process(run.log)
        n = 0
        while not stop.is_set():
            plain.send(process, run.payload("plain", n))
            n += 1
            time.sleep(0.01)

    plain_thread = run.thread(plain_writer, name="plain")
    writers = [run.thread(writer, i, name=f"t{i}") for i in range(run.options.clients)]
    run.join(writers)
    stop.set()
    run.join([plain_thread])
    timed_out = _finish(run, drain, readers, not_before_ms=txns.until, extra_s=txns.timeout_ms / 1000)
    return WorkloadResult(outputs, ["reader"], drain_timed_out=timed_out, details=counts)


WORKLOADS: dict[str, Callable[[Run, Budget], WorkloadResult]] = {
    "produce-consume": produce_consume,
    "nack": nack,
    "ack-timeout": ack_timeout,
    "delayed": delayed,
    "ctp": ctp,
    "multi": multi,
}
NEEDS_TXN = frozenset({"ctp", "multi"})
# The checks each workload names: built to exercise, and each can fire at the workload's defaults
# (see the module docstring; tests/recording/test_teeth.py breaks each one).
CHECKS: dict[str, tuple[str, ...]] = {
    "produce-consume": (
        "garbage-read",
        "inconsistent-position",
        "lost-message",
        "realtime-order",
        "out-of-order-delivery",
    ),
    "nack": ("lost-message", "lost-redelivery"),
    "ack-timeout": ("lost-message", "lost-redelivery"),
    "delayed": ("early-delivery", "late-delivery", "lost-message", "out-of-order-delivery"),
    "ctp": (
        "aborted-read",
        "premature-read",
        "fractured-read",
        "duplicate-after-commit",
        "lost-message",
        "commit-and-abort",
    ),
    "multi": ("aborted-read", "premature-read", "fractured-read", "lost-message", "commit-and-abort"),
}
assert set(CHECKS) == set(WORKLOADS)
# How often ctp and multi ask to abort a transaction that committed (_end_again).
END_AGAIN = 0.1
# A ctp transformer closes its connection and subscribes again after this many transactions, as a
# restarted service would: the broker redelivers what its consumer held and had not acknowledged.
RESTART_EVERY = 4
