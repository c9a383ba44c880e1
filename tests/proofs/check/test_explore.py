"""The composed model checker: verdicts, shortest traces, lassos, reductions, the named quirk."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from proofs.check.explore import Options, Result, explore
from proofs.check.model import Model
from proofs.check.models import DEFAULT_MODELS, build
from proofs.check.trace import replay
from tests.known_bugs.catalogue import MUTANTS, applied

_BY_NAME = {m.name: m for m in MUTANTS}


def _run(name: str, bounds: dict[str, int] | None = None, *, quirks: tuple[str, ...] = (), **options: Any) -> Result:
    model = Model(build(name, bounds, quirks=quirks))
    return explore(model, Options(**options))


@pytest.mark.parametrize("name", DEFAULT_MODELS)
def test_unmodified_reference_passes_every_default_model(name: str) -> None:
    result = _run(name)
    assert result.ok, [(v.kind, v.name) for v in result.violations]
    assert result.complete and result.liveness_checked
    assert result.states > 100 and result.transitions >= result.states - 1


def _shortest_violation_depth(model: Model, name: str) -> int:
    """An independent breadth-first search over the model's plain successors (no memo of footprints
    reused, no reductions, no shortcuts): the depth of the first state that breaks ``name``."""
    init = model.initial()
    seen = {init}
    queue = deque([(init, 0)])
    while queue:
        state, depth = queue.popleft()
        if name in model.violations(state):
            return depth
        for succ in model.successors(state):
            if name in succ.broken:
                return depth + 1
            if succ.state not in seen:
                seen.add(succ.state)
                queue.append((succ.state, depth + 1))
    raise AssertionError(f"{name} is never violated")


def test_safety_violation_found_with_a_shortest_trace() -> None:
    mutant = _BY_NAME["dispatch-no-skip-aborted"]
    with applied(mutant):
        result = _run("produce")
        assert result.verdict == "violated"
        violation = next(v for v in result.violations if v.name == "read-committed")
        assert violation.kind == "safety"
        fresh = Model(build("produce"))
        assert violation.length == _shortest_violation_depth(fresh, "read-committed")
        # The trace replays from its labels and ends in a state that breaks the property.
        again = replay(fresh, [step.label for step in violation.trace[1:]])
        assert again[-1].state == violation.trace[-1].state
        assert "read-committed" in fresh.violations(again[-1].state)
        assert all("read-committed" not in fresh.violations(step.state) for step in again[:-1])
    # Without the mutant the same model passes.
    assert _run("produce").ok


def test_liveness_violation_found_as_a_lasso() -> None:
    """An end that never leaves the ongoing set: with the whole graph explored, the end of the
    transaction never reaches the partition (ends-everywhere), a fair cycle or a dead end."""
    mutant = _BY_NAME["end-not-removing-ongoing"]
    with applied(mutant):
        model = Model(build("produce"))
        result = explore(model, Options(stop_at_first=False))
    lasso = next(v for v in result.violations if v.name == "ends-everywhere")
    assert lasso.kind == "liveness"
    assert lasso.cycle_start is not None and 0 <= lasso.cycle_start < len(lasso.trace)
    with applied(mutant):
        again = replay(Model(build("produce")), [step.label for step in lasso.trace[1:]])
        # The goal fails in every state of the cycle.
        from invariants.composed import LIVENESS

        prop = next(p for p in LIVENESS if p.name == "ends-everywhere")
        assert all(not model.goals(step.state, (prop,))[0] for step in again[lasso.cycle_start :])


def test_timeouts_that_never_fire_leave_a_transaction_open_forever() -> None:
    with applied(_BY_NAME["timeouts-never-fire"]):
        result = _run("pending-ack")
    assert [(v.kind, v.name) for v in result.violations] == [("liveness", "txns-end")]


_SYMMETRIC = {
    "clients": 2,
    "partitions": 2,
    "spread": 1,
    "readers": 0,
    "loss": 0,
    "duplicate": 0,
    "timeouts": 0,
    "aborts": 1,
}


@pytest.mark.parametrize("mutant", [None, "dispatch-no-skip-aborted"])
def test_reductions_change_state_counts_but_no_verdict(mutant: str | None) -> None:
    runs = {}
    for symmetry in (False, True):
        for por in (False, True):
            if mutant is None:
                result = _run("produce", _SYMMETRIC, symmetry=symmetry, por=por, liveness=False)
            else:
                with applied(_BY_NAME[mutant]):
                    result = _run("produce", _SYMMETRIC, symmetry=symmetry, por=por, liveness=False)
            runs[symmetry, por] = result
    verdicts = {key: (r.verdict, tuple(sorted(v.name for v in r.violations))) for key, r in runs.items()}
    assert len(set(verdicts.values())) == 1, verdicts
    if mutant is None:
        full = runs[False, False].states
        assert runs[True, False].states < full
        assert runs[False, True].states < full
        assert runs[True, True].states < min(runs[True, False].states, runs[False, True].states)
        # The liveness run (no reductions) explores the same graph as the unreduced safety run.
        assert _run("produce", _SYMMETRIC).states == full
    else:
        assert "read-committed" in verdicts[False, False][1]
        # Symmetry keeps shortest traces shortest (it merges states, never paths' lengths); the
        # partial-order reduction may lengthen them, never shorten them.
        lengths = {key: {v.name: v.length for v in r.violations} for key, r in runs.items()}
        assert lengths[True, False] == lengths[False, False]
        assert all(lengths[True, True][n] >= k for n, k in lengths[False, False].items())


@pytest.mark.slow
def test_quirk_append_after_abort_is_found_and_absent_without_it() -> None:
    """The G1a of the simulation: a send of a timed-out transaction reaches the partition after its
    abort marker; with Pulsar's behaviour (the quirk) it is stored, and once retention dropped the
    marker's ledger and a later end trimmed the aborted set, a reader may receive it."""
    bounds = {
        "clients": 1,
        "partitions": 1,
        "spread": 1,
        "readers": 1,
        "txns": 2,
        "timeouts": 1,
        "rollover": 1,
        "retention": 1,
        "loss": 0,
        "duplicate": 0,
    }
    quirky = _run("produce", bounds, quirks=("append-after-abort",), liveness=False)
    assert [v.name for v in quirky.violations] == ["read-committed"]
    labels = [step.label[0] for step in quirky.violations[0].trace]
    assert "retention" in labels and "roll-over" in labels
    intended = _run("produce", bounds, liveness=False)
    assert intended.ok, [(v.kind, v.name) for v in intended.violations]


def test_quirk_abort_hides_committed_is_found_and_absent_without_it() -> None:
    """A late copy of a send re-opens a committed transaction on its partition (TB-8); the next end's
    low water mark aborts it (TB-13). With Pulsar's isTxnAborted (the quirk) the committed message is
    filtered from then on: committed-visible fails. Without it only the late copy is (TB-16)."""
    bounds = {"partitions": 1, "spread": 1, "txns": 2, "duplicate_sends": 1}
    quirky = _run("produce", bounds, quirks=("abort-hides-committed",))
    assert ("liveness", "committed-visible") in {(v.kind, v.name) for v in quirky.violations}
    labels = [step.label[0] for step in quirky.violations[0].trace]
    assert "duplicate" in labels
    intended = _run("produce", bounds)
    assert intended.ok, [(v.kind, v.name) for v in intended.violations]
