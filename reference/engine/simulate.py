"""Named workloads under a seeded fault schedule, and ``txnmodel simulate``.

A run is one :class:`~reference.engine.client.Cluster` (one seed), many concurrent clients as
generator processes, an optional fault process, a heal phase and a final drain, after which the
history is complete.  Workloads:

* ``ctp`` -- consume-transform-produce across topics (PIP-31's motivation): processors receive
  from ``in``, produce a transformed message to ``out`` and acknowledge the input, all in one
  transaction, then commit (or, sometimes, abort); a verifier reads ``out``.
* ``multi`` -- atomic multi-partition produce: each transaction writes one message to every
  partition of ``multi``; a reader per partition.
* ``delayed`` -- delayed delivery mixed with transactions: sends with ``deliver_at`` in and out of
  transactions to a Shared subscription.

Faults (``--faults on``): broker crash and restart, coordinator crash and reload, ledger append
and read failures, lost / delayed / duplicated requests and responses, and short transaction
timeouts.  Everything random comes from the run's ``random.Random(seed)``: same seed, same
history, byte for byte, on either ledger.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spec.config import Config
from spec.history import Operation

from .client import Client, Cluster, Consumer, ConsumerType, OperationFailed, OperationTimeout, Producer
from .sim import Future, NetworkFaults, SimTimeout, spawn
from .storage import LedgerFaults

__all__ = ["WORKLOADS", "RunResult", "RunSpec", "build_parser", "run", "run_simulate", "simulate_main"]

Proc = Generator[Future[Any], Any, None]
_ERRORS = (OperationFailed, OperationTimeout)


def _default_config() -> Config:
    """Small ledgers (roll-over happens) and strict delayed delivery, so a message delivered before its
    deliver-at time is an anomaly rather than DD-1's permitted tick of slack."""
    return Config().with_overrides({"managedLedgerMaxEntriesPerLedger": 64,
                                    "isDelayedDeliveryDeliverAtTimeStrict": True,
                                    "delayedDeliveryTickTimeMillis": 100})


@dataclass
class RunSpec:
    workload: str = "ctp"
    seed: int = 0
    ledger: str = "memory"
    data_dir: str | None = None
    ops: int = 200  # transactions attempted, over all clients
    duration_ms: int | None = None  # or: stop starting transactions at this simulated time
    clients: int = 4
    faults: bool = False
    batching: bool = False
    partitions: int = 2
    config: Config = field(default_factory=lambda: _default_config())


@dataclass
class RunResult:
    spec: RunSpec
    operations: list[Operation]
    sim_time_ms: int
    events: int
    committed: int
    aborted: int
    crashes: int


class _Budget:
    def __init__(self, n: int, clock: Callable[[], int], until_ms: int | None) -> None:
        self.left = n
        self.clock = clock
        self.until_ms = until_ms

    def take(self) -> bool:
        if self.until_ms is not None and self.clock() >= self.until_ms:
            return False
        self.left -= 1
        return self.left >= 0


def _attempt(body: Callable[[], Proc]) -> Proc:
    """Run a step of a worker; a failed or timed-out operation just ends the step."""
    try:
        yield from body()
    except _ERRORS:
        return


