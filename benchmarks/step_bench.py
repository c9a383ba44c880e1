"""Pure steps per second per machine, beside the floor of one frozen-dataclass replace plus one
``immutables.Map.set``, all measured side by side in one run.

    .venv/bin/python benchmarks/step_bench.py [--steps 20000] [--repeat 3] [--sizes 1000,10000,100000,1000000]

What it measures (process CPU seconds, best of ``--repeat``; the machine is shared, so a figure
is only ever compared with another of the same run):

1. **steps/s per machine** on a steady workload of its own (below), and the **floor**: a
   ``dataclasses.replace`` of that machine's state changing one field plus one ``Map.set`` on a
   map of the size the workload keeps.  Goal: every machine at least 100,000 steps/s.
2. **the buffer as its topic grows**: the same buffer workload from a state holding 1k, 10k,
   100k and 1M entries (ledgers rolled over every ``managedLedgerMaxEntriesPerLedger`` entries, as
   the engine does), with ``dispatch`` of the last 100 entries and ``hash`` of a freshly stepped
   state at each size.  Goal: the 1M figure at least 0.8x the 1k figure.
3. **hashing a state holding 10,000 of what grows** (topic entries, live transactions, pending
   acks, live log entries, delayed messages), freshly stepped so nothing of what changed is
   cached: what the linearizability checker and the model checker pay per new state.

The workloads (commands are recorded once, driven by the machine's own answers, then replayed
through ``step``; only the replay is timed):

* ``coordinator``: 16 transactions in flight; each NEW_TXN, ADD_PARTITION, ADD_SUBSCRIPTION,
  END_TXN(commit, 1 in 10 abort), the buffers' answer; a timeout tick every 100 steps.
* ``buffer``: 16 transactions in flight on one partition; each writes 4 messages, a normal
  publish comes between, then commit (1 in 10 abort) with the coordinator's low water mark.
* ``pending_ack``: a Shared subscription; 16 transactions in flight each acking 2 messages
  individually, then commit (1 in 10 abort, whose messages are then acked without a txn).
* ``batched_log``: PIP-160 on; transaction-log records added, the 1 ms timer flushing every 8,
  the ledger answering each write, the records of entries 4 writes back deleted.
* ``client``: one client transaction's life: 2 sends, 1 ack, their answers, commit, END_TXN's answer.
* ``delayed/bucket``, ``delayed/in_memory``: messages published ledger by ledger (1,000 a
  ledger) due 1 to 60 s later, the dispatcher asking for due messages every 100 adds.

Writes ``out/step_bench/report.txt`` and ``report.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import immutables

from reference import batched_log as bl
from reference import buffer as tb
from reference import client as ct
from reference import coordinator as tc
from reference import delayed as dd
from reference import pending_ack as pa
from spec.config import Config
from spec.envelope import LogKind
from spec.pb import PulsarTransactionMetadata_pb2 as txn_pb
from spec.result import Ok
from spec.types import AckType, BatchedPosition, Position, Subscription, TxnAction, TxnID

GOAL_STEPS_PER_S = 100_000
GOAL_FLAT = 0.8
CONCURRENT = 16
TOPIC = "persistent://public/default/bench-partition-0"
SUB = Subscription("persistent://public/default/in-partition-0", "bench")

StepFn = Callable[[Any, Any], tuple[Any, Any]]


@dataclass
class Workload:
    """Recorded commands: ``segments`` of (state to start from, commands stepped from it)."""

    name: str
    step: StepFn
    segments: list[tuple[Any, list[Any]]]
    floor_state: Any
    map_size: int

    @property
    def steps(self) -> int:
        return sum(len(commands) for _, commands in self.segments)


def cpu() -> float:
    return time.process_time()


def replay(step: StepFn, segments: list[tuple[Any, list[Any]]]) -> Any:
    state = None
    for start, commands in segments:
        state = start
        for command in commands:
            state, _ = step(state, command)
    return state


def best_of(repeat: int, run: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        started = cpu()
        run()
        best = min(best, cpu() - started)
    return best


# --------------------------------------------------------------------------------------------
# Recording the workloads (driven by the machines' own answers; not timed)
# --------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self, step: StepFn, state: Any) -> None:
        self.step_fn, self.state, self.commands = step, state, []

    def __call__(self, command: Any) -> Any:
        self.commands.append(command)
        self.state, result = self.step_fn(self.state, command)
        return result


def coordinator_workload(steps: int) -> Workload:
    start = tc.initial(Config())
    rec = Recorder(tc.step, start)
    live: list[TxnID] = []
    now, i = 0, 0
    while len(rec.commands) < steps:
        now += 1
        made = rec(tc.NewTxn(60_000, now))
        assert isinstance(made, Ok), made
        txn = made.value
        rec(tc.AddPartitionToTxn(txn, (f"{TOPIC}-{i % 4}",), now))
        rec(tc.AddSubscriptionToTxn(txn, (SUB,), now))
        live.append(txn)
        if len(live) > CONCURRENT:
            done = live.pop(0)
            action = TxnAction.ABORT if i % 10 == 9 else TxnAction.COMMIT
            ended = rec(tc.EndTxn(done, action, now))
            assert isinstance(ended, Ok), ended
            finished = rec(tc.EndTxnInTransactionBufferResult(done, action, now))
            assert isinstance(finished, Ok), finished
        if i % 20 == 0:
            rec(tc.Tick(now))
        i += 1
    return Workload("coordinator", tc.step, [(start, rec.commands)], start, CONCURRENT)


def buffer_commands(first_seq: int, steps: int, entries_in_ledger: int, ledger_limit: int) -> Iterator[Any]:
    """The buffer workload from transaction ``first_seq`` on, rolling the ledger over when full."""
    live: dict[int, int] = {}  # seq -> messages written
    seq = first_seq
    produced = 0
    fill = entries_in_ledger

    def write() -> Iterator[Any]:
        nonlocal fill
        fill += 1
        if fill >= ledger_limit:
            yield tb.RollOverLedger()
            fill = 0

    while produced < steps:
        while len(live) < CONCURRENT:
            live[seq] = 0
            seq += 1
        for s in sorted(live):
            yield tb.AppendBufferToTxn(TxnID(0, s))
            produced += 1
            yield from write()
            live[s] += 1
        oldest = min(live)
        if live[oldest] >= 4:
            del live[oldest]
            lwm = min(live) - 1 if live else seq - 1
            yield (tb.AbortTxn if oldest % 10 == 9 else tb.CommitTxn)(TxnID(0, oldest), lwm)
            produced += 1
            yield from write()
            yield tb.PublishMessage()
            produced += 1
            yield from write()


def buffer_state(entries: int) -> tuple[Any, int, int]:
    """A Ready buffer holding ``entries`` entries written by the buffer workload; returns the state,
    the next free transaction sequence and the current ledger's fill."""
    state = tb.initial(Config(), topic=TOPIC)
    limit = Config().managed_ledger_max_entries_per_ledger
    state, _ = tb.step(state, tb.AppendBufferToTxn(TxnID(0, 0)))
    state, _ = tb.step(state, tb.CompleteFirstSnapshot())
    state, _ = tb.step(state, tb.CommitTxn(TxnID(0, 0), 0))
    seq = 1
    step = tb.step
    while len(state.entries) < entries:
        batch = list(buffer_commands(seq, min(10_000, entries - len(state.entries)), state.ledgers[-1].entries, limit))
        for command in batch:
            state, _ = step(state, command)
        seq = max((c.txn_id.least_sig_bits for c in batch if isinstance(c, tb.AppendBufferToTxn)), default=seq - 1)
        seq += 1
        # finish whatever the batch left open, so the next batch starts clean
        open_txns = sorted(state.ongoing.keys())
        for txn in open_txns:
            state, _ = step(state, tb.CommitTxn(txn, txn.least_sig_bits))
    return state, seq, state.ledgers[-1].entries


