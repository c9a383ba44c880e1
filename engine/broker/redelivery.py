"""How often each entry of a subscription was handed out: Pulsar's ``InMemoryRedeliveryTracker``.

A message's redelivery count is the number of times its entry was handed to a consumer before
(a batch entry's messages, handed out together, share one count).  The count lives in the broker's
memory only: a broker crash forgets it, and a seek forgets what it acknowledged (Pulsar's tracker
drops a position when it is acked), so what is redelivered after a seek starts counting afresh.
"""

from __future__ import annotations

from collections.abc import Callable

from spec.types import Position

__all__ = ["RedeliveryTracker"]


class RedeliveryTracker:
    """The redelivery counts of one subscription's entries."""

    def __init__(self) -> None:
        self._counts: dict[Position, int] = {}

    def hand_out(self, position: Position) -> int:
        """The entry at ``position`` is handed out once more: its redelivery count before this one."""
        count = self._counts.get(position, 0)
        self._counts[position] = count + 1
        return count

    def forget(self, position: Position) -> None:
        """The entry at ``position`` is wholly acknowledged: Pulsar's tracker drops it, so the counts
        kept are bounded by what is unacknowledged, not by what was ever handed out."""
        self._counts.pop(position, None)

    def forget_below(self, position: Position) -> None:
        """A cumulative acknowledgement through ``position``: every count below it goes."""
        if any(p < position for p in self._counts):
            self._counts = {p: n for p, n in self._counts.items() if p >= position}

    def __len__(self) -> int:
        return len(self._counts)

    def forget_acknowledged(self, acknowledged: Callable[[Position], bool]) -> None:
        """A seek: what was acknowledged before it starts its count afresh; what was held keeps counting."""
        self._counts = {p: n for p, n in self._counts.items() if not acknowledged(p)}

    def clear(self) -> None:
        """The broker crashed: its memory of the counts is gone."""
        self._counts = {}
