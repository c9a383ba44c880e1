"""A broker component that raises is contained as its crash (``Broker.contain``), and stays loud.

* A machine step that raises: the run goes on and returns its history; the step is recorded as
  failed with ``UnknownError`` on the component's object, the component crashes and is loaded again
  (a ``recover`` row after the failure), and :attr:`RunResult.failures` names the component, the
  exception and where it was raised.
* That history, checked against the unpatched reference (what ``txnmodel verify`` does), is not
  linearizable: the step that raised is flagged.
* The same run without the fault has no failures and no such step (containment changes nothing
  in a run where nothing raises).
* What no component raised is not contained, and neither is bad durable input.
* ``txnmodel simulate`` still writes the history, names the failure on stderr and exits 1.
* An exception raised outside any recorded step (a dispatch, the PIP-160 writer's timer, a load at
  broker start) is recorded as a ``raised`` row on the component's object, flagged by the
  per-object check; one of the client library fails the caller's operation with the exception's
  type (TC-37), and the run goes on.
* A record that does not decode is bad input on a data folder from elsewhere, but the machine's own
  bug on ledgers only the run wrote; a machine query, a fault done to a component from outside a
  request and a delayed tracker's own event raise as that component; an ``Err`` without an error
  value raises inside its step; the client library raising as it builds a transaction fails
  ``new_txn``.  The branch flips that used to end their runs this way are each contained, and their
  histories flagged.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

import pytest

from engine.broker.component import STEP_RAISED
from engine.simulation.client import Cluster
from engine.simulation.workloads import RunSpec, run
from history_io.files import read_parquet
from invariants.verify import VerifyOptions, check_histories
from reference import buffer as tb
from spec.errors import BadConfig, BadRecord
from spec.history import RAISED, RECOVER, OpType, is_machine_operation
from txnmodel.commands.simulate import simulate_main

SPEC = RunSpec(workload="ctp", seed=3, ops=12, faults=False)


def _raise_at_first_commit_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    """``reference.buffer._write`` raises when it writes the run's first commit marker."""
    original = tb._write
    fired = [False]

    def write(state: Any, kind: tb.EntryKind, txn_id: Any) -> Any:
        if kind is tb.EntryKind.TXN_COMMIT and not fired[0]:
            fired[0] = True
            raise RuntimeError("injected: the commit marker's write")
        return original(state, kind, txn_id)

    monkeypatch.setattr(tb, "_write", write)


def test_a_step_that_raises_is_recorded_and_the_component_reloads(monkeypatch: pytest.MonkeyPatch) -> None:
    clean = run(SPEC)
    assert clean.failures == []
    assert not any(op.error == STEP_RAISED for op in clean.operations)
    assert "component_failures" not in clean.metadata()

    _raise_at_first_commit_marker(monkeypatch)
    result = run(SPEC)
    monkeypatch.undo()

    (failure,) = result.failures
    assert failure.component.startswith("partition:")
    assert failure.error == "RuntimeError: injected: the commit marker's write"
    assert failure.where.startswith("tests/engine/broker/test_component_failure.py:") and failure.where.endswith(
        ".write"
    )
    assert result.metadata()["component_failures"] == [failure.to_json()]
    (raised,) = [op for op in result.operations if op.error == STEP_RAISED]
    assert raised.type is OpType.FAIL and is_machine_operation(raised) and raised.object == failure.component
    later = [op for op in result.operations if op.object == failure.component and op.index > raised.index]
    assert later and later[0].f == RECOVER, "the component is loaded again after it raised"
    # The workload went on after the failure: transactions committed after it.
    assert result.committed > 0 and result.operations[-1].index > raised.index

    rows = check_histories({"raised": result.operations}, "test", VerifyOptions(counterexamples=False))
    flagged = [r for r in rows if r.checker == "linearizability" and r.verdict != "ok"]
    assert [r.failing_object for r in flagged] == [failure.component], [(r.checker, r.verdict) for r in rows]
    clean_rows = check_histories({"clean": clean.operations}, "test", VerifyOptions(counterexamples=False))
    assert all(r.verdict == "ok" for r in clean_rows if r.checker == "linearizability")


