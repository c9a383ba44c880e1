"""What a Kafka-workload history says about its logs, built once and read by every check of
:mod:`invariants.queue`: the transactions (Jepsen's operations), each process's timeline, and each
key's version order.

The words are Jepsen's (``jepsen.tests.kafka``).  A *unit* is one ``:send``, ``:poll`` or ``:txn``
operation, rebuilt from the rows :mod:`history_io.kafka` mapped it to: its sends (*writes*) and the
messages its polls returned (*reads*), in order, and its outcome.  A unit *must have committed* when
it is ``ok``, or ``info`` and some value it sent was read by an ``ok`` unit.  The *log* of a key maps
each offset to the values seen there: the sends of units that must have committed and the reads of
every unit (a poll returns only what the log holds, whatever becomes of its transaction).  Offsets
need not be contiguous (transaction markers take offsets too): the *version order* numbers the
offsets that hold something densely, the *index* of a value is the last such number it appears at,
and where an offset holds several values (``inconsistent-offsets``) the order takes the one seen
there first (Jepsen takes an arbitrary one).
"""

from __future__ import annotations

import json
import json.scanner
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from spec.history import BadHistory, Operation, OpType, parse_object, split_subscription

__all__ = [
    "Assign",
    "Finding",
    "Findings",
    "Offset",
    "QueueHistory",
    "Read",
    "Unit",
    "VersionOrder",
    "Write",
    "fmt_offset",
    "is_kafka_history",
]

# A position in a partition: the Kafka offset (the rows say [0, offset]).
Offset = int
_NO_KEYS: frozenset[str] = frozenset()
_NONE: dict[str, Any] = {}


def fmt_offset(offset: Offset | None) -> str:
    """An offset as Jepsen prints it."""
    return "?" if offset is None else str(offset)


@dataclass(frozen=True)
class Finding:
    """One anomaly found: its name, the rows that prove it (their indexes), why in words, the cycle
    edge by edge for a cyclic one, and whether it is informational (it does not fail the history)."""

    name: str
    ops: tuple[int, ...]
    explanation: str
    cycle: tuple[tuple[str, str, str], ...] = ()
    informational: bool = False


class Findings:
    """The anomalies of one history: ``cap`` of each kind kept in full, all counted; those named in
    ``informational`` counted apart (``notes``), as Jepsen's allowed error types are."""

    def __init__(self, cap: int, informational: Iterable[str] = ()) -> None:
        self.cap = cap
        self.informational = frozenset(informational)
        self.found: list[Finding] = []
        self.counts: dict[str, int] = defaultdict(int)
        self.notes: dict[str, int] = defaultdict(int)

    def add(
        self, name: str, rows: Iterable[Operation], explanation: str, cycle: tuple[tuple[str, str, str], ...] = ()
    ) -> None:
        note = name in self.informational
        tally = self.notes if note else self.counts
        tally[name] += 1
        if tally[name] <= self.cap:
            ops = tuple(sorted({row.index for row in rows}))
            self.found.append(Finding(name, ops, explanation, cycle, note))


@dataclass(frozen=True, slots=True)
class Write:
    """A ``[:send k v]``: the key (a partition), the value, the offset the send returned (None:
    unknown), and the row that records it."""

    key: str
    value: str
    offset: Offset | None
    row: Operation


@dataclass(frozen=True, slots=True)
class Read:
    """One ``[offset value]`` a poll returned for a key, and the receive row that records it."""

    key: str
    value: str
    offset: Offset | None
    row: Operation


