"""The client-visible oracle: each check flags a hand-written bad history, and passes the good twin
that differs from it only where the rule says it must; and no check fires on seeded engine histories
with faults (the main job's workloads and fault mixes)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from engine.simulation.workloads import LONG_RECEIVE_MS, SimulateOptions, main_job_spec, run
from invariants.analysis import cumulative_reach
from invariants.client_visible import (
    ANSWER_BOUND_MS,
    CHECKS,
    LAG_BOUND_MS,
    REDELIVERY_BOUND_MS,
    TXN_END_BOUND_MS,
    check_client_visible,
)
from invariants.client_visible.cursor import _TakeOvers
from invariants.client_visible.view import covers
from spec.history import BadHistory, OpType, make_operation
from spec.rules import RULES_DIR, parse_rules
from tests.invariants.history_builder import PART, SUB, H


def names(h: H) -> dict[str, int]:
    return check_client_visible(h.ops).counts


def test_every_check_names_rules_that_exist() -> None:
    known = {r.id for page in RULES_DIR.glob("*.md") for r in parse_rules(page.read_text(encoding="utf-8"), page.stem)}
    for check, rules in CHECKS.items():
        assert rules and set(rules) <= known, check


# --- held-back-delivery ---------------------------------------------------------------------------


def _held(redelivered_at: int) -> H:
    h = H()
    h.subscribe()
    h.send("m", (0, 0), 1)
    h.receive("m", (0, 0), 5, 6)
    h.new_txn((0, 1), 10, process=9)
    h.ack((0, 0), 20, txn=(0, 1))  # done at 22; the txn stays open until its commit at 500
    h.receive("m", (0, 0), redelivered_at, redelivered_at + 1)
    h.end("commit", (0, 1), 500, 510, process=9)
    return h


def test_held_back_flags_a_delivery_while_the_txn_is_open() -> None:
    assert names(_held(100)) == {"held-back-delivery": 1}


def test_held_back_passes_a_receive_that_may_have_come_before_the_ack() -> None:
    """Found recording from serve: a consumer's receive and its ack in a transaction, both within
    one millisecond; the receive invoked the instant the ack completed may well have come first."""
    h = H()
    h.subscribe()
    h.send("m", (0, 0), 1)
    h.new_txn((0, 1), 2, process=9)
    h.receive("m", (0, 0), 10, 10)
    h.ack((0, 0), 10, txn=(0, 1))
    h.ops[-1] = dataclasses.replace(h.ops[-1], completed_at=10)
    assert names(h) == {}
    h.receive("m", (0, 0), 11, 12)  # strictly later: held back, must not come again
    assert names(h) == {"held-back-delivery": 1}


def test_held_back_leaves_out_an_ack_during_which_the_subscription_reloaded() -> None:
    """ctp seed 430 (the soak at stop 44): the subscription reloaded while the ack was on its way, and
    the copy the reload handed out reached the consumer's queue before the ack took effect.  A
    reload outside the ack's window excuses nothing."""

    def reloaded(at: int) -> H:
        h = _held(100)
        h.op("recover", SUB, {"@type": "Recover", "machine": "pending_ack", "records": []}, None, at, at)
        return h

    assert names(reloaded(21)) == {}
    assert names(reloaded(50)) == {"held-back-delivery": 1}


def test_held_back_leaves_out_a_message_handed_out_again_since_the_delivery_the_ack_answers() -> None:
    """ctp seeds 883 and 283 (the soak at stop 45): the reader acked, 30 s after receiving it, a
    copy of the message, and in between the subscription reloaded (883) or another transaction's
    abort gave the consumer's unacked messages back (283, PA-13); that copy was already queued at the
    consumer when the ack took effect.  So is one a client asked for again.  A redelivery before the
    delivery the ack answers, or after the ack, excuses nothing."""
    machine_rows = {
        "recover": {"@type": "Recover", "machine": "pending_ack", "records": []},
        "abort_txn": {"@type": "AbortTxn", "txn_id": [0, 7], "low_water_mark": 0},
    }

    def redispatched(f: str, at: int) -> H:
        h = _held(100)
        if f in machine_rows:
            h.op(f, SUB, machine_rows[f], None, at, at)
        else:
            h.op(f, SUB, {}, None, at, at + 1, process=3)
        return h

    for f in ("recover", "abort_txn", "redeliver_unacknowledged", "negative_ack"):
        assert names(redispatched(f, 8)) == {}, f  # after the delivery at 5, before the ack at 20
        assert names(redispatched(f, 3)) == {"held-back-delivery": 1}, f  # before the delivery
        assert names(redispatched(f, 50)) == {"held-back-delivery": 1}, f  # after the ack
    # the ack came back at 22: a request sent that instant found the message held already (the
    # processors ask for redelivery right after their ack), a machine row then may have come first
    assert names(redispatched("redeliver_unacknowledged", 22)) == {"held-back-delivery": 1}
    assert names(redispatched("recover", 22)) == {}


def test_held_back_has_teeth_on_a_main_job_history() -> None:
    """Planted at the workload's default options (ctp seed 3 of the main job): a pending ack that
    never holds a transaction's individual ack (the branch-flip of ``if accepted`` in
    ``reference.pending_ack._individual_ack``), so the dispatcher hands the message out again while
    the transaction is open.  Each processor asks for redelivery the instant its ack came back; that
    request excuses nothing."""
    from devtools.mutation import applied, flip_mutants

    (flip,) = [m for m in flip_mutants("pending_ack") if (m.function, m.before) == ("_individual_ack", "if accepted")]
    spec = main_job_spec("ctp", 3)
    assert check_client_visible(run(spec).operations).ok
    with applied(flip):
        result = check_client_visible(run(spec).operations)
    assert result.counts.get("held-back-delivery", 0) > 0, result.counts


