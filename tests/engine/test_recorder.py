"""Machine-level operations in engine histories: every step of a reference machine inside the
broker, and every load, recorded on its object and checked for linearizability against the machine.

* A seeded run with faults gives, for every object kind, a history each object of which is
  linearizable against its machine (``MachineModel``), crashes and unknown outcomes included.
* Changing one recorded machine result makes its object illegal, and the checker names the op.
* A ``recover`` row carries exactly what the component restarted from: the machine's
  ``VECTORS.recover`` rebuilds the engine's state after a restart.
* Windows: a step inside a client's request spans the request; a step the broker makes on its own
  is atomic; a lost answer leaves the step unknown; a crash closes open steps as ``info``.
* The history round-trips through Parquet with its machine operations.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from engine.scheduler import NetworkFaults
from engine.simulation.client import Cluster, OperationTimeout
from engine.simulation.workloads import RunSpec, run
from history_io.files import read_parquet, write_parquet
from invariants.explain import explain
from invariants.linearizability import Verdict, check_history
from invariants.models import MachineModel, model_by_name
from invariants.verify import MACHINE_KINDS, VerifyOptions, check_histories, failing_part
from reference import buffer as tb
from spec.config import Config
from spec.history import (
    EFFECTS,
    ORDERED,
    RAISED,
    RECOVER,
    BadHistory,
    Operation,
    OpType,
    effects_digest,
    is_machine_operation,
    is_query,
    parse_object,
    state_digest,
    validate_history,
)

KIND_MACHINE = {kind: machine for machine, kind in MACHINE_KINDS.items()}


def _machine_ops(ops: list[Operation], kind: str) -> list[Operation]:
    return [op for op in ops if is_machine_operation(op) and parse_object(op.object)[0] == kind]


def _recovery(machine: str, op: Operation) -> object:
    vectors = importlib.import_module(f"reference.{machine}").VECTORS
    inputs = dict(op.args)
    assert inputs.pop("@type") == "Recover" and inputs.pop("machine") == machine
    assert inputs.pop(ORDERED) is True  # the recorder numbers every row as its machine steps
    return vectors.recover(Config().with_overrides(inputs.pop("config")), inputs)


@pytest.fixture(scope="module", params=["ctp", "multi", "delayed"])
def faulty_run(request: pytest.FixtureRequest) -> list[Operation]:
    return run(RunSpec(workload=request.param, seed=7, ops=30, faults=True)).operations


def test_a_faulty_run_is_linearizable_per_object_for_every_kind(faulty_run: list[Operation]) -> None:
    validate_history(faulty_run)
    machine = [op for op in faulty_run if is_machine_operation(op)]
    kinds = {parse_object(op.object)[0] for op in machine}
    assert kinds >= {"coordinator", "partition", "subscription"}
    if faulty_run[0].history.startswith("delayed"):
        assert "tracker" in kinds
    assert Counter(op.f for op in machine)[RECOVER] > len({op.object for op in machine})  # crashes reloaded
    for kind in sorted(kinds):
        mine = _machine_ops(faulty_run, kind)
        result = check_history(model_by_name(KIND_MACHINE[kind]), mine)
        assert result.verdict is Verdict.OK, [o.reason for o in result.objects if o.verdict is not Verdict.OK]
        assert {o.object for o in result.objects} == {op.object for op in mine}


def test_every_machine_op_is_its_own_process_and_client_ops_are_unchanged(faulty_run: list[Operation]) -> None:
    machine = [op for op in faulty_run if is_machine_operation(op)]
    clients = [op for op in faulty_run if not is_machine_operation(op)]
    assert len({op.process for op in machine}) == len(machine)
    assert not {op.process for op in machine} & {op.process for op in clients}
    # Every machine-level object's history starts with the load that built it.
    first: dict[str, Operation] = {}
    for op in machine:
        first.setdefault(op.object, op)
    assert all(op.f == RECOVER for op in first.values())


def test_unknown_outcomes_and_windows_are_recorded() -> None:
    ops = run(RunSpec(workload="multi", seed=5, ops=40, faults=True)).operations
    machine = [op for op in ops if is_machine_operation(op)]
    types = Counter(op.type for op in machine)
    assert types[OpType.OK] and types[OpType.INFO]
    windows = [op for op in machine if op.completed_at is not None and op.completed_at > op.invoked_at]
    atomic = [op for op in machine if op.completed_at == op.invoked_at]
    assert windows and atomic
    assert {op.f for op in atomic} >= {"tick", RECOVER}  # the broker's own steps are instants


def test_an_answer_from_a_machine_state_is_an_atomic_query_row() -> None:
    """The broker's answers from a machine's state (PA-21's admin check, TB-18's last message id,
    and the run's closing metrics scrape: the coordinator's stats, TC-20) are query rows (format
    version 5): their own process, an instant, ok, the observer's name and arguments, the answer the
    client got, on the object of the machine that gave it."""
    ops = run(RunSpec(workload="ctp", seed=2, ops=10, queries=True)).operations
    queries = [op for op in ops if is_query(op)]
    assert {op.f for op in queries} == {"check_position_in_pending_ack_state", "last_message_id", "stats"}
    (scrape,) = [op for op in queries if op.f == "stats"]
    assert scrape.object == "coordinator:0" and set(scrape.args) == {"@type", "machine"}
    assert scrape.index == max(op.index for op in ops)  # the scrape ends the run
    assert set(scrape.returned) == {"@type", "created", "committed", "aborted", "timeout"}
    for op in queries:
        assert op.type is OpType.OK and op.invoked_at == op.completed_at and is_machine_operation(op)
        args = op.args
        assert args["@type"] == "Query"
        assert args["machine"] == KIND_MACHINE[parse_object(op.object)[0]]
    asked = [op for op in queries if op.f == "check_position_in_pending_ack_state"]
    assert all(set(op.args) == {"@type", "machine", "position", "batch_index"} for op in asked)
    answered = Counter(op.returned for op in asked)
    got = Counter(
        op.returned["state"] for op in ops if op.f == "check_position_in_pending_ack" and op.type is OpType.OK
    )
    assert answered == got  # each answer a client got is a query row's, and no other


@pytest.mark.parametrize("kind", ["coordinator", "partition", "subscription"])
def test_a_changed_machine_result_is_illegal_and_named(faulty_run: list[Operation], kind: str) -> None:
    mine = _machine_ops(faulty_run, kind)
    model = model_by_name(KIND_MACHINE[kind])
    # Proving a history illegal means trying every order its windows allow up to the bad op, so the
    # victim is an op a few steps into the longest epoch of an object (an epoch starts at a load).
    epoch = max(model.partition(mine), key=len)
    victim = next(op for op in epoch[5:] if op.type is OpType.OK)
    assert victim.result is not None  # a machine step's value is always recorded (JSON null included)
    changed = [
        dataclasses.replace(op, result='{"@type":"NotWhatStepReturned"}', _result=None)
        if op.index == victim.index
        else op
        for op in mine
    ]
    result = check_history(model, changed)
    assert result.verdict is Verdict.ILLEGAL
    failing = result.failing()
    assert failing is not None and failing.object == victim.object
    # The search stops at the first return it cannot get past: the victim's, or that of a step whose
    # effects (format version 4) only fit after the victim's (a later log record id, say).
    by_index = {op.index: op for op in changed}
    assert failing.blocked == victim.index or by_index[failing.blocked].completed_at <= victim.completed_at
    cx = explain(model, failing_part(model, changed, failing), failing)
    assert cx.core == (victim.index,) and cx.blocked == victim.index


def test_a_lost_answer_leaves_the_step_unknown_and_a_later_one_fixes_it() -> None:
    cluster = Cluster.start(seed=3, network_faults=NetworkFaults(drop_response=1.0))
    client = cluster.client(operation_timeout_ms=1_000)
    producer = client.create_producer("topic")
    with pytest.raises(OperationTimeout):
        producer.send("maybe")
    cluster.network.faults = NetworkFaults()
    producer.send("surely")
    ops = cluster.history(machines=True)
    assert [op.f for op in cluster.history()] == ["send", "send"]  # the client's view is unchanged
    published = [op for op in ops if op.f == "publish_message"]
    assert [op.type for op in published] == [OpType.INVOKE, OpType.OK]
    sends = [op for op in ops if op.f == "send"]
    # each step has the window of its request: sent when the client sent, done when it heard back
    assert published[1].invoked_at == sends[1].invoked_at and published[1].completed_at == sends[1].completed_at
    assert published[1].returned == [0, 1]
    result = check_history(model_by_name("buffer"), _machine_ops(ops, "partition"))
    assert result.verdict is Verdict.OK


def test_a_crash_closes_open_steps_and_recovery_restarts_from_what_is_durable() -> None:
    cluster = Cluster.start(seed=4, topics={"in": 1})
    client = cluster.client()
    producer = client.create_producer("in")
    consumer = client.subscribe("in", "sub")
    producer.send("a")
    txn = client.new_transaction()
    producer.send("b", txn=txn)
    got = consumer.receive(50)
    assert got is not None
    consumer.acknowledge(got, txn=txn)
    # END_TXN reaches the coordinator, then the broker dies before anyone answers.
    txn.commit_async()
    cluster.sim.advance(4)
    cluster.broker.crash()
    cluster.broker.restart()
    ops = cluster.history(machines=True)
    validate_history(ops)
    end = [op for op in ops if op.f == "end_txn"]
    assert end and all(op.type is OpType.INFO and op.error == "Crashed" for op in end)
    broker = cluster.broker
    recovered = {op.object: op for op in ops if op.f == RECOVER}  # the last load of each object
    assert _recovery("coordinator", recovered[broker.coordinator.obj]) == broker.coordinator.state
    partition = next(iter(broker.partitions.values()))
    view = _recovery("buffer", recovered[partition.obj])
    view, _ = tb.step(view, tb.StartRecovery())
    view, _ = tb.step(view, tb.CompleteRecovery())
    assert view == partition.state
    sub = partition.subscriptions["sub"]
    assert _recovery("pending_ack", recovered[sub.obj]) == sub.state
    for kind in ("coordinator", "partition", "subscription"):
        assert check_history(model_by_name(KIND_MACHINE[kind]), _machine_ops(ops, kind)).verdict is Verdict.OK


def test_the_history_round_trips_through_parquet_and_bulk_checks_every_kind(tmp_path: Path) -> None:
    ops = run(RunSpec(workload="delayed", seed=2, ops=20, faults=True)).operations
    path = tmp_path / "delayed.parquet"
    write_parquet(path, ops)
    ((name, back),) = read_parquet(path).items()
    assert [op.to_row() for op in back] == [op.to_row() for op in ops]
    rows = {row.checker: row for row in check_histories({name: back}, str(path), VerifyOptions())}
    assert set(rows) == {"linearizability", "transactional", "delivery"}
    lin = rows["linearizability"]
    assert lin.verdict == "ok" and lin.model == "coordinator+buffer+pending_ack+delayed", lin.detail
    assert lin.ops == sum(1 for op in back if is_machine_operation(op))
    assert rows["transactional"].verdict == "ok"
    assert rows["transactional"].ops == sum(1 for op in back if not is_machine_operation(op))
    assert rows["delivery"].verdict == "ok" and rows["delivery"].ops == rows["transactional"].ops


def test_recording_can_be_switched_off() -> None:
    cluster = Cluster.start(seed=1, record_machines=False)
    cluster.client().create_producer("topic").send("x")
    assert cluster.broker.observer is None
    assert [op.f for op in cluster.history(machines=True)] == ["send"]


def test_machine_model_of_a_recorded_object_uses_its_recovered_config() -> None:
    config = Config().with_overrides({"transactionBufferSnapshotMaxTransactionCount": 2})
    cluster = Cluster.start(seed=6, config=config, topics={"t": 1})
    client = cluster.client()
    producer = client.create_producer("t")
    for i in range(3):
        txn = client.new_transaction()
        producer.send(f"m{i}", txn=txn)
        txn.commit()
    ops = cluster.history(machines=True)
    load = next(op for op in ops if op.f == RECOVER and op.object.startswith("partition:"))
    assert load.args["config"] == {"transactionBufferSnapshotMaxTransactionCount": 2}
    model = model_by_name("buffer")
    assert isinstance(model, MachineModel)
    assert check_history(model, _machine_ops(ops, "partition")).verdict is Verdict.OK


def test_an_engine_that_loses_a_machine_update_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is about the engine: a broker that drops the state one step returned (a lost
    update, as a callback holding a stale state would cause) issues a TxnID twice; the clients'
    transactional checks see nothing wrong yet, the coordinator's object is not linearizable."""
    from engine.broker import CoordinatorService
    from reference import coordinator as tc

    original = CoordinatorService._step
    issued = [0]

    def lossy(self: CoordinatorService, command: object) -> object:
        before = self.state
        stepped = original(self, command)
        if isinstance(command, tc.NewTxn):
            issued[0] += 1
            if issued[0] == 2:
                self.state = before
        return stepped

    monkeypatch.setattr(CoordinatorService, "_step", lossy)
    cluster = Cluster.start(seed=8)
    client = cluster.client()
    txns = [client.new_transaction() for _ in range(3)]
    assert txns[1].txn_id == txns[2].txn_id  # the lost update reissued a TxnID
    ops = cluster.history(machines=True)
    result = check_history(model_by_name("coordinator"), _machine_ops(ops, "coordinator"))
    assert result.verdict is Verdict.ILLEGAL
    failing = result.failing()
    assert (
        failing is not None
        and failing.blocked == [op.index for op in ops if op.f == "new_txn" and is_machine_operation(op)][2]
    )


