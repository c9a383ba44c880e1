"""The viewer's pages as HTML text (the browser tests in tests/views/ click through them)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest

from invariants.explain import ANOMALY_RULES
from invariants.transactional import ANOMALIES, check_transactional
from proofs.check.trace_format import BadTrace, Trace
from spec.history import Operation, OpType, make_operation, object_id
from views.index import index_page
from views.page import Caps
from views.report import txn_html
from views.trace import trace_page
from views.transactional import txn_op_words

ROOT = Path(__file__).resolve().parents[2]

TRACE: dict[str, Any] = {
    "format": "txnmodel-trace",
    "version": 1,
    "model": "ctp",
    "property": "an aborted message is never dispatched",
    "kind": "safety",
    "bounds": {"clients": 1, "partitions": 1},
    "initial": {
        "coordinator": {"@type": "CoordinatorState", "txns": []},
        "buffer t0": {"@type": "BufferState", "max_read_position": [0, -1], "ongoing": []},
    },
    "steps": [
        {
            "actor": "client 0",
            "action": "new txn",
            "states": {"coordinator": {"@type": "CoordinatorState", "txns": [[[0, 0], "OPEN"]]}},
        },
        {
            "actor": "client 0",
            "action": "send m0 in txn (0,0)",
            "states": {
                "buffer t0": {"@type": "BufferState", "max_read_position": [0, -1], "ongoing": [[[0, 0], [1, 0]]]}
            },
        },
    ],
    "loop_from": None,
}


def test_every_anomaly_names_the_rules_it_breaks() -> None:
    assert set(ANOMALY_RULES) == set(ANOMALIES)
    ids = set()
    for page in (ROOT / "spec" / "rules").glob("*.md"):
        ids |= set(re.findall(r"^### ([A-Z]+-\d+):", page.read_text(encoding="utf-8"), re.M))
    for name, (rules, words) in ANOMALY_RULES.items():
        assert words, name
        assert set(rules) <= ids, (name, set(rules) - ids)


def test_trace_loader_fills_unchanged_components_and_checks_the_shape() -> None:
    trace = Trace.from_json(TRACE)
    assert trace.components == ("coordinator", "buffer t0")
    assert trace.steps[1].states["coordinator"] == TRACE["steps"][0]["states"]["coordinator"]  # carried over
    assert trace.states_before(0) == TRACE["initial"]
    for path, change in [
        ("$.format", lambda t: t.update(format="other")),
        ("$.version", lambda t: t.update(version=2)),
        ("$.property", lambda t: t.update(property="")),
        ("$.steps[1].states.nobody", lambda t: t["steps"][1]["states"].update(nobody={})),
        ("$.steps[0].actor", lambda t: t["steps"][0].update(actor=3)),
        ("$.loop_from", lambda t: t.update(kind="liveness")),
        ("$.loop_from", lambda t: t.update(loop_from=7)),
        ("$.initial", lambda t: t.update(initial={})),
    ]:
        broken = copy.deepcopy(TRACE)
        change(broken)
        with pytest.raises(BadTrace) as info:
            Trace.from_json(broken, where="t.json")
        assert info.value.path == path and str(info.value).startswith(f"t.json: {path}")


def test_trace_page_shows_every_step_and_component() -> None:
    page = trace_page(Trace.from_json(TRACE))
    assert "SAFETY VIOLATION: an aborted message is never dispatched" in page
    assert "send m0 in txn (0,0)" in page and "changes buffer t0" in page and "clients=1" in page
    capped = trace_page(Trace.from_json(TRACE), caps=Caps(max_steps=1))
    assert "Capped: the trace has 2 steps; the first 1 are not shown" in capped


def _op(index: int, process: int, f: str, obj: str, value: Any, result: Any = None, at: int = 0) -> Operation:
    return make_operation("h", index, process, OpType.OK, f, obj, value, result, invoked_at=at, completed_at=at + 1)


def test_transactional_page_names_the_anomaly_the_rule_and_the_operations_in_words() -> None:
    topic = "persistent://public/default/t-partition-0"
    ops = [
        _op(0, 0, "send", object_id("partition", topic), {"message": "a", "txn": [0, 1]}, {"position": [1, 0]}),
        _op(1, 0, "abort", object_id("coordinator", 0), {"txn": [0, 1]}, at=2),
        _op(2, 1, "receive", object_id("subscription", f"{topic}#s"), {}, {"message": "a", "position": [1, 0]}, at=4),
    ]
    page = txn_html(check_transactional(ops), ops, seed=9)
    assert "aborted-read" in page and "G1a" in page and "TB-16" in page
    assert "send &quot;a&quot; to partition t-partition-0 in txn (0,1) → at 1:0" in page
    assert "receive on subscription t-partition-0#s → &quot;a&quot; at 1:0" in page
    shown = page.split('<script type="application/json"')[0].lower()  # what the reader sees
    assert "linearizable" not in shown and "linearization" not in shown  # a legend for this page, not Porcupine's
    assert "{&quot;message&quot;" not in shown and '{"message"' not in shown  # labels are words, not raw JSON


def test_operation_words_cover_the_vocabulary() -> None:
    sub = object_id("subscription", "persistent://p/d/t-partition-0#s")
    assert txn_op_words(_op(0, 0, "ack_cumulative", sub, {"position": [3, 4], "txn": [0, 2]})) == (
        "cumulative ack of 3:4 on subscription t-partition-0#s in txn (0,2)"
    )
    failed = make_operation("h", 1, 0, OpType.FAIL, "commit", object_id("coordinator", 0), {"txn": [0, 2]}, None,
                            invoked_at=0, completed_at=1, error="TransactionNotFound")  # fmt: skip
    assert txn_op_words(failed) == "commit txn (0,2) ✗ failed: TransactionNotFound"


def test_index_lists_every_verdict_bad_first_and_caps() -> None:
    rows = [
        {"history": "a", "checker": "linearizability", "verdict": "ok"},
        {"history": "b", "checker": "transactional", "verdict": "illegal", "html": "counterexamples/b.html"},
    ]
    page = index_page(rows, title="run")
    assert page.index(">b<") < page.index(">a<") and "href='counterexamples/b.html'" in page
    many = [{"history": f"h{i}", "checker": "c", "verdict": "ok"} for i in range(30)]
    assert "Capped: 10 of 30 verdicts listed" in index_page(many, title="run", caps=Caps(max_index_rows=10))
