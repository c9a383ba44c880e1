"""Rule pages parse, and every rule id is traced end to end.

A rule id (``TB-7``) must appear in its page (``spec/rules/<page>.md``), in the reference that
implements it and in a test that exercises it; and every id cited anywhere in the code must exist
on a page.  This is what keeps "a rule lives once" honest as the machines grow.
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from spec.layout import PACKAGES
from spec.machines import MACHINES
from spec.rules import RULES_DIR, Rule, parse_rules

ROOT = Path(__file__).resolve().parents[2]
RULE_ID = re.compile(r"\b(TC|TB|PA|BW|DD)-(\d+)\b")
PAGES = sorted({m.rules_page for m in MACHINES})


def read_rules(page: str) -> tuple[Rule, ...]:
    path = RULES_DIR / f"{page}.md"
    return parse_rules(path.read_text(encoding="utf-8"), page) if path.exists() else ()


def _modules_of(page: str) -> list[str]:
    return [m.module for m in MACHINES if m.rules_page == page]


def _reference_files(module: str) -> list[Path]:
    """A machine's module, and the modules beside it a large machine is split into
    (``reference/<module>_*.py``, docs/contributing.md)."""
    return [ROOT / "reference" / f"{module}.py", *sorted((ROOT / "reference").glob(f"{module}_*.py"))]


def _text(paths: list[Path]) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in paths if p.is_file())


def _files(folder: Path, pattern: str = "*.py") -> list[Path]:
    return sorted(folder.rglob(pattern)) if folder.is_dir() else []


@pytest.mark.parametrize("page", PAGES)
def test_page_parses_with_unique_consecutive_sourced_rules(page: str) -> None:
    rules = read_rules(page)
    assert (RULES_DIR / f"{page}.md").exists(), f"spec/rules/{page}.md is missing"
    assert rules, f"spec/rules/{page}.md has no '### PP-n: title' rules"
    prefixes = {r.prefix for r in rules}
    expected = {m.rule_prefix for m in MACHINES if m.rules_page == page}
    assert prefixes <= expected, f"{page}.md uses prefixes {prefixes - expected}"
    numbers = [r.number for r in rules]
    assert numbers == list(range(1, len(rules) + 1)), f"{page}.md rules are not numbered 1..n in order: {numbers}"
    unsourced = [r.id for r in rules if not r.source]
    assert not unsourced, f"rules without a 'Source:' line: {unsourced}"


@pytest.mark.parametrize("page", PAGES)
def test_every_rule_is_implemented_and_tested(page: str) -> None:
    rules = read_rules(page)
    assert rules, f"spec/rules/{page}.md has no rules"
    modules = _modules_of(page)
    reference = _text([p for m in modules for p in _reference_files(m)] + _files(ROOT / "engine"))
    tests = _text([p for m in modules for p in _files(ROOT / "tests" / m)] + _files(ROOT / "tests" / "engine"))
    missing_ref = [r.id for r in rules if not re.search(rf"\b{r.id}\b", reference)]
    missing_test = [r.id for r in rules if not re.search(rf"\b{r.id}\b", tests)]
    assert not missing_ref, f"rules never named in reference/{'|'.join(modules)}[_*].py: {missing_ref}"
    assert not missing_test, f"rules never named in tests/{'|'.join(modules)}/: {missing_test}"


def test_no_code_cites_a_rule_that_does_not_exist() -> None:
    known = {r.id for page in PAGES for r in read_rules(page)}
    written_prefixes = {r.prefix for page in PAGES for r in read_rules(page)}
    dangling: dict[str, list[str]] = defaultdict(list)
    for folder in (*PACKAGES, "tests"):
        for path in _files(ROOT / folder):
            if path == Path(__file__).resolve():
                continue  # this file names ids as examples
            for match in RULE_ID.finditer(path.read_text(encoding="utf-8")):
                rule_id = match.group(0)
                if match.group(1) in written_prefixes and rule_id not in known:
                    dangling[rule_id].append(str(path.relative_to(ROOT)))
    assert not dangling, f"rule ids cited but not on any rules page: {dict(dangling)}"
