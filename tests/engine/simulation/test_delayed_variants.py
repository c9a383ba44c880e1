"""The delayed workload's ``delayed_async`` and ``bucket_faults`` variants (issue 32: branch reach of
the bucket tracker): where the main job spreads them, what they make the tracker do, that the
unmodified reference passes every check with them, and that verify flags a tracker broken on each
new path (a planted bug, on the main job's own history of that seed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import reference.delayed_bucket as db
import reference.delayed_common as dc
from engine.simulation.options import main_job_spec
from engine.simulation.workloads import run
from invariants.verify import VerifyOptions, check_histories
from reference.persistent import evolve
from spec.errors import BucketSnapshotPersistence
from spec.result import Ok


def _verdicts(seed: int) -> Counter[str]:
    result = run(main_job_spec("delayed", seed))
    return Counter(
        f"{r.checker}:{r.verdict}"
        for r in check_histories({f"delayed-seed{seed}": result.operations}, "t", VerifyOptions(counterexamples=False))
        if r.verdict != "ok"
    )


def test_the_main_job_spreads_both_variants_over_its_bucket_tracker_seeds() -> None:
    specs = [main_job_spec("delayed", seed) for seed in range(1, 33)]
    bucket = [s for s in specs if s.delayed_tracker == "bucket"]
    combos = Counter((s.async_creates, s.bucket_storage_faults) for s in bucket)
    assert combos == {(False, False): 4, (False, True): 4, (True, False): 4, (True, True): 4}
    # the in-memory tracker's runs with a tracker of their own ask hasMessageAvailable too
    assert any(s.async_creates and s.delayed_tracker == "memory" for s in specs)
    assert not any(s.bucket_storage_faults and s.delayed_tracker == "memory" for s in specs)
    # the other workloads are untouched
    assert not any(main_job_spec(w, seed).async_creates for w in ("ctp", "multi") for seed in range(1, 17))
    assert main_job_spec("delayed", 7).to_json()["delayed_async"] is True


def test_bucket_faults_fail_the_snapshot_storage_and_the_history_passes_every_check() -> None:
    result = run(main_job_spec("delayed", 23))
    kinds = {f.kind.rsplit("-", 1)[0] for f in result.faults if f.kind.startswith("bucket-")}
    assert {"bucket-create-fails", "bucket-load-fails", "bucket-delete-fails"} <= kinds
    assert not result.failures
    for seed in (3, 23, 35, 47):
        assert _verdicts(seed) == Counter(), seed


# Each planted bug breaks one of the new paths; the seed is a main-job seed that takes it.


def _forget_segments_of_failed_creation(original: Callable[..., Any]) -> Callable[..., Any]:
    """DD-31/DD-14 broken: a creation that failed forgets the bucket's segments still in memory."""

    def planted(state: db.BucketTracker, cmd: dc.CompleteBucketSnapshot) -> Any:
        pending = state.pending_creates.get(cmd.request_id)
        if not cmd.succeeded and pending is not None:
            forgotten = evolve(pending, segments=pending.segments[:1])
            state = evolve(state, pending_creates=state.pending_creates.set(cmd.request_id, forgotten))
        return original(state, cmd)

    return planted


def _memory_mode_keeps_one_segment(original: Callable[..., Any]) -> Callable[..., Any]:
    """DD-14 broken: a bucket whose snapshot could not be created queues only its first segment."""

    def planted(state: db.BucketTracker, start: int, end: int, indexes: Any) -> Any:
        before = state.shared
        after, bucket, effects = original(state, start, end, indexes)
        if bucket.bucket_id == -1 and not bucket.pending_create:
            added = [run for run in after.shared if run not in before]
            kept = min(added, key=lambda run: run.head())
            after = evolve(after, shared=tuple(r for r in after.shared if r in before or r is kept))
        return after, bucket, effects

    return planted


def _failed_load_skips_the_segment(original: Callable[..., Any]) -> Callable[..., Any]:
    """DD-16 broken: a segment load that failed reads as "no further segment", so the bucket ends."""

    def planted(state: db.BucketTracker, bucket_id: int, entry: int, *, counted: bool = True) -> Any:
        state, run = original(state, bucket_id, entry, counted=counted)
        return state, None if isinstance(run, BucketSnapshotPersistence) else run

    return planted


def _never_available(original: Callable[..., Any]) -> Callable[..., Any]:
    """DD-13 broken: hasMessageAvailable answers the opposite, so the dispatcher never asks for what is due."""

    def planted(state: Any, cmd: dc.HasMessageAvailable, next_delivery_time: Any) -> Any:
        state, result = original(state, cmd, next_delivery_time)
        return state, Ok(not result.value, result.effects)

    return planted


@pytest.mark.parametrize(
    ("name", "plant", "seed"),
    [
        ("_complete_create", _forget_segments_of_failed_creation, 47),
        ("_build_bucket", _memory_mode_keeps_one_segment, 67),
        ("_load_segment", _failed_load_skips_the_segment, 67),  # a failed load on a later segment
        ("has_message_available", _never_available, 22),
    ],
)
def test_verify_flags_a_tracker_broken_on_each_new_path(
    monkeypatch: pytest.MonkeyPatch, name: str, plant: Callable[..., Any], seed: int
) -> None:
    assert _verdicts(seed) == Counter()
    monkeypatch.setattr(db, name, plant(getattr(db, name)))
    assert _verdicts(seed), f"a planted bug in {name} went unnoticed at seed {seed}"
