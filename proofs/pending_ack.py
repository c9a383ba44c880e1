"""Z3 proofs for the pending ack of one subscription (``reference.pending_ack``).

Bound: ``ENTRIES`` (3) entries of one ledger, ``TXNS`` (2) txns, each entry's batch size
symbolic in 1..64 so one ack-set word is one ``BitVec(64)`` (the entry's mask ``2**n - 1`` is the
variable); handle Ready.  Two txns suffice for the facts proved here: exclusivity is a property of
pairs, and "other txns are untouched" is stated of each other txn on its own, which the
encoding treats symmetrically.  The obligations are split per command kind so each query stays
small, and every query is pure bit-vector logic (see ``_small``).  What the encoding leaves out, and why that is
sound for the properties proved:

* the low-watermark loop (PA-14): each txn it removes is removed by the abort path of PA-13,
  whose obligations are proved here, so every invariant preserved by an abort is preserved by
  the loop;
* cumulative acks of part of a batch entry (PA-9's ``compareToWithAckSet``): cumulative acks
  are of whole entries here; the stateful tests drive the batch form;
* one request names each entry at most once; the log records and the index (PA-15, PA-16),
  which no pending-ack state depends on, are covered by the vectors and the stateful tests;
* the txn registry's order, the handle and its queue (PA-17): the invariants ``no_empty_holdings``,
  ``txn_order_is_registry``, ``queue_only_before_ready`` and ``log_index_well_formed`` are checked
  by the stateful tests only.

State: ``md`` (mark-delete entry, -1 before the first), ``idel[e]`` (individually deleted),
``cdel[e]`` (the cursor's deleted indexes of a partly deleted batch entry), per txn t and entry
e ``whole[t][e]`` / ``own[t][e]`` (individualAckOfTransaction), per entry ``cin``/``cw``/``cb``
(individualAckPositions: present, whole, bits) and the cumulative slot ``co`` (owner, -1 none) /
``ce`` (entry).  ``tests/pending_ack/test_proofs.py`` checks on random reachable states that
:func:`encode_step` and :func:`encode_replay` compute exactly what ``reference.pending_ack`` does,
and that :data:`INVARIANTS` agree with ``invariants.pending_ack.INVARIANTS``.

The replay obligations prove PA-19 by induction over a history: replaying a record logged by an
accepted live step, over any later cursor ``C'`` (one that contains the step's deletions), turns
the live pre-state with ``C'``'s deletions stripped into the live post-state with them stripped;
a normal ack (not logged) is invisible to the same view.  Replay starts from nothing pending, and
the live state holds nothing the cursor deleted (``pending_never_deleted``), so the fold ends in
the live state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import immutables
import z3

from proofs.framework import Obligation, Outcome, prove_inductive, prove_valid
from reference.pending_ack import (
    AbortTxn,
    AckBits,
    AckedPosition,
    CommitTxn,
    CumulativeAck,
    CumulativeSlot,
    CursorView,
    HandleState,
    IndividualAck,
    NormalAck,
    PendingAckState,
    initial,
)
from spec.config import Config
from spec.types import AckType, Position, TxnID

__all__ = [
    "ENTRIES",
    "INVARIANTS",
    "MUTANTS",
    "OBLIGATIONS",
    "TXNS",
    "ZCommand",
    "ZState",
    "concrete_command",
    "concrete_state",
    "encode_replay",
    "encode_step",
    "obligations",
]

ENTRIES = 3
TXNS = 2
BOUND = f"<= {ENTRIES} entries of one ledger, <= {TXNS} txns, batch size <= 64, Ready"
LEDGER = 0
TC = 1

# Command kinds.
IND, CUM, NIND, NCUM, COMMIT, ABORT = range(6)
KIND_NAMES = (
    "individual_ack",
    "cumulative_ack",
    "normal_individual_ack",
    "normal_cumulative_ack",
    "commit_txn",
    "abort_txn",
)

_W = 64
ZERO = z3.BitVecVal(0, _W)
ONE = z3.BitVecVal(1, _W)

# The small integers (mark-delete entry, slot owner and entry, the command's kind, txn and entry)
# are signed 4-bit vectors rather than Ints: every query is then pure bit-vector logic, which Z3
# bit-blasts to SAT, instead of bit-vectors mixed with arithmetic, which took it four to six times
# the resources (the replay obligations most).  They are only compared, never added, so nothing
# can overflow; every value the encoding uses fits.
_SMALL = 4
assert max(ENTRIES, TXNS, len(KIND_NAMES)) < 2 ** (_SMALL - 1)


def _small(name: str) -> Any:
    return z3.BitVec(name, _SMALL)


def _small_val(value: int) -> Any:
    return z3.BitVecVal(value, _SMALL)


@dataclass(frozen=True)
class ZState:
    md: Any
    idel: tuple[Any, ...]
    cdel: tuple[Any, ...]
    whole: tuple[tuple[Any, ...], ...]  # [t][e]
    own: tuple[tuple[Any, ...], ...]
    cin: tuple[Any, ...]
    cw: tuple[Any, ...]
    cb: tuple[Any, ...]
    co: Any
    ce: Any


@dataclass(frozen=True)
class ZCommand:
    kind: Any
    txn: Any
    entry: Any
    sel: tuple[Any, ...]
    wh: tuple[Any, ...]
    bits: tuple[Any, ...]


def _fresh_state(prefix: str) -> ZState:
    rng = range(ENTRIES)
    return ZState(
        md=_small(f"{prefix}md"),
        idel=tuple(z3.Bool(f"{prefix}idel{e}") for e in rng),
        cdel=tuple(z3.BitVec(f"{prefix}cdel{e}", _W) for e in rng),
        whole=tuple(tuple(z3.Bool(f"{prefix}whole{t}_{e}") for e in rng) for t in range(TXNS)),
        own=tuple(tuple(z3.BitVec(f"{prefix}own{t}_{e}", _W) for e in rng) for t in range(TXNS)),
        cin=tuple(z3.Bool(f"{prefix}cin{e}") for e in rng),
        cw=tuple(z3.Bool(f"{prefix}cw{e}") for e in rng),
        cb=tuple(z3.BitVec(f"{prefix}cb{e}", _W) for e in rng),
        co=_small(f"{prefix}co"),
        ce=_small(f"{prefix}ce"),
    )


def _fresh_command(prefix: str) -> ZCommand:
    rng = range(ENTRIES)
    return ZCommand(
        kind=_small(f"{prefix}kind"),
        txn=_small(f"{prefix}txn"),
        entry=_small(f"{prefix}entry"),
        sel=tuple(z3.Bool(f"{prefix}sel{e}") for e in rng),
        wh=tuple(z3.Bool(f"{prefix}wh{e}") for e in rng),
        bits=tuple(z3.BitVec(f"{prefix}bits{e}", _W) for e in rng),
    )


def _sizes(prefix: str = "n") -> tuple[Any, ...]:
    return tuple(z3.BitVec(f"{prefix}{e}", _W) for e in range(ENTRIES))


def full_masks(sizes: tuple[Any, ...]) -> tuple[Any, ...]:
    """The entry masks themselves are the variables: ``full = 2**n - 1`` for a batch of n <= 64."""
    return sizes


def size_constraints(sizes: tuple[Any, ...]) -> list[Any]:
    # A non-zero low mask (n ones, 1 <= n <= 64) is exactly a value whose successor shares no bit.
    return [z3.And(full != ZERO, full & (full + ONE) == ZERO) for full in sizes]


# ---------------------------------------------------------------------------------------------
# Building blocks, mirroring reference.pending_ack


def deleted(s: ZState, e: int) -> Any:
    return z3.Or(e <= s.md, s.idel[e])


def held(s: ZState, t: int, e: int) -> Any:
    return z3.Or(s.whole[t][e], s.own[t][e] != ZERO)


def _subset(a: Any, b: Any) -> Any:
    return a & ~b == ZERO


def _normalize(md: Any, idel: tuple[Any, ...], cdel: tuple[Any, ...], full: tuple[Any, ...]) -> tuple[Any, ...]:
    """Fold full batch entries into individual deletes and contiguous deletes into md (PA-3)."""
    idel = tuple(z3.Or(idel[e], z3.And(cdel[e] != ZERO, cdel[e] & full[e] == full[e])) for e in range(ENTRIES))
    for e in range(ENTRIES):
        md = z3.If(z3.And(md == e - 1, idel[e]), _small_val(e), md)
    idel = tuple(z3.And(idel[e], md < e) for e in range(ENTRIES))
    cdel = tuple(z3.If(z3.Or(e <= md, idel[e]), ZERO, cdel[e]) for e in range(ENTRIES))
    return (md, idel, cdel)


def _with_cursor(s: ZState, cursor: tuple[Any, ...]) -> ZState:
    md, idel, cdel = cursor
    return replace(s, md=md, idel=idel, cdel=cdel)


def strip(s: ZState) -> ZState:
    """The cursor wins: pending maps lose what the cursor deleted; the slot goes once passed (PA-11)."""
    rng = range(ENTRIES)
    gone = tuple(deleted(s, e) for e in rng)
    whole = tuple(tuple(z3.And(s.whole[t][e], z3.Not(gone[e])) for e in rng) for t in range(TXNS))
    own = tuple(
        tuple(z3.If(gone[e], ZERO, z3.If(s.whole[t][e], ZERO, s.own[t][e] & ~s.cdel[e])) for e in rng)
        for t in range(TXNS)
    )
    cb = tuple(z3.If(gone[e], ZERO, z3.If(s.cw[e], ZERO, s.cb[e] & ~s.cdel[e])) for e in rng)
    cw = tuple(z3.And(s.cw[e], s.cin[e], z3.Not(gone[e])) for e in rng)
    cin = tuple(z3.And(s.cin[e], z3.Or(cw[e], cb[e] != ZERO)) for e in rng)
    co = z3.If(z3.And(s.co >= 0, s.ce <= s.md), _small_val(-1), s.co)
    return replace(s, whole=whole, own=own, cb=cb, cw=cw, cin=cin, co=co)


def _cursor_delete(s: ZState, e: int, guard: Any, whole: Any, bits: Any) -> ZState:
    """Individually delete (whole entry, or OR in bits) entry e when ``guard``; not normalized."""
    live = z3.And(guard, z3.Not(deleted(s, e)))
    idel = tuple(z3.Or(s.idel[x], z3.And(live, whole)) if x == e else s.idel[x] for x in range(ENTRIES))
    cdel = tuple(
        z3.If(z3.And(live, z3.Not(whole)), s.cdel[x] | bits, s.cdel[x]) if x == e else s.cdel[x] for x in range(ENTRIES)
    )
    return replace(s, idel=idel, cdel=cdel)


def _release(s: ZState, t: Any) -> ZState:
    """Take txn t's holdings out of the combined map and forget t (PA-12, PA-13)."""
    rng = range(ENTRIES)
    mine_w = tuple(z3.Or(*[z3.And(t == k, s.whole[k][e]) for k in range(TXNS)]) for e in rng)
    mine_b = tuple(_pick(t, tuple(s.own[k][e] for k in range(TXNS))) for e in rng)
    cw = tuple(z3.And(s.cw[e], z3.Not(mine_w[e])) for e in rng)
    cb = tuple(s.cb[e] & ~mine_b[e] for e in rng)
    cin = tuple(z3.And(s.cin[e], z3.Or(cw[e], cb[e] != ZERO)) for e in rng)
    whole = tuple(tuple(z3.And(s.whole[k][e], t != k) for e in rng) for k in range(TXNS))
    own = tuple(tuple(z3.If(t == k, ZERO, s.own[k][e]) for e in rng) for k in range(TXNS))
    return replace(s, cw=cw, cb=cb, cin=cin, whole=whole, own=own)


