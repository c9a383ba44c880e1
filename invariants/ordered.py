"""Ordered lookups the history checkers share, so that no check loops over all operations inside a
loop over operations (each check is O(n log n) in the operations, plus what it reports).

* :class:`MaxTree`: a static segment tree of maxima over a list of numbers: the leftmost value, or
  every value, above a threshold in a range of positions, in O(log n) per answer.
* :class:`PrefixBest`: the largest value over each prefix of a sorted list of keys, keeping the
  best two of distinct owners, so that "the largest value among keys up to K that is not mine"
  is one binary search.

Pure data structures over numbers and keys: they know nothing of histories.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterator, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["NEVER", "MaxTree", "PrefixBest"]

NEVER = float("-inf")  # the value of an empty range: below every threshold

T = TypeVar("T")
_NOBODY: Hashable = object()  # excludes no owner (an owner may be None)


class MaxTree:
    """Maxima over ranges of a fixed list of values: :meth:`leftmost_above` and :meth:`above` answer
    in O(log n) per index found (an iterative tree of ``2 * size`` cells, leaves from ``size``)."""

    __slots__ = ("_cells", "_n", "_size")

    def __init__(self, values: Sequence[float]) -> None:
        size = 1
        while size < len(values):
            size *= 2
        cells = [NEVER] * (2 * size)
        cells[size : size + len(values)] = values
        for k in range(size - 1, 0, -1):
            left, right = cells[2 * k], cells[2 * k + 1]
            cells[k] = left if left >= right else right
        self._cells = cells
        self._size = size
        self._n = len(values)

    def __len__(self) -> int:
        return self._n

    def above(self, lo: int, hi: int, threshold: float) -> Iterator[int]:
        """Every index ``i`` in ``[lo, hi)`` whose value is above ``threshold``, ascending."""
        hi = min(hi, self._n)
        if lo >= hi:
            return
        cells, size = self._cells, self._size
        # descend from the root, visiting only subtrees that overlap the range and hold a value
        # above the threshold; children are pushed right first so that indexes come out ascending
        stack = [(1, 0, size)]
        while stack:
            node, left, right = stack.pop()
            if right <= lo or left >= hi or cells[node] <= threshold:
                continue
            if node >= size:
                yield node - size
                continue
            middle = (left + right) // 2
            stack.append((2 * node + 1, middle, right))
            stack.append((2 * node, left, middle))

    def leftmost_above(self, lo: int, hi: int, threshold: float) -> int | None:
        """The first index in ``[lo, hi)`` whose value is above ``threshold`` (None: none is)."""
        return next(self.above(lo, hi, threshold), None)


class PrefixBest(Generic[T]):
    """Over entries ``(key, value, owner, item)`` sorted by key: for a key ``K`` and an owner, the
    entry of largest value among those with key ``<= K`` (or ``< K``) whose owner is another.

    Each prefix keeps its best entry and the best of an owner other than the best's, which is all
    an exclusion of one owner needs."""

    __slots__ = ("_best", "_keys", "_second")

    def __init__(self, entries: Sequence[tuple[Any, float, Hashable, T]]) -> None:
        ordered = sorted(entries, key=lambda e: e[0])
        self._keys = [e[0] for e in ordered]
        self._best: list[tuple[float, Hashable, T] | None] = []
        self._second: list[tuple[float, Hashable, T] | None] = []
        best: tuple[float, Hashable, T] | None = None
        second: tuple[float, Hashable, T] | None = None
        for _, value, owner, item in ordered:
            entry = (value, owner, item)
            if best is None or value > best[0]:
                if best is not None and best[1] != owner:
                    second = best
                best = entry
            elif owner != best[1] and (second is None or value > second[0]):
                second = entry
            self._best.append(best)
            self._second.append(second)

    def best(self, key: Any, *, exclude: Hashable = _NOBODY, inclusive: bool = True) -> tuple[float, T] | None:
        """The largest value (and its item) among the entries with key up to ``key`` (inclusive, or
        strictly below) whose owner is not ``exclude``; None when there is none."""
        k = (bisect.bisect_right if inclusive else bisect.bisect_left)(self._keys, key)
        if k == 0:
            return None
        for found in (self._best[k - 1], self._second[k - 1]):
            if found is not None and found[1] != exclude:
                return found[0], found[2]
        return None
