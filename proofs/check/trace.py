"""Counterexamples of the composed model checker, in the forms people and tools read.

* :func:`render_text` -- the trace step by step: what happened, and each component's state change;
* :func:`trace_json` -- the viewer's trace shape (:mod:`proofs.check.trace_format`, docs/viewer.md): every
  component's state at every step, which ``txnmodel view`` draws;
* :func:`trace_history` -- the client operations of the trace as a history (``spec/history.py``),
  which ``txnmodel verify`` checks;
* :func:`trace_vector` -- a conformance vector when every machine step of the trace is one
  machine's (``txnmodel vectors run`` replays it);
* :func:`trace_test` -- a pytest module that replays the trace by its action labels and asserts the
  violation again (:func:`replay`).

All pure: the command line writes the files.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import immutables

from proofs.check.explore import Result, TraceStep, Violation
from proofs.check.model import Model
from proofs.check.state import (
    ACK_REQ,
    ACK_RESP,
    ADDP_REQ,
    ADDP_RESP,
    ADDS_REQ,
    ADDS_RESP,
    CLOG,
    COORD,
    END_REQ,
    END_RESP,
    ENDP,
    ENDP_RESP,
    ENDS,
    ENDS_RESP,
    ERRORS,
    IN_TXN,
    NET,
    NEW_REQ,
    NEW_RESP,
    OP_FAILED,
    OP_FLIGHT,
    SEND_REQ,
    SEND_RESP,
    message_name,
    partition_name,
)
from proofs.check.trace_format import FORMAT as TRACE_FORMAT
from proofs.check.trace_format import VERSION as TRACE_VERSION
from spec.history import Operation, OpType, make_operation, object_id
from spec.jsonvalues import to_json
from spec.types import TxnAction

__all__ = [
    "TRACE_FORMAT",
    "components",
    "describe_label",
    "render_text",
    "replay",
    "trace_history",
    "trace_json",
    "trace_test",
    "trace_vector",
]


# --- words ----------------------------------------------------------------------------------


def _action(code: int) -> str:
    return TxnAction(code).name


def _message(model: Model, m: tuple[int, ...]) -> str:
    kind = m[0]
    name = message_name(kind)
    if kind == NEW_REQ:
        return f"{name} from client {m[1]}"
    if kind == NEW_RESP:
        what = f"txn {m[3]}" if m[4] == 0 else ERRORS[m[4]]
        return f"{name} to client {m[1]}: {what}"
    if kind in (ADDP_REQ, ADDS_REQ):
        target = f"partition {m[3]}" if kind == ADDP_REQ else f"subscription {m[3]}"
        return f"{name}(txn {m[2]}, {target}) from client {m[1]}"
    if kind in (ADDP_RESP, ADDS_RESP):
        return f"{name} to client {m[1]} (txn {m[2]}): {ERRORS[m[4]] or 'ok'}"
    if kind == SEND_REQ:
        delay = f", deliver at {m[5]}" if m[5] >= 0 else ""
        return f"{name}(txn {m[2]}, op {m[4]}{delay}) from client {m[1]} to partition {m[3]}"
    if kind == SEND_RESP:
        return f"{name} to client {m[1]} (txn {m[2]}, op {m[3]}): {ERRORS[m[4]] or 'ok'}"
    if kind == ACK_REQ:
        how = "cumulative " if m[7] else ""
        return f"{how}{name}(txn {m[2]}, position {m[4]}:{m[5]}) from client {m[1]} to subscription {m[3]}"
    if kind == ACK_RESP:
        return f"{name} to client {m[1]} (txn {m[2]}, op {m[3]}): {ERRORS[m[4]] or 'ok'}"
    if kind == END_REQ:
        return f"{name}(txn {m[2]}, {_action(m[3])}) from client {m[1]}"
    if kind == END_RESP:
        return f"{name} to client {m[1]} (txn {m[2]}): {ERRORS[m[3]] or 'ok'}"
    if kind in (ENDP, ENDS):
        target = f"partition {m[6]}" if kind == ENDP else f"subscription {m[6]}"
        timeout = ", timeout" if m[4] else ""
        return f"{name}(txn {m[2]}, {_action(m[3])}{timeout}, low watermark {m[5]}) to {target}"
    if kind in (ENDP_RESP, ENDS_RESP):
        target = f"partition {m[6]}" if kind == ENDP_RESP else f"subscription {m[6]}"
        return f"{name} from {target} (txn {m[2]}, {_action(m[3])}): {ERRORS[m[7]] or 'ok'}"
    return str(m)


def describe_label(model: Model, label: tuple[Any, ...]) -> str:
    """What an action label means, in words."""
    kind = label[0]
    spec = model.spec
    if kind == "init":
        return "initial state"
    if kind == "deliver":
        return "deliver " + _message(model, label[1])
    if kind == "lose":
        m = label[1]
        if m[0] in (ENDP, ENDS, ENDP_RESP, ENDS_RESP):
            return "lose " + _message(model, m) + " (the TB client times out: RequestTimeout)"
        return "lose " + _message(model, m)
    if kind == "duplicate":
        return "duplicate " + _message(model, label[1])
    if kind == "begin":
        return f"client {label[1]} begins its transaction {label[2]} (NEW_TXN)"
    if kind == "issue":
        c, i = label[1], label[2]
        return f"client {label[1]} issues operation {i} of its transaction ({_op_text(model, c, i)})"
    if kind == "end":
        return f"client {label[1]} calls {label[2]}()"
    if kind == "receive":
        return f"client {label[1]} receives a message from subscription {label[2]}"
    if kind == "client-timeout":
        return f"client {label[1]}'s transaction timer fires (TIME_OUT, the client gives txn {label[2]} up)"
    if kind == "tick":
        return f"the coordinator's timeout tracker fires at txn {label[1]}'s deadline"
    if kind == "resume":
        return f"the coordinator re-runs the end of txn {label[1]} ({_action(label[2])})"
    if kind == "first-snapshot":
        return f"partition {label[1]}'s first snapshot is durable"
    if kind == "snapshot":
        return f"partition {label[1]} takes a snapshot"
    if kind == "pending-ack-init":
        return f"subscription {label[1]}'s pending-ack store finishes opening"
    if kind == "dispatch":
        return f"subscription {label[1]}'s dispatcher reads the partition"
    if kind == "reader":
        return f"subscription {label[1]}'s reader receives a message and acknowledges it"
    if kind == "time":
        return "time passes (one tick)"
    if kind == "crash-coordinator":
        return "the coordinator crashes and reloads from its log"
    if kind == "crash-partition":
        subs = [str(s) for s, sub in enumerate(spec.subscriptions) if sub.partition == label[1]]
        with_subs = f" with subscription(s) {', '.join(subs)}" if subs else ""
        return f"partition {label[1]}{with_subs} crashes and reloads"
    if kind == "roll-over":
        return f"partition {label[1]}'s ledger rolls over"
    if kind == "retention":
        return f"retention deletes partition {label[1]}'s oldest consumed ledger"
    if kind == "write-complete":
        return "the transaction log's ledger acknowledges the oldest batch write"
    if kind == "writer-timer":
        return "the batched writer's timer flushes its buffer"
    return repr(label)


def _op_text(model: Model, c: int, i: int) -> str:
    for program in model.spec.programs[c:]:
        for script in program:
            if i < len(script.ops):
                op = script.ops[i]
                if op.kind == "send":
                    return f"send to partition {op.target}"
                return f"acknowledge on subscription {op.target}"
    return f"op {i}"


# --- component states -----------------------------------------------------------------------


def components(model: Model, s: tuple[Any, ...]) -> dict[str, Any]:
    """Every component's state in ``s``, by id (``kind:name``)."""
    layout = model.layout
    out: dict[str, Any] = {"coordinator:0": model.value(s[COORD])}
    log = model.value(s[CLOG])
    out["log:transaction-log"] = log
    for p, part in enumerate(s[layout.parts]):
        out[object_id("partition", partition_name(p))] = model.value(part[0])
    for i, sub in enumerate(s[layout.subs]):
        name = model.sub_names[i]
        out[object_id("subscription", f"{name.topic}#{name.subscription}")] = model.value(sub[0])
        if sub[7]:
            out[object_id("tracker", f"{name.topic}#{name.subscription}")] = model.value(sub[7])
    for c, cl in enumerate(s[layout.clients]):
        out[f"client:{c}"] = model.value(cl[3]) if cl[3] else None
    if model.batched is not None:
        out["writer:transaction-log"] = model.value(s[2][4])
    return out


