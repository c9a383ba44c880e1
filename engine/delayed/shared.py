"""PIP-195's never-built shared delayed index: one tracker per topic serving every subscription.

The PIP proposed building the delayed index once per topic with a separate cursor, and adding
every scheduled message to the replay queue of *all* subscriptions, each of which skips what its
own cursor has already consumed (DD-30).  Pulsar built one tracker per subscription instead.
This engine option builds the shared form on top of the pure tracker (``reference.delayed``):

* :meth:`SharedDelayedIndex.add_message` is called once per published message (by the index
  cursor); a rejected add means "deliver now" to every subscription.
* :meth:`SharedDelayedIndex.get_scheduled_messages` for one subscription first polls the shared
  tracker for everything due and fans it out to every subscription's replay queue, then returns
  that subscription's smallest ``(deliver_at, ledger, entry)`` entries, at most ``max_messages``,
  sorted by position — what a tracker of its own would have returned (DD-13).

Subscriptions that acknowledge a message before it is scheduled (``acknowledge``) never see it,
as the PIP's cursor read filter intended.  A broker crash loses the replay queues (the PIP's
stated risk); this class does not model restarts.

:class:`TopicDelayedIndex` is the broker's side of it (the ``shared_delayed_index`` broker option):
one per load of a partition, asked by each subscription's dispatcher instead of a tracker of its
own.  A restart builds a new one, and every subscription reads again from its mark-delete position,
which adds what is still unacknowledged again.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

from reference import delayed as dd
from spec.config import Config
from spec.result import Ok
from spec.types import Position

__all__ = ["SharedDelayedIndex", "TopicDelayedIndex"]


@dataclass
class _Subscription:
    replay: list[tuple[int, int, int]] = field(default_factory=list)  # heap of (deliver_at, ledger, entry)
    consumed: set[tuple[int, int]] = field(default_factory=set)


class SharedDelayedIndex:
    """One delayed-message index for every subscription of a topic (DD-30)."""

    def __init__(self, config: Config, *, tracker: str = "bucket") -> None:
        self.state: dd.Tracker = dd.initial(config, tracker=tracker)
        self._subscriptions: dict[str, _Subscription] = {}
        self._deliver_at: dict[tuple[int, int], int] = {}

    def subscribe(self, name: str) -> None:
        self._subscriptions.setdefault(name, _Subscription())

    def add_message(self, ledger_id: int, entry_id: int, deliver_at: int, now_ms: int) -> bool:
        """Index one published message; False means every subscription delivers it now (DD-2)."""
        self.state, result = dd.step(self.state, dd.AddMessage(ledger_id, entry_id, deliver_at, now_ms))
        assert isinstance(result, Ok)
        if result.value:
            self._deliver_at[(ledger_id, entry_id)] = deliver_at
        return bool(result.value)

    def unsubscribe(self, name: str) -> None:
        """The subscription is gone: nothing more is fanned out to it."""
        self._subscriptions.pop(name, None)

    def acknowledge(self, subscription: str, ledger_id: int, entry_id: int) -> None:
        """The subscription consumed the message some other way; it is filtered from its replay."""
        self._subscriptions[subscription].consumed.add((ledger_id, entry_id))

    def _poll(self, now_ms: int) -> None:
        # Drain everything due: a scheduled message leaves the shared tracker once and is handed
        # to every subscription's replay queue.
        self.state, result = dd.step(self.state, dd.GetScheduledMessages(1 << 62, now_ms))
        assert isinstance(result, Ok)
        for position in result.value:
            key = (position.ledger_id, position.entry_id)
            deliver_at = self._deliver_at.pop(key)
            for sub in self._subscriptions.values():
                if key not in sub.consumed:
                    heapq.heappush(sub.replay, (deliver_at, *key))

    def get_scheduled_messages(self, subscription: str, max_messages: int, now_ms: int) -> tuple[Position, ...]:
        """DD-13, DD-30: the subscription's due messages, at most ``max_messages``."""
        self._poll(now_ms)
        sub = self._subscriptions[subscription]
        out: set[tuple[int, int]] = set()
        while sub.replay and len(out) < max_messages:
            _, ledger, entry = heapq.heappop(sub.replay)
            if (ledger, entry) in sub.consumed:
                continue
            sub.consumed.add((ledger, entry))
            out.add((ledger, entry))
        return tuple(Position(ledger, entry) for ledger, entry in sorted(out))

    def number_of_delayed_messages(self, subscription: str) -> int:
        """Messages this subscription still waits for: in the shared tracker or its replay queue."""
        sub = self._subscriptions[subscription]
        waiting = {p for p in self._deliver_at if p not in sub.consumed}
        return len(waiting) + len({(lg, e) for _, lg, e in sub.replay if (lg, e) not in sub.consumed})


class TopicDelayedIndex:
    """The broker's shared delayed index of one partition, for one load of it (DD-30).

    Every subscription's dispatcher reads the topic's entries on its own, so a delayed message is
    offered to the index once per subscription: the first offer indexes it, and later offers learn
    what the index decided -- deliver now (DD-2 rejected it), wait (it is still indexed, and will be
    fanned out to every subscription when due), or, once it was fanned out, wait only if this
    subscription was among those it went to (its replay queue has it) and deliver now otherwise (a
    subscription that joined after it fell due).  ``wake`` is called when an indexed message falls
    due, so the dispatchers poll: the index's own timer effects are the per-subscription tracker's
    business, not the shared index's."""

    def __init__(self, config: Config, now: Callable[[], int], schedule: Callable[[int], None]) -> None:
        self.index = SharedDelayedIndex(config, tracker="in_memory")
        self._now = now
        self._schedule = schedule  # wake the dispatchers after that many milliseconds
        self._added: set[tuple[int, int]] = set()
        self._deliver_now: set[tuple[int, int]] = set()
        self._fanned: dict[tuple[int, int], frozenset[str]] = {}

    def subscribe(self, name: str) -> None:
        self.index.subscribe(name)

    def unsubscribe(self, name: str) -> None:
        self.index.unsubscribe(name)

    def add_message(self, subscription: str, position: Position, deliver_at: int) -> bool:
        """True when ``subscription`` is to wait for the message rather than deliver it now (DD-30)."""
        self.index.subscribe(subscription)
        key = (position.ledger_id, position.entry_id)
        if key not in self._added:
            self._added.add(key)
            now = self._now()
            if not self.index.add_message(position.ledger_id, position.entry_id, deliver_at, now):
                self._deliver_now.add(key)
                return False
            self._schedule(max(0, deliver_at - now))
            return True
        if key in self._deliver_now:
            return False
        fanned = self._fanned.get(key)
        return fanned is None or subscription in fanned

    def scheduled_messages(self, subscription: str) -> tuple[Position, ...]:
        """DD-13, DD-30: what is due for ``subscription`` now; what fell due is fanned out first."""
        self.index.subscribe(subscription)
        indexed = set(self.index._deliver_at)
        due = self.index.get_scheduled_messages(subscription, 1 << 30, self._now())
        fell_due = indexed - set(self.index._deliver_at)
        if fell_due:
            everyone = frozenset(self.index._subscriptions)
            for key in fell_due:
                self._fanned[key] = everyone
        return due
