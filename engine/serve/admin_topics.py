"""The admin API's topics and subscriptions, read from and done by the broker (on its loop thread).

Every method here runs on the server's loop thread (:class:`~engine.serve.admin.LoopCalls`).  The
answers are Pulsar's JSON shapes (``TopicStats``, ``SubscriptionStats``, ``PublisherStats``,
``ConsumerStats``, ``PersistentTopicInternalStats``), filled from the broker's state: the managed
ledger's ledgers and cursors, the subscriptions' consumers and their unacknowledged entries, the
delayed trackers.  What the model does not measure is said so: rates are ``0.0`` (no rate is
sampled), and the counters count what the topic's ledgers hold now, not what passed since the
topic was loaded.

Changes go through the broker's own methods: a topic is created in the registry
(:class:`~engine.serve.topics.TopicRegistry`), deleted as the broker deletes a partition (its
subscriptions, its buffer's snapshot, its ledger), a subscription created as a durable cursor (its
type is the first consumer's, as in Pulsar), reset through the subscription's seek (PA-22, PA-23:
refused while a transaction holds a pending ack there) and skipped by acknowledging.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.broker import Partition, SubscriptionService
from engine.scheduler import Future
from engine.serve.admin import AdminError
from engine.serve.connection import Consumer
from engine.serve.topics import TC_ASSIGN_TOPIC
from engine.storage.ledger import InitialPosition, LedgerError, ManagedCursor, ManagedLedger
from reference import delayed as dl
from spec.topics import InvalidTopicName, TopicName, parse_topic
from spec.types import Position

if TYPE_CHECKING:
    from engine.serve.server import PulsarServer

__all__ = ["AdminTopics", "EntrySizes", "topic_name"]

CLUSTER = "standalone"  # the cluster name of a standalone Pulsar, which this one broker is
_MAX_SKIP = 1 << 20  # entries one skip request may acknowledge (each is a machine step)


def topic_name(tenant: str, namespace: str, local: str) -> TopicName:
    """The topic a REST path names; 412 for a name Pulsar refuses."""
    try:
        return parse_topic(f"persistent://{tenant}/{namespace}/{local}")
    except InvalidTopicName as exc:
        raise AdminError(412, f"Invalid topic name: {exc}") from None


@dataclass
class _Scanned:
    ledger: ManagedLedger
    last: Position  # the last entry whose size is counted
    sizes: dict[int, list[int]]  # ledger id -> [entries, bytes]


class EntrySizes:
    """The byte size of each ledger of each partition, read once per entry: the managed ledger
    keeps no sizes, so the entries appended since the last look are read and added."""

    def __init__(self) -> None:
        self._scanned: dict[str, _Scanned] = {}

    def of(self, part: Partition) -> dict[int, list[int]]:
        ledger = part.ledger
        if ledger is None:
            return {}
        scanned = self._scanned.get(part.name)
        if scanned is None or scanned.ledger is not ledger:
            scanned = self._scanned[part.name] = _Scanned(ledger, Position(-1, -1), {})
        live = {info.ledger_id for info in ledger.ledgers()}
        for gone in set(scanned.sizes) - live:
            del scanned.sizes[gone]
        last = ledger.last_confirmed()
        start = scanned.last.next() if scanned.last.ledger_id >= 0 else Position(min(live, default=0), 0)
        while scanned.last < last:
            entries = ledger.read(start, 1000)
            if not entries:
                break
            for entry in entries:
                slot = scanned.sizes.setdefault(entry.position.ledger_id, [0, 0])
                slot[0] += 1
                slot[1] += len(entry.data)
            scanned.last = entries[-1].position
            start = scanned.last.next()
        return scanned.sizes

    def forget(self, name: str) -> None:
        self._scanned.pop(name, None)


class AdminTopics:
    """Topics and subscriptions of one server, for the admin API."""

    def __init__(self, server: PulsarServer) -> None:
        self.server = server
        self.broker = server.broker
        self.registry = server.topics
        self.sizes = EntrySizes()

    # -- lookups ----------------------------------------------------------------------------------

    def _up(self) -> None:
        if not self.broker.up:
            raise AdminError(503, "the broker is restarting")

    def partitions_of(self, name: TopicName) -> int | None:
        """0 for a non-partitioned topic, the count for a partitioned one, None if unknown."""
        if name.full in self.broker.partitions and self.registry.topics.get(name.full, 0) == 0:
            return 0
        return self.registry.partitions_of(name)

    def partition(self, name: TopicName) -> Partition:
        """A loaded non-partitioned topic or partition; 404 if there is none, 503 while it reloads."""
        self._up()
        part = self.broker.partitions.get(name.full)
        if part is None or self.registry.topics.get(name.full, 0) > 0:
            raise AdminError(404, f"Topic {name.full} not found")
        if not part.ready:
            raise AdminError(503, f"Topic {name.full} is reloading")
        return part

    def parts_of(self, name: TopicName) -> list[Partition]:
        """The partitions of a partitioned topic, or the topic itself."""
        count = self.partitions_of(name)
        if count is None:
            raise AdminError(404, f"Topic {name.full} not found")
        if count == 0:
            return [self.partition(name)]
        return [self.partition(parse_topic(name.partition_name(i))) for i in range(count)]

    def namespaces(self) -> set[tuple[str, str]]:
        names = {("public", "default"), ("pulsar", "system")}
        for full in [*self.registry.topics, *self.broker.partitions]:
            name = parse_topic(full)
            names.add((name.tenant, name.namespace))
        return names

    def list_topics(self, tenant: str, namespace: str) -> list[str]:
        """Pulsar's ``getList``: non-partitioned topics and every partition, no system topic."""
        prefix = f"persistent://{tenant}/{namespace}/"
        return sorted(
            name
            for name in self.broker.partitions
            if name.startswith(prefix) and not name[len(prefix) :].startswith("__")
        )

    def list_partitioned(self, tenant: str, namespace: str) -> list[str]:
        prefix = f"persistent://{tenant}/{namespace}/"
        return sorted(name for name, n in self.registry.topics.items() if n > 0 and name.startswith(prefix))

    # -- create and delete ------------------------------------------------------------------------

    def create(self, name: TopicName, partitions: int) -> None:
        self._up()
        if partitions and name.partition is not None:
            raise AdminError(412, f"{name.full} is a partition: a partition cannot itself be partitioned")
        if name.full == TC_ASSIGN_TOPIC or name.full in self.registry.topics or name.full in self.broker.partitions:
            what = "Partitioned topic" if partitions else "This topic"
            raise AdminError(409, f"{what} already exists")
        try:
            self.registry.create_topic(name.full, partitions)
        except InvalidTopicName as exc:
            raise AdminError(412, str(exc)) from None

    def delete(self, name: TopicName, *, partitioned: bool, force: bool) -> Future[None] | None:
        """Delete a topic (every partition of a partitioned one); without ``force`` a topic with
        producers or connected consumers is refused (412), as Pulsar's non-forced delete."""
        self._up()
        count = self.partitions_of(name)
        if count is None or (partitioned and count == 0 and name.full not in self.registry.topics):
            raise AdminError(404, f"{'Partitioned topic' if partitioned else 'Topic'} {name.full} not found")
        if count > 0 and not partitioned:
            raise AdminError(
                409, f"{name.full} is a partitioned topic: delete it with DELETE .../{name.local}/partitions"
            )
        if count == 0 and partitioned:
            raise AdminError(409, f"{name.full} is not a partitioned topic: delete it with DELETE .../{name.local}")
        parts = self.parts_of(name)
        busy = [p.name for p in parts if self._publishers(p.name) or any(s.consumers for s in p.subscriptions.values())]
        if busy and not force:
            raise AdminError(412, f"Topic has active producers/subscriptions: {', '.join(busy)}")
        for part in parts:
            self._delete_partition(part)
        self.registry.forget_topic(name.full)
        return None

    def _delete_partition(self, part: Partition) -> None:
        if not all(s.ready for s in part.subscriptions.values()):
            raise AdminError(503, f"a subscription of {part.name} is reloading")
        try:
            done = part.delete()  # its producers and consumers are told to reconnect (an unload)
        except LedgerError as exc:
            part.reload()
            raise AdminError(500, f"deleting {part.name} failed: {exc}") from None
        if not done:
            raise AdminError(500, f"{part.name}: a write failed while deleting it; it reloads")
        self.broker.partitions.pop(part.name, None)
        self.sizes.forget(part.name)

    # -- subscriptions ----------------------------------------------------------------------------

    def subscriptions(self, name: TopicName) -> list[str]:
        out: set[str] = set()
        for part in self.parts_of(name):
            out |= self._subscription_names(part)
        return sorted(out)

    @staticmethod
    def _subscription_names(part: Partition) -> set[str]:
        names = set(part.subscriptions)
        if part.ledger is not None:
            names |= {c.name for c in part.ledger.cursors()}
        return names

    def create_subscription(self, name: TopicName, subscription: str, start: Position | str) -> None:
        """A durable cursor at ``start`` ("latest", "earliest" or a message id) on every partition."""
        if not subscription:
            raise AdminError(412, "an empty subscription name")
        parts = self.parts_of(name)
        if any(subscription in self._subscription_names(p) for p in parts):
            raise AdminError(409, f"Subscription {subscription} already exists")
        for part in parts:
            assert part.ledger is not None
            initial = InitialPosition.EARLIEST if start == "earliest" else InitialPosition.LATEST
            try:
                cursor = part.ledger.open_cursor(subscription, initial)
                if isinstance(start, Position):
                    cursor.reset(start)
            except LedgerError as exc:
                raise AdminError(500, f"creating the cursor {subscription} of {part.name} failed: {exc}") from None

    def _cursor(self, part: Partition, subscription: str) -> tuple[SubscriptionService | None, ManagedCursor]:
        """The loaded subscription (None if no consumer came since the broker started) and its cursor."""
        sub = part.subscriptions.get(subscription)
        if sub is not None:
            if not sub.ready or sub.cursor is None:
                raise AdminError(503, f"Subscription {subscription} of {part.name} is reloading")
            return sub, sub.cursor
        assert part.ledger is not None
        for cursor in part.ledger.cursors():
            if cursor.name == subscription:
                return None, cursor
        raise AdminError(404, f"Subscription {subscription} not found")

    def delete_subscription(self, name: TopicName, subscription: str, *, force: bool) -> None:
        parts = self.parts_of(name)
        found = [(part, self._cursor(part, subscription)) for part in parts]
        if not force and any(sub is not None and sub.consumers for _, (sub, _) in found):
            raise AdminError(412, "Subscription has active connected consumers")
        for part, (sub, _) in found:
            self.server.consumers.reconnect(_of(part.name, subscription))
            try:
                if sub is not None:
                    sub.delete()
                    part.subscriptions.pop(subscription, None)
                else:
                    assert part.ledger is not None
                    part.ledger.delete_cursor(subscription)
                    log_name = f"{part.name}-{subscription}__transaction_pending_ack"
                    if self.broker.store.exists(log_name):
                        self.broker.store.delete(log_name)
            except LedgerError as exc:
                part.reload()
                raise AdminError(500, f"deleting {subscription} of {part.name} failed: {exc}") from None

    def reset_cursor(
        self, name: TopicName, subscription: str, *, to: Position | str | None, time_ms: int | None
    ) -> Future[None] | None:
        """Reset the subscription to a message id ("earliest", "latest" or a position) or a publish
        time (PA-22, PA-23); its consumers reconnect, as after a seek."""
        parts = self.parts_of(name)
        futures: list[Future[None]] = []
        for part in parts:
            sub, cursor = self._cursor(part, subscription)
            position = None if to is None else _resolve(part, to)
            if sub is None:
                self._reset_unloaded(part, subscription, cursor, position, time_ms)
                continue
            future = sub.seek(position) if position is not None else sub.seek_time(time_ms or 0)

            future.add_done_callback(self._reconnect_after(_of(part.name, subscription)))
            futures.append(future)
        return _all(futures)

    def _reconnect_after(self, chosen: Callable[[Consumer], bool]) -> Callable[[Future[None]], None]:
        def reconnect(f: Future[None]) -> None:
            if f.error is None:
                self.server.consumers.reconnect(chosen)

        return reconnect

    def _reset_unloaded(
        self, part: Partition, subscription: str, cursor: ManagedCursor, to: Position | None, time_ms: int | None
    ) -> None:
        """A cursor no consumer has loaded: nothing else (no pending ack, no dispatcher) holds a view
        of it, unless a pending-ack log is left from before, which the subscription must read first."""
        if self.broker.store.exists(f"{part.name}-{subscription}__transaction_pending_ack"):
            raise AdminError(
                412, f"Subscription {subscription} has a pending-ack log: connect a consumer (it loads), then reset"
            )
        if to is None:
            earlier = [p for p, m in part.messages.items() if m.publish_time < (time_ms or 0)]  # as seek_time
            assert part.ledger is not None
            to = Position(max(earlier).ledger_id, max(earlier).entry_id + 1) if earlier else Position(0, 0)
        try:
            cursor.reset(to)
        except LedgerError as exc:
            raise AdminError(500, f"resetting {subscription} of {part.name} failed: {exc}") from None

    def skip(self, name: TopicName, subscription: str, count: int | None) -> Future[None] | None:
        """Acknowledge the next ``count`` entries holding messages (None: all, ``skip_all``)."""
        futures: list[Future[None]] = []
        for part in self.parts_of(name):
            sub, cursor = self._cursor(part, subscription)
            if sub is None:
                raise AdminError(412, f"Subscription {subscription} is not loaded: connect a consumer, then skip")
            assert part.state is not None
            limit = part.state.max_read_position
            chosen = [
                p
                for p in sorted(part.messages)
                if p <= limit and not part.messages[p].entry.kind.is_marker and not cursor.is_deleted(p)
            ][: _MAX_SKIP if count is None else min(count, _MAX_SKIP)]
            futures.extend(sub.acknowledge(0, p, None, False) for p in chosen)
        return _all(futures)

    # -- stats ------------------------------------------------------------------------------------

    def stats(self, part: Partition) -> dict[str, Any]:
        """Pulsar's ``TopicStats`` of one partition (or non-partitioned topic)."""
        sizes = self.sizes.of(part)
        stored = sum(size for _, size in sizes.values())
        messages = sum(m.batch_size for m in part.messages.values() if not m.entry.kind.is_marker)
        subscriptions = {name: self._subscription_stats(part, name) for name in sorted(self._subscription_names(part))}
        return {
            "msgRateIn": 0.0,
            "msgThroughputIn": 0.0,
            "msgRateOut": 0.0,
            "msgThroughputOut": 0.0,
            "bytesInCounter": stored,
            "msgInCounter": messages,
            "bytesOutCounter": 0,
            "msgOutCounter": 0,
            "averageMsgSize": stored / messages if messages else 0.0,
            "msgChunkPublished": False,
            "storageSize": stored,
            "backlogSize": max((s["backlogSize"] for s in subscriptions.values()), default=0),
            "offloadedStorageSize": 0,
            "publishers": [self._publisher(conn, p) for conn, p in self._publishers(part.name)],
            "waitingPublishers": 0,
            "subscriptions": subscriptions,
            "replication": {},
            "deduplicationStatus": "Disabled",
            "nonContiguousDeletedMessagesRanges": sum(
                s["nonContiguousDeletedMessagesRanges"] for s in subscriptions.values()
            ),
        }

    def _publishers(self, partition: str) -> list[tuple[Any, Any]]:
        return [
            (conn, p)
            for conn in self.server.network.connections()
            for p in conn.producers.values()
            if p.partition == partition
        ]

    @staticmethod
    def _publisher(conn: Any, producer: Any) -> dict[str, Any]:
        return {
            "producerId": producer.producer_id,
            "producerName": producer.name,
            "accessMode": "Shared",
            "msgRateIn": 0.0,
            "msgThroughputIn": 0.0,
            "averageMsgSize": 0.0,
            "address": f"/{conn.peer}",
            "pendingSends": len(producer.receipts),
            "metadata": {},
        }

    def _subscription_stats(self, part: Partition, name: str) -> dict[str, Any]:
        sub, cursor = self._cursor(part, name)
        backlog = [
            p
            for p, m in part.messages.items()
            if p > cursor.mark_delete_position and not m.entry.kind.is_marker and not cursor.is_deleted(p)
        ]
        delayed = self._delayed(part, sub)
        consumers = []
        unacked = 0
        for conn in self.server.network.connections():
            for consumer in conn.consumers.values():
                if (consumer.partition, consumer.subscription) != (part.name, name):
                    continue
                slot = sub.consumers.get(consumer.engine_id) if sub is not None else None
                held = len(slot.unacked) if slot is not None else 0
                unacked += held
                consumers.append(
                    {
                        "consumerId": consumer.consumer_id,
                        "msgRateOut": 0.0,
                        "msgThroughputOut": 0.0,
                        "msgRateRedeliver": 0.0,
                        "availablePermits": consumer.permits,
                        "unackedMessages": held,
                        "blockedConsumerOnUnackedMsgs": False,
                        "address": f"/{conn.peer}",
                        "metadata": {},
                    }
                )
        return {
            "msgRateOut": 0.0,
            "msgThroughputOut": 0.0,
            "bytesOutCounter": 0,
            "msgOutCounter": 0,
            "msgRateRedeliver": 0.0,
            "msgBacklog": len(backlog),
            "msgBacklogNoDelayed": max(0, len(backlog) - delayed),
            "backlogSize": self._backlog_bytes(part, backlog),
            "blockedSubscriptionOnUnackedMsgs": False,
            "msgDelayed": delayed,
            "unackedMessages": unacked,
            "type": sub.sub_type.name if sub is not None else "None",
            "msgRateExpired": 0.0,
            "totalMsgExpired": 0,
            "consumers": consumers,
            "isDurable": sub.durable if sub is not None else True,
            "isReplicated": False,
            "nonContiguousDeletedMessagesRanges": len(cursor.individually_deleted()),
            "subscriptionProperties": {},
        }

    def _backlog_bytes(self, part: Partition, backlog: list[Position]) -> int:
        if not backlog or part.ledger is None:
            return 0
        ledgers = {p.ledger_id for p in backlog}
        sizes = self.sizes.of(part)
        # Whole ledgers of the backlog counted at their average entry size (as Pulsar estimates it).
        total = 0.0
        for ledger_id in ledgers:
            entries, size = sizes.get(ledger_id, [0, 0])
            if entries:
                total += size / entries * sum(1 for p in backlog if p.ledger_id == ledger_id)
        return int(total)

    @staticmethod
    def _delayed(part: Partition, sub: SubscriptionService | None) -> int:
        if sub is None:
            return 0
        if sub.delays.shares_index and part.delayed_index is not None:
            return int(part.delayed_index.index.number_of_delayed_messages(sub.name))
        tracker = sub.tracker
        return dl.number_of_delayed_messages(tracker) if tracker is not None else 0

    def internal_stats(self, part: Partition) -> dict[str, Any]:
        """Pulsar's ``PersistentTopicInternalStats``: the managed ledger's ledgers and its cursors."""
        ledger = part.ledger
        assert ledger is not None
        sizes = self.sizes.of(part)
        infos = ledger.ledgers()
        current = infos[-1]
        last = ledger.last_confirmed()
        return {
            "entriesAddedCounter": sum(i.entries for i in infos),
            "numberOfEntries": sum(i.entries for i in infos),
            "totalSize": sum(size for _, size in sizes.values()),
            "currentLedgerEntries": current.entries,
            "currentLedgerSize": sizes.get(current.ledger_id, [0, 0])[1],
            "lastLedgerCreatedTimestamp": "",
            "waitingCursorsCount": 0,
            "pendingAddEntriesCount": 0,
            "lastConfirmedEntry": f"{last.ledger_id}:{last.entry_id}",
            "state": "LedgerOpened",
            "ledgers": [
                {
                    "ledgerId": i.ledger_id,
                    "entries": i.entries,
                    "size": sizes.get(i.ledger_id, [0, 0])[1],
                    "offloaded": False,
                    "underReplicated": False,
                }
                for i in infos
            ],
            "cursors": {c.name: self._cursor_stats(part, c) for c in sorted(ledger.cursors(), key=lambda c: c.name)},
            "schemaLedgers": [],
            "compactedLedger": {
                "ledgerId": -1,
                "entries": -1,
                "size": -1,
                "offloaded": False,
                "underReplicated": False,
            },
        }

    @staticmethod
    def _cursor_stats(part: Partition, cursor: ManagedCursor) -> dict[str, Any]:
        mark = cursor.mark_delete_position
        deleted = cursor.individually_deleted()
        sub = part.subscriptions.get(cursor.name)
        read = sub.dispatcher.read_after.next() if sub is not None else mark.next()
        return {
            "markDeletePosition": f"{mark.ledger_id}:{mark.entry_id}",
            "readPosition": f"{read.ledger_id}:{read.entry_id}",
            "waitingReadOp": False,
            "pendingReadOps": 0,
            "messagesConsumedCounter": 0,
            "cursorLedger": -1,
            "cursorLedgerLastEntry": -1,
            "individuallyDeletedMessages": _ranges(deleted),
            "lastLedgerSwitchTimestamp": "",
            "state": "Open",
            "active": bool(sub is not None and sub.consumers),
            "numberOfEntriesSinceFirstNotAckedMessage": 0,
            "totalNonContiguousDeletedMessagesRange": len(deleted),
            "subscriptionHavePendingRead": False,
            "subscriptionHavePendingReplayRead": False,
            "properties": {},
        }


