"""Writes ``spec/vectors/batched_log/*.json``: ``.venv/bin/python tests/batched_log/make_vectors.py``.

Only the repetitive parts are generated (hundreds of adds, the callbacks of a 512-record batch);
every expectation is written here from the rules page and the fact sheet's catalogue, never read
back from the reference.  ``txnmodel vectors run spec/vectors/batched_log`` then checks the
reference against them.  Records are real ``TransactionMetadataEntry`` / ``PendingAckMetadataEntry``
bytes of an exact size (``reference.batched_log.sample_record``).
"""

# ruff: noqa: E501  (vector descriptions are long sentences; the JSON is what people read)

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from reference.batched_log import sample_record  # noqa: E402
from spec.envelope import LogKind  # noqa: E402

OUT = ROOT / "spec" / "vectors" / "batched_log"
SRC = "pulsar-pip160-pip195 C.1"


def rec(size=4, seq=0, kind=LogKind.TRANSACTION_LOG):
    return {"@bytes": sample_record(size, seq % 128, kind).hex()}


def add(size=4, seq=0, now=0, expect=None, comment=None, kind=LogKind.TRANSACTION_LOG, check=None):
    s = {"command": "async_add_data", "args": {"data": rec(size, seq, kind), "now_ms": now}}
    if expect is not None:
        s["expect"] = expect
    if comment:
        s["comment"] = comment
    if check:
        s["check"] = check
    return s


def flush(trigger, records, write_id, bytes_size=None, batched=True):
    fo = {"@type": "FlushObserved", "trigger": trigger, "records": records}
    if bytes_size is not None:
        fo["bytes_size"] = bytes_size
    return [fo, {"@type": "AsyncAddEntry", "write_id": write_id, "batched": batched}]


def complete(write_id, ledger, entry, n, first_request, batched=True):
    if batched:
        eff = [
            {"@type": "AddComplete", "request_id": first_request + i, "position": [ledger, entry, n, i]}
            for i in range(n)
        ]
    else:
        eff = [{"@type": "AddComplete", "request_id": first_request, "position": [ledger, entry]}]
    return {
        "command": "add_entry_complete",
        "args": {"write_id": write_id, "position": [ledger, entry]},
        "expect": {"ok": {"records": n}, "effects": eff},
    }


def fail(write_id, requests, error="PersistenceError"):
    return {
        "command": "add_entry_failed",
        "args": {"write_id": write_id, "error": error},
        "expect": {
            "ok": {"records": 0},
            "effects": [{"@type": "AddFailed", "request_id": r, "error": {"@type": error}} for r in requests],
        },
    }


def tick(now, expect=None):
    s = {"command": "timer_fired", "args": {"now_ms": now}}
    if expect is not None:
        s["expect"] = expect
    return s


def obs(name, equals, args=None):
    c = {"observe": name, "equals": equals}
    if args:
        c["args"] = args
    return c


def stats(**kw):
    return obs("stats", {"@type": "FlushStats", **kw})


def conf(enabled=True, records=512, size=4 * 1024 * 1024, delay=1, prefix="transactionLog"):
    return {
        f"{prefix}BatchedWriteEnabled": enabled,
        f"{prefix}BatchedWriteMaxRecords": records,
        f"{prefix}BatchedWriteMaxSize": size,
        f"{prefix}BatchedWriteMaxDelayInMillis": delay,
    }


def write(name, description, rules, config, steps, source=SRC, init=None):
    v = {
        "id": name,
        "machine": "batched_log",
        "description": description,
        "source": source,
        "rules": rules,
        "config": config,
        "steps": steps,
    }
    if init:
        v["init"] = init
    head = {k: val for k, val in v.items() if k != "steps"}
    text = json.dumps(head, indent=2)[:-2] + ',\n  "steps": [\n'
    text += ",\n".join("    " + json.dumps(step, separators=(", ", ": ")) for step in steps)
    text += "\n  ]\n}\n"
    json.loads(text)
    (OUT / f"{name}.json").write_text(text, encoding="utf-8")