def _plain(value: Any) -> Any:
    """A state as JSON without its configuration (one per run, printed once)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {"@type": type(value).__name__}
        for f in dataclasses.fields(value):
            if f.name == "config":
                continue
            out[f.name] = _plain(getattr(value, f.name))
        return out
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, immutables.Map):
        return sorted(([to_json(k), _plain(v)] for k, v in value.items()), key=lambda kv: json.dumps(kv[0]))
    try:
        return to_json(value)
    except TypeError:
        return repr(value)


def _diff(before: Any, after: Any, path: str, out: list[str], limit: int = 12) -> None:
    if before == after or len(out) >= limit:
        return
    if (
        dataclasses.is_dataclass(before)
        and dataclasses.is_dataclass(after)
        and type(before) is type(after)
        and not isinstance(before, type)
    ):
        for f in dataclasses.fields(before):
            if f.name != "config":
                _diff(getattr(before, f.name), getattr(after, f.name), f"{path}.{f.name}", out, limit)
        return
    if isinstance(before, immutables.Map) and isinstance(after, immutables.Map):
        for key in sorted(set(before.keys()) | set(after.keys()), key=repr):
            where = f"{path}[{_short(key)}]"
            if key not in before:
                out.append(f"{where} added: {_short(after[key])}")
            elif key not in after:
                out.append(f"{where} removed")
            else:
                _diff(before[key], after[key], where, out, limit)
        return
    out.append(f"{path}: {_short(before)} -> {_short(after)}")


def _short(value: Any, width: int = 100) -> str:
    try:
        text = json.dumps(_plain(value), separators=(",", ":"))
    except TypeError:
        text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def render_text(model: Model, violation: Violation) -> str:
    """The trace step by step, with each component's state change."""
    lines = [f"{violation.kind} violation: {violation.name}" + (f" ({violation.detail})" if violation.detail else "")]
    if violation.cycle_start is not None:
        lines.append(
            f"a lasso: steps 0..{violation.cycle_start} lead to a cycle that repeats forever (steps "
            f"{violation.cycle_start}..{violation.length}), fair to every step family and never reaching the goal"
            if violation.length > violation.cycle_start
            else f"steps 0..{violation.cycle_start} lead to a state where no fair step is enabled: the run "
            "stutters there forever without reaching the goal"
        )
    previous: dict[str, Any] | None = None
    for index, step in enumerate(violation.trace):
        marker = " <- cycle starts here" if violation.cycle_start == index and violation.length > index else ""
        lines.append(f"{index:3d}. {describe_label(model, step.label)}{marker}")
        now = components(model, step.state)
        if previous is not None:
            for name, state in now.items():
                changes: list[str] = []
                _diff(previous.get(name), state, "", changes)
                if changes:
                    lines.append(f"       {name}: " + "; ".join(c.lstrip(".") for c in changes))
        previous = now
        if index == len(violation.trace) - 1:
            net = step.state[NET]
            if net:
                lines.append("     in flight: " + "; ".join(_message(model, m) for m in net))
    return "\n".join(lines)


