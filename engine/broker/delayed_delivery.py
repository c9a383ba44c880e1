"""What a subscription does with delayed messages: Pulsar's dispatcher and its delayed-delivery
tracker (:mod:`engine.delayed.service` over :mod:`reference.delayed`), or the partition's shared
index (DD-30, an engine option).

Only Shared and Key_Shared subscriptions delay messages, as in Pulsar.  The tracker is made when
the first delayed message arrives, as Pulsar's dispatcher makes it; a cursor whose properties name
buckets has a tracker to recover at load (DD-24: from its snapshot ledgers and those properties).
The cursor's mark-delete position is the tracker's trim input (DD-22); a seek clears it (DD-23),
and so does an unsubscribe, which deletes its snapshots (or, without a live tracker, the ones the
cursor's properties name, CP4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from engine.broker.component import BrokerHost
from engine.delayed.service import DelayedDeliveryService
from engine.delayed.shared import TopicDelayedIndex
from engine.storage.ledger import ManagedCursor
from reference import delayed as dl
from reference import pending_ack as pa
from spec.types import Position

__all__ = ["DelayedDelivery", "DelayedOwner", "DelayedTopic"]


class DelayedTopic(Protocol):
    """What delayed delivery needs of the partition: its name and its shared delayed index."""

    name: str
    delayed_index: TopicDelayedIndex | None

    def shared_delayed_index(self) -> TopicDelayedIndex: ...


class DelayedOwner(Protocol):
    """The subscription whose delayed messages these are: its dispatcher reads when messages fall
    due, it reloads when a snapshot write failed, and what the tracker's own events raise is
    contained as its failure."""

    def dispatch(self) -> None: ...

    def reload(self) -> None: ...


class DelayedDelivery:
    """The delayed messages of one subscription: its tracker, or its share of the partition's index."""

    def __init__(
        self,
        host: BrokerHost,
        topic: DelayedTopic,
        subscription: str,
        sub_type: pa.SubType,
        *,
        durable: bool,
        owner: DelayedOwner,
    ) -> None:
        """``owner``: the subscription (its ``dispatch`` is what a tracker's timer calls when
        messages fall due, its ``reload`` what a failed snapshot write calls)."""
        self.host = host
        self.owner = owner
        self.topic = topic
        self.subscription = subscription
        self.durable = durable
        self.enabled = host.config.delayed_delivery_enabled and sub_type in (pa.SubType.Shared, pa.SubType.Key_Shared)
        self.service: DelayedDeliveryService | None = None
        self._read_more: Callable[[], None] = owner.dispatch
        self._failed: Callable[[], None] = owner.reload
        # Snapshot-storage failures the next recovery meets (a fault: the bookies fail the reads).
        self._recovery_failures: dict[str, int] = {}

    @property
    def shares_index(self) -> bool:
        """Whether the delayed messages wait in the partition's shared index (the broker's
        ``shared_delayed_index`` option, DD-30) instead of a tracker of their own."""
        return self.host.shared_delayed_index and self.enabled and self.durable

    @property
    def tracker(self) -> dl.Tracker | None:
        """The tracker's state (None when there is no tracker)."""
        return self.service.state if self.service is not None else None

    def load(self, cursor: ManagedCursor) -> None:
        """The subscription loaded: the tracker of its last load goes, and one whose buckets the
        cursor's properties name is recovered now (DD-24)."""
        if self.service is not None:
            self.service.close()
        self.service = None
        if self.enabled and any(key.startswith(dl.BUCKET_PROPERTY_PREFIX) for key in cursor.properties):
            self.service = self._open(cursor)

    def tracker_for(self, cursor: ManagedCursor) -> DelayedDeliveryService:
        """The tracker, made (and recovered) now if it does not exist yet."""
        if self.service is None:
            self.service = self._open(cursor)
        return self.service

    def fail_next_recovery(self, operation: str, count: int) -> None:
        """The next recovery of this subscription's tracker meets ``count`` failed snapshot reads of
        ``operation`` (``metadata`` or ``load``); after its retries it falls back (DD-27)."""
        self._recovery_failures[operation] = self._recovery_failures.get(operation, 0) + count

    def _open(self, cursor: ManagedCursor) -> DelayedDeliveryService:
        failures, self._recovery_failures = self._recovery_failures, {}
        return DelayedDeliveryService.load(
            self.host.sim,
            self.host.store,
            self.host.config,
            cursor,
            partition=self.topic.name,
            subscription=self.subscription,
            read_more=self._read_more,
            failed=self._failed,
            observer=lambda: self.host.observer,
            async_create=self.host.delayed_async_create,
            storage_failures=failures,
            owner=self.owner,
        )

    def shared_index(self) -> TopicDelayedIndex | None:
        """The partition's shared index, when the subscription's delayed messages wait there."""
        return self.topic.shared_delayed_index() if self.shares_index else None

    def add_message(
        self, position: Position, deliver_at: int, shared: TopicDelayedIndex | None, cursor: ManagedCursor
    ) -> bool:
        """A delayed message was read: True if it waits (DD-2, DD-30), False to deliver it now."""
        if shared is not None:
            return shared.add_message(self.subscription, position, deliver_at)
        return self.tracker_for(cursor).add_message(position, deliver_at)

    def scheduled_messages(self, shared: TopicDelayedIndex | None) -> tuple[Position, ...]:
        """The delayed messages due now (DD-13)."""
        if shared is not None:
            return shared.scheduled_messages(self.subscription)
        if self.service is not None:
            return self.service.scheduled_messages()
        return ()

    def mark_delete_moved(self, position: Position) -> None:
        """The cursor's mark-delete position may have moved: the tracker's trim input (DD-22)."""
        if self.service is not None:
            self.service.mark_delete_moved(position)

    def clear(self) -> None:
        """A seek: the tracker was derived from the backlog the seek replaced (DD-23)."""
        if self.service is not None:
            self.service.clear()

    def close(self) -> None:
        """The subscription crashed: the tracker's timers and creations in flight are dropped."""
        if self.service is not None:
            self.service.close()

    def unsubscribe(self, cursor: ManagedCursor) -> None:
        """The subscription goes for good: it leaves the shared index, and its tracker's ``Clear``
        deletes every snapshot (DD-23, DL6); without a live tracker the cursor's bucket properties
        name what to delete (CP4)."""
        if self.shares_index and self.topic.delayed_index is not None:
            self.topic.delayed_index.unsubscribe(self.subscription)
        if self.service is not None:
            self.service.clear()
        else:
            DelayedDeliveryService.clean_residual(
                self.host.store, cursor, partition=self.topic.name, subscription=self.subscription
            )
