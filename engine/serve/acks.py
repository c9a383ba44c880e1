"""Acks, redelivery, seeks and the last message id: what moves or reads a subscription's cursor.

ACK (individual, cumulative, batch index, with or without a transaction) becomes the
subscription's ``acknowledge`` (the pending ack and the cursor decide); REDELIVER_UNACKNOWLEDGED_MESSAGES
its ``redeliver``; SEEK its ``seek`` or ``seek_time`` (PA-22, PA-23), after which the subscription's
consumers reconnect; GET_LAST_MESSAGE_ID reads the buffer's last dispatchable position (TB-18).
"""

from __future__ import annotations

from engine.broker import Broker
from engine.recorder import RequestContext
from engine.scheduler import Future
from engine.serve.connection import Connection
from engine.serve.consumers import Consumers
from engine.serve.replies import Handler, Replies
from engine.serve.wire import RequestError, all_settled, message_id, position_of, set_bits, wire_error
from reference import buffer as tb
from spec.errors import ServerError
from spec.frame import Frame
from spec.pb import PulsarApi_pb2 as api
from spec.result import Ok
from spec.types import Position, TxnID

__all__ = ["Acks"]

T = api.BaseCommand


class Acks:
    """ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, SEEK and GET_LAST_MESSAGE_ID of a connection's consumers."""

    def __init__(self, broker: Broker, consumers: Consumers, replies: Replies) -> None:
        self.broker = broker
        self.consumers = consumers
        self.replies = replies

    def handlers(self) -> dict[int, Handler]:
        return {
            T.ACK: self.ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.redeliver,
            T.GET_LAST_MESSAGE_ID: self.get_last_message_id,
            T.SEEK: self.seek,
        }

    def ack(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.ack
        consumer = self.consumers.find(conn, cmd.consumer_id)
        sub = self.consumers.service(consumer)
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits) if cmd.HasField("txnid_most_bits") else None
        cumulative = cmd.ack_type == api.CommandAck.Cumulative
        futures: list[Future[None]] = []
        positions = [position_of(mid) for mid in cmd.message_id]
        if txn is not None and any(p.ledger_id < 0 or p.entry_id < 0 for p in positions):
            # -1 names the place before a ledger's first entry, never a message: a transaction
            # acknowledges messages (its pending-ack record holds only real positions).
            raise RequestError(ServerError.NotAllowedError, "a transaction acknowledges messages; an id of -1 is none")
        for mid, position in zip(cmd.message_id, positions, strict=True):
            if sub is None:
                futures.append(Future())
                continue
            stored = sub.partition.messages.get(position)
            size = stored.batch_size if stored is not None and stored.batch is not None else None
            if size is not None and len(mid.ack_set) > 0:
                # Batch-index acks: the ack set's set bits are the indexes still unacknowledged.
                remaining = set_bits(list(mid.ack_set), size)
                if cumulative:
                    acked = [i for i in range(size) if i not in remaining]
                    futures.append(
                        sub.acknowledge(consumer.engine_id, position, txn, True, max(acked) if acked else None)
                    )
                else:
                    for index in range(size):
                        if index not in remaining:
                            futures.append(sub.acknowledge(consumer.engine_id, position, txn, False, index))
            else:
                futures.append(sub.acknowledge(consumer.engine_id, position, txn, cumulative))
        everything = all_settled(futures)

        def answered(_: Future[None]) -> None:
            self.consumers.unblock(consumer.partition, consumer.subscription)
            error = next((f.error for f in futures if f.error is not None), None)
            if cmd.HasField("request_id") and not conn.closed:
                response = api.CommandAckResponse(
                    consumer_id=cmd.consumer_id,
                    request_id=cmd.request_id,
                    txnid_most_bits=cmd.txnid_most_bits,
                    txnid_least_bits=cmd.txnid_least_bits,
                )
                if error is not None:
                    code, response.message = wire_error(error)
                    response.error = api.ServerError.ValueType(code)
                self.replies.send(conn, T(type=T.ACK_RESPONSE, ackResponse=response))
            self.replies.done(conn, context, error is None)

        self.replies.when_done(conn, everything, "answering ACK", answered)

    def redeliver(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.redeliverUnacknowledgedMessages
        consumer = conn.consumers.get(cmd.consumer_id)
        sub = None if consumer is None else self.consumers.service(consumer)
        if consumer is not None and sub is not None:
            positions = [position_of(m) for m in cmd.message_ids] if len(cmd.message_ids) > 0 else None
            if positions is None:
                # Redeliver everything: what this consumer holds but has not sent goes back too.
                consumer.held.clear()
            sub.redeliver(consumer.engine_id, positions)
            self.consumers.wake(consumer.engine_id)
        self.replies.done(conn, context, True)

    def get_last_message_id(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.getLastMessageId
        consumer = self.consumers.find(conn, cmd.consumer_id)
        part = self.broker.partitions.get(consumer.partition)
        if part is None or part.state is None or not self.broker.up:
            return  # the topic is down: no answer (the client times out and retries)
        # TB-18: the last dispatchable position (the buffer's, so never past max_read_position).
        result = tb.get_last_message_id(part.state)
        if not isinstance(result, Ok):
            raise RequestError(result.error.server_error, result.error.message or result.error.name)
        position: Position = result.value
        stored = part.messages.get(position)
        batch_index = stored.batch_size - 1 if stored is not None and stored.batch is not None else None
        response = api.CommandGetLastMessageIdResponse(
            request_id=cmd.request_id, last_message_id=message_id(position, batch_index=batch_index)
        )
        sub = part.subscriptions.get(consumer.subscription)
        if sub is not None and sub.cursor is not None:
            response.consumer_mark_delete_position.CopyFrom(message_id(sub.cursor.mark_delete_position))
        self.replies.send(conn, T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=response))
        self.replies.done(conn, context, True)

    def seek(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        """CommandSeek (PA-22, PA-23): reset the cursor, make the consumers reconnect, then succeed."""
        cmd = frame.command.seek
        by_id = cmd.HasField("message_id")
        if not (by_id or cmd.HasField("message_publish_time")):
            raise RequestError(ServerError.MetadataError, "Message id and message publish time were not present")
        consumer = conn.consumers.get(cmd.consumer_id)
        if consumer is None:
            raise RequestError(ServerError.MetadataError, "Consumer not found")
        sub, part, name = self.consumers.service(consumer), consumer.partition, consumer.subscription
        if sub is None:
            return  # the topic is down: no answer (the client times out and retries)
        mid = cmd.message_id
        future = (
            sub.seek(position_of(mid), tuple(mid.ack_set) or None) if by_id else sub.seek_time(cmd.message_publish_time)
        )

        def answered(f: Future[None]) -> None:
            if f.error is None:
                self.consumers.reconnect(lambda c: (c.partition, c.subscription) == (part, name))
                self.replies.send(conn, T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
            else:
                code, text = wire_error(f.error)
                self.replies.error(conn, T.SEEK, frame.command, code, text)
            self.replies.done(conn, context, f.error is None)

        self.replies.when_done(conn, future, "answering SEEK", answered)
