"""The page of an object that is not linearizable (the shell, caps and timeline: :mod:`views.page`).

A time axis, one lane per process, every operation a labelled bar; the failing core outlined, the
operation that cannot be placed filled red and called out, with its return marked on the axis.  A
stepper walks through the longest partial linearizations (the checker's own, and the other longest
ones a bounded search finds) one operation at a time, numbering the placed operations and showing
the model's state after each step, the rows the step changed highlighted; after the last step it
says which operations could come next and why the model refuses each.  Click an operation for its
details.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from invariants.explain import Linearization
from spec.history import Operation
from views.page import (
    DEFAULT_CAPS,
    Caps,
    choose_ops,
    clip,
    encode_states,
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

__all__ = ["linearizability_page"]


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
    caps: Caps = DEFAULT_CAPS,
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
    return too_big_page(f"{history} · {obj}", reason, caps.max_bytes)


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
    chosen, omitted = choose_ops(ops, focus, caps.max_ops)
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
    svg = timeline_svg(chosen, descriptions, classes, callouts=callouts, marks=marks)
    lins_data = _stepper_data(linearizations, caps, notes)
    data = {
        "kind": "linearizability",
        "ops": [op_data(op, descriptions.get(op.index, op.f), roles.get(op.index, ())) for op in chosen],
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
        f"<p class='note'>After the prefix found by the checker: {esc(clip(state_after, 400))}</p>"
        "<table id='state'><thead><tr><th>field</th><th>value</th></tr></thead><tbody></tbody></table></section>"
    )
    body = (
        f"<header><h1>{esc(title)}</h1></header>{notes_html(notes)}{''.join(summary)}{_STEPPER.format(options=options)}"
        f"<section id='timeline-panel'><h2>Timeline</h2>{legend_html(_LINEARIZABILITY_LEGEND)}"
        "<p class='note'>One lane per process; the axis is in event order (one column per recorded instant, "
        f"labelled with it). Click an operation for its details.</p><div class='scroll'>{svg}</div></section>"
        f"<div class='columns'>{state_panel}<section id='details-panel'><h2>Operation</h2>"
        "<div id='details'><p class='note'>Click an operation.</p></div></section></div>"
        f"{footer_html()}"
    )
    return page_html(title, body, data, kind="linearizability")


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
        f"<p class='verdict bad'>NOT LINEARIZABLE</p><p>Object <b>{esc(obj)}</b> of history <b>{esc(history)}</b> "
        f"checked against the <b>{esc(model)}</b> model." + reproduce_html(seed, reproduce) + "</p>"
    ]
    if blocked_op is not None:
        summary.append(
            f"<p class='blocked-note'>✖ Operation <a href='#' data-show-op='{blocked_op.index}'>"
            f"#{blocked_op.index}</a> (process {blocked_op.process}, {esc(interval(blocked_op))}) "
            "<b>cannot be placed</b>: "
            f"{esc(descriptions.get(blocked_op.index, blocked_op.f))}</p>"
        )
    summary.append(f"<p class='why'><b>Why:</b> {esc(clip(reason, 3000))}</p>")
    return summary


def _core_details(
    core: Sequence[int], descriptions: Mapping[int, str], ops: int, original_ops: int, searches: int
) -> str:
    core_items = "".join(
        f"<li><a href='#' data-show-op='{i}'>#{i}</a> {esc(descriptions.get(i, ''))}</li>" for i in core[:50]
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
