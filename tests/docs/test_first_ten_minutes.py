"""docs/first-ten-minutes.md, run: every block in order, its output compared with the page's.

Conventions of the page: a ``python`` block is run with this Python in a fresh working folder
(the blocks share it, in order) and the ``text`` block right after it is its expected output; in a
``console`` block each ``$ `` line is a command run with the project's ``.venv/bin`` first on the
PATH, ending in ``# exit N`` when N is its expected exit code (0 otherwise), and the lines after
it are what it prints (standard output and error, as a terminal shows them).  Expected lines are
matched in order, leading and trailing blanks ignored; ``…`` stands for any text inside a line,
and a line that is only ``…`` for any number of lines.  The last step (open the index in a browser)
is done in headless Chromium.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "first-ten-minutes.md"
BLOCK = re.compile(r"^```(\w*)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def _blocks() -> list[tuple[str, str]]:
    return [(kind, text) for kind, text in BLOCK.findall(PAGE.read_text(encoding="utf-8")) if kind]


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile("^" + ".*".join(re.escape(part.strip()) for part in line.split("…")) + "$")


def _matches(expected: list[str], actual: str, what: str) -> None:
    """``expected`` lines appear in ``actual`` in order; consecutive ones on consecutive lines
    unless a ``…`` line stands between them."""
    lines = [line.strip() for line in actual.splitlines()]
    at = 0
    free = True  # the next expected line may be anywhere further down
    for line in (line.strip() for line in expected):
        if not line:
            continue
        if line == "…":
            free = True
            continue
        pattern = _pattern(line)
        if free:
            found = next((k for k in range(at, len(lines)) if pattern.match(lines[k])), None)
        else:
            found = at if at < len(lines) and pattern.match(lines[at]) else None
        assert found is not None, f"{what}: expected {line!r} at or after line {at + 1} of:\n{actual}"
        at, free = found + 1, False


def _run_python(code: str, cwd: Path) -> str:
    script = cwd / "block.py"
    script.write_text(code, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _run_console(block: str, cwd: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    commands: list[tuple[str, int, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            command, _, comment = line[2:].partition("#")
            code = re.search(r"exit (\d+)", comment)
            commands.append((command.strip(), int(code.group(1)) if code else 0, []))
        elif commands:
            commands[-1][2].append(line)
    assert commands, block
    for command, code, expected in commands:
        # what a terminal shows: standard output and error, interleaved as written
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
            timeout=600,
        )
        assert done.returncode == code, f"$ {command}\nexit {done.returncode}\n{done.stdout}"
        _matches(expected, done.stdout, f"$ {command}")


def test_every_step_of_the_first_ten_minutes(tmp_path: Path, open_page: Any, screenshot: Any) -> None:
    blocks = _blocks()
    kinds = [kind for kind, _ in blocks]
    assert kinds.count("python") == 2 and kinds.count("console") == 3, kinds
    k = 0
    while k < len(blocks):
        kind, text = blocks[k]
        if kind == "python":
            output = _run_python(text, tmp_path)
            assert k + 1 < len(blocks) and blocks[k + 1][0] == "text", "a python block is followed by its output"
            _matches(blocks[k + 1][1].splitlines(), output, "python block")
            k += 2
            continue
        if kind == "console":
            _run_console(text, tmp_path)
        k += 1
    # step 6: the index in a browser, then the counterexample it links to
    index = tmp_path / "out" / "first" / "broken-verdicts" / "index.html"
    opened = open_page(index)
    page = opened.page
    page.locator("#verdicts a.html").first.click()
    page.wait_for_load_state()
    assert "not linearizable (coordinator)" in page.title()
    blocked = page.locator("svg.timeline g.op.blocked .lbl")
    assert "cannot be placed" in blocked.text_content() and "[0,99]" in blocked.text_content()
    page.click("#step-first")
    page.click("#step-next")
    assert "step 1 of" in page.locator("#step-label").text_content()
    page.click("#step-last")
    assert "refuses it" in page.locator("#step-end").text_content()
    screenshot(page, "first-ten-minutes-viewer")
    opened.check_clean()


def test_the_page_links_its_screenshot() -> None:
    text = PAGE.read_text(encoding="utf-8")
    for image in re.findall(r"\]\((img/[^)]+)\)", text):
        assert (ROOT / "docs" / image).is_file(), image


@pytest.mark.parametrize("name", ["first-ten-minutes.md", "viewer.md"])
def test_the_pages_are_in_the_docs_index(name: str) -> None:
    assert f"({name})" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
