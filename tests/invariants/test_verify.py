"""``invariants.verify``: the plan, the one verdict ranking, and the checks of one history, without
files or Spark."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from invariants.models import random_register_history
from invariants.queue.taxonomy import PULSAR_CHECKS
from invariants.transactional import CHECKS, GROUPS
from invariants.verify import (
    MACHINE_KINDS,
    ModelPlan,
    Outcome,
    VerdictRow,
    VerifyOptions,
    check_grouped,
    check_history,
    duplicate_histories,
    plan_models,
    worst,
)
from spec.history import OpType, make_operation, object_id
from tests.invariants.synthetic import generate
from views.report import rendered

ROOT = Path(__file__).resolve().parents[2]


def test_one_ranking_from_ok_to_bad_input() -> None:
    assert [o.value for o in sorted(Outcome, key=lambda o: o.rank)] == [
        "ok",
        "skipped",
        "unknown",
        "late",
        "illegal",
        "error",
        "bad-input",
    ]
    assert worst(["late", "unknown"]) is Outcome.LATE and worst(["late", "illegal"]) is Outcome.ILLEGAL
    assert worst([]) is Outcome.OK
    assert worst(["ok", "unknown", "skipped"]) is Outcome.UNKNOWN
    assert worst(["illegal", "unknown"]) is Outcome.ILLEGAL
    assert worst(["error", "bad-input", "illegal"]) is Outcome.BAD_INPUT
    with pytest.raises(ValueError):
        worst(["fine"])


def test_the_plan_picks_models_by_the_objects_present() -> None:
    register = random_register_history(1, ops=5, clients=2)
    assert plan_models("auto", register) == [ModelPlan("cas-register", "register")]
    kv = [make_operation("h", 0, 0, OpType.OK, "put", object_id("key", "a"), "x", invoked_at=0, completed_at=1)]
    assert plan_models("auto", kv) == [ModelPlan("kv", "key")]
    # a transactional history without machine rows: no per-object model unless one is named
    assert plan_models("auto", generate(1)) == []
    assert plan_models("kv", register) == [ModelPlan("kv", "key")]
    assert plan_models("coordinator", register) == [ModelPlan("coordinator", "coordinator")]
    assert ModelPlan("buffer", "partition").machine and not ModelPlan("kv", "key").machine
    assert set(MACHINE_KINDS) == {"coordinator", "buffer", "pending_ack", "delayed", "batched_log"}


def test_check_history_gives_one_row_per_checker() -> None:
    register = random_register_history(3, ops=30, clients=3, history="r")
    rows = check_history("r", register, "f", VerifyOptions())
    assert [(r.checker, r.verdict, r.model, r.ops) for r in rows] == [("linearizability", "ok", "cas-register", 30)]
    txn = [dataclasses.replace(op, history="t") for op in generate(2)]
    rows = check_history("t", txn, "f", VerifyOptions())
    assert [(r.checker, r.verdict, r.model) for r in rows] == [
        ("transactional", "ok", "elle"),
        ("delivery", "ok", "client-visible"),
    ]
    transactional = json.loads(rows[0].detail)
    assert transactional["counts"] == {} and transactional["anomalies"] == []
    # and beside each verdict, which of its checks had anything to judge (invariants.applicability):
    # each row states the checks of its group of the taxonomy; the delivery row also each anomaly of
    # Jepsen's Kafka taxonomy judged on Pulsar histories (invariants.queue)
    delivery = json.loads(rows[1].detail)
    assert set(transactional["applicability"]) | set(delivery["applicability"]) == set(CHECKS) | set(PULSAR_CHECKS)
    assert {GROUPS[name] for name in transactional["applicability"]} == {"transactional"}
    assert set(PULSAR_CHECKS) <= set(delivery["applicability"])
    assert (
        delivery["counts"] == {}
        and delivery["violations"] == []
        and delivery["anomalies"] == []
        and sum(delivery["judged"].values()) == rows[1].objects
    )


def test_nothing_to_check_and_an_unknown_model_are_bad_input() -> None:
    idle = [make_operation("h", 0, 0, OpType.OK, "subscribe", "coordinator:0", {}, invoked_at=0, completed_at=1)]
    rows = check_history("h", idle, "f", VerifyOptions())
    assert [(r.checker, r.verdict) for r in rows] == [("input", "bad-input")]
    assert "no checker applies" in rows[0].detail
    rows = check_history("h", random_register_history(1, ops=3, clients=1), "f", VerifyOptions(model="nonsense"))
    assert [(r.checker, r.verdict) for r in rows] == [("input", "bad-input")] and "nonsense" in rows[0].detail


def test_an_illegal_object_is_explained() -> None:
    ops = random_register_history(1, ops=40, clients=3, history="bad")
    read = next(o for o in ops if o.f == "read" and o.type is OpType.OK)
    ops = [o if o is not read else dataclasses.replace(o, result="123", _result=None) for o in ops]
    (row,) = check_history("bad", ops, "f", VerifyOptions())
    assert row.verdict == "illegal" and row.failing_object == "register:0"
    # checking returns the explanation as data; the view renders it (Elle's split)
    assert row.counterexample is None and row.html is None and row.explanation is not None
    (shown,) = rendered([row])
    assert shown.counterexample is not None and "NOT LINEARIZABLE" in shown.counterexample and shown.html is not None
    assert shown.explanation is None
    (quiet,) = rendered(check_history("bad", ops, "f", VerifyOptions(counterexamples=False)))
    assert quiet.verdict == "illegal" and quiet.counterexample is None


def test_a_grouped_history_is_validated_whole() -> None:
    ops = random_register_history(4, ops=20, clients=2, history="split")
    rows = check_grouped("split", [("b", ops[10:]), ("a", ops[:10])], VerifyOptions())
    assert [(r.verdict, r.file, r.ops) for r in rows] == [("ok", "a, b", 20)]
    twice = check_grouped("split", [("a", ops), ("b", ops[:3])], VerifyOptions())
    assert [(r.checker, r.verdict) for r in twice] == [("input", "bad-input")]


def test_a_history_in_two_files_is_one_bad_input_row() -> None:
    rows = [
        VerdictRow("h", "linearizability", "ok", "a.parquet"),
        VerdictRow("h", "transactional", "ok", "b.parquet"),
        VerdictRow("g", "linearizability", "ok", "a.parquet"),
    ]
    (dup,) = duplicate_histories(rows)
    assert (dup.history, dup.verdict, dup.file) == ("h", "bad-input", "a.parquet, b.parquet")


def test_the_checks_of_one_history_never_import_pyspark() -> None:
    """No module of invariants/ imports pyspark, and importing the checker leaves it unloaded."""
    for path in sorted((ROOT / "invariants").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.split(".")[0] == "pyspark" for n in names), f"{path.name} imports pyspark"
    code = (
        "import sys, invariants.verify as v, invariants.models as m\n"
        "v.check_history('r', m.random_register_history(1, ops=20, clients=2, history='r'), 'f', v.VerifyOptions())\n"
        "print('pyspark' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
