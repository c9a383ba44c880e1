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
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest

from invariants.history import read_parquet
from invariants.verify import VerifyOptions, check_histories
from reference import buffer as tb
from reference.engine.broker.component import STEP_RAISED
from reference.engine.client import Cluster
from reference.engine.simulate import RunSpec, run
from spec.errors import BadConfig
from spec.history import RECOVER, OpType, is_machine_operation
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
    assert failure.where.startswith("tests/engine/test_component_failure.py:") and failure.where.endswith(".write")
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
