"""Turning an action into a successor, memoised on the action's footprint.

An action is a function that changes a composed state opened for one transition
(:class:`~proofs.check.state.WorkingState`).  Its *footprint* is the slots of the state it reads
and writes besides the network; where an action has one, the transition is memoised on the values
at those slots, so the same delivery to the same component state is computed once however the
rest of the system stands.  Every part of the transition system adds its actions through
:meth:`Transitions.add`.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, Protocol

from proofs.check.state import NET, Layout, Successor, WorkingState

__all__ = ["Action", "AddSuccessor", "Transitions"]

# An action changes the opened state it is given (a :class:`WorkingState`); ``False`` means it is
# not enabled after all (no successor).  Its parameters are open: actions are lambdas binding their
# arguments as defaults (``lambda w, p=p: ...``), which a one-argument type would refuse.
Action = Callable[..., Any]


class AddSuccessor(Protocol):
    """What the parts of the model are given to add their actions' successors: :meth:`Transitions.add`."""

    def __call__(
        self,
        out: list[Successor],
        s: tuple[Any, ...],
        label: tuple[Any, ...],
        family: tuple[Any, ...] | None,
        act: Action,
        footprint: tuple[int, ...] | None = None,
    ) -> None: ...


class Transitions:
    """The successor each action makes, with the memo of transitions by footprint."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self._deltas: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._getters: dict[tuple[int, ...], Callable[[tuple[Any, ...]], Any]] = {}
        # Tests set this: every memoised transition is recomputed and compared (footprints complete).
        self.verify_deltas = False

    def add(
        self,
        out: list[Successor],
        s: tuple[Any, ...],
        label: tuple[Any, ...],
        family: tuple[Any, ...] | None,
        act: Action,
        footprint: tuple[int, ...] | None = None,
    ) -> None:
        """Add the successor ``act`` makes of ``s``.  With a ``footprint`` (the paths into the state
        the action reads and writes; it also removes and adds messages) the transition is memoised
        on the values at those paths: the same delivery to the same component state is computed
        once however the rest of the system stands."""
        if footprint is None:
            w = WorkingState(s, self.layout)
            if act(w) is False:
                return
            after = w.freeze()
            if after != s:
                out.append(Successor(label, after, family, tuple(w.broken)))
            return
        getter = self._getters.get(footprint)
        if getter is None:
            getter = self._getters[footprint] = itemgetter(*footprint) if len(footprint) > 1 else _one(footprint[0])
        key = (label, getter(s))
        delta = self._deltas.get(key)
        applied = None  # the successor, when this call computed it
        if delta is None or self.verify_deltas:
            w = WorkingState(s, self.layout)
            fresh: tuple[Any, ...] | None
            if act(w) is False:
                fresh = None
            else:
                after = w.freeze()
                fresh = None if after == s else _delta(s, after, footprint, tuple(w.broken))
                if fresh is not None:
                    applied = _apply(s, fresh, footprint)
                    if applied != after:
                        raise AssertionError(f"{label}: the action changed the state outside its footprint {footprint}")
            if delta is not None and delta != fresh:
                raise AssertionError(f"{label}: a memoised transition differs from the computed one")
            delta = self._deltas[key] = fresh if fresh is not None else ()
        if not delta:
            return
        if applied is None:
            applied = _apply(s, delta, footprint)
        out.append(Successor(label, applied, family, delta[3], footprint))


def _one(i: int) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    def get(s: tuple[Any, ...]) -> tuple[Any, ...]:
        return (s[i],)

    return get


def _delta(
    before: tuple[Any, ...], after: tuple[Any, ...], footprint: tuple[int, ...], broken: tuple[str, ...]
) -> tuple[Any, ...]:
    """What a transition did: the new values at its footprint, the messages it consumed and sent."""
    gone = list(before[NET])
    added = []
    for m in after[NET]:
        try:
            gone.remove(m)
        except ValueError:
            added.append(m)
    return (tuple(after[i] for i in footprint), tuple(gone), tuple(added), broken)


def _apply(s: tuple[Any, ...], delta: tuple[Any, ...], footprint: tuple[int, ...]) -> tuple[Any, ...]:
    values, gone, added, _broken = delta
    out = list(s)
    for i, value in zip(footprint, values, strict=True):
        out[i] = value
    if gone or added:
        net = list(s[NET])
        for m in gone:
            net.remove(m)
        net.extend(added)
        net.sort()
        out[NET] = tuple(net)
    return tuple(out)
