"""One conform run in process: what an implementation supports, skipped vectors, the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conformance.implementation import InProcess
from conformance.run import Options, conform
from reference.sessions import Session


def partial(machine: str, commands: list[str], crash: bool = True) -> Any:
    """The reference, saying it supports only ``commands`` (and no crash when ``crash`` is false)."""
    session = Session(machine)
    seen: list[dict[str, Any]] = []

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        seen.append(request)
        answer = session.handle(request)
        if request.get("op") == "hello":
            answer["ok"]["commands"] = commands
            answer["ok"]["crash"] = crash
        return answer

    handle.seen = seen  # type: ignore[attr-defined]
    return handle


def test_an_implementation_of_part_of_a_machine_is_checked_on_that_part(tmp_path: Path) -> None:
    handle = partial("coordinator", ["new_txn", "end_txn", "get_txn_status"], crash=False)
    report = conform(Options("coordinator", "partial", examples=10, out=tmp_path), InProcess(handle))
    assert report.verdict == "pass", report.message
    skipped = [v for v in report.vectors if v.skipped]
    assert skipped and all("does not support" in v.skipped or "no crash" in v.skipped for v in skipped)
    sent = {r.get("command") for r in handle.seen if r.get("op") == "step"}
    assert sent <= {"new_txn", "end_txn", "get_txn_status"}
    assert not any(r.get("op") == "crash" for r in handle.seen)
    out = report.to_json()
    assert out["vectors"]["skipped"] == len(skipped) and out["vectors"]["failed"] == 0


def test_a_vector_the_reference_fails_is_skipped_not_held_against_the_implementation(tmp_path: Path) -> None:
    wrong = {
        "id": "wrong",
        "machine": "client",
        "description": "expects the wrong state",
        "steps": [{"command": "commit", "check": [{"observe": "state", "equals": "OPEN"}]}],
    }
    path = tmp_path / "wrong.json"
    path.write_text(json.dumps(wrong))
    options = Options("client", "the reference", examples=5, vectors=[str(path)], out=tmp_path)
    report = conform(options, InProcess(Session("client").handle))
    assert report.verdict == "pass"
    [outcome] = report.vectors
    assert outcome.skipped == "the reference does not pass it either"


def test_an_implementation_without_crash_skips_the_crash_vectors(tmp_path: Path) -> None:
    everything = sorted(Session("coordinator").hello()["commands"])
    handle = partial("coordinator", everything, crash=False)
    report = conform(Options("coordinator", "no crash", examples=5, out=tmp_path), InProcess(handle))
    assert report.verdict == "pass", report.message
    reasons = {v.vector_id: v.skipped for v in report.vectors if v.skipped}
    assert reasons and all("has no crash" in r for r in reasons.values())
    assert "crash-recovery-keeps-live-txns" in reasons
