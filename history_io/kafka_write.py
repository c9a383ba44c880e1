"""A history of the contract, written in the shape of Jepsen's Kafka workload (``jepsen.tests.kafka``),
so that Jepsen's own tools (its Kafka checker, elle-cli) can read a recording of a Pulsar-protocol
broker: the inverse direction of :mod:`history_io.kafka`.

What clients did, in the workload's words (``docs/jepsen.md`` has the table):

* the partitions, in name order, are the integer keys ``0, 1, ...``; a position is the offset
  that numbers it among every position the history shows of its partition (sends' and receives'),
  in order, so sends and polls agree on offsets exactly when they agree on positions; a payload
  is its value, an EDN string;
* a send outside a transaction is a ``:send``; a receive whose message no transaction acknowledged is
  a ``:poll`` of that one message (an empty receive, a poll that returned ``{}``);
* a transaction is one ``:txn`` (``:send`` or ``:poll`` when it only sent or only consumed) where
  its last ``commit`` or ``abort`` is, holding its sends and, as polls, the messages it
  acknowledged (Kafka commits consumed offsets in the transaction; Pulsar acknowledges in it):
  ``:ok`` if it committed, ``:fail`` if it aborted, ``:info`` if the commit's outcome is unknown; one
  that nobody ended is ``:info`` on a process of its own;
* a ``subscribe`` is an ``:assign`` of the partitions the process subscribed so far (Exclusive,
  Failover: the consumer's own position) or a ``:subscribe`` (Shared, Key_Shared: a group that
  shares the partition out);
* acks outside transactions, negative acks, seeks, and the coordinator's bookkeeping
  (``new_txn``, ``add_partition``, ...) have no counterpart in the workload and are left out;
* ``:time`` is the contract's millisecond clock in nanoseconds; a process that got ``:info``
  continues under a new number, as Jepsen's do, and ``:index`` numbers the events.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from history_io.edn_values import to_edn
from spec.history import Operation, OpType, is_machine_operation, parse_object, split_subscription

__all__ = ["write_kafka_edn"]

NANOS_PER_MS = 1_000_000

Position = tuple[int, int, int]


def _position(data: Any) -> Position | None:
    raw = data.get("position") if isinstance(data, dict) else None
    if not (isinstance(raw, list) and len(raw) >= 2 and all(isinstance(x, int) for x in raw[:2])):
        return None
    index = data.get("batch_index")
    return (raw[0], raw[1], index if isinstance(index, int) else -1)


def _txn(data: Any) -> tuple[int, int] | None:
    raw = data.get("txn") if isinstance(data, dict) else None
    return (raw[0], raw[1]) if isinstance(raw, list) and len(raw) == 2 else None


@dataclass
class _Op:
    """One Jepsen operation to write: its process, :f, outcome, interval and micro-operations."""

    process: int
    f: str
    kind: OpType
    start: int
    end: int | None
    sends: list[tuple[int, str, int | None]] = field(default_factory=list)  # (key, payload, offset)
    polls: list[tuple[int, str, int | None]] = field(default_factory=list)
    keys: list[int] | None = None  # an :assign or :subscribe
    polled: bool = False  # a poll that returned nothing still polled
    order: int = 0


class _Shape:
    """The keys, offsets and transactions of one history, found before anything is written."""

    def __init__(self, ops: Sequence[Operation]) -> None:
        self.ops = [op for op in ops if not is_machine_operation(op)]
        partitions: set[str] = set()
        seen: dict[str, set[Position]] = defaultdict(set)
        for op in self.ops:
            kind, name = parse_object(op.object)
            partition = name if kind == "partition" else split_subscription(name)[0] if kind == "subscription" else None
            if partition is None or op.f not in ("send", "receive", "subscribe"):
                continue
            partitions.add(partition)
            at = _position(op.returned) if op.type is OpType.OK else None
            if at is not None:
                seen[partition].add(at)
        self.key = {name: i for i, name in enumerate(sorted(partitions))}
        self.offset = {(p, at): i for p, positions in seen.items() for i, at in enumerate(sorted(positions))}
        self.ends: dict[tuple[int, int], list[Operation]] = defaultdict(list)
        for op in self.ops:
            if op.f in ("commit", "abort") and _txn(op.args) is not None:
                self.ends[_txn(op.args)].append(op)  # type: ignore[index]

    def fate(self, txn: tuple[int, int]) -> OpType:
        """ok committed, fail aborted, info unknown (the reading of invariants.analysis)."""
        ends = self.ends.get(txn, [])
        if any(o.f == "commit" and o.type is OpType.OK for o in ends):
            return OpType.OK
        if any(o.f == "abort" and o.type is OpType.OK for o in ends):
            return OpType.FAIL
        if not ends or any(o.f == "commit" and o.type.indeterminate for o in ends):
            return OpType.INFO
        return OpType.FAIL

    def message(self, partition: str, data: Any) -> tuple[int, str, int | None]:
        payload = data.get("message") if isinstance(data, dict) else None
        at = _position(data)
        offset = None if at is None else self.offset.get((partition, at))
        return self.key[partition], to_edn(payload if isinstance(payload, str) else to_edn(payload)), offset


def _operations(shape: _Shape) -> list[_Op]:
    """Every Jepsen operation of the history (see the module docstring), not yet numbered."""
    out: list[_Op] = []
    txns: dict[tuple[int, int], _Op] = {}
    consumed: dict[tuple[str, Position], Operation] = {}  # the last delivery of each message, by subscription
    acked: set[int] = set()  # receives whose message a transaction acknowledged
    subscribed: dict[int, list[int]] = defaultdict(list)
    for op in shape.ops:
        kind, name = parse_object(op.object)
        txn = _txn(op.args)
        if op.f == "send":
            sent = shape.message(name, {**(op.args or {}), **(op.returned or {})})
            if txn is None:
                out.append(
                    _Op(op.process, "send", op.type, op.invoked_at, op.completed_at, sends=[sent], order=op.index)
                )
            else:
                txns.setdefault(
                    txn, _Op(op.process, "txn", OpType.INFO, op.invoked_at, None, order=op.index)
                ).sends.append(sent)
        elif op.f == "receive" and op.type is OpType.OK and op.returned is not None:
            at = _position(op.returned)
            if at is not None:
                consumed[(op.object, at)] = op
        elif op.f in ("ack", "ack_cumulative") and txn is not None and op.type is OpType.OK:
            at = _position(op.args)
            delivery = consumed.get((op.object, at)) if at is not None else None
            if delivery is not None:
                acked.add(delivery.index)
                partition = split_subscription(name)[0]
                entry = txns.setdefault(txn, _Op(op.process, "txn", OpType.INFO, op.invoked_at, None, order=op.index))
                entry.polls.append(shape.message(partition, delivery.returned))
        elif op.f == "subscribe" and kind == "subscription":
            key = shape.key[split_subscription(name)[0]]
            if key not in subscribed[op.process]:
                subscribed[op.process].append(key)
            shared = isinstance(op.args, dict) and op.args.get("sub_type") in ("Shared", "Key_Shared")
            f = "subscribe" if shared else "assign"
            out.append(
                _Op(
                    op.process,
                    f,
                    op.type,
                    op.invoked_at,
                    op.completed_at,
                    keys=list(subscribed[op.process]),
                    order=op.index,
                )
            )
    out += _polls(shape, acked)
    out += _ends(shape, txns)
    return sorted(out, key=lambda o: o.order)


def _polls(shape: _Shape, acked: set[int]) -> list[_Op]:
    """A :poll of each receive whose message no transaction acknowledged."""
    out = []
    for op in shape.ops:
        if op.f != "receive" or op.index in acked:
            continue
        got = op.returned if op.type is OpType.OK else None
        partition = split_subscription(parse_object(op.object)[1])[0]
        polls = [] if got is None else [shape.message(partition, got)]
        out.append(
            _Op(op.process, "poll", op.type, op.invoked_at, op.completed_at, polls=polls, polled=True, order=op.index)
        )
    return out


def _ends(shape: _Shape, txns: dict[tuple[int, int], _Op]) -> list[_Op]:
    """Each transaction where its last end is, with its fate; one nobody ended on a process of its own."""
    out = []
    for txn, entry in sorted(txns.items()):
        ends = sorted(shape.ends.get(txn, []), key=lambda o: o.index)
        entry.f = "txn" if entry.sends and entry.polls else "send" if entry.sends else "poll"
        entry.kind = shape.fate(txn)
        if ends:
            # where the fate was decided: the commit or abort that returned ok, else the last attempt
            decided = [
                o for o in ends if o.type is OpType.OK and o.f == ("commit" if entry.kind is OpType.OK else "abort")
            ]
            last = decided[0] if decided else ends[-1]
            entry.process, entry.start, entry.end, entry.order = (
                last.process,
                last.invoked_at,
                last.completed_at,
                last.index,
            )
            if last.type is OpType.INVOKE:
                entry.kind, entry.end = OpType.INVOKE, None
        else:
            entry.process, entry.end = -1, entry.start  # its own process, numbered when written
        out.append(entry)
    return out


def _micro(op: _Op, done: bool) -> str:
    parts = []
    for key, payload, offset in op.sends:
        value = f"[{'nil' if offset is None else offset} {payload}]" if done else payload
        parts.append(f"[:send {key} {value}]")
    if op.polls or op.polled:
        if not done:
            parts.append("[:poll]")
        else:
            by_key: dict[int, list[str]] = {}
            for key, payload, offset in op.polls:
                by_key.setdefault(key, []).append(f"[{'nil' if offset is None else offset} {payload}]")
            parts.append("[:poll {" + ", ".join(f"{k} [{' '.join(v)}]" for k, v in by_key.items()) + "}]")
    return "[" + " ".join(parts) + "]"


def write_kafka_edn(ops: Sequence[Operation]) -> str:
    """One history as Jepsen's Kafka workload, one event per line, in time order (see the module
    docstring)."""
    shape = _Shape(ops)
    fresh = max((op.process for op in shape.ops), default=0) + 1
    current: dict[int, int] = {}
    events: list[tuple[int, int, int, str]] = []  # (time, phase, order, text without :index)
    for n, op in enumerate(_operations(shape)):
        if op.process < 0:
            process, fresh = fresh, fresh + 1
        else:
            process = current.get(op.process, op.process)
        if op.kind in (OpType.INFO, OpType.INVOKE) and op.process >= 0:
            current[op.process], fresh = fresh, fresh + 1  # a crashed process carries on as another
        value = "[" + " ".join(str(k) for k in op.keys) + "]" if op.keys is not None else _micro(op, False)
        events.append((op.start, 1, 2 * n, _event("invoke", op.f, value, op.start, process)))
        if op.kind is OpType.INVOKE:
            continue
        end = op.start if op.end is None else op.end
        done = value if op.keys is not None else _micro(op, op.kind is not OpType.FAIL or bool(op.polls))
        phase = 1 if end == op.start else 0  # completions first at one instant, unless it took no time
        events.append((end, phase, 2 * n + 1, _event(op.kind.value, op.f, done, end, process)))
    lines = []
    for index, (*_, text) in enumerate(sorted(events)):
        lines.append(text[:-1] + f", :index {index}}}")
    return "\n".join(lines) + ("\n" if lines else "")


def _event(kind: str, f: str, value: str, time: int, process: int) -> str:
    return f"{{:type :{kind}, :f :{f}, :value {value}, :time {time * NANOS_PER_MS}, :process {process}}}"
