"""Verdicts people read: counterexamples as text and as interactive pages, rendered from the data the
checkers return (:mod:`invariants.explain`, :mod:`invariants.transactional`,
:mod:`invariants.client_visible`).

:func:`render_text` prints a linearizability counterexample; :func:`counterexample_html` makes its
page of :mod:`views.linearizability` (a time axis, one lane per process, the core and the blocked operation
called out, and a stepper through the longest partial linearizations with the model's state at
each step), capped in size.  :func:`txn_html` does the same for a history's transactional
anomalies; :func:`rendered` turns a checker's verdict row, explanation and all, into the row that
is written and shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from invariants.explain import ANOMALY_RULES, Counterexample
from invariants.transactional import TxnResult
from invariants.verify import DeliveryExplanation, TxnExplanation, VerdictRow
from spec.history import Operation
from views.linearizability import linearizability_page
from views.page import Caps
from views.transactional import transactional_page

__all__ = [
    "MAX_HTML_BYTES",
    "MAX_HTML_OPS",
    "VERIFY_HTML_BYTES",
    "counterexample_html",
    "counterexample_stem",
    "delivery_text",
    "render_text",
    "render_txn_text",
    "rendered",
    "reproduce_lines",
    "txn_html",
]

MAX_HTML_OPS = 400
MAX_HTML_BYTES = 1_000_000
VERIFY_HTML_BYTES = 300_000  # a page of ``txnmodel verify``: one per failed check, so smaller


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
    if result.notes:  # reported, never failing the history (invariants.queue)
        lines.append("  informational: " + ", ".join(f"{name} x{n}" for name, n in sorted(result.notes.items())))
    return "\n".join(lines)


def counterexample_html(cx: Counterexample, *, max_ops: int = MAX_HTML_OPS, max_bytes: int = MAX_HTML_BYTES) -> str:
    """The interactive page of a counterexample (:func:`views.linearizability.linearizability_page`)."""
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
    (:func:`views.transactional.transactional_page`)."""
    return transactional_page(
        history=result.history,
        seed=seed,
        reproduce=reproduce,
        ops=ops,
        anomalies=(*result.anomalies, *result.informational),
        counts=result.counts,
        rules=ANOMALY_RULES,
        caps=Caps(max_ops=max_ops, max_bytes=max_bytes),
    )


def counterexample_stem(row: VerdictRow) -> str:
    """The name a verdict's counterexample goes by: its text and page files are ``<stem>.txt`` and
    ``<stem>.html`` (:mod:`runners.verdicts`), the index links them and the report points at them."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{row.history}.{row.checker}")


def delivery_text(explanation: DeliveryExplanation) -> str:
    """A history's delivery violations as text, one per line."""
    found = explanation.result
    lines = [f"history {explanation.history}: delivery violations {dict(sorted(found.counts.items()))}"]
    lines += [f"  {v}" for v in found.violations]
    lines += reproduce_lines(explanation.seed, explanation.reproduce)
    return "\n".join(lines)


def rendered(rows: Iterable[VerdictRow]) -> list[VerdictRow]:
    """The rows as written and shown: each explanation rendered to its text and, where one is
    wanted, its page, and dropped."""
    out = []
    for row in rows:
        found = row.explanation
        if found is None:
            out.append(row)
            continue
        text, page = None, None
        if isinstance(found, Counterexample):
            text, page = render_text(found), counterexample_html(found, max_bytes=VERIFY_HTML_BYTES)
        elif isinstance(found, TxnExplanation):
            text = render_txn_text(found.result, seed=found.seed, reproduce=found.reproduce)
            if found.page:
                page = txn_html(
                    found.result, found.ops, seed=found.seed, max_bytes=VERIFY_HTML_BYTES, reproduce=found.reproduce
                )
        else:
            text = delivery_text(found)
        out.append(dataclasses.replace(row, counterexample=text, html=page, explanation=None))
    return out
