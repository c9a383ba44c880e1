"""Differential property testing in process: the reference against itself, and against planted bugs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conformance.counterexample import ConformTrace, vector_document
from conformance.differential import (
    Aborted,
    Divergence,
    NotDeterministic,
    explore,
    minimized,
    replay,
)
from conformance.implementation import Channel, ImplementationHung, InProcess
from conformance.strategies import MACHINES
from reference.sessions import Session, run_vector
from spec import conform
from views.trace import trace_page


def channel_of(handle: Any, machine: str) -> tuple[Channel, conform.Hello]:
    channel = InProcess(handle)
    [answer] = channel.exchange([conform.hello(machine)])
    return channel, conform.check_hello(answer, machine)


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_the_reference_conforms_to_itself(machine: str) -> None:
    channel, hello = channel_of(Session(machine).handle, machine)
    explored = explore(machine, channel, hello, seed=7, examples=15)
    assert explored.divergence is None
    assert explored.examples >= 15


def lying_about_partitions(session: Session) -> Any:
    """A coordinator that forgets a partition added twice in one request (a planted bug)."""

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        answer = session.handle(request)
        if request.get("op") == "observe" and request.get("observer") == "produced_partitions":
            value = answer.get("ok")
            if isinstance(value, list) and len(value) >= 2:
                return {"ok": value[:-1]}
        return answer

    return handle


def test_a_planted_bug_is_found_shrunk_and_written_as_a_vector_the_reference_passes(tmp_path: Path) -> None:
    machine = "coordinator"
    session = Session(machine)
    channel, hello = channel_of(lying_about_partitions(session), machine)
    explored = explore(machine, channel, hello, seed=0, examples=200)
    found = explored.divergence
    assert found is not None, "the planted bug was not found"
    found = minimized(machine, channel, found)
    assert "produced_partitions" in found.difference.what
    assert len(found.steps) <= 4
    # 1-minimal: without any one step the difference is gone
    for index in range(len(found.steps)):
        fewer = found.steps[:index] + found.steps[index + 1 :]
        assert not fewer or replay(machine, channel, found.setup, fewer) is None
    document = vector_document(machine, found.setup, found.steps, vector_id="found", description="d", source="s")
    path = tmp_path / "found.json"
    path.write_text(json.dumps(document))
    assert run_vector(path, document).passed, "the reference must pass its own answers"
    # and the buggy implementation fails it: the check at the last step is the one it got wrong
    assert document["steps"][-1]["check"][0]["observe"] == "produced_partitions"
    page = trace_page(ConformTrace.of(machine, found.steps, found.difference.summary, str(found.difference), {}))
    assert "THE IMPLEMENTATION DIFFERS" in page and "produced_partitions" in page


def test_an_implementation_failure_stops_the_run_at_once_unshrunk() -> None:
    machine = "client"
    session = Session(machine)
    calls = {"steps": 0}

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        if request.get("op") == "step":
            calls["steps"] += 1
            if calls["steps"] == 3:
                raise ImplementationHung("the implementation did not answer within 1 s")
        return session.handle(request)

    channel, hello = channel_of(handle, machine)
    with pytest.raises(Aborted) as caught:
        explore(machine, channel, hello, seed=0, examples=50)
    assert caught.value.steps, "the run is reported with the step it failed at last"
    assert caught.value.steps[-1].implementation == {}
    assert calls["steps"] == 3, "nothing is sent after the failure"


def test_an_implementation_that_answers_differently_each_time_is_not_deterministic() -> None:
    machine = "client"
    session = Session(machine)
    calls = {"n": 0}

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        answer = session.handle(request)
        if request.get("op") == "observe" and request.get("observer") == "pending_ops":
            calls["n"] += 1
            if calls["n"] == 40:  # wrong once, never again
                return {"ok": -1}
        return answer

    channel, hello = channel_of(handle, machine)
    with pytest.raises(NotDeterministic):
        explore(machine, channel, hello, seed=0, examples=50)


def test_a_refused_setup_is_a_divergence_with_no_steps() -> None:
    machine = "client"
    session = Session(machine)

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        return {"fail": "no"} if request.get("op") == "init" else session.handle(request)

    channel, hello = channel_of(handle, machine)
    explored = explore(machine, channel, hello, seed=0, examples=5)
    assert isinstance(explored.divergence, Divergence)
    assert explored.divergence.steps == [] and explored.divergence.difference.what == "init"
