"""``MachineModel`` on machine-level histories: ``recover`` rows, crash epochs, unknown outcomes,
and the bulk checker's per-machine verdicts (spec.history's machine-level operations)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from invariants.linearizability import Verdict, check_history
from invariants.models import MachineModel, model_by_name
from invariants.verify import VerifyOptions, check_histories
from reference import coordinator as tc
from reference import pending_ack as pa
from reference.conformance import MachineVectors
from spec.config import Config
from spec.history import RECOVER, Operation, OpType, is_machine_operation, make_operation
from spec.jsonvalues import to_json
from spec.types import Position, TxnID

OBJ = "coordinator:0"


class _History:
    """A hand-written machine-level history of one coordinator: each op its own process."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []

    def add(
        self,
        f: str,
        value: Any,
        op_type: OpType = OpType.OK,
        result: Any = None,
        *,
        at: int,
        until: int | None = None,
        error: str | None = None,
        obj: str = OBJ,
    ) -> Operation:
        done = None if op_type is OpType.INVOKE else (at if until is None else until)
        op = make_operation(
            "h",
            len(self.ops),
            len(self.ops),
            op_type,
            f,
            obj,
            value,
            result,
            invoked_at=at,
            completed_at=done,
            error=error,
        )
        self.ops.append(op)
        return op

    def recover(
        self, at: int, records: list[Any] | None = None, *, ordered: bool | None = None, **config: Any
    ) -> Operation:
        header: dict[str, Any] = {"@type": "Recover", "machine": "coordinator", "config": config}
        if ordered is not None:
            header["ordered"] = ordered
        return self.add(
            RECOVER,
            {
                **header,
                "coordinator_id": 0,
                "records": records or [],
                "max_local_txn_id": -1,
                "next_record_id": len(records or []),
            },
            at=at,
        )

    def new_txn(self, at: int, txn: int | None, op_type: OpType = OpType.OK, until: int | None = None) -> Operation:
        result = None if txn is None else [0, txn]
        return self.add("new_txn", to_json(tc.NewTxn(60_000, at)), op_type, result, at=at, until=until)


def _verdict(ops: list[Operation]) -> Verdict:
    return check_history(model_by_name("coordinator"), ops).verdict


def test_machine_ops_are_told_apart_by_their_type_tag() -> None:
    h = _History()
    machine = h.new_txn(1, 0)
    client = make_operation(
        "h", 9, 9, OpType.OK, "new_txn", OBJ, {"timeout_ms": 1}, {"txn": [0, 0]}, invoked_at=1, completed_at=2
    )
    assert is_machine_operation(machine) and is_machine_operation(h.recover(0))
    assert not is_machine_operation(client)


def test_a_recover_row_resets_the_model() -> None:
    h = _History()
    h.recover(0)
    h.new_txn(1, 0)
    h.new_txn(2, 1)
    h.recover(10)  # the NEW records were never durable: the sequence starts again
    h.new_txn(11, 0)
    assert _verdict(h.ops) is Verdict.OK
    without = [op for op in h.ops if op.index != 3]
    assert _verdict(without) is Verdict.ILLEGAL  # without the reset TxnID (0,0) cannot come twice


def test_recovery_restarts_from_the_durable_records() -> None:
    record = tc.TxnLogRecord(
        tc.TxnMetadataOp.NEW,
        TxnID(0, 0),
        new_status=None,
        start_time=1,
        last_modification_time=1,
        timeout_ms=60_000,
        max_local_txn_id=0,
    )
    for issued, verdict in ((1, Verdict.OK), (0, Verdict.ILLEGAL)):
        h = _History()
        h.recover(0, records=[[0, to_json(record)]])
        h.new_txn(1, issued)  # the durable NEW of (0,0) moved the sequence on
        assert _verdict(h.ops) is verdict, issued


