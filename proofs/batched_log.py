"""Z3 proofs for the PIP-160 batched log writer (rules BW-*).

The writer is encoded as an abstract transition system over the parts of
``reference.batched_log.WriterState`` that the properties speak about, plus ghost sequences
that record history:

=========  =====================================================================================
variable   meaning
=========  =====================================================================================
``st``     status: 0 OPEN, 1 CLOSING, 2 CLOSED
``en``     the enabled flag (``R``, ``M`` and the delay are fixed per writer)
``cnt``    records in the buffer; ``by`` their summed size
``tm``     the one-shot timer is armed
``nx``     the next request id
``ls``     the last request id that got a success callback (-1 before any)
``B``      the buffered request ids, in order (a sequence)
``F``      the request ids of writes in flight, flattened, in write order
``W``      ghost: every request id ever handed to the ledger, in write order
``Ans``    ghost: every request id the ledger has answered, in answer order
``Dr``     ghost: request ids failed by closing (BW-14, BW-18)
``A``      ghost: every accepted request id, in acceptance order
=========  =====================================================================================

Sequences are unbounded Z3 sequences of integers and record sizes are unbounded integers, so the
inductive obligations hold for every state and every command ("unbounded").  One abstraction:
a ledger answer takes the first ``n`` in-flight ids for any ``1 <= n <= |F|`` (the reference
takes the whole oldest write), which only adds behaviours, so what is proved for the encoding
holds for the reference.  ``tests/batched_log/test_proofs.py`` checks that the encoding and
``reference.batched_log.step`` agree on concrete states and commands.

The envelope obligations are over byte sequences with a stated bound; the ack-set obligations
over 512-bit vectors (Pulsar's default ``maxRecords``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from proofs.framework import Obligation, Outcome, prove_each, prove_inductive, prove_valid

__all__ = [
    "COMMANDS",
    "COVERS",
    "NOT_ENCODED",
    "OBLIGATIONS",
    "AbstractState",
    "Cmd",
    "build_obligations",
    "transition",
]

OPEN, CLOSING, CLOSED = 0, 1, 2
INT_SEQ = z3.SeqSort(z3.IntSort())


@dataclass(frozen=True)
class AbstractState:
    st: Any
    en: Any
    cnt: Any
    by: Any
    tm: Any
    nx: Any
    ls: Any
    B: Any
    F: Any
    W: Any
    Ans: Any
    Dr: Any
    A: Any

    @staticmethod
    def fresh(suffix: str) -> AbstractState:
        return AbstractState(
            st=z3.Int(f"st{suffix}"),
            en=z3.Bool(f"en{suffix}"),
            cnt=z3.Int(f"cnt{suffix}"),
            by=z3.Int(f"by{suffix}"),
            tm=z3.Bool(f"tm{suffix}"),
            nx=z3.Int(f"nx{suffix}"),
            ls=z3.Int(f"ls{suffix}"),
            B=z3.Const(f"B{suffix}", INT_SEQ),
            F=z3.Const(f"F{suffix}", INT_SEQ),
            W=z3.Const(f"W{suffix}", INT_SEQ),
            Ans=z3.Const(f"Ans{suffix}", INT_SEQ),
            Dr=z3.Const(f"Dr{suffix}", INT_SEQ),
            A=z3.Const(f"A{suffix}", INT_SEQ),
        )

    def fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}

    def same(self, other: AbstractState, *, except_: Sequence[str] = ()) -> z3.BoolRef:
        return z3.And([self.fields()[k] == other.fields()[k] for k in self.fields() if k not in except_])


@dataclass(frozen=True)
class Params:
    """Per-writer constants: maxRecords, maxSize, maxDelay (the delay does not matter here)."""

    R: Any
    M: Any

    @staticmethod
    def fresh() -> Params:
        return Params(z3.Int("R"), z3.Int("M"))

    def valid(self) -> z3.BoolRef:
        return z3.And(self.R >= 1, self.M >= 1)


@dataclass(frozen=True)
class Cmd:
    """Command variables: which command (``kind``) and its arguments."""

    kind: Any  # 0 add, 1 tick, 2 answer, 3 close, 4 finish_close, 5 switch
    size: Any
    bad: Any
    n: Any
    ok: Any
    enable: Any

    @staticmethod
    def fresh() -> Cmd:
        return Cmd(z3.Int("cmd"), z3.Int("size"), z3.Bool("bad"), z3.Int("n"), z3.Bool("ok"), z3.Bool("enable"))


COMMANDS = {"add": 0, "tick": 1, "answer": 2, "close": 3, "finish_close": 4, "switch": 5}
EMPTY = z3.Empty(INT_SEQ)


def _unit(x: Any) -> Any:
    return z3.Unit(x)


def effective(p: Params, en: Any) -> z3.BoolRef:
    """BW-2."""
    return z3.And(en, p.R > 1)


def _flush_to_ledger(s: AbstractState, t: AbstractState, batch: Any, tail: Any = None) -> list[z3.BoolRef]:
    """The batch (and an optional record written after it) goes to the ledger; the buffer empties."""
    written = batch if tail is None else z3.Concat(batch, tail)
    return [z3.Concat(s.W, written) == t.W, z3.Concat(s.F, written) == t.F, t.B == EMPTY, t.cnt == 0, t.by == 0]


def _add(p: Params, s: AbstractState, t: AbstractState, c: Cmd, mutant: str | None) -> z3.BoolRef:
    """BW-4, BW-5, BW-7, BW-8, BW-9, BW-10."""
    rid = s.nx
    common = [
        t.nx == s.nx + 1,
        z3.Concat(s.A, _unit(rid)) == t.A,
        t.st == s.st,
        t.en == s.en,
        t.tm == s.tm,
        t.ls == s.ls,
        t.Ans == s.Ans,
        t.Dr == s.Dr,
    ]
    eff = effective(p, s.en)
    disabled = z3.And(
        *common,
        z3.Concat(s.W, _unit(rid)) == t.W,
        z3.Concat(s.F, _unit(rid)) == t.F,
        t.B == s.B,
        t.cnt == s.cnt,
        t.by == s.by,
    )
    large_with_buffer = z3.And(*common, *_flush_to_ledger(s, t, s.B, _unit(rid)))
    large_alone = z3.And(
        *common,
        z3.Concat(s.W, _unit(rid)) == t.W,
        z3.Concat(s.F, _unit(rid)) == t.F,
        t.B == s.B,
        t.cnt == s.cnt,
        t.by == s.by,
    )
    b1 = z3.Concat(s.B, _unit(rid))
    cnt1 = s.cnt + 1
    by1 = s.by + c.size
    count_hit = cnt1 > p.R if mutant == "count_uses_gt" else cnt1 >= p.R
    flush = z3.Or(count_hit, by1 >= p.M)
    appended_flush = z3.And(*common, *_flush_to_ledger(s, t, b1))
    appended_keep = z3.And(*common, t.W == s.W, t.F == s.F, b1 == t.B, t.cnt == cnt1, t.by == by1)
    large = c.size >= p.M
    accepted = z3.If(
        z3.Not(eff),
        disabled,
        z3.If(large, z3.If(s.cnt > 0, large_with_buffer, large_alone), z3.If(flush, appended_flush, appended_keep)),
    )
    rejected = z3.Or(s.st != OPEN, c.bad)
    return z3.And(c.size >= 1, z3.If(rejected, s.same(t), accepted))


def _tick(p: Params, s: AbstractState, t: AbstractState) -> z3.BoolRef:
    """BW-12, BW-14."""
    flush_open = z3.And(*_flush_to_ledger(s, t, s.B), t.Dr == s.Dr)
    flush_closing = z3.And(t.Dr == z3.Concat(s.Dr, s.B), t.W == s.W, t.F == s.F, t.B == EMPTY, t.cnt == 0, t.by == 0)
    keep = z3.And(t.W == s.W, t.F == s.F, t.B == s.B, t.cnt == s.cnt, t.by == s.by, t.Dr == s.Dr)
    body = z3.And(
        z3.If(s.cnt > 0, z3.If(s.st == OPEN, flush_open, flush_closing), keep),
        t.tm == (s.st == OPEN),
        t.st == s.st,
        t.en == s.en,
        t.nx == s.nx,
        t.ls == s.ls,
        t.Ans == s.Ans,
        t.A == s.A,
    )
    return z3.If(s.tm, body, s.same(t))


def _answer(p: Params, s: AbstractState, t: AbstractState, c: Cmd) -> z3.BoolRef:
    """BW-15, BW-16, BW-17: the ledger answers the oldest ``n`` in-flight records."""
    length = z3.Length(s.F)
    head = z3.SubSeq(s.F, 0, c.n)
    body = z3.And(
        z3.SubSeq(s.F, c.n, length - c.n) == t.F,
        z3.Concat(s.Ans, head) == t.Ans,
        t.ls == z3.If(c.ok, s.F[c.n - 1], s.ls),
        s.same(t, except_=("F", "Ans", "ls")),
    )
    return z3.And(c.n >= 1, c.n <= length, body)


def _close(p: Params, s: AbstractState, t: AbstractState) -> z3.BoolRef:
    """BW-18 (the compare-and-set)."""
    to = z3.If(effective(p, s.en), CLOSING, CLOSED)
    return z3.If(s.st == OPEN, z3.And(t.st == to, s.same(t, except_=("st",))), s.same(t))


def _finish_close(p: Params, s: AbstractState, t: AbstractState) -> z3.BoolRef:
    """BW-18 (the close task)."""
    body = z3.And(
        t.st == CLOSED,
        t.Dr == z3.Concat(s.Dr, s.B),
        t.B == EMPTY,
        t.cnt == 0,
        t.by == 0,
        z3.Not(t.tm),
        s.same(t, except_=("st", "Dr", "B", "cnt", "by", "tm")),
    )
    return z3.If(s.st == CLOSING, body, s.same(t))


def _switch(p: Params, s: AbstractState, t: AbstractState, c: Cmd) -> z3.BoolRef:
    """BW-22."""
    was, now = effective(p, s.en), effective(p, c.enable)
    off = z3.And(
        z3.If(
            s.cnt > 0,
            z3.And(*_flush_to_ledger(s, t, s.B)),
            z3.And(t.W == s.W, t.F == s.F, t.B == s.B, t.cnt == s.cnt, t.by == s.by),
        ),
        z3.Not(t.tm),
    )
    on = z3.And(t.tm, t.W == s.W, t.F == s.F, t.B == s.B, t.cnt == s.cnt, t.by == s.by)
    same_mode = z3.And(t.tm == s.tm, t.W == s.W, t.F == s.F, t.B == s.B, t.cnt == s.cnt, t.by == s.by)
    body = z3.And(
        t.en == c.enable,
        z3.If(z3.And(was, z3.Not(now)), off, z3.If(z3.And(now, z3.Not(was)), on, same_mode)),
        s.same(t, except_=("en", "tm", "W", "F", "B", "cnt", "by")),
    )
    return z3.If(s.st == OPEN, body, s.same(t))


def transition(
    p: Params, s: AbstractState, t: AbstractState, c: Cmd, *, only: str | None = None, mutant: str | None = None
) -> z3.BoolRef:
    """The writer's transition relation; ``only`` restricts it to one command."""
    cases = {
        "add": _add(p, s, t, c, mutant),
        "tick": _tick(p, s, t),
        "answer": _answer(p, s, t, c),
        "close": _close(p, s, t),
        "finish_close": _finish_close(p, s, t),
        "switch": _switch(p, s, t, c),
    }
    chosen = [(name, f) for name, f in cases.items() if only is None or name == only]
    return z3.Or([z3.And(c.kind == COMMANDS[name], f) for name, f in chosen])


