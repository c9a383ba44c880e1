"""The page of a history's transactional anomalies (the shell, caps and timeline: :mod:`views.page`).

Each anomaly with its name, its Adya class, the rule it breaks, the checker's explanation, the
operations involved in words (:func:`txn_op_words`), and the dependency cycle drawn where there is
one; the client operations on a timeline, those of the selected anomaly highlighted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from invariants.readable import short
from spec.history import Operation, OpType, parse_object
from views.page import (
    DEFAULT_CAPS,
    Caps,
    choose_ops,
    clip,
    esc,
    footer_html,
    interval,
    legend_html,
    notes_html,
    op_data,
    page_html,
    reproduce_html,
    timeline_svg,
    too_big_page,
)

__all__ = ["transactional_page", "txn_op_words"]


def _short_object(obj: str) -> str:
    try:
        kind, name = parse_object(obj)
    except ValueError:
        return obj
    name = name.rsplit("/", 1)[-1] if "://" in name else name
    return f"{kind} {name}"


def txn_op_words(op: Operation) -> str:
    """A client operation of the transactional vocabulary in words."""
    args = op.args if isinstance(op.args, dict) else {}
    got = op.returned
    txn = args.get("txn")
    in_txn = f" in txn ({txn[0]},{txn[1]})" if isinstance(txn, list) and len(txn) == 2 else ""
    where = _short_object(op.object)

    def pos(data: Any) -> str:
        if not isinstance(data, dict) or not isinstance(data.get("position"), list):
            return ""
        p = data["position"]
        index = data.get("batch_index")
        return f"{p[0]}:{p[1]}" + (f"#{index}" if index is not None else "")

    if op.f == "send":
        text = f"send {json.dumps(args.get('message'))} to {where}{in_txn}"
        if args.get("deliver_at_ms") is not None:
            text += f", deliver at {args['deliver_at_ms']}"
        if op.type is OpType.OK and got is not None:
            text += f" → at {pos(got)}"
    elif op.f == "receive":
        if op.type is OpType.OK:
            text = (
                f"receive on {where}: nothing"
                if got is None
                else f"receive on {where} → {json.dumps(got.get('message'))} at {pos(got)}"
                + (f" (redelivery {got['redelivery_count']})" if got.get("redelivery_count") else "")
            )
        else:
            text = f"receive on {where}"
    elif op.f in ("ack", "ack_cumulative"):
        kind = "cumulative ack" if op.f == "ack_cumulative" else "ack"
        text = f"{kind} of {pos(args)} on {where}{in_txn}"
    elif op.f in ("commit", "abort"):
        text = f"{op.f} txn ({txn[0]},{txn[1]})" if isinstance(txn, list) and len(txn) == 2 else op.f
    elif op.f == "new_txn":
        text = "open a transaction" + (
            f" → ({got[0]},{got[1]})"
            if isinstance(got, list) and len(got) == 2
            else (f" → {short(got)}" if got else "")
        )
    elif op.f == "subscribe":
        text = f"subscribe {where}" + (f" ({args['type']})" if args.get("type") else "")
    else:
        shown = short(args) if args else ""
        text = f"{op.f} {where}" + (f" {shown}" if shown and shown != "{}" else "")
    if op.type is OpType.FAIL:
        text += f" ✗ failed{': ' + op.error if op.error else ''}"
    elif op.type.indeterminate:
        text += " (outcome unknown)"
    return text


def _cycle_svg(cycle: Sequence[Sequence[str]]) -> str:
    """A dependency cycle as a ring of transactions with labelled arrows (two nodes side by side)."""
    nodes: list[str] = []
    for a, b, _ in cycle:
        for node in (a, b):
            if node not in nodes:
                nodes.append(node)
    count = len(nodes)
    radius = 90 + 24 * count
    label_room = 300
    width = 2 * radius + 2 * label_room
    height = 220 if count == 2 else 2 * radius + 120  # two nodes sit on one line
    cx, cy = width / 2, height / 2
    # the first node on the left, then clockwise: a 2-cycle is drawn left to right, its labels above and below
    where = {
        node: (cx - radius * math.cos(2 * math.pi * i / count), cy - radius * math.sin(2 * math.pi * i / count))
        for i, node in enumerate(nodes)
    }
    parts = [
        f'<svg class="cycle" width="{width:.0f}" height="{height:.0f}" xmlns="http://www.w3.org/2000/svg">'
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" class="arrowhead"/></marker></defs>'
    ]
    for a, b, why in cycle:
        (x1, y1), (x2, y2) = where[a], where[b]
        dx, dy = x2 - x1, y2 - y1
        length = math.hypot(dx, dy) or 1.0
        nx, ny = -dy / length, dx / length  # the normal the edge bends towards
        bend = 50.0
        qx, qy = (x1 + x2) / 2 + nx * bend, (y1 + y2) / 2 + ny * bend
        sx, sy = x1 + dx / length * 48, y1 + dy / length * 48
        ex, ey = x2 - dx / length * 48, y2 - dy / length * 48
        # the curve's own midpoint, and its label just outside it
        mx, my = 0.25 * sx + 0.5 * qx + 0.25 * ex, 0.25 * sy + 0.5 * qy + 0.25 * ey
        lx, ly = mx + nx * 14, my + ny * 14 + 4
        anchor = "middle" if abs(nx) < 0.35 else ("start" if nx > 0 else "end")
        parts.append(
            f'<path class="edge" d="M{sx:.1f},{sy:.1f} Q{qx:.1f},{qy:.1f} {ex:.1f},{ey:.1f}" marker-end="url(#arrow)"/>'
            f'<text class="edge-label" x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">{esc(clip(why, 70))}</text>'
        )
    for node, (x, y) in where.items():
        parts.append(
            f'<ellipse class="node" cx="{x:.1f}" cy="{y:.1f}" rx="46" ry="20"/>'
            f'<text class="node-label" x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle">{esc(node)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def transactional_page(
    *,
    history: str,
    seed: int | None,
    ops: Sequence[Operation],
    anomalies: Sequence[Any],
    counts: Mapping[str, int],
    rules: Mapping[str, tuple[Sequence[str], str]],
    caps: Caps = DEFAULT_CAPS,
    reproduce: str | None = None,
    badge: str = "TRANSACTIONAL ANOMALIES",
) -> str:
    """The page of one history's transactional anomalies (see the module docstring), or of any
    checker's whose findings have a name, operations and an explanation (``badge`` names them:
    ``DELIVERY ANOMALIES``).

    ``anomalies`` are :class:`invariants.transactional.Anomaly` values (or delivery oracle
    violations); ``rules`` maps an anomaly name to the rule ids it breaks and the rule in words.
    """
    by_index = {op.index: op for op in ops}
    shown = list(anomalies[: caps.max_anomalies])
    evidence = {i for a in shown for i in a.ops}
    chosen, omitted = choose_ops(ops, evidence, caps.max_ops)
    words = {op.index: txn_op_words(op) for op in ops}
    notes = []
    total = sum(counts.values())
    if total > len(shown):
        notes.append(
            f"{total - len(shown)} anomalies are counted but not listed (the checker keeps a few of each kind in "
            f"full; the page lists at most {caps.max_anomalies})."
        )
    if omitted:
        notes.append(
            f"Capped: {len(chosen)} of {len(ops)} operations drawn on the timeline (those nearest the evidence); "
            f"{omitted} left out (cap {caps.max_ops} operations)."
        )
    cards = [
        _anomaly_card(number, anomaly, rules.get(anomaly.name, ((), "")), by_index, words)
        for number, anomaly in enumerate(shown)
    ]
    classes = {op.index: (["evidence"] if op.index in evidence else ["weak"]) for op in ops}
    svg = timeline_svg(chosen, words, classes, lane_name=lambda p: f"client {p}")
    counted = ", ".join(f"{name} ×{n}" for name, n in sorted(counts.items()))
    title = f"{history} · {badge.lower()}"
    legend = legend_html(_TRANSACTIONAL_LEGEND)
    body = (
        f"<header><h1>{esc(title)}</h1></header>{notes_html(notes)}"
        f"<p class='verdict bad'>{esc(badge)}</p><p>{esc(counted)}"
        + "."
        + reproduce_html(seed, reproduce)
        + f"</p><section id='anomalies'>{''.join(cards)}</section>"
        f"<section id='timeline-panel'><h2>Client operations</h2>{legend}<p class='note'>One lane per client; the "
        "axis is in event order (one column per recorded instant, labelled with it). Click an operation for its "
        f"details.</p><div class='scroll'>{svg}</div></section>"
        "<section id='details-panel'><h2>Operation</h2><div id='details'><p class='note'>Click an operation."
        f"</p></div></section>{footer_html()}"
    )
    data = {
        "kind": "transactional",
        "ops": [op_data(op, words[op.index]) for op in chosen],
        "anomalies": [{"name": a.name, "ops": list(a.ops)} for a in shown],
    }
    page = page_html(title, body, data, kind="transactional")
    if len(page.encode()) > caps.max_bytes:
        if caps.max_ops <= 20 and caps.max_anomalies <= 5:
            return too_big_page(title, counted, caps.max_bytes)
        smaller = Caps(
            max_ops=max(20, caps.max_ops // 2),
            max_anomalies=max(5, caps.max_anomalies // 2),
            max_bytes=caps.max_bytes,
        )
        return transactional_page(
            history=history,
            seed=seed,
            ops=ops,
            anomalies=anomalies,
            counts=counts,
            rules=rules,
            caps=smaller,
            reproduce=reproduce,
            badge=badge,
        )
    return page


_TRANSACTIONAL_LEGEND = [
    ("ok", "ok"),
    ("fail", "failed"),
    ("info", "outcome unknown (dashed)"),
    ("ok evidence", "evidence of an anomaly"),
    ("ok evidence focus", "evidence of the selected anomaly"),
]


def _anomaly_card(
    number: int,
    anomaly: Any,
    rule: tuple[Sequence[str], str],
    by_index: Mapping[int, Operation],
    words: Mapping[int, str],
) -> str:
    """One anomaly's card: its name and Adya class, the rule it breaks (ids and words), the
    checker's explanation, the operations involved in words, and its dependency cycle drawn."""
    ids, rule_text = rule
    adya = f" <span class='adya'>{esc(anomaly.adya)}</span>" if getattr(anomaly, "adya", None) else ""
    rule_ids = ", ".join(f"<code>{esc(r)}</code>" for r in ids)
    items = "".join(
        f"<li><a href='#' data-show-op='{i}'>#{i}</a> "
        + (
            f"process {by_index[i].process}, {esc(interval(by_index[i]))}: {esc(words[i])}"
            if i in by_index
            else "(not in this history)"
        )
        + "</li>"
        for i in anomaly.ops
    )
    cycle = getattr(anomaly, "cycle", ())
    drawing = (
        f"<div class='cycle-box'><p><b>Dependency cycle</b> (an arrow: the target consumed what the source "
        f"produced, so the source committed first):</p>{_cycle_svg(cycle)}</div>"
        if cycle
        else ""
    )
    return (
        f"<article class='anomaly' id='anomaly-{number}' data-ops='{','.join(map(str, anomaly.ops))}'>"
        f"<h3>{esc(anomaly.name)}{adya}</h3>"
        f"<p class='rule'><b>Breaks</b> {rule_ids}{': ' if rule_ids else ''}{esc(rule_text)}</p>"
        f"<p>{esc(anomaly.explanation)}</p><p><b>Operations involved</b></p><ul>{items}</ul>{drawing}"
        f"<button class='show-anomaly' data-anomaly='{number}'>show on the timeline</button></article>"
    )