def _pick(t: Any, values: tuple[Any, ...]) -> Any:
    out = ZERO
    for k, v in enumerate(values):
        out = z3.If(t == k, v, out)
    return out


def _ind_conflict(s: ZState, c: ZCommand, full: tuple[Any, ...], *, replay: bool, mutant: str | None) -> Any:
    """PA-5, PA-6, PA-7 (replay: PA-18)."""
    conflicts = []
    for e in range(ENTRIES):
        bits = c.bits[e]
        empty = z3.And(z3.Not(c.wh[e]), bits == ZERO)
        if replay:
            bits = bits & ~s.cdel[e]
            skip = z3.Or(deleted(s, e), z3.And(z3.Not(c.wh[e]), bits == ZERO))
            cursor_conflict = z3.BoolVal(False)
        else:
            skip = z3.BoolVal(False)
            cursor_conflict = z3.Or(deleted(s, e), z3.And(z3.Not(c.wh[e]), bits & s.cdel[e] != ZERO))
        pending_conflict = z3.And(s.cin[e], z3.Or(c.wh[e], s.cw[e], bits & s.cb[e] != ZERO))
        if mutant == "no_pending_conflict":
            pending_conflict = z3.BoolVal(False)
        conflicts.append(z3.And(c.sel[e], z3.Or(empty, z3.And(z3.Not(skip), z3.Or(cursor_conflict, pending_conflict)))))
    return z3.Or(*conflicts)


