"""Producers and sends: PRODUCER, CLOSE_PRODUCER, SEND and its receipts.

A SEND becomes the partition's ``publish`` (the buffer decides where the entry goes, or refuses
it); the server checks only what Pulsar checks on the wire before a managed ledger sees the
message (its checksum, chunking).  Receipts go back per producer in the order the sends came, as a
managed ledger's callbacks do: a receipt waits for every send before it.

A compressed message (``MessageMetadata.compression``: LZ4, ZLIB, ZSTD, SNAPPY) is stored and
delivered as the producer sent it, as Pulsar's broker does; the engine reads the payload through
the codec (:func:`spec.frame.message_payload`) because its dispatcher hands a batch out message
by message (keys, batch indexes).  A payload that does not decompress to its ``uncompressed_size``
is refused with ``ChecksumError``: the one SEND_ERROR after which Pulsar's clients fail that send
instead of reconnecting and resending it forever.  An encrypted producer is refused at PRODUCER:
the engine cannot read an encrypted batch's messages.
"""

from __future__ import annotations

import itertools
from typing import Any

from engine.broker import BatchedMessage, Broker
from engine.recorder import RequestContext
from engine.scheduler import Future
from engine.serve.connection import Connection, Network, Producer
from engine.serve.replies import Handler, Replies
from engine.serve.schemas import Schemas
from engine.serve.topics import TopicRegistry
from engine.serve.wire import (
    SERVER_VERSION,
    UINT64,
    ProtocolViolation,
    RequestError,
    failed,
    message_id,
    topic_name,
    wire_error,
)
from spec.compression import CorruptPayload
from spec.errors import InputError, ServerError
from spec.frame import Frame, decode_message_batch, encode_command, message_payload
from spec.pb import PulsarApi_pb2 as api
from spec.types import Position, TxnID

__all__ = ["Producers"]

T = api.BaseCommand


