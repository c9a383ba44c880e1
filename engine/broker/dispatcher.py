"""A subscription's dispatcher: the consumers it hands entries to, and what it hands them.

The dispatcher reads forward from its read position.  What may be read is the buffer's decision
(:func:`reference.buffer.dispatch`); the subscription filters it (the pending ack's
``message_state``, the delayed tracker) and gives the dispatcher what is to go out now
(:meth:`Dispatcher.hand_out`), with what waits in its replay set (redeliveries, due delayed
messages, entries held for a recently joined Key_Shared consumer) ahead of it.  Exclusive and
Failover subscriptions have one active consumer (the lowest id); Shared ones round-robin;
Key_Shared ones route by key (:mod:`.key_shared`).  Whether a message is still to be delivered
is the pending ack's question, asked through ``deliverable``.

A :class:`ConsumerSlot` is one connected consumer: the messages queued for it (a batch entry's
indexes one by one), the entries handed to it and not yet acknowledged (Pulsar's ``pendingAcks``),
the receives waiting, and for Key_Shared its hash range and the recently-joined bound.  A
:class:`Handout` is one dispatch of an entry, a :class:`Delivered` one message as the consumer gets it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from engine.broker.entries import StoredMessage
from engine.broker.key_shared import (
    STICKY_KEY_HASH_RANGE,
    hand_over_top_range,
    select,
    split_range,
    sticky_key_hash,
)
from engine.broker.redelivery import RedeliveryTracker
from engine.scheduler import Future, Simulation
from reference import buffer as tb
from reference import pending_ack as pa
from spec.types import EARLIEST, Position, TxnID

__all__ = ["ConsumerSlot", "Delivered", "Dispatcher", "Entries", "Handout"]

# The messages of an entry still to be delivered: ``[None]`` for a single message, else batch indexes.
Deliverable = Callable[[Position], list[int | None]]


class Entries(Protocol):
    """What the dispatcher reads of its partition: the messages written to it, by position."""

    messages: dict[Position, StoredMessage]


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
    """One dispatch of an entry to a consumer: its messages (a batch's indexes) share one redelivery count.
    The entry is the one read when it was dispatched: once read it is the consumer's, even if retention
    deletes its ledger before the application receives it (a Reader's cursor holds no ledger back)."""

    position: Position
    message: StoredMessage
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


class Dispatcher:
    """The consumers of one subscription, its read position, and what is handed out to whom."""

    def __init__(
        self,
        sim: Simulation,
        entries: Entries,
        sub_type: pa.SubType,
        deliverable: Deliverable,
        *,
        asked: Callable[[int], bool] = lambda _: True,
    ) -> None:
        self.sim = sim
        self.entries = entries
        self.sub_type = sub_type
        self.deliverable = deliverable
        # Whether a consumer has asked for messages (a FLOW): Pulsar's Shared and Key_Shared
        # dispatchers give entries only to consumers with permits.  One whose client never asked
        # (its subscribe's answer was lost, and the client gave up on it) would otherwise hold what
        # it was given until it left (found in CI: a subscription silent through a final drain).
        self.asked = asked
        self.consumers: dict[int, ConsumerSlot] = {}
        self.read_after: Position = EARLIEST
        # The buffer state and read position of the last dispatch that consulted the buffer.
        self._dispatched: tuple[tb.BufferState | None, Position] = (None, EARLIEST)
        self.replay: set[Position] = set()
        self.redeliveries = RedeliveryTracker()
        self._rr = 0

    # -- reading ----------------------------------------------------------------------------------

    def rewind(self, read_after: Position, *, forget_joined: bool = False) -> None:
        """Read again after ``read_after`` (a load, a seek): nothing is queued or handed out any more;
        ``forget_joined``: no consumer counts as recently joined either (a seek)."""
        self.read_after = read_after
        self._dispatched = (None, EARLIEST)
        self.replay = set()
        for slot in self.consumers.values():
            slot.clear()
            slot.unacked.clear()
            if forget_joined:
                slot.joined_after = None

    def read(self, buffer: tb.BufferState) -> tb.Dispatch:
        """What the buffer lets the dispatcher read after its read position (TB-15 .. TB-17)."""
        if buffer is self._dispatched[0] and self.read_after == self._dispatched[1]:
            # The buffer has not stepped and nothing was read since the last call, which read every
            # entry up to the readable limit: the buffer's answer would be empty.
            return tb.Dispatch((), ())
        return tb.dispatch(buffer, self.read_after)

    def advance(self, buffer: tb.BufferState, seen: Sequence[Position]) -> None:
        """What :meth:`read` returned was read: the read position moves past it."""
        if seen:
            self.read_after = max(self.read_after, *seen)
        self._dispatched = (buffer, self.read_after)

    # -- consumers --------------------------------------------------------------------------------

    def active(self) -> list[ConsumerSlot]:
        """The consumers entries go to: the lowest id for Exclusive and Failover, else every one."""
        slots = sorted(self.consumers.values(), key=lambda s: s.consumer_id)
        if self.sub_type in (pa.SubType.Exclusive, pa.SubType.Failover):
            return slots[:1]
        if self.sub_type is pa.SubType.Shared:
            # Round-robin over the consumers that asked; Key_Shared routes by every consumer's
            # range and holds what goes to one that has not asked (_route).
            return [s for s in slots if self.asked(s.consumer_id)]
        return slots

    def add_consumer(self, consumer_id: int, mark_delete: Position | None) -> None:
        """A consumer connects (a Key_Shared one takes half of the widest hash range)."""
        if consumer_id not in self.consumers:
            slot = ConsumerSlot(consumer_id)
            if self.sub_type is pa.SubType.Key_Shared:
                slot.hash_range_end = split_range(self.consumers.values())
                # Pulsar's recently-joined rule (the classic Key_Shared dispatcher): while entries
                # read before it joined are unacknowledged, a new consumer may get only those, so a
                # key it takes over does not overtake messages of that key still held elsewhere.
                if self.consumers and mark_delete is not None and self.read_after > mark_delete:
                    slot.joined_after = self.read_after
            self.consumers[consumer_id] = slot

    def hand_over(self, slot: ConsumerSlot) -> None:
        """A consumer left: its hash range and its unacknowledged entries go to the others, and its
        waiting receives get nothing."""
        if self.sub_type is pa.SubType.Key_Shared:
            hand_over_top_range(slot, self.consumers.values())
        self.replay.update(slot.unacked)
        for waiter in slot.waiting:
            waiter.set_result(None)

    def end_receives(self) -> None:
        """Every waiting receive of every consumer gets nothing (the subscription goes)."""
        for waiter in [w for slot in self.consumers.values() for w in slot.waiting]:
            waiter.set_result(None)

    def crash(self) -> None:
        """The broker's memory of the consumers and their redelivery counts is gone."""
        self.consumers = {}
        self.redeliveries.clear()

    # -- handing out ------------------------------------------------------------------------------

    def hand_out(self, fresh: list[Position], active: Sequence[ConsumerSlot], mark_delete: Position | None) -> None:
        """Queue the replay set, then ``fresh``, for the consumers each entry is routed to, and serve
        the receives waiting.  An entry neither acked nor pending in a txn goes out (5.9); one still
        with a consumer, or held for a recently joined one, does not."""
        outgoing = sorted(self.replay) + fresh
        self.replay = set()
        self.release_joined(mark_delete)
        for position in outgoing:
            message = self.entries.messages.get(position)
            if message is None:
                # Its ledger was deleted since it was read (retention follows the durable cursors
                # only): a replayed entry that can no longer be read is skipped, as Pulsar skips it.
                continue
            indexes = self.deliverable(position)
            if not indexes:
                continue  # acked, or pending in a txn: filtered (5.9)
            if any(position in s.unacked for s in self.consumers.values()):
                continue
            slot = self._route(position, message, active)
            if slot is None:
                self.replay.add(position)  # held for a recently joined consumer
                continue
            slot.unacked.add(position)
            handout = Handout(position, message)
            for i in indexes:
                slot.push(handout, i)
        for slot in active:
            self._serve(slot)

    def _route(self, position: Position, message: StoredMessage, active: Sequence[ConsumerSlot]) -> ConsumerSlot | None:
        """The consumer an entry goes to, or None while Key_Shared holds it back."""
        if self.sub_type is not pa.SubType.Key_Shared:
            slot = active[self._rr % len(active)]
            self._rr += 1
            return slot
        chosen = select(active, sticky_key_hash(message.partition_key))
        if chosen.joined_after is not None and position > chosen.joined_after:
            return None
        if not self.asked(chosen.consumer_id):
            return None  # held until it asks, or leaves and its range goes to another
        return chosen

    def release_joined(self, mark_delete: Position | None) -> bool:
        """A recently joined consumer is released once everything read before it joined is
        acknowledged (the mark-delete position reached it); True if one was."""
        released = False
        if mark_delete is not None:
            for slot in self.consumers.values():
                if slot.joined_after is not None and mark_delete >= slot.joined_after:
                    slot.joined_after = None
                    released = True
        return released

    def _serve(self, slot: ConsumerSlot) -> None:
        while slot.waiting and slot.queue:
            handout, index = slot.pop()
            waiter = slot.waiting.pop(0)
            waiter.set_result(self._delivered(handout, index))

    def _delivered(self, handout: Handout, index: int | None) -> Delivered:
        position = handout.position
        message = handout.message
        if handout.redelivery_count is None:
            handout.redelivery_count = self.redeliveries.hand_out(position)
        if message.batch is None or index is None:
            return Delivered(
                position,
                message.payload,
                message.entry.txn_id,
                message.deliver_at,
                handout.redelivery_count,
                partition_key=message.partition_key,
            )
        single = message.batch[index]
        return Delivered(
            position,
            single.payload,
            message.entry.txn_id,
            message.deliver_at,
            handout.redelivery_count,
            batch_index=index,
            batch_size=message.batch_size,
            partition_key=single.partition_key,
        )

    def receive(self, slot: ConsumerSlot, wait_ms: int) -> Future[Delivered | None]:
        """The consumer's next queued message, or the first to be queued within ``wait_ms`` (None
        if none is)."""
        if slot.queue:
            return Future.completed(self._delivered(*slot.pop()))
        waiter: Future[Delivered | None] = Future()
        slot.waiting.append(waiter)

        def expire() -> None:
            if waiter in slot.waiting:
                slot.waiting.remove(waiter)
                waiter.set_result(None)

        self.sim.schedule(wait_ms, expire)
        return waiter

    # -- acknowledgements and redeliveries --------------------------------------------------------

    def acked(self, positions: Iterable[Position], mark_delete: Position | None) -> bool:
        """The cursor acknowledged ``positions``: what of them is no longer deliverable leaves the
        consumers' queues.  True if that released a recently joined consumer."""
        for position in positions:
            live = self.deliverable(position)

            def keep(p: Position, i: int | None, position: Position = position, live: list[int | None] = live) -> bool:
                return p != position or i in live

            for slot in self.consumers.values():
                # 5.9: a batch entry stays with its consumer until no index of it is left PENDING.
                if not live:
                    slot.unacked.discard(position)
                slot.drop_position(position, keep)
            if not live:
                self.redeliveries.forget(position)
        return self.release_joined(mark_delete)

    def acked_upto(self, position: Position, mark_delete: Position | None) -> bool:
        """The cursor acknowledged everything up to ``position`` (:meth:`acked` for the rest)."""
        for slot in self.consumers.values():
            slot.unacked = {p for p in slot.unacked if p >= position}
            slot.drop(lambda p, _: p >= position)
        # Below the cumulative ack nothing is deliverable again; the ack's own entry goes in acked()
        # once no index of it is left.
        self.redeliveries.forget_below(position)
        # A cumulative ack of a batch index leaves the rest of that entry (PIP-54).
        return self.acked([position], mark_delete)

    def txn_acked(self, consumer_id: int, position: Position, cumulative: bool) -> None:
        """5.9: a txn-acked message leaves the consumer's unacked set at once."""
        slot = self.consumers.get(consumer_id)
        if slot is not None:
            if cumulative:
                slot.unacked = {p for p in slot.unacked if p >= position}
            if not self.deliverable(position):
                slot.unacked.discard(position)

    def redeliver(self, slot: ConsumerSlot, positions: Sequence[Position] | None) -> None:
        """A negative ack or ``redeliverUnacknowledgedMessages``: the consumer's unacked entries
        (all, or those of ``positions``) go back to the replay set.

        Asking for all of them also empties the consumer's queue, as Pulsar's client clears its
        receiver queue before it sends the request: a copy queued there that the consumer no longer
        holds unacked (one handed out again after a reconnect, then acknowledged in a transaction)
        goes too, and back to the replay set, where the dispatch's filter decides it again (5.9:
        a message a transaction holds stays back, PA-1)."""
        if positions is None:
            chosen = set(slot.unacked) | set(slot.queued)
            slot.clear()
        else:
            chosen = set(positions) & slot.unacked
            slot.drop(lambda p, _: p not in chosen)
        slot.unacked -= chosen
        self.replay |= chosen

    def return_unacked(self, positions: tuple[Position, ...]) -> None:
        """The pending ack asks for ``positions`` to be redelivered (an aborted txn's acks, PA-12)."""
        self.replay.update(positions)
        for slot in self.consumers.values():
            slot.unacked.difference_update(positions)