def _apply_ind(s: ZState, c: ZCommand) -> ZState:
    """PA-8: add the (not deleted) positions to the txn and to the combined map."""
    rng = range(ENTRIES)
    use = tuple(z3.And(c.sel[e], z3.Not(deleted(s, e))) for e in rng)
    bits = tuple(c.bits[e] & ~s.cdel[e] for e in rng)
    add_w = tuple(z3.And(use[e], c.wh[e]) for e in rng)
    add_b = tuple(z3.If(z3.And(use[e], z3.Not(c.wh[e])), bits[e], ZERO) for e in rng)
    whole = tuple(tuple(z3.Or(s.whole[k][e], z3.And(c.txn == k, add_w[e])) for e in rng) for k in range(TXNS))
    own = tuple(
        tuple(
            z3.If(
                z3.And(c.txn == k, z3.Not(whole[k][e])), s.own[k][e] | add_b[e], z3.If(whole[k][e], ZERO, s.own[k][e])
            )
            for e in rng
        )
        for k in range(TXNS)
    )
    cw = tuple(z3.Or(s.cw[e], add_w[e]) for e in rng)
    cb = tuple(z3.If(cw[e], ZERO, s.cb[e] | add_b[e]) for e in rng)
    cin = tuple(z3.Or(cw[e], cb[e] != ZERO) for e in rng)
    return replace(s, whole=whole, own=own, cw=cw, cb=cb, cin=cin)


def _commit(s: ZState, t: Any, full: tuple[Any, ...], mutant: str | None) -> ZState:
    """PA-12: the owned slot moves md; each holding is deleted on the cursor; t is forgotten."""
    owned = z3.And(s.co >= 0, s.co == t)
    md = z3.If(z3.And(owned, s.ce > s.md), s.ce, s.md)
    s1 = replace(s, md=md, co=z3.If(owned, _small_val(-1), s.co))
    for e in range(ENTRIES):
        w = z3.Or(*[z3.And(t == k, s.whole[k][e]) for k in range(TXNS)])
        b = _pick(t, tuple(s.own[k][e] for k in range(TXNS)))
        if mutant == "commit_skips_batch_bits":
            b = ZERO
        s1 = _cursor_delete(s1, e, z3.Or(w, b != ZERO), w, b)
    s1 = _with_cursor(s1, _normalize(s1.md, s1.idel, s1.cdel, full))
    return strip(_release(s1, t))


def _abort(s: ZState, t: Any) -> ZState:
    """PA-13: release t's holdings, clear its slot; the cursor does not move."""
    owned = z3.And(s.co >= 0, s.co == t)
    return replace(_release(s, t), co=z3.If(owned, _small_val(-1), s.co))


def _normal(s: ZState, c: ZCommand, full: tuple[Any, ...], cumulative: bool) -> ZState:
    """PA-11: the cursor moves; the pending maps lose what it deleted."""
    if cumulative:
        s1 = replace(s, md=z3.If(c.entry > s.md, c.entry, s.md))
    else:
        s1 = s
        for e in range(ENTRIES):
            s1 = _cursor_delete(s1, e, z3.And(c.sel[e], z3.Or(c.wh[e], c.bits[e] != ZERO)), c.wh[e], c.bits[e])
    s1 = _with_cursor(s1, _normalize(s1.md, s1.idel, s1.cdel, full))
    return strip(s1)


