"""A tiny machine used to test the generic vector runner without depending on a real machine."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reference.conformance import MachineVectors
from spec.config import Config
from spec.errors import InvalidTxnStatus
from spec.result import Effect, Err, Ok
from spec.types import TxnID, TxnStatus


@dataclass(frozen=True)
class State:
    status: TxnStatus
    txn: TxnID


@dataclass(frozen=True)
class Advance:
    new: TxnStatus


@dataclass(frozen=True)
class Logged(Effect):
    status: TxnStatus


def initial(config: Config, init: Mapping[str, Any]) -> State:
    return State(TxnStatus.OPEN, TxnID(int(init.get("coordinator", 0)), 0))


def step(state: State, command: Advance) -> tuple[State, Ok[Any] | Err]:
    from spec.types import can_transition

    if not can_transition(state.status, command.new):
        return state, Err(InvalidTxnStatus(f"{state.status.name} -> {command.new.name}"))
    return State(command.new, state.txn), Ok(command.new, (Logged(command.new),))


def status_of(state: State, txn: TxnID) -> TxnStatus | None:
    return state.status if txn == state.txn else None


TOY = MachineVectors(
    name="coordinator",
    initial=initial,
    step=step,
    commands={"advance": Advance},
    observers={"status": status_of},
)
