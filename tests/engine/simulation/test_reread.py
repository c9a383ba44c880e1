"""The ``reread`` variant (docs/engine/simulation.md): the processors read their input subscriptions
again after a recovery whose pending-ack log was trimmed, so a cursor that missed a committed
transaction's acks becomes a redelivery the checkers see."""

from __future__ import annotations

import dataclasses

from devtools.mutation import Mutant, applied, enumerate_mutants
from engine.simulation.runspec import REREAD_INDEX_LAG
from engine.simulation.workloads import RunSpec, file_stem, main_job_spec, run
from invariants.client_visible import check_client_visible
from invariants.transactional import check_transactional


def _reread(seed: int) -> RunSpec:
    return dataclasses.replace(main_job_spec("ctp", seed, 30), reread=True)


def test_reread_recovers_every_input_and_its_processors_read_it_again() -> None:
    spec = _reread(2)
    assert spec.broker_config().transaction_pending_ack_log_index_min_lag == REREAD_INDEX_LAG
    assert file_stem(spec) == "ctp-reread" and file_stem(main_job_spec("ctp", 1, 30)) == "ctp"
    # the main job: seeds = 2 mod 3, two of the mutation report's first five seeds
    assert [main_job_spec("ctp", seed).rereads for seed in range(1, 7)] == [False, True, False, False, True, False]
    result = run(spec)
    assert result.metadata()["reread"] is True
    assert result.metadata()["config"]["transactionPendingAckLogIndexMinLag"] == REREAD_INDEX_LAG
    heal = next(f.time_ms for f in result.faults if f.kind == "heal")
    unloads = [f for f in result.faults if f.kind == "topic-unload-for-reread"]
    assert sorted(f.target for f in unloads) == [
        f"persistent://public/default/in-partition-{p}" for p in range(spec.clients)
    ]
    assert all(f.time_ms >= heal for f in unloads)
    receives = [op for op in result.operations if op.f == "receive" and "/in-partition-" in op.object]
    before = {op.process for op in receives if op.invoked_at < heal}
    again = [op for op in receives if op.invoked_at > max(f.time_ms for f in unloads)]
    # the processors themselves read again, so their subscriptions stay judged for liveness
    assert again and {op.process for op in again} <= before
    assert any(op.type.value == "ok" and op.result is not None for op in again)  # inputs no one took
    assert check_client_visible(result.operations).ok
    assert check_transactional(result.operations).ok


def test_the_variant_applies_to_the_ctp_workload_only() -> None:
    multi = RunSpec(workload="multi", reread=True)
    assert not multi.rereads and multi.broker_config() == multi.config and file_stem(multi) == "multi"
    assert run(dataclasses.replace(multi, ops=5)).metadata()["reread"] is False


def _commit_without_cursor_ack() -> Mutant:
    """The automatic mutant of ``_commit_individual`` whose commit no longer tells the cursor to
    delete what the transaction acked (pending_ack:394 of the mutation report at power3's sources)."""
    (mutant,) = [
        m
        for m in enumerate_mutants("pending_ack")
        if m.function == "_commit_individual" and m.operator == "branch" and "CursorIndividualAck" in m.before
    ]
    return mutant


def test_a_commit_that_leaves_the_cursor_alone_is_redelivered_after_the_reread() -> None:
    flagged = []
    for seed in (2, 3, 4):
        with applied(_commit_without_cursor_ack()):
            ops = run(_reread(seed)).operations
        result = check_client_visible(ops)
        flagged += [v for v in result.violations if v.name == "redelivered-after-ack"]
        if flagged:
            break
    assert flagged and "PA-12" in flagged[0].rules