def _ite_state(cond: Any, a: ZState, b: ZState) -> ZState:
    def pick(x: Any, y: Any) -> Any:
        if isinstance(x, tuple):
            return tuple(pick(xi, yi) for xi, yi in zip(x, y, strict=True))
        return z3.If(cond, x, y)

    return ZState(*[pick(getattr(a, f), getattr(b, f)) for f in ZState.__dataclass_fields__])


def encode_step(
    s: ZState, c: ZCommand, full: tuple[Any, ...], mutant: str | None = None, kind: int | None = None
) -> tuple[Any, ZState]:
    """(accepted, post-state) of ``reference.pending_ack.step`` on a Ready handle.

    With ``kind`` the command kind is fixed, so only that branch is built (one obligation per
    command keeps each query small).
    """
    if kind is not None:
        return _encode_kind(s, c, full, mutant, kind)
    ind_ok = z3.Not(_ind_conflict(s, c, full, replay=False, mutant=mutant))
    cum_ok = z3.And(c.entry > s.md, z3.Or(s.co == -1, z3.And(s.co == c.txn, c.entry > s.ce)))
    if mutant == "cumulative_below_mark_delete":
        cum_ok = z3.Or(s.co == -1, z3.And(s.co == c.txn, c.entry > s.ce))
    after_ind = _apply_ind(s, c)
    after_cum = replace(s, co=c.txn, ce=c.entry)
    ok = z3.If(c.kind == IND, ind_ok, z3.If(c.kind == CUM, cum_ok, z3.BoolVal(True)))
    post = _ite_state(
        c.kind == IND,
        after_ind,
        _ite_state(
            c.kind == CUM,
            after_cum,
            _ite_state(
                c.kind == NIND,
                _normal(s, c, full, False),
                _ite_state(
                    c.kind == NCUM,
                    _normal(s, c, full, True),
                    _ite_state(c.kind == COMMIT, _commit(s, c.txn, full, mutant), _abort(s, c.txn)),
                ),
            ),
        ),
    )
    return ok, _ite_state(ok, post, s)


def _encode_kind(s: ZState, c: ZCommand, full: tuple[Any, ...], mutant: str | None, kind: int) -> tuple[Any, ZState]:
    if kind == IND:
        ok = z3.Not(_ind_conflict(s, c, full, replay=False, mutant=mutant))
        return ok, _ite_state(ok, _apply_ind(s, c), s)
    if kind == CUM:
        ok = z3.And(c.entry > s.md, z3.Or(s.co == -1, z3.And(s.co == c.txn, c.entry > s.ce)))
        if mutant == "cumulative_below_mark_delete":
            ok = z3.Or(s.co == -1, z3.And(s.co == c.txn, c.entry > s.ce))
        return ok, _ite_state(ok, replace(s, co=c.txn, ce=c.entry), s)
    true = z3.BoolVal(True)
    if kind in (NIND, NCUM):
        return true, _normal(s, c, full, kind == NCUM)
    if kind == COMMIT:
        return true, _commit(s, c.txn, full, mutant)
    return true, _abort(s, c.txn)


def encode_replay(s: ZState, c: ZCommand, full: tuple[Any, ...]) -> ZState:
    """``reference.pending_ack.replay_record`` of the record a live command wrote (PA-18)."""
    ind_ok = z3.Not(_ind_conflict(s, c, full, replay=True, mutant=None))
    cum_ok = z3.Or(s.co == -1, z3.And(s.co == c.txn, c.entry > s.ce))
    after_ind = _ite_state(ind_ok, _apply_ind(s, c), s)
    after_cum = _ite_state(cum_ok, replace(s, co=c.txn, ce=c.entry), s)
    post = _ite_state(
        c.kind == IND,
        after_ind,
        _ite_state(
            c.kind == CUM, after_cum, _ite_state(c.kind == COMMIT, _commit(s, c.txn, full, None), _abort(s, c.txn))
        ),
    )
    return strip(post)


def command_constraints(c: ZCommand, full: tuple[Any, ...]) -> list[Any]:
    out = [c.kind >= 0, c.kind <= 5, c.txn >= 0, c.txn < TXNS, c.entry >= 0, c.entry < ENTRIES]
    for e in range(ENTRIES):
        out.append(_subset(c.bits[e], full[e]))
        out.append(z3.Implies(c.wh[e], c.bits[e] == ZERO))
        out.append(z3.Implies(z3.Not(c.sel[e]), z3.And(z3.Not(c.wh[e]), c.bits[e] == ZERO)))
    return out


def state_domain(s: ZState) -> list[Any]:
    return [s.md >= -1, s.md < ENTRIES, s.co >= -1, s.co < TXNS, s.ce >= 0, s.ce < ENTRIES]


# ---------------------------------------------------------------------------------------------
# Invariants (the Z3 form of invariants.pending_ack.INVARIANTS, by the same names)


def _inv_exclusive(s: ZState, full: tuple[Any, ...]) -> Any:
    clauses = []
    for e in range(ENTRIES):
        for t in range(TXNS):
            for u in range(t + 1, TXNS):
                both = z3.And(held(s, t, e), held(s, u, e))
                clash = z3.Or(s.whole[t][e], s.whole[u][e], s.own[t][e] & s.own[u][e] != ZERO)
                clauses.append(z3.Not(z3.And(both, clash)))
    return z3.And(*clauses)