def buffer_workload(steps: int, start: Any = None, first_seq: int = 1) -> Workload:
    if start is None:
        start, first_seq, _ = buffer_state(0)
    limit = Config().managed_ledger_max_entries_per_ledger
    commands = list(buffer_commands(first_seq, steps, start.ledgers[-1].entries, limit))
    return Workload("buffer", tb.step, [(start, commands)], start, CONCURRENT)


def pending_ack_workload(steps: int) -> Workload:
    # the subscription starts at the beginning of ledger 1, which holds the messages
    start = pa.initial(Config(), sub_type=pa.SubType.Shared, cursor=pa.CursorView(Position(1, -1)))
    rec = Recorder(pa.step, start)
    queued = rec(pa.IndividualAck(TxnID(0, 0), (pa.AckedPosition(Position(1, 0)),)))
    assert isinstance(queued, Ok) and isinstance(queued.value, pa.Queued)
    rec(pa.PendingAckInitComplete())
    rec(pa.CommitTxn(TxnID(0, 0), -1))
    start, rec.commands = rec.state, []
    entry, seq = 1, 1
    live: list[tuple[TxnID, tuple[Position, ...]]] = []
    while len(rec.commands) < steps:
        txn = TxnID(0, seq)
        positions = (Position(1, entry), Position(1, entry + 1))
        entry += 2
        acked = rec(pa.IndividualAck(txn, tuple(pa.AckedPosition(p) for p in positions)))
        assert isinstance(acked, Ok), acked
        live.append((txn, positions))
        if len(live) > CONCURRENT:
            done, held = live.pop(0)
            lwm = live[0][0].least_sig_bits - 1
            if done.least_sig_bits % 10 == 9:
                rec(pa.AbortTxn(done, lwm))
                rec(pa.NormalAck(AckType.INDIVIDUAL, tuple(pa.AckedPosition(p) for p in held)))
            else:
                rec(pa.CommitTxn(done, lwm))
        seq += 1
    return Workload("pending_ack", pa.step, [(start, rec.commands)], start, 2 * CONCURRENT)


