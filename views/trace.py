"""The page of a model checker's counterexample trace (the shell and caps: :mod:`views.page`).

Step by step: a chart of which component each step changed, the list of steps, and each
component's state after the selected step, its changed rows highlighted; a liveness trace marks the
loop of its lasso.  The trace's shape is :mod:`proofs.check.trace_format`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from views.page import CHAR_W, DEFAULT_CAPS, Caps, clip, encode_states, esc, footer_html, notes_html, page_html

__all__ = ["trace_page"]


def trace_page(trace: Any, *, caps: Caps = DEFAULT_CAPS) -> str:
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
    head = [f"<p class='verdict bad'>{esc(trace.verdict_text)}</p>"]
    if trace.message:
        head.append(f"<p>{esc(trace.message)}</p>")
    if trace.bounds:
        head.append("<p class='note'>Bounds: " + esc(", ".join(f"{k}={v}" for k, v in trace.bounds.items())) + "</p>")
    if trace.loop_from is not None:
        head.append(
            f"<p class='note'>A lasso: from step {trace.loop_from + 1} on, the steps repeat forever, and the "
            f"property never holds along the loop.</p>"
        )
    step_items = "".join(
        f"<li data-step='{c + 1}'><a href='#' data-go-step='{c + 1}'><b>{esc(step.actor)}</b>: {esc(step.action)}</a>"
        + (f" <span class='changes'>changes {esc(', '.join(names))}</span>" if names else "")
        + "</li>"
        for c, (step, names) in enumerate(zip(shown, changed, strict=True))
    )
    tables = "".join(
        f"<section class='component' data-component='{esc(name)}'><h3>{esc(name)}</h3>"
        "<table class='state'><thead><tr><th>field</th><th>value</th></tr></thead><tbody></tbody></table></section>"
        for name in components
    )
    title = f"{trace.model} · {trace.property_name}"
    body = (
        f"<header><h1>{esc(title)}</h1></header>{notes_html(notes)}{''.join(head)}"
        "<section id='stepper'><h2>Step through the trace</h2><div class='controls'>"
        "<button id='step-first'>◀◀ first</button><button id='step-prev'>◀ prev</button>"
        "<input id='step-range' type='range' min='0' max='0' value='0' aria-label='step'>"
        "<button id='step-next'>next ▶</button><button id='step-last'>last ▶▶</button>"
        "<span id='step-label' class='step-label'></span></div></section>"
        f"<section id='chart-panel'><h2>Steps and the components they change</h2><div class='scroll'>{chart}</div>"
        f"<ol id='trace-steps' start='{skip + 1}'>{step_items}</ol>"
        f"</section><section id='components'><h2>Component states</h2><div class='grid'>{tables}</div></section>"
        f"{footer_html()}"
    )
    data = {
        "kind": "trace",
        "first": skip,
        "total": len(steps),
        "loopFrom": trace.loop_from,
        "steps": [{"actor": s.actor, "action": s.action, "changed": c} for s, c in zip(shown, changed, strict=True)],
        "components": {name: per_component[name] for name in components},
    }
    return page_html(title, body, data, kind="trace")


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
    labels = [clip(f"{skip + c + 1}. {step.actor}: {step.action}", 40) for c, step in enumerate(steps)]
    longest = max((len(label) for label in labels), default=1) * CHAR_W
    top = int(longest * 0.87) + 16  # the step names are drawn at 60 degrees above the columns
    width = left + col * max(len(steps), 1) + int(longest / 2) + 30
    height = top + row * len(components) + 10
    parts = [f'<svg class="trace-chart" width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">']
    for r, name in enumerate(components):
        y = top + r * row
        parts.append(
            f'<line class="lane-line" x1="{left}" y1="{y + 15}" x2="{width - 10}" y2="{y + 15}"/>'
            f'<text class="lane-name" x="4" y="{y + 19}">{esc(clip(name, 24))}</text>'
        )
    for c, touched in enumerate(changed):
        x = left + c * col
        number = skip + c + 1
        looping = " loop" if loop is not None and number - 1 >= loop else ""
        label = labels[c]
        parts.append(
            f'<g class="step-col{looping}" data-step="{c + 1}"><rect class="col" x="{x}" y="0" width="{col}" '
            f'height="{height}"/><text class="step-name" transform="translate({x + 20},{top - 6}) rotate(-60)">'
            f"{esc(label)}</text>"
        )
        for name in touched:
            y = top + components.index(name) * row
            parts.append(f'<circle class="dot" cx="{x + col / 2}" cy="{y + 15}" r="7"/>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)
