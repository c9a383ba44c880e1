"""What a client may and must receive: a delivery oracle written from the rules pages alone.

``invariants.transactional`` judges a history against a few fixed isolation anomalies, and the
per-object linearizability check judges the machines against the reference machines themselves, so
a slip in ``reference/`` is also in that model.  This module states, from ``spec/rules/*.md`` and
nothing in ``reference/``, what a correct broker lets a consumer see, given the sends, acks,
commits and aborts that it and the other clients made.  It judges client operations; of the machine
operations it reads only the coordinator's reloads and failed phase-3 steps, as the history's record
of the faults that delayed a transaction's end (see Times), and a subscription's reloads and
transaction aborts, as the record of when it may have handed its unacked messages out again (see
``held-back-delivery``), so it applies unchanged to a trace of a real broker, which has none.

Every check fires only on evidence no correct broker can produce: an operation of unknown outcome
gets the benefit of the doubt, an interval is judged by the end that favours the broker, and a
liveness check judges only after a stated bound.

The checks, each with the rules it states and what was observed, are one table:
:data:`~invariants.client_visible.checks.TABLE`.  They are one function per check, in a module per
family: what the subscription's cursor lets through (:mod:`~invariants.client_visible.cursor`), when
a message may and must be visible (:mod:`~invariants.client_visible.visibility`) and what the client
is answered (:mod:`~invariants.client_visible.answers`).  Each reads the one view of the history
(:class:`~invariants.client_visible.view.View`) and adds to a
:class:`~invariants.client_visible.violation.Collector`; the bounds they judge liveness by are
:mod:`~invariants.client_visible.bounds`.

Times.  A transaction is *certainly open* until the first ``commit``/``abort`` of it is invoked or
its timeout could have fired, whichever is first: the coordinator stamps the transaction's start
when it handles NEW_TXN, after the client invoked ``new_txn``, and aborts it only once
``start + timeout_ms`` has passed (TC-18, TC-19; the client's own timeout, TC-36, starts later
still).  While it is certainly open its entries hold maxReadPosition before them (TB-7), a low
watermark cannot pass it (TC-17: the watermark is below every live sequence), and what it acked
individually stays PENDING_ACK (PA-1).  It has *certainly ended* once a commit or an abort of it
returned ok: the coordinator answers only after every participant wrote its marker or applied the
end (TC-15).  An open transaction that nobody ended is aborted by its coordinator within
``timeout_ms + TXN_END_BOUND_MS`` of its ``new_txn`` completing (TC-18), and one whose end was
invoked ends within TXN_END_BOUND_MS of the later of that and its deadline (an end that reached
the coordinator is re-driven until it completes, TC-16, TC-24; a lost one leaves it to TC-18).
TXN_END_BOUND_MS covers one undisturbed run of that end; the faults a history records start it
afresh (``View.disturbed``): a participant that failed phase 2 (the end is re-run a second later,
TC-16), and a coordinator reload whose replayed log still holds the transaction unfinished (the
crash lost the end in flight, TC-25; the reload re-drives it, TC-24, or times it out on its first
tick, TC-18).  Neither has a bound of its own: a coordinator that keeps crashing, or participants
that keep timing out, delay the end for as long as they go on.

Subscriptions judged for liveness: every receive on them came from one process (one consumer at
a time, as an Exclusive subscription or a single Shared reader), every ``subscribe`` on them
completed ok, and no receive on them before the judged one has an unknown outcome (it may have
taken a message the history never shows).  Partitions with a transactional send of unknown
outcome before the judged receive are not judged for ``late-visibility``: that send may have
appended an entry, or re-opened an aborted transaction (TB-8), that holds maxReadPosition back.
"""

from __future__ import annotations

from invariants.client_visible.bounds import ANSWER_BOUND_MS, LAG_BOUND_MS, REDELIVERY_BOUND_MS, TXN_END_BOUND_MS
from invariants.client_visible.checks import CHECKS, LIVENESS, TABLE, check_client_visible
from invariants.client_visible.view import View
from invariants.client_visible.violation import OracleResult, Violation

__all__ = [
    "ANSWER_BOUND_MS",
    "CHECKS",
    "LAG_BOUND_MS",
    "LIVENESS",
    "REDELIVERY_BOUND_MS",
    "TABLE",
    "TXN_END_BOUND_MS",
    "OracleResult",
    "View",
    "Violation",
    "check_client_visible",
]
