"""docs/spec/conform-vocabulary.md is what conformance/vocabulary.py generates today."""

from __future__ import annotations

from conformance.vocabulary import render_all
from tests.conform.conftest import ROOT


def test_the_vocabulary_page_is_up_to_date() -> None:
    page = ROOT / "docs" / "spec" / "conform-vocabulary.md"
    assert page.read_text(encoding="utf-8") == render_all(), (
        "regenerate it: .venv/bin/python -m conformance.vocabulary > docs/spec/conform-vocabulary.md"
    )