def initial_state(p: Params, s: AbstractState) -> z3.BoolRef:
    """BW-3, BW-12: OPEN, empty, timer armed iff batching is effective."""
    return z3.And(
        s.st == OPEN,
        s.cnt == 0,
        s.by == 0,
        s.tm == effective(p, s.en),
        s.nx == 0,
        s.ls == -1,
        s.B == EMPTY,
        s.F == EMPTY,
        s.W == EMPTY,
        s.Ans == EMPTY,
        s.Dr == EMPTY,
        s.A == EMPTY,
    )


# --------------------------------------------------------------------------------------------
# Invariants (the abstract counterparts of invariants/batched_log.py)


def inv_thresholds(p: Params, s: AbstractState) -> z3.BoolRef:
    """below_thresholds + bytes_size_is_sum (BW-8..BW-11)."""
    return z3.And(
        z3.Length(s.B) == s.cnt, s.cnt >= 0, s.cnt < p.R, s.cnt <= s.by, s.by < p.M, z3.Implies(s.cnt == 0, s.by == 0)
    )


def inv_buffer_mode(p: Params, s: AbstractState) -> z3.BoolRef:
    """buffer_only_when_batching (BW-2, BW-5, BW-18)."""
    return z3.Implies(s.cnt > 0, z3.And(effective(p, s.en), s.st != CLOSED))


