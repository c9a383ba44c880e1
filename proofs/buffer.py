"""Z3 proofs for the transaction buffer (``reference.buffer``), unbounded.

The encoding abstracts one topic partition in the recovered states (Ready and NoSnapshot):

* transactions are an uninterpreted sort ``Txn`` with ``tc`` and ``seq`` (most and least bits);
* positions are integers in log order: the stored entries are exactly ``lo .. lac`` and
  ``previous(p)`` is ``p - 1``.  This is an order embedding of ``spec.types.previous_position``:
  :func:`abstract` maps a concrete state by rank, so an entry at entry 0 of a ledger whose
  predecessor ledger is empty or deleted still has the last stored entry before it as ``p - 1``;
* the buffer's memory is arrays: ``ongoing``/``first``, ``aborted``/``marker`` (single mode's
  marker positions), per-coordinator ``lwm``/``has_lwm``; the log is ``kind``/``owner``;
  ``smrp`` is the persisted snapshot's ``max_read_position``.

The low-water-mark loop of TB-13 is encoded in closed form: it aborts exactly the ongoing txns
every one of whose predecessors (by first position, themselves included) is at or below its own
coordinator's mark.  Its abort markers are "some markers after the end's own marker, each of a
removed txn, every removed txn having one" - a sound over-approximation of their order.  A
snapshot taken inside the step may record any intermediate ``max_read_position``, so ``smrp'``
is either unchanged or any position at or before the LAC and before every txn still ongoing.

``tests/buffer/test_proofs.py`` checks on random concrete states that ``reference.buffer.step``
lands in a post-state this encoding allows, and that the encoding forces the same
``max_read_position``, ongoing and aborted sets.  Status changes (recovery, first snapshot,
close) are covered by the stateful tests, not here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import z3

from proofs.framework import Obligation, Outcome, prove_inductive, prove_valid

__all__ = [
    "COMMANDS",
    "INVARIANTS",
    "OBLIGATIONS",
    "AbstractState",
    "Cmd",
    "Vars",
    "abstract",
    "abstract_state_constraints",
    "committed_by_next_end",
    "concretize",
    "encode_step",
    "finite_domain",
    "fresh",
    "init",
    "invariant",
    "message_aborted",
    "txn_domain",
    "visible",
]

READY, NO_SNAPSHOT = 0, 1
NORMAL, DATA, COMMIT, ABORT = 0, 1, 2, 3

Txn = z3.DeclareSort("Txn")
TC = z3.Function("tc", Txn, z3.IntSort())
SEQ = z3.Function("seq", Txn, z3.IntSort())
INT = z3.IntSort()
BOOL = z3.BoolSort()


@dataclass(frozen=True)
class Vars:
    """One abstract state."""

    st: z3.ArithRef
    lo: z3.ArithRef
    lac: z3.ArithRef
    mrp: z3.ArithRef
    kind: z3.ArrayRef
    owner: z3.ArrayRef
    ongoing: z3.ArrayRef
    first: z3.ArrayRef
    aborted: z3.ArrayRef
    marker: z3.ArrayRef
    lwm: z3.ArrayRef
    has_lwm: z3.ArrayRef
    has_snap: z3.BoolRef
    smrp: z3.ArithRef


def fresh(tag: str) -> Vars:
    return Vars(
        st=z3.Int(f"st{tag}"),
        lo=z3.Int(f"lo{tag}"),
        lac=z3.Int(f"lac{tag}"),
        mrp=z3.Int(f"mrp{tag}"),
        kind=z3.Array(f"kind{tag}", INT, INT),
        owner=z3.Array(f"owner{tag}", INT, Txn),
        ongoing=z3.Array(f"ongoing{tag}", Txn, BOOL),
        first=z3.Array(f"first{tag}", Txn, INT),
        aborted=z3.Array(f"aborted{tag}", Txn, BOOL),
        marker=z3.Array(f"marker{tag}", Txn, INT),
        lwm=z3.Array(f"lwm{tag}", INT, INT),
        has_lwm=z3.Array(f"has_lwm{tag}", INT, BOOL),
        has_snap=z3.Bool(f"has_snap{tag}"),
        smrp=z3.Int(f"smrp{tag}"),
    )


_t = z3.Const("t_q", Txn)
_u = z3.Const("u_q", Txn)
_q = z3.Int("q_q")

# The transitions quantify through these helpers.  In a proof they are Z3 quantifiers; inside
# ``finite_domain`` (the cross-check against the reference on a concrete state, whose Txn sort
# is closed and whose positions lie in a known range) they expand to finite conjunctions and
# disjunctions over that domain, which is the same formula evaluated on the concrete values.
_FINITE: list[tuple[tuple[z3.ExprRef, ...], range]] = []


@contextmanager
def finite_domain(txns: Iterable[z3.ExprRef], positions: range) -> Iterator[None]:
    _FINITE.append((tuple(txns), positions))
    try:
        yield
    finally:
        _FINITE.pop()


def _forall_txn(body: Callable[[z3.ExprRef], z3.BoolRef]) -> z3.BoolRef:
    if _FINITE:
        return z3.And(True, *(body(k) for k in _FINITE[-1][0]))
    v = z3.FreshConst(Txn, "t")
    return z3.ForAll([v], body(v))


def _exists_txn(body: Callable[[z3.ExprRef], z3.BoolRef]) -> z3.BoolRef:
    if _FINITE:
        return z3.Or(False, *(body(k) for k in _FINITE[-1][0]))
    v = z3.FreshConst(Txn, "t")
    return z3.Exists([v], body(v))


def _forall_pos(body: Callable[[z3.ArithRef], z3.BoolRef]) -> z3.BoolRef:
    if _FINITE:
        return z3.And(True, *(body(z3.IntVal(i)) for i in _FINITE[-1][1]))
    v = z3.FreshInt("q")
    return z3.ForAll([v], body(v))


def _exists_pos(body: Callable[[z3.ArithRef], z3.BoolRef]) -> z3.BoolRef:
    if _FINITE:
        return z3.Or(False, *(body(z3.IntVal(i)) for i in _FINITE[-1][1]))
    v = z3.FreshInt("q")
    return z3.Exists([v], body(v))


def _txn_array_is(array: z3.ArrayRef, body: Callable[[z3.ExprRef], z3.BoolRef]) -> z3.BoolRef:
    if _FINITE:
        return z3.And(True, *(array[k] == body(k) for k in _FINITE[-1][0]))
    v = z3.FreshConst(Txn, "u")
    return array == z3.Lambda([v], body(v))


def _in_domain(e: z3.ExprRef) -> z3.BoolRef:
    """True in a proof; inside ``finite_domain``, that a Txn read from an array is a domain element
    (the closure axiom, stated only where an array read needs it)."""
    if _FINITE:
        return z3.Or(False, *(e == k for k in _FINITE[-1][0]))
    return z3.BoolVal(True)


def _any_ongoing(s: Vars, ongoing: z3.ArrayRef | None = None) -> z3.BoolRef:
    og = s.ongoing if ongoing is None else ongoing
    return _exists_txn(lambda t: og[t])


# --------------------------------------------------------------------------------------------
# Invariants (the Z3 statements of invariants/buffer.py; names match)
# --------------------------------------------------------------------------------------------


def inv_mrp_before_every_ongoing(s: Vars) -> z3.BoolRef:
    return z3.ForAll([_t], z3.Implies(s.ongoing[_t], s.mrp < s.first[_t]))


def inv_mrp_right_before_first_ongoing(s: Vars) -> z3.BoolRef:
    return z3.Implies(_any_ongoing(s), z3.Exists([_t], z3.And(s.ongoing[_t], s.first[_t] == s.mrp + 1)))


def inv_mrp_at_lac_when_idle(s: Vars) -> z3.BoolRef:
    idle_tail = z3.ForAll(
        [_q],
        z3.Implies(
            z3.And(s.mrp < _q, _q <= s.lac),
            z3.And(s.kind[_q] == DATA, message_aborted(s, _q)),
        ),
    )
    nosnap = z3.And(s.mrp == s.lac, z3.ForAll([_t], z3.And(z3.Not(s.ongoing[_t]), z3.Not(s.aborted[_t]))))
    return z3.And(
        z3.Implies(z3.Not(_any_ongoing(s)), idle_tail),
        z3.Implies(s.st == NO_SNAPSHOT, nosnap),
    )


def inv_mrp_not_beyond_lac(s: Vars) -> z3.BoolRef:
    return z3.And(s.mrp <= s.lac, s.lo - 1 <= s.mrp, s.lo - 1 <= s.lac)


def inv_ongoing_first_is_own_message(s: Vars) -> z3.BoolRef:
    f = s.first[_t]
    return z3.ForAll(
        [_t],
        z3.Implies(s.ongoing[_t], z3.And(s.lo <= f, f <= s.lac, s.kind[f] == DATA, s.owner[f] == _t)),
    )


def inv_ongoing_never_aborted(s: Vars) -> z3.BoolRef:
    return z3.ForAll([_t], z3.Implies(s.ongoing[_t], z3.Not(s.aborted[_t])))


def inv_aborted_marker_stored_or_ledger_gone(s: Vars) -> z3.BoolRef:
    m = s.marker[_t]
    return z3.ForAll(
        [_t],
        z3.Implies(
            z3.And(s.aborted[_t], m >= s.lo),
            z3.And(m <= s.lac, s.kind[m] == ABORT, s.owner[m] == _t),
        ),
    )


def inv_aborted_messages_before_marker(s: Vars) -> z3.BoolRef:
    q = z3.Int("q_m")
    o = s.owner[q]
    return z3.ForAll(
        [q],
        z3.Implies(z3.And(s.lo <= q, q <= s.lac, s.kind[q] == DATA, s.aborted[o]), q < s.marker[o]),
    )


def inv_snapshot_before_every_ongoing(s: Vars) -> z3.BoolRef:
    return z3.And(
        z3.Implies(s.st == READY, s.has_snap),
        z3.Implies(
            s.has_snap,
            z3.And(s.smrp <= s.lac, z3.ForAll([_t], z3.Implies(s.ongoing[_t], s.smrp < s.first[_t]))),
        ),
    )


INVARIANTS: Mapping[str, tuple[tuple[str, ...], Callable[[Vars], z3.BoolRef]]] = {
    "mrp_before_every_ongoing": (("TB-7",), inv_mrp_before_every_ongoing),
    "mrp_right_before_first_ongoing": (("TB-7",), inv_mrp_right_before_first_ongoing),
    "mrp_at_lac_when_idle": (("TB-9", "TB-11", "TB-12"), inv_mrp_at_lac_when_idle),
    "mrp_not_beyond_lac": (("TB-7", "TB-9"), inv_mrp_not_beyond_lac),
    "ongoing_first_is_own_message": (("TB-6",), inv_ongoing_first_is_own_message),
    "ongoing_never_aborted": (("TB-8", "TB-12"), inv_ongoing_never_aborted),
    "aborted_marker_stored_or_ledger_gone": (("TB-12", "TB-23"), inv_aborted_marker_stored_or_ledger_gone),
    "aborted_messages_before_marker": (("TB-8", "TB-12"), inv_aborted_messages_before_marker),
    "snapshot_before_every_ongoing": (("TB-20", "TB-24"), inv_snapshot_before_every_ongoing),
}


def invariant(s: Vars) -> z3.BoolRef:
    return z3.And(*(fn(s) for _, fn in INVARIANTS.values()))


def domain(s: Vars) -> z3.BoolRef:
    return z3.Or(s.st == READY, s.st == NO_SNAPSHOT)


def init(s: Vars) -> z3.BoolRef:
    """A brand-new topic after a recovery that found no snapshot (TB-1, TB-2)."""
    return z3.And(
        s.st == NO_SNAPSHOT,
        s.lac == s.lo - 1,
        s.mrp == s.lac,
        z3.ForAll([_t], z3.And(z3.Not(s.ongoing[_t]), z3.Not(s.aborted[_t]))),
        z3.Not(s.has_snap),
    )


def _is_end_of(s: Vars, q: z3.ArithRef, txn: z3.ExprRef) -> z3.BoolRef:
    return z3.And(z3.Or(s.kind[q] == COMMIT, s.kind[q] == ABORT), s.owner[q] == txn)


def committed_by_next_end(s: Vars, p: z3.ArithRef) -> z3.BoolRef:
    """TB-16: the first end marker of the txn of the message at ``p`` stored after it is a commit
    marker (``invariants.buffer.messages_with_next_end`` pairs each message with that marker)."""
    txn = s.owner[p]
    return _exists_pos(
        lambda c: z3.And(
            p < c,
            c <= s.lac,
            s.kind[c] == COMMIT,
            s.owner[c] == txn,
            _forall_pos(lambda r: z3.Implies(z3.And(p < r, r < c), z3.Not(_is_end_of(s, r, txn)))),
        )
    )


def message_aborted(s: Vars, p: z3.ArithRef, *, abort_hides_committed: bool = False) -> z3.BoolRef:
    """``isTxnAborted(txn, position)`` for the message at ``p`` (TB-16): its txn is in the aborted set
    and the first end marker of that txn stored after ``p`` is not a commit marker (an abort marker,
    or none yet), as ``reference.buffer.is_message_aborted``.  With ``abort_hides_committed`` (the
    quirk of that name, ``txnmodelQuirkAbortHidesCommitted``) Pulsar's membership test alone."""
    in_aborted_set = s.aborted[s.owner[p]]
    if abort_hides_committed:
        return in_aborted_set
    return z3.And(in_aborted_set, z3.Not(committed_by_next_end(s, p)))


