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
from spec.history import RECOVER, Operation, OpType, is_machine_operation, parse_object, validate_history

KIND_MACHINE = {kind: machine for machine, kind in MACHINE_KINDS.items()}


def _machine_ops(ops: list[Operation], kind: str) -> list[Operation]:
    return [op for op in ops if is_machine_operation(op) and parse_object(op.object)[0] == kind]


def _recovery(machine: str, op: Operation) -> object:
    vectors = importlib.import_module(f"reference.{machine}").VECTORS
    inputs = dict(op.args)
    assert inputs.pop("@type") == "Recover" and inputs.pop("machine") == machine
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
    assert failing.blocked == victim.index
    cx = explain(model, failing_part(model, changed, failing), failing)
    assert victim.index in cx.core and cx.blocked == victim.index


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
