"""Z3 proofs for the transaction coordinator (rules TC-3, TC-6, TC-9, TC-13 .. TC-18, TC-23, TC-25).

The coordinator is encoded as a transition system over the parts of
``reference.coordinator.CoordinatorState`` the properties speak about, plus two ghosts:

==========  ==================================================================================
variable    meaning
==========  ==================================================================================
``live``    array seq -> Bool: the store holds this sequence (``seq in state.txns``)
``status``  array seq -> Int: its TxnStatus value (meaningful where ``live``)
``seq``     ``sequence_id``, the last sequence issued (-1 before the first)
``ready``   the store is Ready
``last``    ghost: ``max_local_txn_id`` of the last record written (what the interceptor recovers)
``issued``  ghost: array seq -> Bool, every sequence ever issued
==========  ==================================================================================

Arrays are indexed by unbounded integers, so the inductive obligations hold for every number of
transactions and every sequence ("unbounded").  Commands are encoded as functions from a pre-state
(and the command's inputs) to the post-state; ``tests/coordinator/test_proofs.py`` evaluates them
on concrete states built from reference runs and checks they give what ``reference.coordinator.step``
gives.  What the encoding abstracts, and why that is sound:

* Names (partitions, subscriptions), owners, times and record ids do not enter the properties;
  ``AddPartitionToTxn``/``AddSubscriptionToTxn`` and the queries leave the encoded state as it is.
* Refusals that depend on them are inputs: ``full`` (TC-4), ``owner_ok`` (TC-5), ``allowed``
  (TC-12), ``short`` (TC-19), ``failed`` (a participant failed, TC-16), ``due`` (the txns whose
  deadline passed, TC-18).  Each is a free Boolean, so the proofs cover every value.
* Recovery (TC-21 .. TC-24) is one command: the store becomes Ready with the same live txns and
  statuses (TC-25, established by ``tests/coordinator/test_stateful.py`` on every run and, per
  transaction, by the ``replay_reproduces_status`` obligation below), and a sequence at least the
  interceptor's ``last`` (the reference takes the max of it and what the records carry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from proofs.framework import Obligation, Outcome, prove_inductive, prove_valid
from spec.types import TXN_STATUS_TRANSITIONS, TxnStatus

__all__ = [
    "OBLIGATIONS",
    "Z",
    "build_obligations",
    "can",
    "close_store",
    "end_result",
    "end_txn",
    "new_txn",
    "recover",
    "tick",
    "update",
]

OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED = (int(s) for s in TxnStatus)
INT_BOOL = z3.ArraySort(z3.IntSort(), z3.IntSort())


@dataclass(frozen=True)
class Z:
    live: Any
    status: Any
    seq: Any
    ready: Any
    last: Any
    issued: Any

    @staticmethod
    def fresh(suffix: str) -> Z:
        return Z(
            live=z3.Array(f"live{suffix}", z3.IntSort(), z3.BoolSort()),
            status=z3.Array(f"status{suffix}", z3.IntSort(), z3.IntSort()),
            seq=z3.Int(f"seq{suffix}"),
            ready=z3.Bool(f"ready{suffix}"),
            last=z3.Int(f"last{suffix}"),
            issued=z3.Array(f"issued{suffix}", z3.IntSort(), z3.BoolSort()),
        )

    def equals(self, other: Z) -> z3.BoolRef:
        return z3.And(
            self.live == other.live,
            self.status == other.status,
            self.seq == other.seq,
            self.ready == other.ready,
            self.last == other.last,
            self.issued == other.issued,
        )

    def but(self, **changes: Any) -> Z:
        fields = {name: getattr(self, name) for name in ("live", "status", "seq", "ready", "last", "issued")}
        fields.update(changes)
        return Z(**fields)


def can(current: Any, new: Any) -> z3.BoolRef:
    """TC-6: ``spec.types.can_transition`` as a formula, built from the one table."""
    return z3.Or(
        *[z3.And(current == int(c), new == int(n)) for c, targets in TXN_STATUS_TRANSITIONS.items() for n in targets]
    )


def _terminal(status: Any) -> z3.BoolRef:
    return z3.Or(status == COMMITTED, status == ABORTED)


# --- the commands ---------------------------------------------------------------------------------


def update(z: Z, k: Any, new: Any, expected: Any, *, keep_finished: bool = False) -> Z:
    """TC-2, TC-7, TC-8, TC-9: ``UpdateTxnStatus(k, new, expected)``.  ``keep_finished`` is the
    mutant that forgets TC-9's removal."""
    current = z.status[k]
    applies = z3.And(z.ready, z.live[k], current != new, current == expected, can(current, new))
    # Every refusal after the Ready/known checks still wrote (and deleted) a record: last = seq.
    wrote = z3.And(z.ready, z.live[k], current != new)
    removed = z3.And(applies, _terminal(new)) if not keep_finished else z3.BoolVal(False)
    return z.but(
        live=z3.If(removed, z3.Store(z.live, k, False), z.live),
        status=z3.If(applies, z3.Store(z.status, k, new), z.status),
        last=z3.If(wrote, z.seq, z.last),
    )


