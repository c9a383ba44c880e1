"""Counterexamples: ddmin, the shortest illegal prefix, the core, text and capped HTML."""

from __future__ import annotations

import dataclasses

from hypothesis import given
from hypothesis import strategies as st

from invariants.explain import ddmin, explain
from invariants.linearizability import Verdict, check_history, check_object
from invariants.models import CasRegister, random_register_history
from invariants.transactional import check_transactional
from spec.history import Operation, OpType, make_operation, object_id
from views.report import counterexample_html, render_text, render_txn_text

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
    # a seed alone reproduces nothing (the run's other options matter too): named as what it is
    assert "seed 42 (the file does not record the run's other options)" in text
    assert "cannot be placed next" in text and "read -> 1" in text
    assert "reproduce with: txnmodel simulate --seed 42" in render_text(
        dataclasses.replace(cx, reproduce="txnmodel simulate --seed 42")
    )
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


def _self_contained(page: str) -> None:
    """Nothing is loaded from anywhere: no src or href to another origin, no stylesheet link, no
    import; the only scripts are the page's own data and code."""
    assert page.startswith("<!doctype html>")
    lowered = page.lower()
    assert " src=" not in lowered and "<link" not in lowered and "@import" not in lowered and "url(http" not in lowered
    assert "http://" not in lowered.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in lowered
    assert lowered.count("<script") == 2  # the JSON data and the viewer's own script


def test_html_is_self_contained_and_capped() -> None:
    ops = random_register_history(5, ops=600, clients=10)
    broken = [
        o
        if o.index != 300
        else dataclasses.replace(o, type=OpType.OK, f="read", value="null", result="77", _value=None, _result=None)
        for o in ops
    ]
    result = check_history(CasRegister(), broken)
    assert result.verdict is Verdict.ILLEGAL
    cx = explain(CasRegister(), broken, result.objects[0], seconds=2.0)  # shrinking may stop early: still sound
    assert len(cx.ops) > 100
    page = counterexample_html(cx, max_ops=100, max_bytes=60_000)
    _self_contained(page)
    assert len(page.encode()) <= 60_000
    assert "Capped:" in page and "operations drawn" in page  # the page says what it left out
    cx_page = counterexample_html(
        explain(CasRegister(), _stale_read_history(), check_history(CasRegister(), _stale_read_history()).objects[0])
    )
    _self_contained(cx_page)
    assert "cannot be placed" in cx_page and "seed <b>42</b>" in cx_page.lower() and "Failing core" in cx_page


def test_stale_read_page_labels_every_operation_and_steps_through_states() -> None:
    ops = _stale_read_history()
    cx = explain(CasRegister(), ops, check_history(CasRegister(), ops).objects[0])
    page = counterexample_html(cx)
    for op in cx.ops:  # every operation drawn, labelled with its index and its words
        assert f'data-op="{op.index}"' in page
        assert f"#{op.index} " in page
    assert "read -&gt; 1" in page and 'class="op ok core blocked"' in page
    # the stepper's first linearization is the checker's prefix, with the model's state at each step
    lin = cx.linearizations[0]
    assert lin.source == "checker" and lin.order == cx.prefix and lin.blocked == cx.blocked
    values = [dict(state)["value"] for state in lin.states]
    assert len(values) == len(cx.prefix) + 1 and values[0] == "null" and values[-1] == cx.state_after == "2"
    assert any(i == 4 and "refuses" in why for i, why in lin.next_ops)


def test_partial_linearizations_are_legal_maximal_and_as_long_as_the_checkers() -> None:
    from invariants.explain import partial_linearizations

    for seed in range(30):
        ops = random_register_history(seed, ops=12, clients=3)
        reads = [o for o in ops if o.f == "read" and o.type is OpType.OK]
        if not reads:
            continue
        ops = [o if o is not reads[-1] else dataclasses.replace(o, result="9", _result=None) for o in ops]
        model = CasRegister()
        result = check_object(model, ops)
        assert result.verdict is Verdict.ILLEGAL
        decoded = [model.decode(op) for op in ops]
        found = partial_linearizations(
            model.init(), model.step, decoded, [o.invoked_at for o in ops], [o.return_time for o in ops]
        )
        assert found and len(found[0]) >= len(result.linearization)
        for order in found:
            state = model.init()
            for k in order:  # the model accepts every step
                accepted, state = model.step(state, *decoded[k])
                assert accepted
            for at, k in enumerate(order):  # real time: an op that returned before k was called is placed before k
                before = set(order[:at])
                assert all(ops[j].return_time >= ops[k].invoked_at for j in range(len(ops)) if j not in before)
            # maximal: the model refuses every operation real time would let come next
            unplaced = [j for j in range(len(ops)) if j not in set(order)]
            for j in unplaced:
                if all(ops[j].invoked_at <= ops[i].return_time for i in unplaced if i != j):
                    assert not model.step(state, *decoded[j])[0]


def test_state_rows_of_a_reference_machine_are_readable() -> None:
    from invariants.readable import rows, short
    from reference import coordinator as tc
    from spec.config import Config
    from spec.types import TxnStatus

    state = tc.initial(Config(transaction_coordinator_enabled=True))
    state, created = tc.step(state, tc.NewTxn(timeout_ms=5000, now_ms=0))
    state, _ = tc.step(state, tc.UpdateTxnStatus(created.value, TxnStatus.COMMITTING, TxnStatus.OPEN, 1))
    found, left = rows(state)
    table = dict(found)
    assert left == 0
    assert table["txns[0].status"] == "COMMITTING" and table["txns[0].txn_id"] == "(0,0)"
    assert table["config"] == "Config(transactionCoordinatorEnabled=true)"  # only what differs from Pulsar's
    assert "TxnStatus" not in " ".join(table.values())
    assert short(tc.EndTxn(created.value, __import__("spec.types").types.TxnAction.ABORT, 9)).startswith(
        "EndTxn(txn_id=(0,0), action=ABORT, now_ms=9"
    )
    capped, more = rows(state, max_rows=3)
    assert len(capped) == 3 and more == len(found) - 3


def test_encoded_states_rebuild_every_step() -> None:
    from views.page import encode_states

    states = [
        (("a", "1"), ("c", "3")),
        (("a", "1"), ("b", "2"), ("c", "3")),
        (("b", "20"), ("c", "3")),
        (),
    ]
    encoded = encode_states(states)
    paths = encoded["paths"]
    assert paths == ["a", "b", "c"]  # one order that keeps each state's own order
    current = {paths[i]: t for i, t in encoded["base"]}
    rebuilt = [dict(current)]
    for diff in encoded["diffs"]:
        for i in diff["del"]:
            del current[paths[i]]
        current.update({paths[i]: t for i, t in diff["set"]})
        rebuilt.append(dict(current))
    assert rebuilt == [dict(s) for s in states]


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
    assert "aborted-read (G1a) x1 [safety]" in text and "seed 9" in text
    # one line per anomaly, under its kind, led by the object it is about (short: no namespace)
    assert "\n  partition-0#s  ops [0, 1, 2]: 'a' was sent in txn (0,1)" in text, text
    assert "TRANSACTIONAL ANOMALIES: 1 safety (illegal)" in text