def _of(partition: str, subscription: str) -> Callable[[Consumer], bool]:
    """Chooses the consumers of one subscription of one partition."""
    return lambda c: c.partition == partition and c.subscription == subscription


def _resolve(part: Partition, to: Position | str) -> Position:
    """A message id as a position of ``part``: "earliest" is its first live entry, "latest" the
    position after its last (the cursor moves a position that names no entry to the next one)."""
    if isinstance(to, Position):
        return to
    assert part.ledger is not None
    if to == "latest":
        return part.ledger.last_confirmed().next()
    return Position(part.ledger.ledgers()[0].ledger_id, 0)


def _ranges(positions: tuple[Position, ...]) -> str:
    """Pulsar's ``individuallyDeletedMessages``: open-closed ranges ``[(L:E1..L:E2]]``."""
    out: list[str] = []
    for position in sorted(positions):
        before = f"{position.ledger_id}:{position.entry_id - 1}"
        out.append(f"({before}..{position.ledger_id}:{position.entry_id}]")
    return "[" + ",".join(out) + "]"


def _all(futures: list[Future[None]]) -> Future[None] | None:
    """One future done when every one of ``futures`` is (the first error wins); None if none."""
    if not futures:
        return None
    done: Future[None] = Future()
    left = [len(futures)]

    def one(f: Future[None]) -> None:
        if done.done:
            return
        if f.error is not None:
            done.set_exception(f.error)
            return
        left[0] -= 1
        if not left[0]:
            done.set_result(None)

    for future in futures:
        future.add_done_callback(one)
    return done
