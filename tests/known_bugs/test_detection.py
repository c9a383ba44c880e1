"""Each known-bug mutant is flagged by the bulk checker from the histories alone, and the same
seeds are clean without it.  Mutants the workloads cannot exercise are listed in
docs/known_bugs.md, not tested here."""

from __future__ import annotations

import pytest

from .catalogue import DETECTABLE, Mutant, applied, check


@pytest.mark.parametrize("mutant", DETECTABLE, ids=lambda m: m.name)
def test_mutant_is_flagged(mutant: Mutant) -> None:
    assert mutant.seeds, "a detectable mutant names the seeds it is flagged at"
    for seed in mutant.seeds:
        flagged, counts = check(mutant.probe.spec(seed))
        assert not flagged, f"seed {seed} of {mutant.probe} is not clean without the mutant: {counts}"
    with applied(mutant):
        for seed in mutant.seeds:
            flagged, counts = check(mutant.probe.spec(seed))
            assert flagged, f"{mutant.name} not flagged at seed {seed} of {mutant.probe}"
            assert counts, f"{mutant.name}: flagged but no anomaly counted at seed {seed}"


@pytest.mark.parametrize("mutant", DETECTABLE, ids=lambda m: m.name)
def test_patch_is_restored(mutant: Mutant) -> None:
    before = getattr(mutant.target, mutant.attribute)
    with applied(mutant):
        assert getattr(mutant.target, mutant.attribute) is not before
    assert getattr(mutant.target, mutant.attribute) is before