def _actor(model: Model, label: tuple[Any, ...]) -> str:
    """Who takes the step: the component a message is delivered to, the client acting, the
    environment for a fault."""
    kind = label[0]
    if kind == "deliver":
        m = label[1]
        if m[0] in (NEW_RESP, ADDP_RESP, ADDS_RESP, SEND_RESP, ACK_RESP, END_RESP):
            return f"client {m[1]}"
        if m[0] == SEND_REQ:
            return f"partition {m[3]}"
        if m[0] == ENDP:
            return f"partition {m[6]}"
        if m[0] == ACK_REQ:
            return f"subscription {m[3]}"
        if m[0] == ENDS:
            return f"subscription {m[6]}"
        return "coordinator"
    if kind in ("begin", "issue", "end", "receive", "client-timeout"):
        return f"client {label[1]}"
    if kind in ("tick", "resume", "write-complete", "writer-timer"):
        return "coordinator"
    if kind in ("first-snapshot", "snapshot"):
        return f"partition {label[1]}"
    if kind in ("pending-ack-init", "dispatch", "reader"):
        return f"subscription {label[1]}"
    if kind == "time":
        return "clock"
    return "environment"


def trace_json(model: Model, violation: Violation, result: Result | None = None) -> dict[str, Any]:
    """The counterexample in the viewer's trace shape (:mod:`proofs.check.trace_format`, docs/viewer.md):
    every component's initial state, then per step its actor, the action in words and the states
    of the components it changed.  A liveness counterexample is a lasso whose loop starts at
    ``loop_from``; one that ends where no fair step is enabled loops on a last stuttering step."""
    first = components(model, violation.trace[0].state)
    steps: list[dict[str, Any]] = []
    previous = first
    for step in violation.trace[1:]:
        now = components(model, step.state)
        changed = {name: _plain(state) for name, state in now.items() if previous.get(name) != state}
        steps.append(
            {"actor": _actor(model, step.label), "action": describe_label(model, step.label), "states": changed}
        )
        previous = now
    loop_from = violation.cycle_start
    if loop_from is not None and loop_from >= len(steps):
        steps.append(
            {
                "actor": "environment",
                "action": "no fair step is enabled: the run stays in this state forever",
                "states": {},
            }
        )
        loop_from = len(steps) - 1
    message = violation.detail
    if result is not None:
        message = (message + "; " if message else "") + (
            f"{result.states:,} states and {result.transitions:,} transitions explored in {result.seconds:.1f} s"
        )
    overrides = _config_overrides(model)
    bounds: dict[str, Any] = dict(model.spec.bounds)
    if overrides:
        bounds["config"] = overrides
    return {
        "format": TRACE_FORMAT,
        "version": TRACE_VERSION,
        "model": model.spec.name,
        "property": violation.name,
        # A step that never returns is a safety violation of its own kind (the step terminates).
        "kind": "liveness" if violation.kind == "liveness" else "safety",
        "message": message,
        "bounds": bounds,
        "initial": {name: _plain(state) for name, state in first.items()},
        "steps": steps,
        "loop_from": loop_from,
    }