def inv_timer(p: Params, s: AbstractState) -> z3.BoolRef:
    """timer_armed_iff_batching_open (BW-12, BW-18)."""
    return z3.And(
        s.st >= 0,
        s.st <= 2,
        z3.Implies(s.st == OPEN, s.tm == effective(p, s.en)),
        z3.Implies(s.st == CLOSED, z3.Not(s.tm)),
        z3.Implies(s.st == CLOSING, effective(p, s.en)),
    )


def inv_conservation(p: Params, s: AbstractState) -> z3.BoolRef:
    """No record lost, duplicated or reordered (BW-6, BW-8, BW-13, BW-14, BW-18): the records
    handed to the ledger, then those failed by closing, then the buffer, are exactly the accepted
    records in order; nothing is failed by closing while OPEN; the ledger answers in write order."""
    return z3.And(
        z3.Concat(s.W, z3.Concat(s.Dr, s.B)) == s.A,
        z3.Implies(s.st == OPEN, s.Dr == EMPTY),
        z3.Concat(s.Ans, s.F) == s.W,
    )


def inv_fresh_ids(p: Params, s: AbstractState) -> z3.BoolRef:
    """Request ids are 0, 1, 2, ... in acceptance order (BW-17), so no id repeats."""
    i = z3.Int("i")
    return z3.And(s.nx == z3.Length(s.A), z3.ForAll([i], z3.Implies(z3.And(i >= 0, i < z3.Length(s.A)), s.A[i] == i)))


