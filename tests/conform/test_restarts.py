"""Crash and recover in vectors (reference/restarts.py): the reference's account of what is durable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reference import coordinator as tc
from reference.sessions import Machine, Refused, run_vector
from spec.errors import BadVector


def vector(machine: str, steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"id": "t", "machine": machine, "description": "d", "steps": steps, **extra}


def test_a_coordinator_crash_recovers_what_after_crash_says() -> None:
    """TC-25: recovering the records the run left equals ``after_crash`` of the live state."""
    machine = Machine.start("coordinator", {}, {"coordinator_id": 2})
    for command in (
        tc.NewTxn(60_000, 0),
        tc.NewTxn(60_000, 1, "alice"),
        tc.AddSubscriptionToTxn(tc.TxnID(2, 1), (tc.Subscription("t", "s"),), 2, "alice"),
        tc.EndTxn(tc.TxnID(2, 0), tc.TxnAction.ABORT, 3),
    ):
        machine.step(command, "$")
    live = machine.state
    machine.crash("$")
    result = machine.recover({}, "$")
    assert machine.state == tc.after_crash(live)
    assert [type(e).__name__ for e in result.effects] == ["ScheduleResumeEndTxn"]


@pytest.mark.parametrize(
    "machine,steps",
    [
        (
            "pending_ack",
            [
                {"command": "individual_ack", "args": {"txn_id": [1, 0], "positions": [{"position": [0, 0]}]}},
                {"command": "crash"},
                {"command": "recover"},
            ],
        ),
        ("buffer", [{"command": "append_buffer_to_txn", "args": {"txn_id": [0, 1]}}, {"command": "crash"}]),
        (
            "delayed",
            [{"command": "add_message", "args": {"ledger_id": 1, "entry_id": 0, "deliver_at": 9, "now_ms": 1}}],
        ),
    ],
)
def test_vectors_crash_and_recover_every_machine_with_durable_state(machine: str, steps: list[dict[str, Any]]) -> None:
    if steps[-1]["command"] == "crash":
        steps = [*steps, {"command": "recover"}]
    elif steps[-1]["command"] != "recover":
        steps = [*steps, {"command": "crash"}, {"command": "recover", "args": {"now_ms": 5}}]
    result = run_vector(Path("v.json"), vector(machine, steps))
    assert result.passed, result.mismatch


def test_a_pending_ack_crash_keeps_the_logged_txn_acks() -> None:
    """PA-18: an ack the handle logged survives the crash; one still queued (PA-17) does not."""
    steps = [
        {"command": "individual_ack", "args": {"txn_id": [1, 0], "positions": [{"position": [0, 0]}]}},
        {"command": "init_complete", "check": [{"observe": "pending_txns", "equals": [[1, 0]]}]},
        {"command": "crash"},
        {"command": "recover", "check": [{"observe": "pending_txns", "equals": [[1, 0]]}]},
    ]
    result = run_vector(Path("v.json"), vector("pending_ack", steps))
    assert result.passed, result.mismatch


@pytest.mark.parametrize(
    "machine,steps,fragment",
    [
        ("client", [{"command": "crash"}], "client has no durable state"),
        ("coordinator", [{"command": "recover"}], "recover follows a crash"),
        ("coordinator", [{"command": "crash"}, {"command": "tick", "args": {"now_ms": 1}}], "only recover may follow"),
        ("coordinator", [{"command": "crash"}, {"command": "crash"}], "only recover may follow"),
        ("batched_log", [{"command": "crash"}, {"command": "recover"}], "$.steps[1].args: NowArgs needs field"),
        ("coordinator", [{"command": "crash"}, {"command": "recover", "args": {"x": 1}}], "$.steps[1].args"),
    ],
)
def test_a_crash_a_vector_cannot_take_is_bad_input(machine: str, steps: list[dict[str, Any]], fragment: str) -> None:
    with pytest.raises(BadVector) as caught:
        run_vector(Path("v.json"), vector(machine, steps))
    assert fragment in str(caught.value)


def test_observing_a_crashed_machine_is_refused() -> None:
    machine = Machine.start("coordinator", {}, {})
    machine.crash("$.steps[0]")
    with pytest.raises(Refused, match="only recover"):
        machine.observe("store_state", {}, "$.steps[0].check[0]")