def visible(s: Vars, p: z3.ArithRef, *, abort_hides_committed: bool = False) -> z3.BoolRef:
    """Dispatchable (TB-15, TB-16), as ``reference.buffer.dispatchable``: stored, at or before
    max_read_position, a normal message or a message that is not aborted (:func:`message_aborted`).
    By default the rule the reference states: a message followed by a commit marker of its txn is
    delivered even when a later abort of that txn (the low-water-mark abort of a late send that
    re-opened it, TB-8, TB-13) put the txn in the aborted set; ``abort_hides_committed`` switches on
    Pulsar's membership test, which hides it.  ``tests/buffer/test_proofs.py`` checks both against
    the reference on random concrete states."""
    return z3.And(
        domain(s),
        s.lo <= p,
        p <= s.lac,
        p <= s.mrp,
        z3.Or(
            s.kind[p] == NORMAL,
            z3.And(s.kind[p] == DATA, z3.Not(message_aborted(s, p, abort_hides_committed=abort_hides_committed))),
        ),
    )


# --------------------------------------------------------------------------------------------
# Transitions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cmd:
    txn: z3.ExprRef
    lwm: z3.ArithRef
    new_lo: z3.ArithRef


def _cmd(tag: str = "") -> Cmd:
    return Cmd(z3.Const(f"cmd_txn{tag}", Txn), z3.Int(f"cmd_lwm{tag}"), z3.Int(f"cmd_new_lo{tag}"))


