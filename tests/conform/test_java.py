"""The Java example adapter (examples/java/coordinator), built with javac from the project's own files.

It was written from the rules pages (spec/rules/coordinator.md) and the protocol's page alone; it
passes ``conform``, and a copy of it with one planted bug is caught and shrunk.  Java 17 is on
every machine the project builds on (the Makefile's ``make test`` needs it), so these tests fail,
never skip, without ``javac``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from reference.sessions import run_vector
from tests.conform.conftest import ROOT, TXNMODEL

SOURCES = ROOT / "examples" / "java" / "coordinator"
LIMIT = 600


def build(sources: Path, into: Path) -> str:
    """Compile ``sources`` into ``into``; the adapter's command line."""
    into.mkdir(parents=True, exist_ok=True)
    javac = shutil.which("javac")
    assert javac is not None, "javac (Java 17) is needed to build the example adapter"
    done = subprocess.run(
        [javac, "-encoding", "UTF-8", "-d", str(into), *sorted(str(p) for p in sources.glob("*.java"))],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return f"java -cp {into} ConformAdapter"


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build(SOURCES, tmp_path_factory.mktemp("java") / "classes")


def conform(impl: str, out: Path, *more: str) -> dict[str, object]:
    done = subprocess.run(
        [TXNMODEL, "conform", "--machine", "coordinator", "--impl", impl, "--json", "--out", str(out), *more],
        capture_output=True,
        text=True,
        timeout=LIMIT,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    report["exit"] = done.returncode
    return report


def test_the_java_adapter_conforms(adapter: str, tmp_path: Path) -> None:
    report = conform(adapter, tmp_path / "out", "--examples", "40")
    assert report["exit"] == 0, report["message"]
    vectors = report["vectors"]
    assert isinstance(vectors, dict)
    assert vectors["failed"] == 0 and vectors["skipped"] == 0 and vectors["passed"] >= 29


def test_a_copy_with_a_planted_bug_is_caught_and_shrunk(tmp_path: Path) -> None:
    """The planted bug: after a crash the record-id counter continues two above the highest live
    record instead of one (TC-25).  Only a crash shows it."""
    copy = tmp_path / "src"
    shutil.copytree(SOURCES, copy)
    coordinator = copy / "TxnCoordinator.java"
    text = coordinator.read_text()
    planted = text.replace("nextRecordId = highest + 1;", "nextRecordId = highest + 2;")
    assert planted != text
    coordinator.write_text(planted)
    impl = build(copy, tmp_path / "classes")
    out = tmp_path / "out"
    report = conform(impl, out, "--examples", "100")
    assert report["exit"] == 1
    counterexample = report["counterexample"]
    assert isinstance(counterexample, dict)
    assert counterexample["steps"] <= 6
    vector = json.loads((out / "coordinator" / "vector.json").read_text())
    commands = [step["command"] for step in vector["steps"]]
    assert "crash" in commands and "recover" in commands
    # the reference passes the regression vector, and the buggy copy fails it
    assert run_vector(out / "coordinator" / "vector.json", vector).passed
    again = conform(impl, tmp_path / "again", "--vectors", str(out / "coordinator" / "vector.json"), "--examples", "1")
    assert isinstance(again["vectors"], dict) and again["vectors"]["failed"] == 1
