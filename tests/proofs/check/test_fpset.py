"""The seen set that spills to disk gives the explorer the same states, verdicts and traces."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proofs.check.explore import MemoryVisited, Options, Result, explore
from proofs.check.fpset import MAX_RUNS, CorruptSpillFile, SpillingFrontier, SpillingVisited, merge_runs
from proofs.check.model import Model
from proofs.check.models import build
from spec.errors import InputError
from tests.known_bugs.catalogue import MUTANTS, applied


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


# --- the streamed merge of runs -------------------------------------------------------------

_fingerprints = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def _write_run(path: Path, records: dict[int, int]) -> Path:
    keys = np.array(sorted(records), dtype=np.int64)
    parents = np.array([records[k] for k in sorted(records)], dtype=np.int64)
    np.save(path, np.stack([keys, parents]) if len(keys) else np.zeros((2, 0), dtype=np.int64))
    return path


@given(
    runs=st.lists(st.dictionaries(_fingerprints, _fingerprints, max_size=40), max_size=7),
    shared=st.lists(_fingerprints, max_size=10),
    chunk=st.integers(min_value=1, max_value=9),
)
def test_the_streamed_merge_keeps_every_fingerprint_once_with_its_first_parent(
    runs: list[dict[int, int]], shared: list[int], chunk: int
) -> None:
    # Some fingerprints in several runs (with different parents): the first run's parent stays.
    for k, fp in enumerate(shared):
        for i, records in enumerate(runs):
            if (k + i) % 2 == 0:
                records[fp] = i * 1000 + k
    expected: dict[int, int] = {}
    for records in runs:
        for fp, parent in records.items():
            expected.setdefault(fp, parent)
    directory = Path(tempfile.mkdtemp(prefix="merge-"))
    try:
        paths = [_write_run(directory / f"run-{i}.npy", records) for i, records in enumerate(runs)]
        target = directory / "merged.npy"
        assert merge_runs(paths, target, chunk=chunk) == len(expected)
        merged = np.load(target)
        assert merged.shape == (2, len(expected)) and merged.dtype == np.int64
        assert merged[0].tolist() == sorted(expected)
        assert merged[1].tolist() == [expected[fp] for fp in sorted(expected)]
        assert sorted(p.name for p in directory.iterdir()) == sorted([p.name for p in paths] + ["merged.npy"])
    finally:
        shutil.rmtree(directory)


def test_a_merge_of_empty_runs_is_an_empty_run(tmp_path: Path) -> None:
    paths = [_write_run(tmp_path / f"run-{i}.npy", {}) for i in range(3)]
    assert merge_runs(paths, tmp_path / "merged.npy") == 0
    assert np.load(tmp_path / "merged.npy").shape == (2, 0)
    paths.append(_write_run(tmp_path / "run-3.npy", {5: 1, -7: 2}))
    assert merge_runs(paths, tmp_path / "merged.npy", chunk=1) == 2
    assert np.load(tmp_path / "merged.npy").tolist() == [[-7, 5], [2, 1]]


@given(levels=st.lists(st.lists(st.integers(min_value=-50, max_value=50), max_size=12), max_size=30))
def test_the_spilling_seen_set_answers_as_the_in_memory_one(levels: list[list[int]]) -> None:
    """Random levels (repeats within and across levels) through a seen set that spills every 3
    fingerprints and merges past MAX_RUNS runs: the same new flags, parents and size as the dict."""
    directory = Path(tempfile.mkdtemp(prefix="seen-"))
    try:
        spilling = SpillingVisited(directory / "seen", memory_states=3)
        memory = MemoryVisited()
        for depth, level in enumerate(levels):
            fps = list(dict.fromkeys(level))  # the explorer settles distinct fingerprints
            parents = [depth * 100 + i for i in range(len(fps))]
            assert spilling.add_level(fps, parents) == memory.add_level(fps, parents)
            assert len(list((directory / "seen").glob("run-*.npy"))) <= MAX_RUNS
        assert len(spilling) == len(memory)
        for fp in range(-51, 52):
            assert spilling.parent(fp) == memory.parent(fp)
    finally:
        shutil.rmtree(directory)


def test_a_run_that_is_not_one_is_a_typed_error_naming_the_file(tmp_path: Path) -> None:
    good = _write_run(tmp_path / "good.npy", {i * 3: i for i in range(100)})
    truncated = tmp_path / "truncated.npy"
    truncated.write_bytes(good.read_bytes()[:-40])
    garbage = tmp_path / "garbage.npy"
    garbage.write_bytes(b"not a numpy file at all")
    wrong_shape = tmp_path / "shape.npy"
    np.save(wrong_shape, np.zeros((3, 4), dtype=np.int64))
    unsorted = tmp_path / "unsorted.npy"
    np.save(unsorted, np.array([[1, 2, 9, 4, 5], [0, 0, 0, 0, 0]], dtype=np.int64))
    repeated = tmp_path / "repeated.npy"
    np.save(repeated, np.array([[1, 2, 3, 3, 5], [0, 0, 0, 0, 0]], dtype=np.int64))
    for bad, what in (
        (truncated, "not a readable run"),
        (garbage, "not a readable run"),
        (wrong_shape, "two int64 rows"),
        (unsorted, "out of order"),
        (repeated, "repeated"),
    ):
        with pytest.raises(CorruptSpillFile, match=what) as raised:
            merge_runs([good, bad], tmp_path / "merged.npy", chunk=2)
        assert raised.value.path == bad and str(bad) in str(raised.value)
        assert not list(tmp_path.glob("merged.npy*"))  # nothing half-written is left
        assert isinstance(raised.value, InputError)  # the CLI's boundary: exit 2, one line, no traceback
    # An order broken at a chunk boundary is found too.
    across = tmp_path / "across.npy"
    np.save(across, np.array([[1, 2, 3, 0, 5, 6], [0] * 6], dtype=np.int64))
    repeated_across = tmp_path / "repeated_across.npy"
    np.save(repeated_across, np.array([[1, 2, 3, 3, 5, 6], [0] * 6], dtype=np.int64))
    for bad in (across, repeated_across):
        with pytest.raises(CorruptSpillFile, match="out of order or repeated at record 3"):
            merge_runs([bad], tmp_path / "merged.npy", chunk=3)
    with pytest.raises(CorruptSpillFile, match="not a readable run"):
        SpillingVisited(tmp_path / "seen")._runs.load(["../truncated.npy"])


def test_a_frontier_level_cut_short_is_a_typed_error_naming_the_file(tmp_path: Path) -> None:
    level = SpillingFrontier(tmp_path, memory_states=4)
    for i in range(12):
        level.append(i, (i, (i,)))
    assert level.path is not None
    level._flush()
    size = level.path.stat().st_size
    with open(level.path, "r+b") as cut:
        cut.truncate(size - 7)
    with pytest.raises(CorruptSpillFile, match="cut short") as raised:
        list(level)
    assert raised.value.path == level.path
    level.discard()