# -- the steps' effects (history format version 4) -------------------------------------------------


def _with_effects(op: Operation, digest: object) -> Operation:
    args = dict(op.args)
    args[EFFECTS] = digest
    return dataclasses.replace(op, value=json.dumps(args, separators=(",", ":")), _value=args)


def test_every_step_row_states_its_effects_digest(faulty_run: list[Operation]) -> None:
    steps = [op for op in faulty_run if is_machine_operation(op) and op.f not in (RECOVER, RAISED)]
    assert steps and all(re.fullmatch(r"[0-9a-f]{16}", op.args[EFFECTS]) for op in steps)
    digests = Counter(op.args[EFFECTS] for op in steps)
    assert digests[effects_digest(())] < len(steps)  # some steps ask for work, some do not
    assert all(EFFECTS not in op.args for op in faulty_run if op.f in (RECOVER, RAISED) and is_machine_operation(op))


@pytest.mark.parametrize("kind", ["coordinator", "partition", "subscription"])
def test_a_step_that_asks_for_other_effects_is_illegal_and_explained(faulty_run: list[Operation], kind: str) -> None:
    """Same answer, other work asked for: the row's digest is not the reference's for that command
    in that state, and the counterexample says what the machine asks for there."""
    mine = _machine_ops(faulty_run, kind)
    model = model_by_name(KIND_MACHINE[kind])
    assert isinstance(model, MachineModel)
    epoch, victim = next(
        (part, op)
        for part in sorted(model.partition(mine), key=len, reverse=True)
        for op in part[1:]
        if op.type is OpType.OK and op.args[EFFECTS] != effects_digest(())
    )
    changed = [_with_effects(op, "0123456789abcdef") if op.index == victim.index else op for op in mine]
    result = check_history(model, changed)
    assert result.verdict is Verdict.ILLEGAL
    failing = result.failing()
    assert failing is not None and failing.object == victim.object
    cx = explain(model, failing_part(model, changed, failing), failing)
    assert cx.core == (victim.index,) and cx.blocked == victim.index
    # In the order the engine stepped, everything before the victim is accepted, and the victim is
    # refused for its effects alone, which the model says in words.
    state = model.init()
    for op in epoch:
        decoded = model.decode(_with_effects(op, "0123456789abcdef") if op is victim else op)
        if op is victim:
            said = model.refusal(state, *decoded)
            assert said is not None and said.startswith("the machine asks for other effects here: [")
            assert said.endswith("the row's digest 0123456789abcdef")
            break
        accepted, state = model.step(state, *decoded)
        assert accepted