def test_held_back_passes_a_delivery_once_the_txn_may_have_ended() -> None:
    # After the commit is invoked the redelivery is judged by redelivered-after-ack, not here.
    assert "held-back-delivery" not in names(_held(505))


# --- redelivered-after-ack ------------------------------------------------------------------------


def _acked(batch_index_of_ack: int | None, redelivered: bool) -> H:
    h = H()
    h.subscribe()
    for i in range(2):
        h.op(
            "send",
            PART,
            {"message": f"m{i}", "txn": None},
            {"position": [0, 0], "batch_index": i, "batch_size": 2},
            1,
            3,
        )
    got = {"message": "m0", "position": [0, 0], "batch_index": 0, "batch_size": 2, "redelivery_count": 0}
    h.op("receive", SUB, {}, got, 5, 6, process=9)
    extra = {} if batch_index_of_ack is None else {"batch_index": batch_index_of_ack}
    h.ack((0, 0), 7, **extra)
    if redelivered:
        h.op("receive", SUB, {}, got, 50, 51, process=9)  # after a restart, say
    return h


def test_redelivered_after_ack_flags_an_acked_batch_index_delivered_again() -> None:
    assert names(_acked(0, True)) == {"redelivered-after-ack": 1}


def test_redelivered_after_ack_passes_another_index_and_no_redelivery() -> None:
    assert names(_acked(1, True)) == {}  # index 1 was acked, m0 (index 0) was not
    assert names(_acked(0, False)) == {}


def test_redelivered_after_ack_covers_a_committed_txn_ack() -> None:
    h = H()
    h.subscribe()
    h.send("m", (0, 0), 1)
    h.receive("m", (0, 0), 5, 6)
    h.new_txn((0, 1), 10, process=9)
    h.ack((0, 0), 20, txn=(0, 1))
    h.end("commit", (0, 1), 30, 40, process=9)
    good = list(h.ops)
    h.receive("m", (0, 0), 60, 61)
    assert names(h) == {"redelivered-after-ack": 1}
    h.ops = good
    assert names(h) == {}


def test_a_copy_the_client_wrote_again_is_not_the_acked_one() -> None:
    """A recorder of the official client marks its sends ``deduplicated: false``: the producer
    resends what it has no receipt for after a reconnect, so "m" may lie at [0, 0] (receipt lost)
    and at [0, 1] (the id the send returned).  A transaction acked the copy at [0, 1] and committed;
    the copy at [0, 0] coming afterwards was never acked.  The acked copy coming again still is."""
    h = H()
    h.subscribe()
    h.op("send", PART, {"message": "m", "txn": None, "deduplicated": False}, {"position": [0, 1]}, 1, 3, process=2)
    h.receive("m", (0, 1), 5, 6)
    h.new_txn((0, 1), 10, process=9)
    h.ack((0, 1), 20, txn=(0, 1))
    h.end("commit", (0, 1), 30, 40, process=9)
    h.receive("m", (0, 0), 60, 61)
    good = list(h.ops)
    assert names(h) == {}
    h.receive("m", (0, 1), 70, 71)
    assert names(h) == {"redelivered-after-ack": 1}
    h.ops = [dataclasses.replace(good[1], value='{"message":"m","txn":null}', _value=None), *good[2:]]
    h.ops = [good[0], *h.ops]
    assert names(h) == {"redelivered-after-ack": 1}  # without the mark, any copy is the acked one


# --- early-visibility -------------------------------------------------------------------------------


def _early(received_at: int, commit_at: int = 300) -> H:
    h = H()
    h.subscribe()
    h.new_txn((0, 1), 0)
    h.send("t", (0, 0), 2, txn=(0, 1), process=1)
    h.send("n", (0, 1), 10)  # a plain message after the open txn's entry
    h.receive("n", (0, 1), received_at, received_at + 1)
    h.end("commit", (0, 1), commit_at, commit_at + 5)
    h.receive("t", (0, 0), commit_at + 10, commit_at + 11)
    return h


def test_early_visibility_flags_a_message_past_an_open_txn() -> None:
    assert names(_early(100)) == {"early-visibility": 1}


def test_early_visibility_passes_once_the_commit_was_invoked() -> None:
    assert names(_early(301)) == {}


def test_early_visibility_respects_the_txn_timeout() -> None:
    # The txn may have timed out (TC-18) at 0 + timeout: no judgement after that.
    h = H()
    h.subscribe()
    h.new_txn((0, 1), 0, timeout=50)
    h.send("t", (0, 0), 2, txn=(0, 1), process=1)
    h.send("n", (0, 1), 10)
    h.receive("n", (0, 1), 60, 61)
    assert names(h) == {}
    h.ops[-1] = dataclasses.replace(h.ops[-1], invoked_at=39, completed_at=40)
    assert names(h) == {"early-visibility": 1}


# --- late-visibility --------------------------------------------------------------------------------


def _late(empty_at: int, *, txn_ended: bool = True, unknown_send: bool = False) -> H:
    h = H()
    h.subscribe()
    h.new_txn((0, 1), 0)
    h.send("t", (0, 0), 2, txn=(0, 1), process=1)
    h.send("n", (1, 0), 10)  # after a ledger roll-over
    if txn_ended:
        h.end("abort", (0, 1), 20, 30)
    if unknown_send:
        h.new_txn((0, 2), 3, process=3)
        h.send("u", (0, 5), 5, txn=(0, 2), process=3, kind=OpType.INFO)
    h.receive(None, None, empty_at, empty_at + 50)
    return h


def test_late_visibility_flags_an_empty_receive_past_the_bound() -> None:
    assert names(_late(30 + LAG_BOUND_MS)) == {"late-visibility": 1}


