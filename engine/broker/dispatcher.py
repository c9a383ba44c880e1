"""A subscription's dispatcher: the consumers it hands entries to, and what it hands them.

A :class:`ConsumerSlot` is one connected consumer: the messages queued for it (a batch entry's
indexes one by one), the entries handed to it and not yet acknowledged (Pulsar's ``pendingAcks``),
the receives waiting, and for Key_Shared its hash range and the recently-joined bound.  A
:class:`Handout` is one dispatch of an entry, a :class:`Delivered` one message as the consumer gets it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.broker.key_shared import STICKY_KEY_HASH_RANGE
from engine.scheduler import Future
from spec.types import Position, TxnID

__all__ = ["ConsumerSlot", "Delivered", "Handout"]


@dataclass
class Delivered:
    """A message handed to a consumer."""

    position: Position
    payload: bytes
    txn_id: TxnID | None
    deliver_at: int | None
    redelivery_count: int
    batch_index: int | None = None  # the message's index in a batch entry
    batch_size: int = 1
    partition_key: str | None = None


@dataclass
class Handout:
    """One dispatch of an entry to a consumer: its messages (a batch's indexes) share one redelivery count."""

    position: Position
    redelivery_count: int | None = None  # taken when the first of its messages is received


@dataclass
class ConsumerSlot:
    consumer_id: int
    queue: collections.deque[tuple[Handout, int | None]] = field(default_factory=collections.deque)  # (entry, index)
    unacked: set[Position] = field(default_factory=set)  # entries handed out, as Pulsar's pendingAcks
    waiting: list[Future[Delivered | None]] = field(default_factory=list)
    hash_range_end: int = STICKY_KEY_HASH_RANGE  # Key_Shared: this consumer serves hashes up to here
    joined_after: Position | None = None  # Key_Shared: recently joined, held to entries up to here
    # How many queued messages each position has: an ack of a position that is not queued here
    # (the usual case with a real client's prefetched backlog) costs nothing instead of a queue walk.
    queued: collections.Counter[Position] = field(default_factory=collections.Counter)

    def push(self, handout: Handout, index: int | None) -> None:
        self.queue.append((handout, index))
        self.queued[handout.position] += 1

    def pop(self) -> tuple[Handout, int | None]:
        handout, index = self.queue.popleft()
        self._forget(handout.position)
        return handout, index

    def clear(self) -> None:
        self.queue.clear()
        self.queued.clear()

    def _forget(self, position: Position) -> None:
        self.queued[position] -= 1
        if not self.queued[position]:
            del self.queued[position]

    def drop(self, keep: Callable[[Position, int | None], bool]) -> None:
        """Forget queued messages ``keep`` rejects."""
        kept: collections.deque[tuple[Handout, int | None]] = collections.deque()
        for handout, index in self.queue:
            if keep(handout.position, index):
                kept.append((handout, index))
            else:
                self._forget(handout.position)
        self.queue = kept

    def drop_position(self, position: Position, keep: Callable[[Position, int | None], bool]) -> None:
        """:meth:`drop` when only messages of ``position`` can be rejected."""
        if position in self.queued:
            self.drop(keep)
