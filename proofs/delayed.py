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
* **places** — ``PLACE_POSITIONS`` positions over ``PLACE_BUCKETS`` buckets of ``PLACE_SEGMENTS``
  segments: every tracked message has exactly one owner bitmap and is reachable (the invariants
  ``one_bitmap_per_bit`` and ``every_tracked_reachable``), preserved by add (seal and placement),
  each turn of get_scheduled_messages (pop, segment load, bucket deletion), merge, trim, clear
  and recovery (DD-5, DD-10, DD-11, DD-19, DD-21, DD-22, DD-23, DD-24).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from proofs.framework import Obligation, Outcome, Verdict, prove_inductive, prove_valid

__all__ = [
    "OBLIGATIONS",
    "PLACE_BUCKETS",
    "PLACE_POSITIONS",
    "PLACE_SEGMENTS",
    "POSITIONS",
    "SLOTS",
    "STREAM",
    "CountState",
    "PlaceState",
    "RangeState",
    "count_add",
    "count_inv",
    "count_pop",
    "cut_assign",
    "every_tracked_reachable",
    "exactly_one_place",
    "one_bitmap_per_bit",
    "places_add",
    "places_clear",
    "places_merge",
    "places_pop_turn",
    "places_recover",
    "places_trim",
    "places_wf",
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
            parts.append(z3.Implies(z3.And(s.live[i], s.live[j]), z3.Or(s.end[i] < s.start[j], s.end[j] < s.start[i])))
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
    def check(rlimit: int) -> Outcome:
        s = RangeState.fresh("s")
        init = z3.And([z3.Not(x) for x in s.live] + [s.ms == -1, s.me == -1, s.size == 0])
        ledger, min_index, a, b = z3.Ints("ledger min_index a b")
        if transition == "add":
            nxt = range_add(s, ledger, min_index, mutant=mutant)
            trans = z3.And(ledger >= 0, min_index >= 1, _has_free_slot(s))
            return prove_inductive(
                init=init,
                inv=ranges_inv(s),
                trans=trans,
                inv_next=ranges_inv(nxt),
                rlimit=rlimit,
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
                    init=init,
                    inv=ranges_inv(s),
                    trans=pre,
                    inv_next=ranges_inv(nxt),
                    rlimit=rlimit,
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
    def check(rlimit: int) -> Outcome:
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
                init=init,
                inv=count_inv(s),
                trans=z3.BoolVal(True),
                inv_next=count_inv(nxt),
                rlimit=rlimit,
                describe=_describe(["s_", "due", "trim"]),
            )
            if outcome.verdict.value != "proved":
                return outcome
        return outcome

    return check


def _returned_once(rlimit: int) -> Outcome:
    """DD-15: a returned position was tracked, is untracked afterwards, and a second pop of it
    (with no add in between) returns nothing."""
    s = CountState.fresh("s")
    claims = []
    for p in range(POSITIONS):
        returned, after = count_pop(s, p)
        again, _ = count_pop(after, p)
        claims.append(z3.Implies(returned, z3.And(s.bits[p], z3.Not(after.bits[p]), z3.Not(again))))
    return prove_valid(z3.And(claims), rlimit=rlimit, describe=_describe(["s_"]))


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
    def check(rlimit: int) -> Outcome:
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
            z3.And(claims),
            rlimit=rlimit,
            assumptions=assumptions,
            describe=_describe(["t", "step", "max_indexes"]),
        )

    return check


# ---- cutoff (DD-1, DD-13) -------------------------------------------------------------------------


def _never_early(*, mutant: bool = False) -> Callable[[int], Outcome]:
    def check(rlimit: int) -> Outcome:
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
        return prove_valid(
            claim, rlimit=rlimit, describe=_describe(["deliver_at", "added_at", "now", "tick", "strict"])
        )

    return check


# ---- merge (DD-21) --------------------------------------------------------------------------------