class Unit:
    """One ``:send``, ``:poll`` or ``:txn`` operation: a transaction over the logs."""

    __slots__ = (
        "_reads_by_key",
        "_writes_by_key",
        "completed_at",
        "end",
        "f",
        "first_row",
        "invoked_at",
        "number",
        "process",
        "reads",
        "rebalanced",
        "type",
        "writes",
    )

    def __init__(self, number: int, process: int, f: str, end: Operation, rebalanced: frozenset[str]) -> None:
        self.number = number
        self.process = process
        self.f = f
        self.end = end  # the commit row: the outcome, the interval's end, the Jepsen marker
        self.type: OpType = end.type
        self.invoked_at = end.invoked_at
        self.completed_at = end.completed_at
        self.writes: list[Write] = []
        self.reads: list[Read] = []
        self.rebalanced = rebalanced
        self.first_row = end.index
        self._reads_by_key: dict[str, list[Read]] | None = None
        self._writes_by_key: dict[str, list[Write]] | None = None

    def __repr__(self) -> str:
        return f"Unit({self.number}, {self.label})"

    @property
    def label(self) -> str:
        marker = self.end.args.get("jepsen", {}) if isinstance(self.end.args, dict) else {}
        line = f", line {marker['line']}" if isinstance(marker.get("line"), int) else ""
        return f":{self.f} of process {self.process} ({self.type.value}{line})"

    def read_keys(self) -> dict[str, list[Read]]:
        """The unit's reads per key, in order."""
        if self._reads_by_key is None:
            self._reads_by_key = {}
            for read in self.reads:
                self._reads_by_key.setdefault(read.key, []).append(read)
        return self._reads_by_key

    def write_keys(self) -> dict[str, list[Write]]:
        """The unit's writes per key, in order."""
        if self._writes_by_key is None:
            self._writes_by_key = {}
            for write in self.writes:
                self._writes_by_key.setdefault(write.key, []).append(write)
        return self._writes_by_key


@dataclass(frozen=True)
class Assign:
    """An ``:assign`` or ``:subscribe``: the keys the process reads from now on."""

    process: int
    type: OpType
    keys: frozenset[str]
    mode: str
    row: Operation


@dataclass
class VersionOrder:
    """One key's log and its version order (see the module docstring)."""

    offsets: list[Offset] = field(default_factory=list)  # the offsets that hold something, ascending
    values: list[list[str]] = field(default_factory=list)  # per dense index: its values, first seen first
    rows: list[list[Operation]] = field(default_factory=list)  # per dense index: the row that placed each
    index_of: dict[str, int] = field(default_factory=dict)  # value -> the last index it appears at

    def at(self, index: int) -> str:
        """The value the order takes at a dense index."""
        return self.values[index][0]

    def evidence(self, index: int, value: str) -> Operation:
        """The row that first placed ``value`` at a dense index."""
        return self.rows[index][self.values[index].index(value)]

    def first_indexes(self) -> dict[str, int]:
        """Each value's first dense index."""
        out: dict[str, int] = {}
        for index, values in enumerate(self.values):
            for value in values:
                out.setdefault(value, index)
        return out


def is_kafka_history(ops: Sequence[Operation]) -> bool:
    """Whether the rows are a Kafka-workload history (:mod:`history_io.kafka` marks its commit and
    subscribe rows with ``"jepsen"``)."""
    return any(
        (op.f == "commit" or op.f == "subscribe") and isinstance(op.args, dict) and "jepsen" in op.args for op in ops
    )


def _bad(op: Operation, message: str) -> BadHistory:
    return BadHistory(f"history {op.history!r} op {op.index} ({op.f}): {message}", row=op.index, column="value")


def _txn_number(op: Operation, args: Any) -> int:
    txn = args.get("txn") if isinstance(args, dict) else None
    if not (type(txn) is list and len(txn) == 2 and type(txn[0]) is int and type(txn[1]) is int):
        raise _bad(op, f"needs 'txn' as [0, n], got {txn!r}")
    return int(txn[1])


def _offset(op: Operation, data: Any) -> Offset | None:
    raw = data.get("position") if isinstance(data, dict) else None
    if raw is None:
        return None
    if type(raw) is list and len(raw) == 2 and raw[0] == 0 and type(raw[1]) is int:
        offset: int = raw[1]
        return offset
    raise _bad(op, f"a Kafka-workload position is [0, offset], got {raw!r}")


_SCAN = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))


def _decode(text: str | None) -> Any:
    """A row's JSON text (``value`` or ``result``) decoded: the scanner alone, without ``json.loads``'s
    per-call work (the rows of a Kafka-workload history keep their text only)."""
    if text is None:
        return None
    try:
        found, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return found if end == len(text) else json.loads(text)


