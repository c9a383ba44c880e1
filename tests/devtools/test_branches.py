"""The branch-flip layer's list of equivalent flips (devtools/branches.py, ``FLIP_EQUIVALENT``).

A flip is listed only when its two arms compute the same thing, so each entry must name a flip
that exists, and the flipped code must agree with the unflipped code where it is called: on the
machine's conformance vectors, and directly where the arms are two ways of computing one value."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devtools.branches import FLIP_EQUIVALENT, flip_reason
from devtools.mutation import Mutant, applied, flip_mutants
from reference.delayed_runs import Run, compact_run, merge_runs, pack
from runners.vectors import run_paths
from tests.delayed import test_batched_pops

ROOT = Path(__file__).resolve().parents[2]
MACHINES = ("client", "coordinator", "buffer", "pending_ack", "batched_log", "delayed")


def _listed() -> list[Mutant]:
    """The flip mutants ``FLIP_EQUIVALENT`` names."""
    return [
        m
        for machine in MACHINES
        for m in flip_mutants(machine)
        if flip_reason(m.module, m.function, m.before) is not None
    ]


def test_every_entry_names_a_flip() -> None:
    named = {(m.module, m.function, m.before.removeprefix("if ")) for m in _listed()}
    functions = {(m.module, m.function) for m in _listed()}
    for key in FLIP_EQUIVALENT:
        assert (key in named) if len(key) == 3 else (key in functions), f"{key} names no branch-flip mutant"
        assert FLIP_EQUIVALENT[key].startswith("equivalent"), key


@pytest.mark.parametrize("mutant", _listed(), ids=lambda m: m.id)
def test_a_listed_flip_passes_its_machines_vectors(mutant: Mutant) -> None:
    with applied(mutant):
        results = run_paths([str(ROOT / "spec" / "vectors" / mutant.machine)])
    assert results
    assert [r.vector_id for r in results if not r.passed] == []


def test_the_vectors_tell_a_flip_that_changes_an_answer() -> None:
    # the tracker's trim with its mark-delete test negated never deletes a bucket: not equivalent,
    # and the vectors say so (what the test above relies on)
    (trim,) = [
        m for m in flip_mutants("delayed") if (m.function, m.before) == ("_trim", "if state.mark_delete_ledger < 0")
    ]
    assert flip_reason(trim.module, trim.function, trim.before) is None
    with applied(trim):
        results = run_paths([str(ROOT / "spec" / "vectors" / "delayed")])
    assert [r.vector_id for r in results if not r.passed]


INDEXES = st.tuples(st.integers(0, 2**40), st.integers(0, 2**20), st.integers(0, 2**20))


@st.composite
def _runs(draw: st.DrawFn) -> list[Run]:
    """Sorted runs whose records together fall on either side of the array merge's threshold."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        indexes = sorted(draw(st.lists(INDEXES, min_size=1, max_size=200)))
        run = compact_run(indexes) if draw(st.booleans()) else Run(b"".join(pack(i) for i in indexes))
        out.append(Run(run.data, run.width, run.base_ts, run.base_ledger, draw(st.integers(0, len(run)))))
    return out


def _flip(module: str, function: str) -> Mutant:
    (mutant,) = [m for m in _listed() if (m.module, m.function) == (module, function)]
    return mutant


@given(_runs())
def test_the_merge_threshold_flip_merges_the_same_records(parts: list[Run]) -> None:
    expected = merge_runs(parts)
    with applied(_flip("reference.delayed_runs", "merge_runs")):
        flipped = merge_runs(parts)
    assert (flipped.data, flipped.width, flipped.offset) == (expected.data, expected.width, expected.offset)


@pytest.mark.parametrize("function", ["_Popping.drop", "_get_scheduled"])
def test_the_mid_pop_refresh_flips_make_the_states_one_pop_at_a_time_makes(function: str) -> None:
    # the gathered pops against one pop at a time, storage faults and memory-mode buckets included
    with applied(_flip("reference.delayed_bucket", function)):
        test_batched_pops.test_gathered_pops_make_the_state_one_pop_at_a_time_makes()
        test_batched_pops.test_gathered_pops_agree_on_long_runs()