def _config_overrides(model: Model) -> dict[str, Any]:
    from spec.config import Config

    defaults = Config.defaults()
    return {k: v for k, v in model.config.items() if v != defaults[k]}


# --- the history of a trace -----------------------------------------------------------------


def _payload(c: int, seq: int, op: int, p: int) -> str:
    return f"p{p}-pre{op}" if c < 0 else f"c{c}-t{seq}-m{op}"


def trace_history(model: Model, trace: Sequence[TraceStep], name: str = "check") -> list[Operation]:
    """The client operations of a trace as a history: new_txn, add_partition, add_subscription,
    send, receive, ack, commit and abort, each its own process, logical time = step index.
    Operations still open at the end are ``invoke`` (outcome unknown)."""
    history = _History(model)
    for s, sub in enumerate(model.spec.subscriptions):
        history.atomic("subscribe", history.sub_obj(s), {"initial_position": "Earliest", "sub_type": sub.sub_type}, 0)
    for at, step in enumerate(trace[1:], start=1):
        before, after = trace[at - 1].state, step.state
        label = step.label
        kind = label[0]
        if kind == "begin":
            history.invoke(("new", label[1]), "new_txn", "coordinator:0", {"timeout_ms": model.spec.txn_timeout_ms}, at)
        elif kind in ("issue", "end", "receive"):
            history.client_step(label, before, after, at)
        elif kind == "deliver":
            _delivered(model, label[1], before, after, at, history.invoke, history.complete)
        elif kind == "reader":
            s = label[1]
            handed_before = {h[0] for h in before[model.layout.sub(s)][5]}
            new = [h for h in after[model.layout.sub(s)][5] if h[0] not in handed_before and h[1] == -1]
            for pos, _c in new:
                history.received(s, pos, "reader", after, at)
                history.atomic("ack", history.sub_obj(s), {"position": list(pos), "txn": None}, at)
    return [_operation(name, index, op) for index, op in enumerate(history.ops)]