def _inv_union(s: ZState, full: tuple[Any, ...]) -> Any:
    clauses = []
    for e in range(ENTRIES):
        any_w = z3.Or(*[s.whole[t][e] for t in range(TXNS)])
        union = ZERO
        for t in range(TXNS):
            union = union | s.own[t][e]
        any_held = z3.Or(any_w, union != ZERO)
        clauses.append(s.cin[e] == any_held)
        clauses.append(z3.Implies(s.cin[e], z3.And(s.cw[e] == any_w, z3.If(any_w, s.cb[e] == ZERO, s.cb[e] == union))))
        clauses.append(z3.Implies(z3.Not(s.cin[e]), z3.And(z3.Not(s.cw[e]), s.cb[e] == ZERO)))
    return z3.And(*clauses)


def _inv_pending_never_deleted(s: ZState, full: tuple[Any, ...]) -> Any:
    clauses = []
    for e in range(ENTRIES):
        for t in range(TXNS):
            clauses.append(z3.Implies(held(s, t, e), z3.Not(deleted(s, e))))
            clauses.append(s.own[t][e] & s.cdel[e] == ZERO)
        clauses.append(z3.Implies(s.cin[e], z3.Not(deleted(s, e))))
    return z3.And(*clauses)


def _inv_cumulative(s: ZState, full: tuple[Any, ...]) -> Any:
    return z3.Implies(s.co >= 0, s.ce > s.md)


def _inv_well_formed(s: ZState, full: tuple[Any, ...]) -> Any:
    clauses = []
    for e in range(ENTRIES):
        for t in range(TXNS):
            clauses.append(_subset(s.own[t][e], full[e]))
            clauses.append(z3.Implies(s.whole[t][e], s.own[t][e] == ZERO))
        clauses.append(_subset(s.cb[e], full[e]))
        clauses.append(z3.Implies(s.cw[e], s.cb[e] == ZERO))
        clauses.append(z3.Implies(z3.And(s.cin[e], z3.Not(s.cw[e])), s.cb[e] != ZERO))
        clauses.append(_subset(s.cdel[e], full[e]))
        clauses.append(z3.Implies(s.cdel[e] != ZERO, z3.And(z3.Not(deleted(s, e)), s.cdel[e] != full[e])))
        clauses.append(z3.Implies(s.idel[e], s.md < e))
        clauses.append(z3.Not(z3.And(s.md == e - 1, s.idel[e])))
    return z3.And(*clauses)


INVARIANTS: dict[str, tuple[tuple[str, ...], Callable[[ZState, tuple[Any, ...]], Any]]] = {
    "individual_acks_exclusive": (("PA-6",), _inv_exclusive),
    "combined_is_union": (("PA-8", "PA-12", "PA-13"), _inv_union),
    "pending_never_deleted": (("PA-1", "PA-3", "PA-11"), _inv_pending_never_deleted),
    "cumulative_slot_above_mark_delete": (("PA-9", "PA-11"), _inv_cumulative),
    "ack_bits_well_formed": (("PA-2", "PA-3", "PA-7"), _inv_well_formed),
}


def all_invariants(s: ZState, full: tuple[Any, ...]) -> Any:
    return z3.And(*[f(s, full) for _rules, f in INVARIANTS.values()])


def init_state(s: ZState) -> Any:
    """A fresh subscription: any normal cursor, nothing pending (``reference.pending_ack.initial``)."""
    clauses = [s.co == -1]
    for e in range(ENTRIES):
        clauses += [z3.Not(s.cin[e]), z3.Not(s.cw[e]), s.cb[e] == ZERO]
        for t in range(TXNS):
            clauses += [z3.Not(s.whole[t][e]), s.own[t][e] == ZERO]
    return z3.And(*clauses)


# ---------------------------------------------------------------------------------------------
# Concrete values (for counterexamples and the agreement test)


def _pos(e: int) -> Position:
    return Position(LEDGER, e)


def _txn(t: int) -> TxnID:
    return TxnID(TC, t)


def concrete_state(state: PendingAckState) -> ZState:
    """The encoding of a reference state in the bound (positions (0, 0..3), txns (1, 0..2))."""
    cur = state.cursor
    md = cur.mark_delete_position
    if md.ledger_id != LEDGER and md != Position(LEDGER, -1):
        raise ValueError(f"mark-delete {md} outside the bound")
    rng = range(ENTRIES)

    def bv(x: int | None) -> Any:
        return z3.BitVecVal(x or 0, _W)

    def holding(t: int, e: int) -> AckBits | None:
        return state.individual_ack_of_transaction.get(_txn(t), immutables.Map()).get(_pos(e))

    cdel = []
    for e in rng:
        b = cur.batch_deleted.get(_pos(e))
        cdel.append(bv(b.acked if b is not None else 0))
    comb = [state.individual_ack_positions.get(_pos(e)) for e in rng]
    slot = state.cumulative_ack
    return ZState(
        md=_small_val(min(md.entry_id, ENTRIES - 1) if md.ledger_id == LEDGER else -1),
        idel=tuple(z3.BoolVal(_pos(e) in cur.individually_deleted) for e in rng),
        cdel=tuple(cdel),
        whole=tuple(tuple(z3.BoolVal(_is_whole(holding(t, e))) for e in rng) for t in range(TXNS)),
        own=tuple(tuple(bv(_bits(holding(t, e))) for e in rng) for t in range(TXNS)),
        cin=tuple(z3.BoolVal(c is not None) for c in comb),
        cw=tuple(z3.BoolVal(c is not None and c.acked is None) for c in comb),
        cb=tuple(bv(c.acked if c is not None else 0) for c in comb),
        co=_small_val(slot.txn_id.least_sig_bits if slot is not None else -1),
        ce=_small_val(slot.position.entry_id if slot is not None else 0),
    )