def _same(a: Vars, b: Vars, *skip: str) -> z3.BoolRef:
    parts = []
    for name in Vars.__dataclass_fields__:
        if name in skip:
            continue
        parts.append(getattr(a, name) == getattr(b, name))
    return z3.And(*parts)


def _min_minus_one(ongoing: z3.ArrayRef, first: z3.ArrayRef, fallback: z3.ArithRef, mrp: z3.ArithRef) -> z3.BoolRef:
    """mrp = previous(min first over ongoing), or ``fallback`` (the LAC) with nothing ongoing (TB-7)."""
    has = _exists_txn(lambda t: ongoing[t])
    least = z3.And(
        _exists_txn(lambda t: z3.And(ongoing[t], first[t] == mrp + 1)),
        _forall_txn(lambda t: z3.Implies(ongoing[t], mrp + 1 <= first[t])),
    )
    return z3.If(has, least, mrp == fallback)


def _snapshot_choice(a: Vars, b: Vars) -> z3.BoolRef:
    """A snapshot inside the step records some max_read_position of the step (TB-21)."""
    taken = z3.And(
        b.has_snap,
        b.smrp <= b.lac,
        _forall_txn(lambda t: z3.Implies(b.ongoing[t], b.smrp < b.first[t])),
    )
    return z3.Or(z3.And(b.has_snap == a.has_snap, b.smrp == a.smrp), taken)