class _History:
    """The operations of a trace as they are invoked and complete (in the order invoked)."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.ops: list[dict[str, Any]] = []
        self.open_ops: dict[tuple[Any, ...], dict[str, Any]] = {}
        self.deliveries: dict[tuple[int, tuple[int, int]], int] = {}

    def invoke(self, key: tuple[Any, ...], f: str, obj: str, value: Any, at: int) -> None:
        op = {"f": f, "object": obj, "value": value, "invoked_at": at, "type": None}
        self.ops.append(op)
        self.open_ops[key] = op

    def complete(self, key: tuple[Any, ...], at: int, result: Any = None, error: str | None = None) -> None:
        op = self.open_ops.pop(key, None)
        if op is None:
            return
        op.update(type=OpType.FAIL if error else OpType.OK, completed_at=at, result=result, error=error)

    def atomic(self, f: str, obj: str, value: Any, at: int, result: Any = None) -> None:
        self.ops.append(
            {
                "f": f,
                "object": obj,
                "value": value,
                "invoked_at": at,
                "completed_at": at,
                "type": OpType.OK,
                "result": result,
            }
        )

    def sub_obj(self, s: int) -> str:
        name = self.model.sub_names[s]
        return object_id("subscription", f"{name.topic}#{name.subscription}")

    def received(self, s: int, pos: tuple[int, int], consumer: str, after: tuple[Any, ...], at: int) -> None:
        """A message handed out by subscription ``s``, with how often it was handed out before."""
        part = self.model.spec.subscriptions[s].partition
        count = self.deliveries.get((s, pos), 0)
        self.deliveries[(s, pos)] = count + 1
        got = _payload_at(after, self.model.layout.part(part), pos, part)
        self.atomic(
            "receive",
            self.sub_obj(s),
            {"consumer": consumer},
            at,
            {"message": got, "position": list(pos), "redelivery_count": count},
        )

    def client_step(self, label: tuple[Any, ...], before: tuple[Any, ...], after: tuple[Any, ...], at: int) -> None:
        """A client's program step: an end, a receive, or a send or ack it issues."""
        kind, c = label[0], label[1]
        layout = self.model.layout
        cl_after = after[layout.client(c)]
        cl_before = before[layout.client(c)]
        seq = cl_before[2]
        txn = [0, seq]
        if kind == "end":
            self.invoke(("end", c, seq), label[2], "coordinator:0", {"txn": txn}, at)
            if cl_after[2] != seq or cl_after[0] != IN_TXN:
                self.complete(("end", c, seq), at, error="InvalidTxnStatus")
            return
        i = cl_before[4]
        op = _script_op(self.model, c, cl_before[1], i)
        if kind == "receive":
            self.received(label[2], cl_after[7][i], f"client-{c}", after, at)
            return
        if op.kind == "send":
            value: dict[str, Any] = {"message": _payload(c, seq, i, op.target), "txn": txn}
            if op.deliver_at >= 0:
                value["deliver_at_ms"] = op.deliver_at
            self.invoke(("op", c, seq, i), "send", object_id("partition", partition_name(op.target)), value, at)
        else:
            pos = cl_before[7][i]
            f = "ack_cumulative" if op.cumulative else "ack"
            self.invoke(("op", c, seq, i), f, self.sub_obj(op.target), {"position": list(pos), "txn": txn}, at)
        if cl_after[6][i] == OP_FAILED:
            self.complete(("op", c, seq, i), at, error="InvalidTxnStatus")


def _operation(name: str, index: int, op: dict[str, Any]) -> Operation:
    typ = op["type"] or OpType.INVOKE
    completed = op.get("completed_at") if typ is not OpType.INVOKE else None
    return make_operation(
        name,
        index,
        index,
        typ,
        op["f"],
        op["object"],
        op["value"],
        op.get("result"),
        invoked_at=op["invoked_at"],
        completed_at=completed,
        error=op.get("error"),
    )


def _script_op(model: Model, c: int, k: int, i: int) -> Any:
    return model.spec.programs[c][k].ops[i]


def _payload_at(s: tuple[Any, ...], slot: int, pos: tuple[int, int], p: int) -> str:
    for entry in s[slot][2]:
        if entry[0] == pos:
            return _payload(entry[1], entry[2], entry[3], p)
    return f"p{p}-{pos[0]}:{pos[1]}"


