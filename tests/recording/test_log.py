"""The recorder's history log without a broker: one clock, processes that move on after an unknown
outcome, outcomes never guessed."""

from __future__ import annotations

import threading

import pytest

from recording.clients import official_send, unknown
from recording.log import HistoryLog, MonotonicClock, Outcome, Process
from spec.history import OpType, validate_history


class Timeout(Exception):
    """Named as the official client's exception is."""


class ProducerQueueIsFull(Exception):
    pass


def test_the_clock_counts_unix_milliseconds_and_never_goes_back() -> None:
    clock = MonotonicClock()
    readings = [clock.now_ms() for _ in range(1000)]
    assert readings == sorted(readings)
    assert abs(readings[0] - clock.unix_ms_at_start()) < 1000


def test_an_unknown_outcome_crashes_the_process_and_the_thread_goes_on_as_another() -> None:
    log = HistoryLog("h", 3)
    process = Process(log)
    first = process.number
    with process.op("send", "partition:t", {"message": "a", "txn": None}, official_send) as op:
        op.ok({"position": [1, 0]})
    with process.op("send", "partition:t", {"message": "b", "txn": None}, official_send):
        raise Timeout("no receipt")  # swallowed: recorded as info
    assert process.number != first and process.crashed == 1
    with process.op("send", "partition:t", {"message": "c", "txn": None}, official_send):
        raise ProducerQueueIsFull()  # refused before sending: fail, no error (the client refused it)
    ops = log.operations()
    assert [(o.type, o.process == first, o.error) for o in ops] == [
        (OpType.OK, True, None),
        (OpType.INFO, True, "Timeout"),
        (OpType.FAIL, False, None),
    ]
    assert all(o.seed == 3 and o.completed_at is not None and o.completed_at >= o.invoked_at for o in ops)
    validate_history(ops)  # nothing after info on a process, no overlap


def test_a_programming_error_is_recorded_unknown_and_raised() -> None:
    log = HistoryLog("h", 0)
    process = Process(log)
    with pytest.raises(KeyError), process.op("receive", "subscription:t#s", {}, unknown):
        {}["missing"]
    (op,) = log.operations()
    assert op.type is OpType.INFO and op.error == "KeyError"


def test_an_operation_still_open_is_an_invoke_and_one_block_that_says_nothing_is_info() -> None:
    log = HistoryLog("h", 0)
    Process(log).op("commit", "coordinator:0", {"txn": [0, 1]}, unknown)  # never completed
    with Process(log).op("abort", "coordinator:0", {"txn": [0, 2]}, unknown):
        pass
    ops = log.operations()
    assert [(o.type, o.completed_at is None) for o in ops] == [(OpType.INVOKE, True), (OpType.INFO, False)]
    assert ops[1].error == "NoOutcome"


def test_one_process_never_has_two_operations_open() -> None:
    process = Process(HistoryLog("h", 0))
    process.op("send", "partition:t", {}, unknown)
    with pytest.raises(RuntimeError, match="while op 0 is open"):
        process.op("send", "partition:t", {}, unknown)


def test_indexes_follow_invocation_order_across_threads() -> None:
    log = HistoryLog("h", 0)

    def work(n: int) -> None:
        process = Process(log)
        for i in range(50):
            with process.op("send", "partition:t", {"message": f"{n}-{i}", "txn": None}, unknown) as op:
                op.end(Outcome(OpType.OK, {"position": [n, i]}))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ops = log.operations()
    assert [o.index for o in ops] == list(range(200))
    assert [o.invoked_at for o in ops] == sorted(o.invoked_at for o in ops)
    validate_history(ops)
