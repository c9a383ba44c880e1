"""Key_Shared routing: Pulsar's ``HashRangeAutoSplitStickyKeyConsumerSelector``.

The AUTO_SPLIT mode with ``subscriptionKeySharedUseConsistentHashing=false``.  A message's sticky
key is its ordering key, else its partition key, else the bytes ``NONE_KEY``; the hash is
Murmur3_32 (seed 0) with the sign bit cleared, taken modulo the range size 2^16.  Each consumer
serves the hashes up to its range end; the dispatcher (:mod:`.subscription`) keeps the ends on its
consumer slots and asks this module where a joining consumer's range ends, which consumer a hash
goes to, and who takes the top range when its holder leaves.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Protocol, TypeVar

from engine.broker.component import BrokerError
from spec.errors import ServiceUnitNotReady

__all__ = [
    "NONE_KEY",
    "STICKY_KEY_HASH_RANGE",
    "HashRangeHolder",
    "hand_over_top_range",
    "murmur3_32",
    "select",
    "split_range",
    "sticky_key_hash",
]

STICKY_KEY_HASH_RANGE = 1 << 16
NONE_KEY = b"NONE_KEY"


class HashRangeHolder(Protocol):
    """A Key_Shared consumer as the selector sees it: the end of the hash range it serves."""

    hash_range_end: int


H = TypeVar("H", bound=HashRangeHolder)


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86_32 as an unsigned 32-bit value."""
    mask = 0xFFFFFFFF

    def mix(k: int) -> int:
        k = (k * 0xCC9E2D51) & mask
        k = ((k << 15) | (k >> 17)) & mask
        return (k * 0x1B873593) & mask

    h = seed & mask
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        h ^= mix(int.from_bytes(data[i : i + 4], "little"))
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    h ^= mix(int.from_bytes(data[whole:], "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


def sticky_key_hash(partition_key: str | None) -> int:
    """The hash slot, in [0, 2^16), of a message's sticky key."""
    key = NONE_KEY if partition_key is None else partition_key.encode()
    return (murmur3_32(key) & 0x7FFFFFFF) % STICKY_KEY_HASH_RANGE


def split_range(holders: Iterable[HashRangeHolder]) -> int:
    """The range end a joining consumer takes: it splits the widest range (ties: the lowest) and takes
    its lower half; the consumer that had it keeps the upper half."""
    ends = sorted(s.hash_range_end for s in holders)
    if not ends:
        return STICKY_KEY_HASH_RANGE
    best_end, best_width, lower = STICKY_KEY_HASH_RANGE, 0, 0
    for end in ends:
        if end - lower > best_width:
            best_end, best_width = end, end - lower
        lower = end
    if best_width <= 1:
        raise BrokerError(ServiceUnitNotReady("no hash range left for another Key_Shared consumer"))
    below = best_end - best_width
    return best_end - ((best_end - below) >> 1)


def select(holders: Sequence[H], hash_slot: int) -> H:
    """The consumer whose range holds ``hash_slot``: the lowest range end at or above it."""
    return min((s for s in holders if s.hash_range_end >= hash_slot), key=lambda s: s.hash_range_end)


def hand_over_top_range(left: HashRangeHolder, remaining: Collection[HashRangeHolder]) -> None:
    """``left`` left: if it held the top range, the consumer just below it takes the top (the
    selector's removal rule); any other range is served by the one above it already."""
    if left.hash_range_end == STICKY_KEY_HASH_RANGE and remaining:
        below = max(remaining, key=lambda s: s.hash_range_end)
        below.hash_range_end = STICKY_KEY_HASH_RANGE