def test_late_visibility_is_not_judged_where_a_subscribe_states_no_liveness() -> None:
    h = _late(LAG_BOUND_MS + 50)
    assert names(h) == {"late-visibility": 1}
    h.ops = [
        dataclasses.replace(op, value=op.value[:-1] + ',"liveness":false}', _value=None) if op.f == "subscribe" else op
        for op in h.ops
    ]
    assert names(h) == {}


def _stating_slack(h: H, slack: object) -> H:
    h.ops = [
        dataclasses.replace(op, value=op.value[:-1] + f',"visible_slack_ms":{slack}}}', _value=None)
        if op.f == "subscribe"
        else op
        for op in h.ops
    ]
    return h


def test_late_visibility_adds_the_slack_a_subscribe_states() -> None:
    """A recorder of a real broker states its slack (its own, plus the longest send of the run):
    the bound is LAG_BOUND_MS plus that, to the millisecond."""
    assert names(_stating_slack(_late(30 + LAG_BOUND_MS + 700 - 1), 700)) == {}
    assert names(_stating_slack(_late(30 + LAG_BOUND_MS + 700), 700)) == {"late-visibility": 1}
    assert names(_stating_slack(_late(30 + LAG_BOUND_MS), 0)) == {"late-visibility": 1}


@pytest.mark.parametrize("slack", ["-1", '"500"', "1.5", "true"])
def test_a_stated_slack_that_is_not_milliseconds_is_bad_input(slack: str) -> None:
    h = _stating_slack(_late(30 + LAG_BOUND_MS), slack)
    with pytest.raises(BadHistory, match="visible_slack_ms must be a whole number of milliseconds"):
        names(h)


def test_late_visibility_passes_within_the_bound() -> None:
    assert names(_late(30 + LAG_BOUND_MS - 1)) == {}


def test_late_visibility_waits_for_an_unended_txn_to_time_out() -> None:
    # Nobody ended txn (0,1): its coordinator aborts it by new_txn done + timeout + TXN_END_BOUND_MS.
    by = 2 + 10_000 + TXN_END_BOUND_MS
    assert names(_late(by + LAG_BOUND_MS - 1, txn_ended=False)) == {}
    assert names(_late(by + LAG_BOUND_MS, txn_ended=False)) == {"late-visibility": 1}


def _reload(h: H, at: int, *statuses: tuple[tuple[int, int], str | None]) -> None:
    """A coordinator reload whose replayed log holds these (txn, new status) records."""
    records = [
        [
            rid,
            {
                "@type": "TxnLogRecord",
                "metadata_op": "UPDATE" if status else "NEW",
                "txn_id": list(txn),
                "new_status": status,
            },
        ]
        for rid, (txn, status) in enumerate(statuses)
    ]
    h.op("recover", "coordinator:0", {"@type": "Recover", "machine": "coordinator", "records": records}, None, at, at)


def _failed_end(h: H, at: int, txn: tuple[int, int]) -> None:
    """Phase 3 of an end that a participant failed (TC-16)."""
    value = {
        "@type": "EndTxnInTransactionBufferResult",
        "txn_id": list(txn),
        "action": "ABORT",
        "errors": ["RequestTimeout"],
    }
    h.op("end_txn_in_transaction_buffer_result", "coordinator:0", value, None, at, at, kind=OpType.FAIL)


def test_late_visibility_waits_for_a_reload_that_found_the_txn_unfinished() -> None:
    # Found at ctp seed 53 (coordinator mix): the coordinator timed (0,16) out on time, phase 2 timed
    # out in the TB client, and three crashes in a row lost the end in flight; each reload re-drove
    # it (TC-24, TC-25) and the abort marker came 1.7 s after the reload that found it ABORTING.
    by = 2 + 10_000 + TXN_END_BOUND_MS
    reload_at = by + 500  # the crash before it may have come before ``by``: nothing rules it out
    h = _late(reload_at + TXN_END_BOUND_MS + LAG_BOUND_MS - 1, txn_ended=False)
    _reload(h, reload_at, ((0, 1), None), ((0, 1), "ABORTING"))
    assert names(h) == {}
    h = _late(reload_at + TXN_END_BOUND_MS + LAG_BOUND_MS, txn_ended=False)
    _reload(h, reload_at, ((0, 1), None), ((0, 1), "ABORTING"))
    assert names(h) == {"late-visibility": 1}


def test_late_visibility_does_not_wait_for_a_reload_that_cannot_excuse_the_txn() -> None:
    by = 2 + 10_000 + TXN_END_BOUND_MS
    # its replayed log has it ABORTED: the end was done before the crash (TC-15, TC-22)
    h = _late(by + LAG_BOUND_MS, txn_ended=False)
    _reload(h, by + 500, ((0, 1), None), ((0, 1), "ABORTED"))
    assert names(h) == {"late-visibility": 1}
    # an earlier reload after the bound: the crash came after the txn had to have ended
    h = _late(by + LAG_BOUND_MS, txn_ended=False)
    _reload(h, by + 100)
    _reload(h, by + 500, ((0, 1), None))
    assert names(h) == {"late-visibility": 1}
    # another coordinator's reload
    h = _late(by + LAG_BOUND_MS, txn_ended=False)
    _reload(h, by + 500, ((1, 1), None))
    h.ops[-1] = dataclasses.replace(h.ops[-1], object="coordinator:1")
    assert names(h) == {"late-visibility": 1}


def test_late_visibility_waits_for_the_re_runs_of_failed_ends() -> None:
    # TC-16: every failed phase 2 is re-run a second later; each failure starts the bound afresh.
    by = 2 + 10_000 + TXN_END_BOUND_MS
    failures = (10_100 + 3_000, 10_100 + 7_000, 10_100 + 11_000)
    last = failures[-1] + TXN_END_BOUND_MS
    for empty_at, found in ((last + LAG_BOUND_MS - 1, {}), (last + LAG_BOUND_MS, {"late-visibility": 1})):
        h = _late(empty_at, txn_ended=False)
        for at in failures:
            _failed_end(h, at, (0, 1))
        assert names(h) == found
    # a failure after the bound excuses nothing
    h = _late(by + LAG_BOUND_MS, txn_ended=False)
    _failed_end(h, by + 10, (0, 1))
    assert names(h) == {"late-visibility": 1}


