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
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from invariants.client_visible import LIVENESS as ORACLE_LIVENESS
from invariants.client_visible import TABLE as ORACLE_TABLE
from invariants.explain import ANOMALY_RULES, Counterexample
from invariants.transactional import LIVENESS, TxnResult
from invariants.verify import DeliveryExplanation, TxnExplanation, VerdictRow
from spec.history import Operation
from views.linearizability import linearizability_page
from views.page import Caps
from views.transactional import transactional_page

__all__ = [
    "MAX_HTML_BYTES",
    "MAX_HTML_OPS",
    "VERIFY_HTML_BYTES",
    "anomaly_lines",
    "counterexample_html",
    "counterexample_stem",
    "delivery_html",
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


def render_txn_text(
    result: TxnResult,
    *,
    seed: int | None = None,
    reproduce: str | None = None,
    title: str = "TRANSACTIONAL ANOMALIES",
) -> str:
    """A history's Elle-style anomalies as text (:func:`anomaly_lines`)."""
    if result.ok:
        return f"history {result.history}: no transactional anomaly ({result.txns} txns, {result.messages} messages)"
    lines = [_headline(result.history, title, result.counts, LIVENESS)]
    lines += reproduce_lines(seed, reproduce)
    if result.legend:
        lines.append(result.legend)
    lines += anomaly_lines(result.anomalies, result.counts, LIVENESS)
    lines += informational_lines(result)
    return "\n".join(lines)


def informational_lines(result: TxnResult | None) -> list[str]:
    """Jepsen's informational anomalies (:mod:`invariants.queue`): counted and shown, never failing
    the history."""
    if result is None or not result.notes:
        return []
    return ["  informational: " + ", ".join(f"{name} x{n}" for name, n in sorted(result.notes.items()))]


def _headline(history: str, title: str, counts: Mapping[str, int], liveness: Collection[str]) -> str:
    """``history h: DELIVERY ANOMALIES: 3 safety (illegal), 791 liveness (late)``."""
    safety = sum(n for name, n in counts.items() if name not in liveness)
    late = sum(n for name, n in counts.items() if name in liveness)
    parts = ([f"{safety} safety (illegal)"] if safety else []) + ([f"{late} liveness (late)"] if late else [])
    return f"history {history}: {title}: {', '.join(parts)}"


def anomaly_lines(found: Sequence[Any], counts: Mapping[str, int], liveness: Collection[str]) -> list[str]:
    """Anomalies (or violations) grouped by kind, the safety ones first, then by the object each is
    about: a line per kind with its count, then one line per anomaly kept in full, ``object  ops
    [...]: explanation``; every kind says how many it counted but did not list."""
    lines: list[str] = []
    kinds = sorted(counts, key=lambda name: (name in liveness, name))
    for name in kinds:
        mine = sorted((f for f in found if f.name == name), key=lambda f: (f.where or "", f.ops))
        rules = getattr(mine[0], "rules", ()) if mine else ()
        adya = getattr(mine[0], "adya", None) if mine else None
        tags = [t for t in (adya, ", ".join(rules)) if t]
        kind = "liveness: a bound missed" if name in liveness else "safety"
        tagged = f" ({'; '.join(tags)})" if tags else ""
        lines.append(f"{name}{tagged} x{counts[name]} [{kind}]")
        width = max((len(f.where or "") for f in mine), default=0)
        for f in mine:
            where = f"{f.where or '':<{width}}  " if width else ""
            lines.append(f"  {where}ops {list(f.ops)}: {f.explanation}")
        if counts[name] > len(mine):
            lines.append(f"  ... {counts[name] - len(mine)} more {name} not listed")
    return lines


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


def delivery_html(
    explanation: DeliveryExplanation, *, max_ops: int = MAX_HTML_OPS, max_bytes: int = MAX_HTML_BYTES
) -> str:
    """A history's delivery anomalies and violations as an interactive page
    (:func:`views.transactional.transactional_page`, each with the rule it breaks)."""
    elle = explanation.anomalies
    oracle = explanation.result
    informational = elle.informational if elle is not None else ()
    rules: dict[str, tuple[Sequence[str], str]] = dict(ANOMALY_RULES)
    rules.update({row.name: (row.rules, row.observed) for row in ORACLE_TABLE})
    return transactional_page(
        history=explanation.history,
        seed=explanation.seed,
        reproduce=explanation.reproduce,
        ops=explanation.ops,
        anomalies=[*(elle.anomalies if elle is not None else ()), *oracle.violations, *informational],
        counts={**(elle.counts if elle is not None else {}), **oracle.counts},
        rules=rules,
        caps=Caps(max_ops=max_ops, max_bytes=max_bytes),
        badge="DELIVERY ANOMALIES",
    )


def counterexample_stem(row: VerdictRow) -> str:
    """The name a verdict's counterexample goes by: its text and page files are ``<stem>.txt`` and
    ``<stem>.html`` (:mod:`runners.verdicts`), the index links them and the report points at them.

    A history id may be anything, of any length: characters a file name should not hold become
    ``_``, and a name longer than :data:`MAX_STEM` keeps its start and ends with a digest of the whole
    id (two long ids that share a start still get two files), within every file system's limit of
    255 bytes a name."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in row.history)
    if len(safe) + len(row.checker) + 1 > MAX_STEM:
        import hashlib

        digest = hashlib.sha256(row.history.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        safe = f"{safe[: MAX_STEM - len(row.checker) - 19]}--{digest}"
    return f"{safe}.{row.checker}"


MAX_STEM = 160  # characters (ASCII) of a counterexample file's name before its suffix


def delivery_text(explanation: DeliveryExplanation) -> str:
    """A history's delivery verdict as text: the Elle-style delivery anomalies and the delivery
    oracle's violations, grouped by kind and object (:func:`anomaly_lines`)."""
    oracle = explanation.result
    elle = explanation.anomalies
    counts = {**(elle.counts if elle is not None else {}), **oracle.counts}
    liveness = LIVENESS | ORACLE_LIVENESS
    lines = [_headline(explanation.history, "DELIVERY ANOMALIES", counts, liveness)]
    lines += reproduce_lines(explanation.seed, explanation.reproduce)
    legend = oracle.legend or (elle.legend if elle is not None else "")
    if legend:
        lines.append(legend)
    found: list[Any] = [*(elle.anomalies if elle is not None else ()), *oracle.violations]
    lines += anomaly_lines(found, counts, liveness)
    lines += informational_lines(elle)
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
            if found.page:
                page = delivery_html(found, max_bytes=VERIFY_HTML_BYTES)
        out.append(dataclasses.replace(row, counterexample=text, html=page, explanation=None))
    return out