def inv_last_success(p: Params, s: AbstractState) -> z3.BoolRef:
    """The last success is older than everything still waiting (BW-17)."""
    return z3.And(s.ls >= -1, s.ls < z3.Length(s.Ans))


INVARIANT_ENCODINGS: dict[str, tuple[tuple[str, ...], Callable[[Params, AbstractState], z3.BoolRef]]] = {
    "thresholds": (("BW-8", "BW-9", "BW-10", "BW-11"), inv_thresholds),
    "buffer_only_when_batching": (("BW-2", "BW-5", "BW-18"), inv_buffer_mode),
    "timer_armed_iff_batching_open": (("BW-12", "BW-18"), inv_timer),
    "conservation": (("BW-6", "BW-13", "BW-14", "BW-18"), inv_conservation),
    "fresh_ids": (("BW-17",), inv_fresh_ids),
    "last_success_before_waiting": (("BW-17",), inv_last_success),
}


# Which predicates of invariants/batched_log.py each encoding states (tests/batched_log/test_proofs.py
# checks that every invariant is covered here or by one of the non-inductive obligations below).
COVERS: dict[str, tuple[str, ...]] = {
    "thresholds": ("below_thresholds", "bytes_size_is_sum"),
    "buffer_only_when_batching": ("buffer_only_when_batching",),
    "timer_armed_iff_batching_open": ("timer_armed_iff_batching_open",),
    "conservation": ("every_request_accounted", "writes_ordered", "requests_ordered"),
    "fresh_ids": ("requests_ordered",),
    "last_success_before_waiting": ("requests_ordered",),
    # Non-inductive obligations:
    "batch indexes distinct and in [0, size)": ("live_indexes_in_range",),
    "batch-index delete removes only its index": ("live_indexes_in_range",),
}
# Invariants with no Z3 counterpart, and why.
NOT_ENCODED: dict[str, str] = {
    "plain_writes_hold_one_record": "the encoding flattens in-flight writes into one sequence F, so write "
    "boundaries are not in it; the stateful test checks this invariant after every step",
    "flush_stats_consistent": "the metric counters are not in the encoding; the stateful test, the "
    "metric vectors and the engine's Prometheus tests check them",
}


