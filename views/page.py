"""The counterexample viewer: one self-contained, interactive HTML page per counterexample.

Pages are plain strings built here (pure: no I/O); :mod:`txnmodel` writes them.  A page holds its
own CSS, its own script (:data:`_SCRIPT`, written for this project: no third-party code) and its
data as JSON, and loads nothing from anywhere.  What it shows is drawn in SVG by Python, so every
label is in the page even with scripts off; the script adds the interaction:

* **linearizability** (:func:`linearizability_page`): a time axis, one lane per process, every
  operation a labelled bar; the failing core outlined, the operation that cannot be placed filled
  red and called out, with its return marked on the axis.  A stepper walks through the longest
  partial linearizations (the checker's own, and the other longest ones a bounded search finds)
  one operation at a time, numbering the placed operations and showing the model's state after
  each step, the rows the step changed highlighted; after the last step it says which operations
  could come next and why the model refuses each.  Click an operation for its details.
* **transactional** (:func:`transactional_page`): each anomaly with its name, its Adya class, the
  rule it breaks, the checker's explanation, the operations involved in words, and the
  dependency cycle drawn where there is one; the client operations on a timeline.
* **trace** (:func:`trace_page`): a model checker's counterexample trace, step by step, each
  component's state change highlighted (the shape is :mod:`proofs.check.trace_format`).
* **index** (:func:`index_page`): every verdict of a ``verify`` run, linking each counterexample.

Every page is capped: at most ``max_ops`` operations drawn (those nearest the failure), at most
``max_steps`` steps of each linearization, at most ``max_state_rows`` rows of a state, and never
more than ``max_bytes`` bytes (Porcupine's users have met gigabyte pages).  A capped page says on
its face what it left out.
"""

from __future__ import annotations

import html
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from invariants.explain import Linearization
from invariants.readable import Row, diff_rows, short
from invariants.verify import Outcome
from spec.history import Operation, OpType, parse_object

__all__ = [
    "MAX_BYTES",
    "MAX_OPS",
    "MAX_STATE_ROWS",
    "MAX_STEPS",
    "Caps",
    "Linearization",
    "encode_states",
    "index_page",
    "linearizability_page",
    "trace_page",
    "transactional_page",
    "txn_op_words",
]

MAX_OPS = 400
MAX_STEPS = 300
MAX_STATE_ROWS = 400
MAX_BYTES = 2_000_000


@dataclass(frozen=True)
class Caps:
    """What a page may hold; a page that hits one says so."""

    max_ops: int = MAX_OPS
    max_steps: int = MAX_STEPS
    max_state_rows: int = MAX_STATE_ROWS
    max_bytes: int = MAX_BYTES
    max_anomalies: int = 60
    max_index_rows: int = 5000


# --- pieces shared by every page ----------------------------------------------------------------


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _json_script(data: Any) -> str:
    # "<" escaped so the data can never close its script element
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    return f'<script type="application/json" id="viewer-data">{text}</script>'


def _page(title: str, body: str, data: Any, *, kind: str) -> str:
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head>"
        f"<body data-kind='{kind}'>{body}{_json_script(data)}<script>{_SCRIPT}</script></body></html>\n"
    )


def _short_object(obj: str) -> str:
    try:
        kind, name = parse_object(obj)
    except ValueError:
        return obj
    name = name.rsplit("/", 1)[-1] if "://" in name else name
    return f"{kind} {name}"


def _interval(op: Operation) -> str:
    end = "∞ (outcome unknown)" if op.type.indeterminate else str(op.completed_at)
    return f"[{op.invoked_at}, {end}]"


def _op_data(op: Operation, words: str, roles: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "i": op.index,
        "p": op.process,
        "t": op.type.value,
        "f": op.f,
        "obj": op.object,
        "call": op.invoked_at,
        "ret": None if op.type.indeterminate else op.completed_at,
        "d": words,
        "v": _cut(op.value, 600),
        "r": None if op.result is None else _cut(op.result, 600),
        "e": op.error,
        "roles": list(roles),
    }


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _choose(ops: Sequence[Operation], focus: Iterable[int], limit: int) -> tuple[list[Operation], int]:
    """At most ``limit`` operations, those nearest in time to the ``focus`` ones (always kept)."""
    if len(ops) <= limit:
        return list(ops), 0
    wanted = set(focus)
    anchors = [op for op in ops if op.index in wanted] or list(ops[:1])
    centre = sum(op.invoked_at for op in anchors) / len(anchors)
    kept = {op.index for op in anchors[:limit]}
    for op in sorted(ops, key=lambda o: abs(o.invoked_at - centre)):
        if len(kept) >= limit:
            break
        kept.add(op.index)
    chosen = [op for op in ops if op.index in kept]
    return chosen, len(ops) - len(chosen)


# --- the timeline -------------------------------------------------------------------------------

_CHAR_W = 6.6  # px per character of the 11px label font (an estimate; labels get room to spare)
_ROW_H = 36
_LEFT = 96
_AXIS_H = 34