def test_a_history_without_effects_digests_is_judged_on_answers_alone(faulty_run: list[Operation]) -> None:
    """Format versions 1 to 3 (or a recorder that does not state effects): no digest, no judgement."""
    for kind in ("coordinator", "partition", "subscription"):
        stripped = []
        for op in _machine_ops(faulty_run, kind):
            args = op.args
            if EFFECTS in args:
                args = {k: v for k, v in args.items() if k != EFFECTS}
                op = dataclasses.replace(op, value=json.dumps(args, separators=(",", ":")), _value=args)
            stripped.append(op)
        assert check_history(model_by_name(KIND_MACHINE[kind]), stripped).verdict is Verdict.OK


@pytest.mark.parametrize("digest", ["", "0123", "0123456789ABCDEF", 12, None])
def test_an_effects_digest_that_is_not_one_is_bad_input(faulty_run: list[Operation], digest: object) -> None:
    mine = _machine_ops(faulty_run, "coordinator")
    victim = next(op for op in mine if op.f not in (RECOVER, RAISED))
    with pytest.raises(BadHistory, match=r"@effects is the step's effects' digest, 16 hex digits"):
        model_by_name("coordinator").decode(_with_effects(victim, digest))


def test_a_buffer_that_snapshots_late_is_flagged_on_a_main_job_history() -> None:
    """At the main job's own options (ctp seed 1: the limits variant's snapshot every few
    transactions), a buffer that takes its snapshot one transaction late (TB-21) answers every
    command as the reference does, and recovers what it wrote; only the effects of the step that
    should have snapshotted differ, and ``verify`` flags that step."""
    from engine.simulation.options import main_job_spec
    from invariants.verify import check_history as verify_history

    def judged(ops: list[Operation]) -> str:
        return str(verify_history(ops[0].history, ops, "ctp-seed1", VerifyOptions()))

    clean = judged(run(main_job_spec("ctp", 1)).operations)
    assert "asks for other effects" not in clean and "illegal" not in clean
    original = tb._snapshot_by_count

    def late(state: tb.BufferState) -> tuple[tb.BufferState, tuple[object, ...]]:
        limit = state.config.transaction_buffer_snapshot_max_transaction_count
        if state.status is tb.BufferStatus.READY and state.change_max_read_position_count > limit:
            return tb._take_snapshot(state)
        return state, ()

    tb._snapshot_by_count = late  # the engine's buffer only: the checker runs after, unmodified
    try:
        ops = run(main_job_spec("ctp", 1)).operations
    finally:
        tb._snapshot_by_count = original
    text = judged(ops)
    assert "'illegal'" in text and "asks for other effects" in text and "WriteSnapshot" in text, text[:3000]


