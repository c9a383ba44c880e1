"""Consumers, flow and push delivery: SUBSCRIBE, FLOW, CLOSE_CONSUMER, UNSUBSCRIBE, and MESSAGE out.

The subscription's dispatcher decides what each consumer gets (the buffer's dispatch rule, the
pending ack's filter, Key_Shared routing, the delayed tracker); the server spends the consumer's
FLOW permits on the engine's ``receive`` and sends what comes back.  A batch entry's messages that
the dispatcher handed out together travel as one MESSAGE, its ``ack_set`` naming them.  The server
checks only what Pulsar checks outside the machines: an exclusive subscription's second consumer,
a subscription type mismatch.

A consumer that has work (a FLOW, a redelivery, a message that arrived while it waited) is woken
with :meth:`Consumers.wake` and pumped by the loop's next turn (:meth:`Consumers.pump_woken`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial

from engine.broker import Broker, Delivered, SubscriptionService
from engine.recorder import RequestContext
from engine.scheduler import Future
from engine.serve.connection import Connection, Consumer, Network
from engine.serve.replies import Handler, Replies
from engine.serve.topics import TopicRegistry
from engine.serve.wire import UINT64, RequestError, ack_set, message_id, position_of, topic_name, wire_error
from engine.storage.ledger import InitialPosition, LedgerError
from spec.errors import ServerError
from spec.frame import Frame, encode_command, encode_frame
from spec.pb import PulsarApi_pb2 as api

__all__ = ["Consumers"]

T = api.BaseCommand
_RECEIVE_WAIT_MS = 3_600_000  # a consumer's pending receive re-arms after this (it never misses a message)


class Consumers:
    """The consumers of every connection, by the subscription's (server-wide) consumer id too."""

    def __init__(self, broker: Broker, topics: TopicRegistry, network: Network, replies: Replies) -> None:
        self.broker = broker
        self.topics = topics
        self.network = network
        self.replies = replies
        self._engine_ids = itertools.count(1)
        self._by_engine_id: dict[int, tuple[Connection, Consumer]] = {}
        self._woken: set[int] = set()  # engine ids of consumers to pump
        self._blocked: set[int] = set()  # engine ids of consumers blocked on their unacknowledged messages

    def handlers(self) -> dict[int, Handler]:
        return {
            T.SUBSCRIBE: self.subscribe,
            T.FLOW: self.flow,
            T.CLOSE_CONSUMER: self.close_consumer,
            T.UNSUBSCRIBE: self.unsubscribe,
        }

    # -- the consumers' lives ----------------------------------------------------------------------

    def subscribe(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.subscribe
        topic = topic_name(cmd.topic).full
        if not cmd.subscription.strip():
            # Pulsar's NamingException, which its broker answers as ProducerBusy.
            raise RequestError(ServerError.ProducerBusy, "Empty subscription name")
        if cmd.consumer_id in conn.consumers:
            existing = conn.consumers[cmd.consumer_id]
            if existing.partition == topic and existing.subscription == cmd.subscription:
                self.replies.send(conn, T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
                self.replies.done(conn, context, True)
                return
            raise RequestError(ServerError.ConsumerBusy, f"consumer id {cmd.consumer_id} is in use")
        if cmd.HasField("keySharedMeta") and cmd.keySharedMeta.keySharedMode != api.AUTO_SPLIT:
            raise RequestError(ServerError.NotAllowedError, "Key_Shared STICKY mode is not supported (AUTO_SPLIT is)")
        sub_type = api.CommandSubscribe.SubType.Name(cmd.subType)
        part = self.topics.partition_for(topic, create=cmd.force_topic_creation)
        if not self.broker.up or not part.ready:
            # As for PRODUCER: the client retries after a fresh lookup, instead of timing out.
            raise RequestError(ServerError.ServiceNotReady, f"topic {part.name} is not loaded")
        existing_sub = part.subscriptions.get(cmd.subscription)
        if existing_sub is not None and existing_sub.ready:
            if existing_sub.sub_type.name != sub_type:
                raise RequestError(ServerError.ConsumerBusy, "Subscription is of different type")
            if sub_type == "Exclusive" and existing_sub.consumers:
                raise RequestError(ServerError.ConsumerBusy, "Exclusive consumer is already connected")
        initial = (
            InitialPosition.EARLIEST if cmd.initialPosition == api.CommandSubscribe.Earliest else InitialPosition.LATEST
        )
        engine_id = next(self._engine_ids)
        start = position_of(cmd.start_message_id) if cmd.HasField("start_message_id") else None  # a reader's (PA-24)
        future = self.broker.subscribe(
            part.name, cmd.subscription, sub_type, initial, engine_id, durable=cmd.durable, start_message=start
        )
        consumer = Consumer(cmd.consumer_id, engine_id, part.name, cmd.subscription)

        def answered(f: Future[None]) -> None:
            if conn.closed:
                self._leave(consumer)
                return
            if f.error is not None:
                code, text = wire_error(f.error)
                self.replies.error(conn, T.SUBSCRIBE, frame.command, code, text)
            else:
                conn.consumers[cmd.consumer_id] = consumer
                self._by_engine_id[engine_id] = (conn, consumer)
                self.replies.send(conn, T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
            self.replies.done(conn, context, f.error is None)

        self.replies.when_done(conn, future, "answering SUBSCRIBE", answered)

    def close_consumer(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.close_consumer
        consumer = conn.consumers.get(cmd.consumer_id)
        if consumer is not None:
            self.drop(conn, consumer)
        self.replies.send(conn, T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
        self.replies.done(conn, context, True)

    def unsubscribe(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.unsubscribe
        consumer = self.find(conn, cmd.consumer_id)
        future = self.broker.unsubscribe(consumer.partition, consumer.subscription, consumer.engine_id)

        def answered(f: Future[None]) -> None:
            if f.error is None:
                conn.consumers.pop(consumer.consumer_id, None)
                consumer.closed = True
                self._by_engine_id.pop(consumer.engine_id, None)
                self.replies.send(conn, T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
            else:
                code, text = wire_error(f.error)
                self.replies.error(conn, T.UNSUBSCRIBE, frame.command, code, text)
            self.replies.done(conn, context, f.error is None)

        self.replies.when_done(conn, future, "answering UNSUBSCRIBE", answered)

    def find(self, conn: Connection, consumer_id: int) -> Consumer:
        """The connection's consumer ``consumer_id``; ConsumerNotFound if it has none."""
        consumer = conn.consumers.get(consumer_id)
        if consumer is None:
            raise RequestError(ServerError.ConsumerNotFound, f"Consumer {consumer_id} not found")
        return consumer

    def service(self, consumer: Consumer) -> SubscriptionService | None:
        """The consumer's subscription, None while it (or its topic, or the broker) is down."""
        part = self.broker.partitions.get(consumer.partition)
        if part is None or not self.broker.up:
            return None
        sub = part.subscriptions.get(consumer.subscription)
        return sub if sub is not None and sub.ready else None

    def _leave(self, consumer: Consumer) -> None:
        consumer.closed = True
        self._by_engine_id.pop(consumer.engine_id, None)
        sub = self.service(consumer)
        if sub is not None:
            sub.remove_consumer(consumer.engine_id)

    def drop(self, conn: Connection, consumer: Consumer) -> None:
        """The consumer leaves its subscription (what it held is redelivered) and its connection."""
        conn.consumers.pop(consumer.consumer_id, None)
        self._leave(consumer)

    def drop_all(self, conn: Connection) -> None:
        """Every consumer of a closing connection leaves."""
        for consumer in list(conn.consumers.values()):
            self.drop(conn, consumer)

    def reconnect(self, chosen: Callable[[Consumer], bool]) -> None:
        """Drop the chosen consumers and tell their clients to reconnect (CLOSE_CONSUMER, request id -1)."""
        for conn in self.network.connections():
            for consumer in [c for c in conn.consumers.values() if chosen(c)]:
                self.drop(conn, consumer)
                close = api.CommandCloseConsumer(consumer_id=consumer.consumer_id, request_id=UINT64)
                conn.send(encode_command(T(type=T.CLOSE_CONSUMER, close_consumer=close)))

    # -- push delivery -----------------------------------------------------------------------------

    def flow(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.flow
        consumer = conn.consumers.get(cmd.consumer_id)
        if consumer is not None:
            consumer.permits += cmd.messagePermits
            consumer.asked = consumer.asked or cmd.messagePermits > 0
            self._pump(conn, consumer)
        self.replies.done(conn, context, True)

    def asked(self, engine_id: int) -> bool:
        """Whether the client of the engine's consumer ``engine_id`` has asked for messages: its
        subscribe was answered and a FLOW gave it permits (the broker's ``consumer_asked``).  A
        consumer whose SUBSCRIBE answer the client never saw gets none, as under Pulsar, where a
        Shared dispatcher gives entries only to consumers with permits."""
        found = self._by_engine_id.get(engine_id)
        return found is not None and found[1].asked

    def wake(self, engine_id: int) -> None:
        """The consumer has work: the loop's next turn pumps it."""
        self._woken.add(engine_id)

    @property
    def woken(self) -> bool:
        """Whether a consumer waits to be pumped (the loop must not sleep)."""
        return bool(self._woken)

    def pump_woken(self) -> None:
        """Pump every woken consumer, until none is (pumping one may wake another)."""
        while self._woken:
            woken, self._woken = self._woken, set()
            for key in woken:
                found = self._by_engine_id.get(key)
                if found is None:
                    continue
                conn, consumer = found
                try:
                    self._pump(conn, consumer)
                except Exception as exc:  # this connection only: every other consumer is pumped on
                    self.network.crashed(conn, f"dispatching to consumer {consumer.consumer_id}", exc)

    def writable(self, conn: Connection) -> None:
        """The connection's output is down to its low water mark: its consumers are pumped again."""
        for consumer in conn.consumers.values():
            self._woken.add(consumer.engine_id)

    def unblock(self, partition: str, subscription: str) -> None:
        """Acks or redeliveries lowered what the subscription's consumers hold: those blocked on
        ``maxUnackedMessagesPerConsumer`` are pumped again (each checks its own count)."""
        for engine_id in list(self._blocked):
            found = self._by_engine_id.get(engine_id)
            if found is None:
                self._blocked.discard(engine_id)
            elif (found[1].partition, found[1].subscription) == (partition, subscription):
                self._woken.add(engine_id)

    def _may_dispatch(self, conn: Connection, consumer: Consumer, sub: SubscriptionService) -> bool:
        """Whether the consumer can take more now: its connection is writable, and a Shared or
        Key_Shared consumer holds fewer than ``maxUnackedMessagesPerConsumer`` unacknowledged
        messages (once blocked, until it is down to half, as Pulsar's consumer)."""
        if not conn.writable:
            return False  # woken by writable() when the output drains
        limit = self.broker.config.max_unacked_messages_per_consumer
        if limit <= 0 or sub.sub_type.name not in ("Shared", "Key_Shared"):
            return True
        slot = sub.consumers.get(consumer.engine_id)
        # The dispatcher counts an entry unacknowledged from the moment it queues it for this
        # consumer; what counts here is what went out to it (Pulsar's pending acks of a consumer).
        unacked = 0 if slot is None else len(slot.unacked) - len(slot.queued) - len(consumer.held)
        if consumer.blocked:
            consumer.blocked = unacked > limit // 2
        elif unacked >= limit:
            consumer.blocked = True
        if consumer.blocked:
            self._blocked.add(consumer.engine_id)
        else:
            self._blocked.discard(consumer.engine_id)
        return not consumer.blocked

    def _pump(self, conn: Connection, consumer: Consumer) -> None:
        """Spend the consumer's permits on the engine's receive; a batch entry's messages that the
        dispatcher handed out together travel as one MESSAGE (its ``ack_set`` says which)."""
        while consumer.permits > 0 and not consumer.closed and not conn.closed:
            sub = self.service(consumer)
            if sub is None or not self._may_dispatch(conn, consumer, sub):
                return
            if consumer.held:
                first = consumer.held.popleft()
            elif consumer.waiting is not None:
                return
            else:
                got = sub.receive(consumer.engine_id, _RECEIVE_WAIT_MS)
                if not got.done:
                    consumer.waiting = got
                    got.add_done_callback(partial(self._arrived, consumer))
                    return
                received = None if got.error is not None else got.result()
                if received is None:
                    continue
                first = received
            group = [first]
            if first.batch_index is not None:
                slot = sub.consumers.get(consumer.engine_id)
                while (
                    slot is not None and first.position in slot.queued and slot.queue[0][0].position == first.position
                ):
                    more = sub.receive(consumer.engine_id, _RECEIVE_WAIT_MS)
                    if not more.done or more.error is not None or more.result() is None:
                        break
                    nxt = more.result()
                    assert nxt is not None
                    group.append(nxt)
            self._deliver(conn, consumer, sub, group)

    def _arrived(self, consumer: Consumer, future: Future[Delivered | None]) -> None:
        if consumer.waiting is future:
            consumer.waiting = None
        if future.error is None and future.result() is not None:
            delivered = future.result()
            assert delivered is not None
            consumer.held.append(delivered)
        if not consumer.closed:
            self._woken.add(consumer.engine_id)

    def _deliver(self, conn: Connection, consumer: Consumer, sub: SubscriptionService, group: list[Delivered]) -> None:
        first = group[0]
        part = sub.partition
        assert part.ledger is not None
        try:
            # The entry is the message as the producer sent it (spec.topic_entry): sent as it is.
            stored = part.ledger.read_entry(first.position)
        except LedgerError as exc:
            # The entry cannot be read back: the consumer reconnects and the dispatcher hands what
            # it held out again (nothing is lost; it stays unacknowledged).
            self.network.close(conn, f"reading {first.position} of {part.name} failed: {exc}")
            return
        command = api.CommandMessage(
            consumer_id=consumer.consumer_id,
            message_id=message_id(first.position),
            redelivery_count=first.redelivery_count,
        )
        if first.batch_index is not None:
            indexes = sorted({d.batch_index for d in group if d.batch_index is not None})
            if len(indexes) < first.batch_size:
                command.ack_set.extend(ack_set(indexes, first.batch_size))
            consumer.permits -= first.batch_size
        else:
            consumer.permits -= 1
        faults = self.replies.faults
        if faults is None or not faults.dispatch(conn, consumer, sub, group, command, stored):
            conn.send(encode_frame(T(type=T.MESSAGE, message=command), stored))
