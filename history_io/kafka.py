"""Jepsen's Kafka workload (``jepsen.tests.kafka``) as a history of the contract (:mod:`spec.history`).

The workload's operations, as :mod:`history_io.edn` reads them (values in their plain spelling)::

    {:type :invoke, :f :txn, :value [[:send 3 7] [:poll]], :process 2, :time 5230, :index 14}
    {:type :ok, :f :txn, :value [[:send 3 [12 7]] [:poll {3 [[10 5] [11 6]]}]], :process 2, ...}

``:send``, ``:poll`` and ``:txn`` carry micro-operations: ``[:send k v]`` (completed as
``[:send k [offset v]]``, the offset nil when unknown) and ``[:poll]`` (completed as
``[:poll {k [[offset v] ...]}]``).  ``:assign`` and ``:subscribe`` name the keys a consumer reads
from now on (``:seek-to-beginning? true`` on an assign rewinds it), ``:crash`` tears a client down
(it completes ``:info``), ``:debug-topic-partitions`` asks the admin API.  An ``:ok`` operation took
effect (its transaction committed), a ``:fail`` did not (it aborted), an ``:info`` may have.

The mapping, in Pulsar's words (``docs/jepsen.md`` has the table):

* a key is a partition, ``partition:<history>/<key>`` (the key spelled as EDN text); an offset ``o``
  is the position ``[0, o]`` in it;
* every ``:send``, ``:poll`` or ``:txn`` operation is one transaction, ``[0, n]`` with ``n`` its
  number in invocation order (Jepsen's analysis treats each as one): a ``send`` row per
  ``[:send k v]`` (value ``{"message": <v as EDN>, "txn", "key"}``, result the position when the
  offset is known), a ``receive`` row per key of each completed ``[:poll {...}]`` (a batch receive:
  result ``{"messages": [{"message", "position"}, ...]}``, value ``{"consumer": "p<process>", "txn",
  "key", "poll": <the micro-operation's place>}``), and last a ``commit`` row of the transaction,
  whose outcome is the operation's (``:ok`` committed, ``:fail`` aborted, ``:info`` unknown, an
  invocation never completed stays ``invoke``).  The sends and receives a transaction made returned
  to the client whatever became of the transaction: they are ``ok``, and the transaction's fate
  decides what a consumer may see, as in Pulsar (a message of an aborted transaction is written and
  never dispatched);
* an operation's rows split its interval between them in order (the contract keeps one operation
  open per process), so the transaction spans from its first row's invocation to its commit's
  completion;
* ``:assign`` and ``:subscribe`` are a ``subscribe`` row on ``subscription:<history>#p<process>``,
  value ``{"consumer", "keys", "mode": "assign" or "subscribe", "sub_type": "Exclusive" (assign: the
  consumer's own position) or "Failover" (subscribe: a consumer group hands partitions out),
  "seek_to_beginning"}``; a process's polls read on ``subscription:<history>/<key>#p<process>``
  after an assign and on ``...#group`` after a subscribe;
* ``:crash`` and ``:debug-topic-partitions`` change nothing a checker reads: they are paired (a
  crashed process never invokes again) and leave no row;
* the commit and subscribe rows carry ``"jepsen": {"f", "index", "line"}`` (the operation's ``:f``,
  its ``:index`` in the file when it has one, the line of its completion or invocation), which marks
  the history as the Kafka workload's (:func:`invariants.queue.is_kafka_history`) and lets every
  anomaly name the line to look at; a commit row also carries ``"rebalanced"``, the keys of the
  operation's ``:rebalance-log``.

Anything else is bad input naming its line: an unknown micro-operation, a send or poll of the wrong
shape, an offset that is not an integer, a completion without its invocation, an operation of
another workload, a ``:time`` on some operations only.

The file is read as a stream: only the operations still open are held, and each operation's rows are
made, as JSON text, when it completes (rows are numbered in that order; an operation the history
never completed comes last), so a history of millions of operations is read in memory linear in
its rows alone.
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterable
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

from history_io.edn_values import EdnOp, to_edn
from spec.history import BadHistory, Operation, OpType, object_id

__all__ = ["KAFKA_FUNCTIONS", "kafka_operations", "key_text"]

# The operations of the workload, and those of them that are transactions over the log.
KAFKA_FUNCTIONS = frozenset({"send", "poll", "txn", "assign", "subscribe", "crash", "debug-topic-partitions"})
_TRANSACTIONS = frozenset({"send", "poll", "txn"})
_SUBSCRIPTIONS = frozenset({"assign", "subscribe"})


def key_text(key: Any) -> str:
    """A key (or a value) as EDN text, the spelling :mod:`history_io.edn` gives map keys."""
    return to_edn(key)


@dataclass(frozen=True)
class _Paired:
    """One operation: its invocation and, unless the history ended first, its completion."""

    invoke: EdnOp
    done: EdnOp | None
    number: int  # in invocation order
    start: int  # logical time of the invocation
    end: int | None


def _bad(message: str, where: str, line: int) -> BadHistory:
    return BadHistory(f"line {line}: {message}", where=where)


def _pairs(ops: Iterable[EdnOp], where: str) -> Iterable[_Paired]:
    """Invocations paired with completions by process (the contract's pairing rules 1-4), as they
    complete, then those never completed; times are Jepsen's ``:time``, or the form's number in a
    file without any."""
    open_: dict[int, tuple[EdnOp, int, int]] = {}
    crashed: set[int] = set()
    timed: EdnOp | None = None
    invoked = 0
    for count, op in enumerate(ops):
        if timed is None:
            timed = op
        elif (op.time is None) != (timed.time is None):
            missing = "this operation has no :time while others have one" if op.time is None else ""
            raise _bad(missing or f"this operation has a :time and line {timed.line} has none", where, op.line)
        time = op.time if op.time is not None else count
        process = op.process or 0
        if op.f not in KAFKA_FUNCTIONS:
            raise _bad(f"one history mixes workloads: :f :{op.f} beside the Kafka workload's", where, op.line)
        if op.type is OpType.INVOKE:
            if process in crashed:
                raise _bad(f"process {process} invokes after it got :info (a crashed one never does)", where, op.line)
            if process in open_:
                opened = open_[process][0].line
                raise _bad(f"process {process} invokes while line {opened} is still open", where, op.line)
            open_[process] = (op, time, invoked)
            invoked += 1
            continue
        if process not in open_:
            raise _bad(f":{op.type.value} from process {process} with no open invocation", where, op.line)
        invoke, start, number = open_.pop(process)
        if invoke.f != op.f:
            raise _bad(f"completion :{op.f} does not match invocation :{invoke.f} (line {invoke.line})", where, op.line)
        if op.type is OpType.INFO:
            crashed.add(process)
        if time < start:
            raise _bad(f":time {time} is before its invocation's {start} (line {invoke.line})", where, op.line)
        yield _Paired(invoke, op, number, start, time)
    for invoke, start, number in sorted(open_.values(), key=lambda o: o[2]):
        yield _Paired(invoke, None, number, start, None)


def _offset(raw: Any, where: str, line: int) -> int | None:
    if raw is None or (type(raw) is int):
        return raw
    raise _bad(f"an offset is an integer or nil, got {key_text(raw)}", where, line)


def _sends_and_polls(
    value: Any, where: str, line: int
) -> tuple[list[tuple[str, str, int | None]], list[list[tuple[str, list[tuple[int | None, str]]]]]]:
    """The micro-operations of a transaction: (key, value, offset) per send in order, and per poll
    micro-operation its keys in order, each with the (offset, value) pairs it returned."""
    if not isinstance(value, list):
        raise _bad(f"a transaction's value is a vector of micro-operations, got {key_text(value)}", where, line)
    sends: list[tuple[str, str, int | None]] = []
    polls: list[list[tuple[str, list[tuple[int | None, str]]]]] = []
    for mop in value:
        if isinstance(mop, list) and len(mop) == 3 and mop[0] == "send":
            _, key, sent = mop
            # Jepsen's own reading: a vector is [offset value], anything else the value itself
            if isinstance(sent, list) and len(sent) == 2:
                sends.append((key_text(key), key_text(sent[1]), _offset(sent[0], where, line)))
            else:
                sends.append((key_text(key), key_text(sent), None))
        elif isinstance(mop, list) and mop and mop[0] == "poll" and len(mop) <= 2:
            polled = mop[1] if len(mop) == 2 else {}
            polls.append(_polled(polled, where, line))
        else:
            raise _bad(
                f"micro-operation {key_text(mop)} is neither [:send k v], [:send k [offset v]], [:poll] nor "
                "[:poll {k [[offset v] ...]}]",
                where,
                line,
            )
    return sends, polls


def _polled(polled: Any, where: str, line: int) -> list[tuple[str, list[tuple[int | None, str]]]]:
    if polled is None:
        return []
    if not isinstance(polled, dict):
        raise _bad(f"a poll returns a map of keys to [offset value] pairs, got {key_text(polled)}", where, line)
    out = []
    for key, pairs in polled.items():
        if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
            raise _bad(f"a poll of key {key} returns [[offset value] ...], got {key_text(pairs)}", where, line)
        out.append((key, [(_offset(p[0], where, line), key_text(p[1])) for p in pairs]))
    return out


class _Rows:
    """The rows of one history, numbered as they are added; values and results are JSON text, made
    here, and decoded by whoever reads them (so the rows of a large history stay small)."""

    def __init__(self, history: str) -> None:
        self.history = history
        self.rows: list[Operation] = []
        self.coordinator = object_id("coordinator", history)
        self.objects: dict[str, str] = {}  # one string per object, however many rows name it

    def object(self, text: str) -> str:
        return self.objects.setdefault(text, text)

    def add(
        self,
        process: int,
        kind: OpType,
        f: str,
        obj: str,
        value: str,
        result: str | None,
        span: tuple[int, int | None],
        error: str | None = None,
    ) -> None:
        self.rows.append(
            Operation(self.history, len(self.rows), process, kind, f, obj, value, result, span[0], span[1], error)
        )


def _marker(op: _Paired) -> str:
    last = op.done or op.invoke
    index = last.index if last.index is not None else op.invoke.index
    return f'{{"f":{encode_basestring(op.invoke.f)},"index":{"null" if index is None else index},"line":{last.line}}}'


def _spans(start: int, end: int | None, parts: int) -> list[tuple[int, int]]:
    """``parts`` consecutive closed sub-intervals of ``[start, end]`` (all ``[start, start]`` when the
    operation never completed)."""
    stop = start if end is None else end
    bounds = [start + (stop - start) * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


def _position(offset: int | None) -> str:
    return "" if offset is None else f',"position":[0,{offset}]'


def _transaction(out: _Rows, op: _Paired, mode: dict[int, str], where: str) -> None:
    """The rows of one ``:send``, ``:poll`` or ``:txn`` operation (see the module docstring)."""
    done = op.done
    line = (done or op.invoke).line
    value = done.value if done is not None and isinstance(done.value, list) else op.invoke.value
    sends, polls = _sends_and_polls(value, where, line)
    process = op.invoke.process or 0
    txn = f'"txn":[0,{op.number}]'
    history = out.history
    batches = [(i, key, pairs) for i, poll in enumerate(polls) for key, pairs in poll]
    spans = _spans(op.start, op.end, len(sends) + len(batches) + 1)
    for (key, payload, offset), span in zip(sends, spans, strict=False):
        result = None if offset is None else f'{{"position":[0,{offset}]}}'
        text = f'{{"message":{encode_basestring(payload)},{txn},"key":{encode_basestring(key)}}}'
        out.add(process, OpType.OK, "send", out.object(f"partition:{history}/{key}"), text, result, span)
    subscription = mode.get(process, f"p{process}")
    for (place, key, pairs), span in zip(batches, spans[len(sends) :], strict=False):
        messages = ",".join(f'{{"message":{encode_basestring(v)}{_position(o)}}}' for o, v in pairs)
        text = f'{{"consumer":"p{process}",{txn},"key":{encode_basestring(key)},"poll":{place}}}'
        obj = out.object(f"subscription:{history}/{key}#{subscription}")
        out.add(process, OpType.OK, "receive", obj, text, f'{{"messages":[{messages}]}}', span)
    kind = done.type if done is not None else OpType.INVOKE
    rebalanced = _rebalanced(done, where)
    moved = f',"rebalanced":{json.dumps(rebalanced)}' if rebalanced else ""
    end = f'{{{txn},"jepsen":{_marker(op)}{moved}}}'
    final = spans[-1] if kind is not OpType.INVOKE else (spans[-1][0], None)
    error = done.error if done is not None and kind in (OpType.FAIL, OpType.INFO) else None
    if kind is OpType.FAIL and error is None:
        error = "fail"  # it did not take effect; nothing more is concluded, as in Jepsen
    out.add(process, kind, "commit", out.coordinator, end, None, final, error)


def _rebalanced(done: EdnOp | None, where: str) -> list[str]:
    """The keys the operation's ``:rebalance-log`` names (Jepsen's ``[{:keys [k ...]} ...]``)."""
    if done is None or "rebalance-log" not in done.extras:
        return []
    log = done.extras["rebalance-log"]
    if log is None:
        return []
    keys: list[str] = []
    if not isinstance(log, list) or not all(isinstance(event, dict) for event in log):
        raise _bad(f":rebalance-log is a vector of {{:keys [...]}} maps, got {key_text(log)}", where, done.line)
    for event in log:
        named = event.get(key_text("keys"), [])
        if not isinstance(named, list):
            raise _bad(f"a rebalance's :keys is a vector, got {key_text(named)}", where, done.line)
        keys += [key_text(k) for k in named if key_text(k) not in keys]
    return keys


def _subscription(out: _Rows, op: _Paired, mode: dict[int, str], where: str) -> None:
    """The row of one ``:assign`` or ``:subscribe``; the process's polls read under it from now on."""
    done = op.done
    line = (done or op.invoke).line
    raw = done.value if done is not None and done.value is not None else op.invoke.value
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise _bad(f":{op.invoke.f} names a vector of keys, got {key_text(raw)}", where, line)
    process = op.invoke.process or 0
    assign = op.invoke.f == "assign"
    seek = any(bool(e.extras.get("seek-to-beginning?")) for e in (op.invoke, done) if e is not None)
    value: dict[str, Any] = {
        "consumer": f"p{process}",
        "keys": [key_text(k) for k in raw],
        "mode": op.invoke.f,
        "sub_type": "Exclusive" if assign else "Failover",
        "jepsen": json.loads(_marker(op)),
    }
    if seek:
        value["seek_to_beginning"] = True
    kind = done.type if done is not None else OpType.INVOKE
    span = (op.start, op.end if kind is not OpType.INVOKE else None)
    error = done.error if done is not None and kind in (OpType.FAIL, OpType.INFO) else None
    obj = object_id("subscription", f"{out.history}#p{process}")
    out.add(process, kind, "subscribe", obj, json.dumps(value, separators=(",", ":")), None, span, error)
    if kind is OpType.OK or kind is OpType.INFO:
        mode[process] = f"p{process}" if assign else "group"


def kafka_operations(ops: Iterable[EdnOp], history: str, where: str) -> list[Operation]:
    """The rows of one Kafka-workload history (see the module docstring), read from its operations
    in file order, nemesis already left out."""
    out = _Rows(history)
    mode: dict[int, str] = {}  # process -> the subscription its polls read under
    # Rows hold no reference cycle: reference counting frees them, and a full cyclic collection walks
    # the whole heap, which for millions of rows cost more than reading them.
    enabled = gc.isenabled()
    gc.disable()
    try:
        for op in _pairs(ops, where):
            if op.invoke.f in _TRANSACTIONS:
                _transaction(out, op, mode, where)
            elif op.invoke.f in _SUBSCRIPTIONS:
                _subscription(out, op, mode, where)
    finally:
        if enabled:
            gc.enable()
    return out.rows
