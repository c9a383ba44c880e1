"""Recording client operations as a history in the contract of :mod:`spec.history`.

Every client operation is an invocation (``begin``) and one completion (``ok``, ``fail`` or
``info``).  The operation's index is its invocation order; its times are the simulation's logical
clock.  Values and results are JSON in the spellings of :mod:`spec.jsonvalues` (TxnID and
Position as ``[a, b]`` pairs).  Rendering is canonical (sorted keys, no spaces), so the same run
gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spec.history import Operation, OpType, make_operation

__all__ = ["HistoryRecorder", "OpenOp"]


@dataclass
class OpenOp:
    index: int
    process: int
    f: str
    obj: str
    value: Any
    invoked_at: int
    done: bool = False


class HistoryRecorder:
    """Collects the operations of one run.  ``clock`` is the simulation's logical clock."""

    def __init__(self, history: str, seed: int | None, clock: Callable[[], int]) -> None:
        self.history = history
        self.seed = seed
        self._clock = clock
        self._open: dict[int, OpenOp] = {}
        self._ops: dict[int, Operation] = {}
        self._next = 0
        self._busy: dict[int, int] = {}  # process -> index of its open operation
        self._crashed: set[int] = set()

    def begin(self, process: int, f: str, obj: str, value: Any) -> OpenOp:
        if process in self._busy:
            raise RuntimeError(f"process {process} invoked {f} while op {self._busy[process]} is open")
        if process in self._crashed:
            raise RuntimeError(f"process {process} got 'info' and may not invoke again")
        op = OpenOp(self._next, process, f, obj, value, self._clock())
        self._next += 1
        self._open[op.index] = op
        self._busy[process] = op.index
        return op

    def _close(self, op: OpenOp, op_type: OpType, result: Any, error: str | None) -> None:
        if op.done:
            raise RuntimeError(f"op {op.index} ({op.f}) completed twice")
        op.done = True
        del self._open[op.index]
        del self._busy[op.process]
        if op_type is OpType.INFO:
            self._crashed.add(op.process)
        self._ops[op.index] = make_operation(
            self.history, op.index, op.process, op_type, op.f, op.obj, op.value, result,
            invoked_at=op.invoked_at, completed_at=self._clock(), error=error, seed=self.seed)

    def ok(self, op: OpenOp, result: Any = None) -> None:
        self._close(op, OpType.OK, result, None)

    def fail(self, op: OpenOp, error: str | None) -> None:
        self._close(op, OpType.FAIL, None, error)

    def info(self, op: OpenOp, error: str | None = None) -> None:
        self._close(op, OpType.INFO, None, error)

    def crashed(self, process: int) -> bool:
        return process in self._crashed

    def operations(self) -> list[Operation]:
        """Every operation so far, in index order; still-open ones as ``invoke`` rows."""
        out = dict(self._ops)
        for op in self._open.values():
            out[op.index] = make_operation(self.history, op.index, op.process, OpType.INVOKE, op.f, op.obj,
                                           op.value, None, invoked_at=op.invoked_at, completed_at=None,
                                           seed=self.seed)
        return [out[i] for i in sorted(out)]

    def __len__(self) -> int:
        return self._next