def _timeline(
    ops: Sequence[Operation],
    labels: Mapping[int, str],
    classes: Mapping[int, Sequence[str]],
    *,
    callouts: Mapping[int, str] | None = None,
    marks: Sequence[tuple[int, str]] = (),
    lane_name: Callable[[int], str] = lambda p: f"process {p}",
) -> str:
    """An SVG of ``ops``: one lane per process, one labelled bar per operation, a time axis.

    The axis is in event order: one column per distinct recorded instant, labelled with the
    instant, so that concurrency stays visible however the times are spread.  An operation spans
    the columns from its call to its return; one whose outcome is unknown runs to the end of the
    axis, dashed.  Labels never overlap: an operation whose label is wider than its bar takes the
    room after it, and a lane grows a row when two would collide.
    """
    callouts = callouts or {}
    instants = sorted({op.invoked_at for op in ops} | {op.completed_at for op in ops if op.completed_at is not None})
    instants = instants or [0]
    rank = {t: i for i, t in enumerate(instants)}
    unit = max(26.0, min(90.0, 1100.0 / len(instants)))
    axis_end = _LEFT + len(instants) * unit + unit

    def x_of(t: int) -> float:
        return _LEFT + rank[t] * unit

    placed: list[tuple[Operation, float, float, float, str]] = []  # op, x0, x1, extent end, label
    for op in ops:
        x0 = x_of(op.invoked_at) + 3
        x1 = axis_end - 4 if op.type.indeterminate or op.completed_at is None else x_of(op.completed_at) + unit - 3
        label = labels.get(op.index, op.f)
        if op.index in callouts:
            label = f"{callouts[op.index]} — {label}"
        label = _cut(f"#{op.index} {label}", 72)
        extent = max(x1, x0 + len(label) * _CHAR_W + 10)
        placed.append((op, x0, x1, extent, label))
    # one lane per process, rows inside a lane so that no two labels overlap
    lanes: dict[int, list[float]] = {}  # process -> the end of each row
    row_of: dict[int, int] = {}
    for op, x0, _, extent, _ in sorted(placed, key=lambda item: (item[0].process, item[1], item[0].index)):
        ends = lanes.setdefault(op.process, [])
        row = next((r for r, end in enumerate(ends) if end <= x0 - 4), len(ends))
        if row == len(ends):
            ends.append(extent)
        else:
            ends[row] = extent
        row_of[op.index] = row
    processes = sorted(lanes)
    top: dict[int, float] = {}
    y = float(_AXIS_H)
    for process in processes:
        top[process] = y
        y += _ROW_H * len(lanes[process]) + 6
    height = y + 8
    width = max(axis_end, max((extent for *_, extent, _ in placed), default=axis_end)) + 20
    for at, text in marks:
        if at in rank:
            width = max(width, x_of(at) + unit + len(text) * _CHAR_W + 20)
    parts = [
        f'<svg class="timeline" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="timeline">'
    ]
    # the axis: a tick per instant, a label where there is room for one
    every = max(1, math.ceil((max(len(str(t)) for t in instants) * _CHAR_W + 10) / unit))
    parts.append(f'<line class="axis" x1="{_LEFT}" y1="{_AXIS_H - 6}" x2="{axis_end:.1f}" y2="{_AXIS_H - 6}"/>')
    parts.append(f'<text class="axis-title" x="4" y="{_AXIS_H - 10}">time</text>')
    for i, t in enumerate(instants):
        x = _LEFT + i * unit
        parts.append(f'<line class="tick" x1="{x:.1f}" y1="{_AXIS_H - 10}" x2="{x:.1f}" y2="{height - 4:.0f}"/>')
        if i % every == 0:
            parts.append(f'<text class="tick-label" x="{x + 2:.1f}" y="{_AXIS_H - 12}">{t}</text>')
    for process in processes:
        lane_y = top[process]
        lane_h = _ROW_H * len(lanes[process])
        parts.append(
            f'<rect class="lane" x="0" y="{lane_y - 2:.0f}" width="{width:.0f}" height="{lane_h + 4}"/>'
            f'<text class="lane-name" x="4" y="{lane_y + 22:.0f}">{_esc(lane_name(process))}</text>'
        )
    for at, text in marks:
        if at in rank:
            x = x_of(at) + unit - 3
            parts.append(
                f'<line class="mark" x1="{x:.1f}" y1="{_AXIS_H - 8}" x2="{x:.1f}" y2="{height - 4:.0f}"/>'
                f'<text class="mark-label" x="{x + 3:.1f}" y="{height - 6:.0f}">{_esc(text)}</text>'
            )
    for op, x0, x1, _, label in placed:
        oy = top[op.process] + row_of[op.index] * _ROW_H
        names = ["op", op.type.value, *classes.get(op.index, ())]
        open_end = op.type.indeterminate or op.completed_at is None
        tip = f"#{op.index} process {op.process} {op.type.value} {_interval(op)}: {labels.get(op.index, op.f)}"
        parts.append(
            f'<g class="{" ".join(names)}" data-op="{op.index}"><title>{_esc(tip)}</title>'
            f'<rect class="bar" x="{x0:.1f}" y="{oy + 12:.0f}" width="{max(x1 - x0, 6):.1f}" height="18" rx="3"/>'
            + (f'<text class="open" x="{x1 - 10:.1f}" y="{oy + 25:.0f}">?</text>' if open_end else "")
            + f'<text class="ord" x="{x0:.1f}" y="{oy + 10:.0f}"></text>'
            f'<text class="lbl" x="{x0 + 4:.1f}" y="{oy + 25:.0f}">{_esc(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _legend(items: Sequence[tuple[str, str]]) -> str:
    cells = "".join(
        f'<span class="key"><svg width="26" height="14"><g class="op {cls}"><rect class="bar" x="1" y="1" '
        f'width="24" height="12" rx="2"/></g></svg>{_esc(text)}</span>'
        for cls, text in items
    )
    return f'<div class="legend">{cells}</div>'


def _notes(notes: Sequence[str], cls: str = "capped") -> str:
    return "".join(f'<p class="{cls}">{_esc(note)}</p>' for note in notes)


# --- state encoding -------------------------------------------------------------------------------


def encode_states(states: Sequence[Sequence[Row]]) -> dict[str, Any]:
    """States as the page's script reads them: every path once (``paths``, in one order that keeps
    each state's own order), the first state's rows, then each later state as what changed.

    ``{"paths": [...], "base": [[path id, text], ...], "diffs": [{"set": [[id, text]], "del": [id]}]}``.
    """
    order: list[str] = []
    position: dict[str, int] = {}
    for rows in states:
        previous: str | None = None
        for path, _ in rows:
            if path not in position:
                at = 0 if previous is None else order.index(previous) + 1
                order.insert(at, path)
                position = {p: i for i, p in enumerate(order)}
            previous = path
    ids = {path: i for i, path in enumerate(order)}
    base = [[ids[path], text] for path, text in states[0]] if states else []
    diffs = []
    for before, after in itertools.pairwise(states):
        changed, removed = diff_rows(list(before), list(after))
        diffs.append({"set": [[ids[p], t] for p, t in changed], "del": [ids[p] for p in removed]})
    return {"paths": order, "base": base, "diffs": diffs}


# --- linearizability -------------------------------------------------------------------------------


def linearizability_page(
    *,
    history: str,
    obj: str,
    model: str,
    seed: int | None,
    ops: Sequence[Operation],
    descriptions: Mapping[int, str],
    core: Sequence[int],
    ignored: Iterable[int],
    blocked: int | None,
    reason: str,
    state_after: str,
    linearizations: Sequence[Linearization],
    original_ops: int,
    searches: int,
    caps: Caps = Caps(),
    reproduce: str | None = None,
) -> str:
    """The page of one object that is not linearizable (see the module docstring); ``reproduce`` is
    the command that reruns the history (else the seed alone is named)."""
    # A page that would pass max_bytes is rebuilt with smaller caps, down to a floor.
    current = caps
    for _ in range(8):
        page = _linearizability(
            history,
            obj,
            model,
            seed,
            ops,
            descriptions,
            core,
            set(ignored),
            blocked,
            reason,
            state_after,
            linearizations,
            original_ops,
            searches,
            current,
            reproduce,
        )
        if len(page.encode()) <= caps.max_bytes:
            return page
        current = Caps(
            max_ops=max(20, current.max_ops // 2),
            max_steps=max(10, current.max_steps // 2),
            max_state_rows=max(20, current.max_state_rows // 2),
            max_bytes=caps.max_bytes,
        )
    return _too_big(f"{history} · {obj}", reason, caps.max_bytes)


def _too_big(title: str, reason: str, max_bytes: int) -> str:
    body = (
        f"<h1>{_esc(title)}</h1><p class='capped'>This counterexample does not fit in {max_bytes} bytes even at "
        f"the smallest caps; its text form has every detail.</p><p>{_esc(_cut(reason, 2000))}</p>"
    )
    return _page(title, body, {"kind": "none"}, kind="none")


def _linearizability(
    history: str,
    obj: str,
    model: str,
    seed: int | None,
    ops: Sequence[Operation],
    descriptions: Mapping[int, str],
    core: Sequence[int],
    ignored: set[int],
    blocked: int | None,
    reason: str,
    state_after: str,
    linearizations: Sequence[Linearization],
    original_ops: int,
    searches: int,
    caps: Caps,
    reproduce: str | None = None,
) -> str:
    focus = {*core, *([] if blocked is None else [blocked])}
    for lin in linearizations[:1]:
        focus.update(lin.order[-20:])
    chosen, omitted = _choose(ops, focus, caps.max_ops)
    by_index = {op.index: op for op in ops}
    notes: list[str] = []
    if omitted:
        notes.append(
            f"Capped: {len(chosen)} of {len(ops)} operations drawn (those nearest in time to the failure); "
            f"{omitted} left out (cap {caps.max_ops} operations)."
        )
    classes, roles = _op_roles(ops, set(core), ignored, blocked)
    callouts = {blocked: "✖ cannot be placed"} if blocked is not None else {}
    marks: list[tuple[int, str]] = []
    if blocked is not None and blocked in by_index and by_index[blocked].completed_at is not None:
        marks.append((by_index[blocked].completed_at or 0, f"#{blocked} returned: it had to be placed by here"))
    svg = _timeline(chosen, descriptions, classes, callouts=callouts, marks=marks)
    lins_data = _stepper_data(linearizations, caps, notes)
    data = {
        "kind": "linearizability",
        "ops": [_op_data(op, descriptions.get(op.index, op.f), roles.get(op.index, ())) for op in chosen],
        "lins": lins_data,
        "drawn": sorted(op.index for op in chosen),
    }
    title = f"{history} · {obj} · not linearizable ({model})"
    summary = _linearizability_summary(
        history,
        obj,
        model,
        seed,
        by_index.get(blocked) if blocked is not None else None,
        descriptions,
        reason,
        reproduce,
    )
    summary.append(_core_details(core, descriptions, len(ops), original_ops, searches))
    options = "".join(
        f"<option value='{d['n']}'>{d['n'] + 1}: {d['total']} steps"
        f"{' (the checker’s)' if d['source'] == 'checker' else ''}</option>"
        for d in lins_data
    )
    state_panel = (
        "<section id='state-panel'><h2>Model state <span id='state-caption'></span></h2>"
        f"<p class='note'>After the prefix found by the checker: {_esc(_cut(state_after, 400))}</p>"
        "<table id='state'><thead><tr><th>field</th><th>value</th></tr></thead><tbody></tbody></table></section>"
    )
    body = (
        f"<header><h1>{_esc(title)}</h1></header>{_notes(notes)}{''.join(summary)}{_STEPPER.format(options=options)}"
        f"<section id='timeline-panel'><h2>Timeline</h2>{_legend(_LINEARIZABILITY_LEGEND)}"
        "<p class='note'>One lane per process; the axis is in event order (one column per recorded instant, "
        f"labelled with it). Click an operation for its details.</p><div class='scroll'>{svg}</div></section>"
        f"<div class='columns'>{state_panel}<section id='details-panel'><h2>Operation</h2>"
        "<div id='details'><p class='note'>Click an operation.</p></div></section></div>"
        f"{_footer()}"
    )
    return _page(title, body, data, kind="linearizability")


_STEPPER = (
    "<section id='stepper'><h2>Step through the longest partial linearizations</h2>"
    "<div class='controls'>"
    "<label>partial linearization <select id='lin-select'>{options}</select></label> "
    "<button id='step-first' title='first (Home)'>◀◀ first</button>"
    "<button id='step-prev' title='previous (←)'>◀ prev</button>"
    "<input id='step-range' type='range' min='0' max='0' value='0' aria-label='step'>"
    "<button id='step-next' title='next (→)'>next ▶</button>"
    "<button id='step-last' title='last (End)'>last ▶▶</button>"
    "<span id='step-label' class='step-label'></span></div>"
    "<p id='step-end' class='step-end' hidden></p></section>"
)

_LINEARIZABILITY_LEGEND = [
    ("ok", "ok: returned"),
    ("fail", "fail: refused, no effect"),
    ("info", "info: outcome unknown (dashed, open-ended)"),
    ("ok core", "in the failing core"),
    ("ok weak", "output ignored (outside the core)"),
    ("ok blocked", "cannot be placed"),
    ("ok lin", "placed by the current step (number: its place)"),
]


def _op_roles(
    ops: Sequence[Operation], core: set[int], ignored: set[int], blocked: int | None
) -> tuple[dict[int, list[str]], dict[int, list[str]]]:
    """Each operation's CSS classes on the timeline and its roles in words (the details panel)."""
    classes: dict[int, list[str]] = {}
    roles: dict[int, list[str]] = {}
    for op in ops:
        mine: list[str] = []
        if op.index in core:
            mine.append("core")
            roles.setdefault(op.index, []).append("in the failing core: its output is checked")
        elif op.index in ignored:
            mine.append("weak")
            roles.setdefault(op.index, []).append("outside the core: it took effect, its output is not checked")
        if op.index == blocked:
            mine.append("blocked")
            roles.setdefault(op.index, []).insert(0, "cannot be placed: no order fits it before its return")
        classes[op.index] = mine
    return classes, roles


def _stepper_data(linearizations: Sequence[Linearization], caps: Caps, notes: list[str]) -> list[dict[str, Any]]:
    """The stepper's data: each partial linearization's order and states, capped (the caps noted)."""
    lins_data = []
    for number, lin in enumerate(linearizations):
        skip = max(0, len(lin.order) - caps.max_steps)
        states = [tuple(rows[: caps.max_state_rows]) for rows in lin.states[skip:]]
        cut_rows = lin.rows_left + max((max(0, len(rows) - caps.max_state_rows) for rows in lin.states), default=0)
        lins_data.append(
            {
                "n": number,
                "source": lin.source,
                "order": list(lin.order[skip:]),
                "first": skip,
                "total": len(lin.order),
                **encode_states(states),
                "rowsLeft": cut_rows,
                "next": [[i, why] for i, why in lin.next_ops[:12]],
                "blocked": lin.blocked,
            }
        )
        if skip:
            notes.append(
                f"Capped: partial linearization {number + 1} has {len(lin.order)} steps; the first {skip} are not "
                f"stepped through (the page starts from the state after them; cap {caps.max_steps} steps)."
            )
        if cut_rows:
            notes.append(
                f"Capped: states of partial linearization {number + 1} show their first {caps.max_state_rows} rows; "
                f"up to {cut_rows} more rows are left out."
            )
    return lins_data


def _linearizability_summary(
    history: str,
    obj: str,
    model: str,
    seed: int | None,
    blocked_op: Operation | None,
    descriptions: Mapping[int, str],
    reason: str,
    reproduce: str | None = None,
) -> list[str]:
    summary = [
        f"<p class='verdict bad'>NOT LINEARIZABLE</p><p>Object <b>{_esc(obj)}</b> of history <b>{_esc(history)}</b> "
        f"checked against the <b>{_esc(model)}</b> model." + _reproduce_html(seed, reproduce) + "</p>"
    ]
    if blocked_op is not None:
        summary.append(
            f"<p class='blocked-note'>✖ Operation <a href='#' data-show-op='{blocked_op.index}'>"
            f"#{blocked_op.index}</a> (process {blocked_op.process}, {_esc(_interval(blocked_op))}) "
            "<b>cannot be placed</b>: "
            f"{_esc(descriptions.get(blocked_op.index, blocked_op.f))}</p>"
        )
    summary.append(f"<p class='why'><b>Why:</b> {_esc(_cut(reason, 3000))}</p>")
    return summary


def _core_details(
    core: Sequence[int], descriptions: Mapping[int, str], ops: int, original_ops: int, searches: int
) -> str:
    core_items = "".join(
        f"<li><a href='#' data-show-op='{i}'>#{i}</a> {_esc(descriptions.get(i, ''))}</li>" for i in core[:50]
    )
    more_core = f"<li>… {len(core) - 50} more</li>" if len(core) > 50 else ""
    return (
        f"<details{' open' if len(core) <= 12 else ''}><summary>Failing core: {len(core)} operation(s) whose "
        "outputs cannot all be true</summary>"
        f"<ul class='core-list'>{core_items}{more_core}</ul><p class='note'>The history was cut to its shortest "
        f"illegal prefix ({ops} of {original_ops} operations; ones still open at the cut became "
        f"indeterminate), then the outputs of every operation outside the core were ignored — they still took "
        f"effect in their intervals — and it is still not linearizable ({searches} searches).</p></details>"
    )


def _footer() -> str:
    return "<footer>txnmodel counterexample viewer · self-contained: this page loads nothing from the network</footer>"


# --- transactional ---------------------------------------------------------------------------------


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
            f'<text class="edge-label" x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}">{_esc(_cut(why, 70))}</text>'
        )
    for node, (x, y) in where.items():
        parts.append(
            f'<ellipse class="node" cx="{x:.1f}" cy="{y:.1f}" rx="46" ry="20"/>'
            f'<text class="node-label" x="{x:.1f}" y="{y + 4:.1f}" text-anchor="middle">{_esc(node)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _reproduce_html(seed: int | None, reproduce: str | None) -> str:
    """How to rerun the history: the whole command when the file recorded the run, else its seed."""
    if reproduce is not None:
        return f" Reproduce with <code>{_esc(reproduce)}</code>."
    return f" Seed <b>{seed}</b> (the file does not record the run's other options)." if seed is not None else ""


def transactional_page(
    *,
    history: str,
    seed: int | None,
    ops: Sequence[Operation],
    anomalies: Sequence[Any],
    counts: Mapping[str, int],
    rules: Mapping[str, tuple[Sequence[str], str]],
    caps: Caps = Caps(),
    reproduce: str | None = None,
) -> str:
    """The page of one history's transactional anomalies (see the module docstring).

    ``anomalies`` are :class:`invariants.transactional.Anomaly` values; ``rules`` maps an anomaly
    name to the rule ids it breaks and the rule in words.
    """
    by_index = {op.index: op for op in ops}
    shown = list(anomalies[: caps.max_anomalies])
    evidence = {i for a in shown for i in a.ops}
    chosen, omitted = _choose(ops, evidence, caps.max_ops)
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
    cards = []
    for number, anomaly in enumerate(shown):
        ids, rule_text = rules.get(anomaly.name, ((), ""))
        adya = f" <span class='adya'>{_esc(anomaly.adya)}</span>" if getattr(anomaly, "adya", None) else ""
        rule_ids = ", ".join(f"<code>{_esc(r)}</code>" for r in ids)
        items = "".join(
            f"<li><a href='#' data-show-op='{i}'>#{i}</a> "
            + (
                f"process {by_index[i].process}, {_esc(_interval(by_index[i]))}: {_esc(words[i])}"
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
        cards.append(
            f"<article class='anomaly' id='anomaly-{number}' data-ops='{','.join(map(str, anomaly.ops))}'>"
            f"<h3>{_esc(anomaly.name)}{adya}</h3>"
            f"<p class='rule'><b>Breaks</b> {rule_ids}{': ' if rule_ids else ''}{_esc(rule_text)}</p>"
            f"<p>{_esc(anomaly.explanation)}</p><p><b>Operations involved</b></p><ul>{items}</ul>{drawing}"
            f"<button class='show-anomaly' data-anomaly='{number}'>show on the timeline</button></article>"
        )
    classes = {op.index: (["evidence"] if op.index in evidence else ["weak"]) for op in ops}
    svg = _timeline(chosen, words, classes, lane_name=lambda p: f"client {p}")
    counted = ", ".join(f"{name} ×{n}" for name, n in sorted(counts.items()))
    title = f"{history} · transactional anomalies"
    legend = _legend(
        [
            ("ok", "ok"),
            ("fail", "failed"),
            ("info", "outcome unknown (dashed)"),
            ("ok evidence", "evidence of an anomaly"),
            ("ok evidence focus", "evidence of the selected anomaly"),
        ]
    )
    body = (
        f"<header><h1>{_esc(title)}</h1></header>{_notes(notes)}"
        f"<p class='verdict bad'>TRANSACTIONAL ANOMALIES</p><p>{_esc(counted)}"
        + "."
        + _reproduce_html(seed, reproduce)
        + f"</p><section id='anomalies'>{''.join(cards)}</section>"
        f"<section id='timeline-panel'><h2>Client operations</h2>{legend}<p class='note'>One lane per client; the "
        "axis is in event order (one column per recorded instant, labelled with it). Click an operation for its "
        f"details.</p><div class='scroll'>{svg}</div></section>"
        "<section id='details-panel'><h2>Operation</h2><div id='details'><p class='note'>Click an operation."
        f"</p></div></section>{_footer()}"
    )
    data = {
        "kind": "transactional",
        "ops": [_op_data(op, words[op.index]) for op in chosen],
        "anomalies": [{"name": a.name, "ops": list(a.ops)} for a in shown],
    }
    page = _page(title, body, data, kind="transactional")
    if len(page.encode()) > caps.max_bytes:
        if caps.max_ops <= 20 and caps.max_anomalies <= 5:
            return _too_big(title, counted, caps.max_bytes)
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
        )
    return page


# --- model-checking traces ----------------------------------------------------------------------------


def trace_page(trace: Any, *, caps: Caps = Caps()) -> str:
    """A model checker's counterexample (an :class:`proofs.check.trace_format.Trace`), step by step."""
    from invariants.readable import rows as flatten

    steps = list(trace.steps)
    skip = max(0, len(steps) - caps.max_steps)
    shown = steps[skip:]
    notes = []
    if skip:
        notes.append(
            f"Capped: the trace has {len(steps)} steps; the first {skip} are not shown (the page starts from the "
            f"state after them; cap {caps.max_steps} steps)."
        )
    components = list(trace.components)
    base_states = trace.states_before(skip)
    per_component = {}
    cut = 0
    for name in components:
        seq = []
        for states in [base_states, *(step.states for step in shown)]:
            found, left = flatten(states.get(name), max_rows=caps.max_state_rows)
            cut = max(cut, left)
            seq.append(tuple(found))
        per_component[name] = encode_states(seq)
    if cut:
        notes.append(f"Capped: states show their first {caps.max_state_rows} rows; up to {cut} more are left out.")
    changed = [
        [c for c in components if step.states.get(c) != prev.get(c)] for prev, step in _pairs(base_states, shown)
    ]
    chart = _trace_chart(components, shown, changed, skip, trace.loop_from)
    head = [f"<p class='verdict bad'>{_esc(trace.verdict_text)}</p>"]
    if trace.message:
        head.append(f"<p>{_esc(trace.message)}</p>")
    if trace.bounds:
        head.append("<p class='note'>Bounds: " + _esc(", ".join(f"{k}={v}" for k, v in trace.bounds.items())) + "</p>")
    if trace.loop_from is not None:
        head.append(
            f"<p class='note'>A lasso: from step {trace.loop_from + 1} on, the steps repeat forever, and the "
            f"property never holds along the loop.</p>"
        )
    step_items = "".join(
        f"<li data-step='{c + 1}'><a href='#' data-go-step='{c + 1}'><b>{_esc(step.actor)}</b>: {_esc(step.action)}</a>"
        + (f" <span class='changes'>changes {_esc(', '.join(names))}</span>" if names else "")
        + "</li>"
        for c, (step, names) in enumerate(zip(shown, changed, strict=True))
    )
    tables = "".join(
        f"<section class='component' data-component='{_esc(name)}'><h3>{_esc(name)}</h3>"
        "<table class='state'><thead><tr><th>field</th><th>value</th></tr></thead><tbody></tbody></table></section>"
        for name in components
    )
    title = f"{trace.model} · {trace.property_name}"
    body = (
        f"<header><h1>{_esc(title)}</h1></header>{_notes(notes)}{''.join(head)}"
        "<section id='stepper'><h2>Step through the trace</h2><div class='controls'>"
        "<button id='step-first'>◀◀ first</button><button id='step-prev'>◀ prev</button>"
        "<input id='step-range' type='range' min='0' max='0' value='0' aria-label='step'>"
        "<button id='step-next'>next ▶</button><button id='step-last'>last ▶▶</button>"
        "<span id='step-label' class='step-label'></span></div></section>"
        f"<section id='chart-panel'><h2>Steps and the components they change</h2><div class='scroll'>{chart}</div>"
        f"<ol id='trace-steps' start='{skip + 1}'>{step_items}</ol>"
        f"</section><section id='components'><h2>Component states</h2><div class='grid'>{tables}</div></section>"
        f"{_footer()}"
    )
    data = {
        "kind": "trace",
        "first": skip,
        "total": len(steps),
        "loopFrom": trace.loop_from,
        "steps": [{"actor": s.actor, "action": s.action, "changed": c} for s, c in zip(shown, changed, strict=True)],
        "components": {name: per_component[name] for name in components},
    }
    return _page(title, body, data, kind="trace")


def _pairs(base: Mapping[str, Any], steps: Sequence[Any]) -> list[tuple[Mapping[str, Any], Any]]:
    out = []
    previous = base
    for step in steps:
        out.append((previous, step))
        previous = step.states
    return out


def _trace_chart(
    components: Sequence[str], steps: Sequence[Any], changed: Sequence[Sequence[str]], skip: int, loop: int | None
) -> str:
    """One row per component, one column per step: a dot where the step changed the component."""
    col, row, left = 34, 30, 170
    labels = [_cut(f"{skip + c + 1}. {step.actor}: {step.action}", 40) for c, step in enumerate(steps)]
    longest = max((len(label) for label in labels), default=1) * _CHAR_W
    top = int(longest * 0.87) + 16  # the step names are drawn at 60 degrees above the columns
    width = left + col * max(len(steps), 1) + int(longest / 2) + 30
    height = top + row * len(components) + 10
    parts = [f'<svg class="trace-chart" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for r, name in enumerate(components):
        y = top + r * row
        parts.append(
            f'<line class="lane-line" x1="{left}" y1="{y + 15}" x2="{width - 10}" y2="{y + 15}"/>'
            f'<text class="lane-name" x="4" y="{y + 19}">{_esc(_cut(name, 24))}</text>'
        )
    for c, touched in enumerate(changed):
        x = left + c * col
        number = skip + c + 1
        looping = " loop" if loop is not None and number - 1 >= loop else ""
        label = labels[c]
        parts.append(
            f'<g class="step-col{looping}" data-step="{c + 1}"><rect class="col" x="{x}" y="0" width="{col}" '
            f'height="{height}"/><text class="step-name" transform="translate({x + 20},{top - 6}) rotate(-60)">'
            f"{_esc(label)}</text>"
        )
        for name in touched:
            y = top + components.index(name) * row
            parts.append(f'<circle class="dot" cx="{x + col / 2}" cy="{y + 15}" r="7"/>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


# --- the index of a verify run -----------------------------------------------------------------------


def _worst_first(verdict: object) -> int:
    """Where a verdict goes in the index: the worst first, by the one ranking of verdicts
    (:class:`invariants.verify.Outcome`); a spelling it does not know goes last."""
    try:
        return -Outcome(str(verdict)).rank
    except ValueError:
        return 1


def index_page(rows: Sequence[Mapping[str, Any]], *, title: str, notes: Sequence[str] = (), caps: Caps = Caps()) -> str:
    """Every verdict of a run, each counterexample linked (``html`` / ``txt``: paths relative to the
    page).  ``rows`` are verdict dicts: history, checker, verdict, model, objects, ops, seconds,
    failing_object, seed, detail, html, txt."""
    ranked = sorted(rows, key=lambda r: (_worst_first(r.get("verdict")), str(r.get("history")), r.get("checker")))
    shown = ranked[: caps.max_index_rows]
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r.get("verdict"))] = counts.get(str(r.get("verdict")), 0) + 1
    all_notes = list(notes)
    if len(ranked) > len(shown):
        all_notes.append(
            f"Capped: {len(shown)} of {len(ranked)} verdicts listed (the not-ok ones first; cap "
            f"{caps.max_index_rows}); every verdict is in verdicts.parquet."
        )
    lines = []
    for r in shown:
        links = " ".join(
            f"<a class='{kind}' href='{_esc(r[kind])}'>{'viewer' if kind == 'html' else 'text'}</a>"
            for kind in ("html", "txt")
            if r.get(kind)
        )
        verdict = str(r.get("verdict"))
        seconds = r.get("seconds")
        lines.append(
            f"<tr class='v-{_esc(verdict)}'><td>{_esc(r.get('history'))}</td><td>{_esc(r.get('checker'))}</td>"
            f"<td class='verdict-cell'>{_esc(verdict)}</td><td>{_esc(r.get('model') or '')}</td>"
            f"<td class='num'>{_esc(r.get('objects') or 0)}</td><td class='num'>{_esc(r.get('ops') or 0)}</td>"
            f"<td class='num'>{'' if seconds is None else f'{float(seconds):.2f}'}</td>"
            f"<td>{_esc(r.get('failing_object') or '')}</td>"
            f"<td class='num'>{_esc('' if r.get('seed') is None else r['seed'])}</td><td>{links}</td>"
            f"<td class='detail'>{_esc(_cut(_detail_words(r.get('detail')), 300))}</td></tr>"
        )
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda item: _worst_first(item[0])))
    body = (
        f"<header><h1>{_esc(title)}</h1></header>{_notes(all_notes)}<p>{len(rows)} verdicts: {_esc(summary)}.</p>"
        "<div class='controls'><label><input type='checkbox' id='only-bad'> only verdicts that are not ok</label> "
        "<label>filter <input type='search' id='filter' placeholder='history, checker, object…'></label></div>"
        "<table id='verdicts'><thead><tr><th>history</th><th>checker</th><th>verdict</th><th>model</th>"
        "<th>objects</th><th>ops</th><th>seconds</th><th>failing object</th><th>seed</th><th>counterexample</th>"
        f"<th>detail</th></tr></thead><tbody>{''.join(lines)}</tbody></table>{_footer()}"
    )
    return _page(title, body, {"kind": "index"}, kind="index")


def _detail_words(detail: Any) -> str:
    """A verdict's detail for a person: the JSON the checkers store, summarised."""
    text = "" if detail is None else str(detail)
    try:
        data = json.loads(text) if text.startswith("{") else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return text
    if isinstance(data.get("counts"), dict):
        counts = data["counts"]
        return ", ".join(f"{name} ×{n}" for name, n in sorted(counts.items())) or "no anomaly"
    if isinstance(data.get("models"), dict):
        parts = []
        for model, figures in data["models"].items():
            verdicts = figures.get("object_verdicts") or {figures.get("verdict", "?"): figures.get("objects", 0)}
            shown = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))
            parts.append(f"{model}: {figures.get('objects', 0)} objects ({shown})")
        reasons = data.get("reasons") or []
        return "; ".join(parts) + (f"; {reasons[0]}" if reasons else "")
    return text


# --- the page's style and script ------------------------------------------------------------------------

_CSS = """
:root{--ok:#cfe8cf;--fail:#e4e4e4;--info:#fff;--core:#c0392b;--blocked:#f4a6a6;--lin:#9cc9f5;--cur:#1f6fd1;
--ink:#1d1d1f;--muted:#5b5b60;--line:#d0d0d6;--panel:#f7f7f9}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 20px 40px;color:var(--ink)}
header h1{font-size:19px;margin:16px 0 6px}
h2{font-size:16px;margin:18px 0 6px}h3{font-size:15px;margin:4px 0}
.note{color:var(--muted);margin:4px 0}.capped{background:#fff4d6;border:1px solid #e6c35c;padding:6px 10px;
border-radius:4px;margin:6px 0}
.verdict{display:inline-block;font-weight:700;padding:2px 10px;border-radius:3px;margin:6px 0}
.verdict.bad{background:#c0392b;color:#fff}
.blocked-note{background:#fdecea;border-left:4px solid var(--core);padding:6px 10px}
.why{max-width:1100px}
details{margin:8px 0}summary{cursor:pointer;font-weight:600}
.controls{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:6px 0}
.controls button{font:inherit;padding:3px 10px;cursor:pointer}
#step-range{width:320px}
.step-label{font-weight:600}
.step-end{background:#fdecea;border-left:4px solid var(--core);padding:6px 10px;max-width:1100px}
.scroll{overflow:auto;border:1px solid var(--line);background:#fff;max-height:70vh}
svg text{font-size:11px;fill:var(--ink)}
svg .axis{stroke:#888}svg .tick{stroke:#eee}svg .tick-label{fill:var(--muted);font-size:10px}
svg .axis-title{font-weight:700;fill:var(--muted)}
svg .lane{fill:var(--panel);stroke:var(--line)}svg .lane-name{font-weight:600}
svg .mark{stroke:var(--core);stroke-dasharray:5 3;stroke-width:1.5}svg .mark-label{fill:var(--core);font-weight:600}
g.op{cursor:pointer}g.op .bar{stroke:#666;stroke-width:1}
g.op.ok .bar{fill:var(--ok)}g.op.fail .bar{fill:var(--fail)}
g.op.info .bar,g.op.invoke .bar{fill:var(--info);stroke-dasharray:5 3}
g.op.weak{opacity:.5}
g.op.core .bar{stroke:var(--core);stroke-width:2.5}
g.op.blocked .bar{fill:var(--blocked);stroke:var(--core);stroke-width:3}
g.op.blocked .lbl{font-weight:700;fill:#8e1b10}
g.op.evidence .bar{stroke:var(--core);stroke-width:2.5}
g.op.focus .bar{fill:#ffd2cc}g.op.dim{opacity:.25}
g.op.lin{opacity:1}g.op.lin .bar{fill:var(--lin)}
g.op.current .bar{stroke:var(--cur);stroke-width:3}
g.op.next-blocked .bar{fill:var(--blocked);stroke:var(--core);stroke-width:3}
g.op .ord{font-size:10px;font-weight:700;fill:var(--cur)}
g.op.selected .bar{stroke:#000;stroke-width:3}
g.op .open{font-weight:700;fill:var(--muted)}
.legend{display:flex;flex-wrap:wrap;gap:14px;margin:4px 0}.legend .key{display:inline-flex;gap:4px;align-items:center}
.legend svg text{display:none}
.columns{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:20px}
table{border-collapse:collapse}td,th{border:1px solid var(--line);padding:2px 8px;text-align:left;vertical-align:top}
th{background:var(--panel)}td.num{text-align:right}
#state td:first-child,.state td:first-child{font-family:ui-monospace,monospace;font-size:12px;white-space:nowrap}
#state td:last-child,.state td:last-child{font-family:ui-monospace,monospace;font-size:12px;word-break:break-word}
tr.changed td{background:#fff1a8}tr.removed td{text-decoration:line-through;color:#a33}
#details table{width:100%}#details td:first-child{white-space:nowrap;color:var(--muted)}
#details td:last-child{font-family:ui-monospace,monospace;font-size:12px;word-break:break-word}
.anomaly{border:1px solid var(--line);border-left:5px solid var(--core);padding:8px 14px;margin:10px 0;
max-width:1200px;background:#fff}
.anomaly.selected{box-shadow:0 0 0 3px #f3b7ae}
.adya{background:#333;color:#fff;border-radius:3px;padding:0 6px;font-size:12px;margin-left:6px}
.rule code{background:var(--panel);padding:0 4px}
svg.cycle .node{fill:#fdecea;stroke:var(--core);stroke-width:2}svg.cycle .node-label{font-weight:700;font-size:12px}
svg.cycle .edge{fill:none;stroke:#444;stroke-width:1.6}svg.cycle .arrowhead{fill:#444}
svg.cycle .edge-label{font-size:11px;fill:#333}
svg.trace-chart .col{fill:transparent}svg.trace-chart .step-col.current .col{fill:#e3efff}
svg.trace-chart .step-col.loop .col{fill:#fff4d6}svg.trace-chart .dot{fill:var(--cur)}
svg.trace-chart .lane-line{stroke:#ddd}svg.trace-chart .step-col{cursor:pointer}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(420px,1fr));gap:14px}
#verdicts tr.v-ok .verdict-cell{color:#1e7b34}#verdicts tr.v-illegal .verdict-cell,
#verdicts tr.v-error .verdict-cell,#verdicts tr.v-bad-input .verdict-cell{color:#c0392b;font-weight:700}
#verdicts tr.v-unknown .verdict-cell{color:#a06000;font-weight:700}
#verdicts td.detail{max-width:420px;color:var(--muted)}
#trace-steps li.current{background:#e3efff;font-weight:600}#trace-steps .changes{color:var(--muted)}
section.component.touched h3{color:var(--cur)}
footer{margin-top:30px;color:var(--muted);font-size:12px}
"""

_SCRIPT = r"""
"use strict";
(function () {
  var data = JSON.parse(document.getElementById("viewer-data").textContent);
  var byId = function (id) { return document.getElementById(id); };
  var ops = new Map();
  (data.ops || []).forEach(function (o) { ops.set(o.i, o); });
  var groups = new Map();
  document.querySelectorAll("g.op[data-op]").forEach(function (g) { groups.set(Number(g.dataset.op), g); });

  function cell(row, text, tag) {
    var td = document.createElement(tag || "td"); td.textContent = text; row.appendChild(td); return td;
  }
  function showDetails(i) {
    var box = byId("details"); if (!box) return;
    box.replaceChildren();
    groups.forEach(function (g) { g.classList.remove("selected"); });
    var o = ops.get(i);
    if (!o) { box.textContent = "Operation #" + i + " is not drawn on this page (size cap)."; return; }
    var g = groups.get(i); if (g) g.classList.add("selected");
    var table = document.createElement("table"); table.id = "details-table";
    var fields = [["operation", "#" + o.i], ["process", String(o.p)], ["outcome", o.t],
      ["interval", "[" + o.call + ", " + (o.ret === null ? "∞ (outcome unknown)" : o.ret) + "]"],
      ["function", o.f], ["object", o.obj], ["in words", o.d], ["value", o.v]];
    if (o.r !== null) fields.push(["result", o.r]);
    if (o.e) fields.push(["error", o.e]);
    (o.roles || []).forEach(function (r) { fields.push(["role", r]); });
    if (data.kind === "linearizability" && current.lin !== null) {
      var L = data.lins[current.lin], at = L.order.indexOf(i);
      fields.push(["in this linearization", at < 0 ? "not placed" : "step " + (L.first + at + 1)]);
    }
    fields.forEach(function (f) {
      var tr = document.createElement("tr"); cell(tr, f[0]); cell(tr, f[1]); table.appendChild(tr);
    });
    box.appendChild(table);
  }
  groups.forEach(function (g, i) {
    g.setAttribute("tabindex", "0");
    g.addEventListener("click", function () { showDetails(i); });
    g.addEventListener("keydown", function (e) { if (e.key === "Enter") showDetails(i); });
  });
  document.querySelectorAll("[data-show-op]").forEach(function (a) {
    a.addEventListener("click", function (e) {
      e.preventDefault(); var i = Number(a.dataset.showOp); showDetails(i);
      var g = groups.get(i); if (g) g.scrollIntoView({block: "nearest", inline: "center"});
    });
  });

  // states: "paths" once, a base, then what each step set and deleted
  function rebuild(enc) {
    var out = [], cur = new Map();
    enc.base.forEach(function (r) { cur.set(r[0], r[1]); });
    out.push({rows: cur, changed: new Set(), removed: []});
    enc.diffs.forEach(function (d) {
      var next = new Map(cur), removed = [];
      d.del.forEach(function (p) { removed.push([p, cur.get(p)]); next.delete(p); });
      d.set.forEach(function (r) { next.set(r[0], r[1]); });
      out.push({rows: next, changed: new Set(d.set.map(function (r) { return r[0]; })), removed: removed});
      cur = next;
    });
    return out;
  }
  function fillState(tbody, enc, state) {
    tbody.replaceChildren();
    var ids = Array.from(state.rows.keys()).concat(state.removed.map(function (r) { return r[0]; }));
    ids.sort(function (a, b) { return a - b; });
    var gone = new Map(state.removed);
    ids.forEach(function (id) {
      var tr = document.createElement("tr");
      if (gone.has(id)) {
        tr.className = "removed"; cell(tr, enc.paths[id]); cell(tr, gone.get(id));
      } else {
        if (state.changed.has(id)) tr.className = "changed";
        cell(tr, enc.paths[id]); cell(tr, state.rows.get(id));
      }
      tbody.appendChild(tr);
    });
  }

  var current = {lin: null, k: 0};
  var range = byId("step-range");
  function wire(go, count) {
    byId("step-first").addEventListener("click", function () { go(0); });
    byId("step-prev").addEventListener("click", function () { go(current.k - 1); });
    byId("step-next").addEventListener("click", function () { go(current.k + 1); });
    byId("step-last").addEventListener("click", function () { go(count()); });
    range.addEventListener("input", function () { go(Number(range.value)); });
    document.addEventListener("keydown", function (e) {
      if (e.target && (e.target.tagName === "INPUT" || e.target.tagName === "SELECT")) return;
      if (e.key === "ArrowRight") go(current.k + 1);
      if (e.key === "ArrowLeft") go(current.k - 1);
      if (e.key === "Home") go(0);
      if (e.key === "End") go(count());
    });
  }

  if (data.kind === "linearizability" && data.lins.length) {
    var states = data.lins.map(rebuild);
    var select = byId("lin-select");
    var tbody = document.querySelector("#state tbody");
    var go = function (k) {
      var L = data.lins[current.lin], n = L.order.length;
      k = Math.max(0, Math.min(n, k)); current.k = k; range.max = String(n); range.value = String(k);
      groups.forEach(function (g) {
        g.classList.remove("lin", "current", "next-blocked");
        var t = g.querySelector(".ord"); if (t) t.textContent = "";
      });
      for (var j = 0; j < k; j++) {
        var g = groups.get(L.order[j]);
        if (g) { g.classList.add("lin"); g.querySelector(".ord").textContent = String(L.first + j + 1); }
      }
      var label = byId("step-label"), end = byId("step-end");
      if (k === 0) {
        label.textContent = L.first
          ? "state after step " + L.first + " (earlier steps not shown)"
          : "initial state: nothing placed yet";
      } else {
        var i = L.order[k - 1], o = ops.get(i), cur = groups.get(i);
        if (cur) cur.classList.add("current");
        label.textContent = "step " + (L.first + k) + " of " + L.total + ": #" + i + (o ? " " + o.d : "") + " placed";
      }
      if (k === n) {
        end.hidden = false;
        var lines = ["End of this partial linearization: nothing else can be placed next."];
        L.next.forEach(function (x) { lines.push("#" + x[0] + ": " + x[1]); });
        end.textContent = lines.join("\n"); end.style.whiteSpace = "pre-line";
        if (L.blocked !== null) { var b = groups.get(L.blocked); if (b) b.classList.add("next-blocked"); }
      } else { end.hidden = true; }
      byId("state-caption").textContent =
        k === 0 ? (L.first ? "after step " + L.first : "(initial)") : "after step " + (L.first + k);
      fillState(tbody, L, states[current.lin][k]);
      byId("step-prev").disabled = k === 0; byId("step-first").disabled = k === 0;
      byId("step-next").disabled = k === n; byId("step-last").disabled = k === n;
    };
    current.lin = 0;
    select.addEventListener("change", function () {
      current.lin = Number(select.value); go(data.lins[current.lin].order.length);
    });
    wire(go, function () { return data.lins[current.lin].order.length; });
    go(data.lins[0].order.length);
  }

  if (data.kind === "transactional") {
    document.querySelectorAll("button.show-anomaly").forEach(function (button) {
      button.addEventListener("click", function () {
        var n = Number(button.dataset.anomaly), mine = new Set(data.anomalies[n].ops);
        document.querySelectorAll("article.anomaly").forEach(function (a) { a.classList.remove("selected"); });
        byId("anomaly-" + n).classList.add("selected");
        groups.forEach(function (g, i) {
          g.classList.toggle("focus", mine.has(i)); g.classList.toggle("dim", !mine.has(i));
        });
        var first = groups.get(data.anomalies[n].ops[0]);
        if (first) first.scrollIntoView({block: "nearest", inline: "center"});
      });
    });
  }

  if (data.kind === "trace") {
    var names = Object.keys(data.components), rebuilt = {};
    names.forEach(function (name) { rebuilt[name] = rebuild(data.components[name]); });
    var cols = document.querySelectorAll("g.step-col");
    var goTrace = function (k) {
      var n = data.steps.length; k = Math.max(0, Math.min(n, k)); current.k = k;
      range.max = String(n); range.value = String(k);
      cols.forEach(function (c) { c.classList.toggle("current", Number(c.dataset.step) === k); });
      document.querySelectorAll("#trace-steps li").forEach(function (li) {
        li.classList.toggle("current", Number(li.dataset.step) === k);
      });
      var s = k ? data.steps[k - 1] : null;
      byId("step-label").textContent = k === 0
        ? (data.first ? "state after step " + data.first : "initial state")
        : "step " + (data.first + k) + " of " + data.total + ": " + s.actor + ": " + s.action
          + (data.loopFrom !== null && data.first + k - 1 >= data.loopFrom ? " (in the loop)" : "");
      names.forEach(function (name) {
        var box = document.querySelector("section.component[data-component='" + CSS.escape(name) + "']");
        fillState(box.querySelector("tbody"), data.components[name], rebuilt[name][k]);
        box.classList.toggle("touched", !!(s && s.changed.indexOf(name) >= 0));
      });
      byId("step-prev").disabled = k === 0; byId("step-next").disabled = k === n;
    };
    cols.forEach(function (c) { c.addEventListener("click", function () { goTrace(Number(c.dataset.step)); }); });
    document.querySelectorAll("[data-go-step]").forEach(function (a) {
      a.addEventListener("click", function (e) { e.preventDefault(); goTrace(Number(a.dataset.goStep)); });
    });
    wire(goTrace, function () { return data.steps.length; });
    goTrace(0);
  }

  if (data.kind === "index") {
    var onlyBad = byId("only-bad"), filter = byId("filter");
    var apply = function () {
      var text = filter.value.toLowerCase();
      document.querySelectorAll("#verdicts tbody tr").forEach(function (tr) {
        var bad = !tr.classList.contains("v-ok");
        tr.hidden = (onlyBad.checked && !bad) || (text && tr.textContent.toLowerCase().indexOf(text) < 0);
      });
    };
    onlyBad.addEventListener("change", apply); filter.addEventListener("input", apply);
  }
})();
"""