def test_an_unanswered_step_is_held_to_its_effects() -> None:
    """An ``info`` or ``invoke`` step row: the client never learned its answer, but the machine made
    the step and the row states what it asked for; placed anywhere, it must ask for that (the
    branch flip of the buffer's parked-append test showed only there: its step never answered)."""
    ops = run(RunSpec(workload="ctp", seed=7, ops=30, faults=True)).operations
    checked = 0
    for kind in ("coordinator", "partition", "subscription"):
        mine = _machine_ops(ops, kind)
        model = model_by_name(KIND_MACHINE[kind])
        unanswered = [op for op in mine if op.type.indeterminate and op.f not in (RECOVER, RAISED)]
        if not unanswered:
            continue
        victim = unanswered[0]
        changed = [_with_effects(op, "0123456789abcdef") if op.index == victim.index else op for op in mine]
        result = check_history(model, changed)
        assert result.verdict is Verdict.ILLEGAL, (kind, victim)
        failing = result.failing()
        assert failing is not None and failing.object == victim.object
        # An unanswered step has no return to cut the history at (the cut drops what it asked for),
        # so the explanation may keep more than the victim in its core; the victim is in it.
        cx = explain(model, failing_part(model, changed, failing), failing)
        assert victim.index in cx.core
        checked += 1
    assert checked >= 2


