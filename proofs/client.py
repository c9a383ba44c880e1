"""Z3 proofs for the client's transaction object (rules TC-29 .. TC-36).

The whole of ``reference.client.ClientTxn`` that the properties speak about is encoded:

===========  =======================================================================
variable     meaning
===========  =======================================================================
``st``       the state, as its index in ``spec.types.ClientTxnState``
``pending``  sends and acks not yet answered (an unbounded integer)
``failed``   one of them failed
``end``      the END_TXN asked for: -1 none, 0 COMMIT, 1 ABORT
``sent``     END_TXN is on the wire
``became``   a commit turned into an abort (TC-32)
===========  =======================================================================

Registered topic names only decide whether a registration request is sent (TC-30) and do not
enter any property, so they are left out.  Commands are functions from the pre-state and their
inputs to the post-state; ``tests/client/test_proofs.py`` checks them against
``reference.client.step``.  With ``pending`` unbounded, every obligation is "unbounded".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import z3

from proofs.framework import Obligation, Outcome, prove_inductive, prove_valid
from spec.types import CLIENT_TXN_TRANSITIONS, ClientTxnState

__all__ = ["COMMANDS", "OBLIGATIONS", "C", "build_obligations", "can", "index"]

STATES = list(ClientTxnState)


def index(state: ClientTxnState) -> int:
    return STATES.index(state)


OPEN, COMMITTING, ABORTING, COMMITTED, ABORTED, ERROR, TIME_OUT = (index(s) for s in STATES)
NONE, COMMIT, ABORT = -1, 0, 1
# EndTxnResponse kinds: success, TransactionNotFound/InvalidTxnStatus, CoordinatorNotFound, other.
R_OK, R_FATAL, R_RESEND, R_OTHER = 0, 1, 2, 3


@dataclass(frozen=True)
class C:
    st: Any
    pending: Any
    failed: Any
    end: Any
    sent: Any
    became: Any

    @staticmethod
    def fresh(suffix: str) -> C:
        return C(
            z3.Int(f"st{suffix}"),
            z3.Int(f"pending{suffix}"),
            z3.Bool(f"failed{suffix}"),
            z3.Int(f"end{suffix}"),
            z3.Bool(f"sent{suffix}"),
            z3.Bool(f"became{suffix}"),
        )

    def but(self, **changes: Any) -> C:
        fields = {n: getattr(self, n) for n in ("st", "pending", "failed", "end", "sent", "became")}
        fields.update(changes)
        return C(**fields)

    def equals(self, o: C) -> z3.BoolRef:
        return z3.And(
            self.st == o.st,
            self.pending == o.pending,
            self.failed == o.failed,
            self.end == o.end,
            self.sent == o.sent,
            self.became == o.became,
        )


def _if(cond: Any, a: C, b: C) -> C:
    return C(*(z3.If(cond, getattr(a, n), getattr(b, n)) for n in ("st", "pending", "failed", "end", "sent", "became")))


def can(current: Any, new: Any) -> z3.BoolRef:
    """TC-29: ``spec.types.client_can_transition`` as a formula, from the one table."""
    return z3.Or(
        *[
            z3.And(current == index(c), new == index(n))
            for c, targets in CLIENT_TXN_TRANSITIONS.items()
            for n in sorted(targets, key=index)  # a set: its order would change the query per process
        ]
    )


# --- commands ---------------------------------------------------------------------------------


def _drain(c: C, *, mutant: bool = False) -> C:
    """TC-32, TC-33: send END_TXN once nothing is pending; a commit with a failed op aborts."""
    ready = z3.And(c.end != NONE, z3.Not(c.sent), c.pending == 0)
    switch = z3.And(ready, c.end == COMMIT, c.failed) if not mutant else z3.BoolVal(False)
    return c.but(
        st=z3.If(switch, ABORTING, c.st),
        end=z3.If(switch, ABORT, c.end),
        became=z3.Or(c.became, switch),
        sent=z3.Or(c.sent, ready),
    )


def op_started(c: C) -> C:
    """TC-30, TC-31: a send or ack, accepted only while OPEN."""
    return _if(c.st == OPEN, c.but(pending=c.pending + 1), c)


def op_completed(c: C, failed: Any, mutant: bool = False) -> C:
    """TC-32: an answered operation (the reference refuses one that was never started)."""
    return _drain(c.but(pending=c.pending - 1, failed=z3.Or(c.failed, failed)), mutant=mutant)


def end(c: C, action: int, mutant: bool = False) -> C:
    """TC-32, TC-33, TC-35: commit (action 0) or abort (action 1)."""
    ending = COMMITTING if action == COMMIT else ABORTING
    accepted = z3.Or(c.st == OPEN, c.st == ending)
    fresh = _drain(c.but(st=ending, end=action), mutant=mutant)
    retry = z3.And(c.st == ending, c.sent)
    return _if(z3.And(accepted, z3.Not(retry)), fresh, c)


def response(c: C, kind: Any) -> C:
    """TC-34: the coordinator's answer to END_TXN."""
    waiting = z3.And(z3.Or(c.st == COMMITTING, c.st == ABORTING), c.sent, c.end != NONE)
    done = z3.If(c.end == COMMIT, COMMITTED, ABORTED)
    new_st = z3.If(kind == R_OK, done, z3.If(kind == R_FATAL, ERROR, c.st))
    return _if(waiting, c.but(st=new_st), c)


