"""The workload variants and fault mixes that make the main job reach more (docs/engine/simulation.md)."""

from __future__ import annotations

import pytest

from devtools.mutation import Mutant
from engine.simulation.workloads import FAULT_MIXES, MIX_CYCLE, RunSpec, fault_mix, main_job_spec, run
from engine.storage.bufferedwriter_metrics import PREFIXES, BufferedWriterMetrics
from reference.batched_log import FlushObserved, FlushTrigger, LogKind


def test_the_main_job_cycles_through_every_fault_mix() -> None:
    assert {fault_mix("mixed", seed) for seed in range(1, 11)} == set(MIX_CYCLE) == set(FAULT_MIXES)
    assert fault_mix("late-append", 3) == "late-append"
    specs = [main_job_spec("ctp", seed) for seed in range(1, 43)]
    for flag in ("batching", "batch_messages", "key_shared", "unsubscribe", "cumulative", "redeliver"):
        assert 0 < sum(getattr(s, flag) for s in specs) < len(specs), flag


def test_quiesce_unloads_every_partition_before_the_readers_start() -> None:
    result = run(RunSpec(workload="multi", seed=4, ops=10, faults=True, fault_rates=dict(FAULT_MIXES["quiesce"])))
    unloads = [f for f in result.faults if f.kind == "topic-unload-at-heal"]
    heal = next(f for f in result.faults if f.kind == "heal")
    assert len(unloads) == 2 and all(f.time_ms > heal.time_ms for f in unloads)
    reads = [op for op in result.operations if op.f in ("subscribe", "receive") and "#read" in op.object]
    assert reads and min(op.invoked_at for op in reads) > max(f.time_ms for f in unloads)


def test_unsubscribing_readers_remove_their_subscription() -> None:
    result = run(RunSpec(workload="multi", seed=1, ops=5, unsubscribe=True))
    gone = [op for op in result.operations if op.f == "unsubscribe"]
    assert len(gone) == 2 and all(op.type.value == "ok" for op in gone)


def test_redelivering_processors_receive_again_inside_their_txn() -> None:
    result = run(RunSpec(workload="ctp", seed=2, ops=10, redeliver=True, cumulative=True))
    fs = [op.f for op in result.operations]
    assert "redeliver_unacknowledged" in fs and "ack_cumulative" in fs


def test_the_limits_variant_flushes_the_coordinators_log_by_size_and_writes_long_records_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # BW-12 .. BW-16: with the limits variant's thresholds the coordinator's log flushes a batch by its
    # count, by its bytes, and ahead of a record too long to batch.  At Pulsar's defaults no main-job
    # batch ever meets a size limit.
    seen: list[tuple[str, FlushTrigger]] = []
    observe = BufferedWriterMetrics.observe

    def counting(self: BufferedWriterMetrics, flush: FlushObserved) -> None:
        seen.append((self.prefix, flush.trigger))
        observe(self, flush)

    monkeypatch.setattr(BufferedWriterMetrics, "observe", counting)
    for workload, seed in (("ctp", 13), ("multi", 1)):
        spec = main_job_spec(workload, seed)
        assert spec.limits and spec.batching
        run(spec)
    tc = PREFIXES[LogKind.TRANSACTION_LOG]
    assert {(tc, FlushTrigger.MAX_SIZE), (tc, FlushTrigger.LARGE_DATA), (tc, FlushTrigger.MAX_RECORDS)} <= set(seen)


