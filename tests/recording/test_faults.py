"""Recording from ``txnmodel serve`` with faults on (broker and coordinator crashes, topic unloads,
dropped connections and responses, held-back output, failed ledger appends and reads, short
transaction timeouts): the verdicts stay sound.  Operations whose outcome the clients could not
learn are recorded ``info`` and given the benefit of the doubt, so a correct broker is never
flagged; the faults stop before the final drain, and no liveness bound is stated while they run.

Each workload is recorded on a few seeds here (the report of the issue lists the larger sweep);
each run must have had unknown outcomes, or it proved nothing about them."""

from __future__ import annotations

import pytest

from tests.recording.conftest import passed, verdicts
from tests.recording.faults import record_with_faults

SEEDS = {"produce-consume": (0, 1), "ctp": (0, 1), "multi": (0, 1), "delayed": (0,), "nack": (0,)}


@pytest.mark.parametrize(("workload", "seed"), [(w, s) for w, seeds in SEEDS.items() for s in seeds])
def test_no_false_alarm_across_unknown_outcomes(workload: str, seed: int) -> None:
    checked, injected = record_with_faults(workload, seed)
    assert injected, "the nemesis hit nothing: the run proved nothing about faults"
    # every checker that applies to a client history (transactional, and the delivery oracle) passes
    assert passed(checked.rows) and "transactional" in verdicts(checked.rows), (
        checked.anomalies,
        [row.detail for row in checked.rows if row.verdict != "ok"],
    )
    # no liveness bound was stated: the two liveness checks say they had nothing to judge
    assert not checked.applies("late-delivery") and not checked.applies("lost-redelivery")
    assert checked.applies("lost-message")


@pytest.mark.parametrize("workload", ["nack", "delayed"])
def test_liveness_bounds_are_withdrawn_from_a_disturbed_run(workload: str) -> None:
    """Recorded with liveness on (the default) while the broker crashes: the recorder saw its
    consumers disconnected, so it states no liveness bound, and a late redelivery after a crash is
    not a false alarm."""
    checked, injected = record_with_faults(workload, 0, liveness=True)
    assert injected
    assert passed(checked.rows), checked.anomalies
    run = checked.result.metadata["runs"][checked.result.history]
    assert run["bounds"]["withdrawn"] and "disconnected" in run["bounds"]["withdrawn"]
    assert any(note.startswith("liveness bounds withdrawn") for note in run["notes"])
    assert not checked.applies("late-delivery") and not checked.applies("lost-redelivery")