def _all_invariants(p: Params, s: AbstractState) -> z3.BoolRef:
    return z3.And([f(p, s) for _, f in INVARIANT_ENCODINGS.values()])


def _describe(p: Params, s: AbstractState, t: AbstractState, c: Cmd) -> Callable[[z3.ModelRef], str]:
    def render(model: z3.ModelRef) -> str:
        def val(x: Any) -> str:
            return str(model.eval(x, model_completion=True))

        names = {v: k for k, v in COMMANDS.items()}
        kind = model.eval(c.kind, model_completion=True)
        command = names.get(kind.as_long() if z3.is_int_value(kind) else -1, val(c.kind))
        args = {
            "add": f"size={val(c.size)} bad={val(c.bad)}",
            "answer": f"n={val(c.n)} ok={val(c.ok)}",
            "switch": f"enable={val(c.enable)}",
        }.get(command, "")
        status = {0: "OPEN", 1: "CLOSING", 2: "CLOSED"}
        before = ", ".join(f"{k}={val(v)}" for k, v in s.fields().items())
        after = ", ".join(f"{k}={val(v)}" for k, v in t.fields().items())
        st = model.eval(s.st, model_completion=True)
        return (
            f"params: maxRecords={val(p.R)} maxSize={val(p.M)}\n"
            f"state:  status={status.get(st.as_long() if z3.is_int_value(st) else -1, '?')} {before}\n"
            f"command: {command} {args}\n"
            f"after:  {after}\n"
            "replay: build a WriterState with these buffer counts in reference.batched_log and step it"
        )

    return render


def _lemma_instances(s: AbstractState, c: Cmd) -> list[z3.BoolRef]:
    """Instances of the sequence lemmas (proved below, for all sequences) that the id-order
    obligations need; Z3 does not find these instantiations by itself in time."""
    k = z3.Int("k")
    grown = z3.Concat(s.A, z3.Unit(s.nx))
    rest = z3.Concat(s.Dr, s.B)
    head = z3.SubSeq(s.F, 0, c.n)
    return [
        z3.ForAll([k], z3.Implies(z3.And(k >= 0, k < z3.Length(s.A)), grown[k] == s.A[k])),  # L1
        grown[z3.Length(s.A)] == s.nx,  # L2
        z3.ForAll(
            [k], z3.Implies(z3.And(k >= 0, k < z3.Length(s.F)), z3.Concat(s.Ans, s.F)[z3.Length(s.Ans) + k] == s.F[k])
        ),  # L3
        z3.ForAll([k], z3.Implies(z3.And(k >= 0, k < z3.Length(s.W)), z3.Concat(s.W, rest)[k] == s.W[k])),  # L4
        z3.ForAll([k], z3.Implies(z3.And(k >= 0, k < c.n, c.n <= z3.Length(s.F)), head[k] == s.F[k])),  # L5
    ]


