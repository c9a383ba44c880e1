"""Every catalogued mutant the models reach is found by ``txnmodel check`` at its probe's bounds,
and the same bounds pass without it (docs/known_bugs.md, "Model checking")."""

from __future__ import annotations

import pytest

from tests.known_bugs.catalogue import MUTANTS
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