def new_txn(z: Z, full: Any, owner_ok: Any, short: Any) -> Z:
    """TC-3, TC-4, TC-5, TC-19: ``NewTxn``; ``short`` is a timeout under 100 ms."""
    n = z.seq + 1
    accepted = z3.And(z3.Not(full), z.ready, owner_ok)
    return z.but(
        live=z3.If(accepted, z3.Store(z.live, n, True), z.live),
        status=z3.If(accepted, z3.Store(z.status, n, z3.If(short, ABORTING, OPEN)), z.status),
        seq=z3.If(accepted, n, z.seq),
        last=z3.If(accepted, n, z.last),
        issued=z3.If(accepted, z3.Store(z.issued, n, True), z.issued),
    )


def _ending(action: Any) -> Any:
    return z3.If(action == 0, COMMITTING, ABORTING)


def _final(action: Any) -> Any:
    return z3.If(action == 0, COMMITTED, ABORTED)


def end_txn(z: Z, k: Any, action: Any, allowed: Any) -> Z:
    """TC-12, TC-13: phase 1 of ``EndTxn``/``ResumeEndTxn``.  An OPEN txn is updated to the ending
    status with expected OPEN; every other case (re-drive, opposite action, unknown, refused,
    unsupported action) changes nothing, which ``update`` with expected OPEN already says."""
    valid = z3.And(allowed, z3.Or(action == 0, action == 1), z.live[k], z.status[k] == OPEN)
    return _choose(valid, update(z, k, _ending(action), OPEN), z)


def end_result(z: Z, k: Any, action: Any, failed: Any) -> Z:
    """TC-15, TC-16: phase 3 after the participants answered; a failure changes nothing."""
    return _choose(z3.Not(failed), update(z, k, _final(action), _ending(action)), z)


def tick(z: Z, due: Any) -> Z:
    """TC-18: every live OPEN txn in ``due`` goes to ABORTING (only while Ready)."""
    k = z3.Int("k")
    hit = z3.And(z.ready, due[k], z.live[k], z.status[k] == OPEN)
    some = z3.Exists([k], hit)
    return z.but(
        status=z3.Lambda([k], z3.If(hit, ABORTING, z.status[k])),
        last=z3.If(some, z.seq, z.last),
    )


def close_store(z: Z) -> Z:
    """TC-1: closing leaves Ready for good."""
    return z.but(ready=z3.BoolVal(False))


def recover(z: Z, seq_after: Any) -> Z:
    """TC-23, TC-24, TC-25: Ready again, same txns, a sequence ``seq_after`` (constrained >= last)."""
    return z.but(ready=z3.BoolVal(True), seq=seq_after)


def _choose(cond: Any, a: Z, b: Z) -> Z:
    return Z(
        live=z3.If(cond, a.live, b.live),
        status=z3.If(cond, a.status, b.status),
        seq=z3.If(cond, a.seq, b.seq),
        ready=z3.If(cond, a.ready, b.ready),
        last=z3.If(cond, a.last, b.last),
        issued=z3.If(cond, a.issued, b.issued),
    )


# --- invariants (the Z3 form of invariants/coordinator.py) ---------------------------------------


def inv_ids_below_sequence(z: Z) -> z3.BoolRef:
    """TC-3 (``ids_below_sequence``): live sequences are issued ones, ``0 <= k <= seq``."""
    k = z3.Int("k")
    return z3.And(z.seq >= -1, z3.ForAll([k], z3.Implies(z.live[k], z3.And(k >= 0, k <= z.seq, z.issued[k]))))


def inv_no_finished_txn_live(z: Z) -> z3.BoolRef:
    """TC-9 (``no_finished_txn_live``): live txns are OPEN, COMMITTING or ABORTING."""
    k = z3.Int("k")
    s = z.status[k]
    return z3.ForAll([k], z3.Implies(z.live[k], z3.Or(s == OPEN, s == COMMITTING, s == ABORTING)))