def _inductive(
    name: str,
    rules: tuple[str, ...],
    inv: Callable[[Params, AbstractState], z3.BoolRef],
    command: str,
    mutant: str | None,
    strengthen: bool,
) -> Obligation:
    def check(rlimit: int) -> Outcome:
        p, s, t, c = Params.fresh(), AbstractState.fresh(""), AbstractState.fresh("'"), Cmd.fresh()
        pre = _all_invariants(p, s) if strengthen else inv(p, s)
        return prove_inductive(
            init=initial_state(p, s),
            inv=pre,
            trans=transition(p, s, t, c, only=command, mutant=mutant),
            inv_next=inv(p, t),
            rlimit=rlimit,
            describe=_describe(p, s, t, c),
            background=[p.valid(), *(_lemma_instances(s, c) if strengthen else [])],
        )

    return Obligation(f"{name} preserved by {command}", rules, "unbounded", check)


# --------------------------------------------------------------------------------------------
# Safety properties that follow from the invariants


def _successes_in_order() -> Obligation:
    """BW-17: a success callback names requests newer than every earlier success, in increasing order."""

    def check(rlimit: int) -> Outcome:
        p, s, t, c = Params.fresh(), AbstractState.fresh(""), AbstractState.fresh("'"), Cmd.fresh()
        j = z3.Int("j")
        head = z3.SubSeq(s.F, 0, c.n)
        claim = z3.And(
            z3.ForAll([j], z3.Implies(z3.And(j >= 0, j < c.n), head[j] > s.ls)),
            z3.ForAll([j], z3.Implies(z3.And(j >= 0, j + 1 < c.n), head[j] < head[j + 1])),
            inv_last_success(p, t),
        )
        return prove_valid(
            claim,
            rlimit=rlimit,
            describe=_describe(p, s, t, c),
            assumptions=[
                p.valid(),
                _all_invariants(p, s),
                *_lemma_instances(s, c),
                transition(p, s, t, c, only="answer"),
                c.ok,
            ],
        )

    return Obligation("successes in request order", ("BW-15", "BW-17"), "unbounded", check)


def _batch_indexes_distinct() -> Obligation:
    """BW-15: the callbacks of a batch of N get indexes 0..N-1: distinct and within [0, N)."""

    def check(rlimit: int) -> Outcome:
        n, i, j = z3.Ints("n i j")
        # The reference enumerates the batch: the i-th request gets batch index i.
        index = z3.Lambda([i], i)
        claim = z3.ForAll(
            [i, j],
            z3.Implies(
                z3.And(i >= 0, i < n, j >= 0, j < n, i != j),
                z3.And(index[i] != index[j], index[i] >= 0, index[i] < n),
            ),
        )
        return prove_valid(claim, rlimit=rlimit, assumptions=[n >= 1])

    return Obligation("batch indexes distinct and in [0, size)", ("BW-15",), "unbounded", check)


ACK_BITS = 512


def _ack_set_shape() -> Obligation:
    """BW-20: the ack set of (N, i) is exactly [0, N) without i (Java BitSet words)."""

    def check(rlimit: int) -> Outcome:
        n, i = z3.BitVecs("n i", ACK_BITS)
        one = z3.BitVecVal(1, ACK_BITS)
        mask = (one << n) - 1
        bit = one << i
        ack = mask & ~bit
        claim = z3.And(ack & bit == 0, ack | bit == mask, ack & ~mask == 0)
        domain = [z3.UGE(n, 2), z3.ULT(n, ACK_BITS), z3.ULT(i, n)]
        return prove_valid(claim, rlimit=rlimit, assumptions=domain)

    return Obligation("ack set clears exactly its own index", ("BW-20",), f"batch size < {ACK_BITS}", check)