def batched_run(n, max_records, delay_tick_at=None):
    """n adds of 4-byte records; count flushes every max_records; remainder on the timer."""
    steps, write_id = [], 0
    full = n // max_records
    for i in range(n):
        if (i + 1) % max_records == 0:
            steps.append(
                add(
                    4,
                    i,
                    expect={
                        "ok": {"request_id": i},
                        "effects": flush("MAX_RECORDS", max_records, write_id, 4 * max_records),
                    },
                )
            )
            write_id += 1
        else:
            steps.append(add(4, i, expect={"ok": {"request_id": i}, "effects": []}))
    rest = n - full * max_records
    if rest:
        steps.append(
            tick(
                delay_tick_at,
                {
                    "ok": {"records": rest},
                    "effects": [*flush("MAX_DELAY", rest, write_id, 4 * rest), {"@type": "ArmTimer"}],
                },
            )
        )
        write_id += 1
    first = 0
    for w in range(write_id):
        size = max_records if w < full else rest
        steps.append(complete(w, 3, w, size, first))
        first += size
    steps[-1]["check"] = [obs("succeeded", n), obs("failed", 0), obs("in_flight", []), obs("buffered_requests", [])]
    return steps


# 1.1 / 1.2 / 1.3 / 1.6
write(
    "c1-1.1-main-process-normal-batching",
    "TxnLogBufferedWriterTest.testMainProcess row 1: 512 records, 1 MiB, 1 ms, batching on, 2000 writes of 4 bytes: three full batches by count, the rest on the timer; every record learns (ledger, entry, batch size, index) in order.",
    ["BW-9", "BW-12", "BW-13", "BW-15", "BW-17"],
    conf(True, 512, 1024 * 1024, 1),
    batched_run(2000, 512, 1),
)
write(
    "c1-1.2-main-process-few-writes",
    "testMainProcess row 2: 100 writes stay below every threshold and are flushed together by the timer.",
    ["BW-12", "BW-15"],
    conf(True, 512, 1024 * 1024, 1),
    batched_run(100, 512, 1),
)
write(
    "c1-1.3-main-process-many-writes",
    "testMainProcess row 3 (512 records, 1 MiB, 100 ms), with 1030 writes instead of 20000: count flushes do not wait for the 100 ms tick; the remainder goes on the tick.",
    ["BW-9", "BW-12", "BW-15"],
    conf(True, 512, 1024 * 1024, 100),
    batched_run(1030, 512, 100),
)
write(
    "c1-1.6-main-process-max-records-2",
    "testMainProcess row 6 (maxRecords 2) with 11 writes instead of 1999: batches of two, the last record flushed by the timer as a batch of one.",
    ["BW-9", "BW-12", "BW-15"],
    conf(True, 2, 1024 * 1024, 1),
    batched_run(11, 2, 1),
)

# 1.4 all large
steps = []
for i in range(6):
    steps.append(
        add(
            1024,
            i,
            expect={
                "ok": {"request_id": i},
                "effects": [{"@type": "AsyncAddEntry", "write_id": i, "batched": False, "request_ids": [i]}],
            },
        )
    )
for i in range(6):
    steps.append(complete(i, 3, i, 1, i, batched=False))
steps[-1]["check"] = [stats(batches=0, large_data=0), obs("succeeded", 6)]
write(
    "c1-1.4-main-process-all-large",
    "testMainProcess row 4 (maxSize 1024 B, 1024-byte records), 6 writes instead of 3000: every record is large (>= maxSize), written alone as a plain entry with a plain position; an empty buffer counts no trigger.",
    ["BW-8", "BW-15", "BW-19"],
    conf(True, 512, 1024, 100),
    steps,
)