def inv_issued_below_last(z: Z) -> z3.BoolRef:
    """TC-23: every issued sequence is at most the last record's ``max_local_txn_id``, itself at
    most the counter."""
    k = z3.Int("k")
    return z3.And(z3.ForAll([k], z3.Implies(z.issued[k], k <= z.last)), z.last >= -1, z.last <= z.seq)


def init(z: Z) -> z3.BoolRef:
    """A new coordinator (``initial``): nothing live or issued, sequence -1, Ready."""
    k = z3.Int("k")
    return z3.And(z.seq == -1, z.last == -1, z.ready, z3.ForAll([k], z3.And(z3.Not(z.live[k]), z3.Not(z.issued[k]))))


def lower_bound(z: Z, c: Any) -> z3.BoolRef:
    """``c`` is at or below the effective low watermark: below the next sequence and every live one."""
    k = z3.Int("k")
    return z3.And(c < z.seq + 1, z3.ForAll([k], z3.Implies(z.live[k], c < k)))


INVARIANTS: tuple[tuple[str, tuple[str, ...], Callable[[Z], z3.BoolRef]], ...] = (
    ("ids_below_sequence", ("TC-3",), inv_ids_below_sequence),
    ("no_finished_txn_live", ("TC-9",), inv_no_finished_txn_live),
    ("issued_below_last", ("TC-23",), inv_issued_below_last),
)


def all_invariants(z: Z) -> z3.BoolRef:
    return z3.And(*[f(z) for _, _, f in INVARIANTS])


# --- commands as relations ------------------------------------------------------------------------


@dataclass(frozen=True)
class Cmd:
    name: str
    rules: tuple[str, ...]
    # (pre, post, mutant) -> the transition relation, with the command's inputs existentially free
    relation: Callable[[Z, Z, bool], z3.BoolRef]


def _k() -> Any:
    return z3.Int("arg_k")


COMMANDS: tuple[Cmd, ...] = (
    Cmd(
        "new_txn",
        ("TC-3", "TC-4", "TC-5", "TC-19"),
        lambda a, b, m: b.equals(new_txn(a, z3.Bool("full"), z3.Bool("owner_ok"), z3.Bool("short"))),
    ),
    Cmd(
        "update_txn_status",
        ("TC-7", "TC-8", "TC-9"),
        lambda a, b, m: b.equals(update(a, _k(), z3.Int("new"), z3.Int("expected"), keep_finished=m)),
    ),
    Cmd(
        "end_txn", ("TC-12", "TC-13"), lambda a, b, m: b.equals(end_txn(a, _k(), z3.Int("action"), z3.Bool("allowed")))
    ),
    Cmd(
        "end_txn_in_transaction_buffer_result",
        ("TC-15", "TC-16"),
        lambda a, b, m: (
            b.equals(end_result(a, _k(), z3.Int("action"), z3.Bool("failed")))
            if not m
            else b.equals(
                _choose(
                    z3.Not(z3.Bool("failed")),
                    update(a, _k(), _final(z3.Int("action")), _ending(z3.Int("action")), keep_finished=True),
                    a,
                )
            )
        ),
    ),
    Cmd("tick", ("TC-18",), lambda a, b, m: b.equals(tick(a, z3.Array("due", z3.IntSort(), z3.BoolSort())))),
    Cmd("close_store", ("TC-1",), lambda a, b, m: b.equals(close_store(a))),
    Cmd(
        "recover",
        ("TC-23", "TC-25"),
        lambda a, b, m: z3.And(b.equals(recover(a, z3.Int("seq_after"))), z3.Int("seq_after") >= a.last),
    ),
)


def _describe(pre: Z, post: Z, extra: tuple[Any, ...] = ()) -> Callable[[z3.ModelRef], str]:
    def render(model: z3.ModelRef) -> str:
        def ev(x: Any) -> Any:
            return model.eval(x, model_completion=True)

        lines = []
        for label, z in (("before", pre), ("after", post)):
            seq = ev(z.seq).as_long()
            window = range(-1, max(seq, 0) + 3)
            live = [k for k in window if z3.is_true(ev(z.live[k]))]
            statuses = {
                k: TxnStatus(ev(z.status[k]).as_long()).name for k in live if 0 <= ev(z.status[k]).as_long() <= 4
            }
            lines.append(f"{label}: sequence_id={seq} ready={ev(z.ready)} last={ev(z.last)} live={statuses}")
        for name in (
            "arg_k",
            "new",
            "expected",
            "action",
            "full",
            "owner_ok",
            "short",
            "allowed",
            "failed",
            "seq_after",
            *extra,
        ):
            const = z3.Int(name) if name in ("arg_k", "new", "expected", "action", "seq_after") else z3.Bool(name)
            lines.append(f"  {name} = {ev(const)}")
        return "\n".join(lines)

    return render


