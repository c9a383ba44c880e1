"""The seen set that spills to disk gives the explorer the same states, verdicts and traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from proofs.check.explore import Options, Result, explore
from proofs.check.model import Model
from proofs.check.models import build
from tests.known_bugs.catalogue import MUTANTS, applied
from txnmodel.fpset import MAX_RUNS, SpillingFrontier, SpillingVisited


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


def test_a_spilled_frontier_gives_back_its_level_in_order(tmp_path: Path) -> None:
    level = SpillingFrontier(tmp_path, memory_states=3)
    items = [(i * 7919 - 40, (i, (i % 3, -i), ())) for i in range(11)]
    for fp, state in items:
        level.append(fp, state)
    assert len(level) == 11 and level.spilled == 9
    assert level.path is not None and level.path.stat().st_size > 0
    assert list(level) == items
    assert list(level) == items  # a level can be read again (a trace replay never needs it, a test does)
    level.discard()
    assert not list(tmp_path.iterdir())
    empty = SpillingFrontier(tmp_path, memory_states=3)
    assert list(empty) == [] and len(empty) == 0
    empty.discard()


def _bounded(tmp_path: Path, name: str, every: int) -> Options:
    """Options for the bounded-memory run: every structure spills after ``every`` entries."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    return Options(
        visited=lambda: SpillingVisited(tmp_path / f"{name}-seen", memory_states=every),
        frontier=lambda: SpillingFrontier(tmp_path, memory_states=every),
        settle_every=every,
    )


def _summary(result: Result) -> tuple[object, ...]:
    return (
        result.states,
        result.transitions,
        result.depth,
        result.verdict,
        [(v.kind, v.name, v.length, v.cycle_start, [s.label for s in v.trace]) for v in result.violations],
    )


@pytest.mark.parametrize(
    ("name", "bounds", "liveness"),
    [
        ("produce", {"clients": 2, "partitions": 2, "spread": 1, "readers": 0, "loss": 0, "duplicate": 0}, False),
        ("batched-log", {}, False),
        ("end-path", {}, True),  # the frontier and the chunked settle keep the liveness graph's order too
    ],
)
def test_the_bounded_memory_run_matches_the_in_memory_one(
    tmp_path: Path, name: str, bounds: dict[str, int], liveness: bool
) -> None:
    memory = explore(Model(build(name, bounds)), Options(liveness=liveness))
    options = _bounded(tmp_path, name, 97)
    options.liveness = liveness
    spilled: list[SpillingFrontier] = []
    make = options.frontier
    assert make is not None

    def frontier() -> SpillingFrontier:
        level = make()
        assert isinstance(level, SpillingFrontier)
        spilled.append(level)
        return level

    options.frontier = frontier
    disk = explore(Model(build(name, bounds)), options)
    assert any(level.spilled for level in spilled)  # the levels did go to disk
    assert all(level.path is None for level in spilled)  # and were deleted once expanded
    assert _summary(disk) == _summary(memory)


@pytest.mark.parametrize("keep_going", [False, True])
def test_the_bounded_memory_run_finds_the_same_violations(tmp_path: Path, keep_going: bool) -> None:
    bounds = {"clients": 2, "partitions": 2, "spread": 1, "readers": 0, "loss": 0, "duplicate": 0}
    mutant = next(m for m in MUTANTS if m.name == "abort-not-recorded")
    with applied(mutant):
        expected = explore(Model(build("produce", bounds)), Options(liveness=False, stop_at_first=not keep_going))
        options = _bounded(tmp_path, "produce", 5)
        options.liveness = False
        options.stop_at_first = not keep_going
        found = explore(Model(build("produce", bounds)), options)
    assert expected.violations
    assert _summary(found) == _summary(expected)