def _end_and_loop(a: Vars, b: Vars, c: Cmd, marker_kind: int) -> z3.BoolRef:
    """Commit (TB-11) or abort (TB-12) in Ready, then the low-water-mark loop (TB-13) and the trim (TB-23)."""
    p = a.lac + 1
    kind1 = z3.Store(a.kind, p, marker_kind)
    owner1 = z3.Store(a.owner, p, c.txn)
    ongoing1 = z3.Store(a.ongoing, c.txn, False)
    if marker_kind == ABORT:
        aborted1 = z3.Store(a.aborted, c.txn, True)
        marker1 = z3.Store(a.marker, c.txn, p)
    else:
        aborted1, marker1 = a.aborted, a.marker
    tc = TC(c.txn)
    old = a.lwm[tc]
    raise_it = z3.Or(z3.Not(a.has_lwm[tc]), c.lwm > old)
    lwm1 = z3.If(raise_it, z3.Store(a.lwm, tc, c.lwm), a.lwm)
    has1 = z3.Store(a.has_lwm, tc, True)

    def below(v: z3.ExprRef) -> z3.BoolRef:
        return z3.And(has1[TC(v)], SEQ(v) <= lwm1[TC(v)])

    def removed(u: z3.ExprRef) -> z3.BoolRef:
        return z3.And(
            ongoing1[u],
            _forall_txn(lambda t: z3.Implies(z3.And(ongoing1[t], a.first[t] <= a.first[u]), below(t))),
        )

    any_removed = _exists_txn(removed)
    new_markers = _forall_pos(
        lambda q: z3.Implies(
            z3.And(p < q, q <= b.lac),
            z3.And(b.kind[q] == ABORT, _in_domain(b.owner[q]), removed(b.owner[q]), b.marker[b.owner[q]] == q),
        )
    )
    every_removed_marked = _forall_txn(
        lambda u: z3.Implies(
            removed(u),
            z3.And(p < b.marker[u], b.marker[u] <= b.lac, b.owner[b.marker[u]] == u, b.kind[b.marker[u]] == ABORT),
        )
    )
    old_log = _forall_pos(lambda q: z3.Implies(q <= p, z3.And(b.kind[q] == kind1[q], b.owner[q] == owner1[q])))
    old_markers = _forall_txn(lambda u: z3.Implies(z3.Not(removed(u)), b.marker[u] == marker1[u]))
    # Each new position is the marker of its own removed txn, so there are at most |Txn| of them;
    # over a finite domain that consequence must be stated, since positions are only expanded in a range.
    finite_bound = b.lac <= p + len(_FINITE[-1][0]) if _FINITE else z3.BoolVal(True)
    return z3.And(
        a.st == READY,
        b.st == READY,
        b.lo == a.lo,
        b.lac >= p,
        finite_bound,
        z3.Implies(z3.Not(any_removed), b.lac == p),
        old_log,
        new_markers,
        every_removed_marked,
        old_markers,
        _txn_array_is(b.ongoing, lambda u: z3.And(ongoing1[u], z3.Not(removed(u)))),
        b.first == a.first,
        _txn_array_is(b.aborted, lambda u: z3.Or(removed(u), z3.And(aborted1[u], b.marker[u] >= a.lo))),
        b.lwm == lwm1,
        b.has_lwm == has1,
        _min_minus_one(b.ongoing, b.first, b.lac, b.mrp),
        _snapshot_choice(a, b),
    )


