"""The named quirks (append-after-abort, abort-hides-committed) are switchable in the simulator as in the
model checker."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.simulation.workloads import SimulateOptions
from txnmodel.cli import main


def test_simulate_options_switch_the_quirk_on_in_every_run(tmp_path: Path) -> None:
    plain = SimulateOptions(histories=2).specs("ctp", str(tmp_path))
    quirky = SimulateOptions(histories=2, quirks=("append-after-abort",)).specs("ctp", str(tmp_path))
    assert not any(spec.config.txnmodel_quirk_append_after_abort for spec in plain)
    assert all(spec.config.txnmodel_quirk_append_after_abort for spec in quirky)


def test_simulate_options_switch_abort_hides_committed(tmp_path: Path) -> None:
    plain = SimulateOptions(histories=2).specs("ctp", str(tmp_path))
    quirky = SimulateOptions(histories=2, quirks=("abort-hides-committed",)).specs("ctp", str(tmp_path))
    assert not any(spec.config.txnmodel_quirk_abort_hides_committed for spec in plain)
    assert all(spec.config.txnmodel_quirk_abort_hides_committed for spec in quirky)


def test_simulate_refuses_an_unknown_quirk(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--quirk", "no-such-quirk"]) == 2
    assert "invalid choice: 'no-such-quirk'" in capsys.readouterr().err
