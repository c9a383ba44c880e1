"""Engine benchmark: consume-transform-produce transactions per second, ratios measured in one run.

    .venv/bin/python benchmarks/engine_bench.py [--txns 400] [--repeat 3] [--json]

Four configurations of the same PIP-31 consume-transform-produce transaction (receive from
``in``, produce to ``out`` in the txn, acknowledge the input in the txn, commit):

* ``pure``        -- the pure machines stepped directly, in the order the broker steps them (client
                     txn, coordinator, buffer of ``out``, pending ack of ``in``, END_TXN phases);
                     no ledger, no scheduler, no network: the floor.
* ``memory``      -- the simulated broker through the client API on the in-memory ledger, with
                     ``--clients`` concurrent processors (one input partition each), recording the
                     machine-level history as simulations do; ``memory-norec`` without it.
* ``file``        -- the same on the file ledger (fsync per append), PIP-160 batching off.
* ``file+batch``  -- the file ledger with batching on for the transaction log and pending-ack logs.

Reported: wall-clock transactions/s (best of ``--repeat``), and the ratios memory/pure (the
engine's overhead) and file+batch/file (what batching buys on a real disk).  The simulated clock
is logical, so batching's delay timer costs no wall time; its win is fewer fsyncs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reference import buffer as tb
from reference import client as ct
from reference import coordinator as tc
from reference import pending_ack as pa
from reference.engine.client import Cluster, ConsumerType
from reference.engine.sim import Future, spawn
from spec.config import Config
from spec.result import Ok
from spec.types import AckType, Position, Subscription, TxnAction

IN, OUT = "persistent://public/default/in-partition-0", "persistent://public/default/out-partition-0"


def pure_ctp(txns: int) -> float:
    """The machines alone; returns seconds for ``txns`` transactions."""
    config = Config()
    coordinator = tc.initial(config)
    source = tb.initial(config, topic=IN, ledger_id=0)
    sink = tb.initial(config, topic=OUT, ledger_id=0)
    pending = pa.initial(config, sub_type=pa.SubType.Shared)
    inputs: list[Position] = []
    for _ in range(txns):
        source, published = tb.step(source, tb.PublishMessage())
        assert isinstance(published, Ok)
        inputs.append(published.value)
    sub = Subscription(IN, "ctp")
    start = time.perf_counter()
    for i in range(txns):
        coordinator, made = tc.step(coordinator, tc.NewTxn(10_000, i))
        assert isinstance(made, Ok)
        txn_id = made.value
        client = ct.initial(config, txn_id, 10_000)
        tb.dispatch(source, inputs[i - 1] if i else Position(0, -1))  # the receive
        client, _ = ct.step(client, ct.Send(OUT))
        coordinator, _ = tc.step(coordinator, tc.AddPartitionToTxn(txn_id, (OUT,), i))
        sink, appended = tb.step(sink, tb.AppendBufferToTxn(txn_id))
        if isinstance(appended.value, tb.Queued):
            sink, _ = tb.step(sink, tb.CompleteFirstSnapshot())
        client, _ = ct.step(client, ct.OpCompleted())
        client, _ = ct.step(client, ct.Ack(sub))
        coordinator, _ = tc.step(coordinator, tc.AddSubscriptionToTxn(txn_id, (sub,), i))
        pending, acked = pa.step(pending, pa.IndividualAck(txn_id, (pa.AckedPosition(inputs[i]),)))
        if isinstance(acked.value, pa.Queued):
            pending, _ = pa.step(pending, pa.PendingAckInitComplete())
        client, _ = ct.step(client, ct.OpCompleted())
        client, _ = ct.step(client, ct.Commit())
        coordinator, ended = tc.step(coordinator, tc.EndTxn(txn_id, TxnAction.COMMIT, i))
        (phase2,) = [e for e in ended.effects if isinstance(e, tc.EndTxnInTransactionBuffer)]
        sink, _ = tb.step(sink, tb.CommitTxn(txn_id, phase2.low_water_mark))
        pending, _ = pa.step(pending, pa.CommitTxn(txn_id, phase2.low_water_mark))
        coordinator, done = tc.step(coordinator, tc.EndTxnInTransactionBufferResult(txn_id, TxnAction.COMMIT, i))
        assert isinstance(done, Ok)
        client, _ = ct.step(client, ct.EndTxnResponse())
        pending, _ = pa.step(pending, pa.NormalAck(AckType.INDIVIDUAL, ()))  # the dispatcher's marker ack slot
    return time.perf_counter() - start


def engine_ctp(txns: int, ledger: str, batching: bool, clients: int, record_machines: bool = True) -> float:
    """The broker through the client API, ``clients`` concurrent processors (one input partition each);
    returns wall seconds for ``txns`` committed transactions."""
    with tempfile.TemporaryDirectory(prefix="engine-bench-") as data:
        cluster = Cluster.start(
            seed=1,
            topics={"in": clients, "out": 1},
            ledger=ledger,
            data_dir=data,
            batching=batching,
            record_machines=record_machines,
        )
        try:
            feeder = cluster.client()
            for i in range(txns):
                feeder.create_producer("in", i % clients).send(f"in-{i}")
            share = [txns // clients + (1 if k < txns % clients else 0) for k in range(clients)]
            finished: list[BaseException | None] = []

            def processor(k: int) -> Generator[Future[Any], Any, None]:
                client = cluster.client()
                source = yield client.subscribe_async("in", "ctp", partition=k, consumer_type=ConsumerType.Shared)
                sink = client.create_producer("out")
                for i in range(share[k]):
                    txn = yield client.new_transaction_async(10_000)
                    msg = yield source.receive_async(100)
                    assert msg is not None
                    yield sink.send_async(f"out-{k}-{i}", txn=txn)
                    yield source.acknowledge_async(msg, txn=txn)
                    yield txn.commit_async()

            start = time.perf_counter()
            for k in range(clients):
                spawn(cluster.sim, processor(k), finished.append)
            cluster.sim.run_until(lambda: len(finished) == clients)
            elapsed = time.perf_counter() - start
            errors = [e for e in finished if e is not None]
            if errors:
                raise errors[0]
            return elapsed
        finally:
            cluster.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--txns", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8, help="concurrent processors in the engine runs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    n = args.txns
    measures: dict[str, Callable[[], float]] = {
        "pure": lambda: pure_ctp(n),
        "memory": lambda: engine_ctp(n, "memory", False, args.clients),
        "memory-norec": lambda: engine_ctp(n, "memory", False, args.clients, record_machines=False),
        "file": lambda: engine_ctp(n, "file", False, args.clients),
        "file+batch": lambda: engine_ctp(n, "file", True, args.clients),
    }
    # Interleaved rounds, best of each: disk and CPU noise drifts, and both sides of a ratio see it.
    seconds = {name: float("inf") for name in measures}
    for _ in range(args.repeat):
        for name, measure in measures.items():
            seconds[name] = min(seconds[name], measure())
    rate = {name: n / s for name, s in seconds.items()}
    ratios = {
        "memory/pure": rate["memory"] / rate["pure"],
        "memory-norec/pure": rate["memory-norec"] / rate["pure"],
        "file+batch/file": rate["file+batch"] / rate["file"],
    }
    if args.json:
        print(json.dumps({"txns": n, "clients": args.clients, "txns_per_s": rate, "ratios": ratios}, indent=2))
    else:
        print(f"consume-transform-produce, {n} txns, {args.clients} concurrent clients (engine), best of {args.repeat}")
        for name, value in rate.items():
            print(f"  {name:<11} {value:>10.0f} txn/s")
        for name, value in ratios.items():
            print(f"  {name:<15} {value:6.3f}")
    return 0


if __name__ == "__main__":
    from txnmodel.progress import Reporter

    # results go to stdout; stderr says it is still working (a line every 10 s when piped)
    with Reporter().phase("engine_bench", unit=""):
        code = main(sys.argv[1:])
    raise SystemExit(code)
