"""Hypothesis profiles.  Pick one with HYPOTHESIS_PROFILE (default ``ci``).

* ``ci`` — fast and derandomized, so a CI run is repeatable and stays inside its time budget;
* ``dev`` — a little more than ci, random seeds, for local work;
* ``thorough`` — the nightly profile: many more examples and longer stateful runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough",
    max_examples=2000,
    stateful_step_count=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# --- headless Chromium for the tests of generated pages (tests/viewer, tests/docs) -------------------
#
# Debian's ``chromium`` driven by Playwright.  ``make test`` installs Chromium when it is missing
# (the Makefile's ``chromium`` target) and Playwright comes from the ``dev`` extra; Playwright's
# own browser download is never used: the tests launch the system binary (``TXNMODEL_CHROMIUM``,
# default ``/usr/bin/chromium``) with a fresh profile directory.  A browser that cannot start
# fails the tests; it never skips them.

CHROMIUM = os.environ.get("TXNMODEL_CHROMIUM", "/usr/bin/chromium")
# What Debian's Chromium needs to run headless as root in a container, offline and quiet.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = Path(__file__).resolve().parents[1] / "out" / "screenshots"  # git-ignored; docs/img has copies


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """One Chromium per test process, with a fresh --user-data-dir."""
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"no Chromium at {CHROMIUM}: `make test` installs Debian's chromium (apt-get install -y chromium); "
            f"set TXNMODEL_CHROMIUM to use another binary",
            pytrace=False,
        )
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="txnmodel-chromium-")
    try:
        with sync_playwright() as playwright:
            try:
                # Playwright passes the profile as --user-data-dir itself (it refuses the flag in args)
                context = playwright.chromium.launch_persistent_context(
                    profile,
                    executable_path=CHROMIUM,
                    headless=True,
                    args=FLAGS,
                    viewport={"width": 1400, "height": 1000},
                )
            except Exception as exc:  # the browser did not start: say why, loudly
                pytest.fail(f"Chromium at {CHROMIUM} did not start: {exc}", pytrace=False)
            yield context
            context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class Opened:
    """A page opened from a file, with everything it asked the network for and every script error."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.requests: list[str] = []
        self.errors: list[str] = []
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("console", lambda message: self.errors.append(message.text) if message.type == "error" else None)

    def check_clean(self) -> None:
        """No script error, and nothing loaded but the page's own files."""
        assert not self.errors, self.errors
        foreign = [url for url in self.requests if not url.startswith(("file://", "data:", "about:"))]
        assert not foreign, foreign


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    pages: list[Opened] = []

    def opener(path: Path) -> Opened:
        opened = Opened(browser.new_page())
        opened.page.goto(path.resolve().as_uri())
        pages.append(opened)
        return opened

    yield opener
    for opened in pages:
        opened.page.close()


@pytest.fixture
def screenshot() -> Callable[[Any, str], Path]:
    """Take a full-page screenshot under out/screenshots/ (written whole, then renamed: test
    processes run in parallel)."""

    def take(page: Any, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        target = SHOTS / f"{name}.png"
        fd, partial = tempfile.mkstemp(dir=SHOTS, prefix=".partial-", suffix=".png")
        os.close(fd)
        page.screenshot(path=partial, full_page=True)
        os.chmod(partial, 0o644)
        os.replace(partial, target)
        return target

    return take
