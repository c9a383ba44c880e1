"""docs/spec/conform-vocabulary.md is what conformance/vocabulary.py generates today."""

from __future__ import annotations

from conformance.vocabulary import render_all
from tests.conform.conftest import ROOT


def test_the_vocabulary_page_is_up_to_date() -> None:
    page = ROOT / "docs" / "spec" / "conform-vocabulary.md"
    assert page.read_text(encoding="utf-8") == render_all(), (
        "regenerate it: .venv/bin/python -m conformance.vocabulary > docs/spec/conform-vocabulary.md"
    )


def test_the_python_adapter_on_the_docs_page_is_the_example_file() -> None:
    page = (ROOT / "docs" / "conform.md").read_text(encoding="utf-8")
    block = page.split("### In Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    source = (ROOT / "examples" / "python" / "client_adapter.py").read_text(encoding="utf-8")
    assert block.strip() == source.split('"""', 2)[2].strip()
    lines = [line for line in block.splitlines() if line.strip()]
    assert f"### In Python: {len(lines)} lines" in page
