"""The properties of the composed model: the safety predicates a state breaks, the view the
liveness goals read, and the goals."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from invariants import buffer as buffer_inv
from invariants import client as client_inv
from invariants import composed
from invariants import coordinator as coordinator_inv
from invariants import delayed as delayed_inv
from invariants import pending_ack as pending_ack_inv
from proofs.check.batched import BatchedLog
from proofs.check.program import ModelSpec
from proofs.check.state import (
    BAD,
    CAUX,
    CLOCK,
    CLOG,
    COORD,
    DECIDED,
    Layout,
    partition_name,
)
from proofs.check.store import Store
from spec.types import (
    Position,
    Subscription,
    TxnID,
    TxnStatus,
)

__all__ = ["Properties"]


class Properties:
    """What the checker asks of a composed state (safety, the liveness goals), each answer
    memoised on the digests it reads."""

    def __init__(
        self,
        spec: ModelSpec,
        layout: Layout,
        store: Store,
        sub_names: tuple[Subscription, ...],
        batched: BatchedLog | None,
    ) -> None:
        self.spec = spec
        self.config = spec.config
        self.layout = layout
        self.store = store
        self.value = store.get
        self.sub_names = sub_names
        self.batched = batched
        # The liveness goals read the hand-outs and the clock where delayed delivery is modelled.
        self.delayed_goals = any(sub.delayed for sub in spec.subscriptions)

    def decided(self, s: tuple[Any, ...]) -> dict[TxnID, TxnStatus]:
        return {TxnID(0, seq): TxnStatus(code) for seq, code in enumerate(s[DECIDED]) if code >= 0}

    def violations(self, s: tuple[Any, ...], changed: tuple[int, ...] | None = None) -> list[str]:
        """The safety predicates ``s`` breaks: every machine's INVARIANTS on every component,
        the cross-machine ones of invariants/composed.py, and the hand-out checks recorded.
        With ``changed`` (the slots a transition from a clean state rewrote), only what reads them."""
        store = self.store
        L = self.layout
        out: list[str] = []
        everything = changed is None
        slots = frozenset(changed) if changed is not None else frozenset()
        coordinator = everything or COORD in slots or CLOG in slots or CAUX in slots
        if coordinator:
            names = store.violated("coordinator", coordinator_inv.INVARIANTS, s[COORD])
            if names:
                out.extend(f"coordinator/{n}" for n in names)
            if self.batched is None:
                ok = store.memo(
                    ("tc-recovers", s[COORD], s[CLOG]),
                    lambda: composed.coordinator_recovers_live(self.value(s[COORD]), *self.value(s[CLOG])),
                )
                if not ok:
                    out.append("coordinator-recovers-live")
            else:
                out.extend(self.batched.violations(s))
        decided = everything or DECIDED in slots
        for slot in L.part_slots:
            if not (decided or slot in slots):
                continue
            d = s[slot][0]
            names = store.violated("buffer", buffer_inv.INVARIANTS, d)
            if names:
                out.extend(f"buffer/{n}" for n in names)
            out.extend(store.memo(("partition-safety", d, s[DECIDED]), partial(self._partition_safety, d, s)))
            if not store.memo(("buffer-recovers", d), partial(self._buffer_recovers, d)):
                out.append("buffer-recovers-live")
        for slot in L.sub_slots:
            if not (everything or slot in slots):
                continue
            sub = s[slot]
            names = store.violated("pending_ack", pending_ack_inv.INVARIANTS, sub[0])
            if names:
                out.extend(f"pending_ack/{n}" for n in names)
            if sub[7]:
                names = store.violated("delayed", delayed_inv.INVARIANTS, sub[7])
                if names:
                    out.extend(f"delayed/{n}" for n in names)
            ok = store.memo(("pa-recovers", sub[0], sub[1], sub[2]), partial(_pending_ack_recovers, self.value, sub))
            if not ok:
                out.append("pending-ack-recovers-live")
        for slot in L.client_slots:
            if not (everything or slot in slots):
                continue
            cl = s[slot]
            if cl[3]:
                names = store.violated("client", client_inv.INVARIANTS, cl[3])
                if names:
                    out.extend(f"client/{n}" for n in names)
        if everything or BAD in slots:
            out.extend(sorted({b[0] for b in s[BAD]}))
        return out

    def _buffer_recovers(self, d: int) -> bool:
        return composed.buffer_recovers_live(self.value(d))

    def _partition_safety(self, d: int, s: tuple[Any, ...]) -> tuple[str, ...]:
        state, decided = self.value(d), self.decided(s)
        return tuple(inv.name for inv in composed.PARTITION_SAFETY if not inv.holds(state, decided))

    def view(self, s: tuple[Any, ...]) -> composed.SystemView:
        L = self.layout
        buffers = {partition_name(p): self.value(part[0]) for p, part in enumerate(s[L.parts])}
        pending = {self.sub_names[i]: self.value(sub[0]) for i, sub in enumerate(s[L.subs])}
        reopened = {partition_name(p): frozenset(TxnID(0, seq) for seq in seqs) for p, seqs in enumerate(s[L.reopened])}
        reopened_acks = {
            self.sub_names[i]: frozenset(TxnID(0, seq) for seq in triple[2]) for i, triple in enumerate(s[L.acks])
        }
        return composed.SystemView(
            self.config,
            self.value(s[COORD]),
            self.decided(s),
            buffers,
            pending,
            self._undelivered_due(s),
            reopened,
            reopened_acks,
        )

    def _undelivered_due(self, s: tuple[Any, ...]) -> tuple[Position, ...]:
        """Committed delayed messages that are due and were never handed to a consumer."""
        out = []
        L = self.layout
        decided = s[DECIDED]
        for i, sub_spec in enumerate(self.spec.subscriptions):
            if not sub_spec.delayed:
                continue
            sub = s[L.sub(i)]
            cursor = self.value(sub[0]).cursor
            handed = {pos for pos, _c in sub[5]}
            for pos, c, seq, _op, at in s[L.part(sub_spec.partition)][2]:
                if at < 0 or at > s[CLOCK] or c < 0:
                    continue
                committed = seq < len(decided) and decided[seq] == TxnStatus.COMMITTED
                if committed and pos not in handed and not cursor.is_deleted(Position(*pos)):
                    out.append(Position(*pos))
        return tuple(out)

    def goals(self, s: tuple[Any, ...], properties: tuple[composed.Liveness, ...]) -> tuple[bool, ...]:
        """Each liveness property's goal in ``s`` (in the order of ``properties``)."""
        L = self.layout
        parts, subs = s[L.parts], s[L.subs]
        key: tuple[Any, ...] = (
            "goals",
            # the properties by name and goal: hashing the Liveness values (with their rule ids and
            # docs) on every state was a good part of a goal's lookup
            tuple([(prop.name, prop.goal) for prop in properties]),
            s[COORD],
            tuple([p[0] for p in parts]),
            tuple([x[0] for x in subs]),
            s[DECIDED],
            s[L.reopened],
            tuple([t[2] for t in s[L.acks]]),
        )
        if self.delayed_goals:
            key = (*key, s[CLOCK], tuple([x[5] for x in subs]), tuple([p[2] for p in parts]))
        return self.store.memo(key, lambda: self._goals(self.view(s), properties))  # type: ignore[no-any-return]

    @staticmethod
    def _goals(view: composed.SystemView, properties: tuple[composed.Liveness, ...]) -> tuple[bool, ...]:
        # One view for every property: building it (every component's state by digest) is most of a goal's cost.
        return tuple(prop.goal(view) for prop in properties)


def _pending_ack_recovers(value: Callable[[int], Any], sub: tuple[Any, ...]) -> bool:
    return composed.pending_ack_recovers_live(value(sub[0]), value(sub[1]), bool(sub[2]))
