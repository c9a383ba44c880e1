"""MkDocs hook: the docs' mermaid diagrams drawn as SVG when the site is built, so it needs no network.

The pages keep their diagrams as mermaid source (GitHub draws them where the Markdown is read
there); ``mkdocs build`` replaces each ```` ```mermaid ```` block with an inline SVG:

* ``stateDiagram-v2`` and ``flowchart`` / ``graph`` are translated to DOT and laid out by Graphviz
  (``dot -Tsvg``, Debian's ``graphviz``; ``make docs`` installs it when it is missing);
* ``sequenceDiagram`` is drawn here: participants, messages (``->>`` solid, ``-->>`` dashed),
  ``Note over``, and ``alt`` / ``else`` / ``end`` frames.

Only the subset of mermaid these pages use is read; anything else fails the build naming the page
and the line, so a diagram never silently turns into a CDN-loaded script or raw text.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DiagramError", "on_page_markdown", "render"]

_FENCE = re.compile(r"^```mermaid[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


class DiagramError(Exception):
    """A diagram this hook cannot draw; ``line`` is the diagram's line (1: the one after the fence)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs' hook: every mermaid block of the page becomes an inline SVG."""
    where = getattr(getattr(page, "file", None), "src_path", "?")

    def replace(match: re.Match[str]) -> str:
        fence = markdown.count("\n", 0, match.start()) + 1  # the page line of the opening fence
        try:
            svg = render(match.group(1))
        except DiagramError as exc:
            line = fence + (exc.line or 1)
            raise DiagramError(f"{where} line {line}: {exc} (in the mermaid diagram opened at line {fence})") from None
        return f'<div class="diagram">{svg}</div>'

    return _FENCE.sub(replace, markdown)


def render(source: str) -> str:
    """One mermaid diagram as an SVG element."""
    lines = [line.rstrip() for line in source.splitlines()]
    body = [
        (number, line.strip())
        for number, line in enumerate(lines, 1)
        if line.strip() and not line.strip().startswith("%%")
    ]
    if not body:
        raise DiagramError("empty diagram")
    kind = body[0][1].split()[0]
    if kind == "stateDiagram-v2" or kind == "stateDiagram":
        return _graphviz(_state_dot(body[1:]))
    if kind in ("flowchart", "graph"):
        words = body[0][1].split()
        direction = words[1] if len(words) > 1 else "TD"
        return _graphviz(_flowchart_dot(body[1:], direction))
    if kind == "sequenceDiagram":
        return _sequence_svg(body[1:])
    raise DiagramError(f"diagram type {kind!r} is not one this hook draws", body[0][0])


# --- Graphviz ---------------------------------------------------------------------------------------------

_FONT = 'fontname="Helvetica,Arial,sans-serif"'


def _graphviz(dot: str) -> str:
    binary = shutil.which("dot")
    if binary is None:
        raise DiagramError("Graphviz's dot is not installed (`make docs` installs Debian's graphviz)")
    done = subprocess.run([binary, "-Tsvg"], input=dot, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise DiagramError(f"dot failed: {done.stderr.strip()}")
    svg = done.stdout
    svg = svg[svg.index("<svg") :]  # drop the XML prolog and doctype: the SVG goes inline
    return re.sub(r"<!--.*?-->\s*", "", svg, flags=re.S)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _label(text: str) -> str:
    """Mermaid's line breaks (``\\n`` in a state label, ``<br/>`` in a node) as DOT's."""
    text = re.sub(r"<br\s*/?>", "\n", text.strip())
    text = text.replace("\\n", "\n")
    return _quote(text).replace("\n", "\\n")


def _state_dot(body: list[tuple[int, str]]) -> str:
    edges = []
    states: list[str] = []
    uses_start = uses_end = False
    arrow = re.compile(r"^(\[\*\]|[\w.]+)\s*-->\s*(\[\*\]|[\w.]+)\s*(?::\s*(.*))?$")
    for number, line in body:
        found = arrow.match(line)
        if not found:
            raise DiagramError(f"not a transition `A --> B: label`: {line!r}", number)
        source, target, text = found.group(1), found.group(2), found.group(3) or ""
        if source == "[*]":
            source, uses_start = "__start", True
        if target == "[*]":
            target, uses_end = "__end", True
        for name in (source, target):
            if not name.startswith("__") and name not in states:
                states.append(name)
        edges.append((source, target, text))
    out = [
        "digraph G {",
        f"  graph [rankdir=TB, nodesep=0.5, ranksep=0.45, bgcolor=transparent, {_FONT}];",
        f'  node [shape=box, style="rounded,filled", fillcolor="#ecebff", color="#9370db", {_FONT}, fontsize=12];',
        f'  edge [color="#333333", {_FONT}, fontsize=10];',
    ]
    if uses_start:
        out.append('  __start [shape=circle, label="", width=0.22, style=filled, fillcolor=black];')
    if uses_end:
        out.append('  __end [shape=doublecircle, label="", width=0.16, style=filled, fillcolor=black];')
    out += [f"  {_quote(name)} [label={_label(name)}];" for name in states]
    for source, target, text in edges:
        names = [_quote(n) if not n.startswith("__") else n for n in (source, target)]
        out.append(f"  {names[0]} -> {names[1]}" + (f" [label={_label(text)}]" if text else "") + ";")
    out.append("}")
    return "\n".join(out)


# A node reference: an id and an optional shape: A[text], A{text}, A{"text"}, A[(text)], A(text).
_NODE = re.compile(r'(\w+)\s*(\[\((.*?)\)\]|\[(.*?)\]|\{"(.*?)"\}|\{(.*?)\}|\((.*?)\))?')
_EDGE = re.compile(r"\s*(--\s+(.+?)\s+-->|-->\|(.+?)\||-->|---|--\s+(.+?)\s+---)\s*")


def _flowchart_dot(body: list[tuple[int, str]], direction: str) -> str:
    shapes: dict[str, tuple[str, str]] = {}
    edges: list[tuple[str, str, str, bool]] = []

    def node(text: str, number: int) -> tuple[str, str]:
        found = _NODE.match(text)
        if not found:
            raise DiagramError(f"not a node: {text!r}", number)
        name = found.group(1)
        if found.group(3) is not None:
            shape = ("cylinder", found.group(3))
        elif found.group(4) is not None:
            shape = ("box", found.group(4))
        elif found.group(5) is not None or found.group(6) is not None:
            shape = ("diamond", found.group(5) if found.group(5) is not None else found.group(6))
        elif found.group(7) is not None:
            shape = ("ellipse", found.group(7))
        else:
            shape = shapes.get(name, ("box", name))
        if name not in shapes or found.group(2):
            shapes[name] = shape
        return name, text[found.end() :]

    for number, line in body:
        name, rest = node(line, number)
        while rest.strip():
            edge = _EDGE.match(rest)
            if not edge:
                raise DiagramError(f"not an edge after {name!r}: {rest!r}", number)
            text = edge.group(2) or edge.group(3) or edge.group(4) or ""
            directed = edge.group(1).endswith(">") or edge.group(1).endswith("|")
            target, rest = node(rest[edge.end() :], number)
            edges.append((name, target, text, directed))
            name = target
    rankdir = {"LR": "LR", "RL": "RL", "TD": "TB", "TB": "TB", "BT": "BT"}.get(direction)
    if rankdir is None:
        raise DiagramError(f"flowchart direction {direction!r} is not LR, RL, TD, TB or BT")
    fill = {"box": "#ecebff", "diamond": "#fff4d6", "cylinder": "#e8f4ea", "ellipse": "#ecebff"}
    out = [
        "digraph G {",
        f"  graph [rankdir={rankdir}, nodesep=0.35, ranksep=0.4, bgcolor=transparent, {_FONT}];",
        f'  node [style="rounded,filled", color="#9370db", {_FONT}, fontsize=11];',
        f'  edge [color="#333333", {_FONT}, fontsize=10];',
    ]
    for name, (shape, text) in shapes.items():
        style = ', style="filled"' if shape != "box" else ""
        out.append(f"  {_quote(name)} [shape={shape}, label={_label(text)}, fillcolor={_quote(fill[shape])}{style}];")
    for source, target, text, directed in edges:
        attributes = ([f"label={_label(text)}"] if text else []) + ([] if directed else ["arrowhead=none"])
        out.append(
            f"  {_quote(source)} -> {_quote(target)}" + (f" [{', '.join(attributes)}]" if attributes else "") + ";"
        )
    out.append("}")
    return "\n".join(out)


# --- sequence diagrams --------------------------------------------------------------------------------------

_CHAR = 6.4  # px per character of the 12px font (an estimate with room to spare)


@dataclass
class _Frame:
    kind: str
    sections: list[tuple[str, float]] = field(default_factory=list)  # (condition, y where it starts)
    top: float = 0.0


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _sequence_svg(body: list[tuple[int, str]]) -> str:
    participants: list[tuple[str, str]] = []
    events: list[tuple[int, str, tuple[str, ...]]] = []
    message = re.compile(r"^(\w+)\s*(-->>|->>|-->|->)\s*(\w+)\s*:\s*(.*)$")
    for number, line in body:
        if line.startswith("participant ") or line.startswith("actor "):
            rest = line.split(None, 1)[1]
            name, _, alias = rest.partition(" as ")
            participants.append((name.strip(), (alias or name).strip()))
        elif found := message.match(line):
            events.append((number, "message", found.groups()))
        elif found := re.match(r"^Note (over|left of|right of) ([\w, ]+?)\s*:\s*(.*)$", line):
            events.append((number, "note", (found.group(1), found.group(2), found.group(3))))
        elif found := re.match(r"^(alt|opt|loop|else)\b\s*(.*)$", line):
            events.append((number, found.group(1), (found.group(2),)))
        elif line == "end":
            events.append((number, "end", ()))
        else:
            raise DiagramError(f"not a participant, message, note or frame: {line!r}", number)
    known = [name for name, _ in participants]
    for _, kind, data in events:
        names = (
            [data[0], data[2]]
            if kind == "message"
            else ([n.strip() for n in data[1].split(",")] if kind == "note" else [])
        )
        for name in names:
            if name not in known:
                known.append(name)
                participants.append((name, name))
    if not participants:
        raise DiagramError("a sequence diagram without participants")
    # columns wide enough for the longest message between neighbours
    widths = [max(110.0, len(alias) * _CHAR + 30) for _, alias in participants]
    gap = [160.0] * max(len(participants) - 1, 0)
    index = {name: i for i, (name, _) in enumerate(participants)}
    for _, kind, data in events:
        if kind == "message":
            a, b = sorted((index[data[0]], index[data[2]]))
            if a != b:
                need = len(data[3]) * _CHAR + 40
                span = sum(gap[a:b]) + sum(widths[a + 1 : b])
                if need > span:
                    gap[a] += need - span
    left = 20.0
    centres = []
    x = left
    for i, width in enumerate(widths):
        centres.append(x + width / 2)
        x += width + (gap[i] if i < len(gap) else 0)
    total_width = x + left
    parts: list[str] = []
    leftmost = 0.0  # a note left of the first lifeline may reach past the edge: the drawing shifts right
    y = 70.0
    frames: list[_Frame] = []
    drawn_frames: list[str] = []
    for number, kind, data in events:
        if kind == "message":
            source, arrow, target, text = data
            x1, x2 = centres[index[source]], centres[index[target]]
            dashed = arrow.startswith("--")
            parts.append(
                f'<text x="{(x1 + x2) / 2:.1f}" y="{y - 6:.1f}" text-anchor="middle" class="msg">{_esc(text)}</text>'
                f'<line x1="{x1:.1f}" y1="{y:.1f}" x2="{x2 - (8 if x2 > x1 else -8):.1f}" y2="{y:.1f}" '
                f'class="arrow{" dashed" if dashed else ""}" marker-end="url(#seq-head)"/>'
            )
            y += 40
        elif kind == "note":
            where, names, text = data
            columns = [centres[index[n.strip()]] for n in names.split(",")]
            width = max(len(text) * _CHAR + 24, (max(columns) - min(columns)) + 80)
            centre = (min(columns) + max(columns)) / 2
            if where == "left of":
                centre = min(columns) - width / 2 - 10
            elif where == "right of":
                centre = max(columns) + width / 2 + 10
            parts.append(
                f'<rect x="{centre - width / 2:.1f}" y="{y - 16:.1f}" width="{width:.1f}" height="28" class="note"/>'
                f'<text x="{centre:.1f}" y="{y + 2:.1f}" text-anchor="middle">{_esc(text)}</text>'
            )
            total_width = max(total_width, centre + width / 2 + 20)
            leftmost = min(leftmost, centre - width / 2 - 10)
            y += 42
        elif kind in ("alt", "opt", "loop"):
            frames.append(_Frame(kind, [(data[0], y)], y))
            y += 30
        elif kind == "else":
            if not frames or frames[-1].kind != "alt":
                raise DiagramError("else outside an alt", number)
            frames[-1].sections.append((data[0], y))
            y += 30
        else:  # end
            if not frames:
                raise DiagramError("end without alt, opt or loop", number)
            frame = frames.pop()
            x0, x1 = centres[0] - widths[0] / 2 + 4, centres[-1] + widths[-1] / 2 - 4
            pieces = [
                f'<rect x="{x0:.1f}" y="{frame.top - 24:.1f}" width="{x1 - x0:.1f}" '
                f'height="{y - frame.top + 14:.1f}" class="frame"/>'
            ]
            for k, (condition, at) in enumerate(frame.sections):
                label = frame.kind if k == 0 else "else"
                if k:
                    pieces.append(
                        f'<line x1="{x0:.1f}" y1="{at - 24:.1f}" x2="{x1:.1f}" y2="{at - 24:.1f}" class="frame-split"/>'
                    )
                pieces.append(
                    f'<text x="{x0 + 6:.1f}" y="{at - 10:.1f}" class="frame-label">{label}</text>'
                    f'<text x="{x0 + 50:.1f}" y="{at - 10:.1f}" class="frame-cond">[{_esc(condition)}]</text>'
                )
            drawn_frames.append("".join(pieces))
            y += 20
    if frames:
        raise DiagramError(f"{frames[-1].kind} without end")
    height = y + 50
    heads = []
    for (_, alias), centre, width in zip(participants, centres, widths, strict=True):
        for top in (10.0, height - 44):
            heads.append(
                f'<rect x="{centre - width / 2:.1f}" y="{top:.1f}" width="{width:.1f}" height="32" rx="4" '
                'class="actor"/>'
                f'<text x="{centre:.1f}" y="{top + 21:.1f}" text-anchor="middle">{_esc(alias)}</text>'
            )
        heads.append(f'<line x1="{centre:.1f}" y1="42" x2="{centre:.1f}" y2="{height - 44:.1f}" class="lifeline"/>')
    style = (
        "<style>.seq text{font:12px Helvetica,Arial,sans-serif;fill:#222}.seq .actor{fill:#ecebff;stroke:#9370db}"
        ".seq .lifeline{stroke:#9370db;stroke-dasharray:4 3}.seq .arrow{stroke:#333;stroke-width:1.3}"
        ".seq .dashed{stroke-dasharray:5 3}.seq .note{fill:#fff5ad;stroke:#aaaa33}"
        ".seq .frame{fill:none;stroke:#9370db;stroke-dasharray:3 2}"
        ".seq .frame-split{stroke:#9370db;stroke-dasharray:3 2}"
        ".seq .frame-label{font-weight:700}.seq .frame-cond{font-style:italic}.seq #seq-head path{fill:#333}</style>"
    )
    shift = -leftmost
    total_width += shift
    return (
        f'<svg class="seq" xmlns="http://www.w3.org/2000/svg" width="{total_width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {total_width:.0f} {height:.0f}">{style}'
        f'<g transform="translate({shift:.1f},0)">'
        '<defs><marker id="seq-head" viewBox="0 0 10 10" refX="2" refY="5" markerWidth="8" markerHeight="8" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>'
        + "".join(heads)
        + "".join(drawn_frames)
        + "".join(parts)
        + "</g></svg>"
    )