def _txn_record(seq: int) -> bytes:
    entry = txn_pb.TransactionMetadataEntry(
        metadata_op=txn_pb.TransactionMetadataEntry.NEW,
        txnid_least_bits=seq,
        txnid_most_bits=0,
        expected_status=txn_pb.OPEN,
        new_status=txn_pb.OPEN,
        start_time=seq,
        timeout_ms=60_000,
        last_modification_time=seq,
        max_local_txn_id=seq,
    )
    return entry.SerializeToString()


def batched_log_workload(steps: int) -> Workload:
    config = Config(transaction_log_batched_write_enabled=True)
    start = bl.initial(config, LogKind.TRANSACTION_LOG, now_ms=0)
    rec = Recorder(bl.step, start)
    now, seq, entry = 0, 0, 0
    written: list[tuple[Position, int]] = []
    records = [_txn_record(i) for i in range(64)]
    while len(rec.commands) < steps:
        for _ in range(8):
            rec(bl.AsyncAddData(records[seq % 64], now))
            seq += 1
        now += 1
        fired = rec(bl.TimerFired(now))
        assert isinstance(fired, Ok), fired
        for effect in fired.effects:
            if isinstance(effect, bl.AsyncAddEntry):
                position = Position(1, entry)
                entry += 1
                rec(bl.AddEntryComplete(effect.write_id, position))
                written.append((position, len(effect.request_ids)))
        if len(written) > 4:
            position, n = written.pop(0)
            rec(bl.DeleteRecords(tuple(BatchedPosition(position.ledger_id, position.entry_id, n, i) for i in range(n))))
    return Workload("batched_log", bl.step, [(start, rec.commands)], start, 4)


def client_workload(steps: int) -> Workload:
    segments: list[tuple[Any, list[Any]]] = []
    total, seq = 0, 0
    commands = [
        ct.Send(TOPIC),
        ct.Send(TOPIC + "-1"),
        ct.Ack(SUB),
        ct.OpCompleted(),
        ct.OpCompleted(),
        ct.OpCompleted(),
        ct.Commit(),
        ct.EndTxnResponse(),
    ]
    while total < steps:
        start = ct.initial(Config(), TxnID(0, seq), 60_000)
        state = start
        for command in commands:
            state, result = ct.step(state, command)
            assert result.ok, result
        segments.append((start, commands))
        total += len(commands)
        seq += 1
    first = segments[0][0]
    return Workload("client", ct.step, segments, first, 0)


def delayed_workload(tracker: str, steps: int, seed: int = 11) -> Workload:
    start = dd.initial(Config(), tracker=tracker)
    rec = Recorder(dd.step, start)
    rng = random.Random(seed)
    now, ledger, entry = 0, 1, 0
    while len(rec.commands) < steps:
        for _ in range(100):
            rec(dd.AddMessage(ledger, entry, now + 1_000 + rng.randrange(59_000), now))
            entry += 1
            if entry == 1000:
                ledger, entry = ledger + 1, 0
            now += 5
        got = rec(dd.GetScheduledMessages(100, now))
        assert isinstance(got, Ok), got
    return Workload(f"delayed/{tracker}", dd.step, [(start, rec.commands)], start, 0)


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------


def floor_rate(w: Workload, n: int, repeat: int) -> float:
    """``dataclasses.replace`` of a frozen slotted dataclass with as many fields as the machine's
    state (one field changed) plus one ``Map.set`` on a map of the size the workload keeps: the
    smallest persistent update of a state that size, whatever the machine's own classes do."""
    width = len(dataclasses.fields(w.floor_state))
    shape = dataclasses.make_dataclass("Floor", [(f"f{i}", int) for i in range(width)], frozen=True, slots=True)
    state = shape(*range(width))
    m = immutables.Map({i: i for i in range(w.map_size)})
    replace = dataclasses.replace

    def run() -> None:
        for i in range(n):
            replace(state, f0=i)
            m.set(i, i)

    return n / best_of(repeat, run)