# 1.5 maxRecords 1 and 1.7 disabled
for name, c, desc in (
    (
        "c1-1.5-main-process-max-records-1",
        conf(True, 1, 1024 * 1024, 1),
        "testMainProcess row 5: batching requested with maxRecords 1 is not effective: plain entries, plain positions, no timer.",
    ),
    (
        "c1-1.7-main-process-batching-off",
        conf(False, 128, 1024 * 1024, 1),
        "testMainProcess row 7: batching off: every record is its own plain entry; nothing is buffered; no timer, no metrics.",
    ),
):
    steps = [
        add(
            4,
            0,
            check=[obs("effective_batching", False), obs("timer_due_ms", None)],
            expect={"ok": {"request_id": 0}, "effects": [{"@type": "AsyncAddEntry", "write_id": 0, "batched": False}]},
        )
    ]
    for i in range(1, 5):
        steps.append(
            add(
                4,
                i,
                expect={
                    "ok": {"request_id": i},
                    "effects": [{"@type": "AsyncAddEntry", "write_id": i, "batched": False}],
                },
            )
        )
    for i in range(5):
        steps.append(complete(i, 3, i, 1, i, batched=False))
    steps[-1]["check"] = [stats(batches=0), obs("buffered_requests", []), obs("succeeded", 5)]
    write(name, desc, ["BW-2", "BW-5", "BW-19"], c, steps)

# 1.8 / 1.9 always fail
steps = [add(4, i) for i in range(4)] + [tick(1)] + [fail(0, [0, 1, 2, 3])]
steps[-1]["check"] = [obs("failed", 4), obs("succeeded", 0)]
write(
    "c1-1.8-bookie-always-fails-batched",
    "testMainProcess row 8: the ledger fails every write: every record of the batch fails with the ledger's error, in order.",
    ["BW-16", "BW-17"],
    conf(True, 512, 1024 * 1024, 1),
    steps,
)
steps = [add(4, i) for i in range(3)] + [fail(i, [i]) for i in range(3)]
steps[-1]["check"] = [obs("failed", 3)]
write(
    "c1-1.9-bookie-always-fails-unbatched",
    "testMainProcess row 9: batching off and the ledger fails every write: every request fails.",
    ["BW-5", "BW-16", "BW-17"],
    conf(False),
    steps,
)

# 1.10 / 1.11 fails after first write
steps = [add(4, i) for i in range(4)] + [tick(1)] + [add(4, 4 + i, now=1) for i in range(3)] + [tick(2)]
steps += [complete(0, 3, 0, 4, 0), fail(1, [4, 5, 6])]
steps[-1]["check"] = [obs("succeeded", 4), obs("failed", 3), obs("accepted", 7)]
write(
    "c1-1.10-bookie-fails-after-first-batched",
    "testMainProcess row 10: the first batch is written, the ledger fails the second: failures + successes = total; the first batch's successes are unaffected.",
    ["BW-16", "BW-17"],
    conf(True, 512, 1024 * 1024, 1),
    steps,
)
steps = [add(4, i) for i in range(3)] + [
    complete(0, 3, 0, 1, 0, batched=False),
    fail(1, [1]),
    fail(2, [2], "ManagedLedgerAlreadyClosed"),
]
steps[-1]["check"] = [obs("succeeded", 1), obs("failed", 2)]
write(
    "c1-1.11-bookie-fails-after-first-unbatched",
    "testMainProcess row 11: batching off, the ledger fails after the first write.",
    ["BW-5", "BW-16", "BW-17"],
    conf(False),
    steps,
)

