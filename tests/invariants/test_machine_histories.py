"""The reference-machine adapter on the real machines: the conformance vectors, replayed as histories.

Each vector of a machine the bulk checker knows (coordinator, buffer, pending_ack, delayed) is
replayed through the machine's pure ``step``; every step becomes one operation of a one-client
history (``ok`` with the JSON spelling of the value, or ``fail`` with the error's name).  The
history must be linearizable against ``MachineModel``, and changing the recorded outcome of any one
operation must make it illegal.

Vectors with ``crash`` and ``recover`` steps are left to ``vectors run`` and their transcripts: a
machine model is one process's life, and a recovery's state is what the reference made durable
(:mod:`reference.restarts`), which a one-client history has no operation for.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from invariants.linearizability import Verdict, check_history
from invariants.models import MachineModel
from invariants.verify import MACHINE_KINDS
from reference.sessions import CRASH, RECOVER
from spec.config import Config
from spec.history import Operation, OpType, make_operation, object_id
from spec.jsonvalues import from_json, to_json

VECTORS = Path(__file__).resolve().parents[2] / "spec" / "vectors"


def _restarts(path: Path) -> bool:
    return any(step["command"] in (CRASH, RECOVER) for step in json.loads(path.read_text())["steps"])


def _vector_files() -> list[Path]:
    return sorted(p for machine in MACHINE_KINDS for p in (VECTORS / machine).glob("*.json") if not _restarts(p))


def test_the_vectors_left_out_are_exactly_those_with_restarts() -> None:
    every = {p for machine in MACHINE_KINDS for p in (VECTORS / machine).glob("*.json")}
    left_out = every - set(_vector_files())
    assert left_out and all(_restarts(p) for p in left_out)


def _replay(path: Path) -> tuple[MachineModel, list[Operation]]:
    data = json.loads(path.read_text())
    machine = data["machine"]
    vectors = importlib.import_module(f"reference.{machine}").VECTORS
    state = vectors.initial(Config().with_overrides(data.get("config", {})), data.get("init", {}))
    model = MachineModel(machine, state, vectors.step, vectors.commands)
    obj = object_id(MACHINE_KINDS[machine], "0" if machine == "coordinator" else "persistent://t-partition-0#s")
    ops = []
    for index, step in enumerate(data["steps"]):
        command = from_json(step.get("args", {}), vectors.commands[step["command"]])
        state, result = vectors.step(state, command)
        kind, value, error = (
            (OpType.OK, to_json(result.value), None) if result.ok else (OpType.FAIL, None, result.error.name)
        )
        ops.append(
            make_operation(
                path.stem,
                index,
                0,
                kind,
                step["command"],
                obj,
                step.get("args", {}),
                value,
                invoked_at=2 * index,
                completed_at=2 * index + 1,
                error=error,
            )
        )
    return model, ops


@pytest.mark.parametrize("path", _vector_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_replayed_vector_is_linearizable_and_a_changed_outcome_is_not(path: Path) -> None:
    model, ops = _replay(path)
    assert check_history(model, ops).verdict is Verdict.OK
    for victim in {0, len(ops) // 2, len(ops) - 1}:
        op = ops[victim]
        if op.type is OpType.OK and op.result is not None:
            changed = dataclasses.replace(op, result='{"@type":"NotWhatStepReturned"}', _result=None)
        elif op.type is OpType.OK:
            changed = dataclasses.replace(op, type=OpType.FAIL, error="NotAllowed")
        else:
            other = "TransactionConflict" if op.error != "TransactionConflict" else "NotAllowed"
            changed = dataclasses.replace(op, error=other)
        mutated: list[Any] = [changed if o is op else o for o in ops]
        result = check_history(model, mutated)
        assert result.verdict is Verdict.ILLEGAL, (victim, op)
        assert result.objects[0].blocked == victim
