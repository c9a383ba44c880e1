"""The conformance protocol's shapes (spec/conform.py, spec/conform.schema.json) and the served reference."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from reference.sessions import Session
from spec import conform
from spec.errors import BadConfig

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "spec" / "conform.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def valid(line: Any) -> bool:
    return VALIDATOR.is_valid(line)


def test_every_request_the_harness_builds_is_in_the_schema() -> None:
    requests = [
        conform.hello("coordinator"),
        conform.init({"superUserRoles": "admin"}, {"coordinator_id": 1}),
        conform.step("new_txn", {"timeout_ms": 1, "now_ms": 0}),
        conform.observe("txn_status", {"txn_id": [0, 0]}),
        conform.crash(),
        conform.recover({}),
        conform.close(),
    ]
    assert all(valid(r) for r in requests)
    assert {r["op"] for r in requests} == set(conform.OPS)


@pytest.mark.parametrize(
    "request_",
    [
        [
            {"op": "hello", "protocol": 1, "machine": "coordinator"},
            {"op": "init", "config": {}, "init": {}},
            {"op": "step", "command": "new_txn", "args": {"timeout_ms": 60000, "now_ms": 0}},
            {"op": "step", "command": "update_txn_status", "args": {"txn_id": [0, 0], "new_status": "COMMITTED"}},
            {"op": "observe", "observer": "txn_status", "args": {"txn_id": [0, 0]}},
            {"op": "crash"},
            {"op": "recover", "args": {}},
            {"op": "step", "command": "no_such_command", "args": {}},
            {"op": "close"},
        ]
    ],
)
def test_every_answer_of_the_served_reference_is_in_the_schema_and_checks(request_: list[dict[str, Any]]) -> None:
    session = Session("coordinator")
    for request in request_:
        answer = json.loads(json.dumps(session.handle(request)))
        assert valid(answer), answer
        conform.check_answer(answer, request["op"])
    hello = conform.check_hello(conform.check_answer(session.handle(request_[0]), "hello"), "coordinator")
    assert hello.commands is not None and "new_txn" in hello.commands and hello.crash


def test_the_client_has_no_crash() -> None:
    session = Session("client")
    hello = conform.check_hello(conform.check_answer(session.handle(conform.hello("client")), "hello"), "client")
    assert hello.crash is False
    session.handle(conform.init({}, {}))
    assert "no durable state" in session.handle(conform.crash())["fail"]


@pytest.mark.parametrize(
    "answer,op,fragment",
    [
        ([1, 2], "step", "a JSON object, not an array"),
        ({}, "step", "exactly one of"),
        ({"ok": 1, "error": "X"}, "step", "exactly one of"),
        ({"ok": 1, "extra": 2}, "step", "unexpected key(s) 'extra'"),
        ({"ok": None, "effects": []}, "observe", "unexpected key(s) 'effects'"),
        ({"error": "X"}, "observe", 'answered "ok" or "fail"'),
        ({"error": 3}, "step", "an error name"),
        ({"error": "X", "message": 3}, "step", '"message" is a string'),
        ({"ok": 1, "effects": {}}, "step", '"effects" is an array'),
        ({"fail": 1}, "step", '"fail" is a string'),
    ],
)
def test_a_malformed_answer_says_what_is_wrong(answer: Any, op: str, fragment: str) -> None:
    with pytest.raises(conform.ProtocolError, match=None) as caught:
        conform.check_answer(answer, op)
    assert fragment in str(caught.value)


def test_hello_must_name_our_protocol_and_machine() -> None:
    ok = conform.Answer("ok", {"protocol": 1, "machine": "buffer"})
    assert conform.check_hello(ok, "buffer").commands is None
    with pytest.raises(conform.ProtocolError, match="not 'coordinator'"):
        conform.check_hello(ok, "coordinator")
    with pytest.raises(conform.ProtocolError, match="speaks protocol 2"):
        conform.check_hello(conform.Answer("ok", {"protocol": 2, "machine": "buffer"}), "buffer")
    with pytest.raises(conform.ProtocolError, match="array of names"):
        conform.check_hello(conform.Answer("ok", {"protocol": 1, "machine": "buffer", "commands": "all"}), "buffer")


def test_config_is_sent_typed_and_bad_config_is_refused() -> None:
    assert conform.typed_config({"superUserRoles": "a, b", "authenticationEnabled": "true"}) == {
        "superUserRoles": ["a", "b"],
        "authenticationEnabled": True,
    }
    with pytest.raises(BadConfig):
        conform.typed_config({"noSuchKey": 1})


def test_error_messages_are_not_compared_but_error_names_are() -> None:
    reference = {
        "error": "InvalidTxnStatus",
        "message": "Pulsar's words",
        "effects": [{"@type": "AddFailed", "error": {"@type": "ManagedLedgerFenced", "message": "closed"}}],
    }
    assert conform.expected(reference) == {
        "error": "InvalidTxnStatus",
        "effects": [{"@type": "AddFailed", "error": {"@type": "ManagedLedgerFenced"}}],
    }
    # a dataclass that is not an error keeps its message field
    assert conform.expected_value({"@type": "Thing", "message": "kept"}) == {"@type": "Thing", "message": "kept"}


@pytest.mark.parametrize(
    "expected,actual,where",
    [
        ({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}], "extra": 0}, ("$.a[1].b", 2, 3)),
        ({"a": 1}, {}, ("$.a", 1, "(missing)")),
        ([1, 2], [1], ("$", [1, 2], [1])),
        (True, 1, ("$", True, 1)),
        ({"a": [1]}, {"a": [1], "b": 2}, None),
    ],
)
def test_first_difference_follows_the_partial_match_rule(expected: Any, actual: Any, where: Any) -> None:
    assert conform.first_difference(expected, actual) == where