def _preserved(name: str, rules: tuple[str, ...], inv: Callable[[Z], z3.BoolRef], cmd: Cmd, mutant: bool) -> Obligation:
    def check(rlimit: int) -> Outcome:
        a, b = Z.fresh(""), Z.fresh("'")
        return prove_inductive(
            init=init(a),
            inv=z3.And(all_invariants(a), inv(a)),
            trans=cmd.relation(a, b, mutant),
            inv_next=inv(b),
            rlimit=rlimit,
            describe=_describe(a, b),
        )

    return Obligation(f"{name} preserved by {cmd.name}", _rules(*rules, *cmd.rules), "unbounded", check)


def _step_property(
    name: str, rules: tuple[str, ...], prop: Callable[[Z, Z], z3.BoolRef], cmd: Cmd, mutant: bool = False
) -> Obligation:
    def check(rlimit: int) -> Outcome:
        a, b = Z.fresh(""), Z.fresh("'")
        return prove_valid(
            prop(a, b),
            assumptions=(all_invariants(a), cmd.relation(a, b, mutant)),
            rlimit=rlimit,
            describe=_describe(a, b),
        )

    return Obligation(f"{name} under {cmd.name}", _rules(*rules, *cmd.rules), "unbounded", check)


def _rules(*ids: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ids))


def _lwm_monotone(a: Z, b: Z) -> z3.BoolRef:
    """TC-17: while Ready, every lower bound of the live sequences stays one."""
    c = z3.Int("c")
    return z3.Implies(z3.And(a.ready, b.ready), z3.ForAll([c], z3.Implies(lower_bound(a, c), lower_bound(b, c))))


def _follows_table(a: Z, b: Z) -> z3.BoolRef:
    """TC-6, TC-9: a txn live before and after moved along the table; one that disappeared was
    COMMITTING or ABORTING."""
    k = z3.Int("k")
    return z3.ForAll(
        [k],
        z3.Implies(
            a.live[k],
            z3.If(b.live[k], can(a.status[k], b.status[k]), z3.Or(a.status[k] == COMMITTING, a.status[k] == ABORTING)),
        ),
    )


def _fresh_ids(a: Z, b: Z) -> z3.BoolRef:
    """TC-3: a txn that appears takes a sequence never issued before, above every live one."""
    k = z3.Int("k")
    return z3.ForAll([k], z3.Implies(z3.And(b.live[k], z3.Not(a.live[k])), z3.And(z3.Not(a.issued[k]), k > a.seq)))


def _next_id_above_issued(a: Z, b: Z) -> z3.BoolRef:
    """TC-23: after recovery the next TxnID is above every TxnID ever issued."""
    k = z3.Int("k")
    return z3.ForAll([k], z3.Implies(b.issued[k], k < b.seq + 1))


# --- the transition table (TC-6) ------------------------------------------------------------------


def _table(name: str, claim: Callable[[Any, Any], z3.BoolRef]) -> Obligation:
    def check(rlimit: int) -> Outcome:
        c, n = z3.Int("current"), z3.Int("new")
        domain = z3.And(c >= 0, c <= 4, n >= 0, n <= 4)
        return prove_valid(
            z3.Implies(domain, claim(c, n)),
            rlimit=rlimit,
            describe=lambda m: f"current={m.eval(c)} new={m.eval(n)}",
        )

    return Obligation(name, ("TC-6",), "all 25 status pairs", check)


def _closed(members: tuple[int, ...]) -> Callable[[Any, Any], z3.BoolRef]:
    def claim(c: Any, n: Any) -> z3.BoolRef:
        inside = z3.Or(*[c == m for m in members])
        return z3.Implies(z3.And(inside, can(c, n)), z3.Or(*[n == m for m in members]))

    return claim


TABLE_OBLIGATIONS = (
    _table("COMMITTED is absorbing", lambda c, n: z3.Implies(z3.And(c == COMMITTED, can(c, n)), n == COMMITTED)),
    _table("ABORTED is absorbing", lambda c, n: z3.Implies(z3.And(c == ABORTED, can(c, n)), n == ABORTED)),
    # A set closed under `can` that omits ABORTED: no path of any length from COMMITTING reaches it.
    _table("from COMMITTING only {COMMITTING, COMMITTED} is reachable", _closed((COMMITTING, COMMITTED))),
    _table("from ABORTING only {ABORTING, ABORTED} is reachable", _closed((ABORTING, ABORTED))),
    _table(
        "OPEN is left only towards COMMITTING or ABORTING",
        lambda c, n: z3.Implies(z3.And(c == OPEN, n != OPEN, can(c, n)), z3.Or(n == COMMITTING, n == ABORTING)),
    ),
)