class Producers:
    """The producers of every connection, and what their sends become."""

    def __init__(
        self, broker: Broker, topics: TopicRegistry, schemas: Schemas, network: Network, replies: Replies
    ) -> None:
        self.broker = broker
        self.topics = topics
        self.schemas = schemas
        self.network = network
        self.replies = replies
        self._names = itertools.count()

    def handlers(self) -> dict[int, Handler]:
        return {T.PRODUCER: self.producer, T.CLOSE_PRODUCER: self.close_producer, T.SEND: self.send}

    def producer(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.producer
        if cmd.producer_id in conn.producers:
            known = conn.producers[cmd.producer_id]
            if known.partition != topic_name(cmd.topic).full:
                raise RequestError(ServerError.ProducerBusy, f"producer id {cmd.producer_id} is in use")
            producer = known  # a retried PRODUCER: the same answer
        else:
            if cmd.encrypted:
                raise RequestError(
                    ServerError.NotAllowedError,
                    f"{SERVER_VERSION} does not take encrypted messages: its dispatcher reads a batch's messages "
                    "(keys, batch indexes), which an encrypted batch hides",
                )
            part = self.topics.partition_for(topic_name(cmd.topic).full, create=True)
            if not self.broker.up or not part.ready:
                raise RequestError(ServerError.ServiceNotReady, f"topic {part.name} is not loaded")
            name = cmd.producer_name if cmd.HasField("producer_name") else f"txnmodel-{next(self._names)}"
            producer = Producer(cmd.producer_id, name, part.name)
            conn.producers[cmd.producer_id] = producer
        success = api.CommandProducerSuccess(request_id=cmd.request_id, producer_name=producer.name)
        if cmd.HasField("schema"):
            success.schema_version = self.schemas.version(producer.partition, cmd.schema)
        self.replies.send(conn, T(type=T.PRODUCER_SUCCESS, producer_success=success))
        self.replies.done(conn, context, True)

    def close_producer(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.close_producer
        conn.producers.pop(cmd.producer_id, None)
        self.replies.send(conn, T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
        self.replies.done(conn, context, True)

    def send(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.send
        producer = conn.producers.get(cmd.producer_id)
        if producer is None:
            raise ProtocolViolation(f"SEND for unknown producer {cmd.producer_id}")
        message = frame.message
        assert message is not None
        future: Future[Position]
        if frame.checksum_ok is False:
            future = failed(ServerError.ChecksumError, "Checksum failed on the broker")
        elif cmd.is_chunk or message.metadata.HasField("num_chunks_from_msg"):
            future = failed(ServerError.NotAllowedError, "chunked messages are not supported")
        else:
            future = self._publish(producer, cmd, message)
        producer.receipts.append((cmd.sequence_id, cmd.highest_sequence_id, future, context))
        future.add_done_callback(lambda _: self._receipts(conn, producer))

    def _publish(self, producer: Producer, cmd: Any, message: Any) -> Future[Position]:
        part = self.broker.partitions.get(producer.partition)
        if part is None:
            return failed(ServerError.TopicNotFound, f"topic {producer.partition} was deleted")
        if not self.broker.up:
            return Future()
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits) if cmd.HasField("txnid_most_bits") else None
        meta = message.metadata
        deliver_at = meta.deliver_at_time if meta.HasField("deliver_at_time") else None
        key = meta.partition_key if meta.HasField("partition_key") else None
        batch = None
        if meta.HasField("num_messages_in_batch"):
            try:
                singles = decode_message_batch(message)
            except CorruptPayload as exc:
                return failed(ServerError.ChecksumError, f"the batch's payload is corrupt: {exc}")
            except InputError as exc:
                return failed(ServerError.UnknownError, f"malformed batch: {exc}")
            if not singles:
                # A batch entry has a message per bit of its ack set: one of none could be neither
                # delivered nor acknowledged, and a seek into it has no batch to reset to.
                return failed(ServerError.UnknownError, "malformed batch: num_messages_in_batch is 0")
            batch = [
                BatchedMessage(s.payload, s.metadata.partition_key if s.metadata.HasField("partition_key") else None)
                for s in singles
            ]
            payload = b""
        else:
            try:
                payload = message_payload(message)
            except CorruptPayload as exc:
                return failed(ServerError.ChecksumError, f"the message's payload is corrupt: {exc}")
        return part.publish(payload, txn, deliver_at, partition_key=key, batch=batch, sent=(meta, message.payload))

    def _receipts(self, conn: Connection, producer: Producer) -> None:
        """Answer a producer's sends in the order they came (the client checks the order)."""
        while producer.receipts and producer.receipts[0][2].done:
            sequence_id, highest, future, context = producer.receipts.popleft()
            error = future.error
            if error is None:
                position = future.result()
                receipt = api.CommandSendReceipt(
                    producer_id=producer.producer_id,
                    sequence_id=sequence_id,
                    message_id=message_id(position),
                    highest_sequence_id=highest,
                )
                self.replies.send(conn, T(type=T.SEND_RECEIPT, send_receipt=receipt))
            else:
                code, text = wire_error(error)
                self.replies.send(
                    conn,
                    T(
                        type=T.SEND_ERROR,
                        send_error=api.CommandSendError(
                            producer_id=producer.producer_id,
                            sequence_id=sequence_id,
                            error=api.ServerError.ValueType(code),
                            message=text,
                        ),
                    ),
                )
            self.replies.done(conn, context, error is None)

    def send_away(self, partition: str) -> None:
        """Tell the producers of ``partition`` to reconnect (CLOSE_PRODUCER with request id -1, as a
        broker sends when it unloads a topic): their receipts would wait behind a send the reloaded
        partition never answers."""
        for conn in self.network.connections():
            for producer in [p for p in conn.producers.values() if p.partition == partition]:
                conn.producers.pop(producer.producer_id, None)
                close = api.CommandCloseProducer(producer_id=producer.producer_id, request_id=UINT64)
                conn.send(encode_command(T(type=T.CLOSE_PRODUCER, close_producer=close)))
