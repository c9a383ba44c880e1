"""A hand-written history, one call per operation in index order, for the tests of the client-visible
oracle (``test_client_visible.py``) and of the questions that change nothing (``test_queries.py``).

Each operation's process is its role's by default (the producer 2, the consumer 9, the transaction's
client 1, anything else 0), so a consumer's receives come from one process; ``distinct_processes``
gives every operation whose process is not named a process of its own (its index) instead."""

from __future__ import annotations

import dataclasses
from typing import Any

from spec.history import Operation, OpType, make_operation

P = "persistent://public/default/t-partition-0"
PART = f"partition:{P}"
SUB = f"subscription:{P}#sub"

PRODUCER, CONSUMER, TXN_CLIENT, OTHER = 2, 9, 1, 0


class H:
    """A history builder: one call per operation, in index order."""

    def __init__(self, *, distinct_processes: bool = False) -> None:
        self.ops: list[Operation] = []
        self.distinct_processes = distinct_processes

    def _process(self, process: int | None, role: int) -> int:
        if process is not None:
            return process
        return len(self.ops) if self.distinct_processes else role

    def op(
        self,
        f: str,
        obj: str,
        value: Any,
        result: Any,
        at: int,
        done: int | None,
        *,
        process: int | None = None,
        kind: OpType = OpType.OK,
    ) -> Operation:
        op = make_operation(
            "h",
            len(self.ops),
            self._process(process, OTHER),
            kind,
            f,
            obj,
            value,
            result,
            invoked_at=at,
            completed_at=done,
        )
        self.ops.append(op)
        return op

    def subscribe(self, at: int = 0, sub_type: str = "Exclusive", process: int | None = None) -> None:
        self.op(
            "subscribe",
            SUB,
            {"initial_position": "Earliest", "sub_type": sub_type},
            None,
            at,
            at + 1,
            process=self._process(process, CONSUMER),
        )

    def new_txn(self, txn: tuple[int, int], at: int, timeout: int = 10_000, process: int | None = None) -> None:
        self.op(
            "new_txn",
            "coordinator:0",
            {"timeout_ms": timeout},
            {"txn": list(txn)},
            at,
            at + 2,
            process=self._process(process, TXN_CLIENT),
        )

    def end(
        self,
        f: str,
        txn: tuple[int, int],
        at: int,
        done: int | None,
        kind: OpType = OpType.OK,
        process: int | None = None,
    ) -> None:
        self.op(
            f,
            "coordinator:0",
            {"txn": list(txn)},
            None,
            at,
            done,
            kind=kind,
            process=self._process(process, TXN_CLIENT),
        )

    def send(
        self,
        message: str,
        position: tuple[int, int],
        at: int,
        txn: tuple[int, int] | None = None,
        process: int | None = None,
        deliver_at: int | None = None,
        kind: OpType = OpType.OK,
    ) -> None:
        value: dict[str, Any] = {"message": message, "txn": None if txn is None else list(txn)}
        if deliver_at is not None:
            value["deliver_at_ms"] = deliver_at
        result = {"position": list(position)} if kind is OpType.OK else None
        done = at + 2 if kind is OpType.OK else None
        self.op("send", PART, value, result, at, done, process=self._process(process, PRODUCER), kind=kind)

    def receive(
        self,
        message: str | None,
        position: tuple[int, int] | None,
        at: int,
        done: int,
        process: int | None = None,
        timeout: int | None = None,
    ) -> None:
        got = (
            None
            if message is None
            else {"message": message, "position": list(position or (0, 0)), "redelivery_count": 0}
        )
        args = {} if timeout is None else {"timeout_ms": timeout}  # a receive that recorded its wait
        op = self.op("receive", SUB, args, got, at, done, process=self._process(process, CONSUMER))
        if message is None:
            self.ops[-1] = dataclasses.replace(op, result="null")  # a receive that returned nothing

    def ack(
        self,
        position: tuple[int, int],
        at: int,
        txn: tuple[int, int] | None = None,
        process: int | None = None,
        **extra: Any,
    ) -> None:
        value = {"position": list(position), "txn": None if txn is None else list(txn), **extra}
        self.op("ack", SUB, value, None, at, at + 2, process=self._process(process, CONSUMER))

    def last_id(self, position: tuple[int, int], at: int, process: int | None = None) -> None:
        """``get_last_message_id`` on the subscription (TB-18)."""
        self.op("get_last_message_id", SUB, {}, {"position": list(position)}, at, at + 2, process=process)

    def check(self, position: tuple[int, int], state: str, at: int, process: int | None = None, **extra: Any) -> None:
        """The admin ``check_position_in_pending_ack`` (PA-21)."""
        value = {"position": list(position), **extra}
        self.op("check_position_in_pending_ack", SUB, value, {"state": state}, at, at + 2, process=process)
