"""Transactions: the coordinator's commands on the wire (TC_CLIENT_CONNECT, NEW_TXN,
ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN).

Each request becomes the coordinator's own (the coordinator machine decides; its error is the
answer's); the coordinator's commands to the buffers and pending acks (END_TXN_ON_PARTITION,
END_TXN_ON_SUBSCRIPTION) stay inside the broker.  A transaction's messages and acks travel with
SEND and ACK (:mod:`engine.serve.producers`, :mod:`engine.serve.acks`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.broker import Broker, CoordinatorService
from engine.recorder import RequestContext
from engine.scheduler import Future
from engine.serve.connection import Connection, command_name
from engine.serve.faults import ServeFaults
from engine.serve.replies import Handler, Replies
from engine.serve.wire import COMMAND_FIELD, TXN_RESPONSES, RequestError, first_error, topic_name, wire_error
from spec.config import Config
from spec.errors import ServerError
from spec.frame import Frame
from spec.pb import PulsarApi_pb2 as api
from spec.types import Subscription as TxnSubscription
from spec.types import TxnAction, TxnID

__all__ = ["Transactions"]

T = api.BaseCommand


class Transactions:
    """The transaction coordinator's requests (coordinator 0, the only one)."""

    def __init__(self, broker: Broker, config: Config, replies: Replies, faults: ServeFaults | None) -> None:
        self.broker = broker
        self.config = config
        self.replies = replies
        self.faults = faults

    def handlers(self) -> dict[int, Handler]:
        return {
            T.TC_CLIENT_CONNECT_REQUEST: self.tc_connect,
            T.NEW_TXN: self.new_txn,
            T.ADD_PARTITION_TO_TXN: self.add_partition_to_txn,
            T.ADD_SUBSCRIPTION_TO_TXN: self.add_subscription_to_txn,
            T.END_TXN: self.end_txn,
        }

    def _coordinator(self, tc_id: int) -> CoordinatorService:
        if not self.config.transaction_coordinator_enabled:
            raise RequestError(ServerError.NotAllowedError, "Transactions are not enabled.")
        coordinator = self.broker.coordinator
        if tc_id != coordinator.coordinator_id:
            raise RequestError(ServerError.TransactionCoordinatorNotFound, f"no transaction coordinator {tc_id}")
        return coordinator

    def tc_connect(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.tcClientConnectRequest
        coordinator = self._coordinator(cmd.tc_id)
        if not self.broker.up or not coordinator.ready:
            raise RequestError(ServerError.ServiceNotReady, f"transaction coordinator {cmd.tc_id} is not loaded")
        self.replies.send(
            conn,
            T(
                type=T.TC_CLIENT_CONNECT_RESPONSE,
                tcClientConnectResponse=api.CommandTcClientConnectResponse(request_id=cmd.request_id),
            ),
        )
        self.replies.done(conn, context, True)

    def _answer(
        self,
        conn: Connection,
        kind: int,
        cmd: Any,
        future: Future[Any],
        context: RequestContext | None,
        fill: Callable[[Any, Any], None] = lambda body, value: None,
    ) -> None:
        """Answer the request ``cmd`` of type ``kind`` when ``future`` completes (``fill`` completes
        a success's body from the future's value)."""
        response_type, field_name, message_type = TXN_RESPONSES[kind]

        def answered(f: Future[Any]) -> None:
            if f.error is not None:
                code, text = wire_error(f.error)
                wrapped = T(type=T.Type.ValueType(kind), **{COMMAND_FIELD[kind]: cmd})
                self.replies.error(conn, kind, wrapped, code, text)
            else:
                body = message_type(request_id=cmd.request_id)
                if "txnid_most_bits" in message_type.DESCRIPTOR.fields_by_name and hasattr(cmd, "txnid_most_bits"):
                    body.txnid_most_bits, body.txnid_least_bits = cmd.txnid_most_bits, cmd.txnid_least_bits
                fill(body, f.result())
                self.replies.send(conn, T(type=T.Type.ValueType(response_type), **{field_name: body}))
            self.replies.done(conn, context, f.error is None)

        self.replies.when_done(conn, future, f"answering {command_name(kind)}", answered)

    def new_txn(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.newTxn
        coordinator = self._coordinator(cmd.tc_id)
        timeout_ms = cmd.txn_ttl_seconds
        if self.faults is not None:
            timeout_ms = self.faults.txn_timeout(conn, timeout_ms)
        future = coordinator.new_txn(timeout_ms) if self.broker.up else Future()

        def fill(body: Any, txn: TxnID) -> None:
            body.txnid_most_bits, body.txnid_least_bits = txn.most_sig_bits, txn.least_sig_bits

        self._answer(conn, T.NEW_TXN, cmd, future, context, fill)

    def add_partition_to_txn(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.addPartitionToTxn
        coordinator = self._coordinator(cmd.txnid_most_bits)
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
        names = [topic_name(p).full for p in cmd.partitions]
        futures = [coordinator.add_partition(txn, name) if self.broker.up else Future() for name in names]
        self._answer(conn, T.ADD_PARTITION_TO_TXN, cmd, first_error(futures), context)

    def add_subscription_to_txn(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.addSubscriptionToTxn
        coordinator = self._coordinator(cmd.txnid_most_bits)
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
        subs = [TxnSubscription(topic_name(s.topic).full, s.subscription) for s in cmd.subscription]
        futures = [coordinator.add_subscription(txn, s) if self.broker.up else Future() for s in subs]
        self._answer(conn, T.ADD_SUBSCRIPTION_TO_TXN, cmd, first_error(futures), context)

    def end_txn(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.endTxn
        coordinator = self._coordinator(cmd.txnid_most_bits)
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
        if not cmd.HasField("txn_action"):
            raise RequestError(ServerError.UnknownError, "END_TXN without txn_action")
        action = TxnAction.COMMIT if cmd.txn_action == api.COMMIT else TxnAction.ABORT
        future = coordinator.end_txn(txn, action) if self.broker.up else Future()
        self._answer(conn, T.END_TXN, cmd, future, context)
