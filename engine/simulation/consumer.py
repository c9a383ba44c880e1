"""``pulsar.Consumer`` of one subscription on one partition, and the Reader a client makes (a
consumer of a non-durable subscription)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from engine.broker import Delivered
from engine.scheduler import Future
from engine.simulation.messages import BatchMessageId, ConsumerType, Message
from engine.simulation.session import Session, position_json, txn_json
from engine.simulation.transaction import Transaction
from reference import client as ct
from spec.history import object_id
from spec.types import Position, Subscription

__all__ = ["Consumer"]

T = TypeVar("T")


def _message_id(message: Message | Position) -> tuple[Position, int | None]:
    if isinstance(message, Message):
        return message.position, message.batch_index
    if isinstance(message, BatchMessageId):
        return message.position, message.batch_index
    return message, None


class Consumer:
    """``pulsar.Consumer`` of one subscription on one partition."""

    def __init__(
        self, client: Session, partition: str, subscription: str, consumer_id: int, consumer_type: ConsumerType
    ) -> None:
        self.client = client
        self.partition = partition
        self.subscription = subscription
        self.consumer_id = consumer_id
        self.consumer_type = consumer_type
        self.object = object_id("subscription", f"{partition}#{subscription}")

    def _service(self) -> Any:
        sub = self.client.broker.subscription(self.partition, self.subscription)
        if sub is None or not self.client.broker.up:
            return None
        if self.consumer_id not in sub.consumers and sub.ready:
            sub.add_consumer(self.consumer_id)  # reconnect after a broker restart
        return sub

    def reconnect(self) -> None:
        """The connection broke: the broker forgets this consumer (its unacked messages are
        redelivered) and the consumer subscribes again."""
        sub = self.client.broker.subscription(self.partition, self.subscription)
        if sub is not None and sub.ready and self.client.broker.up:
            sub.remove_consumer(self.consumer_id)
            sub.add_consumer(self.consumer_id)

    def unsubscribe_async(self) -> Future[None]:
        """``Consumer.unsubscribe()``: delete the subscription (its cursor, pending-ack log and
        delayed-index snapshots); refused with ``SubscriptionBusy`` while other consumers are connected."""

        def call() -> Future[None]:
            def handler() -> Future[None]:
                return self.client.broker.unsubscribe(self.partition, self.subscription, self.consumer_id)

            return self.client.network.call(handler)

        out = self.client.operation("unsubscribe", self.object, {}, call)

        def gone(done: Future[None]) -> None:
            if done.error is None:
                self.client.forget(self)

        out.add_done_callback(gone)
        return out

    def unsubscribe(self) -> None:
        self.client.wait(self.unsubscribe_async())

    def close(self) -> None:
        """``Consumer.close()``: its unacknowledged messages go to the other consumers."""
        sub = self.client.broker.subscription(self.partition, self.subscription)
        if sub is not None and sub.ready:
            sub.remove_consumer(self.consumer_id)
        self.client.forget(self)

    def _call(self, action: Callable[[Any], Future[T]]) -> Future[T]:
        def handler() -> Future[T]:
            sub = self._service()
            return Future() if sub is None or not sub.ready else action(sub)

        return self.client.network.call(handler)

    def receive_async(self, timeout_millis: int = 100, *, record_timeout: bool = False) -> Future[Message | None]:
        """``Consumer.receiveAsync`` with a wait: the next message, or None when none arrives in
        ``timeout_millis``.  ``record_timeout`` writes the wait into the history (``timeout_ms``):
        an empty receive then shows that the subscription had nothing for a consumer waiting that
        long (the delivery oracle's ``late-visibility`` judges it, DD-25), not only nothing at the
        moment it asked."""

        def render(got: Message | None) -> Any:
            if got is None:
                return None
            rendered = {
                "message": got.payload.decode(),
                "position": position_json(got.position),
                "redelivery_count": got.redelivery_count,
            }
            if got.batch_index is not None:
                rendered.update(batch_index=got.batch_index, batch_size=got.batch_size)
            return rendered

        def call() -> Future[Message | None]:
            out: Future[Message | None] = Future()

            def arrived(done: Future[Delivered | None]) -> None:
                if done.error is not None:
                    out.set_exception(done.error)
                    return
                d = done.result()
                out.set_result(
                    None
                    if d is None
                    else Message(
                        self.partition,
                        self.subscription,
                        d.position,
                        d.payload,
                        d.txn_id,
                        d.deliver_at,
                        d.redelivery_count,
                        d.batch_index,
                        d.batch_size,
                        d.partition_key,
                    )
                )

            self._call(lambda sub: sub.receive(self.consumer_id, timeout_millis)).add_done_callback(arrived)
            return out

        value = {"timeout_ms": timeout_millis} if record_timeout else {}
        return self.client.operation("receive", self.object, value, call, render)

    def receive(self, timeout_millis: int = 100) -> Message | None:
        """The next message, or None when none arrives in ``timeout_millis`` (Pulsar raises Timeout)."""
        return self.client.wait(self.receive_async(timeout_millis))

    def _ack_async(
        self, f: str, message: Message | Position, txn: Transaction | None, cumulative: bool
    ) -> Future[None]:
        position, batch_index = _message_id(message)
        value: dict[str, Any] = {"position": position_json(position)}
        if batch_index is not None:
            value["batch_index"] = batch_index
        if txn is not None:
            value["txn"] = txn_json(txn.txn_id)

        def ack() -> Future[None]:
            return self._call(
                lambda sub: sub.acknowledge(
                    self.consumer_id, position, None if txn is None else txn.txn_id, cumulative, batch_index
                )
            )

        if txn is None:
            call = ack
        else:
            sub = Subscription(self.partition, self.subscription)

            def call() -> Future[None]:
                return txn.use(ct.Ack(sub), f"{self.partition}#{self.subscription}", ack)

        return self.client.operation(f, self.object, value, call)

    def acknowledge_async(self, message: Message | Position, *, txn: Transaction | None = None) -> Future[None]:
        return self._ack_async("ack", message, txn, False)

    def acknowledge(self, message: Message | Position, *, txn: Transaction | None = None) -> None:
        self.client.wait(self.acknowledge_async(message, txn=txn))

    def acknowledge_cumulative_async(
        self, message: Message | Position, *, txn: Transaction | None = None
    ) -> Future[None]:
        return self._ack_async("ack_cumulative", message, txn, True)

    def acknowledge_cumulative(self, message: Message | Position, *, txn: Transaction | None = None) -> None:
        self.client.wait(self.acknowledge_cumulative_async(message, txn=txn))

    def negative_acknowledge_async(self, message: Message | Position) -> Future[None]:
        position = message.position if isinstance(message, Message) else message
        return self.client.operation(
            "negative_ack",
            self.object,
            {"position": position_json(position)},
            lambda: self._call(lambda sub: sub.redeliver(self.consumer_id, [position])),
        )

    def negative_acknowledge(self, message: Message | Position) -> None:
        self.client.wait(self.negative_acknowledge_async(message))

    def seek_async(self, publish_time: int) -> Future[None]:
        """``Consumer.seek(timestamp)``: the subscription restarts at the first message published at
        or after ``publish_time`` (PA-23), and this consumer reconnects (what the broker had queued
        for it is dropped).  Recorded as ``seek``."""

        def call() -> Future[None]:
            out: Future[None] = Future()

            def done(answer: Future[None]) -> None:
                if answer.error is not None:
                    out.set_exception(answer.error)
                    return
                self.reconnect()
                out.set_result(None)

            self._call(lambda sub: sub.seek_time(publish_time)).add_done_callback(done)
            return out

        return self.client.operation("seek", self.object, {"publish_time": publish_time}, call)

    def seek(self, publish_time: int) -> None:
        self.client.wait(self.seek_async(publish_time))

    def get_last_message_id_async(self) -> Future[Position]:
        """``Consumer.get_last_message_id()``: the last dispatchable position of the partition
        (TB-18), never past its ``max_read_position``.  Recorded as ``get_last_message_id``."""

        def call() -> Future[Position]:
            return self.client.network.call(lambda: self.client.broker.get_last_message_id(self.partition))

        return self.client.operation(
            "get_last_message_id", self.object, {}, call, lambda got: {"position": position_json(got)}
        )

    def get_last_message_id(self) -> Position:
        return self.client.wait(self.get_last_message_id_async())

    def check_position_in_pending_ack_async(self, message: Message | Position) -> Future[str]:
        """The admin API's ``checkPositionInPendingAckState`` for this subscription (PA-21): where
        the message stands in its pending ack (``PendingAck``, ``MarkDelete``, ``NotInPendingAck``,
        ``PendingAckNotReady``, ``InvalidPosition``).  An admin request, recorded all the same (as
        ``check_position_in_pending_ack``) so the history shows what it answered."""
        position, batch_index = _message_id(message)
        value: dict[str, Any] = {"position": position_json(position)}
        if batch_index is not None:
            value["batch_index"] = batch_index

        def call() -> Future[str]:
            out: Future[str] = Future()

            def answered(done: Future[Any]) -> None:
                if done.error is not None:
                    out.set_exception(done.error)
                else:
                    out.set_result(done.result().value)

            self.client.network.call(
                lambda: self.client.broker.check_position_in_pending_ack(
                    self.partition, self.subscription, position, batch_index
                )
            ).add_done_callback(answered)
            return out

        return self.client.operation(
            "check_position_in_pending_ack", self.object, value, call, lambda got: {"state": got}
        )

    def check_position_in_pending_ack(self, message: Message | Position) -> str:
        return self.client.wait(self.check_position_in_pending_ack_async(message))

    def redeliver_unacknowledged_messages_async(self) -> Future[None]:
        return self.client.operation(
            "redeliver_unacknowledged",
            self.object,
            {},
            lambda: self._call(lambda sub: sub.redeliver(self.consumer_id, None)),
        )

    def redeliver_unacknowledged_messages(self) -> None:
        self.client.wait(self.redeliver_unacknowledged_messages_async())
