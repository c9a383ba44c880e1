"""Each machine's Hypothesis strategies and its driver: the surroundings ``conform`` plays.

The machines' stateful tests (``tests/<machine>/test_stateful.py``) draw from the same strategies,
so one set of strategies serves both: what the tests explore is what ``conform`` sends.
"""

from __future__ import annotations

import importlib

from conformance.strategies.base import Driver

__all__ = ["MACHINES", "driver_class"]

#: The machines ``conform`` drives, and their drivers' modules.
MACHINES: dict[str, str] = {
    "coordinator": "CoordinatorDriver",
    "client": "ClientDriver",
    "buffer": "BufferDriver",
    "pending_ack": "PendingAckDriver",
    "batched_log": "BatchedLogDriver",
    "delayed": "DelayedDriver",
}


def driver_class(machine: str) -> type[Driver]:
    """The driver of ``machine`` (a ``KeyError`` for a machine ``conform`` does not drive)."""
    module = importlib.import_module(f"conformance.strategies.{machine}")
    driver: type[Driver] = getattr(module, MACHINES[machine])
    return driver