def _merge_preserves(*, mutant: bool = False) -> Callable[[int], Outcome]:
    def check(rlimit: int) -> Outcome:
        pos = z3.DeclareSort("Position")
        tracked = [z3.Array(f"tracked{k}", pos, z3.BoolSort()) for k in range(2)]
        loaded = [z3.Array(f"loaded{k}", pos, z3.BoolSort()) for k in range(2)]
        unloaded = [z3.Array(f"unloaded{k}", pos, z3.BoolSort()) for k in range(2)]
        ts = z3.Array("deliver_at", pos, z3.IntSort())
        p = z3.Const("p", pos)
        q = z3.Const("q", pos)
        # Every tracked message of a persisted bucket is in its snapshot (every_tracked_reachable);
        # the snapshot is the loaded segment plus the unloaded ones.
        background = [z3.ForAll([q], z3.Implies(tracked[k][q], z3.Or(loaded[k][q], unloaded[k][q]))) for k in range(2)]

        def in_snapshot(k: int, x: Any) -> Any:
            read = unloaded[k][x] if mutant else z3.Or(loaded[k][x], unloaded[k][x])
            return z3.And(read, tracked[k][x])

        merged = z3.Or(in_snapshot(0, p), in_snapshot(1, p))
        merged_ts = ts[p]  # indexes are copied, never rewritten
        claim = z3.And(merged == z3.Or(tracked[0][p], tracked[1][p]), merged_ts == ts[p])
        return prove_valid(claim, rlimit=rlimit, assumptions=background, describe=_describe(["tracked", "loaded"]))

    return check


# ---- places: every tracked message in exactly one place (DD-5, DD-11) ---------------------------
#
# One message's places: its bit is in the mutable bitmap or in the bitmap of the one bucket
# covering its ledger (``one_bitmap_per_bit``), and a copy of its index is in the mutable queue,
# in the shared queue (which holds the loaded segments), or in an unloaded segment of a bucket
# (``every_tracked_reachable``); an unloaded copy lies only in the bucket covering its ledger, so
# in exactly one bucket.  Copies may repeat in the queues (merge re-reads the sources' loaded
# segments, DD-21; dedup at pop absorbs them, DD-15): the place that is unique is the owner.
#
# Bound: ``PLACE_POSITIONS`` positions, ``PLACE_BUCKETS`` bucket slots, ``PLACE_SEGMENTS`` segments
# per bucket.  Choices the reference makes from deliver-at times and storage outcomes (which
# indexes are due, where the cut falls, whether a create succeeds, whether another copy of a
# popped index remains) are free variables, so each transition over-approximates the reference.

PLACE_POSITIONS = 4
PLACE_BUCKETS = 3
PLACE_SEGMENTS = 3
PLACES_BOUND = f"<= {PLACE_POSITIONS} positions, <= {PLACE_BUCKETS} buckets, <= {PLACE_SEGMENTS} segments each"

_P = range(PLACE_POSITIONS)
_B = range(PLACE_BUCKETS)
_S = range(PLACE_SEGMENTS)


@dataclass(frozen=True)
class PlaceState:
    """Per position q: ``mbit`` (mutable bitmap), ``mq`` (mutable queue), ``sq`` (shared queue),
    ``mcov`` (the mutable range covers its ledger).  Per bucket slot k: ``live``, ``stored``
    (snapshot readable, or its creation in flight: DD-31 keeps the segments in memory), ``lost``
    (snapshot ledger missing), ``cur`` (segments loaded, 1-based), ``last`` (segments);
    ``cov[k][q]``, ``bbit[k][q]`` and ``seg[k][s][q]`` (segment s, 0-based, holds q's index)."""

    mbit: tuple[Any, ...]
    mq: tuple[Any, ...]
    sq: tuple[Any, ...]
    mcov: tuple[Any, ...]
    live: tuple[Any, ...]
    stored: tuple[Any, ...]
    lost: tuple[Any, ...]
    cur: tuple[Any, ...]
    last: tuple[Any, ...]
    cov: tuple[tuple[Any, ...], ...]
    bbit: tuple[tuple[Any, ...], ...]
    seg: tuple[tuple[tuple[Any, ...], ...], ...]

    @classmethod
    def fresh(cls, tag: str) -> PlaceState:
        def bools(name: str) -> tuple[Any, ...]:
            return tuple(z3.Bool(f"{tag}_{name}{q}") for q in _P)

        return cls(
            bools("mbit"),
            bools("mq"),
            bools("sq"),
            bools("mcov"),
            tuple(z3.Bool(f"{tag}_live{k}") for k in _B),
            tuple(z3.Bool(f"{tag}_stored{k}") for k in _B),
            tuple(z3.Bool(f"{tag}_lost{k}") for k in _B),
            tuple(z3.Int(f"{tag}_cur{k}") for k in _B),
            tuple(z3.Int(f"{tag}_last{k}") for k in _B),
            tuple(tuple(z3.Bool(f"{tag}_cov{k}_{q}") for q in _P) for k in _B),
            tuple(tuple(z3.Bool(f"{tag}_bbit{k}_{q}") for q in _P) for k in _B),
            tuple(tuple(tuple(z3.Bool(f"{tag}_seg{k}_{s}_{q}") for q in _P) for s in _S) for k in _B),
        )

    def replace(self, **changes: Any) -> PlaceState:
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        fields.update(changes)
        return PlaceState(**fields)

    def equals(self, other: PlaceState) -> z3.BoolRef:
        """Equal as the reference sees them: a dead slot's fields and a segment-less bucket's
        segments do not matter."""
        parts: list[Any] = []
        for q in _P:
            parts += [
                self.mbit[q] == other.mbit[q],
                self.mq[q] == other.mq[q],
                self.sq[q] == other.sq[q],
                self.mcov[q] == other.mcov[q],
            ]
        for k in _B:
            same = [
                self.stored[k] == other.stored[k],
                self.lost[k] == other.lost[k],
                self.cur[k] == other.cur[k],
                self.last[k] == other.last[k],
            ]
            for q in _P:
                same += [self.cov[k][q] == other.cov[k][q], self.bbit[k][q] == other.bbit[k][q]]
                same += [z3.Implies(self.stored[k], self.seg[k][s][q] == other.seg[k][s][q]) for s in _S]
            parts += [self.live[k] == other.live[k], z3.Implies(self.live[k], z3.And(same))]
        return z3.And(parts)