class _Run:
    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        net = NetworkFaults(drop_request=0.01, drop_response=0.01, duplicate_request=0.05,
                            max_extra_delay_ms=200) if spec.faults else None
        ledger_faults = LedgerFaults(append=0.003, read=0.05) if spec.faults else None
        topics = {"ctp": {"in": spec.clients, "out": spec.partitions}, "multi": {"multi": spec.partitions},
                  "delayed": {"delayed": 1}}[spec.workload]
        self.cluster = Cluster.start(seed=spec.seed, topics=topics, config=spec.config, ledger=spec.ledger,
                                     data_dir=spec.data_dir, batching=spec.batching, network_faults=net,
                                     ledger_faults=ledger_faults,
                                     history=f"{spec.workload}-{spec.ledger}-seed{spec.seed}")
        self.sim = self.cluster.sim
        self.rng = self.sim.rng
        self.budget = _Budget(spec.ops, lambda: self.sim.now, spec.duration_ms)
        self.running = 0
        self.committed = 0
        self.aborted = 0
        self.faults_on = spec.faults
        self.errors: list[BaseException] = []

    # -- helpers ------------------------------------------------------------------------------------

    def start(self, proc: Proc) -> None:
        self.running += 1

        def exit_(error: BaseException | None) -> None:
            self.running -= 1
            if error is not None:
                self.errors.append(error)

        spawn(self.sim, proc, exit_)

    def txn_timeout(self) -> int:
        if self.faults_on and self.rng.random() < 0.1:
            return self.rng.randint(50, 400)  # some transactions time out (TC-18, TC-19, TC-36)
        return 10_000

    def end(self, txn: Any) -> Proc:
        if self.rng.random() < 0.15:
            yield txn.abort_async()
            self.aborted += 1
        else:
            yield txn.commit_async()
            self.committed += 1

    def subscribe(self, client: Client, topic: str, sub: str, partition: int, kind: ConsumerType
                  ) -> Generator[Future[Any], Any, Consumer]:
        while True:
            try:
                consumer: Consumer = yield client.subscribe_async(topic, sub, partition=partition,
                                                                  consumer_type=kind)
                return consumer
            except _ERRORS:
                yield self.sim.sleep(100)

    # -- workloads ----------------------------------------------------------------------------------

    def feeder(self, topic: str, count: int) -> Proc:
        client = self.cluster.client()
        producers = [client.create_producer(topic, p) for p in range(self.spec.clients)]
        for i in range(count):
            producer = producers[i % len(producers)]

            def send(producer: Producer = producer, i: int = i) -> Proc:
                yield producer.send_async(f"{topic}-{i}")

            yield from _attempt(send)
            yield self.sim.sleep(self.rng.randint(0, 5))

    def ctp_worker(self, w: int) -> Proc:
        client = self.cluster.client()
        # Each processor owns one input partition (Exclusive), so its empty receive means "nothing left".
        consumer: Consumer = yield from self.subscribe(client, "in", "ctp", w, ConsumerType.Exclusive)
        out = [client.create_producer("out", p) for p in range(self.spec.partitions)]
        n = 0
        while self.budget.take():
            n += 1

            def one(n: int = n) -> Proc:
                txn = yield client.new_transaction_async(self.txn_timeout())
                msg = yield consumer.receive_async(20)
                if msg is None:
                    yield txn.abort_async()
                    return
                target = out[self.rng.randrange(len(out))]
                yield target.send_async(f"{msg.payload.decode()}>w{w}.{n}", txn=txn)
                yield consumer.acknowledge_async(msg, txn=txn)
                yield from self.end(txn)

            yield from _attempt(one)
        consumer.close()

    def multi_writer(self, w: int) -> Proc:
        client = self.cluster.client()
        producers = [client.create_producer("multi", p) for p in range(self.spec.partitions)]
        n = 0
        while self.budget.take():
            n += 1

            def one(n: int = n) -> Proc:
                txn = yield client.new_transaction_async(self.txn_timeout())
                for p, producer in enumerate(producers):
                    yield producer.send_async(f"w{w}.{n}.p{p}", txn=txn)
                yield from self.end(txn)

            yield from _attempt(one)
            yield self.sim.sleep(self.rng.randint(0, 10))

    def delayed_writer(self, w: int) -> Proc:
        client = self.cluster.client()
        producer = client.create_producer("delayed", 0)
        n = 0
        while self.budget.take():
            n += 1

            def one(n: int = n) -> Proc:
                at = self.sim.now + self.rng.randint(0, 600)
                if self.rng.random() < 0.5:
                    yield producer.send_async(f"w{w}.{n}", deliver_at=at)
                    return
                txn = yield client.new_transaction_async(self.txn_timeout())
                yield producer.send_async(f"w{w}.{n}.t", txn=txn, deliver_at=at)
                yield from self.end(txn)

            yield from _attempt(one)
            yield self.sim.sleep(self.rng.randint(0, 10))

    def reader(self, topic: str, sub: str, partition: int, kind: ConsumerType, done: Callable[[], bool]) -> Proc:
        """Receive and acknowledge until ``done()``, then drain: receives that find nothing."""
        client = self.cluster.client()
        consumer: Consumer = yield from self.subscribe(client, topic, sub, partition, kind)
        empty = 0
        while empty < 3:
            got = None
            try:
                got = yield consumer.receive_async(50)
                if got is not None:
                    yield consumer.acknowledge_async(got)
            except _ERRORS:
                if client.recorder.crashed(client.process):
                    pass
            if got is None and done():
                empty += 1
            elif got is not None:
                empty = 0

    def fault_process(self) -> Proc:
        broker = self.cluster.broker
        while self.faults_on:
            yield self.sim.sleep(self.rng.randint(1000, 4000))
            if not self.faults_on:
                break
            roll = self.rng.random()
            if roll < 0.4:
                broker.crash()
                yield self.sim.sleep(self.rng.randint(20, 300))
                broker.restart()
            elif roll < 0.8:
                broker.coordinator.crash()
                yield self.sim.sleep(self.rng.randint(20, 300))
                if broker.up and not broker.coordinator.ready and not broker.coordinator.load():
                    broker.restart_later(broker.coordinator)
            else:
                partition = self.rng.choice(sorted(broker.partitions))
                broker.partitions[partition].crash()
                broker.restart_later(broker.partitions[partition])

    def heal(self) -> None:
        """Stop injecting faults and give pending work time to settle (timeouts, retries)."""
        self.faults_on = False
        self.cluster.network.faults = NetworkFaults()
        self.cluster.broker.store.set_faults(False)
        if not self.cluster.broker.up:
            self.cluster.broker.restart()

    # -- the run ------------------------------------------------------------------------------------

    def execute(self, progress: Callable[[str], None] | None) -> RunResult:
        spec = self.spec
        writers_done = [False]
        workers: list[Proc] = []
        readers: list[Proc] = []
        if spec.workload == "ctp":
            self.start(self.feeder("in", spec.ops + spec.ops // 4))
            workers = [self.ctp_worker(w) for w in range(spec.clients)]
            readers = [self.reader("out", "verify", p, ConsumerType.Exclusive, lambda: writers_done[0])
                       for p in range(spec.partitions)]
        elif spec.workload == "multi":
            workers = [self.multi_writer(w) for w in range(spec.clients)]
            readers = [self.reader("multi", "read", p, ConsumerType.Exclusive, lambda: writers_done[0])
                       for p in range(spec.partitions)]
        else:
            workers = [self.delayed_writer(w) for w in range(spec.clients)]
            readers = [self.reader("delayed", "read", 0, ConsumerType.Shared, lambda: writers_done[0])]
        worker_count = len(workers)
        finished = [0]

        def worker_exit(error: BaseException | None) -> None:
            finished[0] += 1
            if error is not None:
                self.errors.append(error)

        for proc in workers:
            spawn(self.sim, proc, worker_exit)
        for proc in readers:
            self.start(proc)
        if spec.faults:
            spawn(self.sim, self.fault_process())
        last_report = time.monotonic()
        while finished[0] < worker_count:
            if not self.sim.run_one():
                raise SimTimeout("the run stalled with workers still running")
            if progress is not None and time.monotonic() - last_report > 2:
                last_report = time.monotonic()
                progress(f"  {spec.workload} seed {spec.seed}: t={self.sim.now} ms, {len(self.cluster.recorder)} ops, "
                         f"{spec.ops - max(self.budget.left, 0)}/{spec.ops} txns")
        self.heal()
        self.sim.advance(12_000)  # every open transaction times out, every end is re-driven
        writers_done[0] = True
        while self.running > 0:
            if not self.sim.run_one():
                break
        if self.errors:
            raise self.errors[0]
        return RunResult(spec, self.cluster.recorder.operations(), self.sim.now, self.sim.events_run,
                         self.committed, self.aborted, self.cluster.broker.crashes)


WORKLOADS = ("ctp", "multi", "delayed")


def run(spec: RunSpec, progress: Callable[[str], None] | None = None) -> RunResult:
    """One seeded run of a workload; returns its history."""
    if spec.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {spec.workload!r}; workloads are {', '.join(WORKLOADS)}")
    runner = _Run(spec)
    try:
        return runner.execute(progress)
    finally:
        runner.cluster.close()


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="txnmodel simulate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0, help="the first seed (history k uses seed + k)")
    parser.add_argument("--ledger", choices=("memory", "file"), default="memory")
    parser.add_argument("--data", default=None, help="directory for file ledgers (default: a temporary one)")
    parser.add_argument("--out", default=None, help="directory for histories (Parquet; see --jsonl)")
    parser.add_argument("--workload", choices=(*WORKLOADS, "all"), default="ctp")
    parser.add_argument("--histories", type=int, default=1, help="how many seeds to run per workload")
    parser.add_argument("--ops", type=int, default=200, help="transactions attempted per history")
    parser.add_argument("--duration", type=int, default=None, metavar="MS",
                        help="also stop starting transactions after MS of simulated time")
    parser.add_argument("--clients", type=int, default=4, help="concurrent transactional clients")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--faults", choices=("on", "off"), default="on")
    parser.add_argument("--batching", choices=("on", "off"), default="off", help="PIP-160 batched log writes")
    parser.add_argument("--jsonl", action="store_true", help="also write JSON Lines")
    parser.add_argument("--check", action="store_true", help="check each history's transactional properties "
                        "(exit 1 on any anomaly)")
    parser.add_argument("--quiet", action="store_true")
    return parser


def simulate_main(argv: list[str]) -> int:
    """``txnmodel simulate``: 0 when every run finished (and, with --check, was clean), 1 otherwise."""
    return run_simulate(build_parser().parse_args(argv))


def run_simulate(args: argparse.Namespace) -> int:
    """The body of ``simulate_main`` for arguments already parsed by :func:`build_parser`."""
    out = Path(args.out) if args.out else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    workloads = WORKLOADS if args.workload == "all" else (args.workload,)
    say: Callable[[str], None] = (lambda _: None) if args.quiet else (lambda m: print(m, file=sys.stderr))
    status = 0
    with tempfile.TemporaryDirectory(prefix="txnmodel-sim-") as scratch:
        for workload in workloads:
            histories: dict[str, list[Operation]] = {}
            for k in range(args.histories):
                seed = args.seed + k
                data = None
                if args.ledger == "file":
                    data = str(Path(args.data or scratch) / f"{workload}-seed{seed}")
                spec = RunSpec(workload=workload, seed=seed, ledger=args.ledger, data_dir=data, ops=args.ops,
                               clients=args.clients, faults=args.faults == "on", batching=args.batching == "on",
                               partitions=args.partitions, duration_ms=args.duration)
                result = run(spec, say)
                history = result.operations[0].history if result.operations else f"{workload}-{seed}"
                histories[history] = result.operations
                line = (f"{history}: {len(result.operations)} ops, {result.committed} commits, {result.aborted} "
                        f"aborts, {result.crashes} broker crashes, {result.sim_time_ms} ms simulated")
                if args.check:
                    from invariants.transactional import check_transactional

                    verdict = check_transactional(result.operations)
                    line += ", transactional: " + ("ok" if verdict.ok else json.dumps(verdict.counts))
                    if not verdict.ok:
                        status = 1
                        for anomaly in verdict.anomalies[:5]:
                            say(f"    {anomaly}")
                say(line)
            if out is not None:
                from invariants.history import write_jsonl, write_parquet

                write_parquet(out / f"{workload}.parquet", histories)
                if args.jsonl:
                    write_jsonl(out / f"{workload}.jsonl", histories)
                say(f"wrote {out / f'{workload}.parquet'}")
    return status


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(simulate_main(sys.argv[1:]))