def test_an_unknown_op_may_be_applied_or_not() -> None:
    for later in (0, 1):
        h = _History()
        h.recover(0)
        h.new_txn(1, None, OpType.INFO, until=3)
        h.new_txn(5, later)
        assert _verdict(h.ops) is Verdict.OK, later  # 1: it took effect first; 0: it never did (or later)
    h = _History()
    h.recover(0)
    h.new_txn(1, None, OpType.INVOKE)
    h.new_txn(5, 2)
    assert _verdict(h.ops) is Verdict.ILLEGAL  # one unknown op cannot account for two TxnIDs


def test_rows_the_recorder_vouches_are_in_order_are_replayed_in_that_order_only() -> None:
    """Format version 5: a recover row with ``ordered`` true says each row of its epoch took effect
    at its place (an unknown outcome too: the machine stepped it there).  The windows then no longer
    let a rejected step be explained by another order."""
    for ordered, verdict in ((None, Verdict.OK), (False, Verdict.OK), (True, Verdict.ILLEGAL)):
        h = _History()
        h.recover(0, ordered=ordered)
        h.new_txn(1, None, OpType.INFO, until=3)  # stepped first, at its place: it issued (0,0)
        h.new_txn(5, 0)
        result = check_history(model_by_name("coordinator"), h.ops)
        assert result.verdict is verdict, ordered
    (bad,) = [o for o in result.objects if o.verdict is Verdict.ILLEGAL]
    assert bad.blocked == 2 and bad.linearization == (0, 1)
    assert "in the order they took effect (the recorder vouches for it)" in bad.reason
    assert "cannot be placed there" in bad.reason
    h = _History()
    h.recover(0, ordered=True)
    h.new_txn(1, None, OpType.INFO, until=3)
    h.new_txn(5, 1)  # what the order says: ok in one pass, no search
    result = check_history(model_by_name("coordinator"), h.ops)
    assert result.verdict is Verdict.OK and result.objects[0].steps == 3


def test_an_ordered_flag_that_is_not_a_boolean_is_bad_input() -> None:
    from spec.history import BadHistory

    h = _History()
    h.recover(0)
    h.ops[0] = make_operation(
        "h", 0, 0, OpType.OK, RECOVER, OBJ, {**h.ops[0].args, "ordered": "yes"}, None, invoked_at=0, completed_at=0
    )
    with pytest.raises(BadHistory, match="ordered says whether the rows are in the order they took effect"):
        model_by_name("coordinator").decode_all(h.ops)  # type: ignore[attr-defined]


def test_an_op_left_open_by_a_crash_cannot_take_effect_after_the_recovery() -> None:
    for issued, verdict in ((0, Verdict.OK), (1, Verdict.ILLEGAL)):
        h = _History()
        h.recover(0)
        h.new_txn(1, None, OpType.INFO, until=4)  # stepped, then the coordinator crashed at 4
        h.recover(10)
        h.new_txn(11, issued)
        # (0,1) would need the open op applied after the reload, on the recovered state: not allowed
        assert _verdict(h.ops) is verdict, issued


def test_an_open_op_of_an_earlier_epoch_is_not_optional_across_a_recovery() -> None:
    """Checked as one part (every epoch together), an op left open by a crash must still be placed
    in its own epoch: the search may leave for last only what the last epoch accepts."""
    from invariants.linearizability import check_object

    model = model_by_name("coordinator")
    for issued, verdict in ((0, Verdict.OK), (1, Verdict.ILLEGAL)):
        h = _History()
        h.recover(0)
        h.new_txn(1, None, OpType.INFO, until=4)
        h.recover(10)
        h.new_txn(11, issued)
        h.new_txn(12, None, OpType.INFO, until=14)
        decoded = model.decode_all(h.ops)  # type: ignore[attr-defined]
        assert model.may_skip(decoded) == [False, False, False, False, True]  # type: ignore[attr-defined]
        assert check_object(model, h.ops).verdict is verdict, issued
        assert check_history(model, h.ops).verdict is verdict, issued


