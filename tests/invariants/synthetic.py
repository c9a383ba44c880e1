"""A tiny, correct broker simulation that writes transactional histories in the spec.history vocabulary.

Used to generate *valid* histories (every check of invariants.transactional must pass) and, by
mutating them, histories with one planted anomaly.  It is deliberately simple and obviously right:
one ledger per partition, positions assigned at append, a transaction's messages dispatched only
once it committed (dispatch stops at the first message of an open transaction, as maxReadPosition
does), aborted messages skipped, delayed messages held back until their time.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from spec.history import Operation, OpType, make_operation, object_id

HISTORY = "synthetic"


@dataclass
class _Entry:
    position: tuple[int, int]
    payload: str
    txn: tuple[int, int] | None
    deliver_at: int | None


@dataclass
class _World:
    rng: random.Random
    partitions: list[str]
    log: dict[str, list[_Entry]] = field(default_factory=dict)
    status: dict[tuple[int, int], str] = field(default_factory=dict)  # open | committed | aborted
    cursor: dict[str, int] = field(default_factory=dict)
    held: dict[str, list[_Entry]] = field(default_factory=dict)  # delayed messages waiting
    next_txn: int = 0
    next_payload: int = 0

    def dispatch(self, sub: str, partition: str, now: int) -> _Entry | None:
        """The next message a correct broker hands this subscription at ``now``, or None."""
        held = self.held.setdefault(sub, [])
        for entry in sorted(held, key=lambda e: e.position):
            if entry.deliver_at is not None and entry.deliver_at <= now:
                held.remove(entry)
                return entry
        entries = self.log[partition]
        while self.cursor.get(sub, 0) < len(entries):
            entry = entries[self.cursor.get(sub, 0)]
            if entry.txn is not None and self.status[entry.txn] == "open":
                return None  # maxReadPosition: nothing past an open transaction
            self.cursor[sub] = self.cursor.get(sub, 0) + 1
            if entry.txn is not None and self.status[entry.txn] == "aborted":
                continue
            if entry.deliver_at is not None and entry.deliver_at > now:
                held.append(entry)
                continue
            return entry
        return None


Action = tuple[str, str, Any, Any, str | None]  # f, object, value, result, error


def generate(
    seed: int,
    *,
    txn_producers: int = 3,
    plain_producers: int = 1,
    partitions: int = 2,
    txns_each: int = 2,
    delayed: bool = True,
) -> list[Operation]:
    """A valid history: transactional and plain producers, one consumer per partition, then a drain."""
    rng = random.Random(seed)
    names = [f"persistent://public/default/t-partition-{i}" for i in range(partitions)]
    world = _World(rng, names, log={p: [] for p in names})
    coordinator = object_id("coordinator", 0)
    clock = {"now": 0}
    producers_left = {"n": txn_producers + plain_producers}

    def append(partition: str, payload: str, txn: tuple[int, int] | None, deliver_at: int | None) -> list[int]:
        entries = world.log[partition]
        position = (1, len(entries))
        entries.append(_Entry(position, payload, txn, deliver_at))
        return list(position)

    def payload() -> str:
        world.next_payload += 1
        return f"m{world.next_payload}"

    def txn_producer() -> Iterator[Action]:
        for _ in range(txns_each):
            world.next_txn += 1
            txn = (0, world.next_txn)
            world.status[txn] = "open"
            yield "new_txn", coordinator, {"timeout_ms": 10000}, {"txn": list(txn)}, None
            for _ in range(rng.randint(1, 3)):
                partition = rng.choice(names)
                message = payload()
                position = append(partition, message, txn, None)
                yield (
                    "send",
                    object_id("partition", partition),
                    {"message": message, "txn": list(txn)},
                    {"position": position},
                    None,
                )
            if rng.random() < 0.7:
                world.status[txn] = "committed"
                yield "commit", coordinator, {"txn": list(txn)}, None, None
            else:
                world.status[txn] = "aborted"
                yield "abort", coordinator, {"txn": list(txn)}, None, None
        producers_left["n"] -= 1

    def plain_producer() -> Iterator[Action]:
        for _ in range(4):
            partition = rng.choice(names)
            message = payload()
            deliver_at = clock["now"] + rng.randint(3, 15) if delayed and rng.random() < 0.3 else None
            position = append(partition, message, None, deliver_at)
            value = {"message": message, "txn": None, "deliver_at_ms": deliver_at}
            yield "send", object_id("partition", partition), value, {"position": position}, None
        producers_left["n"] -= 1

    def consumer(partition: str) -> Iterator[Action]:
        sub = object_id("subscription", f"{partition}#sub")
        world.next_txn += 1
        ack_txn = (1, world.next_txn)
        world.status[ack_txn] = "open"
        acked = False
        idle_after_producers = 0
        while idle_after_producers < 2:
            entry = world.dispatch(sub, partition, clock["now"])
            if entry is None:
                if producers_left["n"] == 0 and not any(s == "open" for t, s in world.status.items() if t[0] == 0):
                    idle_after_producers += 1
                yield "receive", sub, {"consumer": "c"}, None, None
                continue
            result = {"message": entry.payload, "position": list(entry.position)}
            yield "receive", sub, {"consumer": "c"}, result, None
            if not acked and entry.txn is None and entry.deliver_at is None:
                acked = True
                yield "ack", sub, {"position": list(entry.position), "txn": list(ack_txn)}, None, None
                world.status[ack_txn] = "committed"
                yield "commit", coordinator, {"txn": list(ack_txn)}, None, None

    processes: dict[int, Iterator[Action]] = {}
    for _i in range(txn_producers):
        processes[len(processes)] = txn_producer()
    for _ in range(plain_producers):
        processes[len(processes)] = plain_producer()
    for partition in names:
        processes[len(processes)] = consumer(partition)
    free_at = dict.fromkeys(processes, 0)
    ops: list[Operation] = []
    while processes:
        clock["now"] += 1
        ready = [p for p in processes if free_at[p] <= clock["now"]]
        if not ready:
            continue
        process = rng.choice(ready)
        try:
            f, obj, value, result, _error = next(processes[process])
        except StopIteration:
            del processes[process]
            continue
        # the effect happened now; the client learns it a little later
        done = clock["now"] + rng.randint(0, 2)
        ops.append(
            make_operation(
                HISTORY,
                len(ops),
                process,
                OpType.OK,
                f,
                obj,
                value,
                result,
                invoked_at=clock["now"],
                completed_at=done,
                seed=seed,
            )
        )
        free_at[process] = done + 1
    return ops


def renumber(ops: list[Operation]) -> list[Operation]:
    """Re-index operations 0..n-1 in invocation order (after a mutation added or removed some)."""
    import dataclasses

    ordered = sorted(ops, key=lambda o: (o.invoked_at, o.index))
    return [dataclasses.replace(op, index=i) for i, op in enumerate(ordered)]


def op(
    index: int,
    process: int,
    f: str,
    obj: str,
    value: Any,
    result: Any = None,
    *,
    at: int,
    done: int | None = None,
    kind: OpType = OpType.OK,
    error: str | None = None,
) -> Operation:
    """A hand-written operation (for short scenario tests)."""
    return make_operation(
        HISTORY,
        index,
        process,
        kind,
        f,
        obj,
        value,
        result,
        invoked_at=at,
        completed_at=None if kind is OpType.INVOKE else (at + 1 if done is None else done),
        error=error,
    )
