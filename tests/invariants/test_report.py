"""Counterexamples: ddmin, the shortest illegal prefix, the core, text and capped HTML."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from invariants.linearizability import Verdict, check_history, check_object
from invariants.models import CasRegister, random_register_history
from invariants.report import counterexample_html, ddmin, explain, render_html, render_text, render_txn_text
from invariants.transactional import check_transactional
from spec.history import Operation, OpType, make_operation, object_id

R = object_id("register", "x")


def reg(
    index: int,
    process: int,
    f: str,
    value: object,
    result: object,
    at: int,
    done: int | None,
    kind: OpType = OpType.OK,
    seed: int | None = None,
) -> Operation:
    return make_operation("h", index, process, kind, f, R, value, result, invoked_at=at, completed_at=done, seed=seed)


@given(st.sets(st.integers(0, 40), min_size=1, max_size=4), st.integers(41, 80))
def test_ddmin_finds_a_one_minimal_set(needed: set[int], size: int) -> None:
    items = list(range(size))
    core = ddmin(items, lambda subset: needed <= set(subset))
    assert set(core) == needed


def test_ddmin_respects_its_budget() -> None:
    calls = []
    core = ddmin(list(range(64)), lambda s: calls.append(1) is None and 5 in s, max_tests=3)
    assert len(calls) <= 3 and 5 in core


def _stale_read_history() -> list[Operation]:
    # process 0 writes 1 then 2; process 1 later reads 1: stale.  Other traffic around it.
    return [
        reg(0, 0, "write", 1, None, 0, 1, seed=42),
        reg(1, 2, "read", None, None, 0, 0, seed=42),
        reg(2, 0, "write", 2, None, 2, 3, seed=42),
        reg(3, 2, "read", None, 2, 4, 5, seed=42),
        reg(4, 1, "read", None, 1, 6, 7, seed=42),
        reg(5, 0, "write", 3, None, 8, 9, seed=42),
        reg(6, 2, "read", None, 3, 10, 11, seed=42),
    ]


def test_explain_a_stale_read() -> None:
    ops = _stale_read_history()
    result = check_history(CasRegister(), ops)
    assert result.verdict is Verdict.ILLEGAL
    cx = explain(CasRegister(), ops, result.objects[0])
    assert cx.blocked == 4 and 4 in cx.core and len(cx.core) <= 2
    assert [op.index for op in cx.ops] == [0, 1, 2, 3, 4]  # the later write and read are cut
    assert cx.seed == 42
    # the core alone (the others' outputs ignored) is still illegal: the shrinking was sound
    ignored = frozenset(op.index for op in cx.ops) - frozenset(cx.core)
    assert check_object(CasRegister(), list(cx.ops), ignore_outputs=ignored).verdict is Verdict.ILLEGAL
    text = render_text(cx)
    assert "reproduce with seed 42" in text and "cannot be placed next" in text and "read -> 1" in text
    assert "state after the prefix: 2" in text


@given(st.integers(0, 5000), st.integers(5, 40), st.integers(1, 4))
def test_the_core_of_a_planted_bug_is_sound_and_minimal(seed: int, n: int, clients: int) -> None:
    ops = random_register_history(seed, ops=n, clients=clients)
    reads = [o for o in ops if o.f == "read" and o.type is OpType.OK]
    if not reads:
        return
    broken = [o if o is not reads[len(reads) // 2] else dataclasses.replace(o, result="77", _result=None) for o in ops]
    result = check_history(CasRegister(), broken)
    cx = explain(CasRegister(), broken, result.objects[0])
    everything = frozenset(o.index for o in cx.ops if not o.type.indeterminate)
    assert (
        check_object(CasRegister(), list(cx.ops), ignore_outputs=everything - set(cx.core)).verdict is Verdict.ILLEGAL
    )
    assert cx.core == (reads[len(reads) // 2].index,)  # a value nobody wrote needs no other evidence


def test_html_is_self_contained_and_capped() -> None:
    ops = random_register_history(5, ops=3000, clients=10, crash=0.05)
    page = render_html(ops, title="big", max_ops=200, max_bytes=60_000)
    assert page.startswith("<!doctype html>") and "<script" not in page and "http" not in page.split("<svg", 1)[0]
    assert len(page.encode()) <= 60_000
    assert "not drawn" in page
    cx_page = counterexample_html(
        explain(CasRegister(), _stale_read_history(), check_history(CasRegister(), _stale_read_history()).objects[0])
    )
    assert "blocked" in cx_page and "reproduce with seed 42" in cx_page and "core" in cx_page


def test_transactional_text() -> None:
    topic = "persistent://public/default/t-partition-0"
    ops = [
        make_operation(
            "h",
            0,
            0,
            OpType.OK,
            "send",
            object_id("partition", topic),
            {"message": "a", "txn": [0, 1]},
            {"position": [1, 0]},
            invoked_at=0,
            completed_at=1,
        ),
        make_operation(
            "h",
            1,
            0,
            OpType.OK,
            "abort",
            object_id("coordinator", 0),
            {"txn": [0, 1]},
            None,
            invoked_at=2,
            completed_at=3,
        ),
        make_operation(
            "h",
            2,
            1,
            OpType.OK,
            "receive",
            object_id("subscription", f"{topic}#s"),
            {},
            {"message": "a", "position": [1, 0]},
            invoked_at=4,
            completed_at=5,
        ),
    ]
    text = render_txn_text(check_transactional(ops), seed=9)
    assert "aborted-read x1" in text and "(G1a)" in text and "seed 9" in text