def _ite_places(cond: Any, a: PlaceState, b: PlaceState) -> PlaceState:
    def pick(x: Any, y: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(pick(u, v) for u, v in zip(x, y, strict=True))
        return z3.If(cond, x, y)

    return PlaceState(**{name: pick(getattr(a, name), getattr(b, name)) for name in a.__dataclass_fields__})


def _covered_live(s: PlaceState, q: int) -> Any:
    return z3.Or([z3.And(s.live[k], s.cov[k][q]) for k in _B])


def _tracked_place(s: PlaceState, q: int) -> Any:
    return z3.Or(s.mbit[q], *[z3.And(s.live[k], s.bbit[k][q]) for k in _B])


def _seg_at(s: PlaceState, k: int, index: Any, q: int) -> Any:
    """Does segment ``index`` (0-based, symbolic) of bucket k hold q?"""
    return z3.Or([z3.And(index == i, s.seg[k][i][q]) for i in _S])


def _unloaded(s: PlaceState, k: int, q: int) -> Any:
    """q's index is in an unloaded segment of bucket k (``locations(state)["unloaded"]``)."""
    return z3.And(s.live[k], s.stored[k], z3.Or([z3.And(i >= s.cur[k], i < s.last[k], s.seg[k][i][q]) for i in _S]))


def one_bitmap_per_bit(s: PlaceState) -> z3.BoolRef:
    """``invariants.delayed.one_bitmap_per_bit`` (DD-11): a bucket's bits lie in its range, and no
    bit is both in the mutable bitmap and in a bucket's."""
    return z3.And(
        [z3.Implies(z3.And(s.live[k], s.bbit[k][q]), z3.And(s.cov[k][q], z3.Not(s.mbit[q]))) for k in _B for q in _P]
    )


def every_tracked_reachable(s: PlaceState) -> z3.BoolRef:
    """``invariants.delayed.every_tracked_reachable`` (DD-5, DD-10): every tracked message is
    queued (mutable or shared) or in an unloaded segment, unless its bucket's snapshot was lost."""
    parts = []
    for q in _P:
        reach = z3.Or(
            s.mq[q],
            s.sq[q],
            *[_unloaded(s, k, q) for k in _B],
            *[z3.And(s.live[k], s.lost[k], s.cov[k][q]) for k in _B],
        )
        parts.append(z3.Implies(_tracked_place(s, q), reach))
    return z3.And(parts)


def places_wf(s: PlaceState) -> z3.BoolRef:
    """The structure the places rest on: segment bounds, memory mode, bucket ranges disjoint and
    below the mutable range (DD-5), the mutable queue in its range (DD-6), a bucket's segments
    inside its range and holding its bits (DD-9, DD-18), no bits in a dead slot."""
    parts: list[Any] = []
    for k in _B:
        parts.append(
            z3.Implies(
                s.live[k],
                z3.And(
                    s.cur[k] >= 1,
                    s.cur[k] <= s.last[k],
                    s.last[k] <= PLACE_SEGMENTS,
                    z3.Not(z3.And(s.stored[k], s.lost[k])),
                    z3.Implies(z3.And(z3.Not(s.stored[k]), z3.Not(s.lost[k])), s.cur[k] == s.last[k]),
                ),
            )
        )
        for q in _P:
            parts.append(z3.Implies(z3.Not(s.live[k]), z3.Not(s.bbit[k][q])))
            for i in _S:
                parts.append(
                    z3.Implies(z3.And(s.live[k], s.stored[k], s.seg[k][i][q]), z3.And(s.cov[k][q], i < s.last[k]))
                )
            parts.append(
                z3.Implies(
                    z3.And(s.live[k], s.stored[k], s.bbit[k][q]),
                    z3.Or([z3.And(i < s.last[k], s.seg[k][i][q]) for i in _S]),
                )
            )
            for j in _B:
                if j < k:
                    parts.append(z3.Not(z3.And(s.live[j], s.live[k], s.cov[j][q], s.cov[k][q])))
    for q in _P:
        # A mutable bit's index is queued; a bucket's bit is queued, unloaded in it, or lost with it.
        parts.append(z3.Implies(s.mbit[q], z3.Or(s.mq[q], s.sq[q])))
        for k in _B:
            parts.append(z3.Implies(z3.And(s.live[k], s.bbit[k][q]), z3.Or(s.sq[q], _unloaded(s, k, q), s.lost[k])))
        parts.append(z3.Implies(s.mq[q], s.mcov[q]))
        parts.append(z3.Implies(s.mcov[q], z3.Not(_covered_live(s, q))))
    return z3.And(parts)


def exactly_one_place(s: PlaceState) -> z3.BoolRef:
    """Each tracked message has exactly one owner (the mutable bitmap or the one bucket covering
    it), is reachable, and an unloaded copy of it lies in exactly one bucket (DD-5, DD-11)."""
    parts: list[Any] = [places_wf(s), one_bitmap_per_bit(s), every_tracked_reachable(s)]
    for q in _P:
        owners = [s.mbit[q], *[z3.And(s.live[k], s.bbit[k][q]) for k in _B]]
        parts.append(z3.AtMost(*owners, 1))
        parts.append(
            z3.Implies(
                _tracked_place(s, q),
                z3.AtMost(*[z3.Or([z3.And(_unloaded(s, k, q), s.seg[k][i][q]) for i in _S]) for k in _B], 1),
            )
        )
    return z3.And(parts)


def _drop_place_bit(s: PlaceState, p: int) -> PlaceState:
    """``drop_bit``: clear p's bit in the mutable bitmap, else in the covering bucket; a
    memory-mode bucket leaves with its last bit (DD-14, DD-15)."""
    mbit = list(s.mbit)
    mbit[p] = z3.BoolVal(False)
    bbit = [list(row) for row in s.bbit]
    live = list(s.live)
    for k in _B:
        hit = z3.And(z3.Not(s.mbit[p]), s.live[k], s.cov[k][p], s.bbit[k][p])
        bbit[k][p] = z3.And(s.bbit[k][p], z3.Not(hit))
        memory_mode = z3.And(z3.Not(s.stored[k]), z3.Not(s.lost[k]))
        emptied = z3.And([z3.Not(bbit[k][q]) for q in _P])
        live[k] = z3.And(s.live[k], z3.Not(z3.And(hit, memory_mode, emptied)))
    return s.replace(mbit=tuple(mbit), bbit=tuple(tuple(r) for r in bbit), live=tuple(live))


def _build_place_bucket(
    s: PlaceState, slot: int, stream: Sequence[Any], cov: Sequence[Any], tag: str
) -> tuple[Any, PlaceState]:
    """``_build_bucket``: cut the stream into ``n`` segments (free cut), persist (or not: memory
    mode, DD-14), push the first segment (or all) into the shared queue (DD-9, DD-10)."""
    n = z3.Int(f"{tag}_nseg")
    ok = z3.Bool(f"{tag}_created")
    cut = [z3.Int(f"{tag}_cut{q}") for q in _P]
    pre = z3.And(n >= 1, n <= PLACE_SEGMENTS, *[z3.Implies(stream[q], z3.And(cut[q] >= 0, cut[q] < n)) for q in _P])
    cur = z3.If(ok, 1, n)

    def set_slot(row: tuple[Any, ...], value: Any) -> tuple[Any, ...]:
        return tuple(value if k == slot else row[k] for k in _B)

    bucket_segs = tuple(tuple(z3.And(stream[q], cut[q] == i) for q in _P) for i in _S)
    return pre, s.replace(
        live=set_slot(s.live, z3.Or(list(stream))),
        stored=set_slot(s.stored, ok),
        lost=set_slot(s.lost, z3.BoolVal(False)),
        cur=set_slot(s.cur, cur),
        last=set_slot(s.last, n),
        cov=set_slot(s.cov, tuple(cov)),
        bbit=set_slot(s.bbit, tuple(stream)),
        seg=set_slot(s.seg, bucket_segs),
        sq=tuple(z3.Or(s.sq[q], z3.And(stream[q], cut[q] < cur)) for q in _P),
    )


def places_add(s: PlaceState, p: int, tag: str = "c") -> tuple[Any, PlaceState]:
    """DD-2, DD-3, DD-6, DD-7, DD-8, DD-9, DD-10: ``add_message`` of position p: a due add forgets
    the bit, a duplicate changes nothing, otherwise seal (maybe) and place.  Returns (choice
    constraints, post-state)."""
    due, seal, join = z3.Bools(f"{tag}_due {tag}_seal {tag}_join")
    ext = [z3.Bool(f"{tag}_ext{q}") for q in _P]
    dropped = _drop_place_bit(s, p)
    contains = z3.Or(s.mbit[p], *[z3.And(s.live[k], s.cov[k][p], s.bbit[k][p]) for k in _B])
    # Seal into the first free slot (the bound: a free slot exists).
    free = [z3.And(z3.Not(s.live[k]), *[s.live[j] for j in _B if j < k]) for k in _B]
    # DD-8: the ledger is above the mutable range (so outside it) and not covered by a bucket.
    seal_now = z3.And(seal, z3.Not(_covered_live(s, p)), z3.Not(s.mcov[p]), z3.Or(list(s.mq)), z3.Or(free))
    sealed = s
    sealed_pre: list[Any] = []
    for k in _B:
        pre_k, built = _build_place_bucket(
            s.replace(
                mbit=tuple(z3.And(s.mbit[q], z3.Not(s.mq[q])) for q in _P),
                mq=tuple(z3.BoolVal(False) for _ in _P),
                mcov=tuple(z3.BoolVal(False) for _ in _P),
            ),
            k,
            s.mq,
            s.mcov,
            f"{tag}_b{k}",
        )
        sealed_pre.append(z3.Implies(z3.And(seal_now, free[k]), pre_k))
        sealed = _ite_places(z3.And(seal_now, free[k]), built, sealed)
    t = sealed
    joins = z3.And(join, z3.Not(_covered_live(t, p)))

    def with_p(row: tuple[Any, ...], value: Any) -> tuple[Any, ...]:
        return tuple(value if q == p else row[q] for q in _P)

    joined = t.replace(
        mq=with_p(t.mq, z3.BoolVal(True)),
        mbit=with_p(t.mbit, z3.BoolVal(True)),
        mcov=tuple(
            z3.BoolVal(True) if q == p else z3.Or(t.mcov[q], z3.And(ext[q], z3.Not(_covered_live(t, q)))) for q in _P
        ),
    )
    routed = t.replace(sq=with_p(t.sq, z3.BoolVal(True)), mbit=with_p(t.mbit, z3.BoolVal(True)))
    placed = _ite_places(joins, joined, routed)
    post = _ite_places(due, dropped, _ite_places(contains, s, placed))
    return z3.And(sealed_pre), post


POP_KINDS = ("move_due", "load", "delete", "pop")


def places_pop_turn(
    s: PlaceState, kind: str, arg: int, tag: str = "c", *, mutant: bool = False
) -> tuple[Any, PlaceState]:
    """One turn of ``get_scheduled_messages`` (DD-10, DD-12, DD-15, DD-19, DD-22): ``move_due``
    moves a (free) set of mutable indexes to the shared queue; ``load`` bucket ``arg``'s
    boundary reached the head: its next segment joins the shared queue; ``delete`` bucket ``arg``
    has no next segment (or its snapshot is gone): it leaves, the bits of its still-queued
    indexes move to the mutable bitmap; ``pop`` index ``arg`` leaves the shared queue and its bit
    is cleared (returned, deduplicated, or dropped below the mark-delete ledger)."""
    if kind == "move_due":
        mv = [z3.Bool(f"{tag}_due{q}") for q in _P]
        return z3.BoolVal(True), s.replace(
            mq=tuple(z3.And(s.mq[q], z3.Not(mv[q])) for q in _P),
            sq=tuple(z3.Or(s.sq[q], z3.And(s.mq[q], mv[q])) for q in _P),
        )
    if kind == "load":
        k = arg
        pre = z3.And(s.live[k], s.stored[k], s.cur[k] < s.last[k])
        cur = tuple(s.cur[j] + 1 if j == k else s.cur[j] for j in _B)
        if mutant:  # the segment is marked loaded but never reaches the shared queue
            return pre, s.replace(cur=cur)
        return pre, s.replace(cur=cur, sq=tuple(z3.Or(s.sq[q], _seg_at(s, k, s.cur[k], q)) for q in _P))
    if kind == "delete":
        k = arg
        pre = z3.And(s.live[k], z3.Or(s.lost[k], z3.And(s.stored[k], s.cur[k] == s.last[k])))
        return pre, s.replace(
            live=tuple(z3.BoolVal(False) if j == k else s.live[j] for j in _B),
            bbit=tuple(tuple(z3.BoolVal(False) for _ in _P) if j == k else s.bbit[j] for j in _B),
            mbit=tuple(z3.Or(s.mbit[q], z3.And(s.bbit[k][q], s.sq[q])) for q in _P),
        )
    p = arg
    more = z3.Bool(f"{tag}_more")
    dropped = _drop_place_bit(s, p)
    return s.sq[p], dropped.replace(sq=tuple(more if q == p else s.sq[q] for q in _P))


def places_merge(
    s: PlaceState, window: Sequence[int], slot: int, tag: str = "c", *, mutant: bool = False
) -> tuple[Any, PlaceState]:
    """DD-20, DD-21: merge the buckets of ``window`` (all created, each with an unloaded segment)
    into ``slot``: the merged bucket covers their ranges and the gap ledgers between them, holds
    every still-tracked index of their segments (loaded ones included), cut anew; the sources
    leave the range map."""
    gap = [z3.Bool(f"{tag}_gap{q}") for q in _P]
    pre = z3.And([z3.And(s.live[k], s.stored[k], s.cur[k] < s.last[k]) for k in window])
    stream = [
        z3.Or([z3.And(s.bbit[k][q], z3.Or([z3.And(i < s.last[k], s.seg[k][i][q]) for i in _S])) for k in window])
        for q in _P
    ]
    others = [k for k in _B if k not in window]
    cov = [
        z3.Or(
            *[s.cov[k][q] for k in window],
            z3.And(gap[q], z3.Not(s.mcov[q]), *[z3.Not(z3.And(s.live[k], s.cov[k][q])) for k in others]),
        )
        for q in _P
    ]
    kept = window[-1] if window[-1] != slot else window[0]
    removed = s.replace(
        live=tuple(z3.BoolVal(False) if k in window and (not mutant or k != kept) else s.live[k] for k in _B),
        bbit=tuple(
            tuple(z3.BoolVal(False) for _ in _P) if k in window and (not mutant or k != kept) else s.bbit[k] for k in _B
        ),
    )
    built_pre, post = _build_place_bucket(removed, slot, stream, cov, tag)
    return z3.And(pre, built_pre), post


def places_trim(s: PlaceState, tag: str = "c") -> PlaceState:
    """DD-22 (and DD-19's delete): buckets leave with their bits (any subset, in order)."""
    gone = [z3.Bool(f"{tag}_trim{k}") for k in _B]
    return s.replace(
        live=tuple(z3.And(s.live[k], z3.Not(gone[k])) for k in _B),
        bbit=tuple(tuple(z3.And(b, z3.Not(gone[k])) for b in s.bbit[k]) for k in _B),
    )


def places_clear(s: PlaceState) -> PlaceState:
    """DD-23: every bucket, queue and bitmap emptied."""
    no = tuple(z3.BoolVal(False) for _ in _P)
    return s.replace(
        mbit=no, mq=no, sq=no, mcov=no, live=tuple(z3.BoolVal(False) for _ in _B), bbit=tuple(no for _ in _B)
    )


def places_recover(store: PlaceState, tag: str = "c", *, mutant: bool = False) -> tuple[Any, PlaceState]:
    """DD-24, DD-26: rebuild from the snapshots (``store.seg``, ``store.last``, ``store.cov`` of the
    recovered, disjoint ranges ``store.live``; missing ones have ``stored`` false).  Leading
    expired segments (``skip``, free) are skipped; the bitmap is the union of the remaining ones;
    the first remaining segment is loaded; a bucket with none left (or no snapshot) is deleted."""
    skip = [z3.Int(f"{tag}_skip{k}") for k in _B]
    pre = z3.And([z3.Implies(store.live[k], z3.And(skip[k] >= 0, skip[k] <= store.last[k])) for k in _B])
    live = tuple(z3.And(store.live[k], store.stored[k], skip[k] < store.last[k]) for k in _B)
    # The mutant also counts the skipped (expired) segments' bits.
    bbit = tuple(
        tuple(
            z3.And(
                live[k],
                z3.Or([z3.And(i >= (0 if mutant else skip[k]), i < store.last[k], store.seg[k][i][q]) for i in _S]),
            )
            for q in _P
        )
        for k in _B
    )
    no = tuple(z3.BoolVal(False) for _ in _P)
    return pre, store.replace(
        live=live,
        lost=tuple(z3.BoolVal(False) for _ in _B),
        cur=tuple(skip[k] + 1 for k in _B),
        bbit=bbit,
        mbit=no,
        mq=no,
        mcov=no,
        sq=tuple(z3.Or([z3.And(live[k], _seg_at(store, k, skip[k], q)) for k in _B]) for q in _P),
    )


def _store_wf(s: PlaceState) -> z3.BoolRef:
    """What recovery reads: each recovered snapshot's segments lie in its range, and the
    recovered ranges are disjoint (DD-26, proved above)."""
    parts: list[Any] = []
    for k in _B:
        parts.append(z3.Implies(s.live[k], z3.And(s.last[k] >= 1, s.last[k] <= PLACE_SEGMENTS)))
        for q in _P:
            for i in _S:
                parts.append(z3.Implies(z3.And(s.live[k], s.seg[k][i][q]), z3.And(s.cov[k][q], i < s.last[k])))
            for j in _B:
                if j < k:
                    parts.append(z3.Not(z3.And(s.live[j], s.live[k], s.cov[j][q], s.cov[k][q])))
    return z3.And(parts)


def _places_initial(s: PlaceState) -> z3.BoolRef:
    return z3.And(*[z3.Not(x) for x in (*s.mbit, *s.mq, *s.sq, *s.mcov, *s.live, *itertools.chain(*s.bbit))])


def _places_obligation(command: str, *, mutant: bool = False) -> Callable[[int], Outcome]:
    def check(rlimit: int) -> Outcome:
        s = PlaceState.fresh("s")
        describe = _describe(["s_", "c_"])
        cases: list[tuple[Any, PlaceState]] = []
        if command == "recover":
            pre, post = places_recover(s, mutant=mutant)
            return prove_valid(
                exactly_one_place(post), rlimit=rlimit, describe=describe, assumptions=[_store_wf(s), pre]
            )
        if command == "add":
            cases = [places_add(s, p) for p in _P]
        elif command == "pop":
            cases = [places_pop_turn(s, "move_due", 0)]
            cases += [places_pop_turn(s, kind, k, mutant=mutant) for kind in ("load", "delete") for k in _B]
            cases += [places_pop_turn(s, "pop", p) for p in _P]
        elif command == "merge":
            for size in range(2, PLACE_BUCKETS + 1):
                for window in itertools.combinations(_B, size):
                    cases += [places_merge(s, window, slot, mutant=mutant) for slot in window]
        elif command == "trim":
            cases = [(z3.BoolVal(True), places_trim(s))]
        elif command == "clear":
            cases = [(z3.BoolVal(True), places_clear(s))]
        outcome = Outcome(Verdict.PROVED)
        for pre, post in cases:
            outcome = prove_inductive(
                init=_places_initial(s),
                inv=exactly_one_place(s),
                trans=pre,
                inv_next=exactly_one_place(post),
                rlimit=rlimit,
                describe=describe,
            )
            if outcome.verdict is not Verdict.PROVED:
                return outcome
        return outcome

    return check


OBLIGATIONS: tuple[Obligation, ...] = (
    Obligation(
        "ranges disjoint: add (seal + placement)",
        ("DD-5", "DD-6", "DD-8"),
        f"<= {SLOTS} buckets",
        _ranges_obligation("add"),
    ),
    Obligation("ranges disjoint: merge window", ("DD-5", "DD-20"), f"<= {SLOTS} buckets", _ranges_obligation("merge")),
    Obligation(
        "ranges disjoint: delete / trim / clear",
        ("DD-5", "DD-19", "DD-22", "DD-23"),
        f"<= {SLOTS} buckets",
        _ranges_obligation("delete"),
    ),
    Obligation(
        "ranges disjoint: recovery insert", ("DD-5", "DD-26"), f"<= {SLOTS} buckets", _ranges_obligation("recover")
    ),
    Obligation("count = tracked: add", ("DD-2", "DD-3", "DD-4"), f"<= {POSITIONS} positions", _count_obligation("add")),
    Obligation("count = tracked: pop", ("DD-4", "DD-15"), f"<= {POSITIONS} positions", _count_obligation("pop")),
    Obligation("count = tracked: trim", ("DD-4", "DD-22"), f"<= {POSITIONS} positions", _count_obligation("trim")),
    Obligation("returned at most once", ("DD-15",), f"<= {POSITIONS} positions", _returned_once),
    Obligation("segments in time order", ("DD-9",), f"streams of {STREAM}", _cutting("order")),
    Obligation("segment within one time step", ("DD-9",), f"streams of {STREAM}", _cutting("window")),
    Obligation("segment within max indexes", ("DD-9",), f"streams of {STREAM}", _cutting("max")),
    Obligation("never delivered early", ("DD-1", "DD-13"), "unbounded", _never_early()),
    Obligation("merge preserves tracked messages", ("DD-21",), "unbounded", _merge_preserves()),
    Obligation(
        "one_bitmap_per_bit + every_tracked_reachable: add (seal + placement)",
        ("DD-2", "DD-3", "DD-5", "DD-6", "DD-7", "DD-8", "DD-9", "DD-10", "DD-11", "DD-14"),
        PLACES_BOUND,
        _places_obligation("add"),
    ),
    Obligation(
        "one_bitmap_per_bit + every_tracked_reachable: get_scheduled_messages turn",
        ("DD-10", "DD-11", "DD-12", "DD-15", "DD-16", "DD-19", "DD-22"),
        PLACES_BOUND,
        _places_obligation("pop"),
    ),
    Obligation(
        "one_bitmap_per_bit + every_tracked_reachable: merge",
        ("DD-5", "DD-11", "DD-20", "DD-21"),
        PLACES_BOUND,
        _places_obligation("merge"),
    ),
    Obligation(
        "one_bitmap_per_bit + every_tracked_reachable: trim / mark-delete",
        ("DD-11", "DD-19", "DD-22"),
        PLACES_BOUND,
        _places_obligation("trim"),
    ),
    Obligation(
        "one_bitmap_per_bit + every_tracked_reachable: clear",
        ("DD-11", "DD-23"),
        PLACES_BOUND,
        _places_obligation("clear"),
    ),
    Obligation(
        "one_bitmap_per_bit + every_tracked_reachable: recovery",
        ("DD-5", "DD-11", "DD-24", "DD-26"),
        PLACES_BOUND,
        _places_obligation("recover"),
    ),
)

MUTANTS: dict[str, Callable[[int], Outcome]] = {
    "placement without the above-all guard": _ranges_obligation("add", mutant=True),
    "pop counted without its bit": _count_obligation("pop", mutant=True),
    "max-indexes cut one late": _cutting("max", mutant=True),
    "delivery cutoff one tick late": _never_early(mutant=True),
    "merge reads only unloaded segments": _merge_preserves(mutant=True),
    "merge keeps a source bucket": _places_obligation("merge", mutant=True),
    "load marks a segment loaded without queueing it": _places_obligation("pop", mutant=True),
    "recovery rebuilds bits from expired segments too": _places_obligation("recover", mutant=True),
}
