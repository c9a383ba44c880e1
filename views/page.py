"""The counterexample viewer's shared pieces: the page shell, its caps, the timeline, states.

A page of the viewer is one self-contained, interactive HTML file: a plain string built in
:mod:`views` (pure: no I/O; :mod:`runners` and :mod:`txnmodel` write it).  It holds its own style
and script (``views/static/viewer.css`` and ``viewer.js``, package data written for this project: no
third-party code, inlined by :func:`page_html`) and its data as JSON, and loads nothing from
anywhere.  What it shows is drawn in SVG by Python, so every label is in the page even with
scripts off; the script adds the interaction.  The pages:

* **linearizability** (:mod:`views.linearizability`): an object that is not linearizable, its
  failing core and the operation that cannot be placed, and a stepper through the longest partial
  linearizations with the model's state at each step;
* **transactional** (:mod:`views.transactional`): a history's transactional anomalies, each with
  the rule it breaks, its operations in words and its dependency cycle;
* **trace** (:mod:`views.trace`): a model checker's counterexample trace, step by step;
* **index** (:mod:`views.index`): every verdict of a ``verify`` run, linking each counterexample.

Every page is capped (:class:`Caps`): at most ``max_ops`` operations drawn (those nearest the
failure), at most ``max_steps`` steps of each linearization, at most ``max_state_rows`` rows of a
state, and never more than ``max_bytes`` bytes (Porcupine's users have met gigabyte pages).  A
capped page says on its face what it left out.
"""

from __future__ import annotations

import functools
import html
import itertools
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from invariants.readable import Row, diff_rows
from spec.history import Operation

__all__ = [
    "CHAR_W",
    "DEFAULT_CAPS",
    "MAX_BYTES",
    "MAX_OPS",
    "MAX_STATE_ROWS",
    "MAX_STEPS",
    "Caps",
    "choose_ops",
    "clip",
    "encode_states",
    "esc",
    "footer_html",
    "interval",
    "legend_html",
    "notes_html",
    "op_data",
    "page_html",
    "reproduce_html",
    "timeline_svg",
    "too_big_page",
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


DEFAULT_CAPS = Caps()


# --- pieces shared by every page ----------------------------------------------------------------


def esc(text: object) -> str:
    """``text`` as HTML text or an attribute value."""
    return html.escape(str(text), quote=True)


@functools.cache
def _static(name: str) -> str:
    # read at the first page rendered, not at import: a process that renders nothing never opens it
    return resources.files("views").joinpath("static", name).read_text(encoding="utf-8")


def _json_script(data: Any) -> str:
    # "<" escaped so the data can never close its script element
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    return f'<script type="application/json" id="viewer-data">{text}</script>'


def page_html(title: str, body: str, data: Any, *, kind: str) -> str:
    """The whole page: ``body``, ``data`` as JSON for the script, and the viewer's own style and
    script (``static/viewer.css``, ``static/viewer.js``) inlined, each starting on a line of its own."""
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>\n{_static('viewer.css')}</style></head>"
        f"<body data-kind='{kind}'>{body}{_json_script(data)}<script>\n{_static('viewer.js')}</script></body></html>\n"
    )


def interval(op: Operation) -> str:
    """An operation's interval, ``[call, return]``; an unknown outcome's return is ``∞``."""
    end = "∞ (outcome unknown)" if op.type.indeterminate else str(op.completed_at)
    return f"[{op.invoked_at}, {end}]"


def op_data(op: Operation, words: str, roles: Sequence[str] = ()) -> dict[str, Any]:
    """An operation as the page's script reads it (its details panel): ``words`` says what it did,
    ``roles`` what part it plays in the counterexample."""
    return {
        "i": op.index,
        "p": op.process,
        "t": op.type.value,
        "f": op.f,
        "obj": op.object,
        "call": op.invoked_at,
        "ret": None if op.type.indeterminate else op.completed_at,
        "d": words,
        "v": clip(op.value, 600),
        "r": None if op.result is None else clip(op.result, 600),
        "e": op.error,
        "roles": list(roles),
    }


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, an ellipsis marking the cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def choose_ops(ops: Sequence[Operation], focus: Iterable[int], limit: int) -> tuple[list[Operation], int]:
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


def too_big_page(title: str, reason: str, max_bytes: int) -> str:
    """The page in place of a counterexample that does not fit in ``max_bytes`` even at the smallest caps."""
    body = (
        f"<h1>{esc(title)}</h1><p class='capped'>This counterexample does not fit in {max_bytes} bytes even at "
        f"the smallest caps; its text form has every detail.</p><p>{esc(clip(reason, 2000))}</p>"
    )
    return page_html(title, body, {"kind": "none"}, kind="none")


