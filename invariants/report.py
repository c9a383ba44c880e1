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

:func:`render_text` prints it; :func:`render_html` draws a self-contained HTML page with one lane
per client (the picture Porcupine draws) whose size is capped: at most ``max_ops`` operations are
drawn (those nearest the blocked operation in time) and the page never exceeds ``max_bytes``.
"""

from __future__ import annotations

import dataclasses
import html
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from invariants.linearizability import UNKNOWN, Model, ObjectResult, Verdict, check_object
from invariants.models import NO_EFFECT
from invariants.transactional import TxnResult
from spec.history import Operation, OpType

__all__ = [
    "Counterexample",
    "counterexample_html",
    "ddmin",
    "explain",
    "render_html",
    "render_text",
    "render_txn_text",
    "txn_html",
]

MAX_HTML_OPS = 400
MAX_HTML_BYTES = 1_000_000


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
    )


def _op_line(op: Operation, text: str) -> str:
    end = "∞" if op.type.indeterminate else str(op.completed_at)
    return f"  op {op.index:>4}  process {op.process:>3}  [{op.invoked_at}, {end}]  {op.type.value:<6} {text}"


def render_text(cx: Counterexample, *, max_lines: int = 60) -> str:
    """The counterexample as plain text (capped at ``max_lines`` operation lines per section)."""
    by_index = {op.index: op for op in cx.ops}
    lines = [f"history {cx.history}  object {cx.object}  model {cx.model}  NOT LINEARIZABLE"]
    if cx.seed is not None:
        lines.append(f"reproduce with seed {cx.seed}")
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


def render_txn_text(result: TxnResult, *, seed: int | None = None) -> str:
    """A transactional verdict as text: each anomaly with its evidence in words."""
    if result.ok:
        return f"history {result.history}: no transactional anomaly ({result.txns} txns, {result.messages} messages)"
    lines = [
        f"history {result.history}: TRANSACTIONAL ANOMALIES "
        + ", ".join(f"{name} x{count}" for name, count in sorted(result.counts.items()))
    ]
    if seed is not None:
        lines.append(f"reproduce with seed {seed}")
    for anomaly in result.anomalies:
        lines.append(f"  - {anomaly}")
    cut = sum(result.counts.values()) - len(result.anomalies)
    if cut > 0:
        lines.append(f"  ... {cut} more not listed")
    return "\n".join(lines)


# --- HTML ------------------------------------------------------------------------------------------

_CSS = """
body{font:13px system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:16px} .note{color:#555;margin:4px 0}
svg{border:1px solid #ccc;background:#fafafa}
rect.op{stroke:#666;stroke-width:1}
rect.ok{fill:#cfe8cf} rect.fail{fill:#eee} rect.info{fill:#fff;stroke-dasharray:4 3}
rect.core{stroke:#c00;stroke-width:2} rect.blocked{fill:#f4a6a6;stroke:#c00;stroke-width:3}
rect.weak{opacity:.45} text{font-size:11px;pointer-events:none}
table{border-collapse:collapse;margin-top:12px} td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
"""


def render_html(
    ops: Sequence[Operation],
    *,
    title: str,
    descriptions: dict[int, str] | None = None,
    core: Sequence[int] = (),
    prefix: Sequence[int] = (),
    blocked: int | None = None,
    notes: Sequence[str] = (),
    max_ops: int = MAX_HTML_OPS,
    max_bytes: int = MAX_HTML_BYTES,
) -> str:
    """A self-contained HTML timeline: one lane per process, one box per operation.

    Boxes: green ok, grey fail, dashed open-ended info; red outline = in the failing core; red fill
    = the op that cannot be placed; the number in a box is its place in the linearizable prefix.
    Hover a box for its details.  At most ``max_ops`` boxes (nearest to the blocked op or to the
    core) and ``max_bytes`` bytes.
    """
    descriptions = descriptions or {}
    core_set, order = set(core), {index: k + 1 for k, index in enumerate(prefix)}
    chosen = list(ops)
    omitted = 0
    if len(chosen) > max_ops:
        focus = [op for op in ops if op.index == blocked or op.index in core_set] or list(ops[:1])
        centre = sum(op.invoked_at for op in focus) / len(focus)
        chosen = sorted(sorted(ops, key=lambda op: abs(op.invoked_at - centre))[:max_ops], key=lambda op: op.index)
        omitted = len(ops) - len(chosen)
    processes = sorted({op.process for op in chosen})
    lane = {p: i for i, p in enumerate(processes)}
    start = min((op.invoked_at for op in chosen), default=0)
    finish = max((op.completed_at if op.completed_at is not None else op.invoked_at for op in chosen), default=1)
    span = max(finish - start, 1)
    width, left, row_h = 1100, 70, 26
    scale = (width - left - 40) / span
    height = row_h * len(processes) + 30
    parts = [f'<svg width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for p, i in lane.items():
        parts.append(f'<text x="4" y="{i * row_h + 20}">proc {p}</text>')
    budget = max_bytes - 4000
    used = sum(len(p) for p in parts)
    for drawn, op in enumerate(chosen):
        x = left + (op.invoked_at - start) * scale
        end = width - 10 if op.type.indeterminate else left + ((op.completed_at or op.invoked_at) - start) * scale
        w = max(end - x, 4)
        y = lane[op.process] * row_h + 6
        classes = ["op", "ok" if op.type is OpType.OK else "fail" if op.type is OpType.FAIL else "info"]
        if op.index in core_set:
            classes.append("core")
        elif core_set:
            classes.append("weak")
        if op.index == blocked:
            classes.append("blocked")
        text = descriptions.get(op.index, f"{op.f} {op.value}")
        tip = (
            f"op {op.index} process {op.process} {op.type.value} [{op.invoked_at}, "
            f"{'∞' if op.type.indeterminate else op.completed_at}] {text}"
            + (f" error {op.error}" if op.error else "")
            + (f" (#{order[op.index]} linearized)" if op.index in order else "")
        )
        label = (f"{order[op.index]}: " if op.index in order else "") + text
        label = label if len(label) * 6 < w else label[: max(int(w / 6) - 1, 0)]
        piece = (
            f'<g><title>{html.escape(tip)}</title><rect class="{" ".join(classes)}" x="{x:.1f}" y="{y}" '
            f'width="{w:.1f}" height="{row_h - 8}" rx="3"/><text x="{x + 3:.1f}" y="{y + 13}">'
            f"{html.escape(label)}</text></g>"
        )
        if used + len(piece) > budget:
            omitted += len(chosen) - drawn
            break
        parts.append(piece)
        used += len(piece)
    parts.append("</svg>")
    all_notes = list(notes)
    if omitted:
        all_notes.append(f"{omitted} operations not drawn (size cap: {max_ops} ops, {max_bytes} bytes)")
    body = "".join(f'<p class="note">{html.escape(n)}</p>' for n in all_notes)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>{body}{''.join(parts)}"
        f"<p class='note'>green ok · grey fail · dashed: outcome unknown (open-ended) · red outline: failing "
        f"core · red fill: cannot be placed · n: position in the linearizable prefix</p></body></html>"
    )


def counterexample_html(cx: Counterexample, **caps: int) -> str:
    notes = [cx.reason] + ([f"reproduce with seed {cx.seed}"] if cx.seed is not None else [])
    notes.append(f"state after the prefix: {cx.state_after}")
    return render_html(
        cx.ops,
        title=f"{cx.history} · {cx.object} · not linearizable ({cx.model})",
        descriptions=cx.descriptions,
        core=cx.core,
        prefix=cx.prefix,
        blocked=cx.blocked,
        notes=notes,
        **caps,
    )


def txn_html(
    result: TxnResult,
    ops: Sequence[Operation],
    *,
    seed: int | None = None,
    max_ops: int = MAX_HTML_OPS,
    max_bytes: int = MAX_HTML_BYTES,
) -> str:
    """A transactional verdict as a timeline: the evidence of every listed anomaly outlined in red."""
    evidence = sorted({index for anomaly in result.anomalies for index in anomaly.ops})
    notes = [str(anomaly) for anomaly in result.anomalies[:20]]
    if seed is not None:
        notes.insert(0, f"reproduce with seed {seed}")
    descriptions = {
        op.index: f"{op.f} {op.object.split(':', 1)[0]} {op.value}"
        + (f" -> {op.result}" if op.result is not None else "")
        for op in ops
    }
    return render_html(
        ops,
        title=f"{result.history} · transactional anomalies",
        descriptions=descriptions,
        core=evidence,
        notes=notes,
        max_ops=max_ops,
        max_bytes=max_bytes,
    )
