"""The machines txnmodel specifies, and where each one lives in every folder.

A machine has the same module name in ``reference/``, ``invariants/``, ``proofs/`` and
``tests/``; its numbered rules live in ``spec/rules/<rules_page>.md`` under ``rule_prefix``.
Vectors name a machine by ``name``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["MACHINES", "MachineInfo", "machine_info"]


@dataclass(frozen=True, slots=True)
class MachineInfo:
    name: str
    module: str
    rule_prefix: str
    rules_page: str
    title: str


MACHINES: Final[tuple[MachineInfo, ...]] = (
    MachineInfo("coordinator", "coordinator", "TC", "coordinator", "Transaction coordinator"),
    MachineInfo("client", "client", "TC", "coordinator", "Client transaction states"),
    MachineInfo("buffer", "buffer", "TB", "buffer", "Transaction buffer"),
    MachineInfo("pending_ack", "pending_ack", "PA", "pending_ack", "Pending ack"),
    MachineInfo("batched_log", "batched_log", "BW", "batched_log", "PIP-160 batched log writer"),
    MachineInfo("delayed", "delayed", "DD", "delayed", "PIP-195 delayed-delivery tracker"),
)


def machine_info(name: str) -> MachineInfo:
    for info in MACHINES:
        if info.name == name:
            return info
    known = ", ".join(m.name for m in MACHINES)
    raise KeyError(f"unknown machine {name!r}; known machines: {known}")
