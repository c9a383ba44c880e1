"""A client transaction object (TC-29 .. TC-36 of spec/rules/coordinator.md), written from the rules.

It stands for "your implementation" in docs/conform.md: plain Python, no txnmodel import.  Its
methods are named after the machine's commands and observers (docs/spec/conform-vocabulary.md), so
the adapter calls them by name.  A command returns ``(value, effects)`` or raises :class:`Refused`
with an error name; effects are dicts spelled as the vectors spell them.
"""


class Refused(Exception):
    def __init__(self, name, message):
        super().__init__(message)
        self.name = name


class ClientTxn:
    def __init__(self, txn_id, timeout_ms):
        self.txn_id, self.timeout_ms, self._state = txn_id, timeout_ms, "OPEN"
        self.topics, self.subscriptions, self.pending, self.failed = set(), set(), 0, False
        self.end_action, self.end_sent, self.commit_became_abort = None, False, False

    def _only(self, *states):
        if self._state not in states:
            raise Refused("InvalidTxnStatus", f"expected {' or '.join(states)}, the txn is {self._state}")

    def send(self, topic):  # TC-30, TC-31: register a topic once
        self._only("OPEN")
        self.pending += 1
        if topic in self.topics:
            return None, []
        self.topics.add(topic)
        return None, [{"@type": "SendAddPartitionToTxn", "txn_id": self.txn_id, "topic": topic}]

    def ack(self, subscription):
        self._only("OPEN")
        self.pending += 1
        if tuple(subscription) in self.subscriptions:
            return None, []
        self.subscriptions.add(tuple(subscription))
        return None, [{"@type": "SendAddSubscriptionToTxn", "txn_id": self.txn_id, "subscription": subscription}]

    def op_completed(self, failed=False):  # TC-32: the last answer may release the end
        self.pending -= 1
        self.failed = self.failed or failed
        return self._maybe_end()

    def _maybe_end(self):
        if self.end_action is None or self.end_sent or self.pending:
            return self._state, []
        if self.end_action == "COMMIT" and self.failed:
            self._state, self.end_action, self.commit_became_abort = "ABORTING", "ABORT", True
        self.end_sent = True
        return self._state, [{"@type": "SendEndTxn", "txn_id": self.txn_id, "action": self.end_action}]

    def commit(self):
        return self._end("COMMIT")

    def abort(self):
        return self._end("ABORT")

    def _end(self, action):  # TC-32, TC-33, TC-35
        ending = "COMMITTING" if action == "COMMIT" else "ABORTING"
        self._only("OPEN", ending)
        if self._state == ending and self.end_sent:  # a retry after a failed END_TXN sends it again
            return self._state, [{"@type": "SendEndTxn", "txn_id": self.txn_id, "action": action}]
        self._state, self.end_action = ending, action
        return self._maybe_end()

    def end_txn_response(self, error=None):  # TC-34
        if self._state not in ("COMMITTING", "ABORTING") or not self.end_sent:
            raise Refused("InvalidTxnStatus", f"no END_TXN in flight, the txn is {self._state}")
        user = "COMMIT" if self.commit_became_abort else self.end_action
        if error is None:
            self._state = "COMMITTED" if self.end_action == "COMMIT" else "ABORTED"
            failure = "TransactionHasOperationFailed" if self.commit_became_abort else None
            return self._state, [{"@type": "CompleteEnd", "action": user, "error": failure}]
        if error == "CoordinatorNotFound":  # the TC client asks again
            return self._state, [{"@type": "SendEndTxn", "txn_id": self.txn_id, "action": self.end_action}]
        if error in ("TransactionNotFound", "InvalidTxnStatus"):
            self._state = "ERROR"
        return self._state, [{"@type": "CompleteEnd", "action": user, "error": error}]

    def timeout_fired(self):  # TC-36
        if self._state == "OPEN":
            self._state = "TIME_OUT"
        return self._state, []

    # --- observers

    def state(self):
        return self._state

    def pending_ops(self):
        return self.pending

    def produced_topics(self):
        return sorted(self.topics)

    def acked_subscriptions(self):
        return [list(s) for s in sorted(self.subscriptions)]
