"""The index of a ``verify`` run (the shell and caps: :mod:`views.page`): every verdict, the worst
first, each counterexample's page and text linked, filterable by text and to the ones not ok.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from invariants.verify import Outcome
from views.page import DEFAULT_CAPS, Caps, clip, esc, footer_html, notes_html, page_html

__all__ = ["index_page"]


def _worst_first(verdict: object) -> int:
    """Where a verdict goes in the index: the worst first, by the one ranking of verdicts
    (:class:`invariants.verify.Outcome`); a spelling it does not know goes last."""
    try:
        return -Outcome(str(verdict)).rank
    except ValueError:
        return 1


def index_page(
    rows: Sequence[Mapping[str, Any]], *, title: str, notes: Sequence[str] = (), caps: Caps = DEFAULT_CAPS
) -> str:
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
            f"<a class='{kind}' href='{esc(r[kind])}'>{'viewer' if kind == 'html' else 'text'}</a>"
            for kind in ("html", "txt")
            if r.get(kind)
        )
        verdict = str(r.get("verdict"))
        seconds = r.get("seconds")
        lines.append(
            f"<tr class='v-{esc(verdict)}'><td>{esc(r.get('history'))}</td><td>{esc(r.get('checker'))}</td>"
            f"<td class='verdict-cell'>{esc(verdict)}</td><td>{esc(r.get('model') or '')}</td>"
            f"<td class='num'>{esc(r.get('objects') or 0)}</td><td class='num'>{esc(r.get('ops') or 0)}</td>"
            f"<td class='num'>{'' if seconds is None else f'{float(seconds):.2f}'}</td>"
            f"<td>{esc(r.get('failing_object') or '')}</td>"
            f"<td class='num'>{esc('' if r.get('seed') is None else r['seed'])}</td><td>{links}</td>"
            f"<td class='detail'>{esc(clip(_detail_words(r.get('detail')), 300))}</td></tr>"
        )
    summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda item: _worst_first(item[0])))
    body = (
        f"<header><h1>{esc(title)}</h1></header>{notes_html(all_notes)}<p>{len(rows)} verdicts: {esc(summary)}.</p>"
        "<div class='controls'><label><input type='checkbox' id='only-bad'> only verdicts that are not ok</label> "
        "<label>filter <input type='search' id='filter' placeholder='history, checker, object…'></label></div>"
        "<table id='verdicts'><thead><tr><th>history</th><th>checker</th><th>verdict</th><th>model</th>"
        "<th>objects</th><th>ops</th><th>seconds</th><th>failing object</th><th>seed</th><th>counterexample</th>"
        f"<th>detail</th></tr></thead><tbody>{''.join(lines)}</tbody></table>{footer_html()}"
    )
    return page_html(title, body, {"kind": "index"}, kind="index")


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