def footer_html() -> str:
    """The footer every page ends with."""
    return "<footer>txnmodel counterexample viewer · self-contained: this page loads nothing from the network</footer>"


def reproduce_html(seed: int | None, reproduce: str | None) -> str:
    """How to rerun the history: the whole command when the file recorded the run, else its seed."""
    if reproduce is not None:
        return f" Reproduce with <code>{esc(reproduce)}</code>."
    return f" Seed <b>{seed}</b> (the file does not record the run's other options)." if seed is not None else ""


# --- the timeline -------------------------------------------------------------------------------

CHAR_W = 6.6  # px per character of the 11px label font (an estimate; labels get room to spare)
_ROW_H = 36
_LEFT = 96
_AXIS_H = 34


def timeline_svg(
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
        label = clip(f"#{op.index} {label}", 72)
        extent = max(x1, x0 + len(label) * CHAR_W + 10)
        placed.append((op, x0, x1, extent, label))
    lanes, row_of = _rows(placed)
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
            width = max(width, x_of(at) + unit + len(text) * CHAR_W + 20)
    parts = [
        f'<svg class="timeline" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="timeline">'
    ]
    # the axis: a tick per instant, a label where there is room for one
    every = max(1, math.ceil((max(len(str(t)) for t in instants) * CHAR_W + 10) / unit))
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
            f'<text class="lane-name" x="4" y="{lane_y + 22:.0f}">{esc(lane_name(process))}</text>'
        )
    for at, text in marks:
        if at in rank:
            x = x_of(at) + unit - 3
            parts.append(
                f'<line class="mark" x1="{x:.1f}" y1="{_AXIS_H - 8}" x2="{x:.1f}" y2="{height - 4:.0f}"/>'
                f'<text class="mark-label" x="{x + 3:.1f}" y="{height - 6:.0f}">{esc(text)}</text>'
            )
    for op, x0, x1, _, label in placed:
        oy = top[op.process] + row_of[op.index] * _ROW_H
        names = ["op", op.type.value, *classes.get(op.index, ())]
        open_end = op.type.indeterminate or op.completed_at is None
        tip = f"#{op.index} process {op.process} {op.type.value} {interval(op)}: {labels.get(op.index, op.f)}"
        parts.append(
            f'<g class="{" ".join(names)}" data-op="{op.index}"><title>{esc(tip)}</title>'
            f'<rect class="bar" x="{x0:.1f}" y="{oy + 12:.0f}" width="{max(x1 - x0, 6):.1f}" height="18" rx="3"/>'
            + (f'<text class="open" x="{x1 - 10:.1f}" y="{oy + 25:.0f}">?</text>' if open_end else "")
            + f'<text class="ord" x="{x0:.1f}" y="{oy + 10:.0f}"></text>'
            f'<text class="lbl" x="{x0 + 4:.1f}" y="{oy + 25:.0f}">{esc(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _rows(
    placed: Sequence[tuple[Operation, float, float, float, str]],
) -> tuple[dict[int, list[float]], dict[int, int]]:
    """One lane per process, rows inside a lane so that no two labels overlap: each lane's rows (the
    end of each row's last label) and each operation's row, from the bars as placed on the axis."""
    lanes: dict[int, list[float]] = {}
    row_of: dict[int, int] = {}
    for op, x0, _, extent, _ in sorted(placed, key=lambda item: (item[0].process, item[1], item[0].index)):
        ends = lanes.setdefault(op.process, [])
        row = next((r for r, end in enumerate(ends) if end <= x0 - 4), len(ends))
        if row == len(ends):
            ends.append(extent)
        else:
            ends[row] = extent
        row_of[op.index] = row
    return lanes, row_of


def legend_html(items: Sequence[tuple[str, str]]) -> str:
    """The key to a timeline's colours: ``items`` are (the classes of a bar, what they mean)."""
    cells = "".join(
        f'<span class="key"><svg width="26" height="14"><g class="op {cls}"><rect class="bar" x="1" y="1" '
        f'width="24" height="12" rx="2"/></g></svg>{esc(text)}</span>'
        for cls, text in items
    )
    return f'<div class="legend">{cells}</div>'


def notes_html(notes: Sequence[str], cls: str = "capped") -> str:
    """Notes at the top of a page, one paragraph each (by default: what a cap left out)."""
    return "".join(f'<p class="{cls}">{esc(note)}</p>' for note in notes)


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
