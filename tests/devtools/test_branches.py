"""The branch-flip layer's lists (devtools/branches.py): the equivalent flips (``FLIP_EQUIVALENT``)
and the ones no main-job history shows (``FLIP_UNJUDGED``).

A flip is listed equivalent only when its two arms compute the same thing, so each entry must name
a flip that exists, and the flipped code must agree with the unflipped code where it is called: on
the machine's conformance vectors, and directly where the arms are two ways of computing one value.
A flip listed as unjudged is not equivalent, and the test it names must fail with it applied."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devtools.branches import FLIP_EQUIVALENT, FLIP_UNJUDGED, flip_reason, unjudged
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


def _unjudged() -> list[Mutant]:
    """The flip mutants ``FLIP_UNJUDGED`` names."""
    return [m for machine in MACHINES for m in flip_mutants(machine) if unjudged(m) is not None]


def test_every_unjudged_entry_names_one_flip_that_is_not_listed_equivalent() -> None:
    listed = _unjudged()
    assert len(listed) == len(FLIP_UNJUDGED)  # one flip per entry: an occurrence picks one of a text
    for m in listed:
        assert flip_reason(m.module, m.function, m.before) is None, m.id


@pytest.mark.parametrize("mutant", _unjudged(), ids=lambda m: m.id)
def test_an_unjudged_flip_fails_the_test_it_names(mutant: Mutant, tmp_path: Path) -> None:
    # in a fresh interpreter, as benchmarks/mutation_report.py runs a machine's tests with a mutant:
    # the mutant is applied before the test module is imported
    entry = unjudged(mutant)
    assert entry is not None
    env = {**os.environ, "TXNMODEL_MUTANT": mutant.id, "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path)}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:xdist", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, "-p", "devtools.mutation_pytest", entry.killer],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout[-2000:]
    assert "FAILED" in done.stdout
