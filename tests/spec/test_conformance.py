"""The generic vector runner: schema checks, decoding, partial matching, exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import reference.conformance as conformance
from reference.conformance import matches
from runners.vectors import load_vector, run_paths
from spec.errors import BadVector
from tests.spec.toy_machine import TOY
from txnmodel.cli import main

GOOD: dict[str, Any] = {
    "id": "toy-commit",
    "machine": "coordinator",
    "description": "OPEN -> COMMITTING -> COMMITTED, and OPEN -> COMMITTED is refused",
    "init": {"coordinator": 2},
    "steps": [
        {"command": "advance", "args": {"new": "COMMITTED"}, "expect": {"error": "InvalidTxnStatus"}},
        {
            "command": "advance",
            "args": {"new": "COMMITTING"},
            "expect": {"ok": "COMMITTING", "effects": [{"@type": "Logged", "status": "COMMITTING"}]},
            "check": [{"observe": "status", "args": {"txn": [2, 0]}, "equals": "COMMITTING"}],
        },
        {"command": "advance", "args": {"new": "COMMITTED"}, "expect": "ok"},
    ],
}


@pytest.fixture(autouse=True)
def toy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conformance, "_machine_vectors", lambda machine: TOY)


def write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_good_vector_passes(tmp_path: Path) -> None:
    [result] = run_paths([write(tmp_path, "good.json", GOOD)])
    assert result.passed, result.mismatch


def test_first_mismatch_reports_step_expected_actual(tmp_path: Path) -> None:
    bad = json.loads(json.dumps(GOOD))
    bad["steps"][1]["check"][0]["equals"] = "OPEN"
    [result] = run_paths([write(tmp_path, "bad.json", bad)])
    assert not result.passed and result.mismatch is not None
    assert result.mismatch.step == 1
    assert result.mismatch.expected == "OPEN" and result.mismatch.actual == "COMMITTING"


def test_wrong_error_name_is_a_failure(tmp_path: Path) -> None:
    bad = json.loads(json.dumps(GOOD))
    bad["steps"][0]["expect"] = {"error": "TransactionConflict"}
    [result] = run_paths([write(tmp_path, "bad.json", bad)])
    assert not result.passed and result.mismatch is not None and result.mismatch.step == 0


@pytest.mark.parametrize(
    "mutate,fragment",
    [
        (lambda v: v.pop("steps"), "'steps' is a required property"),
        (lambda v: v.update(machine="kafka"), "$.machine"),
        (lambda v: v["steps"][0].update(command="teleport"), "has no command 'teleport'"),
        (lambda v: v["steps"][0]["args"].update(new="DONE"), "$.steps[0].args.new"),
        (lambda v: v.update(config={"noSuchKey": 1}), "noSuchKey"),
        (lambda v: v["steps"][1]["check"][0].update(observe="colour"), "has no observer 'colour'"),
    ],
)
def test_invalid_vectors_name_file_and_path(tmp_path: Path, mutate: Any, fragment: str) -> None:
    data = json.loads(json.dumps(GOOD))
    mutate(data)
    path = write(tmp_path, "invalid.json", data)
    with pytest.raises(BadVector) as info:
        run_paths([path])
    assert str(path) in str(info.value) and fragment in str(info.value)


def test_unreadable_json_names_line(tmp_path: Path) -> None:
    path = write(tmp_path, "broken.json", '{"id": \n')
    with pytest.raises(BadVector, match="line 2"):
        load_vector(path)


def test_duplicate_ids_are_rejected(tmp_path: Path) -> None:
    write(tmp_path, "a.json", GOOD)
    write(tmp_path, "b.json", GOOD)
    with pytest.raises(BadVector, match="also the id"):
        run_paths([tmp_path])


def test_partial_matching() -> None:
    assert matches({"a": 1}, {"a": 1, "b": 2})
    assert not matches({"a": 1, "c": 3}, {"a": 1})
    assert matches([{"a": 1}], [{"a": 1, "b": 0}])
    assert not matches([1], [1, 2])
    assert not matches(1, True) and not matches(True, 1)


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "good.json", GOOD)
    assert main(["vectors", "run", str(good)]) == 0
    assert "1 passed, 0 failed" in capsys.readouterr().out
    bad = json.loads(json.dumps(GOOD))
    bad["id"] = "toy-bad"
    bad["steps"][2]["expect"] = {"error": "InvalidTxnStatus"}
    failing = write(tmp_path, "failing.json", bad)
    assert main(["vectors", "run", str(good), str(failing)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "step 2" in out
    invalid = write(tmp_path, "invalid.json", {"id": "x"})
    assert main(["vectors", "run", str(invalid)]) == 2
    assert "invalid.json" in capsys.readouterr().err
    assert main(["vectors", "run", str(tmp_path / "missing")]) == 2


def test_cli_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path, "good.json", GOOD)
    assert main(["vectors", "run", "--json", str(good)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] == 1 and report["results"][0]["id"] == "toy-commit"