def _delivered(model: Model, m: tuple[int, ...], before: Any, after: Any, at: int, invoke: Any, complete: Any) -> None:
    layout = model.layout
    kind = m[0]
    if kind == NEW_RESP:
        c = m[1]
        if before[layout.client(c)][0] == 1 and after[layout.client(c)][0] != 1:
            if m[4] == 0:
                complete(("new", c), at, {"txn": [0, m[3]]})
            else:
                complete(("new", c), at, error=ERRORS[m[4]])
    elif kind == ADDP_REQ:
        invoke(
            ("addp", m[1], m[2], m[3], at),
            "add_partition",
            "coordinator:0",
            {"txn": [0, m[2]], "partition": partition_name(m[3])},
            at,
        )
    elif kind == SEND_RESP:
        c, seq, i = m[1], m[2], m[3]
        cl = before[layout.client(c)]
        if cl[2] == seq and cl[6][i] == OP_FLIGHT:
            op = _script_op(model, c, cl[1], i)
            if m[4] == 0:
                complete(("op", c, seq, i), at, {"position": list(_position_of(after, layout, op.target, c, seq, i))})
            else:
                complete(("op", c, seq, i), at, error=ERRORS[m[4]])
    elif kind == ACK_RESP:
        c, seq, i = m[1], m[2], m[3]
        cl = before[layout.client(c)]
        if cl[2] == seq and cl[6][i] == OP_FLIGHT:
            complete(("op", c, seq, i), at, error=ERRORS[m[4]] or None)
    elif kind in (ADDP_RESP, ADDS_RESP):
        c, seq = m[1], m[2]
        cl_before, cl_after = before[layout.client(c)], after[layout.client(c)]
        if cl_before[2] == seq and m[4] != 0:
            for i, (was, now) in enumerate(zip(cl_before[6], cl_after[6], strict=True)):
                if was != now and now == OP_FAILED:
                    complete(("op", c, seq, i), at, error=ERRORS[m[4]])
    elif kind == END_RESP:
        c, seq = m[1], m[2]
        cl_before, cl_after = before[layout.client(c)], after[layout.client(c)]
        if cl_before[2] == seq and (cl_after[2] != seq or cl_after[0] != IN_TXN):
            complete(("end", c, seq), at, error=ERRORS[m[3]] or None)


def _position_of(s: tuple[Any, ...], layout: Any, p: int, c: int, seq: int, i: int) -> tuple[int, int]:
    for entry in s[layout.part(p)][2]:
        if entry[1:4] == (c, seq, i):
            return (int(entry[0][0]), int(entry[0][1]))
    return (-1, -1)


# --- replay and tests -----------------------------------------------------------------------


def replay(model: Model, labels: Sequence[Sequence[Any]]) -> list[TraceStep]:
    """Replay a trace by its action labels from the initial state (no reductions)."""
    state = model.initial()
    trace = [TraceStep(("init",), state)]
    for n, raw in enumerate(labels[1:] if labels and tuple(labels[0]) == ("init",) else labels, start=1):
        wanted = _tupled(raw)
        for succ in model.successors(state):
            if succ.label == wanted:
                state = succ.state
                trace.append(TraceStep(succ.label, state))
                break
        else:
            raise ValueError(f"step {n}: no enabled action {wanted!r}")
    return trace


def _tupled(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_tupled(v) for v in value)
    return value


def trace_test(model: Model, violation: Violation, *, quirks: Sequence[str] = ()) -> str:
    """A pytest module that replays the counterexample and asserts it again."""
    labels = json.dumps([list(_listed(step.label)) for step in violation.trace])
    bounds = json.dumps(dict((k, v) for k, v in model.spec.bounds.items() if k != "quirks"), sort_keys=True)
    name = violation.name.replace("/", "_").replace("-", "_")
    check = (
        "    assert any(model.goals(step.state, PROPS) == tuple(False for _ in PROPS) for step in trace)\n"
        if violation.kind == "liveness"
        else "    assert any(\n"
        f"        {violation.name!r} in model.violations(step.state) or step is trace[-1]\n"
        "        for step in trace\n"
        "    )\n"
        f"    assert {violation.name!r} in model.violations(trace[-1].state) + list(_broken(model, trace))\n"
    )
    return f'''"""Replays a counterexample of `txnmodel check --model {model.spec.name}`
({violation.kind}: {violation.name}).

Generated by txnmodel check; the labels are the checker's action labels (proofs/check/trace.py).
"""

from __future__ import annotations

from invariants import composed
from proofs.check.model import Model
from proofs.check.models import build
from proofs.check.trace import replay

LABELS = {labels}
BOUNDS = {bounds}
QUIRKS = {tuple(quirks)!r}
PROPS = tuple(p for p in composed.LIVENESS + composed.LIVENESS_STRICT if p.name == {violation.name!r})


def _broken(model: Model, trace: list) -> list[str]:
    out: list[str] = []
    for before, after in zip(trace, trace[1:]):
        for succ in model.successors(before.state):
            if succ.label == after.label:
                out.extend(succ.broken)
    return out


def test_{name}_reproduces() -> None:
    model = Model(build({model.spec.name!r}, BOUNDS, quirks=QUIRKS))
    trace = replay(model, LABELS)
{check}'''