def timeout(c: C) -> C:
    """TC-36: OPEN -> TIME_OUT; otherwise nothing."""
    return c.but(st=z3.If(c.st == OPEN, TIME_OUT, c.st))


# --- invariants (the Z3 form of invariants/client.py) -----------------------------------------


def inv_well_formed(c: C) -> z3.BoolRef:
    return z3.And(c.st >= 0, c.st < len(STATES), z3.Or(c.end == NONE, c.end == COMMIT, c.end == ABORT))


def inv_pending_non_negative(c: C) -> z3.BoolRef:
    """TC-32 (``pending_non_negative``)."""
    return c.pending >= 0


def inv_end_matches_state(c: C) -> z3.BoolRef:
    """TC-32, TC-33 (``end_matches_state``)."""
    return z3.If(
        z3.Or(c.st == OPEN, c.st == TIME_OUT),
        z3.And(c.end == NONE, z3.Not(c.sent)),
        z3.If(
            c.st == COMMITTING, c.end == COMMIT, z3.If(c.st == ABORTING, c.end == ABORT, z3.And(c.end != NONE, c.sent))
        ),
    )


def inv_sent_only_when_drained(c: C) -> z3.BoolRef:
    """TC-32 (``sent_only_when_drained``)."""
    return z3.Implies(c.sent, c.pending == 0)


def inv_commit_with_failed_op_aborts(c: C) -> z3.BoolRef:
    """TC-32 (``commit_with_failed_op_aborts``)."""
    return z3.If(
        c.st == COMMITTED,
        z3.Not(c.failed),
        z3.If(
            c.became,
            z3.And(z3.Or(c.st == ABORTING, c.st == ABORTED, c.st == ERROR), c.failed),
            z3.Not(z3.And(c.st == COMMITTING, c.sent, c.failed)),
        ),
    )


INVARIANTS: tuple[tuple[str, tuple[str, ...], Callable[[C], z3.BoolRef]], ...] = (
    ("pending_non_negative", ("TC-32",), inv_pending_non_negative),
    ("end_matches_state", ("TC-32", "TC-33"), inv_end_matches_state),
    ("sent_only_when_drained", ("TC-32",), inv_sent_only_when_drained),
    ("commit_with_failed_op_aborts", ("TC-32",), inv_commit_with_failed_op_aborts),
)


def all_invariants(c: C) -> z3.BoolRef:
    return z3.And(inv_well_formed(c), *[f(c) for _, _, f in INVARIANTS])


def init(c: C) -> z3.BoolRef:
    return z3.And(c.st == OPEN, c.pending == 0, z3.Not(c.failed), c.end == NONE, z3.Not(c.sent), z3.Not(c.became))


@dataclass(frozen=True)
class Cmd:
    name: str
    rules: tuple[str, ...]
    relation: Callable[[C, C, bool], z3.BoolRef]


COMMANDS: tuple[Cmd, ...] = (
    Cmd("send_or_ack", ("TC-30", "TC-31"), lambda a, b, m: b.equals(op_started(a))),
    # The reference refuses (raises on) a completion with nothing pending: that is the guard.
    Cmd(
        "op_completed",
        ("TC-32",),
        lambda a, b, m: z3.And(a.pending > 0, b.equals(op_completed(a, z3.Bool("op_failed"), m))),
    ),
    Cmd("commit", ("TC-32", "TC-35"), lambda a, b, m: b.equals(end(a, COMMIT, m))),
    Cmd("abort", ("TC-33", "TC-35"), lambda a, b, m: b.equals(end(a, ABORT, m))),
    Cmd("end_txn_response", ("TC-34",), lambda a, b, m: b.equals(response(a, z3.Int("kind")))),
    Cmd("timeout_fired", ("TC-36",), lambda a, b, m: b.equals(timeout(a))),
)