def machine_rate(w: Workload, repeat: int) -> float:
    return w.steps / best_of(repeat, lambda: replay(w.step, w.segments))


def fresh_hash_seconds(state: Any, bump: Callable[[Any], Any], n: int = 20) -> float:
    """Seconds to hash a state just made by one step (so what changed has no cached hash), the
    state it was made from hashed already (as a checker has: it hashed that state when it got it)."""
    hash(state)
    total = 0.0
    for _ in range(n):
        fresh = bump(state)
        started = time.perf_counter()
        hash(fresh)
        total += time.perf_counter() - started
    return total / n


def buffer_point(entries: int, steps: int, repeat: int) -> dict[str, Any]:
    gc.collect()
    started = cpu()
    state, seq, _ = buffer_state(entries)
    build_s = cpu() - started
    w = buffer_workload(steps, state, seq)
    rate = machine_rate(w, repeat)
    # dispatch of the last 100 entries, from a cursor 100 entries behind the end
    positions = [e.position for e in _last_entries(state, 101)]
    after = positions[0]
    dispatch_s = best_of(repeat, lambda: [tb.dispatch(state, after) for _ in range(100)]) / 100
    bump = _buffer_bump(seq)
    hash_s = fresh_hash_seconds(state, bump)
    return {
        "entries": len(state.entries),
        "ledgers": len(state.ledgers),
        "build_s": build_s,
        "steps_per_s": rate,
        "dispatch_last_100_us": dispatch_s * 1e6,
        "fresh_hash_us": hash_s * 1e6,
    }


def _last_entries(state: Any, n: int) -> list[Any]:
    entries = state.entries
    return [entries[i] for i in range(len(entries) - n, len(entries))]


def _buffer_bump(seq: int) -> Callable[[Any], Any]:
    counter = [seq + 1_000_000]

    def bump(state: Any) -> Any:
        counter[0] += 1
        state, _ = tb.step(state, tb.PublishMessage())
        return state

    return bump


def hash_table(size: int) -> dict[str, float]:
    """Microseconds to hash a freshly stepped state holding ``size`` of what grows, and the same for
    a state holding 10 (the small-state figure beside it)."""
    out: dict[str, float] = {}
    for name, (build, bump) in _hash_subjects().items():
        small, big = build(10), build(size)
        out[name] = fresh_hash_seconds(big, bump) * 1e6
        out[name + "@10"] = fresh_hash_seconds(small, bump) * 1e6
    return out