def test_late_visibility_is_not_judged_past_a_txn_send_of_unknown_outcome() -> None:
    assert names(_late(30 + LAG_BOUND_MS, unknown_send=True)) == {}


def test_late_visibility_counts_the_delay_on_a_shared_subscription() -> None:
    h = H()
    h.subscribe(sub_type="Shared")
    h.send("d", (0, 0), 1, deliver_at=5_000)
    h.receive(None, None, 2_000, 2_050)  # not due yet
    assert names(h) == {}
    h.receive(None, None, 5_000 + LAG_BOUND_MS, 5_000 + LAG_BOUND_MS + 50)
    assert names(h) == {"late-visibility": 1}


def test_late_visibility_judges_a_waiting_receive_at_the_end_of_its_wait() -> None:
    """DD-25: a due message reaches a consumer waiting in a receive without its asking again.  A
    receive that began before the message was due and waited (its recorded ``timeout_ms``) until
    LAG_BOUND_MS past it, finding nothing, is a lag; the same receive without its wait recorded, or
    with a wait that ends within the bound, proves nothing (its answer may have been delayed)."""

    def waiting(timeout: int | None) -> H:
        h = H()
        h.subscribe(sub_type="Shared")
        h.send("d", (0, 0), 1, deliver_at=5_000)
        h.receive(None, None, 4_900, 4_900 + (timeout or 50) + 300, timeout=timeout)
        return h

    assert names(waiting(100 + LAG_BOUND_MS)) == {"late-visibility": 1}
    assert names(waiting(100 + LAG_BOUND_MS - 1)) == {}
    assert names(waiting(None)) == {}
    # a delivery before the wait began excuses it
    h = H()
    h.subscribe(sub_type="Shared")
    h.send("d", (0, 0), 1, deliver_at=5_000)
    h.receive("d", (0, 0), 4_000, 5_003)
    h.receive(None, None, 5_010, 8_000, timeout=2_500)
    assert names(h) == {}


def test_the_delayed_workload_waits_in_long_receives_once_the_writers_stop() -> None:
    """The main job's delayed workload records the long receives the late-visibility check judges
    at the end of their wait, and a clean run passes it."""
    result = run(main_job_spec("delayed", 2, 30))
    # (seed 2 is a ``bounds`` run: every receive also names its consumer)
    receives = [{k: v for k, v in op.args.items() if k != "consumer"} for op in result.operations if op.f == "receive"]
    waits = [args for args in receives if args]
    assert waits and all(args == {"timeout_ms": LONG_RECEIVE_MS} for args in waits)
    outcome = check_client_visible(result.operations)
    assert outcome.ok and outcome.judged["late-visibility"] > 0


# --- missing-abort-redelivery ----------------------------------------------------------------------


def _aborted(redelivered: bool, *, explicit_abort: bool = True) -> H:
    h = H()
    h.subscribe()
    h.send("m", (0, 0), 1)
    h.receive("m", (0, 0), 5, 6)
    h.new_txn((0, 1), 10, timeout=100, process=9)
    h.ack((0, 0), 20, txn=(0, 1))
    if explicit_abort:
        h.end("abort", (0, 1), 30, 40, process=9)
    if redelivered:
        h.receive("m", (0, 0), 200, 201)  # after the abort, or after the timeout (10 + 100)
    late = 40 + REDELIVERY_BOUND_MS if explicit_abort else 12 + 100 + TXN_END_BOUND_MS + REDELIVERY_BOUND_MS
    h.receive(None, None, late, late + 50)
    return h


def test_missing_abort_redelivery_flags_an_abort_whose_acks_never_came_back() -> None:
    assert names(_aborted(False)) == {"missing-abort-redelivery": 1}
    assert names(_aborted(True)) == {}


def test_missing_abort_redelivery_covers_a_timed_out_txn() -> None:
    assert names(_aborted(False, explicit_abort=False)) == {"missing-abort-redelivery": 1}
    assert names(_aborted(True, explicit_abort=False)) == {}


def test_missing_abort_redelivery_spares_what_the_cursor_deleted_otherwise() -> None:
    """PA-11: the cursor wins; a message another (plain) ack deleted is not redelivered by the abort."""
    h = H()
    h.subscribe()
    h.send("m", (0, 0), 1)
    h.receive("m", (0, 0), 5, 6)
    h.new_txn((0, 1), 10, timeout=100, process=9)
    h.ack((0, 0), 20, txn=(0, 1))
    h.end("abort", (0, 1), 30, 40, process=9)
    h.ack((0, 0), 45)  # a plain ack of the same message
    h.receive(None, None, 40 + REDELIVERY_BOUND_MS, 90 + REDELIVERY_BOUND_MS)
    assert names(h) == {}


def _taken_over(cumulative_at: int, *, sub_type: str = "Exclusive") -> H:
    """Txn (0,1) acks m individually and is aborted at 30..40; txn (0,2) (certainly open 10..110)
    acks cumulatively up to m at ``cumulative_at``, and is aborted at 60..70; nothing comes back."""
    h = H()
    h.subscribe(sub_type=sub_type)
    h.send("m", (0, 0), 1)
    h.receive("m", (0, 0), 5, 6)
    h.new_txn((0, 1), 8, timeout=100, process=9)
    h.new_txn((0, 2), 10, timeout=100, process=8)
    h.ack((0, 0), 20, txn=(0, 1))
    h.op("ack_cumulative", SUB, {"position": [0, 0], "txn": [0, 2]}, None, cumulative_at, cumulative_at + 2)
    h.end("abort", (0, 1), 30, 40, process=9)
    h.end("abort", (0, 2), 60, 70, process=8)
    h.receive(None, None, 40 + REDELIVERY_BOUND_MS, 90 + REDELIVERY_BOUND_MS)
    return h