def _is_whole(bits: AckBits | None) -> bool:
    return bits is not None and bits.acked is None


def _bits(bits: AckBits | None) -> int:
    return 0 if bits is None or bits.acked is None else bits.acked


def concrete_command(command: Any) -> ZCommand:
    """The encoding of a reference command in the bound."""
    sel = [False] * ENTRIES
    wh = [False] * ENTRIES
    bits = [0] * ENTRIES
    kind, txn, entry = 0, 0, 0
    positions: tuple[AckedPosition, ...] = ()
    if isinstance(command, IndividualAck):
        kind, txn, positions = IND, command.txn_id.least_sig_bits, command.positions
    elif isinstance(command, CumulativeAck):
        kind, txn, entry = CUM, command.txn_id.least_sig_bits, command.positions[0].position.entry_id
    elif isinstance(command, NormalAck) and command.ack_type is AckType.INDIVIDUAL:
        kind, positions = NIND, command.positions
    elif isinstance(command, NormalAck):
        kind, entry = NCUM, command.positions[0].position.entry_id
    elif isinstance(command, CommitTxn):
        kind, txn = COMMIT, command.txn_id.least_sig_bits
    elif isinstance(command, AbortTxn):
        kind, txn = ABORT, command.txn_id.least_sig_bits
    else:
        raise TypeError(f"no encoding for {command!r}")
    for acked in positions:
        e = acked.position.entry_id
        sel[e] = True
        a = acked.acked
        wh[e] = a is None
        bits[e] = a or 0
    return ZCommand(
        kind=_small_val(kind),
        txn=_small_val(txn),
        entry=_small_val(entry),
        sel=tuple(z3.BoolVal(x) for x in sel),
        wh=tuple(z3.BoolVal(x) for x in wh),
        bits=tuple(z3.BitVecVal(x, _W) for x in bits),
    )


