"""How ``txnmodel verify`` scales on Jepsen's Kafka workload: histories of 10^4, 10^5 and 10^6
operations, each read from ``history.edn`` text (``history_io.edn`` and ``history_io.kafka``) and
judged by Jepsen's taxonomy (``invariants.queue`` through ``invariants.verify.check_history``), in one
run.

An *operation* is one client operation, an invocation and its completion (two lines of the file: the
contract counts operations so; ``jepsen.history`` would count 2x10^6 entries for 10^6 of them).  The
histories are a correct Kafka-like run, made here: each process is assigned one or two of the keys
(every key to one process) and sends one or two messages to any key, polls the next messages of one
of its keys, or both in one transaction; now and then a send fails (its offsets stay unused) and a
process crashes and comes back under a new number, reading its keys from the start; at the end every
process polls until it has read its keys to the end, so nothing is unseen.  The verdict must be ``ok``: a
scaling figure for a run that raised false alarms would measure the wrong thing.

Reported per size: the wall and CPU seconds of reading and of checking, operations per CPU second,
the peak memory of the process so far, and the CPU time ratio to the previous size (10 for linear
time), with the load average before and after (the machine is shared).  Writes
``out/bench/kafka_scale.json``.  ``python benchmarks/kafka_scale.py [--sizes 10000,100000,1000000]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KEYS = 16
PROCESSES = 10


def kafka_history(operations: int, seed: int = 1) -> str:
    """A correct Kafka-workload history of ``operations`` operations as ``history.edn`` text."""
    rng = random.Random(seed)
    logs: list[list[int | None]] = [[] for _ in range(KEYS)]  # per key: value per offset (None: aborted)
    position = {p: [0] * KEYS for p in range(PROCESSES)}  # per process: next offset to poll, per key
    process_of = list(range(PROCESSES))  # thread -> its current process number
    counter, time_ns, lines = 0, 0, []

    def emit(thread: int, f: str, invoked: str, kind: str, done: str) -> None:
        nonlocal time_ns
        process = process_of[thread]
        lines.append(f"{{:type :invoke, :f :{f}, :value {invoked}, :time {time_ns}, :process {process}}}")
        time_ns += rng.randrange(1_000, 50_000)
        lines.append(f"{{:type :{kind}, :f :{f}, :value {done}, :time {time_ns}, :process {process}}}")
        time_ns += rng.randrange(1_000, 5_000)

    mine = {t: [k for k in range(KEYS) if k % PROCESSES == t] for t in range(PROCESSES)}
    assigned = {t: "[" + " ".join(map(str, keys)) + "]" for t, keys in mine.items()}
    for thread in range(PROCESSES):
        emit(thread, "assign", assigned[thread], "ok", assigned[thread])
    done_ops = PROCESSES
    while done_ops < operations - PROCESSES * KEYS:
        thread = rng.randrange(PROCESSES)
        roll = rng.random()
        sends, polls = [], []
        failed = roll < 0.01
        if roll >= 0.4 and not failed:  # polls first: a transaction never reads its own sends
            key = rng.choice(mine[thread])
            polls = _poll(logs, position[thread], key, rng.randint(1, 4))
        if roll < 0.6:
            for _ in range(rng.randint(1, 2)):
                key = rng.randrange(KEYS)
                counter += 1
                sends.append((key, len(logs[key]), counter))
                logs[key].append(None if failed else counter)
        _emit_op(emit, thread, sends, polls, failed)
        done_ops += 1
        if rng.random() < 0.002:  # the client crashes; a fresh one reads from the start of every key
            emit(thread, "crash", "nil", "info", "nil")
            process_of[thread] += PROCESSES
            position[thread] = [0] * KEYS
            emit(thread, "assign", assigned[thread], "ok", assigned[thread])
            done_ops += 2
    for thread in range(PROCESSES):  # final polls: everyone catches up
        for key in mine[thread]:
            _emit_op(emit, thread, [], _poll(logs, position[thread], key, len(logs[key])), False)
    return "\n".join(lines) + "\n"


def _poll(logs: list[list[int | None]], at: list[int], key: int, most: int) -> list[tuple[int, int, int]]:
    """The next committed messages of a key from the process's position, which moves past them."""
    out = []
    while at[key] < len(logs[key]) and len(out) < most:
        value = logs[key][at[key]]
        if value is not None:
            out.append((key, at[key], value))
        at[key] += 1
    return out


def _emit_op(
    emit: object, thread: int, sends: list[tuple[int, int, int]], polls: list[tuple[int, int, int]], failed: bool
) -> None:
    invoked = [f"[:send {k} {v}]" for k, _, v in sends] + (["[:poll]"] if polls or not sends else [])
    done = [f"[:send {k} [{o} {v}]]" for k, o, v in sends]
    if polls or not sends:
        by_key: dict[int, list[str]] = {}
        for k, o, v in polls:
            by_key.setdefault(k, []).append(f"[{o} {v}]")
        done.append("[:poll {" + ", ".join(f"{k} [{' '.join(v)}]" for k, v in by_key.items()) + "}]")
    f = "txn" if sends and polls else "send" if sends else "poll"
    emit(thread, f, "[" + " ".join(invoked) + "]", "fail" if failed else "ok", "[" + " ".join(done) + "]")  # type: ignore[operator]


def measure(operations: int) -> dict[str, object]:
    from history_io.edn import parse_edn
    from invariants.verify import VerifyOptions, check_history

    text = kafka_history(operations)
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    ops = parse_edn(text, history="kafka/scale")
    t1, c1 = time.perf_counter(), time.process_time()
    del text
    rows = check_history("kafka/scale", ops, "kafka_scale", VerifyOptions(counterexamples=False))
    t2, c2 = time.perf_counter(), time.process_time()
    (row,) = rows
    detail = json.loads(row.detail)
    assert row.checker == "transactional" and row.verdict == "ok", (row.verdict, detail["counts"])
    cpu = c2 - c0
    return {
        "operations": operations,
        "rows": len(ops),
        "read_wall_s": round(t1 - t0, 2),
        "read_cpu_s": round(c1 - c0, 2),
        "check_wall_s": round(t2 - t1, 2),
        "check_cpu_s": round(c2 - c1, 2),
        "cpu_s": round(cpu, 2),
        "ops_per_cpu_s": round(operations / cpu),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "verdict": row.verdict,
        "informational": detail["informational"]["counts"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="operations per history, comma-separated")
    parser.add_argument("--out", default=str(ROOT / "out" / "bench" / "kafka_scale.json"))
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    before = os.getloadavg()
    results = []
    for size in sizes:
        found = measure(size)
        if results:
            found["cpu_ratio_to_previous"] = round(float(found["cpu_s"]) / float(results[-1]["cpu_s"]), 2)  # type: ignore[arg-type]
        results.append(found)
        print(json.dumps(found), flush=True)
    after = os.getloadavg()
    report = {"load_average_before": before, "load_average_after": after, "cores": os.cpu_count(), "results": results}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"load average before {before}, after {after}; written {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