def t_append(a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    """AppendBufferToTxn in Ready (TB-5 .. TB-8)."""
    t = c.txn
    # TB-5: at or below the coordinator's low water mark; TB-8: already aborted here (the default,
    # without the append-after-abort quirk).
    rejected = z3.Or(z3.And(a.has_lwm[TC(t)], SEQ(t) <= a.lwm[TC(t)]), a.aborted[t])
    p = a.lac + 1
    opens = z3.And(z3.Not(a.ongoing[t]), z3.Not(a.aborted[t]))
    written = z3.And(
        b.lac == p,
        b.kind == z3.Store(a.kind, p, DATA),
        b.owner == z3.Store(a.owner, p, t),
        z3.If(
            opens,
            z3.And(
                b.ongoing == z3.Store(a.ongoing, t, True),
                b.first == z3.Store(a.first, t, p),
                _min_minus_one(b.ongoing, b.first, b.lac, b.mrp),
            ),
            z3.And(b.ongoing == a.ongoing, b.first == a.first, b.mrp == a.mrp),
        ),
        _same(a, b, "lac", "kind", "owner", "ongoing", "first", "mrp"),
    )
    return z3.And(a.st == READY, z3.If(rejected, _same(a, b), written))


def t_publish(a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    """PublishMessage (TB-9)."""
    p = a.lac + 1
    moves = z3.Or(a.st == NO_SNAPSHOT, z3.Not(_any_ongoing(a)))
    return z3.And(
        domain(a),
        b.lac == p,
        b.kind == z3.Store(a.kind, p, NORMAL),
        b.mrp == z3.If(moves, p, a.mrp),
        _same(a, b, "lac", "kind", "mrp", "owner"),
        b.owner == a.owner,
    )


def t_commit(a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    """CommitTxn: in NoSnapshot a marker and nothing else (Q6), in Ready the full end (TB-11, TB-13)."""
    p = a.lac + 1
    tc = TC(c.txn)
    raise_it = z3.Or(z3.Not(a.has_lwm[tc]), c.lwm > a.lwm[tc])
    nosnap = z3.And(
        a.st == NO_SNAPSHOT,
        b.lac == p,
        b.kind == z3.Store(a.kind, p, COMMIT),
        b.owner == z3.Store(a.owner, p, c.txn),
        b.mrp == p,
        b.lwm == z3.If(raise_it, z3.Store(a.lwm, tc, c.lwm), a.lwm),
        b.has_lwm == z3.Store(a.has_lwm, tc, True),
        _same(a, b, "lac", "kind", "owner", "mrp", "lwm", "has_lwm"),
    )
    return z3.Or(nosnap, _end_and_loop(a, b, c, COMMIT))


def t_abort(a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    """AbortTxn: a no-op outside Ready (Q6), in Ready the full end (TB-12, TB-13)."""
    return z3.Or(z3.And(a.st == NO_SNAPSHOT, _same(a, b)), _end_and_loop(a, b, c, ABORT))


def t_delete_ledger(a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    """DeleteLedger: the oldest entries, all at or before max_read_position, are no longer stored (TB-23)."""
    return z3.And(
        domain(a),
        a.lo <= c.new_lo,  # an empty ledger holds no entry: nothing stops being stored
        c.new_lo <= a.mrp + 1,
        c.new_lo <= a.lac + 1,
        b.lo == c.new_lo,
        _same(a, b, "lo"),
    )


def t_take_snapshot(a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    """TakeSnapshot: a Ready buffer may record its max_read_position (TB-21)."""
    took = z3.And(a.st == READY, b.has_snap, b.smrp == a.mrp)
    return z3.And(domain(a), z3.Or(_same(a, b), z3.And(took, _same(a, b, "has_snap", "smrp"))))


def t_roll_over(a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    """RollOverLedger: nothing the buffer tracks changes (positions are ranks) (TB-2)."""
    return z3.And(domain(a), _same(a, b))


COMMANDS: Mapping[str, Callable[[Vars, Vars, Cmd], z3.BoolRef]] = {
    "append_buffer_to_txn": t_append,
    "publish_message": t_publish,
    "commit_txn": t_commit,
    "abort_txn": t_abort,
    "delete_ledger": t_delete_ledger,
    "take_snapshot": t_take_snapshot,
    "roll_over_ledger": t_roll_over,
}


def encode_step(name: str, a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    return COMMANDS[name](a, b, c)


# --------------------------------------------------------------------------------------------
# Concrete states (for the cross-check and for counterexamples)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AbstractState:
    """A concrete BufferState seen through the encoding: ranks instead of positions.  A position
    whose entry is no longer stored (its ledger was deleted) is ``None``: the encoding only knows
    it is below ``lo``."""

    st: int
    lo: int
    lac: int
    mrp: int
    kinds: tuple[tuple[int, int, Any], ...]  # (rank, kind, txn or None)
    ongoing: tuple[tuple[Any, int], ...]
    aborted: tuple[tuple[Any, int | None], ...]  # (txn, marker rank)
    low_water_marks: tuple[tuple[int, int], ...]
    has_snapshot: bool
    snapshot: int | None


def abstract(state: Any, base: int = 0) -> AbstractState:
    """Map a Ready/NoSnapshot ``reference.buffer.BufferState`` to ranks; ``base`` is the rank of the
    first stored entry (the number of entries deleted so far, as far as the caller counts them)."""
    from bisect import bisect_right

    from reference.buffer import BufferStatus, EntryKind

    positions = [e.position for e in state.entries]

    def rank(position: Any) -> int:
        return base + bisect_right(positions, position) - 1

    def stored_rank(position: Any) -> int | None:
        return rank(position) if position in set(positions) or rank(position) >= base else None

    kind_of = {
        EntryKind.NORMAL: NORMAL,
        EntryKind.TXN_DATA: DATA,
        EntryKind.TXN_COMMIT: COMMIT,
        EntryKind.TXN_ABORT: ABORT,
    }
    st = {BufferStatus.READY: READY, BufferStatus.NO_SNAPSHOT: NO_SNAPSHOT}[state.status]
    store = state.snapshot_store
    snap = (
        store.indexes.snapshot.max_read_position
        if store.indexes is not None
        else (store.snapshot.max_read_position if store.snapshot is not None else None)
    )
    return AbstractState(
        st=st,
        lo=base,
        lac=base + len(positions) - 1,
        mrp=rank(state.max_read_position),
        kinds=tuple((base + i, kind_of[e.kind], e.txn_id) for i, e in enumerate(state.entries)),
        ongoing=tuple((t, rank(p)) for t, p in state.ongoing.items()),
        aborted=tuple((t, rank(p) if p in set(positions) else None) for t, p in state.aborted.items()),
        low_water_marks=tuple(state.low_water_marks.items()),
        has_snapshot=snap is not None,
        snapshot=None if snap is None else stored_rank(snap),
    )


def abstract_state_constraints(s: Vars, a: AbstractState, txn_consts: Mapping[Any, z3.ExprRef]) -> list[z3.BoolRef]:
    """Equalities pinning ``s`` to the abstract state ``a`` on every domain element (with
    :func:`txn_domain` closing the Txn sort) and on the stored part of the log."""
    out: list[z3.BoolRef] = [s.st == a.st, s.lo == a.lo, s.lac == a.lac, s.mrp == a.mrp]
    for rank, kind, txn in a.kinds:
        out.append(s.kind[rank] == kind)
        if txn is not None:
            out.append(s.owner[rank] == txn_consts[txn])
    ongoing = dict(a.ongoing)
    aborted = dict(a.aborted)
    for txn, const in txn_consts.items():
        out.append(s.ongoing[const] == (txn in ongoing))
        if txn in ongoing:
            out.append(s.first[const] == ongoing[txn])
        out.append(s.aborted[const] == (txn in aborted))
        if txn in aborted:
            marker = aborted[txn]
            out.append(s.marker[const] < a.lo if marker is None else s.marker[const] == marker)
    marks = dict(a.low_water_marks)
    for tc in {t.most_sig_bits for t in txn_consts} | set(marks):
        out.append(s.has_lwm[tc] == (tc in marks))
        if tc in marks:
            out.append(s.lwm[tc] == marks[tc])
    out.append(s.has_snap == a.has_snapshot)
    if a.has_snapshot:
        out.append(s.smrp < a.lo if a.snapshot is None else s.smrp == a.snapshot)
    return out


def txn_domain(txns: Any, *, closed: bool = True) -> tuple[dict[Any, z3.ExprRef], list[z3.BoolRef]]:
    """One Txn constant per TxnID, pairwise distinct, with their bits; ``closed`` adds that nothing
    else is in the sort (not needed inside :func:`finite_domain`, which expands the quantifiers)."""
    consts = {t: z3.Const(f"txn_{t.most_sig_bits}_{t.least_sig_bits}", Txn) for t in sorted(set(txns))}
    facts: list[z3.BoolRef] = []
    values = list(consts.values())
    if len(values) > 1:
        facts.append(z3.Distinct(*values))
    for t, c in consts.items():
        facts += [TC(c) == t.most_sig_bits, SEQ(c) == t.least_sig_bits]
    if closed and values:
        x = z3.Const("x_closure", Txn)
        facts.append(z3.ForAll([x], z3.Or(*(x == c for c in values))))
    return consts, facts


def concretize(model: z3.ModelRef, s: Vars, cmd: Cmd | None = None, command: str | None = None) -> tuple[Any, Any]:
    """A ``reference.buffer.BufferState`` (one ledger, id 1; ledger 0 stands for deleted ledgers)
    and the command that a counterexample describes, so it can be replayed with ``step``."""
    import immutables

    from reference import buffer as tb
    from spec.config import Config
    from spec.types import LedgerInfo, Position, TxnID

    def num(e: z3.ExprRef) -> int:
        value = model.eval(e, model_completion=True)
        return value.as_long() if isinstance(value, z3.IntNumRef) else 0

    lo, lac = num(s.lo), num(s.lac)
    # Z3 may pick a long log; a counterexample is printed with at most 64 entries (the rest is elided).
    lac = min(lac, lo + 63)

    def pos(rank: int) -> Position:
        return Position(1, rank - lo) if rank >= lo - 1 else Position(0, 0)

    ids: dict[str, TxnID] = {}

    def txn(e: z3.ExprRef) -> TxnID:
        key = str(model.eval(e, model_completion=True))
        if key not in ids:
            candidate = TxnID(abs(num(TC(e))), abs(num(SEQ(e))))
            while candidate in ids.values():
                candidate = TxnID(candidate.most_sig_bits, candidate.least_sig_bits + 1000)
            ids[key] = candidate
        return ids[key]

    kinds = {
        NORMAL: tb.EntryKind.NORMAL,
        DATA: tb.EntryKind.TXN_DATA,
        COMMIT: tb.EntryKind.TXN_COMMIT,
        ABORT: tb.EntryKind.TXN_ABORT,
    }
    entries = []
    elements: list[z3.ExprRef] = []
    for rank in range(lo, lac + 1):
        kind = kinds.get(num(s.kind[rank]), tb.EntryKind.NORMAL)
        owner = None
        if kind is not tb.EntryKind.NORMAL:
            owner = txn(s.owner[rank])
            elements.append(s.owner[rank])
        entries.append(tb.LogEntry(pos(rank), kind, owner))
    if cmd is not None:
        elements.append(cmd.txn)
        txn(cmd.txn)
    ongoing: dict[TxnID, Position] = {}
    aborted: dict[TxnID, Position] = {}
    marks: dict[int, int] = {}
    for e in elements:
        t = txn(e)
        if z3.is_true(model.eval(s.ongoing[e], True)):
            ongoing[t] = pos(num(s.first[e]))
        if z3.is_true(model.eval(s.aborted[e], True)):
            aborted[t] = pos(num(s.marker[e]))
        if z3.is_true(model.eval(s.has_lwm[TC(e)], True)):
            marks[t.most_sig_bits] = num(s.lwm[TC(e)])
    base = tb.initial(Config(), recovered=False)
    store = tb.SnapshotStore()
    if z3.is_true(model.eval(s.has_snap, True)):
        store = tb.SnapshotStore(snapshot=tb.TransactionBufferSnapshot(base.topic, pos(num(s.smrp)), ()))
    from dataclasses import replace

    from reference.persistent import Log

    state = replace(
        base,
        status=tb.BufferStatus.READY if num(s.st) == READY else tb.BufferStatus.NO_SNAPSHOT,
        ledgers=(LedgerInfo(1, len(entries)),),
        entries=Log(entries),
        max_read_position=pos(num(s.mrp)),
        ongoing=immutables.Map(ongoing),
        aborted=immutables.Map(aborted),
        low_water_marks=immutables.Map(marks),
        snapshot_store=store,
    )
    command_value: Any = None
    if cmd is not None and command is not None:
        t, lwm = txn(cmd.txn), num(cmd.lwm)
        command_value = {
            "append_buffer_to_txn": tb.AppendBufferToTxn(t),
            "publish_message": tb.PublishMessage(),
            "commit_txn": tb.CommitTxn(t, lwm),
            "abort_txn": tb.AbortTxn(t, lwm),
            "delete_ledger": tb.DeleteLedger(1),
            "take_snapshot": tb.TakeSnapshot(),
            "roll_over_ledger": tb.RollOverLedger(),
        }.get(command)
    return state, command_value


def _describe(
    pre: Vars, post: Vars | None, cmd: Cmd | None, what: str, command: str | None = None
) -> Callable[[z3.ModelRef], str]:
    def render(model: z3.ModelRef) -> str:
        state, command_value = concretize(model, pre, cmd, command)
        lines = [f"{what}; replay with reference.buffer.step(state, command):"]
        lines.append(f"  status={state.status.value} max_read_position={state.max_read_position}")
        for e in state.entries:
            lines.append(f"    {e.position} {e.kind.value} {e.txn_id if e.txn_id is not None else ''}")
        lines.append(f"  ongoing={ {str(t): str(p) for t, p in state.ongoing.items()} }")
        lines.append(f"  aborted={ {str(t): str(p) for t, p in state.aborted.items()} }")
        lines.append(f"  low_water_marks={dict(state.low_water_marks)}")
        snap = state.snapshot_store.snapshot
        lines.append(f"  snapshot max_read_position={snap.max_read_position if snap is not None else None}")
        if command_value is not None:
            lines.append(f"  command={command_value!r}")
        if post is not None:
            lines.append(
                f"  after (encoding): max_read_position rank={model.eval(post.mrp, True)}"
                f" lac rank={model.eval(post.lac, True)} (rank r is position (1, r - {model.eval(pre.lo, True)}))"
            )
        return "\n".join(lines)

    return render


# --------------------------------------------------------------------------------------------
# Obligations
# --------------------------------------------------------------------------------------------

UNBOUNDED = "unbounded; Ready/NoSnapshot"


def _inductive(inv_name: str, command: str, transitions: Mapping[str, Any] | None = None) -> Obligation:
    rules, fn = INVARIANTS[inv_name]
    table = COMMANDS if transitions is None else transitions

    def check(rlimit: int) -> Outcome:
        a, b, c = fresh(""), fresh("'"), _cmd()
        return prove_inductive(
            init=init(a),
            inv=z3.And(invariant(a), domain(a)),
            trans=table[command](a, b, c),
            inv_next=fn(b),
            rlimit=rlimit,
            describe=_describe(a, b, c, f"{inv_name} broken by {command}", command),
        )

    return Obligation(f"{inv_name} / {command}", rules, UNBOUNDED, check)


def _safety(name: str, rules: tuple[str, ...], claim: Callable[[Vars], z3.BoolRef]) -> Obligation:
    def check(rlimit: int) -> Outcome:
        s = fresh("")
        return prove_valid(
            claim(s),
            rlimit=rlimit,
            describe=_describe(s, None, None, name),
            assumptions=[invariant(s), domain(s)],
        )

    return Obligation(name, rules, UNBOUNDED, check)


def _step_property(
    name: str,
    rules: tuple[str, ...],
    command: str,
    claim: Callable[[Vars, Vars, Cmd], z3.BoolRef],
    lemmas: tuple[Callable[[Vars, Vars], z3.BoolRef], ...] = (),
) -> Obligation:
    """``claim`` holds of every step of ``command`` from a state satisfying the invariants.  Each of
    ``lemmas`` is assumed of the step: every one is an obligation of its own (see :func:`_obligations`),
    proved for that command or for any two states, so assuming it is sound; it spares the solver a
    search through the transition's quantifiers."""

    def check(rlimit: int) -> Outcome:
        a, b, c = fresh(""), fresh("'"), _cmd()
        return prove_valid(
            claim(a, b, c),
            rlimit=rlimit,
            describe=_describe(a, b, c, f"{name} broken by {command}", command),
            assumptions=[invariant(a), domain(a), COMMANDS[command](a, b, c), *(lemma(a, b) for lemma in lemmas)],
        )

    return Obligation(f"{name} / {command}", rules, UNBOUNDED, check)


def claim_nothing_aborted_or_marker_dispatchable(s: Vars, abort_hides_committed: bool = False) -> z3.BoolRef:
    """TB-16: a reader never receives a marker or an aborted message."""
    return z3.ForAll(
        [_q],
        z3.Implies(
            visible(s, _q, abort_hides_committed=abort_hides_committed),
            z3.And(
                s.kind[_q] != COMMIT,
                s.kind[_q] != ABORT,
                z3.Implies(
                    s.kind[_q] == DATA,
                    z3.Not(message_aborted(s, _q, abort_hides_committed=abort_hides_committed)),
                ),
            ),
        ),
    )


def claim_committed_message_never_aborted(s: Vars, abort_hides_committed: bool = False) -> z3.BoolRef:
    """TB-16: a stored message at or before max_read_position whose txn's first end marker after it is a
    commit marker is dispatchable, whatever later ends of its txn put the txn in the aborted set."""
    decided_commit = z3.And(s.lo <= _q, _q <= s.mrp, s.kind[_q] == DATA, committed_by_next_end(s, _q))
    return z3.ForAll([_q], z3.Implies(decided_commit, visible(s, _q, abort_hides_committed=abort_hides_committed)))


def claim_open_txn_messages_hidden(s: Vars, abort_hides_committed: bool = False) -> z3.BoolRef:
    """TB-15: no message of an ongoing txn at or after its first position is dispatchable."""
    o = s.owner[_q]
    return z3.ForAll(
        [_q],
        z3.Implies(
            z3.And(s.kind[_q] == DATA, s.ongoing[o], _q >= s.first[o]),
            z3.Not(visible(s, _q, abort_hides_committed=abort_hides_committed)),
        ),
    )


def claim_normal_behind_open_txn_hidden(s: Vars, abort_hides_committed: bool = False) -> z3.BoolRef:
    """TB-15: a normal message after the first message of an ongoing txn is not dispatchable."""
    return z3.ForAll(
        [_q, _t],
        z3.Implies(
            z3.And(s.ongoing[_t], _q >= s.first[_t]),
            z3.Not(visible(s, _q, abort_hides_committed=abort_hides_committed)),
        ),
    )


def claim_quiescent_all_committed_visible(s: Vars, abort_hides_committed: bool = False) -> z3.BoolRef:
    """TB-19: nothing ongoing, every stored normal message and message not aborted is visible."""
    eligible = z3.Or(
        s.kind[_q] == NORMAL,
        z3.And(s.kind[_q] == DATA, z3.Not(message_aborted(s, _q, abort_hides_committed=abort_hides_committed))),
    )
    return z3.Implies(
        z3.Not(_any_ongoing(s)),
        z3.ForAll(
            [_q],
            z3.Implies(
                z3.And(s.lo <= _q, _q <= s.lac, eligible),
                visible(s, _q, abort_hides_committed=abort_hides_committed),
            ),
        ),
    )


def claim_visibility_is_prefix(s: Vars, abort_hides_committed: bool = False) -> z3.BoolRef:
    """TB-19: of one txn's messages that are not aborted, a visible one has every earlier stored one
    visible.  For a txn not in the aborted set that is all its messages; under the default TB-16 an
    aborted txn's messages decided by an earlier commit marker are not aborted, and they form a prefix."""
    p, q = z3.Ints("p_v q_v")
    same = z3.And(s.kind[p] == DATA, s.kind[q] == DATA, s.owner[p] == s.owner[q], s.lo <= p, p < q)
    flag = abort_hides_committed
    return z3.ForAll(
        [p, q],
        z3.Implies(
            z3.And(
                same,
                z3.Not(message_aborted(s, p, abort_hides_committed=flag)),
                visible(s, q, abort_hides_committed=flag),
            ),
            visible(s, p, abort_hides_committed=flag),
        ),
    )


def claim_strict_atomic_visibility(s: Vars, abort_hides_committed: bool = False) -> z3.BoolRef:
    """The *strict* form of atomic visibility - refuted: see TB-19 and tests/buffer/test_proofs.py."""
    p, q = z3.Ints("p_a q_a")
    same = z3.And(
        s.kind[p] == DATA, s.kind[q] == DATA, s.owner[p] == s.owner[q], s.lo <= p, p <= s.lac, s.lo <= q, q <= s.lac
    )
    flag = abort_hides_committed
    return z3.ForAll(
        [p, q],
        z3.Implies(same, visible(s, p, abort_hides_committed=flag) == visible(s, q, abort_hides_committed=flag)),
    )


def step_readable_mrp_monotone(a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    """TB-10."""
    return b.mrp >= a.mrp


def step_no_backfill(a: Vars, b: Vars, c: Cmd, abort_hides_committed: bool = False) -> z3.BoolRef:
    """TB-17 (and TB-23's exception): a newly visible position is after everything visible before,
    unless it is a message of an aborted txn forgotten in this step."""
    p, q = z3.Ints("p_b q_b")
    forgotten = z3.And(b.kind[p] == DATA, a.aborted[a.owner[p]], z3.Not(b.aborted[b.owner[p]]))
    flag = abort_hides_committed
    return z3.ForAll(
        [p, q],
        z3.Implies(
            z3.And(
                visible(b, p, abort_hides_committed=flag),
                z3.Not(visible(a, p, abort_hides_committed=flag)),
                visible(a, q, abort_hides_committed=flag),
            ),
            z3.Or(p > q, forgotten),
        ),
    )


def step_trim_exact(a: Vars, b: Vars, c: Cmd) -> z3.BoolRef:
    """TB-23: an end makes the buffer forget exactly the aborted txns whose abort marker is no longer
    stored (the txn being aborted itself gets a new marker and is remembered)."""
    lost = z3.And(a.aborted[_t], z3.Not(b.aborted[_t]))
    trimmed = z3.And(a.aborted[_t], a.marker[_t] < a.lo)
    return z3.ForAll([_t], z3.Implies(_t != c.txn, lost == trimmed))


def log_extends(a: Vars, b: Vars) -> z3.BoolRef:
    """Every command leaves the entries up to the old LAC as they were, and only appends (TB-2; a
    deleted ledger's entries are below ``lo``, not rewritten, TB-23)."""
    q = z3.Int("q_x")
    return z3.And(
        a.lac <= b.lac,
        z3.ForAll([q], z3.Implies(q <= a.lac, z3.And(b.kind[q] == a.kind[q], b.owner[q] == a.owner[q]))),
    )


def decided_messages_stay_decided(a: Vars, b: Vars) -> z3.BoolRef:
    """TB-16: a message with an end marker of its txn stored after it is decided for good: appending
    to the log cannot make the first such marker a commit marker when it was not."""
    p, m = z3.Ints("p_k m_k")
    return z3.ForAll(
        [p, m],
        z3.Implies(
            z3.And(p < m, m <= a.lac, _is_end_of(a, m, a.owner[p]), z3.Not(committed_by_next_end(a, p))),
            z3.Not(committed_by_next_end(b, p)),
        ),
    )


def _step_lemma(
    name: str, rules: tuple[str, ...], command: str, claim: Callable[[Vars, Vars], z3.BoolRef]
) -> Obligation:
    return _step_property(name, rules, command, lambda a, b, c: claim(a, b))


def _two_state_lemma(name: str, rules: tuple[str, ...], claim: Callable[[Vars, Vars], z3.BoolRef]) -> Obligation:
    """A fact about any two abstract states whose logs are related by :func:`log_extends`."""

    def check(rlimit: int) -> Outcome:
        a, b = fresh(""), fresh("'")
        return prove_valid(
            claim(a, b), rlimit=rlimit, describe=_describe(a, b, None, name), assumptions=[log_extends(a, b)]
        )

    return Obligation(name, rules, UNBOUNDED, check)


def _trim_loop_bounded(n: int) -> Obligation:
    """TB-23's loop ("while the oldest marker's ledger is gone, drop it") drops exactly the markers
    below ``lo`` when markers are kept in ascending order: checked for every list of ``n`` markers."""

    def check(rlimit: int) -> Outcome:
        markers = [z3.Int(f"m{i}") for i in range(n)]
        lo = z3.Int("lo_trim")
        sorted_ = z3.And(*(markers[i] < markers[i + 1] for i in range(n - 1)))
        # Unrolled loop: keep_from[i] is True once the loop has stopped at or before i.
        stopped = z3.BoolVal(False)
        claims = []
        for m in markers:
            stopped = z3.Or(stopped, m >= lo)
            dropped = z3.Not(stopped)
            claims.append(dropped == (m < lo))
        return prove_valid(z3.And(*claims), rlimit=rlimit, assumptions=[sorted_])

    return Obligation(f"trim_loop_drops_exactly_deleted_markers (n={n})", ("TB-23",), f"<= {n} aborted txns", check)


QUIRK = "abort-hides-committed"

# The claims about what a reader sees, each proved for the default TB-16 and for the quirk.
VISIBILITY_CLAIMS: tuple[tuple[str, tuple[str, ...], Callable[..., z3.BoolRef]], ...] = (
    ("nothing_aborted_or_marker_dispatchable", ("TB-16",), claim_nothing_aborted_or_marker_dispatchable),
    ("open_txn_messages_hidden", ("TB-15",), claim_open_txn_messages_hidden),
    ("normal_behind_open_txn_hidden", ("TB-15", "TB-9"), claim_normal_behind_open_txn_hidden),
    ("quiescent_all_committed_visible", ("TB-19",), claim_quiescent_all_committed_visible),
    ("visibility_is_prefix_of_txn", ("TB-19",), claim_visibility_is_prefix),
)


def _obligations() -> tuple[Obligation, ...]:
    out: list[Obligation] = []
    for name in INVARIANTS:
        for command in COMMANDS:
            out.append(_inductive(name, command))
    # The lemmas no_backfill assumes: every command only appends to the log, and a message with an end
    # marker of its txn after it keeps its decision when the log grows (TB-16).
    for command in COMMANDS:
        out.append(_step_lemma("log_extends", ("TB-2", "TB-23"), command, log_extends))
    out.append(_two_state_lemma("decided_messages_stay_decided", ("TB-16",), decided_messages_stay_decided))
    lemmas = (log_extends, decided_messages_stay_decided)
    for flag in (False, True):
        suffix = f" [{QUIRK}]" if flag else ""
        for name, rules, claim in VISIBILITY_CLAIMS:
            out.append(_safety(name + suffix, rules, partial(claim, abort_hides_committed=flag)))
        no_backfill = partial(step_no_backfill, abort_hides_committed=flag)
        for command in COMMANDS:
            out.append(_step_property("no_backfill" + suffix, ("TB-17", "TB-23"), command, no_backfill, lemmas))
    out.append(_safety("committed_message_never_aborted", ("TB-16",), claim_committed_message_never_aborted))
    for command in COMMANDS:
        out.append(_step_property("readable_mrp_monotone", ("TB-10",), command, step_readable_mrp_monotone))
    for command in ("commit_txn", "abort_txn"):
        out.append(_step_property("trim_exact", ("TB-23",), command, step_trim_exact))
    out.append(_trim_loop_bounded(8))
    return tuple(out)


OBLIGATIONS: tuple[Obligation, ...] = _obligations()
