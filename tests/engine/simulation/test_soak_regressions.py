"""Seeds the soak (``benchmarks/soak.py``) found non-ok on the unmodified reference, each fixed at
its root: the same run now passes every check ``txnmodel verify`` runs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.simulation.options import FAULT_MIXES
from engine.simulation.runspec import RunSpec
from engine.simulation.workloads import run
from invariants.verify import VerifyOptions, check_histories


def _redeliver_across_a_restart() -> RunSpec:
    """ctp with ``redeliver`` and faults, seed 10: a processor's transactional ack, sent before a
    broker crash, lands after the restart, once the reconnected consumer had its message queued
    again; the processor's ``redeliverUnacknowledgedMessages`` must empty its queue (as Pulsar's
    client clears its receiver queue), so the copy the open transaction holds does not come back
    (held-back-delivery, PA-1)."""
    return RunSpec(workload="ctp", seed=10, faults=True, redeliver=True)


def _restart_left_open() -> RunSpec:
    """delayed with faults, 40 transactions, the variants off, seed 16: the tracker's first epoch
    holds a restart, an add and a read the engine stepped right after the recovery whose answers
    never came (``info``), and 22 adds at one instant.  The search tried the open restart where it
    was stuck, cleared the tracker with it, and went through the 2^22 orders of the adds before it
    gave up (``unknown`` at 2,000,000 steps); the engine's own step order (index order) is now
    replayed first and is the linearization."""
    return RunSpec(workload="delayed", seed=16, ops=40, faults=True)


def _add_partition_after_the_timeout() -> RunSpec:
    """multi with every issue-32 variant and the late-append fault mix, seed 17: a send invoked while
    its txn (326 ms timeout) was open waited for ADD_PARTITION_TO_TXN until the coordinator reached it
    at 402 ms, after it had timed the txn out, and was refused with InvalidTxnStatus.  Rightly: TC-38's
    refused-while-open judges a refusal by when it came back, not when the send was invoked."""
    return RunSpec(
        workload="multi",
        seed=17,
        ops=80,
        faults=True,
        batching=True,
        batch_messages=True,
        key_shared=True,
        unsubscribe=True,
        readers=True,
        bounds=True,
        limits=True,
        acks=True,
        pipelined=True,
        fault_rates=dict(FAULT_MIXES["late-append"]),
    )


def _reader_behind_retention() -> RunSpec:
    """multi with readers, redeliver, Key_Shared and pipelined clients, quiesce mix, seed 219: a Reader
    (a non-durable cursor, which holds no ledger back) had entries queued when retention deleted their
    ledger; the dispatcher looked each up again when it was received and raised KeyError, a step
    the pending-ack model rejects (linearizability: illegal).  An entry is now the consumer's once
    read (the Handout carries it), and a replayed entry whose ledger is gone is skipped."""
    return RunSpec(
        workload="multi",
        seed=219,
        ops=60,
        faults=True,
        batching=False,
        batch_messages=True,
        key_shared=True,
        redeliver=True,
        readers=True,
        bounds=True,
        pipelined=True,
        fault_rates=dict(FAULT_MIXES["quiesce"]),
    )


def _journal_failed_at_the_first_load() -> RunSpec:
    """ctp on a file ledger on the simulated disk, late-append mix, seed 7: the disk failed a
    ``sync_dir`` while the broker's first loads created a partition's managed ledger, which failed
    the store's journal for good before the cluster listened for that; nobody crashed the broker,
    every component retried the failed store every 50 ms to the run's deadline and nothing
    committed.  The failure is now told once the cluster listens: the broker crashes and restarts
    from the durable journal, as a bookie restarts after a journal fsync error."""
    return RunSpec(
        workload="ctp",
        seed=7,
        ops=60,
        ledger="file",
        disk="sim",
        faults=True,
        batch_messages=True,
        redeliver=True,
        readers=True,
        reread=True,
        limits=True,
        acks=True,
        fault_rates=dict(FAULT_MIXES["late-append"]),
    )


def _ack_whose_cursor_write_failed() -> RunSpec:
    """multi on a file ledger on the simulated disk, coordinator mix, seed 13: a normal ack's
    cursor write failed (an injected EIO in a store that commits every change), the subscription
    reloaded its topic, and the ack was still answered OK, so the message came back (redelivered-
    after-ack, PA-18/PA-19).  A step is now answered only once its cursor changes are written."""
    return RunSpec(
        workload="multi",
        seed=13,
        ops=60,
        ledger="file",
        disk="sim",
        faults=True,
        batch_messages=True,
        unsubscribe=True,
        queries=True,
        readers=True,
        bounds=True,
        limits=True,
        fault_rates=dict(FAULT_MIXES["coordinator"]),
    )


def _roll_over_that_failed() -> RunSpec:
    """multi on a file ledger on the simulated disk, late-append mix, seed 267: a partition's ledger
    filled (``limits``: 64 entries) and its roll-over failed (an injected EIO creating the next
    ledger's file), so the full ledger stayed current; the buffer placed the next entry at 1:64
    while the managed ledger rolled first and wrote it at 2:0.  The partition now finishes the
    roll-over before the buffer places anything, and reloads rather than write elsewhere."""
    return RunSpec(
        workload="multi",
        seed=267,
        ops=60,
        ledger="file",
        disk="sim",
        faults=True,
        batching=True,
        key_shared=True,
        redeliver=True,
        queries=True,
        readers=True,
        limits=True,
        pipelined=True,
        delayed_async=True,
        fault_rates=dict(FAULT_MIXES["late-append"]),
    )


def _trim_before_the_commit_cursor_write() -> RunSpec:
    """ctp on a file ledger on the simulated disk, seed 275: a commit's pending-ack log was trimmed
    once its commit record was logged, before the commit's cursor write, which then failed; the
    reload found neither the acks' records nor the cursor change, and the acked message came back
    (duplicate-after-commit, redelivered-after-ack).  A trim now waits for the step's cursor writes."""
    return RunSpec(
        workload="ctp",
        seed=275,
        ops=80,
        ledger="file",
        disk="sim",
        faults=True,
        batching=True,
        key_shared=True,
        cumulative=True,
        redeliver=True,
        readers=True,
        reread=True,
        limits=True,
        acks=True,
        delayed_async=True,
        fault_rates={},
    )


def _open_that_failed_kept_its_lock() -> RunSpec:
    """ctp on a file ledger on the simulated disk, coordinator mix, seed 553: a coordinator reload
    reopened its log, whose new ledger's journal sync failed once; the store went on, but the
    handle the open gave up on kept the log directory's lock, so every later reload failed as
    locked.  Txn (0,36) committed 'in-19>w0.8' behind txn (0,32), left COMMITTING when the
    coordinator crashed with its marker not yet written on the partition, which was never
    finished: the message was never readable (lost-message).  A failed open now lets go of the
    ledger as a crashed handle would."""
    return RunSpec(
        workload="ctp",
        seed=553,
        ops=80,
        ledger="file",
        disk="sim",
        faults=True,
        batching=True,
        batch_messages=True,
        cumulative=True,
        redeliver=True,
        queries=True,
        readers=True,
        reread=True,
        limits=True,
        acks=True,
        pipelined=True,
        fault_rates=dict(FAULT_MIXES["coordinator"]),
    )


def _abort_redelivery_taken_over_cumulatively() -> RunSpec:
    """ctp on a file ledger on the simulated disk, late-append mix, seed 617: txn (0,6) acked
    'in-22' (0:1#1) individually and was aborted; the broker queued 0:1 again behind the consumer's
    backlog, and before it came the client acked 0:1#2 cumulatively in txn (0,7), which covers
    'in-22', then emptied its queue (redeliverUnacknowledgedMessages).  'in-22' was pending in
    (0,7) from then on, and (0,7)'s abort cleared its slot without a redelivery (PA-13); when the
    client asked again, a later txn's cumulative ack that landed after its own abort held it.  The
    checker owed the first abort's redelivery still (a false alarm): another txn's cumulative ack
    that takes the message over now ends what the abort owes."""
    return RunSpec(
        workload="ctp",
        seed=617,
        ops=60,
        ledger="file",
        disk="sim",
        faults=True,
        batching=True,
        batch_messages=True,
        unsubscribe=True,
        cumulative=True,
        redeliver=True,
        reread=True,
        bounds=True,
        acks=True,
        bucket_faults=True,
        fault_rates=dict(FAULT_MIXES["late-append"]),
    )


def _roll_owed_asked_of_a_failed_journal() -> RunSpec:
    """multi on a file ledger on the simulated disk, seed 381 (the soak at stop 36): a directory sync
    failed (injected EIO) and failed the store's journal; the next append on another partition asked
    its ledger whether a roll-over was owed, and the question raised LedgerWriteFailed out of the
    partition's step (a component raised; the buffer's history then read as illegal).  The question
    no longer raises: the append that follows reports the failure where failed writes are handled."""
    return RunSpec(
        workload="multi",
        seed=381,
        ops=80,
        ledger="file",
        disk="sim",
        faults=True,
        batching=True,
        batch_messages=True,
        key_shared=True,
        queries=True,
        bounds=True,
        limits=True,
        pipelined=True,
        deadline_ms=3_600_000,
    )


def _abort_redelivery_taken_by_a_late_individual_ack() -> RunSpec:
    """ctp on a file ledger on the simulated disk, late-append mix, seed 37 (the soak at stop 43): txn
    (0,36) acked 'in-21' (0:2#0) individually and was aborted; the processor then acked the same
    input again in a txn of its own (0,39: the acks variant), whose ack reached the subscription after
    that txn's own timeout abort had, so the pending ack held 'in-21' for (0,39) until the low
    watermark passes it (PA-14), which it never did, and the first abort's redelivery skipped it.
    Both checks still owed the first abort's redelivery (a false alarm): another txn's individual
    ack that takes the message after the abort now ends what the abort owes, as a cumulative one
    did (seed 617)."""
    return RunSpec(
        workload="ctp",
        seed=37,
        ops=80,
        ledger="file",
        disk="sim",
        faults=True,
        batch_messages=True,
        key_shared=True,
        unsubscribe=True,
        queries=True,
        bounds=True,
        acks=True,
        limits=True,
        fault_rates=dict(FAULT_MIXES["late-append"]),
    )


def _abort_redelivery_held_by_a_pending_cumulative_ack() -> RunSpec:
    """multi on a file ledger on the simulated disk, late-append mix, seed 617 (the soak at stop 44):
    a reader's slow txn (0,59) acked 'w2.11.p1' (0:62#0) individually; before it aborted, txn (0,72)
    acked 1:1 cumulatively, which covers 0:62, and timed out.  The slow txn's abort gave 0:62 back
    while (0,72)'s slot was still pending, so the dispatcher held it for (0,72) (PA-1), and (0,72)'s
    abort cleared the slot without a redelivery (PA-13).  ``missing-redelivery`` owed the first abort's
    redelivery still (a false alarm): another txn's cumulative ack covering the message, invoked
    before the abort completed, now ends what the abort owes."""
    return RunSpec(
        workload="multi",
        seed=617,
        ops=60,
        ledger="file",
        disk="sim",
        faults=True,
        batching=True,
        batch_messages=True,
        unsubscribe=True,
        cumulative=True,
        redeliver=True,
        bounds=True,
        acks=True,
        deadline_ms=3_600_000,
        fault_rates=dict(FAULT_MIXES["late-append"]),
    )


def _txn_ack_across_a_subscription_reload() -> RunSpec:
    """ctp, seed 430 (the soak at stop 44): a reader's slow txn (0,109) acked 'in-50>w2.11' (32:2)
    while the subscription reloaded (a pending-ack ``recover`` row inside the ack's window); the
    reload handed 32:2 out again, and that copy reached the consumer's receiver queue before the ack
    took effect, so a later receive returned it while (0,109) was open.  ``held-back-delivery``
    flagged it (a false alarm): an ack during which its subscription reloaded is no longer judged."""
    return RunSpec(
        workload="ctp",
        seed=430,
        ops=80,
        faults=True,
        batching=True,
        unsubscribe=True,
        redeliver=True,
        reread=True,
        bounds=True,
        acks=True,
        limits=True,
        deadline_ms=3_600_000,
    )


def _txn_ack_after_a_reload_that_queued_a_copy() -> RunSpec:
    """ctp, seed 883 (the soak at stop 45), coordinator mix: a reader received 'in-32>w0.5' (0:32),
    then stayed in other work for 30 s; meanwhile the subscription reloaded and handed 0:32 out again,
    into the consumer's receiver queue.  The reader's slow txn (0,55) then acked its first copy, and
    a later receive returned the queued one while (0,55) was open.  ``held-back-delivery`` judged only
    a reload inside the ack's own window (seed 430), and flagged it: a false alarm.  A message the
    subscription may have handed out again since the delivery the ack answers is not judged."""
    return RunSpec(
        workload="ctp",
        seed=883,
        ops=60,
        ledger="file",
        disk="sim",
        faults=True,
        fault_rates=dict(FAULT_MIXES["coordinator"]),
        batch_messages=True,
        redeliver=True,
        reread=True,
        bounds=True,
        limits=True,
        acks=True,
        bucket_faults=True,
    )


def _txn_ack_after_an_abort_that_queued_a_copy() -> RunSpec:
    """ctp, seed 283 (the soak at stop 45), coordinator mix: a reader received 'in-27>w3.10' (0:28)
    again after its txn (0,62) aborted; before it acked that copy in (0,70), 30 s later, another
    txn, (0,52), aborted on the subscription and its ack of 0:22 was redelivered (PA-13), which this
    Exclusive subscription's single-active-consumer dispatcher does by handing every unacked message
    out again, 0:28 among them; a receive after the ack returned that copy.  ``held-back-delivery`` flagged it
    (a false alarm); a transaction's abort on the subscription is one of the times it may have
    handed the message out again."""
    return RunSpec(
        workload="ctp",
        seed=283,
        ops=80,
        ledger="file",
        disk="sim",
        faults=True,
        fault_rates=dict(FAULT_MIXES["coordinator"]),
        batching=True,
        unsubscribe=True,
        cumulative=True,
        queries=True,
        readers=True,
        acks=True,
    )


REGRESSIONS: dict[str, Callable[[], RunSpec]] = {
    "ctp-file-seed883-coordinator": _txn_ack_after_a_reload_that_queued_a_copy,
    "ctp-file-seed283-coordinator": _txn_ack_after_an_abort_that_queued_a_copy,
    "multi-file-seed381": _roll_owed_asked_of_a_failed_journal,
    "ctp-file-seed553-coordinator": _open_that_failed_kept_its_lock,
    "ctp-file-seed617-late-append": _abort_redelivery_taken_over_cumulatively,
    "ctp-file-seed37-late-append": _abort_redelivery_taken_by_a_late_individual_ack,
    "multi-file-seed617-late-append": _abort_redelivery_held_by_a_pending_cumulative_ack,
    "ctp-seed430": _txn_ack_across_a_subscription_reload,
    "multi-file-seed267-late-append": _roll_over_that_failed,
    "ctp-file-seed275": _trim_before_the_commit_cursor_write,
    "ctp-file-seed7-late-append": _journal_failed_at_the_first_load,
    "multi-file-seed13-coordinator": _ack_whose_cursor_write_failed,
    "ctp-redeliver-seed10": _redeliver_across_a_restart,
    "delayed-seed16": _restart_left_open,
    "multi-seed17-late-append": _add_partition_after_the_timeout,
    "multi-seed219-quiesce": _reader_behind_retention,
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_the_seed_passes_every_check(name: str) -> None:
    spec = REGRESSIONS[name]()
    result = run(spec)
    assert not result.incomplete, result.incomplete
    ops = result.operations
    rows = check_histories({name: ops}, "soak", VerifyOptions(counterexamples=False))
    bad = [(r.checker, r.verdict, r.detail[:300]) for r in rows if r.verdict != "ok"]
    assert not bad, bad


def test_a_journal_failed_at_the_first_load_restarts_the_broker() -> None:
    """The run of ctp seed 7 commits and ends well before its deadline: the broker crashed and
    restarted from the durable journal instead of retrying the failed store."""
    result = run(_journal_failed_at_the_first_load())
    assert not result.cut
    assert result.crashes >= 1
    assert result.committed > 0
