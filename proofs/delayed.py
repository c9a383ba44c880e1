"""Z3 proofs for the PIP-195 trackers (``spec/rules/delayed.md``).

Five encodings, each small enough to be exact, and each checked against ``reference.delayed`` by
``tests/delayed/test_proofs.py`` on concrete values:

* **ranges** — up to ``SLOTS`` immutable buckets and the mutable range under add (with its seal),
  merge of a window, delete, and the recovery insert: ranges stay disjoint and the mutable range
  stays above every bucket (DD-5, DD-6, DD-8, DD-20, DD-26).
* **count** — the tracked bits of ``POSITIONS`` positions and the counter under add, pop and trim:
  the count is the number of set bits, and a popped message is returned only once (DD-2, DD-3,
  DD-4, DD-15, DD-22).
* **cutting** — segment cutting of a sorted stream of ``STREAM`` indexes: segments are in time
  order, a segment spans less than the time step, and holds at most the max indexes (DD-9).
* **cutoff** — nothing is returned before its deliver-at (strict) or deliver-at minus the tick
  (DD-1, DD-13).
* **merge** — for every position (unbounded, arrays), the merged bucket tracks exactly what its
  sources tracked, at the same deliver-at (DD-21).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from proofs.framework import Obligation, Outcome, prove_inductive, prove_valid

__all__ = [
    "OBLIGATIONS",
    "POSITIONS",
    "SLOTS",
    "STREAM",
    "CountState",
    "RangeState",
    "count_add",
    "count_inv",
    "count_pop",
    "cut_assign",
    "range_add",
    "ranges_inv",
]

SLOTS = 4
POSITIONS = 4
STREAM = 6


# ---- ranges (DD-5) -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RangeState:
    live: tuple[Any, ...]
    start: tuple[Any, ...]
    end: tuple[Any, ...]
    ms: Any  # mutable start, -1 when empty
    me: Any
    size: Any  # mutable queue size

    @classmethod
    def fresh(cls, tag: str) -> RangeState:
        return cls(
            tuple(z3.Bool(f"{tag}_live{i}") for i in range(SLOTS)),
            tuple(z3.Int(f"{tag}_start{i}") for i in range(SLOTS)),
            tuple(z3.Int(f"{tag}_end{i}") for i in range(SLOTS)),
            z3.Int(f"{tag}_ms"),
            z3.Int(f"{tag}_me"),
            z3.Int(f"{tag}_size"),
        )

    def equals(self, other: RangeState) -> z3.BoolRef:
        parts = [self.ms == other.ms, self.me == other.me, self.size == other.size]
        for i in range(SLOTS):
            parts.append(self.live[i] == other.live[i])
            parts.append(z3.Implies(self.live[i], z3.And(self.start[i] == other.start[i], self.end[i] == other.end[i])))
        return z3.And(parts)


def ranges_inv(s: RangeState) -> z3.BoolRef:
    """DD-5: live ranges well formed and pairwise disjoint; the mutable range empty or above all."""
    parts: list[Any] = []
    for i in range(SLOTS):
        parts.append(z3.Implies(s.live[i], z3.And(s.start[i] >= 0, s.start[i] <= s.end[i])))
        for j in range(i + 1, SLOTS):
            parts.append(
                z3.Implies(z3.And(s.live[i], s.live[j]), z3.Or(s.end[i] < s.start[j], s.end[j] < s.start[i]))
            )
        parts.append(z3.Implies(z3.And(s.live[i], s.ms != -1), s.ms > s.end[i]))
    parts.append(z3.If(s.ms == -1, z3.And(s.me == -1, s.size == 0), z3.And(s.ms >= 0, s.ms <= s.me, s.size >= 0)))
    return z3.And(parts)


def _covered(s: RangeState, ledger: Any) -> Any:
    return z3.Or([z3.And(s.live[i], s.start[i] <= ledger, ledger <= s.end[i]) for i in range(SLOTS)])


def _above_all(s: RangeState, ledger: Any) -> Any:
    return z3.And([z3.Implies(s.live[i], ledger > s.end[i]) for i in range(SLOTS)])


def _seal(s: RangeState) -> RangeState:
    """The mutable range becomes a bucket in the first free slot (the caller guarantees one)."""
    live, start, end = list(s.live), list(s.start), list(s.end)
    taken: Any = z3.BoolVal(False)
    for i in range(SLOTS):
        here = z3.And(z3.Not(s.live[i]), z3.Not(taken))
        live[i] = z3.Or(s.live[i], here)
        start[i] = z3.If(here, s.ms, s.start[i])
        end[i] = z3.If(here, s.me, s.end[i])
        taken = z3.Or(taken, here)
    return RangeState(tuple(live), tuple(start), tuple(end), z3.IntVal(-1), z3.IntVal(-1), z3.IntVal(0))


def _ite(cond: Any, a: RangeState, b: RangeState) -> RangeState:
    return RangeState(
        tuple(z3.If(cond, x, y) for x, y in zip(a.live, b.live, strict=True)),
        tuple(z3.If(cond, x, y) for x, y in zip(a.start, b.start, strict=True)),
        tuple(z3.If(cond, x, y) for x, y in zip(a.end, b.end, strict=True)),
        z3.If(cond, a.ms, b.ms),
        z3.If(cond, a.me, b.me),
        z3.If(cond, a.size, b.size),
    )


def range_add(s: RangeState, ledger: Any, min_index: Any, *, mutant: bool = False) -> RangeState:
    """DD-6, DD-7, DD-8: seal when the condition holds, then place the message."""
    seal_now = z3.And(z3.Not(_covered(s, ledger)), ledger > s.me, s.size >= min_index, s.size > 0)
    t = _ite(seal_now, _seal(s), s)
    # The mutant drops DD-6's "above every bucket" guard for an empty mutable range.
    starts_ok = z3.BoolVal(True) if mutant else z3.Or(t.ms != -1, _above_all(t, ledger))
    join = z3.And(z3.Not(_covered(t, ledger)), ledger >= t.me, starts_ok)
    joined = RangeState(t.live, t.start, t.end, z3.If(t.ms == -1, ledger, t.ms), ledger, t.size + 1)
    return _ite(join, joined, t)


def _has_free_slot(s: RangeState) -> Any:
    return z3.Or([z3.Not(x) for x in s.live])


def range_merge(s: RangeState, i: int, j: int) -> tuple[Any, RangeState]:
    """DD-20: merge the window from bucket i to bucket j (every live bucket between them)."""
    pre = z3.And(s.live[i], s.live[j], s.start[i] < s.start[j])
    live, start, end = list(s.live), list(s.start), list(s.end)
    for k in range(SLOTS):
        if k != i:
            live[k] = z3.And(s.live[k], z3.Not(z3.And(s.start[i] <= s.start[k], s.start[k] <= s.start[j])))
    end[i] = s.end[j]
    return pre, RangeState(tuple(live), tuple(start), tuple(end), s.ms, s.me, s.size)


def range_delete(s: RangeState, i: int) -> RangeState:
    """DD-19, DD-22, DD-23: a bucket leaves the range map."""
    live = list(s.live)
    live[i] = z3.BoolVal(False)
    return RangeState(tuple(live), s.start, s.end, s.ms, s.me, s.size)


def range_recover_insert(s: RangeState, a: Any, b: Any, slot: int) -> tuple[Any, RangeState]:
    """DD-26: insert [a, b] during recovery only if it encloses every range it overlaps."""
    pre = z3.And(a >= 0, a <= b, s.ms == -1, z3.Not(s.live[slot]))
    overlaps = [z3.And(s.live[k], s.start[k] <= b, a <= s.end[k]) for k in range(SLOTS)]
    enclosed = [z3.And(a <= s.start[k], s.end[k] <= b) for k in range(SLOTS)]
    ok = z3.And([z3.Implies(overlaps[k], enclosed[k]) for k in range(SLOTS)])
    live, start, end = list(s.live), list(s.start), list(s.end)
    for k in range(SLOTS):
        live[k] = z3.If(ok, z3.And(s.live[k], z3.Not(overlaps[k])), s.live[k])
    live[slot] = z3.If(ok, z3.BoolVal(True), s.live[slot])
    start[slot] = z3.If(ok, a, s.start[slot])
    end[slot] = z3.If(ok, b, s.end[slot])
    return pre, RangeState(tuple(live), tuple(start), tuple(end), s.ms, s.me, s.size)


def _describe(names: Sequence[str]) -> Callable[[z3.ModelRef], str]:
    def describe(model: z3.ModelRef) -> str:
        decls = {d.name(): d for d in model.decls()}
        lines = [f"{name} = {model[decls[name]]}" for name in sorted(decls) if any(name.startswith(n) for n in names)]
        return "\n".join(lines) or str(model)

    return describe


def _ranges_obligation(transition: str, *, mutant: bool = False) -> Callable[[int], Outcome]:
    def check(timeout_ms: int) -> Outcome:
        s = RangeState.fresh("s")
        init = z3.And([z3.Not(x) for x in s.live] + [s.ms == -1, s.me == -1, s.size == 0])
        ledger, min_index, a, b = z3.Ints("ledger min_index a b")
        if transition == "add":
            nxt = range_add(s, ledger, min_index, mutant=mutant)
            trans = z3.And(ledger >= 0, min_index >= 1, _has_free_slot(s))
            return prove_inductive(
                init=init, inv=ranges_inv(s), trans=trans, inv_next=ranges_inv(nxt), timeout_ms=timeout_ms,
                describe=_describe(["s_", "ledger", "min_index"]),
            )
        outcomes = []
        if transition == "merge":
            cases = [range_merge(s, i, j) for i, j in itertools.permutations(range(SLOTS), 2)]
        elif transition == "delete":
            cases = [(z3.BoolVal(True), range_delete(s, i)) for i in range(SLOTS)]
        else:
            cases = [range_recover_insert(s, a, b, k) for k in range(SLOTS)]
        for pre, nxt in cases:
            outcomes.append(
                prove_inductive(
                    init=init, inv=ranges_inv(s), trans=pre, inv_next=ranges_inv(nxt), timeout_ms=timeout_ms,
                    describe=_describe(["s_", "a", "b"]),
                )
            )
        return next((o for o in outcomes if o.verdict.value != "proved"), outcomes[0])

    return check


# ---- count (DD-4) ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CountState:
    bits: tuple[Any, ...]
    count: Any

    @classmethod
    def fresh(cls, tag: str) -> CountState:
        return cls(tuple(z3.Bool(f"{tag}_bit{p}") for p in range(POSITIONS)), z3.Int(f"{tag}_count"))


def count_inv(s: CountState) -> z3.BoolRef:
    """DD-4: the count is the number of tracked positions."""
    return s.count == z3.Sum([z3.If(b, 1, 0) for b in s.bits])


def count_add(s: CountState, p: int, due: Any) -> CountState:
    """DD-2, DD-3: a due add forgets the bit; a duplicate changes nothing; else track it."""
    bits = list(s.bits)
    bits[p] = z3.If(due, z3.BoolVal(False), z3.BoolVal(True))
    count = z3.If(due, s.count - z3.If(s.bits[p], 1, 0), s.count + z3.If(s.bits[p], 0, 1))
    return CountState(tuple(bits), count)


def count_pop(s: CountState, p: int, *, mutant: bool = False) -> tuple[Any, CountState]:
    """DD-15: popping an index returns it only if its bit was set; returns (returned, state)."""
    bits = list(s.bits)
    bits[p] = z3.BoolVal(False)
    if mutant:  # before #26251: every pop is counted
        return z3.BoolVal(True), CountState(tuple(bits), s.count - 1)
    return s.bits[p], CountState(tuple(bits), s.count - z3.If(s.bits[p], 1, 0))


def count_trim(s: CountState, dropped: Sequence[Any]) -> CountState:
    """DD-22: trimmed buckets take their bits and count with them."""
    bits = tuple(z3.And(b, z3.Not(t)) for b, t in zip(s.bits, dropped, strict=True))
    lost = z3.Sum([z3.If(z3.And(b, t), 1, 0) for b, t in zip(s.bits, dropped, strict=True)])
    return CountState(bits, s.count - lost)


def _count_obligation(transition: str, *, mutant: bool = False) -> Callable[[int], Outcome]:
    def check(timeout_ms: int) -> Outcome:
        s = CountState.fresh("s")
        init = z3.And([z3.Not(b) for b in s.bits] + [s.count == 0])
        due = z3.Bool("due")
        drops = [z3.Bool(f"trim{p}") for p in range(POSITIONS)]
        for p in range(POSITIONS):
            if transition == "add":
                nxt = count_add(s, p, due)
            elif transition == "pop":
                nxt = count_pop(s, p, mutant=mutant)[1]
            else:
                nxt = count_trim(s, drops)
            outcome = prove_inductive(
                init=init, inv=count_inv(s), trans=z3.BoolVal(True), inv_next=count_inv(nxt),
                timeout_ms=timeout_ms, describe=_describe(["s_", "due", "trim"]),
            )
            if outcome.verdict.value != "proved":
                return outcome
        return outcome

    return check


def _returned_once(timeout_ms: int) -> Outcome:
    """DD-15: a returned position was tracked, is untracked afterwards, and a second pop of it
    (with no add in between) returns nothing."""
    s = CountState.fresh("s")
    claims = []
    for p in range(POSITIONS):
        returned, after = count_pop(s, p)
        again, _ = count_pop(after, p)
        claims.append(z3.Implies(returned, z3.And(s.bits[p], z3.Not(after.bits[p]), z3.Not(again))))
    return prove_valid(z3.And(claims), timeout_ms=timeout_ms, describe=_describe(["s_"]))


# ---- segment cutting (DD-9) ---------------------------------------------------------------------


def cut_assign(ts: Sequence[Any], step: Any, max_indexes: Any, *, mutant: bool = False) -> tuple[list[Any], list[Any]]:
    """Segment number of each index and the first deliver-at of its segment (DD-9)."""
    seg: list[Any] = [z3.IntVal(0)]
    first: list[Any] = [ts[0]]
    size: list[Any] = [z3.IntVal(1)]
    for i in range(1, len(ts)):
        limit_hit = (size[i - 1] > max_indexes) if mutant else (size[i - 1] >= max_indexes)
        close = z3.Or(ts[i] > first[i - 1] + step - 1, z3.And(max_indexes != -1, limit_hit))
        seg.append(seg[i - 1] + z3.If(close, 1, 0))
        first.append(z3.If(close, ts[i], first[i - 1]))
        size.append(z3.If(close, 1, size[i - 1] + 1))
    return seg, first


def _cutting(prop: str, *, mutant: bool = False) -> Callable[[int], Outcome]:
    def check(timeout_ms: int) -> Outcome:
        ts = [z3.Int(f"t{i}") for i in range(STREAM)]
        step, max_indexes = z3.Ints("step max_indexes")
        assumptions = [ts[i] <= ts[i + 1] for i in range(STREAM - 1)]
        assumptions += [step >= 0, z3.Or(max_indexes == -1, max_indexes >= 1), ts[0] >= 0]
        seg, first = cut_assign(ts, step, max_indexes, mutant=mutant)
        claims = []
        for i in range(STREAM):
            for j in range(i + 1, STREAM):
                if prop == "order":
                    # A later segment never holds an earlier deliver-at, so lazy loading is in order.
                    claims.append(z3.Implies(seg[i] < seg[j], ts[i] <= ts[j]))
                elif prop == "max":
                    same = [seg[k] == seg[i] for k in range(i, j + 1)]
                    claims.append(z3.Implies(z3.And(max_indexes != -1, z3.And(same)), j - i + 1 <= max_indexes))
            if prop == "window":
                claims.append(ts[i] - first[i] <= z3.If(step >= 1, step - 1, 0))
        return prove_valid(
            z3.And(claims), timeout_ms=timeout_ms, assumptions=assumptions,
            describe=_describe(["t", "step", "max_indexes"]),
        )

    return check


# ---- cutoff (DD-1, DD-13) -------------------------------------------------------------------------


def _never_early(*, mutant: bool = False) -> Callable[[int], Outcome]:
    def check(timeout_ms: int) -> Outcome:
        deliver_at, added_at, now, tick = z3.Ints("deliver_at added_at now tick")
        strict = z3.Bool("strict")

        def cutoff(t: Any) -> Any:
            return z3.If(strict, t, t + tick)

        accepted = z3.And(deliver_at >= 0, deliver_at > cutoff(added_at))
        returned = deliver_at <= (cutoff(now) + tick if mutant else cutoff(now))
        claim = z3.Implies(
            z3.And(tick >= 1, added_at <= now, accepted, returned),
            z3.And(
                z3.If(strict, deliver_at <= now, deliver_at - tick <= now),
                now > added_at,  # never returned by the call that accepted it
            ),
        )
        return prove_valid(claim, timeout_ms=timeout_ms, describe=_describe(["deliver_at", "added_at", "now", "tick",
                                                                              "strict"]))

    return check


# ---- merge (DD-21) --------------------------------------------------------------------------------


def _merge_preserves(*, mutant: bool = False) -> Callable[[int], Outcome]:
    def check(timeout_ms: int) -> Outcome:
        pos = z3.DeclareSort("Position")
        tracked = [z3.Array(f"tracked{k}", pos, z3.BoolSort()) for k in range(2)]
        loaded = [z3.Array(f"loaded{k}", pos, z3.BoolSort()) for k in range(2)]
        unloaded = [z3.Array(f"unloaded{k}", pos, z3.BoolSort()) for k in range(2)]
        ts = z3.Array("deliver_at", pos, z3.IntSort())
        p = z3.Const("p", pos)
        q = z3.Const("q", pos)
        # Every tracked message of a persisted bucket is in its snapshot (every_tracked_reachable);
        # the snapshot is the loaded segment plus the unloaded ones.
        background = [
            z3.ForAll([q], z3.Implies(tracked[k][q], z3.Or(loaded[k][q], unloaded[k][q]))) for k in range(2)
        ]

        def in_snapshot(k: int, x: Any) -> Any:
            read = unloaded[k][x] if mutant else z3.Or(loaded[k][x], unloaded[k][x])
            return z3.And(read, tracked[k][x])

        merged = z3.Or(in_snapshot(0, p), in_snapshot(1, p))
        merged_ts = ts[p]  # indexes are copied, never rewritten
        claim = z3.And(merged == z3.Or(tracked[0][p], tracked[1][p]), merged_ts == ts[p])
        return prove_valid(claim, timeout_ms=timeout_ms, assumptions=background, describe=_describe(["tracked",
                                                                                                     "loaded"]))

    return check


OBLIGATIONS: tuple[Obligation, ...] = (
    Obligation("ranges disjoint: add (seal + placement)", ("DD-5", "DD-6", "DD-8"), f"<= {SLOTS} buckets",
               _ranges_obligation("add")),
    Obligation("ranges disjoint: merge window", ("DD-5", "DD-20"), f"<= {SLOTS} buckets", _ranges_obligation("merge")),
    Obligation("ranges disjoint: delete / trim / clear", ("DD-5", "DD-19", "DD-22", "DD-23"), f"<= {SLOTS} buckets",
               _ranges_obligation("delete")),
    Obligation("ranges disjoint: recovery insert", ("DD-5", "DD-26"), f"<= {SLOTS} buckets",
               _ranges_obligation("recover")),
    Obligation("count = tracked: add", ("DD-2", "DD-3", "DD-4"), f"<= {POSITIONS} positions", _count_obligation("add")),
    Obligation("count = tracked: pop", ("DD-4", "DD-15"), f"<= {POSITIONS} positions", _count_obligation("pop")),
    Obligation("count = tracked: trim", ("DD-4", "DD-22"), f"<= {POSITIONS} positions", _count_obligation("trim")),
    Obligation("returned at most once", ("DD-15",), f"<= {POSITIONS} positions", _returned_once),
    Obligation("segments in time order", ("DD-9",), f"streams of {STREAM}", _cutting("order")),
    Obligation("segment within one time step", ("DD-9",), f"streams of {STREAM}", _cutting("window")),
    Obligation("segment within max indexes", ("DD-9",), f"streams of {STREAM}", _cutting("max")),
    Obligation("never delivered early", ("DD-1", "DD-13"), "unbounded", _never_early()),
    Obligation("merge preserves tracked messages", ("DD-21",), "unbounded", _merge_preserves()),
)

MUTANTS: dict[str, Callable[[int], Outcome]] = {
    "placement without the above-all guard": _ranges_obligation("add", mutant=True),
    "pop counted without its bit": _count_obligation("pop", mutant=True),
    "max-indexes cut one late": _cutting("max", mutant=True),
    "delivery cutoff one tick late": _never_early(mutant=True),
    "merge reads only unloaded segments": _merge_preserves(mutant=True),
}