def test_missing_abort_redelivery_spares_a_message_another_txn_took_cumulatively() -> None:
    """PA-6, PA-13: a cumulative pending ack does not lock what another txn holds individually, so
    another txn's cumulative ack covering the message, there at the abort or taken after it, holds
    it from then on: the abort's redelivery is filtered (or the copy it queued is covered by the
    client's own cumulative ack), and that txn's abort clears its slot with no redelivery (the
    client must ask).  Found as ctp seed 617 on the simulated disk (soak)."""
    assert names(_taken_over(45)) == {}  # taken after the abort
    assert names(_taken_over(12)) == {}  # held at the abort: (0,2) certainly open until 60
    # On a Shared subscription the broker ignores a cumulative ack (PA-10): the abort still owes it.
    assert names(_taken_over(45, sub_type="Shared")) == {"missing-abort-redelivery": 1}


def _taken_individually(ack_at: int, done_at: int) -> H:
    """Txn (0,1) acks m individually and is aborted at 30..40; txn (0,2) (timeout 100 from 10) acks m
    individually at ``ack_at``..``done_at`` and is aborted at 110..112; nothing comes back."""
    h = H()
    h.subscribe()
    h.send("m", (0, 0), 1)
    h.receive("m", (0, 0), 5, 6)
    h.new_txn((0, 1), 8, timeout=100, process=9)
    h.new_txn((0, 2), 10, timeout=100, process=8)
    h.ack((0, 0), 20, txn=(0, 1))
    h.end("abort", (0, 1), 30, 40, process=9)
    h.op("ack", SUB, {"position": [0, 0], "txn": [0, 2]}, None, ack_at, done_at)
    h.end("abort", (0, 2), 110, 112, process=8)
    h.receive(None, None, 40 + REDELIVERY_BOUND_MS, 90 + REDELIVERY_BOUND_MS)
    return h


def test_missing_abort_redelivery_spares_a_message_another_txn_took_individually_after_the_abort() -> None:
    """PA-5, PA-13, PA-14: once the abort gave the message back, another txn's individual ack may take
    it, and the abort's redelivery then skips it; an ack that reached the subscription after its own
    txn's abort holds it until the low watermark passes that txn there, which may never come.  Found
    as ctp seed 37 on the simulated disk (the soak at stop 43)."""
    assert names(_taken_individually(45, 108)) == {}  # invoked after the abort was done
    # an ack that came back before the abort was invoked held nothing the abort gave back: the two
    # would conflict (PA-5), so the ok one was the other's and the abort still owes the message
    h = _taken_individually(12, 14)
    assert names(h) == {"missing-abort-redelivery": 1}


def test_missing_abort_redelivery_still_owes_what_a_cumulative_ack_held_only_before_the_abort() -> None:
    """A cumulative ack whose txn ended before the abort holds nothing at the abort (PA-13 cleared it)."""
    h = H()
    h.subscribe()
    h.send("m", (0, 0), 1)
    h.receive("m", (0, 0), 5, 6)
    h.new_txn((0, 2), 7, timeout=100, process=8)
    h.op("ack_cumulative", SUB, {"position": [0, 0], "txn": [0, 2]}, None, 9, 11)
    h.end("abort", (0, 2), 12, 14, process=8)
    h.new_txn((0, 1), 15, timeout=100, process=9)
    h.ack((0, 0), 20, txn=(0, 1))
    h.end("abort", (0, 1), 30, 40, process=9)
    h.receive(None, None, 40 + REDELIVERY_BOUND_MS, 90 + REDELIVERY_BOUND_MS)
    assert names(h) == {"missing-abort-redelivery": 1}


def _late_ack(ack_at: int) -> H:
    """A txn with a 100 ms timeout (new_txn invoked at 10: certainly open until 110) acks at
    ``ack_at``, answered 2 ms later; nobody ends it and nothing comes back."""
    h = H()
    h.subscribe()
    h.send("m", (0, 0), 1)
    h.receive("m", (0, 0), 5, 6)
    h.new_txn((0, 1), 10, timeout=100, process=9)
    h.ack((0, 0), ack_at, txn=(0, 1))
    late = 12 + 100 + TXN_END_BOUND_MS + REDELIVERY_BOUND_MS
    h.receive(None, None, late, late + 50)
    return h


def test_missing_abort_redelivery_spares_an_ack_that_may_have_landed_after_the_abort() -> None:
    """PA-13: an abort that reaches the subscription before the ack does nothing there; the ack that
    lands after it stays PENDING_ACK until a later end raises the watermark past it (PA-14), which
    may never come.  Only an ack answered while its txn was certainly open is owed a redelivery
    (found as ctp seed 69 on the simulated disk: ADD_SUBSCRIPTION_TO_TXN answered after the timeout)."""
    assert names(_late_ack(108)) == {"missing-abort-redelivery": 1}  # answered at 110: before any end
    assert names(_late_ack(109)) == {}  # answered at 111: the timeout's abort may have come first


def test_ctp_seed_69_on_the_simulated_disk_has_no_false_missing_abort_redelivery() -> None:
    """The main job's history that showed the race: txn (0,22) acked 'in-38' after its timeout's
    abort had reached the subscription, and the ack stayed PENDING_ACK (PA-14 never reached it)."""
    options = SimulateOptions(
        seed=69,
        workload="ctp",
        ops=60,
        ledger="file",
        batching="on",
        batch_messages="on",
        key_shared="off",
        delayed_tracker="memory",
        fault_mix="quiesce",
        redeliver="on",
        deadline=3_600_000,
        disk="sim",
        group_commit_ms=1,
    )
    (spec,) = options.specs("ctp", "")
    ops = run(spec).operations
    sub = "subscription:persistent://public/default/in-partition-1#ctp"
    steps = [
        op.f
        for op in ops
        if op.object == sub and op.f in ("abort_txn", "individual_ack") and op.args.get("txn_id") == [0, 22]
    ]
    assert steps == ["abort_txn", "individual_ack"]  # the race: the ack reached the handle after the abort
    result = check_client_visible(ops)
    assert result.ok, [str(v) for v in result.violations[:3]]