def _deletion_rule() -> Obligation:
    """BW-20, BW-24: ANDing a record's ack set removes exactly that index; the entry is gone
    exactly when no index is left; replay then skips exactly the removed indexes."""

    def check(rlimit: int) -> Outcome:
        n, i, rem, k = z3.BitVecs("n i rem k", ACK_BITS)
        one = z3.BitVecVal(1, ACK_BITS)
        mask = (one << n) - 1
        ack = mask & ~(one << i)
        after = rem & ack
        replayed = (after >> k) & one == one
        claim = z3.And(
            after == rem & ~(one << i),
            after & ~mask == 0,
            z3.Implies(z3.ULT(k, n), replayed == z3.And(k != i, (rem >> k) & one == one)),
        )
        domain = [z3.UGE(n, 2), z3.ULT(n, ACK_BITS), z3.ULT(i, n), rem & ~mask == 0]
        return prove_valid(claim, rlimit=rlimit, assumptions=domain)

    return Obligation(
        "batch-index delete removes only its index", ("BW-20", "BW-24"), f"batch size < {ACK_BITS}", check
    )


# --------------------------------------------------------------------------------------------
# The envelope: decode(encode(batch)) = batch, and a plain record is never a batch


BYTE = z3.BitVecSort(8)
BYTES = z3.SeqSort(BYTE)
MAX_RECORDS_IN_PROOF = 1
MAX_RECORD_LEN = 127


def _b(v: int) -> Any:
    return z3.Unit(z3.BitVecVal(v, 8))


def _frame(r: Any) -> Any:
    """One record as a repeated embedded-message field 1 with a one-byte length."""
    return z3.Concat(_b(0x0A), z3.Unit(z3.Extract(7, 0, z3.Int2BV(z3.Length(r), 8))), r)


def encode_envelope(records: Sequence[Any]) -> Any:
    """``spec.envelope.encode_batch`` over records whose length fits a one-byte varint: magic,
    version, then each record framed as field 1 (tag 0x0A), length, bytes."""
    return z3.Concat(_b(0x0E), _b(0x01), _b(0x00), _b(0x01), *[_frame(r) for r in records])


def _envelope_prefix() -> Obligation:
    """The reader sees the magic and version and hands it exactly the batch body (BW-13, BW-23)."""

    def check(rlimit: int) -> Outcome:
        body = z3.Const("body", BYTES)
        e = z3.Concat(_b(0x0E), _b(0x01), _b(0x00), _b(0x01), body)
        claim = z3.And(
            e[0] == 0x0E, e[1] == 0x01, e[2] == 0x00, e[3] == 0x01, z3.SubSeq(e, 4, z3.Length(e) - 4) == body
        )
        return prove_valid(claim, rlimit=rlimit)

    return Obligation("envelope prefix then the batch body", ("BW-13", "BW-23"), "unbounded", check)


def _frame_roundtrip() -> Obligation:
    """Decoding one frame of any body gives back the record and exactly the rest.  By induction on
    the number of records, decoding an encoded batch of any length gives back its records in
    order: decode(encode(batch)) = batch (BW-13, BW-15, BW-23)."""

    def check(rlimit: int) -> Outcome:
        r, rest = z3.Consts("r rest", BYTES)
        s = z3.Concat(_frame(r), rest)
        n = z3.Length(r)
        claim = z3.And(
            s[0] == 0x0A,
            z3.BV2Int(s[1]) == n,
            z3.SubSeq(s, 2, n) == r,
            z3.SubSeq(s, 2 + n, z3.Length(s) - 2 - n) == rest,
            z3.Length(s) == 2 + n + z3.Length(rest),
        )
        return prove_valid(claim, rlimit=rlimit, assumptions=[n <= MAX_RECORD_LEN])

    return Obligation(
        "decode(encode(batch)) = batch (frame step)",
        ("BW-13", "BW-15", "BW-23"),
        f"any number of records of <= {MAX_RECORD_LEN} bytes",
        check,
    )