def _message(op: Operation, data: Any) -> str:
    message = data.get("message") if isinstance(data, dict) else None
    if not isinstance(message, str):
        raise _bad(op, f"needs 'message' as text, got {message!r}")
    return sys.intern(message)  # one string however many polls return it


@dataclass
class QueueHistory:
    """A Kafka-workload history's units, timelines and version orders (see the module docstring)."""

    history: str
    units: list[Unit]
    timelines: dict[int, list[Unit | Assign]]
    orders: dict[str, VersionOrder]
    key_names: dict[str, str]  # key (partition) -> the key as the history spells it
    ok_reads: dict[str, set[str]]  # key -> values read by ok units
    writers: dict[str, dict[str, Unit]]  # key -> value -> the completed unit that sent it
    subscribed: bool  # some process subscribed (Jepsen's sub-via includes :subscribe)
    memo: dict[str, Any] = field(default_factory=dict)  # derived views the checks compute once and share

    def name(self, key: str) -> str:
        return self.key_names.get(key, key)

    @classmethod
    def build(cls, ops: Sequence[Operation]) -> QueueHistory:
        """The model of Kafka-workload rows; a row of the wrong shape raises
        :class:`~spec.history.BadHistory` naming it."""
        history = ops[0].history if ops else ""
        units: dict[int, Unit] = {}
        pending: dict[int, list[Operation]] = defaultdict(list)
        assigns: list[Assign] = []
        names: dict[str, str] = {}
        for op in ops:
            if op.f == "subscribe":
                assigns.append(_assign(op, history))
            elif op.f == "commit":
                args = _decode(op.value)
                number = _txn_number(op, args)
                marker = args.get("jepsen") if isinstance(args, dict) else None
                if not isinstance(marker, dict) or not isinstance(marker.get("f"), str):
                    raise _bad(op, "a Kafka-workload commit names its operation in 'jepsen'")
                rebalanced = args.get("rebalanced") or []
                if not isinstance(rebalanced, list):
                    raise _bad(op, f"'rebalanced' must be a list of keys, got {rebalanced!r}")
                keys = frozenset(f"{history}/{k}" for k in rebalanced) if rebalanced else _NO_KEYS
                units[number] = Unit(number, op.process, marker["f"], op, keys)
            elif op.f in ("send", "receive"):
                pending[_txn_number(op, _decode(op.value))].append(op)
        for number, rows in pending.items():
            unit = units.get(number)
            if unit is None:
                raise _bad(rows[0], f"transaction [0, {number}] has no commit row")
            _fill(unit, rows, names)
        ordered = sorted(units.values(), key=lambda u: u.number)
        return cls._assemble(history, ordered, assigns, names)

    @classmethod
    def _assemble(cls, history: str, units: list[Unit], assigns: list[Assign], names: dict[str, str]) -> QueueHistory:
        timelines: dict[int, list[tuple[int, Unit | Assign]]] = defaultdict(list)
        for unit in units:
            timelines[unit.process].append((unit.first_row, unit))
        for assign in assigns:
            timelines[assign.process].append((assign.row.index, assign))
        ok_reads: dict[str, set[str]] = defaultdict(set)
        writers: dict[str, dict[str, Unit]] = defaultdict(dict)
        for unit in units:
            if unit.type is OpType.OK:
                for read in unit.reads:
                    ok_reads[read.key].add(read.value)
            if unit.type is not OpType.INVOKE:
                for write in unit.writes:
                    writers[write.key][write.value] = unit
        orders = _version_orders(units, ok_reads)
        return cls(
            history,
            units,
            {p: [entry for _, entry in sorted(items, key=lambda item: item[0])] for p, items in timelines.items()},
            orders,
            names,
            dict(ok_reads),
            dict(writers),
            any(a.mode == "subscribe" for a in assigns),
        )

    def writer(self, key: str, value: str) -> Unit | None:
        """The completed unit that sent ``value`` to ``key`` (Jepsen's ``writer-of``), if any."""
        return self.writers.get(key, _NONE).get(value)

    def must_have_committed(self, unit: Unit) -> bool:
        """Jepsen's ``must-have-committed?``: ok, or info with some value it sent read by an ok unit."""
        if unit.type is OpType.OK:
            return True
        return unit.type is OpType.INFO and any(w.value in self.ok_reads.get(w.key, ()) for w in unit.writes)

    def delta(self, key: str, before: str, after: str) -> int:
        """How far ``after`` lies past ``before`` in the key's version order (1 when either is not in
        it: nothing can be concluded, as in Jepsen)."""
        order = self.orders.get(key)
        if order is None:
            return 1
        i, j = order.index_of.get(before), order.index_of.get(after)
        return 1 if i is None or j is None else j - i

    def between(self, key: str, before: str, after: str) -> list[str]:
        """The values the version order holds strictly between two values (those a skip passed)."""
        order = self.orders[key]
        return [order.at(i) for i in range(order.index_of[before] + 1, order.index_of[after])]

    def evidence(self, key: str, value: str) -> Operation | None:
        """The row that first placed ``value`` where the version order has it."""
        order = self.orders.get(key)
        if order is None or value not in order.index_of:
            return None
        return order.evidence(order.index_of[value], value)