def _raised_in(component: object, exc: Exception) -> Exception:
    """``exc`` raised in a method of ``component`` (its frame has ``self``)."""

    def method(self: object) -> None:
        raise exc

    try:
        method(component)
    except Exception as raised:
        return raised
    raise AssertionError("not raised")


def test_only_what_a_component_raised_is_contained() -> None:
    cluster = Cluster.start(seed=1, topics={"t": 1})
    try:
        broker = cluster.broker
        assert not broker.contain(ValueError("no traceback, no component"))
        assert not broker.contain(_raised_in(object(), KeyError("a workload's own bug")))
        bad = BadConfig("broker.conf", "bad durable input is the caller's to report")
        assert not broker.contain(_raised_in(broker.coordinator, bad))
        assert broker.failures == [] and broker.coordinator.ready
        assert broker.contain(_raised_in(broker.coordinator, RuntimeError("a bug")))
        (failure,) = broker.failures
        assert failure.component == broker.coordinator.obj and failure.error == "RuntimeError: a bug"
        assert not broker.coordinator.ready, "the component crashed"
        cluster.sim.advance(broker.restart_delay_ms + 1)
        assert broker.coordinator.ready, "and was loaded again"
    finally:
        cluster.close()


def test_simulate_names_the_failure_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _raise_at_first_commit_marker(monkeypatch)
    out = Path(tempfile.mkdtemp(prefix="txnmodel-failure-"))
    code = simulate_main(
        ["--workload", "ctp", "--seed", "3", "--ops", "12", "--faults", "off", "--quiet", "--out", str(out)]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "engine failure" in err and "RuntimeError: injected: the commit marker's write" in err
    histories = read_parquet(out / "ctp.parquet")
    (ops,) = histories.values()
    assert any(op.error == STEP_RAISED for op in ops)


def test_a_tracker_step_that_raises_is_recorded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The delayed tracker steps through its own funnel (``DelayedService._step``), not
    ``Component._advance``: a step that raises there is recorded as failed as well."""
    from reference import delayed as dd
    from reference.delayed_common import AddMessage

    original = dd.step
    fired = [False]

    def step(state: Any, command: Any) -> Any:
        if isinstance(command, AddMessage) and not fired[0]:
            fired[0] = True
            raise RuntimeError("injected: the tracker's first add")
        return original(state, command)

    monkeypatch.setattr(dd, "step", step)
    result = run(RunSpec(workload="delayed", seed=2, ops=12, faults=False))
    monkeypatch.undo()

    (failure,) = result.failures
    assert failure.component.startswith("partition:") and "injected: the tracker's first add" in failure.error
    (raised,) = [op for op in result.operations if op.error == STEP_RAISED]
    assert raised.type is OpType.FAIL and raised.f == "add_message" and raised.object.startswith("tracker:")
    rows = check_histories({"raised": result.operations}, "test", VerifyOptions(counterexamples=False))
    assert [r.failing_object for r in rows if r.checker == "linearizability" and r.verdict != "ok"] == [raised.object]


# --- a raise outside any recorded step, a raise at broker start, and the client library ---------------


def _raising_once(monkeypatch: pytest.MonkeyPatch, module: Any, name: str, when: Any, message: str) -> None:
    """``module.name`` raises ``RuntimeError(message)`` the first time ``when(*args)`` holds."""
    original = getattr(module, name)
    fired = [False]

    def patched(*args: Any, **kwargs: Any) -> Any:
        if not fired[0] and when(*args):
            fired[0] = True
            raise RuntimeError(message)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, patched)


def _flagged_objects(ops: list[Any]) -> list[str | None]:
    rows = check_histories({"raised": ops}, "test", VerifyOptions(counterexamples=False))
    return [r.failing_object for r in rows if r.checker == "linearizability" and r.verdict != "ok"]


def test_a_raise_outside_any_step_is_recorded_as_a_raised_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """``buffer.dispatch`` runs outside the buffer's ``step``: what it raises was not recorded as a
    failed step, so the broker records a ``raised`` row on the component that raised, and the
    per-object check flags that object (no correct component raises)."""
    _raising_once(monkeypatch, tb, "dispatch", lambda *args: True, "injected: the first dispatch")
    result = run(SPEC)
    monkeypatch.undo()

    (failure,) = result.failures
    assert failure.error == "RuntimeError: injected: the first dispatch"
    (raised,) = [op for op in result.operations if op.f == RAISED]
    assert raised.type is OpType.FAIL and raised.error == STEP_RAISED and is_machine_operation(raised)
    assert raised.args["error"] == "RuntimeError" and raised.args["where"].endswith("patched")
    assert raised.object.startswith(("subscription:", "partition:"))
    assert not [op for op in result.operations if op.error == STEP_RAISED and op.f != RAISED], "no step raised"
    assert result.committed > 0 and result.operations[-1].index > raised.index, "the run went on"
    assert _flagged_objects(result.operations) == [raised.object]


def test_the_pip160_writer_raising_is_its_components_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batched log writer steps in its own timers and completions (``RecordLog``): it raises on
    behalf of the component that owns the log, whose object gets the ``raised`` row."""
    from reference import batched_log as bl

    _raising_once(
        monkeypatch, bl, "step", lambda state, command: isinstance(command, bl.TimerFired), "injected: a flush timer"
    )
    result = run(dataclasses.replace(SPEC, batching=True))
    monkeypatch.undo()

    (failure,) = result.failures
    (raised,) = [op for op in result.operations if op.f == RAISED]
    assert raised.object in (
        failure.component,
        *[op.object for op in result.operations if op.object.startswith("subscription:")],
    )
    assert raised.args["machine"] in ("coordinator", "pending_ack")
    assert _flagged_objects(result.operations) == [raised.object]


def test_a_load_that_raises_at_broker_start_is_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    _raising_once(monkeypatch, tb, "recovery_view", lambda *args: True, "injected: the first recovery")
    cluster = Cluster.start(seed=1, topics={"t": 2})
    monkeypatch.undo()
    try:
        broker = cluster.broker
        (failure,) = broker.failures
        assert failure.component.startswith("partition:") and "the first recovery" in failure.error
        part = next(p for p in broker.partitions.values() if p.obj == failure.component)
        assert not part.ready and all(p.ready for p in broker.partitions.values() if p is not part)
        assert broker.coordinator.ready, "the other components still loaded"
        cluster.sim.advance(broker.restart_delay_ms + 1)
        assert part.ready, "and the one that raised was loaded again"
        ops = cluster.history(machines=True)
        (raised,) = [op for op in ops if op.f == RAISED]
        assert raised.object == failure.component and raised.args["machine"] == "buffer"
    finally:
        cluster.close()


def test_a_client_library_exception_fails_the_call_and_the_oracle_flags_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """TC-37: the client's transaction machine raises on the run's first commit: the commit fails
    with the exception's type, the run goes on (and lists the failure), and the client-visible
    check ``unexpected-error`` flags the operation; the clean run is not flagged."""
    from invariants.client_visible import check_client_visible
    from reference import client as ct

    clean = run(SPEC)
    assert check_client_visible(clean.operations).ok
    _raising_once(
        monkeypatch, ct, "step", lambda state, command: isinstance(command, ct.Commit), "injected: the first commit"
    )
    result = run(SPEC)
    monkeypatch.undo()

    (failure,) = result.failures
    assert failure.component.startswith("client:") and failure.error == "RuntimeError: injected: the first commit"
    (failed,) = [op for op in result.operations if op.error == "RuntimeError"]
    assert failed.f == "commit" and failed.type is OpType.FAIL
    assert result.committed > 0 and result.operations[-1].index > failed.index, "the run went on"
    verdict = check_client_visible(result.operations)
    assert verdict.counts == {"unexpected-error": 1} and verdict.violations[0].ops == (failed.index,)


def test_a_client_library_exception_in_a_callback_fails_the_waiting_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The library raises while handling the coordinator's answer (an event, not the user's call):
    the commit waiting for that answer fails with the exception, and the run goes on."""
    from reference import client as ct

    _raising_once(
        monkeypatch,
        ct,
        "step",
        lambda state, command: isinstance(command, ct.EndTxnResponse),
        "injected: the first END_TXN answer",
    )
    result = run(SPEC)
    monkeypatch.undo()

    (failed,) = [op for op in result.operations if op.error == "RuntimeError"]
    assert failed.f in ("commit", "abort") and failed.type is OpType.FAIL
    assert result.operations[-1].index > failed.index


def test_a_record_that_does_not_decode_is_a_machine_bug_only_on_the_runs_own_ledgers() -> None:
    cluster = Cluster.start(seed=1, topics={"t": 1})
    try:
        broker = cluster.broker
        assert broker.own_ledgers, "a simulation's store starts empty: its machines wrote every record"
        broker.own_ledgers = False  # as serve's broker, on a data folder that may come from elsewhere
        assert not broker.contain(_raised_in(broker.coordinator, BadRecord("no metadata_op", offset=0)))
        assert broker.failures == [] and broker.coordinator.ready
        broker.own_ledgers = True
        assert broker.contain(_raised_in(broker.coordinator, BadRecord("no metadata_op", offset=0)))
        (failure,) = broker.failures
        assert failure.error == "BadRecord: no metadata_op (at byte offset 0)" and not broker.coordinator.ready
    finally:
        cluster.close()


def test_an_err_without_an_error_value_raises_where_it_is_made() -> None:
    from spec.errors import NotAllowed
    from spec.result import Err

    assert Err(NotAllowed("refused")).error.message == "refused"
    for wrong in (None, ["a position"], "NotAllowed"):
        with pytest.raises(TypeError, match="Err needs a DomainError"):
            Err(wrong)  # type: ignore[arg-type]


# Branch flips (devtools.branches) whose runs used to end in an exception the engine did not contain,
# so that no history was judged; each with a main-job history that takes the flipped branch.
RAISING_FLIPS = [
    ("coordinator:26", "ctp", 1),  # the log's decoder refuses every record of the broker's own log
    ("pending_ack:57", "ctp", 1),  # the same for the pending-ack log
    ("pending_ack:131", "ctp", 14),  # the admin query of the pending ack (PA-21) raises
    ("pending_ack:446", "ctp", 3),  # an individual ack answered with Err of a list
    ("pending_ack:455", "ctp", 22),  # a cumulative ack answered with Err(None)
    ("delayed:82", "delayed", 3),  # a storage fault done to the tracker from the fault schedule
    ("delayed:875", "delayed", 38),  # a snapshot's completion (the tracker's own event) misreads its run
    ("client:0", "ctp", 1),  # the client library refuses every timeout as it builds a Transaction
]


@pytest.mark.parametrize(("flip", "workload", "seed"), RAISING_FLIPS, ids=[f for f, _, _ in RAISING_FLIPS])
def test_a_flip_that_raises_is_contained_and_its_history_flagged(flip: str, workload: str, seed: int) -> None:
    from devtools.mutation import applied, flip_mutants
    from engine.simulation.options import main_job_spec

    spec = main_job_spec(workload, seed)
    assert run(spec).failures == []
    (mutant,) = [m for m in flip_mutants(flip.split(":")[0]) if m.id == flip]
    with applied(mutant):
        result = run(spec)
    assert result.failures, "the flip raised, and the run went on"
    # judged by the unflipped reference, as txnmodel verify judges another broker's history
    rows = check_histories({flip: result.operations}, "test", VerifyOptions(counterexamples=False))
    assert any(r.verdict == "illegal" for r in rows), [(r.checker, r.verdict) for r in rows]
