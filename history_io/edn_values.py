"""What :mod:`history_io.edn` reads a Jepsen operation as, and EDN text for plain values: shared by the
EDN reader and the workloads it hands operations to (:mod:`history_io.kafka`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spec.history import OpType

__all__ = ["EdnOp", "to_edn"]


@dataclass(frozen=True)
class EdnOp:
    """One Jepsen operation as read (values converted to JSON-able Python)."""

    line: int
    type: OpType
    process: int | None  # None: the nemesis
    f: str
    value: Any
    time: int | None
    error: str | None
    index: int | None = None  # Jepsen's :index, when the form has one
    # The keys a workload reads beyond Jepsen's own (the Kafka workload's :rebalance-log and
    # :seek-to-beginning?), by name, as plain values.
    extras: Mapping[str, Any] = field(default_factory=dict)


def to_edn(value: Any) -> str:
    """A JSON-able value spelled as EDN text (the payload of a set element or a queued value)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + " ".join(to_edn(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} {to_edn(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not a JSON value: {value!r}")
