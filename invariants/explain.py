"""Counterexamples as data: the smallest failing core, the prefix, the op that cannot be placed.

For an ``illegal`` object, :func:`explain` computes:

* **the core** — the history is cut to its shortest illegal prefix (binary search), then
  delta debugging (Zeller's ddmin) finds a 1-minimal set of operations whose recorded *outputs*
  cannot all be true; the other operations stay (they still took effect in their intervals) but
  their outputs are ignored.  Both steps only remove constraints, so the result proves the
  original illegal.  Deleting operations instead would be unsound: dropping a write can make a
  perfectly good read look illegal.
* **the last linearizable prefix** of the core and **the operation that cannot be placed** after it,
  with the model's state at that point.

The explanation is data (Elle's split): :mod:`views.report` prints it and makes its interactive
page, and the page for a history's transactional anomalies, each named with the rule it breaks
(:data:`ANOMALY_RULES`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from invariants.linearizability import UNKNOWN, Model, ObjectResult, Verdict, check_object
from invariants.models import NO_EFFECT
from invariants.queue.taxonomy import QUEUE_RULES
from invariants.readable import Row, rows
from invariants.transactional import ANOMALIES
from spec.history import EFFECTS, Operation, OpType

__all__ = ["ANOMALY_RULES", "Counterexample", "Linearization", "ddmin", "explain", "partial_linearizations"]

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
    **QUEUE_RULES,  # Jepsen's Kafka-workload taxonomy (invariants.queue)
}
assert set(ANOMALY_RULES) == set(ANOMALIES), set(ANOMALY_RULES) ^ set(ANOMALIES)


@dataclass(frozen=True)
class Linearization:
    """One partial linearization to step through: the operations in order and the model's state
    before the first step and after each one (rows of :func:`invariants.readable.rows`)."""

    order: tuple[int, ...]
    states: tuple[tuple[Row, ...], ...]  # len(order) + 1
    rows_left: int = 0  # state rows the row cap left out (largest over the steps)
    source: str = ""  # "checker" (the search's own longest prefix) or "search" (another one)
    # after the last step: (op index, why it cannot come next), the candidates first
    next_ops: tuple[tuple[int, str], ...] = ()
    blocked: int | None = None  # the op whose return ends this prefix: it had to be placed by then


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
    """``op`` open at a cut: nothing of its outcome is known there, not even what a machine step
    asked for (its effects, format version 4: they depend on steps the cut may drop)."""
    weaker = dataclasses.replace(op, type=OpType.INFO, result=None, error=None, _result=None)
    args = op.args
    if isinstance(args, dict) and EFFECTS in args:
        args = {key: value for key, value in args.items() if key != EFFECTS}
        weaker = dataclasses.replace(weaker, value=json.dumps(args, separators=(",", ":")), _value=args)
    return weaker


def _open_at_cut(op: Operation, at: int) -> bool:
    if op.type.indeterminate:
        return EFFECTS in op.value  # else it says nothing of its outcome already
    return (op.completed_at or 0) > at


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
       invoked later are dropped and operations still open at the cut become ``info`` with nothing
       of their outcome kept, a machine step's effects included (linearizability is prefix-closed,
       so an illegal prefix proves the whole history illegal).
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
        return [_weaken(op) if _open_at_cut(op, at) else op for op in ops if op.invoked_at <= at]

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
    # Every op whose output the model checks: a determinate one's answer, or what an indeterminate
    # machine step asked for (its effects' digest, history format version 4).
    candidates = [op.index for op in current if decoded[op.index] is not UNKNOWN and decoded[op.index] is not NO_EFFECT]
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
            refusal = getattr(model, "refusal", None)
            reason = refusal(state, *decoded[k]) if refusal is not None else None
            because = f": {reason}" if reason else ""
            why.append((ops[k].index, f"{words}: the model refuses it in this state{because}"))
    return tuple(why), ops[first_return].index


# --- partial linearizations ---------------------------------------------------------------------------


@dataclass
class _Search:
    """Bookkeeping of :func:`partial_linearizations`."""

    budget: int
    nodes: int = 0
    found: dict[int, tuple[int, ...]] = field(default_factory=dict)  # linearized set -> an order of it


def partial_linearizations(
    init: Hashable,
    step: Callable[[Any, Any, Any], tuple[bool, Any]],
    decoded: Sequence[tuple[Any, Any]],
    calls: Sequence[int],
    returns: Sequence[float],
    *,
    limit: int = 5,
    budget: int = 20_000,
    deadline: float | None = None,
) -> list[tuple[int, ...]]:
    """The longest maximal partial linearizations a bounded depth-first search finds, longest
    first, at most ``limit`` with distinct sets of operations (positions into ``decoded``).

    For display only: the verdict is :func:`invariants.linearizability.check_object`'s.  A partial
    linearization orders some operations so that the model accepts each in turn and real-time
    order holds (an operation comes after every operation that returned before it was called);
    it is maximal when the model refuses every operation that could come next.  ``budget`` bounds
    the model steps tried and ``deadline`` (a ``time.monotonic()`` instant) the time; a (set,
    state) pair is visited once.
    """
    n = len(decoded)
    by_return = sorted(range(n), key=lambda i: (returns[i], i))
    by_call = sorted(range(n), key=lambda i: (calls[i], i))
    search = _Search(budget)
    seen: set[tuple[int, Any]] = set()

    def candidates(mask: int) -> list[int]:
        # the two earliest open returns bound what may come next (the earliest one binds every other op)
        first = second = -1
        for i in by_return:
            if not mask >> i & 1:
                if first < 0:
                    first = i
                else:
                    second = i
                    break
        if first < 0:
            return []
        first_ret = returns[first]
        second_ret = returns[second] if second >= 0 else math.inf
        out = []
        for i in by_call:
            if calls[i] > max(first_ret, second_ret):
                break
            if not mask >> i & 1 and calls[i] <= (second_ret if i == first else first_ret):
                out.append(i)
        return out

    # iterative DFS: (linearized set, state, order, candidates left to try)
    stack: list[tuple[int, Any, tuple[int, ...], list[int]]] = [(0, init, (), candidates(0))]
    seen.add((0, init))
    extended: set[int] = set()  # sets that had an accepted extension: not maximal
    while stack and search.nodes < budget:
        if deadline is not None and not search.nodes & 255 and time.monotonic() > deadline:
            break
        mask, state, order, todo = stack[-1]
        if not todo:
            stack.pop()
            if mask not in extended and order:
                search.found.setdefault(mask, order)
            continue
        i = todo.pop()
        search.nodes += 1
        accepted, new_state = step(state, decoded[i][0], decoded[i][1])
        if not accepted:
            continue
        extended.add(mask)
        key = (mask | 1 << i, new_state)
        if key in seen:
            continue
        seen.add(key)
        stack.append((key[0], new_state, (*order, i), candidates(key[0])))
    best = sorted(search.found.values(), key=lambda o: (-len(o), o))
    return best[:limit]
