"""Symmetry of the composed model: a state's representative under the model's automorphisms
(methods of :class:`proofs.check.model.Model`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proofs.check.state import (
    _SUB_TARGET,
    CAUX,
    CLOG,
    COORD,
    NET,
    _permute_message,
    _rename,
    partition_name,
)

if TYPE_CHECKING:
    from proofs.check.model import Model


def canonical(self: Model, s: tuple[Any, ...]) -> tuple[Any, ...]:
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


def permute(self: Model, s: tuple[Any, ...], g: int) -> tuple[Any, ...]:
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


def _permute_client(
    self: Model, cl: tuple[Any, ...], g: int, pp: tuple[int, ...], ps: tuple[int, ...]
) -> tuple[Any, ...]:
    phase, k, seq, ctd, pc_, regs, ops, held, end = cl
    regs = tuple(sorted((pp[t] if t < _SUB_TARGET else _SUB_TARGET + ps[t - _SUB_TARGET], st) for t, st in regs))
    return (phase, k, seq, self._renamed(ctd, g, "client") if ctd else 0, pc_, regs, ops, held, end)


def _renamed(self: Model, d: int, g: int, kind: str) -> int:
    """A component state with partition and subscription names permuted by symmetry ``g``."""
    key = (d, g, hash(kind))
    found = self._perm_cache.get(key)
    if found is not None:
        return found
    sym = self.symmetries[g]
    names = {partition_name(p): partition_name(sym.partitions[p]) for p in range(self.spec.partitions)}
    subs = {self.sub_names[i]: self.sub_names[sym.subscriptions[i]] for i in range(len(self.sub_names))}
    value = self.value(d)
    renamed = _rename(value, kind, names, subs)
    found = self.store.put(renamed)
    self._perm_cache[key] = found
    return found