def test_a_step_refused_at_its_place_is_caught_though_another_order_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Format version 5: the recorder vouches that each object's rows are numbered as its machine
    stepped them (``ordered`` on every recover row), so the per-object check replays that order and
    no other.  Planted on ctp seed 1 of the main job: a pending ack that refuses its store's failure
    while it initializes (PA-17 retries it).  Its handle never becomes ready and the ack that started
    the init is never answered, so that ack's row is of unknown outcome and its window would let it
    come after the refusal, where the refusal is right.  In the recorded order it is refused where
    the machine retries."""
    from engine.simulation.workloads import main_job_spec
    from reference import pending_ack as pa
    from spec.errors import NotAllowed
    from spec.result import Err

    original = pa._init_failed

    def refused(state: pa.PendingAckState, retryable: bool) -> pa.Step:
        if state.handle_state is pa.HandleState.INITIALIZING:
            return state, Err(NotAllowed("planted"))
        return original(state, retryable)

    spec = main_job_spec("ctp", 1)
    with monkeypatch.context() as patched:
        patched.setattr(pa, "_init_failed", refused)
        ops = run(spec).operations
    refusals = [op for op in ops if op.f == "init_failed" and op.error == "NotAllowed"]
    assert refusals, "the planted refusal happens on this history"
    rows = {r.checker: r for r in check_histories({"ctp-seed1": ops}, "f", VerifyOptions())}
    assert rows["linearizability"].verdict == "illegal"
    assert rows["linearizability"].failing_object == refusals[0].object
    assert rows["transactional"].verdict == rows["delivery"].verdict == "ok"  # no client rule sees it
    # Without the recorder's word for the order, the windows explain it away.
    unvouched = []
    for op in ops:
        if op.f == RECOVER and is_machine_operation(op):
            value = {k: v for k, v in op.args.items() if k != ORDERED}
            op = dataclasses.replace(op, value=json.dumps(value, separators=(",", ":")), _value=value)
        unvouched.append(op)
    again = {r.checker: r.verdict for r in check_histories({"ctp-seed1": unvouched}, "f", VerifyOptions())}
    assert again["linearizability"] == "ok"


def test_a_view_that_fell_behind_is_caught_at_the_follow_that_resyncs_it() -> None:
    """PA-25: the broker asks the pending ack to follow the durable cursor only when that is past the
    view, and a follow the view had no need of answers ``Ignored``.  Planted on ctp seed 3 of the main
    job (on seed 93, where it was planted before, the acks variant's new acks now make it show to a
    client as well): a view that folds no run of deletes into its mark-delete position within a
    ledger (the branch-flip of ``if entry == md.entry_id`` in ``_cursor_delete_distinct``).  The broker then resyncs
    it with a follow after each such ack, and no answer to a client differs; the follow's row, a bare
    success where the view the recorded steps built says ``Ignored``, is what shows it."""
    from devtools.mutation import applied, flip_mutants
    from engine.simulation.workloads import main_job_spec

    (flip,) = [
        m
        for m in flip_mutants("pending_ack")
        if m.function == "_cursor_delete_distinct" and m.before == "if entry == md.entry_id"
    ]
    spec = main_job_spec("ctp", 3)
    clean = run(spec).operations
    with applied(flip):
        ops = run(spec).operations
    follows = [op for op in ops if op.f == "follow_cursor"]
    assert len(follows) > len([op for op in clean if op.f == "follow_cursor"])
    rows = {r.checker: r for r in check_histories({"ctp-seed3": ops}, "f", VerifyOptions())}
    assert rows["linearizability"].verdict == "illegal"
    assert rows["transactional"].verdict == rows["delivery"].verdict == "ok"
    failing = rows["linearizability"].failing_object
    assert failing is not None and failing.startswith("subscription:")
    assert {r.verdict for r in check_histories({"ctp-seed3": clean}, "f", VerifyOptions())} == {"ok"}


def test_a_batching_writer_is_a_machine_of_its_own_judged_step_by_step() -> None:
    """Format version 5: while it batches, a log's PIP-160 writer records its steps on
    ``log:<owner>``, each of its loads a ``recover`` row whose entries rebuild the engine's writer
    (the digest agrees).  Planted on ctp seed 1 of the main job (batching): a writer that flushes at
    every record below its count threshold instead of at it (the branch-flip of ``if
    len(state.buffer) >= cfg.max_records`` in ``async_add_data``).  Every entry it writes is a batch a
    correct writer could also have written (a timer's flush of one record), so the durable layout
    passes and no client sees a difference: its own step rows show it."""
    from devtools.mutation import applied, flip_mutants
    from engine.simulation.workloads import main_job_spec
    from reference import batched_log as bl

    spec = main_job_spec("ctp", 1)
    assert spec.batching
    clean = run(spec).operations
    writers = [op for op in clean if parse_object(op.object)[0] == "log"]
    assert {op.object for op in writers} >= {"log:coordinator:0"}
    assert Counter(op.f for op in writers).keys() >= {"recover", "async_add_data", "add_entry_complete", "timer_fired"}
    first: dict[str, Operation] = {}
    for op in writers:
        first.setdefault(op.object, op)
        assert is_machine_operation(op) and (op.f == RECOVER or op.invoked_at == op.completed_at)
    assert all(op.f == RECOVER and op.args[ORDERED] is True for op in first.values())
    row = next(iter(first.values()))
    inputs = {k: v for k, v in row.args.items() if k not in ("@type", "machine", "config", ORDERED, "recovered")}
    assert bl.VECTORS.recover is not None
    rebuilt = bl.VECTORS.recover(Config().with_overrides(row.args["config"]), inputs)
    assert state_digest(rebuilt) == row.args["recovered"]
    assert {r.verdict for r in check_histories({"ctp-seed1": clean}, "f", VerifyOptions())} == {"ok"}

    (flip,) = [
        m
        for m in flip_mutants("batched_log")
        if m.function == "async_add_data" and m.before == "if len(state.buffer) >= cfg.max_records"
    ]
    with applied(flip):
        ops = run(spec).operations
    rows = {r.checker: r for r in check_histories({"ctp-seed1": ops}, "f", VerifyOptions())}
    assert rows["linearizability"].verdict == "illegal"
    failing = rows["linearizability"].failing_object
    assert failing is not None and failing.startswith("log:")
    assert rows["transactional"].verdict == rows["delivery"].verdict == "ok"
    # without the writer's rows the same history passes: nothing else shows it
    others = [op for op in ops if parse_object(op.object)[0] != "log"]
    assert {r.verdict for r in check_histories({"ctp-seed1": others}, "f", VerifyOptions())} == {"ok"}
