"""Each known-bug mutant is flagged by the bulk checker from the histories alone, and the same
seeds are clean without it.  Mutants the workloads cannot exercise are listed in
docs/known_bugs.md, not tested here."""

from __future__ import annotations

import pytest

from tests.known_bugs.catalogue import DETECTABLE, MUTANTS, Mutant, applied, check


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


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_patch_is_restored(mutant: Mutant) -> None:
    before = mutant.current()
    with applied(mutant):
        assert mutant.current() is not before
    assert mutant.current() is before


def test_the_catalogue() -> None:
    names = [m.name for m in MUTANTS]
    assert len(set(names)) == len(names) >= 12
    assert len(DETECTABLE) >= 12
    for m in MUTANTS:
        assert m.reference and m.summary
        assert bool(m.not_detectable) != bool(m.seeds), f"{m.name}: either seeds it is flagged at, or why not"
        assert m.runnable or m.not_detectable