def test_a_position_acked_again_in_a_transaction_is_refused_and_a_flip_that_accepts_it_is_flagged() -> None:
    """The acks variant (ctp seed 3 of the main job: batch messages on) acknowledges inputs again in a
    transaction of their own once their position, or their batch index, is deleted on the cursor: a
    committed processor's input, and a reader's message it acked plainly.  The pending ack refuses
    each (PA-3: TransactionConflict), and the history shows it.  A pending ack that lets either
    through (the branch-flips of ``if replay`` in ``_individual_checked``: a deleted position, and a
    deleted batch index, skipped as in a replay) is flagged by the per-object check."""
    from devtools.mutation import flip_mutants
    from invariants.verify import VerifyOptions, check_histories

    spec = main_job_spec("ctp", 3)
    assert spec.acks and spec.batch_messages
    clean = run(spec).operations
    refused = [
        op
        for op in clean
        if op.f == "ack" and '"txn"' in op.value and op.error == "TransactionConflict" and '"batch_index"' in op.value
    ]
    assert refused
    assert {r.verdict for r in check_histories({"clean": clean}, "f", VerifyOptions())} == {"ok"}
    flips = [m for m in flip_mutants("pending_ack") if m.function == "_individual_checked" and m.before == "if replay"]
    assert len(flips) == 2
    for flip in flips:
        _assert_flagged_on_a_subscription(spec, flip)


def _assert_flagged_on_a_subscription(spec: RunSpec, flip: Mutant) -> None:
    """The run of ``spec`` with ``flip`` applied is flagged by the per-object check of a subscription."""
    from devtools.mutation import applied
    from invariants.verify import VerifyOptions, check_histories

    with applied(flip):
        ops = run(spec).operations
    rows = {r.checker: r for r in check_histories({"flipped": ops}, "f", VerifyOptions())}
    assert rows["linearizability"].verdict == "illegal", flip.id
    failing = rows["linearizability"].failing_object
    assert failing is not None and failing.startswith("subscription:"), (flip.id, failing)


def _flagged_on_a_subscription(spec: RunSpec, function: str, before: str) -> None:
    """The unmutated run of ``spec`` passes every check, and the branch-flip of ``before`` in the
    pending ack's ``function`` is flagged there by the per-object check of a subscription."""
    from devtools.mutation import flip_mutants
    from invariants.verify import VerifyOptions, check_histories

    (flip,) = [m for m in flip_mutants("pending_ack") if (m.function, m.before) == (function, before)]
    clean = run(spec).operations
    assert {r.verdict for r in check_histories({"clean": clean}, "f", VerifyOptions())} == {"ok"}
    _assert_flagged_on_a_subscription(spec, flip)


def test_a_transaction_that_acks_around_a_gap_keeps_the_later_message_deleted_above_it() -> None:
    """The acks variant (multi seed 3 of the main job) has a reader's transaction ack a message and
    the one after the next, leaving the one between for a plain ack.  Its commit moves the
    mark-delete position to the first and leaves the other deleted above the gap (PA-3, PA-12).
    A pending ack whose view of the cursor drops what lies above the new mark-delete position
    instead (the flip of ``_cursor_delete_distinct``'s keep test) is flagged."""
    spec = main_job_spec("multi", 3)
    assert spec.acks
    _flagged_on_a_subscription(spec, "_cursor_delete_distinct", "if p.ledger_id != ledger or p.entry_id > entry")


@pytest.mark.parametrize(
    ("workload", "seed", "before"),
    [
        # a plain cumulative ack, then the same message cumulatively in a transaction
        ("ctp", 3, "if acked.position <= state.cursor.mark_delete_position"),
        # another transaction's cumulative ack while the holder's slot stands (here a processor's,
        # ``cumulative`` on)
        ("ctp", 22, "if slot.txn_id != txn"),
        # a transaction's cumulative ack again, not above its own
        ("ctp", 3, "if _cum_key(acked.position, acked.batch_size, acked.acked) <= _cum_key(slot.posi..."),
    ],
)
def test_a_refused_transactional_cumulative_ack_is_judged(workload: str, seed: int, before: str) -> None:
    """The transactional cumulative acks that PA-9 refuses (TransactionConflict), from the acks
    variant and the processors: a pending ack that takes any of them is flagged at its step."""
    spec = main_job_spec(workload, seed)
    assert spec.acks or spec.cumulative
    _flagged_on_a_subscription(spec, "_cumulative_conflict", before)