def _assign(op: Operation, history: str) -> Assign:
    args = op.args
    keys = args.get("keys") if isinstance(args, dict) else None
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise _bad(op, f"an assign or subscribe names 'keys' as a list of keys, got {keys!r}")
    mode = args.get("mode")
    if mode not in ("assign", "subscribe"):
        raise _bad(op, f"'mode' is assign or subscribe, got {mode!r}")
    return Assign(op.process, op.type, frozenset(f"{history}/{k}" for k in keys), str(mode), op)


def _fill(unit: Unit, rows: list[Operation], names: dict[str, str]) -> None:
    """A unit's writes and reads from its send and receive rows, in row order."""
    rows.sort(key=lambda row: row.index)
    unit.first_row = min(unit.end.index, rows[0].index)
    unit.invoked_at = min(unit.invoked_at, rows[0].invoked_at)
    for row in rows:
        kind, name = parse_object(row.object)
        args = _decode(row.value)
        key = name if kind == "partition" else split_subscription(name)[0]
        if key not in names and isinstance(args, dict) and isinstance(args.get("key"), str):
            names[key] = args["key"]
        if row.f == "send":
            if kind != "partition":
                raise _bad(row, f"a send touches a partition, not {row.object!r}")
            unit.writes.append(Write(name, _message(row, args), _offset(row, _decode(row.result)), row))
            continue
        if kind != "subscription":
            raise _bad(row, f"a receive touches a subscription, not {row.object!r}")
        got = _decode(row.result)
        messages = got.get("messages") if isinstance(got, dict) else None
        if not isinstance(messages, list):
            raise _bad(row, f"a poll's receive returns 'messages', got {got!r}")
        unit.reads += [Read(key, _message(row, m), _offset(row, m), row) for m in messages]


def _version_orders(units: list[Unit], ok_reads: dict[str, set[str]]) -> dict[str, VersionOrder]:
    """Each key's log and version order (see the module docstring)."""
    logs: dict[str, dict[Offset, dict[str, Operation]]] = defaultdict(dict)

    def note(key: str, offset: Offset | None, value: str, row: Operation) -> None:
        if offset is not None:
            logs[key].setdefault(offset, {}).setdefault(value, row)

    for unit in units:
        committed = unit.type is OpType.OK or (
            unit.type is OpType.INFO and any(w.value in ok_reads.get(w.key, ()) for w in unit.writes)
        )
        if committed:
            for write in unit.writes:
                note(write.key, write.offset, write.value, write.row)
        for read in unit.reads:
            note(read.key, read.offset, read.value, read.row)
    orders: dict[str, VersionOrder] = {}
    for key, log in logs.items():
        order = VersionOrder()
        for index, offset in enumerate(sorted(log)):
            held = log[offset]
            order.offsets.append(offset)
            order.values.append(list(held))
            order.rows.append(list(held.values()))
            for value in held:
                order.index_of[value] = index
        orders[key] = order
    return orders