def test_each_crash_epoch_is_its_own_part() -> None:
    h = _History()
    h.recover(0)
    h.new_txn(1, 0)
    h.recover(5)
    h.new_txn(6, 0)
    h.new_txn(7, 1)
    model = model_by_name("coordinator")
    assert [[op.index for op in part] for part in model.partition(h.ops)] == [[0, 1], [2, 3, 4]]
    result = check_history(model, h.ops)
    assert result.verdict is Verdict.OK and len(result.objects) == 2


def test_the_recover_row_carries_the_config() -> None:
    h = _History()
    h.recover(0, maxActiveTransactionsPerCoordinator=1)
    h.new_txn(1, 0)
    h.add("new_txn", to_json(tc.NewTxn(60_000, 2)), OpType.FAIL, at=2, error="ReachMaxActiveTxn")
    assert _verdict(h.ops) is Verdict.OK  # the second one is over the limit the recovered config sets
    h.ops.pop()
    h.new_txn(2, 1)
    assert _verdict(h.ops) is Verdict.ILLEGAL


def test_a_model_without_vectors_cannot_recover() -> None:
    from spec.history import BadHistory

    h = _History()
    h.recover(0)
    model = MachineModel("coordinator", tc.initial(Config()), tc.step, tc.VECTORS.commands)
    with pytest.raises(BadHistory):
        check_history(model, h.ops)


@pytest.mark.parametrize("module", [tc, pa])
def test_the_recover_entries_decode_what_the_engine_records(module: Any) -> None:
    vectors: MachineVectors = module.VECTORS
    assert vectors.recover is not None
    if module is tc:
        state = vectors.recover(
            Config(), {"coordinator_id": 0, "records": [], "max_local_txn_id": 4, "next_record_id": 0}
        )
        assert state == tc.recover(Config(), 0, [], 4)[0]
    else:
        cursor = pa.CursorView(Position(0, 3), frozenset({Position(0, 5)}))
        lazy = vectors.recover(Config(), {"sub_type": "Shared", "cursor": to_json(cursor)})
        assert lazy == pa.initial(Config(), sub_type=pa.SubType.Shared, cursor=cursor)
        loaded = vectors.recover(
            Config(), {"sub_type": "Shared", "cursor": to_json(cursor), "records": [], "next_record_id": 0}
        )
        assert loaded == pa.recover(Config(), [], cursor=cursor, sub_type=pa.SubType.Shared, next_record_id=0)
    with pytest.raises(KeyError):
        vectors.recover(Config(), {"no_such_input": 1})


def test_bulk_checks_machine_ops_per_machine_and_clients_transactionally() -> None:
    h = _History()
    h.recover(0)
    h.new_txn(1, 0, until=3)
    client = make_operation(
        "h",
        len(h.ops),
        99,
        OpType.OK,
        "new_txn",
        OBJ,
        {"timeout_ms": 60_000},
        {"txn": [0, 0]},
        invoked_at=1,
        completed_at=3,
    )
    rows = check_histories({"h": [*h.ops, client]}, "f", VerifyOptions())
    lin = next(r for r in rows if r.checker == "linearizability")
    assert lin.verdict == "ok" and lin.model == "coordinator" and lin.ops == 2 and lin.objects == 1
    figures = json.loads(lin.detail)["models"]["coordinator"]
    assert figures["object_verdicts"] == {"ok": 1} and figures["epochs"] == 1
    bad = _History()
    bad.recover(0)
    bad.new_txn(1, 7)
    rows = check_histories({"h": bad.ops}, "f", VerifyOptions())
    lin = next(r for r in rows if r.checker == "linearizability")
    assert lin.verdict == "illegal" and lin.failing_object == OBJ and lin.explanation is not None
    explicit = check_histories({"h": [*h.ops, client]}, "f", VerifyOptions(model="coordinator"))
    assert next(r for r in explicit if r.checker == "linearizability").ops == 2  # the client's op is not fed


# --- query rows (format version 5): an answer the broker gave from a machine's state -----------------

