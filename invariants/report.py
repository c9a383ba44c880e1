"""Counterexamples a person can read: the smallest failing core, the prefix, the op that cannot be placed.

For an ``illegal`` object, :func:`explain` computes:

* **the core** — the history is cut to its shortest illegal prefix (binary search), then
  delta debugging (Zeller's ddmin) finds a 1-minimal set of operations whose recorded *outputs*
  cannot all be true; the other operations stay (they still took effect in their intervals) but
  their outputs are ignored.  Both steps only remove constraints, so the result proves the
  original illegal.  Deleting operations instead would be unsound: dropping a write can make a
  perfectly good read look illegal.
* **the last linearizable prefix** of the core and **the operation that cannot be placed** after it,
  with the model's state at that point.

:func:`render_text` prints it; :func:`counterexample_html` makes the interactive page of
:mod:`views.viewer` (a time axis, one lane per process, the core and the blocked operation
called out, and a stepper through the longest partial linearizations with the model's state at
each step), capped in size.  :func:`txn_html` does the same for a history's transactional
anomalies: each named, with the rule it breaks (:data:`ANOMALY_RULES`), its operations in words
and its dependency cycle drawn.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from invariants.linearizability import UNKNOWN, Model, ObjectResult, Verdict, check_object
from invariants.models import NO_EFFECT
from invariants.readable import Row, rows
from invariants.transactional import ANOMALIES, TxnResult
from spec.history import Operation, OpType
from views.viewer import Caps, Linearization, linearizability_page, partial_linearizations, transactional_page

__all__ = [
    "ANOMALY_RULES",
    "Counterexample",
    "counterexample_html",
    "ddmin",
    "explain",
    "render_text",
    "render_txn_text",
    "txn_html",
]

MAX_HTML_OPS = 400
MAX_HTML_BYTES = 1_000_000

# What each transactional anomaly breaks: the rules (ids of spec/rules/*.md) and the rule in words.
ANOMALY_RULES: dict[str, tuple[tuple[str, ...], str]] = {
    "garbage-read": ((), "a consumer receives only messages that a producer sent to that partition"),
    "aborted-read": (
        ("TB-16",),
        "the messages of an aborted transaction are never delivered (read committed, Adya G1a)",
    ),
    "uncommitted-read": (
        ("TB-15", "TB-7"),
        "a reader never passes maxReadPosition, which stays before the first message of every open "
        "transaction (read committed, Adya G1a)",
    ),
    "premature-read": (
        ("TB-15", "TB-7"),
        "a transaction's messages become readable only once it commits: no dispatch beyond maxReadPosition (Adya G1b)",
    ),
    "fractured-read": (
        ("TB-19",),
        "once nothing is open, a committed transaction is visible whole: a reader that passed some of its "
        "messages sees all of them",
    ),
    "lost-message": (
        ("TB-19", "TC-14"),
        "a committed transaction's messages all become visible: every participant gets the commit marker and "
        "a reader that drains the partition receives them",
    ),
    "duplicate-after-commit": (
        ("PA-12", "PA-3"),
        "a commit acknowledges exactly the transaction's pending acks on the cursor, and an acknowledged "
        "message is never delivered again",
    ),
    "missing-redelivery": (
        ("PA-13",),
        "an abort returns the transaction's individual acks to pending and redelivers those messages",
    ),
    "inconsistent-position": ((), "a position holds one message (or one batch at distinct indexes), as sent"),
    "realtime-order": ((), "a send that completed before another began is written before it"),
    "out-of-order-delivery": (("TB-17",), "dispatch follows log order: first deliveries come in position order"),
    "early-delivery": (("DD-1", "DD-13"), "a delayed message is delivered only once its deliver-at time is due"),
    "late-delivery": (
        ("DD-1", "DD-25"),
        "once due, a delayed message is released at the next tick and dispatched to a consumer with permits",
    ),
    "lost-redelivery": (
        ("PA-1", "PA-3"),
        "a message nobody acknowledged stays PENDING on the cursor: when its consumer gives it back it is "
        "delivered again",
    ),
    "commit-and-abort": (("TC-6",), "a transaction ends once: COMMITTED and ABORTED are terminal"),
    "cyclic-information-flow": (
        ("TB-15", "TB-16"),
        "a transaction reads only committed data, so whoever it consumed from committed first: no cycle (Adya G1c)",
    ),
}
assert set(ANOMALY_RULES) == set(ANOMALIES), set(ANOMALY_RULES) ^ set(ANOMALIES)


@dataclass(frozen=True)
class Counterexample:
    history: str
    object: str
    model: str
    seed: int | None
    ops: tuple[Operation, ...]  # every op of the object, as recorded
    core: tuple[int, ...]  # indexes of the 1-minimal determinate core
    prefix: tuple[int, ...]  # the core history's longest linearizable prefix (linearization order)
    blocked: int | None
    state_after: str
    reason: str
    descriptions: dict[int, str]
    searches: int  # checker runs spent on shrinking
    original_ops: int = 0  # operations of the object before the cut
    # the longest partial linearizations with the model's state at each step (for the viewer)
    linearizations: tuple[Linearization, ...] = ()
    ignored: frozenset[int] = frozenset()  # operations whose outputs the core ignores
    reproduce: str | None = None  # the command that reruns the history, when its file recorded the run

    def to_json(self) -> dict[str, Any]:
        return {
            "history": self.history,
            "object": self.object,
            "model": self.model,
            "seed": self.seed,
            "core": list(self.core),
            "prefix": list(self.prefix),
            "blocked": self.blocked,
            "state_after": self.state_after,
            "reason": self.reason,
        }


def _weaken(op: Operation) -> Operation:
    return dataclasses.replace(op, type=OpType.INFO, result=None, error=None, _result=None)


def ddmin(items: Sequence[int], fails: Callable[[Sequence[int]], bool], *, max_tests: int = 400) -> list[int]:
    """Zeller's ddmin: a 1-minimal subsequence of ``items`` on which ``fails`` still holds.

    ``fails(items)`` must be true on entry.  Stops early (returning the smallest found so far) after
    ``max_tests`` calls of ``fails``.
    """
    current = list(items)
    tests = 0
    n = 2
    while len(current) >= 2 and tests < max_tests:
        size = math.ceil(len(current) / n)
        chunks = [current[i : i + size] for i in range(0, len(current), size)]
        reduced = False
        for chunk in chunks:
            tests += 1
            if fails(chunk):
                current, n, reduced = chunk, 2, True
                break
            if tests >= max_tests:
                break
        if not reduced and tests < max_tests and len(chunks) > 2:
            for i in range(len(chunks)):
                complement = [x for j, c in enumerate(chunks) if j != i for x in c]
                tests += 1
                if fails(complement):
                    current, n, reduced = complement, max(n - 1, 2), True
                    break
                if tests >= max_tests:
                    break
        if not reduced:
            if n >= len(current):
                break
            n = min(len(current), 2 * n)
    if len(current) == 1 and tests < max_tests and fails([]):
        return []
    return current


def explain(
    model: Model,
    ops: Sequence[Operation],
    result: ObjectResult,
    *,
    step_budget: int = 50_000,
    max_tests: int = 200,
    seconds: float = 10.0,
) -> Counterexample:
    """The counterexample of an ``illegal`` object result (``ops``: that object's operations).

    Two sound reductions, each of which keeps "not linearizable" true of the original history:

    1. *Cut* at the earliest instant whose prefix is already illegal (binary search): operations
       invoked later are dropped and operations still open at the cut become ``info``
       (linearizability is prefix-closed, so an illegal prefix proves the whole history illegal).
    2. *Ignore outputs* (ddmin): an operation outside the core keeps its interval and its effect on
       the state, but its recorded output is no longer checked (any output is accepted).  The core
       is 1-minimal: the history is illegal with exactly the core's outputs checked, and checking
       any one fewer makes it linearizable (or the shrinking budget ran out: ``searches``).
    """
    if result.verdict is not Verdict.ILLEGAL:
        raise ValueError(f"explain() needs an illegal result, got {result.verdict.value}")
    searches = 0
    deadline = time.monotonic() + seconds
    # a sub-history is rarely harder than the whole; give each search a little more than the original took
    step_budget = max(step_budget, 2 * result.steps)

    def cut(at: int) -> list[Operation]:
        return [
            op if op.type.indeterminate or (op.completed_at or 0) <= at else _weaken(op)
            for op in ops
            if op.invoked_at <= at
        ]

    def illegal(history: Sequence[Operation], ignore: frozenset[int] = frozenset()) -> bool:
        nonlocal searches
        searches += 1
        return (
            check_object(model, history, step_budget=step_budget, ignore_outputs=ignore, deadline=deadline).verdict
            is Verdict.ILLEGAL
        )

    # 1. the shortest illegal prefix: binary search over completion times (prefix-closure makes
    #    "the prefix up to t is illegal" monotone in t; a budget-limited search only errs long).
    current = list(ops)
    times = sorted({op.completed_at for op in ops if op.type.completed and op.completed_at is not None})
    low, high = 0, len(times) - 1
    best: list[Operation] | None = None
    while low <= high and time.monotonic() < deadline:
        middle = (low + high) // 2
        candidate = cut(times[middle])
        if illegal(candidate):
            best, high = candidate, middle - 1
        else:
            low = middle + 1
    if best is not None:
        current = best
    decoded = {op.index: model.decode(op)[1] for op in current}
    candidates = [
        op.index
        for op in current
        if not op.type.indeterminate and decoded[op.index] is not UNKNOWN and decoded[op.index] is not NO_EFFECT
    ]
    everything = frozenset(candidates)

    def fails(core: Sequence[int]) -> bool:
        return time.monotonic() < deadline and illegal(current, everything - frozenset(core))

    core = ddmin(candidates, fails, max_tests=max_tests)
    final = check_object(model, current, ignore_outputs=everything - frozenset(core))
    if final.verdict is not Verdict.ILLEGAL:  # only if a budget misled the shrinker: keep everything checked
        core = candidates
        final = check_object(model, current)
    descriptions = {}
    for op in current:
        inp, out = model.decode(op)
        descriptions[op.index] = model.describe_op(inp, out)
    ignored = everything - frozenset(core)
    return Counterexample(
        history=ops[0].history,
        object=ops[0].object,
        model=getattr(model, "name", type(model).__name__),
        seed=next((op.seed for op in ops if op.seed is not None), None),
        ops=tuple(current),
        core=tuple(sorted(core)),
        prefix=final.linearization,
        blocked=final.blocked,
        state_after=final.state_after,
        reason=final.reason,
        descriptions=descriptions,
        searches=searches,
        original_ops=len(ops),
        # display only: a few seconds at most, whatever the shrinking left
        linearizations=_linearizations(model, current, ignored, final.linearization, seconds=min(3.0, seconds)),
        ignored=ignored,
    )


def _linearizations(
    model: Model,
    ops: Sequence[Operation],
    ignored: frozenset[int],
    checker_prefix: Sequence[int],
    *,
    limit: int = 5,
    budget: int = 20_000,
    max_rows: int = 400,
    seconds: float = 3.0,
) -> tuple[Linearization, ...]:
    """The checker's longest linearizable prefix, then the other longest partial linearizations a
    bounded search finds, each with the model's state before and after every step and, at its end,
    what could come next and why the model refuses it."""
    decode_all = getattr(model, "decode_all", None)
    decoded = list(decode_all(ops)) if decode_all is not None else [model.decode(op) for op in ops]
    decoded = [(d[0], UNKNOWN) if op.index in ignored else d for op, d in zip(ops, decoded, strict=True)]
    calls = [op.invoked_at for op in ops]
    returns = [op.return_time for op in ops]
    where = {op.index: k for k, op in enumerate(ops)}
    first = tuple(where[i] for i in checker_prefix if i in where)
    others = partial_linearizations(
        model.init(),
        model.step,
        decoded,
        calls,
        returns,
        limit=limit,
        budget=budget,
        deadline=time.monotonic() + seconds,
    )
    orders = [(first, "checker")] + [
        (order, "search") for order in others if set(order) != set(first) and len(order) >= len(first) // 2
    ]
    state_rows = getattr(model, "state_rows", None)

    def flatten(state: Any) -> tuple[list[Row], int]:
        if state_rows is not None:
            found: tuple[list[Row], int] = state_rows(state, max_rows=max_rows)
            return found
        return rows(state, max_rows=max_rows)

    out = []
    for order, source in orders[:limit]:
        state = model.init()
        found, left = flatten(state)
        states = [tuple(found)]
        for k in order:
            accepted, state = model.step(state, *decoded[k])
            if not accepted:  # cannot happen for an order the search or the checker accepted
                break
            found, more = flatten(state)
            left = max(left, more)
            states.append(tuple(found))
        placed = set(order[: len(states) - 1])
        next_ops, blocked = _what_next(model, ops, decoded, calls, returns, placed, state)
        out.append(
            Linearization(
                order=tuple(ops[k].index for k in order[: len(states) - 1]),
                states=tuple(states),
                rows_left=left,
                source=source,
                next_ops=next_ops,
                blocked=blocked,
            )
        )
    return tuple(out)


def _what_next(
    model: Model,
    ops: Sequence[Operation],
    decoded: Sequence[tuple[Any, Any]],
    calls: Sequence[int],
    returns: Sequence[float],
    placed: set[int],
    state: Any,
) -> tuple[tuple[tuple[int, str], ...], int | None]:
    """After a partial linearization: each operation that real time lets come next and what the
    model says of it, and the operation whose return closes the prefix (the first open return)."""
    open_ops = [k for k in range(len(ops)) if k not in placed]
    if not open_ops:
        return (), None
    first_return = min(open_ops, key=lambda k: (returns[k], k))
    why = []
    for k in sorted(open_ops, key=lambda k: (calls[k], k)):
        bound = min((returns[j] for j in open_ops if j != k), default=math.inf)
        if calls[k] > bound:
            continue
        accepted, _ = model.step(state, *decoded[k])
        words = model.describe_op(*decoded[k])
        if accepted:
            why.append(
                (ops[k].index, f"{words}: the model accepts it here, but every way on from it fails before a return")
            )
        else:
            why.append((ops[k].index, f"{words}: the model refuses it in this state"))
    return tuple(why), ops[first_return].index


def _op_line(op: Operation, text: str) -> str:
    end = "∞" if op.type.indeterminate else str(op.completed_at)
    return f"  op {op.index:>4}  process {op.process:>3}  [{op.invoked_at}, {end}]  {op.type.value:<6} {text}"


def render_text(cx: Counterexample, *, max_lines: int = 60) -> str:
    """The counterexample as plain text (capped at ``max_lines`` operation lines per section)."""
    by_index = {op.index: op for op in cx.ops}
    lines = [f"history {cx.history}  object {cx.object}  model {cx.model}  NOT LINEARIZABLE"]
    lines += reproduce_lines(cx.seed, cx.reproduce)
    lines.append(
        f"shortest illegal prefix: {len(cx.ops)} of {cx.original_ops} operations (later ones dropped, "
        f"ones still open at the cut made indeterminate)"
    )
    lines.append(
        f"smallest failing core: {len(cx.core)} operation(s) whose outputs cannot all be true (the other "
        f"operations still took effect in their intervals, their outputs ignored; {cx.searches} searches)"
    )
    for index in cx.core[:max_lines]:
        lines.append(_op_line(by_index[index], cx.descriptions.get(index, by_index[index].f)))
    if len(cx.core) > max_lines:
        lines.append(f"  ... {len(cx.core) - max_lines} more")
    lines.append(f"longest linearizable prefix ({len(cx.prefix)} operations, in linearization order):")
    shown = cx.prefix[-max_lines:]
    if len(cx.prefix) > len(shown):
        lines.append(f"  ... {len(cx.prefix) - len(shown)} earlier operations")
    for index in shown:
        lines.append(_op_line(by_index[index], cx.descriptions.get(index, by_index[index].f)))
    lines.append(f"state after the prefix: {cx.state_after}")
    if cx.blocked is not None:
        op = by_index[cx.blocked]
        lines.append("cannot be placed next:")
        lines.append(_op_line(op, cx.descriptions.get(op.index, op.f)))
    if cx.reason:
        lines.append(f"why: {cx.reason}")
    return "\n".join(lines)


def reproduce_lines(seed: int | None, reproduce: str | None) -> list[str]:
    """How to rerun the history: the whole command when its file recorded the run, else its seed
    (alone it reproduces nothing: the run's other options matter as much)."""
    if reproduce is not None:
        return [f"reproduce with: {reproduce}"]
    return [f"seed {seed} (the file does not record the run's other options)"] if seed is not None else []


def render_txn_text(result: TxnResult, *, seed: int | None = None, reproduce: str | None = None) -> str:
    """A transactional verdict as text: each anomaly with its evidence in words."""
    if result.ok:
        return f"history {result.history}: no transactional anomaly ({result.txns} txns, {result.messages} messages)"
    lines = [
        f"history {result.history}: TRANSACTIONAL ANOMALIES "
        + ", ".join(f"{name} x{count}" for name, count in sorted(result.counts.items()))
    ]
    lines += reproduce_lines(seed, reproduce)
    for anomaly in result.anomalies:
        lines.append(f"  - {anomaly}")
    cut = sum(result.counts.values()) - len(result.anomalies)
    if cut > 0:
        lines.append(f"  ... {cut} more not listed")
    return "\n".join(lines)


# --- HTML ------------------------------------------------------------------------------------------


def counterexample_html(cx: Counterexample, *, max_ops: int = MAX_HTML_OPS, max_bytes: int = MAX_HTML_BYTES) -> str:
    """The interactive page of a counterexample (:func:`views.viewer.linearizability_page`)."""
    return linearizability_page(
        history=cx.history,
        obj=cx.object,
        model=cx.model,
        seed=cx.seed,
        ops=cx.ops,
        descriptions=cx.descriptions,
        core=cx.core,
        ignored=cx.ignored,
        blocked=cx.blocked,
        reason=cx.reason,
        state_after=cx.state_after,
        linearizations=cx.linearizations,
        original_ops=cx.original_ops,
        searches=cx.searches,
        caps=Caps(max_ops=max_ops, max_bytes=max_bytes),
        reproduce=cx.reproduce,
    )


def txn_html(
    result: TxnResult,
    ops: Sequence[Operation],
    *,
    seed: int | None = None,
    max_ops: int = MAX_HTML_OPS,
    max_bytes: int = MAX_HTML_BYTES,
    reproduce: str | None = None,
) -> str:
    """A history's transactional anomalies as an interactive page
    (:func:`views.viewer.transactional_page`)."""
    return transactional_page(
        history=result.history,
        seed=seed,
        reproduce=reproduce,
        ops=ops,
        anomalies=result.anomalies,
        counts=result.counts,
        rules=ANOMALY_RULES,
        caps=Caps(max_ops=max_ops, max_bytes=max_bytes),
    )