def _listed(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_listed(v) for v in value]
    return value


def _component_of(model: Model, violation: Violation) -> tuple[str, int] | None:
    """The one machine instance a safety violation is about: (machine, index)."""
    name = violation.name
    last = violation.trace[-1].state
    if name.startswith("coordinator/") or name == "coordinator-recovers-live":
        return ("coordinator", 0)
    layout = model.layout
    if name.startswith("buffer/") or name in ("buffer-recovers-live", "read-committed", "mrp-before-open-txn"):
        for p in range(layout.partitions):
            if name in model.violations(last, (layout.part(p),)):
                return ("buffer", p)
        return None
    if name.startswith("pending_ack/") or name == "pending-ack-recovers-live":
        for i in range(layout.subscriptions):
            broken = model.violations(last, (layout.sub(i),))
            if name in broken:
                return ("pending_ack", i)
    return None


class _Recorder:
    """The commands one machine instance receives along a replay, with their results, and whether
    it was reloaded from what it made durable (which a vector cannot express)."""

    def __init__(self, machine: str, index: int) -> None:
        self.machine, self.index = machine, index
        self.recorded: list[tuple[Any, Any]] = []
        self.reloaded_from_disk = False

    def stepped(self, machine: str, index: int, command: Any, result: Any) -> None:
        if machine == self.machine and index == self.index:
            self.recorded.append((command, result))

    def reloaded(self, machine: str, index: int) -> None:
        if machine == self.machine and index == self.index:
            self.reloaded_from_disk = True


def trace_vector(model: Model, violation: Violation) -> dict[str, Any] | None:
    """A conformance vector of the machine instance a safety violation is about: the commands it
    received along the trace, with their results (the counterexample at machine level).  ``None``
    for liveness, or when the instance crashed through a reload the vector format cannot express
    (the coordinator's reload is a fold of records, not a command)."""
    from reference import buffer as tb
    from reference import coordinator as tc
    from reference import pending_ack as pa

    if violation.kind != "safety":
        return None
    target = _component_of(model, violation)
    if target is None:
        return None
    machine, index = target
    recorder = _Recorder(machine, index)
    replay(Model(model.spec, observer=recorder), [list(_listed(step.label)) for step in violation.trace])
    recorded = recorder.recorded
    if recorder.reloaded_from_disk or not recorded:
        return None
    adapter = {"coordinator": tc.VECTORS, "buffer": tb.VECTORS, "pending_ack": pa.VECTORS}[machine]
    names = {cls: name for name, cls in adapter.commands.items()}
    steps = []
    for command, result in recorded:
        name = names.get(type(command))
        if name is None:
            return None
        args = {f.name: to_json(getattr(command, f.name)) for f in dataclasses.fields(command)}
        expect: Any = {"error": result.error.name} if not result.ok else {"ok": to_json(result.value)}
        step: dict[str, Any] = {"command": name, "expect": expect}
        if args:
            step["args"] = args
        steps.append(step)
    init: dict[str, Any] = {}
    if machine == "buffer":
        init = {"topic": tb.DEFAULT_TOPIC}
    elif machine == "pending_ack":
        init = {"sub_type": model.spec.subscriptions[index].sub_type}
    return {
        "id": f"check-{model.spec.name}-{violation.name.replace('/', '-')}",
        "machine": adapter.name,
        "description": f"counterexample of txnmodel check --model {model.spec.name} ({violation.kind} "
        f"{violation.name}): the commands its {machine} received along the trace, with the results it gave",
        "source": "txnmodel check",
        "config": _config_overrides(model),
        "init": init,
        "steps": steps,
    }
