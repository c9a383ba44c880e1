"""The built docs need no network: every diagram is an SVG drawn at build time, nothing is loaded
from another origin, and the pages show their diagrams in a browser that has no network."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_diagrams", ROOT / "scripts" / "mkdocs_diagrams.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    mkdocs = Path(sys.executable).parent / "mkdocs"
    done = subprocess.run(
        [str(mkdocs), "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out


def _pages_with_diagrams() -> dict[str, int]:
    found = {}
    for page in (ROOT / "docs").rglob("*.md"):
        count = len(re.findall(r"^```mermaid", page.read_text(encoding="utf-8"), re.M))
        if count:
            found[str(page.relative_to(ROOT / "docs"))] = count
    return found


def test_every_diagram_is_an_inline_svg_and_nothing_loads_from_elsewhere(site: Path) -> None:
    pages = _pages_with_diagrams()
    assert len(pages) >= 6 and sum(pages.values()) >= 11
    for source, count in pages.items():
        built = site / source.removesuffix(".md") / "index.html"
        text = built.read_text(encoding="utf-8")
        assert text.count('<div class="diagram"><svg') == count, source
        assert 'class="mermaid"' not in text and "mermaid.min.js" not in text and "```mermaid" not in text
    for built in site.rglob("*.html"):
        text = built.read_text(encoding="utf-8")
        loads = re.findall(r'<(?:script|img|link|iframe)[^>]*(?:src|href)="(https?:)?//[^"]*"', text)
        assert not loads, (built, loads)
        assert "fonts.googleapis" not in text and "@import url(http" not in text


def test_diagrams_show_in_a_browser_without_network(site: Path, browser: Any) -> None:
    page = browser.new_page()
    refused: list[str] = []

    def only_files(route: Any) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    page.route("**/*", only_files)
    try:
        page.goto((site / "machines" / "coordinator" / "index.html").as_uri())
        diagrams = page.locator("div.diagram svg")
        assert diagrams.count() == 4
        for k in range(4):
            box = diagrams.nth(k).bounding_box()
            assert box is not None and box["width"] > 100 and box["height"] > 100
        text = " ".join(diagrams.nth(k).text_content() or "" for k in range(4))
        for word in ("Initializing", "COMMITTING", "EndTxnInTransactionBufferResult(txn, COMMIT, errors)", "TIME_OUT"):
            assert word in text, word
        assert not refused, refused
    finally:
        page.close()


def test_the_hook_draws_each_kind_and_names_what_it_cannot() -> None:
    hook = _hook()
    state = hook.render("stateDiagram-v2\n    [*] --> OPEN: NewTxn\n    OPEN --> COMMITTING: EndTxn\\nphase 1\n")
    assert state.startswith("<svg") and "OPEN" in state and "COMMITTING" in state and "phase 1" in state
    flow = hook.render('flowchart LR\n  a[add] --> b{"size >= max?"}\n  b -- yes --> c[(log<br/>ledger)]\n  c --- a\n')
    assert "size &gt;= max?" in flow and "ledger" in flow
    sequence = hook.render(
        "sequenceDiagram\n    participant C as client\n    C->>TC: EndTxn\n    alt ok\n        TC-->>C: Ok\n"
        "    else failed\n        TC-->>C: Err\n    end\n    Note over C: done\n"
    )
    assert all(word in sequence for word in ("client", "EndTxn", "alt", "[failed]", "done"))

    class Page:
        class file:  # the shape MkDocs passes: page.file.src_path
            src_path = "machines/x.md"

    with pytest.raises(hook.DiagramError, match=r"machines/x.md line 5: not a transition .* opened at line 3"):
        hook.on_page_markdown("text\n\n```mermaid\nstateDiagram-v2\n    A -> B\n```\n", Page())
    with pytest.raises(hook.DiagramError, match="pie"):
        hook.render("pie\n    title x\n")