def _roundtrip(k: int) -> Obligation:
    """The same, unrolled for ``k`` records, as a check on the induction's base."""

    def check(rlimit: int) -> Outcome:
        records = [z3.Const(f"r{j}", BYTES) for j in range(k)]
        data = encode_envelope(records)
        rest = z3.SubSeq(data, 4, z3.Length(data) - 4)
        facts = [data[0] == 0x0E, data[1] == 0x01]
        for r in records:
            n = z3.BV2Int(rest[1])
            facts += [rest[0] == 0x0A, z3.SubSeq(rest, 2, n) == r]
            rest = z3.SubSeq(rest, 2 + n, z3.Length(rest) - 2 - n)
        facts.append(z3.Length(rest) == 0)
        domain = [z3.Length(r) <= MAX_RECORD_LEN for r in records]
        return prove_valid(z3.And(facts), rlimit=rlimit, assumptions=domain)

    return Obligation(
        f"decode(encode(batch)) = batch, {k} records",
        ("BW-13", "BW-23"),
        f"{k} records of <= {MAX_RECORD_LEN} bytes",
        check,
    )


def _sequence_lemmas() -> Obligation:
    """L1-L5 of ``_lemma_instances``, for all integer sequences, a query each (:func:`prove_each`)."""

    def check(rlimit: int) -> Outcome:
        x, y, f = z3.Consts("X Y F", INT_SEQ)
        v, k, n = z3.Ints("v k n")
        lemmas = [
            z3.ForAll([x, v, k], z3.Implies(z3.And(k >= 0, k < z3.Length(x)), z3.Concat(x, z3.Unit(v))[k] == x[k])),
            z3.ForAll([x, v], z3.Concat(x, z3.Unit(v))[z3.Length(x)] == v),
            z3.ForAll(
                [x, y, k], z3.Implies(z3.And(k >= 0, k < z3.Length(y)), z3.Concat(x, y)[z3.Length(x) + k] == y[k])
            ),
            z3.ForAll([x, y, k], z3.Implies(z3.And(k >= 0, k < z3.Length(x)), z3.Concat(x, y)[k] == x[k])),
            z3.ForAll([f, n, k], z3.Implies(z3.And(k >= 0, k < n, n <= z3.Length(f)), z3.SubSeq(f, 0, n)[k] == f[k])),
        ]
        return prove_each(lemmas, rlimit=rlimit)

    return Obligation("sequence lemmas L1-L5", ("BW-17",), "unbounded", check)


def _plain_never_batched() -> Obligation:
    """A serialized record starts with its first field's tag varint; no tag of a wire type 0..5
    begins with byte 0x0E, so a plain record is never read as a batch (BW-23)."""

    def check(rlimit: int) -> Outcome:
        field, wire = z3.BitVecs("field wire", 32)
        tag = (field << 3) | wire
        first = z3.If(z3.ULT(tag, 0x80), z3.Extract(7, 0, tag), z3.Extract(7, 0, tag & 0x7F) | 0x80)
        domain = [z3.UGE(field, 1), z3.ULE(field, (1 << 29) - 1), z3.ULE(wire, 5)]
        return prove_valid(first != 0x0E, rlimit=rlimit, assumptions=domain)

    return Obligation("a plain record never starts with the magic", ("BW-23",), "unbounded (every field number)", check)


# --------------------------------------------------------------------------------------------


def build_obligations(mutant: str | None = None) -> tuple[Obligation, ...]:
    obligations: list[Obligation] = []
    for name, (rules, inv) in INVARIANT_ENCODINGS.items():
        for command in COMMANDS:
            obligations.append(_inductive(name, rules, inv, command, mutant, strengthen=name != "thresholds"))
    obligations += [
        _sequence_lemmas(),
        _successes_in_order(),
        _batch_indexes_distinct(),
        _ack_set_shape(),
        _deletion_rule(),
        _plain_never_batched(),
        _envelope_prefix(),
        _frame_roundtrip(),
    ]
    obligations += [_roundtrip(k) for k in range(0, MAX_RECORDS_IN_PROOF + 1)]
    return tuple(obligations)


OBLIGATIONS = build_obligations()
