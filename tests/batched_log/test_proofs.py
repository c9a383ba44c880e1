"""The Z3 encoding of the batched log writer agrees with the reference; every obligation is
proved; a broken rule is refuted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
import z3
from hypothesis import given
from hypothesis import strategies as st

from proofs import batched_log as pb
from proofs.framework import RLIMIT, Verdict
from reference import batched_log as bl
from spec.config import Config
from spec.envelope import LogKind
from spec.types import Position

STATUS = {bl.WriterStatus.OPEN: 0, bl.WriterStatus.CLOSING: 1, bl.WriterStatus.CLOSED: 2}


@dataclass
class Ghosts:
    written: list[int] = field(default_factory=list)
    answered: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)


def _seq(values: list[int]) -> Any:
    if not values:
        return pb.EMPTY
    units = [z3.Unit(z3.IntVal(v)) for v in values]
    return units[0] if len(units) == 1 else z3.Concat(*units)


def _values(state: bl.WriterState, g: Ghosts) -> dict[str, Any]:
    return {
        "st": z3.IntVal(STATUS[state.status]),
        "en": z3.BoolVal(state.config.enabled),
        "cnt": z3.IntVal(len(state.buffer)),
        "by": z3.IntVal(state.bytes_size),
        "tm": z3.BoolVal(state.timer_due_ms is not None),
        "nx": z3.IntVal(state.next_request_id),
        "ls": z3.IntVal(state.last_succeeded),
        "B": _seq([b.request_id for b in state.buffer]),
        "F": _seq([rid for w in state.in_flight for rid in w.request_ids]),
        "W": _seq(g.written),
        "Ans": _seq(g.answered),
        "Dr": _seq(g.dropped),
        "A": _seq(g.accepted),
    }


def _bind(abstract: pb.AbstractState, values: dict[str, Any]) -> list[tuple[Any, Any]]:
    return [(getattr(abstract, k), v) for k, v in values.items()]


def _command_values(cmd: object, state: bl.WriterState) -> dict[str, Any]:
    out = {"kind": 0, "size": 1, "bad": False, "n": 1, "ok": True, "enable": False}
    if isinstance(cmd, bl.AsyncAddData):
        record = bl.canonical_record(cmd.data, state.config.kind)
        out.update(
            kind=pb.COMMANDS["add"],
            bad=not isinstance(record, bytes),
            size=len(record) if isinstance(record, bytes) else 1,
        )
    elif isinstance(cmd, bl.TimerFired):
        out.update(kind=pb.COMMANDS["tick"])
    elif isinstance(cmd, bl.AddEntryComplete | bl.AddEntryFailed):
        out.update(
            kind=pb.COMMANDS["answer"], n=len(state.in_flight[0].request_ids), ok=isinstance(cmd, bl.AddEntryComplete)
        )
    elif isinstance(cmd, bl.Close):
        out.update(kind=pb.COMMANDS["close"])
    elif isinstance(cmd, bl.FinishClose):
        out.update(kind=pb.COMMANDS["finish_close"])
    elif isinstance(cmd, bl.SetBatchedWrite):
        out.update(kind=pb.COMMANDS["switch"], enable=cmd.enabled)
    return out


def _cmd_bind(c: pb.Cmd, values: dict[str, Any]) -> list[tuple[Any, Any]]:
    return [
        (c.kind, z3.IntVal(values["kind"])),
        (c.size, z3.IntVal(values["size"])),
        (c.bad, z3.BoolVal(values["bad"])),
        (c.n, z3.IntVal(values["n"])),
        (c.ok, z3.BoolVal(values["ok"])),
        (c.enable, z3.BoolVal(values["enable"])),
    ]


def _update_ghosts(g: Ghosts, cmd: object, before: bl.WriterState, result: Any) -> None:
    if isinstance(cmd, bl.AsyncAddData) and result.ok:
        g.accepted.append(result.value.request_id)
    for effect in result.effects:
        if isinstance(effect, bl.AsyncAddEntry):
            g.written.extend(effect.request_ids)
        elif isinstance(effect, bl.AddComplete):
            g.answered.append(effect.request_id)
        elif isinstance(effect, bl.AddFailed):
            if isinstance(cmd, bl.AddEntryFailed):
                g.answered.append(effect.request_id)
            else:
                g.dropped.append(effect.request_id)


STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from([4, 6, 10, 20, 40, 70])),
        st.tuples(st.just("bad"), st.just(0)),
        st.tuples(st.just("tick"), st.integers(0, 2)),
        st.tuples(st.just("answer_ok"), st.just(0)),
        st.tuples(st.just("answer_fail"), st.just(0)),
        st.tuples(st.just("close"), st.just(0)),
        st.tuples(st.just("finish_close"), st.just(0)),
        st.tuples(st.just("switch"), st.integers(0, 1)),
    ),
    max_size=25,
)


def _command(kind: str, arg: int, state: bl.WriterState, now: int, next_entry: int) -> object | None:
    if kind == "add":
        return bl.AsyncAddData(bl.sample_record(arg, 1), now)
    if kind == "bad":
        return bl.AsyncAddData(b"\x0e\x01", now)
    if kind == "tick":
        return None if state.timer_due_ms is None else bl.TimerFired(max(now, state.timer_due_ms) + arg)
    if kind in ("answer_ok", "answer_fail"):
        if not state.in_flight:
            return None
        write = state.in_flight[0].write_id
        return bl.AddEntryComplete(write, Position(1, next_entry)) if kind == "answer_ok" else bl.AddEntryFailed(write)
    if kind == "close":
        return bl.Close()
    if kind == "finish_close":
        return bl.FinishClose()
    return bl.SetBatchedWrite(bool(arg), now)


@given(
    enabled=st.booleans(),
    max_records=st.integers(1, 4),
    max_size=st.integers(8, 64),
    steps=STEPS,
)
def test_encoding_agrees_with_reference(
    enabled: bool, max_records: int, max_size: int, steps: list[tuple[str, int]]
) -> None:
    config = Config().with_overrides(
        {
            "transactionLogBatchedWriteEnabled": enabled,
            "transactionLogBatchedWriteMaxRecords": max_records,
            "transactionLogBatchedWriteMaxSize": max_size,
        }
    )
    state = bl.initial(config, LogKind.TRANSACTION_LOG)
    p = pb.Params(z3.IntVal(max_records), z3.IntVal(max_size))
    s, t, c = pb.AbstractState.fresh(""), pb.AbstractState.fresh("'"), pb.Cmd.fresh()
    trans = pb.transition(pb.Params.fresh(), s, t, c)
    params = [(pb.Params.fresh().R, p.R), (pb.Params.fresh().M, p.M)]
    g = Ghosts()
    now = next_entry = 0
    for kind, arg in steps:
        cmd = _command(kind, arg, state, now, next_entry)
        if cmd is None:
            continue
        if isinstance(cmd, bl.TimerFired):
            now = cmd.now_ms
        if isinstance(cmd, bl.AddEntryComplete):
            next_entry += 1
        pre = _values(state, g)
        cmd_values = _command_values(cmd, state)
        after, result = bl.step(state, cmd)  # type: ignore[arg-type]
        _update_ghosts(g, cmd, state, result)
        post = _values(after, g)
        binding = _bind(s, pre) + _bind(t, post) + _cmd_bind(c, cmd_values) + params
        verdict = z3.simplify(z3.substitute(trans, *binding))
        assert z3.is_true(verdict), f"encoding rejects reference step {cmd!r} from {pre}"
        # And the encoding allows no other successor (the variables of the encoding are determined).
        solver = z3.Solver()
        solver.add(z3.substitute(trans, *(_bind(s, pre) + _cmd_bind(c, cmd_values) + params)))
        solver.add(z3.Not(z3.And([getattr(t, k) == v for k, v in post.items()])))
        assert solver.check() == z3.unsat, f"encoding allows another successor of {cmd!r}"
        state = after


def test_every_obligation_proved() -> None:
    failures = []
    for obligation in pb.OBLIGATIONS:
        outcome = obligation.check(RLIMIT)
        if outcome.verdict is not Verdict.PROVED:
            failures.append((obligation.name, outcome))
    assert failures == []


def test_obligations_cover_rules_and_bounds() -> None:
    names = {o.name for o in pb.OBLIGATIONS}
    for invariant in pb.INVARIANT_ENCODINGS:
        for command in pb.COMMANDS:
            assert f"{invariant} preserved by {command}" in names
    assert all(o.bound for o in pb.OBLIGATIONS)
    assert {"BW-15", "BW-17", "BW-20", "BW-23"} <= {r for o in pb.OBLIGATIONS for r in o.rules}


def test_every_invariant_has_a_proof_counterpart() -> None:
    from invariants.batched_log import INVARIANTS

    covered = {name for names in pb.COVERS.values() for name in names}
    assert {inv.name for inv in INVARIANTS} <= covered | set(pb.NOT_ENCODED)
    obligation_names = {o.name for o in pb.OBLIGATIONS}
    for key in pb.COVERS:
        assert key in pb.INVARIANT_ENCODINGS or key in obligation_names, key


@pytest.mark.parametrize("mutant", ["count_uses_gt"])
def test_broken_threshold_rule_is_refuted(mutant: str) -> None:
    """BW-9 with ``>`` instead of ``>=``: a full buffer is kept, so the threshold invariant breaks."""
    broken = {o.name: o for o in pb.build_obligations(mutant=mutant)}
    outcome = broken["thresholds preserved by add"].check(RLIMIT)
    assert outcome.verdict is Verdict.COUNTEREXAMPLE
    assert outcome.counterexample is not None and "command: add" in outcome.counterexample
    # The same state and command in the reference keeps the invariant: the mutant is the encoding's.
    text = outcome.counterexample
    params = dict(part.split("=") for part in text.splitlines()[0].removeprefix("params: ").split())
    max_records, max_size = int(params["maxRecords"]), int(params["maxSize"])
    assert max_records >= 2
    config = Config().with_overrides(
        {
            "transactionLogBatchedWriteEnabled": True,
            "transactionLogBatchedWriteMaxRecords": max_records,
            "transactionLogBatchedWriteMaxSize": max(max_size, 4 * max_records + 1),
        }
    )
    state = bl.initial(config)
    for i in range(max_records):
        state, _ = bl.step(state, bl.AsyncAddData(bl.sample_record(4, i)))
        assert len(state.buffer) < max_records


def test_plain_record_never_batched_concretely() -> None:
    """The Z3 fact about tags, checked on every record the sample builder makes (BW-23)."""
    from spec.envelope import is_batched

    for kind in LogKind:
        for size in (4, 6, 10, 100, 130, 1024):
            assert not is_batched(bl.sample_record(size, 3, kind))