# --- replay reproduces each transaction's status (TC-21, TC-22, TC-25) ----------------------------


def _replay_obligation() -> Obligation:
    """Per transaction: ``x`` is the live status (``xl`` live), ``y`` what replaying the records
    still in the log gives (``yl`` present).  A live ``update(new, expected)`` that succeeds keeps
    its UPDATE record, which replay applies with ``TxnMeta.updateTxnStatus`` (no shortcut); a
    refused one deletes it; the shortcut writes nothing; a terminal update deletes every record.
    Invariant: ``xl == yl`` and, where live, ``x == y``.  Transactions are independent in replay
    (each record names its own), so this is the whole of TC-25 for statuses."""

    def check(rlimit: int) -> Outcome:
        x, y, xl, yl = z3.Int("x"), z3.Int("y"), z3.Bool("xl"), z3.Bool("yl")
        new, expected, ready = z3.Int("new"), z3.Int("expected"), z3.Bool("ready")
        accepted = z3.And(ready, xl, x != new, x == expected, can(x, new))
        x2 = z3.If(accepted, new, x)
        xl2 = z3.And(xl, z3.Not(z3.And(accepted, _terminal(new))))
        # Replay sees the record only if the live step kept it (accepted); it applies it without shortcut.
        replay_ok = z3.And(yl, y == expected, can(y, new))
        y2 = z3.If(z3.And(accepted, replay_ok), new, y)
        yl2 = z3.And(yl, z3.Not(z3.And(accepted, replay_ok, _terminal(new))))
        inv = z3.And(xl == yl, z3.Implies(xl, x == y), z3.Implies(xl, z3.Or(x == OPEN, x == COMMITTING, x == ABORTING)))
        inv2 = z3.And(xl2 == yl2, z3.Implies(xl2, x2 == y2))
        return prove_valid(z3.Implies(inv, inv2), rlimit=rlimit, describe=lambda m: str(m))

    return Obligation(
        "replay reproduces each txn's status", ("TC-21", "TC-22", "TC-25"), "one txn, any number of updates", check
    )


def _lwm_is_effective() -> Obligation:
    """TC-17: when a txn is live, ``min(live) - 1`` (Pulsar's value) is the greatest lower bound,
    i.e. the effective low watermark, and is below every live sequence."""

    def check(rlimit: int) -> Outcome:
        z, low, c, k = Z.fresh(""), z3.Int("low"), z3.Int("c"), z3.Int("k")
        is_min = z3.And(z.live[low + 1], z3.ForAll([k], z3.Implies(z.live[k], k >= low + 1)))
        claim = z3.And(
            z3.ForAll([k], z3.Implies(z.live[k], low < k)),
            z3.ForAll([c], lower_bound(z, c) == (c <= low)),
        )
        return prove_valid(claim, assumptions=(all_invariants(z), is_min), rlimit=rlimit)

    return Obligation("low watermark sent is the effective one", ("TC-14", "TC-17"), "unbounded", check)


def build_obligations(mutant: bool = False) -> tuple[Obligation, ...]:
    """All obligations; ``mutant`` breaks TC-9 (a finished txn is not removed) in the encoding."""
    obligations: list[Obligation] = list(TABLE_OBLIGATIONS)
    for name, rules, inv in INVARIANTS:
        for cmd in COMMANDS:
            obligations.append(_preserved(name, rules, inv, cmd, mutant))
    for cmd in COMMANDS:
        obligations.append(_step_property("statuses follow the table", ("TC-6", "TC-9"), _follows_table, cmd, mutant))
        obligations.append(_step_property("fresh ids", ("TC-3",), _fresh_ids, cmd, mutant))
        if cmd.name != "recover":  # a crash is not "while Ready"
            obligations.append(
                _step_property("lwm never decreases while Ready", ("TC-17",), _lwm_monotone, cmd, mutant)
            )
    recover_cmd = next(c for c in COMMANDS if c.name == "recover")
    obligations.append(_step_property("next id above every issued id", ("TC-23",), _next_id_above_issued, recover_cmd))
    obligations.append(_lwm_is_effective())
    obligations.append(_replay_obligation())
    return tuple(obligations)


OBLIGATIONS = build_obligations()