# --- refused-send ---------------------------------------------------------------------------------


def test_refused_send_flags_an_open_txn_refused_as_ended() -> None:
    h = H()
    h.new_txn((0, 1), 0, timeout=1_000)
    h.op("send", PART, {"message": "t", "txn": [0, 1]}, None, 5, 9, process=1, kind=OpType.FAIL)
    refused = dataclasses.replace(h.ops[-1], error="NotAllowed")
    h.ops[-1] = refused
    assert names(h) == {"refused-send": 1}
    # after the txn's timeout it may have been aborted, and its sequence passed by the watermark
    h.ops[-1] = dataclasses.replace(refused, invoked_at=1_500, completed_at=1_510)
    assert names(h) == {}
    # another error is not this rule's business
    h.ops[-1] = dataclasses.replace(refused, error="ServiceUnitNotReady")
    assert names(h) == {}


# --- unexpected-error (TC-37, TC-34) --------------------------------------------------------------


def _failed(f: str, obj: str, error: str | None) -> H:
    h = H()
    h.new_txn((0, 1), 0)
    h.op(
        f,
        obj,
        {"txn": [0, 1]} if f in ("commit", "abort") else {"message": "m", "txn": [0, 1]},
        None,
        5,
        9,
        process=1,
        kind=OpType.FAIL,
    )
    h.ops[-1] = dataclasses.replace(h.ops[-1], error=error)
    return h


def test_unexpected_error_flags_an_exception_pulsar_does_not_define() -> None:
    # TC-37: the client library's own exception reached the application
    assert names(_failed("commit", "coordinator:0", "TypeError")) == {"unexpected-error": 1}
    assert names(_failed("send", PART, "AssertionError")) == {"unexpected-error": 1}


def test_unexpected_error_passes_pulsar_errors_of_either_spelling() -> None:
    for error in ("TransactionHasOperationFailed", "NotAllowed", "UnknownError", None):
        assert names(_failed("commit", "coordinator:0", error)) == {}, error
    # a Pulsar error, so not unexpected; but the first commit of a txn still open is not refused (TC-38)
    assert names(_failed("commit", "coordinator:0", "InvalidTxnStatus")) == {"refused-while-open": 1}
    # the official client's names, as ``txnmodel record`` writes them
    for error in ("InvalidTxnStatusError", "NotAllowedError", "ProducerQueueIsFull"):
        assert names(_failed("send", PART, error)) == {}, error


def test_unexpected_error_flags_a_commit_handed_coordinator_not_found() -> None:
    # TC-34: the client retries CoordinatorNotFound until the coordinator is loaded
    assert names(_failed("commit", "coordinator:0", "CoordinatorNotFound")) == {"unexpected-error": 1}
    assert names(_failed("abort", "coordinator:0", "CoordinatorNotFound")) == {"unexpected-error": 1}
    # a send may fail with it (no retry is promised there)
    assert names(_failed("send", PART, "CoordinatorNotFound")) == {}


def test_unexpected_error_leaves_objects_of_other_models_alone() -> None:
    h = H()
    h.op("write", "register:x", 1, None, 0, 2, kind=OpType.FAIL)
    h.ops[-1] = dataclasses.replace(h.ops[-1], error="timeout-error")
    assert names(h) == {}


# --- unanswered-end (TC-34) -----------------------------------------------------------------------


def _answered(
    end_done: int | None, *, kind: OpType = OpType.INFO, step_kind: OpType = OpType.OK, error: str | None = None
) -> H:
    """A commit invoked at 10 whose END_TXN (sent at 12) was answered to the client at 20."""
    h = H()
    h.new_txn((0, 1), 0)
    h.end("commit", (0, 1), 10, end_done, kind=kind)
    value = {"@type": "EndTxn", "txn_id": [0, 1], "action": "COMMIT", "now_ms": 12}
    h.op("end_txn", "coordinator:0", value, None, 12, 20, process=50, kind=step_kind)
    if error is not None:
        h.ops[-1] = dataclasses.replace(h.ops[-1], error=error)
    return h


def test_unanswered_end_flags_a_commit_that_outlived_its_answer() -> None:
    assert names(_answered(30_010)) == {"unanswered-end": 1}  # timed out long after the answer
    assert names(_answered(None, kind=OpType.INVOKE)) == {"unanswered-end": 1}
    assert names(_answered(20 + ANSWER_BOUND_MS + 1, kind=OpType.OK)) == {"unanswered-end": 1}
    # a final error answered (TC-9, TC-11) is completed just the same
    bad = _answered(30_010, step_kind=OpType.FAIL, error="TransactionNotFound")
    assert names(bad) == {"unanswered-end": 1}


def test_unanswered_end_passes_a_commit_completed_with_its_answer() -> None:
    assert names(_answered(20, kind=OpType.OK)) == {}
    assert names(_answered(20 + ANSWER_BOUND_MS, kind=OpType.FAIL)) == {}
    # the client gave up before the answer came: nothing to complete
    assert names(_answered(19)) == {}
    assert names(_answered(20)) == {}