SUB = "subscription:persistent://public/default/t-partition-0#s"
_ACK = to_json(pa.IndividualAck(TxnID(0, 0), (pa.AckedPosition(Position(0, 0)),)))


def _query(h: _History, at: int, answer: Any, *, f: str = "check_position_in_pending_ack_state", **extra: Any) -> None:
    value = {"@type": "Query", "machine": "pending_ack", "position": [0, 0], **extra}
    h.add(f, value, OpType.OK, answer, at=at, obj=SUB)


def _pending_ack_history(before: str, after: str) -> _History:
    """A pending ack asked where 0:0 stands before its store is ready and after a txn's ack of it is
    applied: ``before`` and ``after`` are the answers the rows record."""
    h = _History()
    h.add("individual_ack", _ACK, OpType.OK, {"@type": "Queued", "queue_length": 1}, at=1, obj=SUB)
    _query(h, 2, before)
    h.add("init_complete", {"@type": "PendingAckInitComplete"}, OpType.OK, None, at=3, obj=SUB)
    _query(h, 4, after)
    return h


def _pa_verdict(ops: list[Operation]) -> Verdict:
    return check_history(model_by_name("pending_ack"), ops).verdict


def test_a_query_row_is_judged_against_the_state_the_steps_built() -> None:
    assert _pa_verdict(_pending_ack_history("PendingAckNotReady", "PendingAck").ops) is Verdict.OK
    # PA-21: not ready while its store initializes, the txn's ack once it is ready; either answer in
    # the other state is one the machine never gives
    assert _pa_verdict(_pending_ack_history("PendingAck", "PendingAck").ops) is Verdict.ILLEGAL
    assert _pa_verdict(_pending_ack_history("PendingAckNotReady", "PendingAckNotReady").ops) is Verdict.ILLEGAL
    assert _pa_verdict(_pending_ack_history("PendingAckNotReady", "NotInPendingAck").ops) is Verdict.ILLEGAL


def test_a_query_changes_nothing_and_is_told_in_words() -> None:
    model = model_by_name("pending_ack")
    h = _pending_ack_history("PendingAckNotReady", "NotInPendingAck")
    decoded = [model.decode(op) for op in h.ops]
    state = model.init()
    for op_input, op_output in decoded[:3]:
        accepted, after = model.step(state, op_input, op_output)
        assert accepted
        if op_input is decoded[1][0]:
            assert after == state  # the query left the state as it was
        state = after
    query_input, query_output = decoded[3]
    assert model.refusal(state, query_input, query_output) == (
        'the machine answers "PendingAck" here, the row "NotInPendingAck"'
    )
    assert model.describe_op(query_input, query_output).startswith("query check_position_in_pending_ack_state(")


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"f": "no_such_observer"}, "has no observer 'no_such_observer' to query"),
        ({"machine": "coordinator"}, "a query of machine 'coordinator'"),
        ({"extra": {"when": 3}}, "not the arguments of check_position_in_pending_ack_state"),
        ({"extra": {"position": "0:0"}}, "not the arguments of check_position_in_pending_ack_state"),
        ({"type": OpType.INFO}, "a query row is ok"),
    ],
)
def test_a_malformed_query_row_is_refused_in_one_line(change: dict[str, Any], words: str) -> None:
    from spec.history import BadHistory

    value: dict[str, Any] = {"@type": "Query", "machine": change.get("machine", "pending_ack"), "position": [0, 0]}
    value.update(change.get("extra", {}))
    op_type = change.get("type", OpType.OK)
    op = make_operation(
        "h",
        0,
        0,
        op_type,
        change.get("f", "check_position_in_pending_ack_state"),
        SUB,
        value,
        "PendingAck",
        invoked_at=1,
        completed_at=None if op_type is OpType.INVOKE else 1,
    )
    with pytest.raises(BadHistory, match=words) as raised:
        model_by_name("pending_ack").decode(op)
    assert "\n" not in str(raised.value)
