"""Every check of the delivery oracle, in one table, and the runner that applies them.

:data:`TABLE` is the one place a check is declared: its name, the rule ids (of ``spec/rules/*.md``)
it states, its function (in the module of its family: :mod:`~invariants.client_visible.cursor`,
:mod:`~invariants.client_visible.visibility`, :mod:`~invariants.client_visible.answers`, or a new
one) and what was observed, in words.  The rows are in the order :func:`check_client_visible` runs
the checks and reports what they find.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from invariants.client_visible import answers, client_txn, cursor, visibility
from invariants.client_visible.view import View
from invariants.client_visible.violation import Check, Collector, OracleResult
from invariants.heap import without_cyclic_gc
from spec.history import Operation

__all__ = ["CHECKS", "LIVENESS", "TABLE", "OracleCheck", "check_client_visible"]


@dataclass(frozen=True)
class OracleCheck:
    """One row of the table.  ``liveness``: a bound missed, reported as its own verdict, ``late``,
    apart from the safety violations (``illegal``)."""

    name: str
    rules: tuple[str, ...]
    check: Check
    observed: str  # what the history showed, in words
    liveness: bool = False


TABLE: tuple[OracleCheck, ...] = (
    OracleCheck(
        "held-back-delivery",
        ("PA-1", "PA-6", "PA-8", "PA-18"),
        cursor.held_back,
        "a message a still-open transaction held by an individual ack was delivered again on that subscription",
    ),
    OracleCheck(
        "redelivered-after-ack",
        ("PA-1", "PA-3", "PA-11", "PA-12", "PA-18", "PA-19"),
        cursor.redelivered_after_ack,
        "a message acknowledged (plain ack, batch index or cumulative, or an individual ack of a committed txn) "
        "was delivered again, across restarts too",
    ),
    OracleCheck(
        "early-visibility",
        ("TB-7", "TB-9", "TB-15", "TB-17"),
        visibility.early_visibility,
        "a message was delivered while a transaction with an earlier entry on its partition was certainly still "
        "open (beyond maxReadPosition)",
    ),
    OracleCheck(
        "late-visibility",
        ("TB-7", "TB-11", "TB-12", "TB-19", "TB-24", "TC-15", "TC-18", "DD-1", "DD-13", "DD-25"),
        visibility.late_visibility,
        "a receive found nothing although a message had been readable (and due) for longer than LAG_BOUND_MS",
        liveness=True,
    ),
    OracleCheck(
        "missing-abort-redelivery",
        ("PA-13", "PA-14", "TC-18"),
        cursor.missing_abort_redelivery,
        "what an aborted or timed-out transaction acked individually was not delivered again within the bound",
        liveness=True,
    ),
    OracleCheck(
        "refused-send",
        ("TB-5", "TC-17"),
        answers.refused_sends,
        "a send of a transaction that was certainly open was refused as ended (NotAllowed)",
    ),
    OracleCheck(
        "undispatchable-last-id",
        ("TB-18",),
        visibility.undispatchable_last_id,
        "``get_last_message_id`` answered the entry of a transaction whose commit was not yet invoked, or that "
        "had certainly aborted",
    ),
    OracleCheck(
        "pending-ack-without-ack",
        ("PA-21",),
        cursor.pending_ack_without_ack,
        "the admin check answered PendingAck for a position no transaction had acknowledged on that subscription",
    ),
    OracleCheck(
        "missing-pending-ack",
        ("PA-21", "PA-1"),
        cursor.missing_pending_ack,
        "the admin check said no transaction held a position that an open transaction had acknowledged "
        "individually there",
    ),
    OracleCheck(
        "delivered-before-seek-time",
        ("PA-23",),
        cursor.delivered_before_seek_time,
        "after a seek by publish time, the first delivery was of a message published before that time",
    ),
    OracleCheck(
        "unexpected-error",
        ("TC-34", "TC-37"),
        answers.unexpected_errors,
        "an operation failed with an error Pulsar does not define (the client library's own exception), or a "
        "commit or abort with the one the client retries (CoordinatorNotFound)",
    ),
    OracleCheck(
        "unanswered-end",
        ("TC-34",),
        answers.unanswered_ends,
        "the coordinator's answer to END_TXN reached the client and the commit or abort waiting for it did not "
        "complete within ANSWER_BOUND_MS",
        liveness=True,
    ),
    OracleCheck(
        "refused-while-open",
        ("TC-31", "TC-35", "TC-38"),
        client_txn.refused_while_open,
        "a send or ack with a transaction, or its first commit or abort, was refused with InvalidTxnStatus while "
        "the transaction was certainly open",
    ),
    OracleCheck(
        "aborted-commit",
        ("TC-32", "TC-38"),
        client_txn.aborted_commits,
        "a commit failed with TransactionHasOperationFailed although every send and ack of its transaction returned ok",
    ),
    OracleCheck(
        "end-after-error",
        ("TC-34", "TC-35"),
        client_txn.ends_after_error,
        "a commit or abort invoked after an earlier end of its transaction came back TransactionNotFound was not "
        "refused on the client with InvalidTxnStatus",
    ),
)

# check name -> the rule ids it states, in run order; the liveness checks
CHECKS: Mapping[str, tuple[str, ...]] = MappingProxyType({row.name: row.rules for row in TABLE})
LIVENESS: frozenset[str] = frozenset(row.name for row in TABLE if row.liveness)
assert len(CHECKS) == len(TABLE), "a check is declared twice"


def check_client_visible(
    ops: Sequence[Operation], *, cap: int = 20, on_check: Callable[[str], None] | None = None
) -> OracleResult:
    """Every check of :data:`TABLE` over one history (client operations; machine operations are
    skipped); ``cap`` violations of each check are kept in full, all are counted.  ``on_check`` is
    told ``view`` once the history is read, then each check's name once it ran."""
    with without_cyclic_gc():  # invariants.heap: the view and its indexes hold no cycles
        view = View(ops)
        if on_check is not None:
            on_check("view")
        out = Collector(view.history, cap, CHECKS)
        for row in TABLE:
            row.check(view, out)
            if on_check is not None:
                on_check(row.name)
    return OracleResult(view.history, tuple(out.found), dict(out.counts), dict(out.judged), view.words.legend())