# 1.12 / 1.13 close mid-stream
closed = {"error": "ManagedLedgerFenced", "message_contains": "Transaction log buffered write has closed"}
steps = [add(4, i) for i in range(2)] + [
    add(4, 2, expect={"ok": {"request_id": 2}, "effects": flush("MAX_RECORDS", 3, 0)})
]
steps += [
    add(4, 3),
    add(4, 4),
    {"command": "close", "expect": {"ok": {"status": "CLOSING"}}},
    add(4, 5, expect=closed),
    {
        "command": "finish_close",
        "expect": {
            "ok": {"status": "CLOSED"},
            "effects": [
                {"@type": "AddFailed", "request_id": 3, "error": {"@type": "ManagedLedgerFenced"}},
                {"@type": "AddFailed", "request_id": 4, "error": {"@type": "ManagedLedgerFenced"}},
                {"@type": "CancelTimer"},
            ],
        },
    },
    add(4, 6, expect=closed),
    complete(0, 3, 0, 3, 0),
]
steps[-1]["check"] = [obs("status", "CLOSED"), obs("succeeded", 3), obs("failed", 2), obs("accepted", 5)]
write(
    "c1-1.12-close-mid-stream-batched",
    "testMainProcess row 12: the writer is closed mid-stream: the batch in flight still succeeds; buffered records and later adds fail with the closed error; every request gets one callback.",
    ["BW-4", "BW-14", "BW-17", "BW-18"],
    conf(True, 3, 1024 * 1024, 1000),
    steps,
)
steps = [
    add(4, 0),
    add(4, 1),
    {"command": "close", "expect": {"ok": {"status": "CLOSED"}, "effects": []}},
    add(4, 2, expect=closed),
    complete(0, 3, 0, 1, 0, batched=False),
    complete(1, 3, 1, 1, 1, batched=False),
]
steps[-1]["check"] = [obs("succeeded", 2), obs("accepted", 2)]
write(
    "c1-1.13-close-mid-stream-unbatched",
    "testMainProcess row 13: batching off, closed mid-stream: close is immediate; writes in flight still complete; later adds fail.",
    ["BW-4", "BW-17", "BW-18"],
    conf(False),
    steps,
)

# 2 thresholds
steps = [
    add(4, 0, now=0),
    tick(100, {"ok": {"records": 1}, "effects": [*flush("MAX_DELAY", 1, 0, 4), {"@type": "ArmTimer", "due_ms": 200}]}),
]
write(
    "c1-2a-flush-threshold-max-delay",
    "testFlushThresholds (a): maxDelay 100 ms and one record: nothing is written before the tick; the tick writes one entry.",
    ["BW-12"],
    conf(True, 512, 1024 * 1024, 100),
    [{"command": "timer_fired", "args": {"now_ms": 90}, "expect": {"error": "NotAllowed"}}, *steps],
)
steps = [add(4, i) for i in range(31)] + [
    add(4, 31, expect={"ok": {"request_id": 31}, "effects": flush("MAX_RECORDS", 32, 0, 128)})
]
write(
    "c1-2b-flush-threshold-max-records",
    "testFlushThresholds (b): maxRecords 32: the 32nd record is included in the flushed batch.",
    ["BW-9"],
    conf(True, 32, 1024 * 1024, 10000),
    steps,
)
steps = [add(4, i) for i in range(63)]
steps[-1]["check"] = [obs("buffered_bytes", 252)]
steps.append(add(4, 63, expect={"ok": {"request_id": 63}, "effects": flush("MAX_SIZE", 64, 0, 256)}))
write(
    "c1-2c-flush-threshold-max-size",
    "testFlushThresholds (c): maxSize 256 B, 64 records of 4 B: the flush happens exactly at the 64th record (>=).",
    ["BW-10", "BW-11"],
    conf(True, 512, 256, 10000),
    steps,
)

# 3 one pending tick
steps = [
    tick(1, {"ok": {"records": 0}, "effects": [{"@type": "ArmTimer", "due_ms": 2}]}),
    tick(50, {"ok": {"records": 0}, "effects": [{"@type": "ArmTimer", "due_ms": 51}]}),
]
steps[-1]["check"] = [obs("timer_due_ms", 51)]
write(
    "c1-3-one-pending-timer-task",
    "testPendingScheduleTriggerTaskCount: the timer is one-shot and re-armed relative to the tick that ran, however late; there is only ever one due time.",
    ["BW-12"],
    conf(True, 2, 1024 * 1024, 1),
    steps,
)

