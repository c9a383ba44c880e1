"""Every catalogued mutant the models reach is found by ``txnmodel check`` at its probe's bounds,
and the same bounds pass without it (docs/known_bugs.md, "Model checking")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.known_bugs.catalogue import MUTANTS, applied
from tests.known_bugs.check_probes import CHECK_PROBES, NOT_REACHED, check_detection


def test_every_mutant_has_probes_or_a_reason() -> None:
    for mutant in MUTANTS:
        assert mutant.name in CHECK_PROBES or mutant.name in NOT_REACHED, mutant.name


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.name not in NOT_REACHED], ids=lambda m: m.name)
def test_detected_by_the_model_checker(mutant: object) -> None:
    row = check_detection(mutant)  # type: ignore[arg-type]
    assert row["detected"], row


def test_the_two_the_bulk_checker_misses() -> None:
    """An end that never leaves the ongoing set (a liveness violation: the end never reaches the
    partition, ends-everywhere), and a recovery that keeps the snapshot's maxReadPosition."""
    by_name = {m.name: m for m in MUTANTS}
    end = check_detection(by_name["end-not-removing-ongoing"])
    assert ("liveness", "ends-everywhere") in {(k, n) for k, n, _ in end["violations"]}
    recovery = check_detection(by_name["recovery-keeps-snapshot-mrp"])
    assert (recovery["kind"], recovery["property"]) == ("safety", "buffer-recovers-live")


def test_a_component_that_appears_mid_trace_is_written(tmp_path: Path) -> None:
    """The non-strict cutoff's counterexample: the subscription's delayed tracker first exists
    part-way through the trace.  ``txnmodel check`` writes it (the trace's ``initial`` names the
    tracker, null until it exists), and the viewer's loader reads it back."""
    from proofs.check.trace_format import Trace
    from txnmodel.commands.check import check_models, write_counterexamples

    mutant = {m.name: m for m in MUTANTS}["non-strict-cutoff"]
    with applied(mutant):
        (run,) = check_models(["delayed"], {"crash_partition": 0})
    assert run.result.violations
    (folder,) = write_counterexamples(run, tmp_path)
    document = json.loads((Path(folder) / "trace.json").read_text(encoding="utf-8"))
    trackers = [name for name in document["initial"] if name.startswith("tracker:")]
    assert trackers and all(document["initial"][name] is None for name in trackers)
    trace = Trace.from_json(document)
    assert any(trace.steps[-1].states[name] is not None for name in trackers)
    assert (Path(folder) / "trace.html").is_file() and (Path(folder) / "history.jsonl").is_file()
