"""Symmetry of the composed model: a state's representative under the model's automorphisms
(:meth:`proofs.check.program.ModelSpec.symmetries`: permutations of clients, partitions and
subscriptions that map the model onto itself)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proofs.check.program import Symmetry
from proofs.check.state import (
    ACK_REQ,
    ACK_RESP,
    ADDP_REQ,
    ADDP_RESP,
    ADDS_REQ,
    ADDS_RESP,
    CAUX,
    CLOG,
    COORD,
    END_REQ,
    END_RESP,
    ENDP,
    ENDP_RESP,
    ENDS,
    ENDS_RESP,
    NET,
    NEW_REQ,
    NEW_RESP,
    SEND_REQ,
    SEND_RESP,
    SUB_TARGET,
    Layout,
    partition_name,
)
from proofs.check.store import Store
from spec.types import Subscription

__all__ = ["Symmetries"]


class Symmetries:
    """The model's symmetries (the identity first) and the images of states under them."""

    def __init__(
        self,
        symmetries: tuple[Symmetry, ...],
        layout: Layout,
        store: Store,
        sub_names: tuple[Subscription, ...],
    ) -> None:
        self.symmetries = symmetries
        self.layout = layout
        self.store = store
        self.sub_names = sub_names
        self._perm_cache: dict[tuple[int, int, int], int] = {}

    def canonical(self, s: tuple[Any, ...]) -> tuple[Any, ...]:
        """The representative of ``s`` under the model's symmetries: the image with the smallest
        fingerprint (deterministic in every process)."""
        if len(self.symmetries) == 1:
            return s
        best, best_fp = s, hash(s)
        for g in range(1, len(self.symmetries)):
            image = self.permute(s, g)
            fp = hash(image)
            if fp < best_fp:
                best, best_fp = image, fp
        return best

    def permute(self, s: tuple[Any, ...], g: int) -> tuple[Any, ...]:
        """The image of ``s`` under symmetry ``g``."""
        L = self.layout
        sym = self.symmetries[g]
        pc, pp, ps = sym.clients, sym.partitions, sym.subscriptions
        out = list(s)
        for c, cl in enumerate(s[L.clients]):
            out[L.client(pc[c])] = self._permute_client(cl, g, pp, ps)
        for p, part in enumerate(s[L.parts]):
            parked = tuple((pc[c], *rest) for c, *rest in part[1])
            payload = tuple((pos, pc[c] if c >= 0 else c, seq, op, at) for pos, c, seq, op, at in part[2])
            out[L.part(pp[p])] = (part[0], parked, payload)
            out[L.reopen(pp[p])] = s[L.reopen(p)]
            out[L.end(pp[p])] = s[L.end(p)]
        for i, sub in enumerate(s[L.subs]):
            handed = tuple(sorted((pos, pc[c] if c >= 0 else c) for pos, c in sub[5]))
            queued = tuple((_permute_message(q, pc, pp, ps), extra) for q, extra in sub[6])
            out[L.sub(ps[i])] = (*sub[:5], handed, queued, sub[7])
            out[L.ack(ps[i])] = s[L.ack(i)]
        epoch, runs, waiters, timers = s[CAUX][:4]
        runs = tuple(
            sorted((*r[:4], tuple(sorted(pp[x] for x in r[4])), tuple(sorted(ps[x] for x in r[5])), r[6]) for r in runs)
        )
        waiters = tuple(sorted((seq, action, pc[c]) for seq, action, c in waiters))
        out[CAUX] = (epoch, runs, waiters, timers, *s[CAUX][4:])
        out[NET] = tuple(sorted(_permute_message(m, pc, pp, ps) for m in s[NET]))
        out[COORD] = self._renamed(s[COORD], g, "coordinator")
        out[CLOG] = self._renamed(s[CLOG], g, "log")
        return tuple(out)

    def _permute_client(self, cl: tuple[Any, ...], g: int, pp: tuple[int, ...], ps: tuple[int, ...]) -> tuple[Any, ...]:
        phase, k, seq, ctd, pc_, regs, ops, held, end = cl
        regs = tuple(sorted((pp[t] if t < SUB_TARGET else SUB_TARGET + ps[t - SUB_TARGET], st) for t, st in regs))
        return (phase, k, seq, self._renamed(ctd, g, "client") if ctd else 0, pc_, regs, ops, held, end)

    def _renamed(self, d: int, g: int, kind: str) -> int:
        """A component state with partition and subscription names permuted by symmetry ``g``."""
        key = (d, g, hash(kind))
        found = self._perm_cache.get(key)
        if found is not None:
            return found
        sym = self.symmetries[g]
        names = {partition_name(p): partition_name(sym.partitions[p]) for p in range(len(sym.partitions))}
        subs = {self.sub_names[i]: self.sub_names[sym.subscriptions[i]] for i in range(len(self.sub_names))}
        value = self.store.get(d)
        renamed = _rename(value, kind, names, subs)
        found = self.store.put(renamed)
        self._perm_cache[key] = found
        return found


def _permute_message(
    m: tuple[int, ...], pc: tuple[int, ...], pp: tuple[int, ...], ps: tuple[int, ...]
) -> tuple[int, ...]:
    kind = m[0]
    if kind in (NEW_REQ, NEW_RESP, END_REQ, END_RESP, SEND_RESP, ACK_RESP):
        return (kind, pc[m[1]], *m[2:])
    if kind in (ADDP_REQ, ADDP_RESP):
        return (kind, pc[m[1]], m[2], pp[m[3]], *m[4:])
    if kind in (ADDS_REQ, ADDS_RESP):
        return (kind, pc[m[1]], m[2], ps[m[3]], *m[4:])
    if kind == SEND_REQ:
        return (kind, pc[m[1]], m[2], pp[m[3]], *m[4:])
    if kind == ACK_REQ:
        return (kind, pc[m[1]], m[2], ps[m[3]], *m[4:])
    if kind in (ENDP, ENDP_RESP):
        return (*m[:6], pp[m[6]], *m[7:])
    if kind in (ENDS, ENDS_RESP):
        return (*m[:6], ps[m[6]], *m[7:])
    raise AssertionError(f"unknown message {m}")


def _rename(value: Any, kind: str, names: dict[str, str], subs: dict[Subscription, Subscription]) -> Any:
    if kind == "coordinator":
        txns = value.txns
        for seq, meta in value.txns.items():
            txns = txns.set(
                seq,
                replace(
                    meta,
                    produced_partitions=frozenset(names[p] for p in meta.produced_partitions),
                    acked_subscriptions=frozenset(subs[x] for x in meta.acked_subscriptions),
                ),
            )
        return replace(value, txns=txns)
    if kind == "log":
        records, rest = value[0], value[1:]
        renamed = tuple(
            (
                rid,
                replace(
                    r,
                    partitions=tuple(names[p] for p in r.partitions),
                    subscriptions=tuple(subs[x] for x in r.subscriptions),
                ),
            )
            for rid, r in records
        )
        return (renamed, *rest)
    if kind == "client":
        return replace(
            value,
            produced_topics=frozenset(names[p] for p in value.produced_topics),
            acked_subscriptions=frozenset(subs[x] for x in value.acked_subscriptions),
        )
    raise AssertionError(kind)
