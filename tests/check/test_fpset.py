"""The seen set that spills to disk gives the explorer the same states, verdicts and traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from proofs.check.explore import Options, explore
from proofs.check.model import Model
from proofs.check.models import build
from tests.known_bugs.catalogue import MUTANTS, applied
from txnmodel.fpset import MAX_RUNS, SpillingVisited


def test_membership_and_parents_across_memory_and_runs(tmp_path: Path) -> None:
    seen = SpillingVisited(tmp_path, memory_states=4)
    fps = [(-1) ** i * (i * 7919 + 3) << 40 for i in range(60)]
    for start in range(0, 60, 3):
        level = fps[start : start + 3]
        assert seen.add_level(level, [f + 1 for f in level]) == [True, True, True]
        assert seen.add_level(level, [0, 0, 0]) == [False, False, False]
    assert len(seen) == 60 and seen.spilled >= 56
    assert len(list(tmp_path.glob("run-*.npy"))) <= MAX_RUNS + 1
    assert all(seen.parent(f) == f + 1 for f in fps)  # the first parent recorded stays
    assert seen.parent(12345) is None
    keys = np.load(sorted(tmp_path.glob("run-*.npy"))[0])[0]
    assert list(keys) == sorted(keys)


def test_spilling_explorer_matches_the_in_memory_one(tmp_path: Path) -> None:
    bounds = {"clients": 2, "partitions": 2, "spread": 1, "readers": 0, "loss": 0, "duplicate": 0}
    memory = explore(Model(build("produce", bounds)), Options(liveness=False))
    seen: list[SpillingVisited] = []

    def spilling() -> SpillingVisited:
        seen.append(SpillingVisited(tmp_path / "a", memory_states=500))
        return seen[-1]

    disk = explore(Model(build("produce", bounds)), Options(liveness=False, visited=spilling))
    assert seen[0].spilled > 0
    assert (disk.states, disk.transitions, disk.depth, disk.verdict) == (
        memory.states,
        memory.transitions,
        memory.depth,
        memory.verdict,
    )
    # A violation's trace is rebuilt from parents on disk.
    mutant = next(m for m in MUTANTS if m.name == "abort-not-recorded")
    with applied(mutant):
        found = explore(
            Model(build("produce", bounds)),
            Options(liveness=False, visited=lambda: SpillingVisited(tmp_path / "b", memory_states=8)),
        )
        expected = explore(Model(build("produce", bounds)), Options(liveness=False))
    assert [(v.name, v.length) for v in found.violations] == [(v.name, v.length) for v in expected.violations]
    assert [s.label for s in found.violations[0].trace] == [s.label for s in expected.violations[0].trace]
