"""The client transaction's strategies (``tests/client/test_stateful.py`` draws from these) and its driver.

The driver plays the coordinator and the broker for one transaction object: it answers the sends
and acks in flight (success or failure), answers END_TXN with success or one of the errors the
client treats differently (TC-34), and fires the client's timer.  The object lives in the client's
memory, so it has no crash (:mod:`reference.restarts`).
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.strategies.base import Driver, Observation, Rule, Setup
from reference import client as cl
from spec.types import Subscription, TxnID

__all__ = ["FAILED", "RESPONSES", "SUBSCRIPTIONS", "TIMEOUT_MS", "TOPICS", "TXN_ID", "ClientDriver"]

#: The transaction the tests drive: issued by coordinator 1, with a 5 s timeout.
TXN_ID = TxnID(1, 3)
TIMEOUT_MS = 5000
RESPONSES = st.sampled_from(
    (None, None, "TransactionNotFound", "InvalidTxnStatus", "CoordinatorNotFound", "RequestTimeout")
)
TOPICS = st.sampled_from(("t0", "t1"))
SUBSCRIPTIONS = st.sampled_from((Subscription("t0", "s"), Subscription("t1", "s")))
FAILED = st.booleans()


class ClientDriver(Driver):
    machine = "client"

    def setup(self, data: st.DataObject) -> Setup:
        return Setup({}, {"txn_id": [TXN_ID.most_sig_bits, TXN_ID.least_sig_bits], "timeout_ms": TIMEOUT_MS})

    def rules(self) -> list[Rule]:
        return [
            Rule("send", lambda data, state: cl.Send(data.draw(TOPICS, label="topic"))),
            Rule("ack", lambda data, state: cl.Ack(data.draw(SUBSCRIPTIONS, label="subscription"))),
            Rule(
                "op_completed",
                lambda data, state: cl.OpCompleted(data.draw(FAILED, label="failed")),
                lambda state: state.pending_ops > 0,
            ),
            Rule("commit", lambda data, state: cl.Commit()),
            Rule("abort", lambda data, state: cl.Abort()),
            Rule("end_txn_response", lambda data, state: cl.EndTxnResponse(data.draw(RESPONSES, label="error"))),
            Rule("timeout_fired", lambda data, state: cl.TimeoutFired()),
        ]

    def observations(self, state: Any) -> list[Observation]:
        return [(name, {}) for name in ("state", "pending_ops", "produced_topics", "acked_subscriptions")]