def _decode(model: z3.ModelRef, s: ZState, c: ZCommand, sizes: tuple[Any, ...]) -> str:
    """A counterexample as a reference state and command (replay it with ``reference.pending_ack.step``)."""

    def val(x: Any) -> int:
        return int(model.eval(x, model_completion=True).as_long())

    def tru(x: Any) -> bool:
        return bool(z3.is_true(model.eval(x, model_completion=True)))

    def signed(x: Any) -> int:
        v = model.eval(x, model_completion=True)
        return int(v.as_long()) if not isinstance(v, z3.BitVecNumRef) else int(v.as_signed_long())

    n = [val(x).bit_length() for x in sizes]  # the variables are the masks 2**n - 1
    batch: immutables.Map[Position, AckBits] = immutables.Map()
    for e in range(ENTRIES):
        if val(s.cdel[e]):
            batch = batch.set(_pos(e), AckBits(n[e], val(s.cdel[e])))
    cursor = CursorView(_pos(signed(s.md)), frozenset(_pos(e) for e in range(ENTRIES) if tru(s.idel[e])), batch)
    txns: immutables.Map[TxnID, immutables.Map[Position, AckBits]] = immutables.Map()
    for t in range(TXNS):
        holding: immutables.Map[Position, AckBits] = immutables.Map()
        for e in range(ENTRIES):
            if tru(s.whole[t][e]):
                holding = holding.set(_pos(e), AckBits(n[e], None))
            elif val(s.own[t][e]):
                holding = holding.set(_pos(e), AckBits(n[e], val(s.own[t][e])))
        if holding:
            txns = txns.set(_txn(t), holding)
    comb: immutables.Map[Position, AckBits] = immutables.Map()
    for e in range(ENTRIES):
        if tru(s.cin[e]):
            comb = comb.set(_pos(e), AckBits(n[e], None if tru(s.cw[e]) else val(s.cb[e])))
    co = signed(s.co)
    slot = CumulativeSlot(_txn(co), _pos(signed(s.ce))) if co >= 0 else None
    state = replace(
        initial(Config()),
        handle_state=HandleState.READY,
        cursor=cursor,
        individual_ack_of_transaction=txns,
        txn_order=tuple(sorted(txns.keys())),
        individual_ack_positions=comb,
        cumulative_ack=slot,
    )
    kind = signed(c.kind)
    positions = []
    for e in range(ENTRIES):
        if tru(c.sel[e]):
            if tru(c.wh[e]):
                positions.append(AckedPosition(_pos(e), None, n[e]))
            else:
                positions.append(
                    AckedPosition.of_indexes(_pos(e), n[e], [i for i in range(n[e]) if val(c.bits[e]) >> i & 1])
                )
    txn = _txn(max(0, signed(c.txn)))
    entry = AckedPosition(_pos(max(0, signed(c.entry))))
    command: Any = (
        IndividualAck(txn, tuple(positions))
        if kind == IND
        else CumulativeAck(txn, (entry,))
        if kind == CUM
        else NormalAck(AckType.INDIVIDUAL, tuple(positions))
        if kind == NIND
        else NormalAck(AckType.CUMULATIVE, (entry,))
        if kind == NCUM
        else CommitTxn(txn)
        if kind == COMMIT
        else AbortTxn(txn)
    )
    lines = [
        "state   = PendingAckState(...) with",
        f"  cursor                        = {state.cursor!r}",
        f"  individual_ack_of_transaction = {dict(state.individual_ack_of_transaction.items())!r}",
        f"  individual_ack_positions      = {dict(state.individual_ack_positions.items())!r}",
        f"  cumulative_ack                = {state.cumulative_ack!r}",
        f"command = {command!r}",
        f"batch sizes of entries 0..{ENTRIES - 1} = {n}",
        "replay: reference.pending_ack.step(replace(initial(Config()), handle_state=HandleState.READY, "
        "cursor=..., individual_ack_of_transaction=..., txn_order=tuple(sorted(...)), "
        "individual_ack_positions=..., cumulative_ack=...), command)",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Obligations


def _setup(kind: int) -> tuple[ZState, ZCommand, tuple[Any, ...], tuple[Any, ...], list[Any]]:
    s = _fresh_state("s_")
    c = _fresh_command("c_")
    sizes = _sizes()
    full = full_masks(sizes)
    background = [*size_constraints(sizes), *state_domain(s), *command_constraints(c, full), c.kind == kind]
    return s, c, sizes, full, background


def _inductive(
    name: str, rules: tuple[str, ...], inv: Callable[[ZState, tuple[Any, ...]], Any], mutant: str | None, kind: int
) -> Obligation:
    def check(rlimit: int) -> Outcome:
        s, c, sizes, full, background = _setup(kind)
        _ok, post = encode_step(s, c, full, mutant, kind)
        return prove_inductive(
            init=z3.And(init_state(s), _inv_well_formed(s, full)),
            inv=all_invariants(s, full),
            trans=z3.BoolVal(True),
            inv_next=inv(post, full),
            rlimit=rlimit,
            describe=lambda m: _decode(m, s, c, sizes),
            background=background,
        )

    return Obligation(f"{name} preserved by {KIND_NAMES[kind]}", rules, BOUND, check)


def _safety(
    name: str,
    rules: tuple[str, ...],
    claim: Callable[[ZState, ZCommand, Any, ZState, tuple[Any, ...]], Any],
    mutant: str | None,
    kind: int,
) -> Obligation:
    def check(rlimit: int) -> Outcome:
        s, c, sizes, full, background = _setup(kind)
        ok, post = encode_step(s, c, full, mutant, kind)
        return prove_valid(
            claim(s, c, ok, post, full),
            rlimit=rlimit,
            describe=lambda m: _decode(m, s, c, sizes),
            assumptions=[*background, all_invariants(s, full)],
        )

    return Obligation(name, rules, BOUND, check)


def _deleted_absorbing(s: ZState, c: ZCommand, ok: Any, post: ZState, full: tuple[Any, ...]) -> Any:
    return z3.And(
        *[
            z3.And(
                z3.Implies(deleted(s, e), deleted(post, e)), z3.Or(deleted(post, e), _subset(s.cdel[e], post.cdel[e]))
            )
            for e in range(ENTRIES)
        ]
    )


def _commit_exact(s: ZState, c: ZCommand, ok: Any, post: ZState, full: tuple[Any, ...]) -> Any:
    t = c.txn
    owned = z3.And(s.co >= 0, s.co == t)
    clauses = []
    for e in range(ENTRIES):
        mine_w = _pick_bool(t, tuple(s.whole[k][e] for k in range(TXNS)))
        mine_b = _pick(t, tuple(s.own[k][e] for k in range(TXNS)))
        in_range = z3.And(owned, e <= s.ce)
        # Its acks are deleted now, and it holds nothing any more.
        clauses.append(z3.Implies(mine_w, deleted(post, e)))
        clauses.append(z3.Or(deleted(post, e), _subset(mine_b, post.cdel[e])))
        clauses.append(z3.Not(_pick_bool(t, tuple(held(post, k, e) for k in range(TXNS)))))
        # Nothing else is deleted: a newly deleted entry or index is its own, or inside its slot.
        newly = z3.And(deleted(post, e), z3.Not(deleted(s, e)))
        clauses.append(z3.Implies(newly, z3.Or(in_range, mine_w, mine_b != ZERO)))
        clauses.append(z3.Or(deleted(post, e), _subset(post.cdel[e] & ~s.cdel[e], mine_b)))
        # Other txns lose only entries inside the committed cumulative range.
        for u in range(TXNS):
            other = t != u
            clauses.append(
                z3.Implies(
                    other,
                    z3.And(
                        post.whole[u][e] == z3.And(s.whole[u][e], z3.Not(deleted(post, e))),
                        post.own[u][e] == z3.If(deleted(post, e), ZERO, s.own[u][e]),
                        z3.Implies(z3.And(held(s, u, e), newly), in_range),
                    ),
                )
            )
    clauses.append(z3.Implies(owned, post.co == -1))
    return z3.Implies(c.kind == COMMIT, z3.And(*clauses))


def _pick_bool(t: Any, values: tuple[Any, ...]) -> Any:
    return z3.Or(*[z3.And(t == k, v) for k, v in enumerate(values)])


def _abort_exact(s: ZState, c: ZCommand, ok: Any, post: ZState, full: tuple[Any, ...]) -> Any:
    t = c.txn
    owned = z3.And(s.co >= 0, s.co == t)
    clauses = [post.md == s.md, post.co == z3.If(owned, _small_val(-1), s.co)]
    for e in range(ENTRIES):
        mine_w = _pick_bool(t, tuple(s.whole[k][e] for k in range(TXNS)))
        mine_b = _pick(t, tuple(s.own[k][e] for k in range(TXNS)))
        clauses += [post.idel[e] == s.idel[e], post.cdel[e] == s.cdel[e]]
        # Exactly its indexes return to PENDING.
        clauses.append(post.cb[e] == s.cb[e] & ~mine_b)
        clauses.append(post.cw[e] == z3.And(s.cw[e], z3.Not(mine_w)))
        for u in range(TXNS):
            clauses.append(
                z3.If(
                    t == u,
                    z3.And(z3.Not(post.whole[u][e]), post.own[u][e] == ZERO),
                    z3.And(post.whole[u][e] == s.whole[u][e], post.own[u][e] == s.own[u][e]),
                )
            )
    return z3.Implies(c.kind == ABORT, z3.And(*clauses))


def _later_cursor(s: ZState, later: ZState, full: tuple[Any, ...]) -> list[Any]:
    """``later``'s cursor contains every deletion of ``s``'s cursor and is in normal form."""
    out = [later.md >= s.md, later.md < ENTRIES, _inv_well_formed(_only_cursor(later), full)]
    for e in range(ENTRIES):
        out.append(z3.Implies(deleted(s, e), deleted(later, e)))
        out.append(z3.Or(deleted(later, e), _subset(s.cdel[e], later.cdel[e])))
    return out


def _only_cursor(s: ZState) -> ZState:
    rng = range(ENTRIES)
    no = tuple(tuple(z3.BoolVal(False) for _ in rng) for _ in range(TXNS))
    zero = tuple(tuple(ZERO for _ in rng) for _ in range(TXNS))
    return replace(
        s,
        whole=no,
        own=zero,
        cin=tuple(z3.BoolVal(False) for _ in rng),
        cw=tuple(z3.BoolVal(False) for _ in rng),
        cb=tuple(ZERO for _ in rng),
    )


def _same_pending(a: ZState, b: ZState) -> Any:
    clauses = [z3.If(a.co >= 0, z3.And(b.co == a.co, b.ce == a.ce), b.co < 0)]
    for e in range(ENTRIES):
        clauses += [a.cin[e] == b.cin[e], a.cw[e] == b.cw[e], a.cb[e] == b.cb[e]]
        for t in range(TXNS):
            clauses += [a.whole[t][e] == b.whole[t][e], a.own[t][e] == b.own[t][e]]
    return z3.And(*clauses)


def _replay_obligation(mutant: str | None, kind: int) -> Obligation:
    def check(rlimit: int) -> Outcome:
        s, c, sizes, full, background = _setup(kind)
        ok, post = encode_step(s, c, full, mutant, kind)
        later = _fresh_state("l_")
        cursor_later = [*_later_cursor(post, later, full)]
        # The replay state before the record: the live pre-state seen through the later cursor.
        before = strip(replace(s, md=later.md, idel=later.idel, cdel=later.cdel))
        after_live = strip(replace(post, md=later.md, idel=later.idel, cdel=later.cdel))
        if kind in (NIND, NCUM):
            # Not logged: invisible through any cursor that contains its deletions.
            claim = _same_pending(before, after_live)
        else:
            replayed = encode_replay(before, c, full)
            same_cursor = z3.And(
                replayed.md == later.md,
                *[z3.And(replayed.idel[e] == later.idel[e], replayed.cdel[e] == later.cdel[e]) for e in range(ENTRIES)],
            )
            claim = z3.Implies(ok, z3.And(_same_pending(replayed, after_live), same_cursor))
        return prove_valid(
            claim,
            rlimit=rlimit,
            describe=lambda m: _decode(m, s, c, sizes),
            assumptions=[*background, all_invariants(s, full), *cursor_later],
        )

    what = "is invisible to replay" if kind in (NIND, NCUM) else "replays to the live pending state"
    return Obligation(f"{KIND_NAMES[kind]} {what}", ("PA-18", "PA-19"), BOUND, check)


# Each mutant breaks one rule of the encoding; the obligation named with it must then fail.
MUTANTS = {
    "no_pending_conflict": "individual_acks_exclusive preserved by individual_ack",
    "cumulative_below_mark_delete": "cumulative_slot_above_mark_delete preserved by cumulative_ack",
    "commit_skips_batch_bits": "commit deletes exactly the txn's acks, others untouched",
}


def obligations(mutant: str | None = None) -> tuple[Obligation, ...]:
    """Every obligation; with ``mutant`` the transition has that rule broken (for the mutant tests)."""
    kinds = range(len(KIND_NAMES))
    out = [_inductive(name, rules, f, mutant, k) for name, (rules, f) in INVARIANTS.items() for k in kinds]
    out += [
        _safety(f"DELETED is absorbing under {KIND_NAMES[k]}", ("PA-3",), _deleted_absorbing, mutant, k) for k in kinds
    ]
    out.append(
        _safety("commit deletes exactly the txn's acks, others untouched", ("PA-12",), _commit_exact, mutant, COMMIT)
    )
    out.append(
        _safety("abort returns exactly the txn's individual acks to PENDING", ("PA-13",), _abort_exact, mutant, ABORT)
    )
    out += [_replay_obligation(mutant, k) for k in kinds]
    return tuple(out)


OBLIGATIONS = obligations()