def test_unanswered_end_judges_only_answers_that_reached_the_client() -> None:
    # an END_TXN step whose answer never came (lost, or the coordinator crashed) proves nothing
    assert names(_answered(30_010, step_kind=OpType.INFO)) == {}
    # CoordinatorNotFound is retried, and an error the coordinator may have re-driven proves nothing
    assert names(_answered(30_010, step_kind=OpType.FAIL, error="CoordinatorNotFound")) == {}
    # a commit invoked after the END_TXN was sent is not the one it answers
    h = _answered(30_010)
    h.ops[1] = dataclasses.replace(h.ops[1], invoked_at=13)
    assert names(h) == {}


# --- input ----------------------------------------------------------------------------------------------


def test_bad_input_is_a_typed_error_naming_the_row() -> None:
    h = H()
    h.op("send", PART, {"message": 7}, {"position": [0, 0]}, 1, 2)
    with pytest.raises(BadHistory, match="row 0"):
        check_client_visible(h.ops)


def test_a_malformed_coordinator_reload_is_bad_input_naming_the_row() -> None:
    h = _late(30 + LAG_BOUND_MS - 1)
    h.op("recover", "coordinator:0", {"@type": "Recover", "machine": "coordinator", "records": [7]}, None, 40, 40)
    with pytest.raises(BadHistory, match=f"row {len(h.ops) - 1}"):
        check_client_visible(h.ops)


def test_machine_operations_are_ignored() -> None:
    h = _late(30 + LAG_BOUND_MS - 1)
    h.op("commit_txn", PART, {"@type": "CommitTxn", "txn_id": [0, 9], "low_water_mark": 0}, [0, 3], 5, 5)
    assert names(h) == {}


# --- no false alarm on engine histories ------------------------------------------------------------


@pytest.mark.parametrize("workload", ["ctp", "multi", "delayed"])
def test_no_violation_on_seeded_histories_with_faults(workload: str) -> None:
    for seed in range(1, 11):  # every variant and every fault mix of the main job
        result = check_client_visible(run(main_job_spec(workload, seed, ops=30)).operations)
        assert result.ok, [str(v) for v in result.violations[:3]]


def test_verify_passes_the_coordinators_reloads_to_the_oracle() -> None:
    # The main job's ctp seed 53 (coordinator mix, file ledger on the simulated disk): a timed-out
    # txn's end was lost to three coordinator crashes in a row (see docs/checkers.md).
    from engine.simulation.workloads import MAIN_JOB
    from invariants.client_visible import View
    from invariants.verify import VerifyOptions, check_histories

    options = dataclasses.replace(
        MAIN_JOB, seed=53, workload="ctp", histories=1, ledger="file", disk="sim", group_commit_ms=1
    )
    (spec,) = options.specs("ctp", "")
    ops = run(spec).operations
    view = View(ops)
    stretched = [txn for txn in view.new_txn if (got := view.ended_by(txn)) and "reloaded" in got[1]]
    assert stretched, "the history no longer has an end that a coordinator reload delayed"
    rows = check_histories({"h": ops}, "test", VerifyOptions(counterexamples=False))
    assert {row.checker: row.verdict for row in rows}["delivery"] == "ok", [r.detail for r in rows]


def test_a_cumulative_ack_on_a_shared_subscription_deletes_nothing() -> None:
    """PA-10: the broker answers a cumulative ack on a Shared or Key_Shared subscription with
    success and does nothing, so what it would have covered may come again."""
    for sub_type, expected in (("Shared", {}), ("Key_Shared", {}), ("Exclusive", {"redelivered-after-ack": 1})):
        h = H()
        h.subscribe(sub_type=sub_type)
        h.send("m0", (0, 0), 1)
        h.send("m1", (0, 1), 1)
        h.receive("m0", (0, 0), 5, 6)
        h.receive("m1", (0, 1), 7, 8)
        h.op("ack_cumulative", SUB, {"position": [0, 1], "txn": None}, None, 9, 11)
        h.receive("m0", (0, 0), 20, 21)
        assert names(h) == expected, sub_type


# --- refused-while-open, aborted-commit (TC-38) -----------------------------------------------------


def _open_txn(*ops: tuple[str, dict[str, object], object, int, int, str | None]) -> H:
    """Txn (0,1) opened at 10 with a 1,000 ms timeout, then ``ops`` (f, value, result, at, done, error)."""
    h = H()
    h.new_txn((0, 1), 10, timeout=1_000, process=9)
    for f, value, result, at, done, error in ops:
        obj = PART if f == "send" else TC_OBJ if f in ("commit", "abort") else SUB
        kind = OpType.OK if error is None else OpType.FAIL
        made = make_operation(
            "h", len(h.ops), 9, kind, f, obj, value, result, invoked_at=at, completed_at=done, error=error
        )
        h.ops.append(made)
    return h


TC_OBJ = "coordinator:0"
SEND = {"message": "m", "txn": [0, 1]}


def test_refused_while_open_flags_a_send_refused_while_the_txn_was_open() -> None:
    refused = _open_txn(("send", SEND, None, 20, 21, "InvalidTxnStatus"))
    assert names(refused) == {"refused-while-open": 1}
    late = _open_txn(("send", SEND, None, 2_000, 2_001, "InvalidTxnStatus"))  # past the timeout
    assert names(late) == {}
    # Soak, multi seed 17: a send invoked while the txn was open, whose ADD_PARTITION the coordinator
    # reached only after the txn's timeout (a late log append) and refused; judged by its answer
    answered_late = _open_txn(("send", SEND, None, 20, 1_500, "InvalidTxnStatus"))
    assert names(answered_late) == {}
    assert names(_open_txn(("send", SEND, None, 20, 1_009, "InvalidTxnStatus"))) == {"refused-while-open": 1}
    after_end = _open_txn(
        ("commit", {"txn": [0, 1]}, None, 20, 30, None), ("send", SEND, None, 40, 41, "InvalidTxnStatus")
    )
    assert names(after_end) == {}  # refused once an end was invoked: TC-31


