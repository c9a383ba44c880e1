"""A machine step that never returns is a finding of the model checker (``divergence``,
``step-terminates``), not a hung run: the step guard's alarm stops it and the run reports it with
the trace that led there.  The guard leaves the process's SIGALRM handling as it found it."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

import reference.coordinator as tc
from txnmodel.commands.check import check_models


def test_a_step_that_never_returns_is_reported_as_a_divergence(monkeypatch: pytest.MonkeyPatch) -> None:
    real = tc.step

    def spinning(state: Any, command: Any) -> Any:
        if isinstance(command, tc.NewTxn):  # only in successors: the initial state still builds
            # Spins far past the 0.2 s guard, but not forever: a broken guard fails the test
            # (no divergence found) instead of hanging the suite.
            give_up = time.monotonic() + 30
            while time.monotonic() < give_up:
                pass
        return real(state, command)

    monkeypatch.setattr(tc, "step", spinning)
    before = signal.getsignal(signal.SIGALRM)
    (run,) = check_models(["produce"], {}, step_timeout_s=0.2)
    kinds = {(v.kind, v.name) for v in run.result.violations}
    assert ("divergence", "step-terminates") in kinds
    (divergence,) = [v for v in run.result.violations if v.kind == "divergence"]
    assert "ran for more than 0.2 s" in divergence.detail
    assert divergence.trace  # the steps that led to the state whose successor diverged
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_the_same_model_without_the_spin_has_no_divergence() -> None:
    (run,) = check_models(["produce"], {}, step_timeout_s=0.2)
    assert not [v for v in run.result.violations if v.kind == "divergence"]
