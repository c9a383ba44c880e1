"""The admin API's transaction endpoints (``/admin/v3/transactions``), read from the machines.

Every answer is a view of a machine's state, in Pulsar's JSON shapes: the coordinator's store
(``TransactionCoordinatorStats``: its state, last sequence and low watermark, TC-3 and TC-17; a live
transaction's ``TransactionMetadata``: status, open time, timeout, its partitions and
subscriptions), a partition's transaction buffer (``TransactionBufferStats``: state,
``maxReadPosition``, the ongoing and aborted transactions, low watermarks, TB-1 .. TB-18) and a
subscription's pending ack (``TransactionPendingAckStats``: its handle state, the transactions
holding acks there, low watermarks, PA-14 .. PA-17).  Runs on the server's loop thread.

Where Pulsar keeps a number the model does not (recovery times, snapshot timestamps), it is 0.  A
finished transaction is gone from the coordinator's store (TC-9), so its metadata is 404 as in
Pulsar.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.broker import Partition
from engine.serve.admin import AdminError
from engine.serve.admin_topics import AdminTopics
from reference import coordinator as tc
from reference import pending_ack as pa
from spec.topics import TopicName
from spec.types import Position, TxnID

if TYPE_CHECKING:
    from engine.serve.server import PulsarServer

__all__ = ["AdminTransactions"]

DISABLED = "This Broker is not configured with transactionCoordinatorEnabled=true."


def _position(position: Position | None) -> str | None:
    return None if position is None else f"{position.ledger_id}:{position.entry_id}"


class AdminTransactions:
    """The transaction endpoints of one server."""

    def __init__(self, server: PulsarServer, topics: AdminTopics) -> None:
        self.server = server
        self.broker = server.broker
        self.topics = topics

    def _coordinator_state(self, coordinator_id: int | None = None) -> tc.CoordinatorState:
        if not self.server.config.transaction_coordinator_enabled:
            raise AdminError(503, DISABLED)
        service = self.broker.coordinator
        if coordinator_id is not None and coordinator_id != service.coordinator_id:
            raise AdminError(404, f"Transaction coordinator not found: {coordinator_id}")
        if not self.broker.up or service.state is None:
            raise AdminError(503, f"Transaction coordinator {service.coordinator_id} is not ready (recovering)")
        return service.state

    def _enabled(self) -> None:
        if not self.server.config.transaction_coordinator_enabled:
            raise AdminError(503, DISABLED)

    # -- the coordinator --------------------------------------------------------------------------

    def coordinator_stats(self, coordinator_id: int | None) -> dict[str, Any]:
        """One coordinator's stats, or (no id) every coordinator's by id."""
        state = self._coordinator_state(coordinator_id)
        stats = {
            "state": state.store_state.value,
            "leastSigBits": state.sequence_id,
            "lowWaterMark": tc.low_water_mark(state),
            "ongoingTxnSize": len(state.txns),
            "recoverStartTime": 0,
            "recoverEndTime": 0,
        }
        return stats if coordinator_id is not None else {str(state.coordinator_id): stats}

    def transaction_metadata(self, txn_id: TxnID) -> dict[str, Any]:
        state = self._coordinator_state()
        meta = state.txns.get(txn_id.least_sig_bits) if txn_id.most_sig_bits == state.coordinator_id else None
        if meta is None or meta.txn_id != txn_id:
            raise AdminError(404, f"Transaction not found: {txn_id}")
        return self._metadata(meta)

    def slow_transactions(self, timeout_ms: int, coordinator_id: int | None) -> dict[str, Any]:
        """Live transactions open longer than ``timeout_ms``, by their id ``(most,least)``."""
        state = self._coordinator_state(coordinator_id)
        now = self.server.sim.now
        return {
            str(meta.txn_id): self._metadata(meta)
            for _, meta in sorted(state.txns.items())
            if now - meta.start_time > timeout_ms
        }

    def _metadata(self, meta: tc.TxnMeta) -> dict[str, Any]:
        produced = {name: self._in_buffer(name, meta.txn_id) for name in meta.sorted_partitions()}
        acked: dict[str, dict[str, Any]] = {}
        for sub in meta.sorted_subscriptions():
            acked.setdefault(sub.topic, {})[sub.subscription] = self._in_pending_ack(
                sub.topic, sub.subscription, meta.txn_id
            )
        return {
            "txnId": str(meta.txn_id),
            "status": meta.status.name,
            "openTimestamp": meta.start_time,
            "timeoutAt": meta.timeout_ms,  # Pulsar's TxnMeta.getTimeoutAt: the timeout asked for, in ms
            "producedPartitions": produced,
            "ackedPartitions": acked,
        }

    # -- a partition's buffer ---------------------------------------------------------------------

    def _buffer(self, name: TopicName) -> Partition:
        self._enabled()
        part = self.topics.partition(name)
        if part.state is None:
            raise AdminError(503, f"Topic {name.full} is reloading")
        return part

    def buffer_stats(self, name: TopicName, *, low_water_marks: bool, segment_stats: bool) -> dict[str, Any]:
        state = self._buffer(name).state
        assert state is not None
        out: dict[str, Any] = {
            "state": state.status.value,
            "maxReadPosition": _position(state.max_read_position),
            "lastSnapshotTimestamps": 0,
            "ongoingTxnSize": len(state.ongoing),
            "recoverStartTime": 0,
            "recoverEndTime": 0,
        }
        if low_water_marks:
            out["lowWaterMarks"] = {str(k): v for k, v in sorted(state.low_water_marks.items())}
        if segment_stats:
            out["snapshotStats"] = {"segmentsSize": len(state.segments), "unsealedAbortTxnIDs": len(state.unsealed)}
        return out

    def _in_buffer(self, partition: str, txn_id: TxnID) -> dict[str, Any]:
        part = self.broker.partitions.get(partition)
        state = None if part is None else part.state
        if state is None:
            return {"startPosition": None, "aborted": False}
        return {"startPosition": _position(state.ongoing.get(txn_id)), "aborted": txn_id in state.aborted}

    def transaction_in_buffer(self, name: TopicName, txn_id: TxnID) -> dict[str, Any]:
        self._buffer(name)
        return self._in_buffer(name.full, txn_id)

    # -- a subscription's pending ack -------------------------------------------------------------

    def _pending_ack(self, name: TopicName, subscription: str) -> pa.PendingAckState | None:
        self._enabled()
        part = self.topics.partition(name)
        sub = part.subscriptions.get(subscription)
        if sub is None:
            if part.ledger is not None and any(c.name == subscription for c in part.ledger.cursors()):
                return None  # a cursor no consumer has loaded: no pending-ack handle yet
            raise AdminError(404, f"Subscription {subscription} not found")
        if sub.state is None:
            raise AdminError(503, f"Subscription {subscription} is reloading")
        return sub.state

    def pending_ack_stats(self, name: TopicName, subscription: str, *, low_water_marks: bool) -> dict[str, Any]:
        state = self._pending_ack(name, subscription)
        if state is None:
            out: dict[str, Any] = {"state": pa.HandleState.NONE.value, "ongoingTxnSize": 0}
            if low_water_marks:
                out["lowWaterMarks"] = {}
            return out
        txns = set(state.individual_ack_of_transaction)
        if state.cumulative_ack is not None:
            txns.add(state.cumulative_ack.txn_id)
        out = {"state": state.handle_state.value, "ongoingTxnSize": len(txns)}
        if low_water_marks:
            out["lowWaterMarks"] = {str(k): v for k, v in sorted(state.low_water_marks.items())}
        return out

    def _in_pending_ack(self, partition: str, subscription: str, txn_id: TxnID) -> dict[str, Any]:
        part = self.broker.partitions.get(partition)
        sub = None if part is None else part.subscriptions.get(subscription)
        state = None if sub is None else sub.state
        cumulative = None if state is None else state.cumulative_ack
        position = cumulative.position if cumulative is not None and cumulative.txn_id == txn_id else None
        return {"cumulativeAckPosition": _position(position)}

    def transaction_in_pending_ack(self, name: TopicName, subscription: str, txn_id: TxnID) -> dict[str, Any]:
        self._pending_ack(name, subscription)
        return self._in_pending_ack(name.full, subscription, txn_id)
