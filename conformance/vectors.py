"""The machine's conformance vectors, run through the implementation.

Each vector file is read and checked as ``txnmodel vectors run`` reads it (bounded, schema-checked,
then run on the reference, so a file the reference cannot run is bad input, exit 2).  Then its
steps go to the implementation, and each answer and check is judged by the same partial-match rule
(:func:`reference.conformance.expectation_mismatch`, :func:`reference.conformance.matches`).  A vector
that needs a command, an observer or a crash the implementation said it lacks is skipped, with the
reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.implementation import Channel
from reference.conformance import Mismatch, expectation_mismatch, matches
from reference.sessions import CRASH, RECOVER, run_vector
from spec import conform
from spec.errors import BadVector

__all__ = ["VectorOutcome", "run_vectors", "vector_files"]


@dataclass(frozen=True)
class VectorOutcome:
    path: str
    vector_id: str
    steps: int
    passed: bool
    skipped: str = ""  # why it was not run
    mismatch: Mismatch | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "id": self.vector_id, "steps": self.steps, "passed": self.passed}
        if self.skipped:
            out["skipped"] = self.skipped
        if self.mismatch is not None:
            m = self.mismatch
            out["mismatch"] = {
                "step": m.step,
                "command": m.command,
                "what": m.what,
                "expected": m.expected,
                "actual": m.actual,
            }
        return out


def vector_files(machine: str, paths: Iterable[str | Path]) -> list[tuple[Path, dict[str, Any]]]:
    """The vector files under ``paths`` that are ``machine``'s, read, checked and run on the
    reference first (a file it cannot run is :class:`BadVector`); ids unique.  A vector the
    reference fails is marked ``"@reference_fails"`` and is skipped later."""
    from runners.vectors import collect_vector_files, load_vector

    out: list[tuple[Path, dict[str, Any]]] = []
    seen: dict[str, Path] = {}
    for path in collect_vector_files(paths):
        data = load_vector(path)
        if data["id"] in seen:
            raise BadVector(f"$.id: {data['id']!r} is also the id of {seen[data['id']]}", where=str(path))
        seen[data["id"]] = path
        if data["machine"] == machine:
            if not run_vector(path, data).passed:
                data = {**data, "@reference_fails": True}
            out.append((path, data))
    return out


def run_vectors(
    channel: Channel,
    hello: conform.Hello,
    vectors: Iterable[tuple[Path, Mapping[str, Any]]],
    on_result: Callable[[VectorOutcome], None] = lambda _: None,
) -> list[VectorOutcome]:
    """Run each vector through the implementation (each after its own ``init``)."""
    outcomes = []
    for path, data in vectors:
        outcome = _run_one(channel, hello, path, data)
        outcomes.append(outcome)
        on_result(outcome)
    return outcomes


def _run_one(channel: Channel, hello: conform.Hello, path: Path, data: Mapping[str, Any]) -> VectorOutcome:
    steps = data["steps"]
    reason = "the reference does not pass it either" if data.get("@reference_fails") else _unsupported(hello, data)
    if reason:
        return VectorOutcome(str(path), data["id"], len(steps), False, skipped=reason)
    [answer] = channel.exchange([conform.init(data.get("config", {}), data.get("init", {}))])
    if answer.kind != "ok":
        refused = Mismatch(0, "init", "init", "ok", answer.spelled())
        return VectorOutcome(str(path), data["id"], len(steps), False, mismatch=refused)
    for index, step in enumerate(steps):
        mismatch = _run_step(channel, index, step)
        if mismatch is not None:
            return VectorOutcome(str(path), data["id"], len(steps), False, mismatch=mismatch)
    return VectorOutcome(str(path), data["id"], len(steps), True)


def _run_step(channel: Channel, index: int, step: Mapping[str, Any]) -> Mismatch | None:
    name = step["command"]
    args = step.get("args", {})
    if name == CRASH:
        request = conform.crash()
    elif name == RECOVER:
        request = conform.recover(args)
    else:
        request = conform.step(name, args)
    checks = step.get("check", [])
    answers = channel.exchange([request, *(conform.observe(c["observe"], c.get("args", {})) for c in checks)])
    actual = answers[0].spelled()
    expect = step.get("expect")
    if answers[0].kind == "fail" or (expect is not None and name == CRASH and answers[0].kind != "ok"):
        return Mismatch(index, name, "result", expect if expect is not None else "ok", actual)
    if expect is not None:
        mismatch = expectation_mismatch(index, name, expect, actual)
        if mismatch is not None:
            return mismatch
    for check, answer in zip(checks, answers[1:], strict=True):
        observed = answer.value if answer.kind == "ok" else answer.spelled()
        if answer.kind != "ok" or not matches(check["equals"], observed):
            what = f"observe {check['observe']}({json.dumps(check.get('args', {}))})"
            return Mismatch(index, name, what, check["equals"], observed)
    return None


def _unsupported(hello: conform.Hello, data: Mapping[str, Any]) -> str:
    for step in data["steps"]:
        name = step["command"]
        if name in (CRASH, RECOVER):
            if not hello.crash:
                return "it crashes the machine, and the implementation has no crash"
        elif hello.commands is not None and name not in hello.commands:
            return f"it uses the command {name!r}, which the implementation does not support"
        for check in step.get("check", []):
            if hello.observers is not None and check["observe"] not in hello.observers:
                return f"it uses the observer {check['observe']!r}, which the implementation does not support"
    return ""