# 4 metrics disabled
steps = [add(4, i) for i in range(20)]
steps[-1]["check"] = [stats(batches=0, max_records=0, max_size=0, max_delay=0, large_data=0)]
write(
    "c1-4-metrics-disabled-batching",
    "testMetricsStatsWhenDisabledBatchFeature (20 writes instead of 1000): batching off records no metric.",
    ["BW-19"],
    conf(False),
    steps,
)

# 6 metrics max size
steps = []
for i in range(100):
    if (i + 1) % 4 == 0:
        steps.append(add(4, i, expect={"ok": {"request_id": i}, "effects": flush("MAX_SIZE", 4, i // 4, 16)}))
    else:
        steps.append(add(4, i))
steps[-1]["check"] = [
    stats(max_records=0, max_size=25, max_delay=0, large_data=0, batches=25, records_sum=100, bytes_sum=400)
]
write(
    "c1-6-metrics-triggered-by-max-size",
    "testMetricsStatsThatTriggeredByMaxSize: maxSize 16, 100 writes of 4 B: 25 flushes by size, bytes sum 400.",
    ["BW-10", "BW-19"],
    conf(True, 512, 16, 100000),
    steps,
)

# 7 metrics max delay
steps = [
    add(4, 0, now=0),
    tick(
        1000,
        {
            "ok": {"records": 1},
            "effects": [
                {"@type": "FlushObserved", "trigger": "MAX_DELAY", "records": 1, "bytes_size": 4, "delay_ms": 1000},
                {"@type": "AsyncAddEntry"},
                {"@type": "ArmTimer"},
            ],
        },
    ),
]
steps[-1]["check"] = [
    stats(
        max_records=0, max_size=0, max_delay=1, large_data=0, batches=1, records_sum=1, bytes_sum=4, delay_ms_sum=1000
    )
]
write(
    "c1-7-metrics-triggered-by-max-delay",
    "testMetricsStatsThatTriggeredByMaxDelayTime: maxDelay 1000 ms, one write: one flush by delay, histograms (1, 1, 4).",
    ["BW-12", "BW-19"],
    conf(True, 512, 1024 * 1024, 1000),
    steps,
)

# M5 alternating large
steps = []
wid = 0
for i in range(20):
    if i % 2 == 0:
        steps.append(add(4, i))
    else:
        steps.append(
            add(
                1024,
                i,
                expect={
                    "ok": {"request_id": i},
                    "effects": [
                        *flush("LARGE_DATA", 1, wid, 4),
                        {"@type": "AsyncAddEntry", "write_id": wid + 1, "batched": False},
                    ],
                },
            )
        )
        wid += 2
steps[-1]["check"] = [stats(large_data=10, batches=10, records_sum=10, bytes_sum=40)]
write(
    "c1-m5-metrics-large-data-alternating",
    "Fact sheet A.7 M5 (20 writes instead of 100): 4 B and 1024 B records alternating with maxSize 1024: each large record flushes the one buffered record (trigger large_data) and is written alone.",
    ["BW-8", "BW-19"],
    conf(True, 512, 1024, 100000),
    steps,
)

# 9 fail when add data
bad = [{"@bytes": ""}, {"@bytes": "ffff"}, {"@bytes": "0e010001"}, {"@bytes": "1001"}]
steps = [{"command": "async_add_data", "args": {"data": b}, "expect": {"error": "ManagedLedgerIntercept"}} for b in bad]
steps[-1]["check"] = [obs("accepted", 0), obs("buffered_requests", []), obs("in_flight", [])]
write(
    "c1-9-fail-when-add-data",
    "testFailWhenAddData: records that cannot be sized or serialized (empty, not a record, an envelope, a record without its op) fail alone with ManagedLedgerIntercept; nothing is written.",
    ["BW-7"],
    conf(True),
    steps,
)

# 10 ack set by index (via delete of index 5 of a batch of 10)
steps = [add(4, i) for i in range(9)] + [
    add(4, 9, expect={"ok": {"request_id": 9}, "effects": flush("MAX_RECORDS", 10, 0)})
]
steps.append(complete(0, 7, 2, 10, 0))
steps.append(
    {
        "command": "delete_records",
        "args": {"positions": [[7, 2, 10, 5]]},
        "expect": {
            "ok": {"fully_deleted": []},
            "effects": [
                {
                    "@type": "CursorDelete",
                    "entries": [{"@type": "CursorDeleteEntry", "position": [7, 2], "ack_set": [1023 - 32]}],
                }
            ],
        },
        "check": [
            obs(
                "entry",
                {"@type": "EntryView", "batch_size": 10, "remaining": [0, 1, 2, 3, 4, 6, 7, 8, 9]},
                {"position": [7, 2]},
            )
        ],
    }
)
write(
    "c1-10-set-ack-set-by-index",
    "TxnBatchedPositionImplTest.testSetAckSetByIndex (size 10, index 5): deleting a record sends the ack set with bits [0, 10) set and bit 5 cleared; only that index is gone.",
    ["BW-20"],
    conf(True, 10, 1024 * 1024, 1000),
    steps,
)

# 11/12 key in map / compareTo: a batched position deletes the entry named by its plain (L, E)
steps = [
    add(4, 0),
    add(4, 1, expect={"ok": {"request_id": 1}, "effects": flush("MAX_RECORDS", 2, 0)}),
    complete(0, 1, 1, 2, 0),
    {
        "command": "delete_records",
        "args": {"positions": [[1, 1, 2, 0], [1, 1, 2, 1]]},
        "expect": {
            "ok": {"fully_deleted": [[1, 1]]},
            "effects": [
                {
                    "@type": "CursorDelete",
                    "entries": [{"@type": "CursorDeleteEntry", "position": [1, 1], "ack_set": []}],
                }
            ],
        },
        "check": [obs("entry", None, {"position": [1, 1]}), obs("live_entries", 0)],
    },
]
write(
    "c1-11-batched-position-is-plain-key",
    "TxnBatchedPositionImplTest.testKeyInMap / testCompareTo: a batched position (1, 1, 2, i) names the entry (1, 1); deleting both indexes deletes the entry (the ANDed ack set has no bit left).",
    ["BW-20", "BW-21"],
    conf(True, 2, 1024 * 1024, 1000),
    steps,
)

# 16 defaults
steps = [
    add(
        4,
        0,
        check=[obs("effective_batching", False), obs("timer_due_ms", None)],
        expect={"ok": {"request_id": 0}, "effects": [{"@type": "AsyncAddEntry", "batched": False}]},
    )
]
write(
    "c1-16-default-configuration-transaction-log",
    "ServiceConfigurationTest.testTransactionBatchConfigurations: by default (false / 512 / 4 MiB / 1 ms) the coordinator's log writes plain entries.",
    ["BW-1", "BW-2"],
    {},
    steps,
)
write(
    "c1-16-default-configuration-pending-ack",
    "ServiceConfigurationTest: the pending-ack store's own keys default to off as well.",
    ["BW-1", "BW-2"],
    {},
    [add(6, 0, kind=LogKind.PENDING_ACK, check=[obs("effective_batching", False)])],
    init={"kind": "PENDING_ACK"},
)
steps = [add(6, i, kind=LogKind.PENDING_ACK) for i in range(2)] + [
    add(6, 2, kind=LogKind.PENDING_ACK, expect={"ok": {"request_id": 2}, "effects": flush("MAX_RECORDS", 3, 0, 18)})
]
write(
    "c1-16-pending-ack-own-keys",
    "The pending-ack store batches by transactionPendingAckBatchedWrite* keys while the coordinator's keys stay at their defaults.",
    ["BW-1", "BW-9"],
    conf(True, 3, 1024 * 1024, 1000, prefix="transactionPendingAck"),
    steps,
    init={"kind": "PENDING_ACK"},
)

# 17 metrics integration (maxRecords 10, 100 records)
steps = []
for i in range(100):
    steps.append(add(4, i, now=i))
steps.append(tick(101))
steps[-1]["check"] = [stats(max_records=10, batches=10, records_sum=100, bytes_sum=400)]
write(
    "c1-17-metrics-integration",
    "Transaction metrics integration: batching on with maxRecords 10; after 100 records the records-sum, bytes-sum and trigger counters are positive.",
    ["BW-19"],
    conf(True, 10, 1024 * 1024, 1000),
    steps,
)

# edge cases
steps = [add(20, 0, expect={"ok": {"request_id": 0}, "effects": [{"@type": "AsyncAddEntry", "batched": False}]})]
write(
    "edge-large-record-exactly-max-size",
    "Edge: a record of exactly maxSize bytes is large (>=), written alone; a record one byte smaller is buffered.",
    ["BW-8"],
    conf(True, 512, 20, 1000),
    [*steps, add(19, 1, expect={"ok": {"request_id": 1}, "effects": []})],
)
steps = [add(4, 0), add(4, 1, expect={"ok": {"request_id": 1}, "effects": flush("MAX_RECORDS", 2, 0, 8)})]
write(
    "edge-count-wins-over-size",
    "Edge: when the count and the size threshold are reached by the same record, the flush counts as max_records.",
    ["BW-9", "BW-10"],
    conf(True, 2, 8, 1000),
    steps,
)
steps = [
    {"command": "close", "expect": {"ok": {"status": "CLOSING"}}},
    {"command": "close", "expect": {"ok": {"status": "CLOSING"}}},
    {"command": "finish_close", "expect": {"ok": {"status": "CLOSED"}, "effects": [{"@type": "CancelTimer"}]}},
    {"command": "finish_close", "expect": {"error": "NotAllowed"}},
    {"command": "close", "expect": {"ok": {"status": "CLOSED"}}},
]
write(
    "edge-close-is-idempotent",
    "Edge: closing twice is a no-op; the close task runs once; a closed writer stays closed.",
    ["BW-3", "BW-18"],
    conf(True),
    steps,
)
steps = [
    add(4, 0),
    add(4, 1),
    {"command": "close"},
    tick(
        5,
        {
            "ok": {"records": 2},
            "effects": [
                {"@type": "FlushObserved", "trigger": "MAX_DELAY"},
                {"@type": "AddFailed", "request_id": 0, "error": {"@type": "ManagedLedgerFenced"}},
                {"@type": "AddFailed", "request_id": 1, "error": {"@type": "ManagedLedgerFenced"}},
            ],
        },
    ),
    {"command": "finish_close", "expect": {"ok": {"status": "CLOSED"}, "effects": []}},
]
steps[-1]["check"] = [obs("failed", 2), obs("timer_due_ms", None)]
write(
    "edge-tick-while-closing-fails-batch",
    "Edge: a timer tick that runs after close's compare-and-set but before its task fails the batch instead of writing it, and does not re-arm.",
    ["BW-12", "BW-14", "BW-18"],
    conf(True, 512, 1024 * 1024, 5),
    steps,
)
steps = [
    add(4, 0),
    add(4, 1, expect={"ok": {"request_id": 1}, "effects": flush("MAX_RECORDS", 2, 0)}),
    complete(0, 1, 0, 2, 0),
    {"command": "delete_records", "args": {"positions": [[1, 0, 3, 1]]}, "expect": {"error": "NotAllowed"}},
    {"command": "delete_records", "args": {"positions": [[9, 9]]}, "expect": {"error": "NotAllowed"}},
    {
        "command": "delete_records",
        "args": {"positions": [[1, 0]]},
        "expect": {
            "ok": {"fully_deleted": [[1, 0]]},
            "effects": [
                {
                    "@type": "CursorDelete",
                    "entries": [{"@type": "CursorDeleteEntry", "position": [1, 0], "ack_set": None}],
                }
            ],
        },
    },
]
write(
    "edge-delete-validation-and-whole-entry",
    "Edge: a delete naming the wrong batch size or an unknown entry is rejected; a plain position deletes the whole entry.",
    ["BW-20", "BW-21"],
    conf(True, 2, 1024 * 1024, 1000),
    steps,
)
steps = [
    add(4, 0),
    add(4, 1),
    {
        "command": "set_batched_write",
        "args": {"enabled": False, "now_ms": 0},
        "expect": {
            "ok": {"was_effective": True, "effective": False},
            "effects": [{"@type": "AsyncAddEntry", "batched": True, "request_ids": [0, 1]}, {"@type": "CancelTimer"}],
        },
    },
    add(4, 2, expect={"ok": {"request_id": 2}, "effects": [{"@type": "AsyncAddEntry", "batched": False}]}),
    {
        "command": "set_batched_write",
        "args": {"enabled": True, "now_ms": 10},
        "expect": {"ok": {"effective": True}, "effects": [{"@type": "ArmTimer", "due_ms": 11}]},
    },
    add(4, 3, expect={"ok": {"request_id": 3}, "effects": []}),
    complete(0, 1, 0, 2, 0),
    complete(1, 1, 1, 1, 2, batched=False),
]
steps[-1]["check"] = [stats(batches=0), obs("buffered_requests", [3])]
write(
    "edge-run-time-switch",
    "Edge (PIP admin switch, never merged in Pulsar): switching batching off writes the buffer as one batched entry and cancels the timer; later records are plain; switching on re-arms the timer.",
    ["BW-22"],
    conf(True, 512, 1024 * 1024, 1),
    steps,
    source="seed PIP-160 'API Changes in CmdTransactions'",
)

# 10 (continued): a batch of 64, indexes 0 and 63 (one 64-bit word)
steps = [add(4, i) for i in range(63)] + [
    add(4, 63, expect={"ok": {"request_id": 63}, "effects": flush("MAX_RECORDS", 64, 0)})
]
steps.append(complete(0, 7, 3, 64, 0))
full = (1 << 64) - 1


def signed(v: int) -> int:
    return v - (1 << 64) if v >= (1 << 63) else v


steps.append(
    {
        "command": "delete_records",
        "args": {"positions": [[7, 3, 64, 0]]},
        "expect": {
            "ok": {"fully_deleted": []},
            "effects": [
                {
                    "@type": "CursorDelete",
                    "entries": [{"@type": "CursorDeleteEntry", "position": [7, 3], "ack_set": [signed(full & ~1)]}],
                }
            ],
        },
    }
)
steps.append(
    {
        "command": "delete_records",
        "args": {"positions": [[7, 3, 64, 63]]},
        "expect": {
            "ok": {"fully_deleted": []},
            "effects": [
                {
                    "@type": "CursorDelete",
                    "entries": [
                        {"@type": "CursorDeleteEntry", "position": [7, 3], "ack_set": [signed(full & ~(1 << 63))]}
                    ],
                }
            ],
        },
        "check": [
            obs(
                "entry", {"@type": "EntryView", "batch_size": 64, "remaining": list(range(1, 63))}, {"position": [7, 3]}
            )
        ],
    }
)
write(
    "c1-10-set-ack-set-by-index-64",
    "TxnBatchedPositionImplTest.testSetAckSetByIndex (size 64, indexes 0 and 63): the ack set is one Java long (signed), all bits but the deleted index set.",
    ["BW-20"],
    conf(True, 64, 1024 * 1024, 1000),
    steps,
)