def _hash_subjects() -> dict[str, tuple[Callable[[int], Any], Callable[[Any], Any]]]:
    def coordinator(n: int) -> Any:
        state = tc.initial(Config())
        for i in range(n):
            state, _ = tc.step(state, tc.NewTxn(60_000, i))
        return state

    def coordinator_bump(state: Any) -> Any:
        state, _ = tc.step(state, tc.NewTxn(60_000, 0))
        return state

    def buffer(n: int) -> Any:
        return buffer_state(n)[0]

    def pending(n: int) -> Any:
        state = pa.initial(Config(), sub_type=pa.SubType.Shared)
        state, _ = pa.step(state, pa.IndividualAck(TxnID(0, 0), (pa.AckedPosition(Position(1, 0)),)))
        state, _ = pa.step(state, pa.PendingAckInitComplete())
        for i in range(1, n):
            state, _ = pa.step(state, pa.IndividualAck(TxnID(0, i), (pa.AckedPosition(Position(1, i)),)))
        return state

    counter = [10**6]

    def pending_bump(state: Any) -> Any:
        counter[0] += 1
        state, _ = pa.step(state, pa.IndividualAck(TxnID(1, counter[0]), (pa.AckedPosition(Position(2, counter[0])),)))
        return state

    def batched(n: int) -> Any:
        config = Config(transaction_log_batched_write_enabled=True)
        state = bl.initial(config, LogKind.TRANSACTION_LOG)
        record = _txn_record(1)
        for i in range(n):
            state, _ = bl.step(state, bl.AsyncAddData(record, i))
            state, fired = bl.step(state, bl.TimerFired(i + 1))
            for effect in fired.effects:
                if isinstance(effect, bl.AsyncAddEntry):
                    state, _ = bl.step(state, bl.AddEntryComplete(effect.write_id, Position(1, i)))
        return state

    def batched_bump(state: Any) -> Any:
        state, _ = bl.step(state, bl.AsyncAddData(_txn_record(2), 0))
        return state

    def delayed(tracker: str) -> Callable[[int], Any]:
        def build(n: int) -> Any:
            state = dd.initial(Config(), tracker=tracker)
            for i in range(n):
                state, _ = dd.step(state, dd.AddMessage(1 + i // 1000, i % 1000, 10**9 + i, 0))
            return state

        return build

    def delayed_bump(state: Any) -> Any:
        counter[0] += 1
        state, _ = dd.step(state, dd.AddMessage(10**6, counter[0], 10**9, 0))
        return state

    return {
        "coordinator (live txns)": (coordinator, coordinator_bump),
        "buffer (entries)": (buffer, _buffer_bump(10**7)),
        "pending_ack (pending positions)": (pending, pending_bump),
        "batched_log (live entries)": (batched, batched_bump),
        "delayed/bucket (messages)": (delayed("bucket"), delayed_bump),
        "delayed/in_memory (messages)": (delayed("in_memory"), delayed_bump),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per workload")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="1000,10000,100000,1000000", help="buffer sizes (entries)")
    parser.add_argument("--hash-size", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=Path("out/step_bench"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    load_before = os.getloadavg()
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    say(f"step_bench: {args.steps:,} steps per workload, best of {args.repeat}, process CPU time")
    say(f"load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} on {os.cpu_count()} cores")
    say()
    workloads = [
        coordinator_workload(args.steps),
        buffer_workload(args.steps),
        pending_ack_workload(args.steps),
        batched_log_workload(args.steps),
        client_workload(args.steps),
        delayed_workload("bucket", args.steps),
        delayed_workload("in_memory", args.steps),
    ]
    machines: dict[str, dict[str, float]] = {}
    say(f"{'machine':20} {'steps/s':>10} {'floor/s':>10} {'of floor':>9}   goal {GOAL_STEPS_PER_S:,}")
    for w in workloads:
        rate = machine_rate(w, args.repeat)
        floor = floor_rate(w, w.steps, args.repeat)
        machines[w.name] = {"steps": w.steps, "steps_per_s": rate, "floor_per_s": floor, "of_floor": rate / floor}
        mark = "ok" if rate >= GOAL_STEPS_PER_S else "BELOW GOAL"
        say(f"{w.name:20} {rate:10,.0f} {floor:10,.0f} {rate / floor:9.2f}   {mark}")
    say()
    say("buffer as the topic grows (same workload from a state holding N entries)")
    say(f"{'entries':>10} {'ledgers':>8} {'steps/s':>10} {'vs first':>9} {'dispatch 100':>13} {'fresh hash':>11}")
    curve: list[dict[str, Any]] = []
    for size in sizes:
        point = buffer_point(size, args.steps, args.repeat)
        curve.append(point)
        ratio = point["steps_per_s"] / curve[0]["steps_per_s"]
        point["vs_first"] = ratio
        say(
            f"{point['entries']:10,} {point['ledgers']:8} {point['steps_per_s']:10,.0f} {ratio:9.2f}"
            f" {point['dispatch_last_100_us']:10,.0f} us {point['fresh_hash_us']:8,.1f} us"
        )
    if len(curve) > 1:
        flat = curve[-1]["steps_per_s"] / curve[0]["steps_per_s"]
        verdict = "ok" if flat >= GOAL_FLAT else "BELOW GOAL"
        say(
            f"largest/smallest: {flat:.2f} (goal >= {GOAL_FLAT})  {verdict}"
            f"   ({curve[-1]['entries']:,} vs {curve[0]['entries']:,} entries)"
        )
    say()
    say(f"hash of a freshly stepped state holding {args.hash_size:,} (beside one holding 10)")
    hashes = hash_table(args.hash_size)
    for name in _hash_subjects():
        say(f"  {name:34} {hashes[name]:10,.1f} us   (10: {hashes[name + '@10']:6,.1f} us)")
    load_after = os.getloadavg()
    say()
    say(f"load average after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.txt").write_text("\n".join(lines) + "\n")
    report = {
        "load_before": load_before,
        "load_after": load_after,
        "machines": machines,
        "buffer_curve": curve,
        "hash_us": hashes,
        "hash_size": args.hash_size,
    }
    (args.out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out / 'report.txt'} and {args.out / 'report.json'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    from views.progress import Reporter

    with Reporter().phase("step_bench", unit=""):
        code = main()
    raise SystemExit(code)
