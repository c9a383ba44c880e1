"""Shared pieces of the conformance harness's tests: how to start the served reference and friends."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
TXNMODEL = str(Path(PYTHON).parent / "txnmodel")


def serve_reference(machine: str) -> str:
    """The ``--impl`` command line of the reference served over stdio."""
    return f"{shlex.quote(PYTHON)} -m txnmodel.cli conform --serve-reference {machine}"


def python_child(code: str) -> str:
    """The ``--impl`` command line of a Python child running ``code``."""
    return f"{shlex.quote(PYTHON)} -c {shlex.quote(code)}"


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "out"