def _describe(a: C, b: C) -> Callable[[z3.ModelRef], str]:
    def render(model: z3.ModelRef) -> str:
        def show(c: C) -> str:
            st = model.eval(c.st, model_completion=True).as_long()
            name = STATES[st].value if 0 <= st < len(STATES) else str(st)

            def ev(x: Any) -> Any:
                return model.eval(x, model_completion=True)

            return (
                f"state={name} pending={ev(c.pending)} failed={ev(c.failed)} end={ev(c.end)} "
                f"sent={ev(c.sent)} became={ev(c.became)}"
            )

        return (
            f"before: {show(a)}\nafter:  {show(b)}\n  op_failed={model.eval(z3.Bool('op_failed'))} "
            f"kind={model.eval(z3.Int('kind'))}"
        )

    return render


def _rules(*ids: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(ids))


def _preserved(name: str, rules: tuple[str, ...], inv: Callable[[C], z3.BoolRef], cmd: Cmd, mutant: bool) -> Obligation:
    def check(rlimit: int) -> Outcome:
        a, b = C.fresh(""), C.fresh("'")
        return prove_inductive(
            init=init(a),
            inv=z3.And(all_invariants(a), inv(a)),
            trans=cmd.relation(a, b, mutant),
            inv_next=z3.And(inv_well_formed(b), inv(b)),
            rlimit=rlimit,
            describe=_describe(a, b),
        )

    return Obligation(f"{name} preserved by {cmd.name}", _rules(*rules, *cmd.rules), "unbounded", check)


def _follows_table(cmd: Cmd, mutant: bool) -> Obligation:
    def check(rlimit: int) -> Outcome:
        a, b = C.fresh(""), C.fresh("'")
        return prove_valid(
            z3.Or(a.st == b.st, can(a.st, b.st)),
            assumptions=(all_invariants(a), cmd.relation(a, b, mutant)),
            rlimit=rlimit,
            describe=_describe(a, b),
        )

    return Obligation(
        f"state changes follow the table under {cmd.name}", _rules("TC-29", *cmd.rules), "unbounded", check
    )


def _table(name: str, claim: Callable[[Any, Any], z3.BoolRef]) -> Obligation:
    def check(rlimit: int) -> Outcome:
        c, n = z3.Int("current"), z3.Int("new")
        domain = z3.And(c >= 0, c < len(STATES), n >= 0, n < len(STATES))
        return prove_valid(
            z3.Implies(domain, claim(c, n)),
            rlimit=rlimit,
            describe=lambda m: f"current={STATES[m.eval(c).as_long()].value} new={STATES[m.eval(n).as_long()].value}",
        )

    return Obligation(name, ("TC-29",), f"all {len(STATES) ** 2} state pairs", check)


def _final(state: int) -> Callable[[Any, Any], z3.BoolRef]:
    return lambda c, n: z3.Implies(c == state, z3.Not(can(c, n)))


def _closed(members: tuple[int, ...]) -> Callable[[Any, Any], z3.BoolRef]:
    def claim(c: Any, n: Any) -> z3.BoolRef:
        return z3.Implies(z3.And(z3.Or(*[c == m for m in members]), can(c, n)), z3.Or(*[n == m for m in members]))

    return claim


TABLE_OBLIGATIONS = (
    _table(
        "COMMITTED, ABORTED, ERROR, TIME_OUT are final",
        lambda c, n: z3.And(*[_final(s)(c, n) for s in (COMMITTED, ABORTED, ERROR, TIME_OUT)]),
    ),
    _table("from ABORTING only {ABORTING, ABORTED, ERROR} is reachable", _closed((ABORTING, ABORTED, ERROR))),
    _table("TIME_OUT is reached only from OPEN", lambda c, n: z3.Implies(z3.And(n == TIME_OUT, can(c, n)), c == OPEN)),
)


def build_obligations(mutant: bool = False) -> tuple[Obligation, ...]:
    """All obligations; ``mutant`` breaks TC-32 (a commit whose operation failed still commits)."""
    obligations: list[Obligation] = list(TABLE_OBLIGATIONS)
    for name, rules, inv in INVARIANTS:
        for cmd in COMMANDS:
            obligations.append(_preserved(name, rules, inv, cmd, mutant))
    obligations.extend(_follows_table(cmd, mutant) for cmd in COMMANDS)
    return tuple(obligations)


OBLIGATIONS = build_obligations()
