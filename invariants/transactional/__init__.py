"""Transactional properties of a whole history, inferred Elle-style from what clients observed.

No search happens here.  A topic partition is Elle's *list-append* object: every produced message
carries a unique payload (recoverability) and a position, and a consumer's receives reveal an
ordered prefix of the partition (traceability).  From the sends, receives, acks and the outcomes of
commit and abort we infer each transaction's fate and each message's visibility, then look for
forbidden observations.  Every anomaly names itself, cites the operations that prove it, and says
in words why each piece of evidence implies the next.

The anomalies, each with the Adya class it is the Pulsar analogue of (where there is one), its
group and what was observed, are one table: :data:`~invariants.transactional.checks.TAXONOMY`.
The checks are one function per anomaly, in a module per family: what a transaction's readers may
see (:mod:`~invariants.transactional.isolation`: G1a, G1b, G1c, fractured reads, a transaction
that both committed and aborted), the partition as a log (:mod:`~invariants.transactional.order`:
garbage, positions, real-time and dispatch order), what reaches a subscription and what an ack takes
away (:mod:`~invariants.transactional.delivery`: loss, duplicates after commit, redelivery after
abort) and when delayed or given-back messages arrive (:mod:`~invariants.transactional.timing`).
Each reads the one analysis (:mod:`~invariants.analysis`) and adds to a
:class:`~invariants.transactional.anomaly.Collector`.

Soundness comes first: every rule only fires on evidence that cannot be explained by a correct
broker (indeterminate operations are given the benefit of the doubt).

``missing-redelivery`` is the one liveness rule, checked under a bound.  Pulsar's pending ack
redelivers the positions a transaction acked individually when it aborts (PA-13, txn-semantics
5.5; a cumulative ack is not redelivered, #14371), and it does so before the coordinator answers
the client's abort.  On an Exclusive subscription the redelivered message is then queued for the
one consumer ahead of anything dispatched later, so it must be received again before either (a) a
receive invoked at least :data:`REDELIVERY_BOUND_MS` after the abort completed finds nothing, or
(b) a receive returns a message whose send was invoked after the abort completed.  A subscription
with a receive of unknown outcome, or that is not Exclusive throughout, is not judged, and neither
is a delayed message.  Logical time is the
simulated clock: ``deliver_at_ms`` is compared with ``invoked_at`` / ``completed_at``.  The value
and result shapes of each operation are in ``docs/spec/history.md``.

Batch messages (PIP-54).  A message is identified by ``(ledger, entry, batch index)``: a send,
receive or ack that reports a ``batch_index`` names one message of a batch entry, one without it
(index -1 below) a whole entry.  Several sends share an entry when their batch indexes differ, and
order is the order of the triple.  An ``ack`` with a batch index acknowledges that message only;
one without acknowledges every message of the entry.  An ``ack_cumulative`` at ``(p, i)``
acknowledges everything before entry ``p`` and indexes ``0..i`` of ``p`` (PA-12: the mark-delete
position moves to the entry before ``p``, plus the slot's indexes).

Subscription types.  Pulsar holds delayed messages back only on Shared and Key_Shared
subscriptions (an Exclusive or Failover consumer gets them at once, in order), so
``early-delivery`` is judged only there, and delayed messages join the order check elsewhere.  A
Shared subscription hands a message an unresponsive consumer held to another consumer, after
later ones, so its deliveries are not ordered; a Key_Shared one orders each consumer's deliveries
per sticky key, which for a batch entry is the key of its first message (a batch is routed whole).
A subscription without a recorded ``subscribe`` is judged as Exclusive for order and as Shared for
delays.
"""

from __future__ import annotations

from invariants.analysis import TxnAnalysis, TxnFate
from invariants.transactional.anomaly import Anomaly, Collector, TxnResult
from invariants.transactional.checks import (
    ANOMALIES,
    CHECKS,
    GROUPS,
    LIVENESS,
    TAXONOMY,
    check_transactional,
    find,
    of_group,
)
from invariants.transactional.delivery import REDELIVERY_BOUND_MS

__all__ = [
    "ANOMALIES",
    "CHECKS",
    "GROUPS",
    "LIVENESS",
    "REDELIVERY_BOUND_MS",
    "TAXONOMY",
    "Anomaly",
    "Collector",
    "TxnAnalysis",
    "TxnFate",
    "TxnResult",
    "check_transactional",
    "find",
    "of_group",
]
