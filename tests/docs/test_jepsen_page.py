"""docs/jepsen.md, checked: every anomaly of the taxonomy has a section, and each section's example
history, read as the page gives it, makes txnmodel report that anomaly, failing the history or only
informing as the section says (with ``--ww-deps`` where it says so)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from history_io.edn import parse_edn
from invariants.queue import QUEUE_ANOMALIES
from invariants.transactional import check_transactional

PAGE = Path(__file__).resolve().parents[2] / "docs" / "jepsen.md"
SECTION = re.compile(r"^### `([\w-]+)`\n\n(.*?)```clojure\n(.*?)```", re.S | re.M)
SECTIONS = {name: (words, example) for name, words, example in SECTION.findall(PAGE.read_text(encoding="utf-8"))}


def test_every_anomaly_has_its_section() -> None:
    assert set(SECTIONS) == set(QUEUE_ANOMALIES) | {"garbage-read"}


@pytest.mark.parametrize("name", sorted(SECTIONS))
def test_the_example_shows_its_anomaly(name: str) -> None:
    words, example = SECTIONS[name]
    assert len(example.strip().splitlines()) <= 5, "a few lines, as the page promises"
    ww_deps = words.startswith("With `--ww-deps`")
    result = check_transactional(parse_edn(example, history="page"), ww_deps=ww_deps)
    if "Fails" in words:
        assert name in result.counts and not result.ok, (name, result.counts)
    else:
        assert "informs" in words.lower() and name in result.notes and name not in result.counts, (name, result.notes)
    if "informs with `--ww-deps`" in words:
        assert name in check_transactional(parse_edn(example, history="page"), ww_deps=True).notes
    if "informs once a process has `:subscribe`d" in words:
        subscribed = (
            "{:process 9, :type :invoke, :f :subscribe, :value [:x]} "
            "{:process 9, :type :ok, :f :subscribe, :value [:x]}\n"
        )
        assert name in check_transactional(parse_edn(subscribed + example, history="page")).notes