def test_refused_while_open_flags_a_first_end_refused() -> None:
    assert names(_open_txn(("commit", {"txn": [0, 1]}, None, 20, 21, "InvalidTxnStatus"))) == {"refused-while-open": 1}
    # an END_TXN the coordinator answered after the txn's timeout could have aborted it
    assert names(_open_txn(("commit", {"txn": [0, 1]}, None, 20, 1_010, "InvalidTxnStatus"))) == {}


def test_aborted_commit_needs_a_failed_operation() -> None:
    sent = ("send", SEND, {"position": [0, 0]}, 20, 22, None)
    commit = ("commit", {"txn": [0, 1]}, None, 30, 40, "TransactionHasOperationFailed")
    assert names(_open_txn(sent, commit)) == {"aborted-commit": 1}
    failed = ("send", SEND, None, 20, 22, "TransactionConflict")
    assert names(_open_txn(failed, commit)) == {}


# --- end-after-error (TC-34, TC-35) ------------------------------------------------------------------

END = {"txn": [0, 1]}


def test_end_after_error_flags_an_end_the_client_should_have_refused() -> None:
    not_found = ("commit", END, None, 20, 30, "TransactionNotFound")
    # the txn is in ERROR: every later end by the same client is refused on the client
    assert names(_open_txn(not_found, ("commit", END, None, 40, 41, "InvalidTxnStatus"))) == {}
    assert names(_open_txn(not_found, ("abort", END, None, 40, 41, "InvalidTxnStatus"))) == {}
    assert names(_open_txn(not_found, ("commit", END, None, 40, 45, "TransactionNotFound"))) == {"end-after-error": 1}
    assert names(_open_txn(not_found, ("abort", END, None, 40, 45, None))) == {"end-after-error": 1}
    # a commit the client or the coordinator refused as InvalidTxnStatus: later commits are refused too
    # (past the txn's timeout, so that refusal itself is rightful)
    refused = ("commit", END, None, 1_020, 1_030, "InvalidTxnStatus")
    again = ("commit", END, None, 1_040, 1_045, "TransactionNotFound")
    assert names(_open_txn(refused, again)) == {"end-after-error": 1}
    assert names(_open_txn(refused, ("commit", END, None, 1_040, 1_040, "InvalidTxnStatus"))) == {}
    # ... but not an abort: a commit in flight refuses it, and may still turn into an abort (TC-32)
    assert names(_open_txn(refused, ("abort", END, None, 1_040, 1_045, None))) == {}
    # any other failure leaves the txn as it was: the user may end it again (TC-34)
    timed_out = ("commit", END, None, 20, 30, "PersistenceError")
    assert names(_open_txn(timed_out, ("commit", END, None, 40, 45, None))) == {}


def test_end_after_error_judges_the_same_client_only() -> None:
    h = _open_txn(("commit", END, None, 20, 30, "TransactionNotFound"))
    h.ops.append(
        make_operation("h", len(h.ops), 10, OpType.OK, "abort", TC_OBJ, END, None, invoked_at=40, completed_at=45)
    )
    result = check_client_visible(h.ops)
    assert result.counts == {} and result.judged.get("end-after-error", 0) == 0


def test_end_after_error_has_teeth_on_a_main_job_history() -> None:
    """Planted at the workload's default options (ctp seed 32 of the main job): a client whose
    transaction does not go to ERROR when the coordinator refuses its commit as InvalidTxnStatus (the
    branch-flip of TC-34's test in ``reference.client._end_response``).  The processor asks for the
    commit once more, as its workload does after a failed commit; the flipped client sends it, and
    the coordinator answers TransactionNotFound where the client should have refused it."""
    from devtools.mutation import applied, flip_mutants

    (flip,) = [
        m
        for m in flip_mutants("client")
        if m.function == "_end_response" and "TransactionNotFound.__name__" in m.before
    ]
    spec = main_job_spec("ctp", 32)
    assert check_client_visible(run(spec).operations).ok
    with applied(flip):
        result = check_client_visible(run(spec).operations)
    assert set(result.counts) == {"end-after-error"}, result.counts


_ID = st.tuples(st.just(0), st.integers(0, 3), st.integers(-1, 3))  # (ledger, entry, index; -1 whole)


@given(
    st.lists(
        st.tuples(st.integers(0, 10), _ID, st.integers(0, 10), st.integers(0, 2)),  # landed, id, w, txn
        max_size=9,
    ),
    st.integers(0, 11),
    _ID,
    st.integers(0, 11),
    st.integers(0, 2),
)
@example([(1, (0, 1, -1), 5, 1)], 2, (0, 1, 2), 5, 0)  # a whole-entry ack covers each index, w == by
@example([(1, (0, 1, 2), 5, 1)], 2, (0, 1, -1), 5, 0)  # an ack of one index covers the whole entry
@example([(2, (0, 2, 0), 5, 1)], 2, (0, 1, 3), 5, 0)  # landed at ``at``; a later entry covers
@example([(1, (0, 1, 1), 9, 0), (1, (0, 1, 1), 6, 1)], 2, (0, 1, 1), 6, 0)  # the asker's own txn is skipped
def test_take_overs_answer_as_a_walk_over_every_ack_would(
    acks: list[tuple[int, tuple[int, int, int], int, int]],
    at: int,
    message: tuple[int, int, int],
    by: int,
    txn: int,
) -> None:
    """missing-abort-redelivery's take-over question in O(log^2 n) (:class:`_TakeOvers`) answers as
    the definition: some cumulative ack of another txn landed by ``at``, covers the message, and its
    txn held or took it from ``by`` on."""
    index = _TakeOvers([(landed, cumulative_reach(mid), w, (0, t)) for landed, mid, w, t in acks])
    expected = any(
        landed <= at and covers(mid, True, message) and w >= by and (0, t) != (0, txn) for landed, mid, w, t in acks
    )
    assert index.any(at, message, by, (0, txn)) == expected
