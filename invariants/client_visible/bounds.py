"""The bounds the delivery oracle judges liveness by (simulated milliseconds; logical time is the
history's clock).

* :data:`LAG_BOUND_MS`: after a message became readable at the broker (sent, its transaction
  committed, every transaction before it on the partition ended, and for a subscription that
  delays messages its ``deliver_at_ms`` passed), a receive invoked this much later on a
  subscription with one consumer must not come back empty; nor may a receive whose recorded wait
  (``timeout_ms``) ends this much later, wherever it began (DD-25: a due message reaches a waiting
  consumer without its asking again).
* :data:`REDELIVERY_BOUND_MS`: after a transaction certainly ended by an abort, what it acked
  individually while it was certainly open must be received again before a receive invoked this
  much later comes back empty.
* :data:`TXN_END_BOUND_MS`: how long after its deadline an unended transaction may stay open.
* :data:`ANSWER_BOUND_MS`: how long after the coordinator's answer to END_TXN reached the client a
  commit or abort waiting for it may stay open (an engine history records when each answer reached
  the client as the end of the coordinator's ``end_txn`` step; a real broker's trace has no such
  rows, so ``unanswered-end`` does not judge it).
"""

from __future__ import annotations

__all__ = ["ANSWER_BOUND_MS", "LAG_BOUND_MS", "REDELIVERY_BOUND_MS", "TXN_END_BOUND_MS"]

LAG_BOUND_MS = 1_000

REDELIVERY_BOUND_MS = 1_000

TXN_END_BOUND_MS = 5_000

ANSWER_BOUND_MS = 5_000
