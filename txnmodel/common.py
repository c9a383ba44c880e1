"""Shared pieces of the command line: exit codes and output helpers."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_VECTORS = Path(__file__).resolve().parent.parent / "spec" / "vectors"


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a usage error otherwise, before any work)."""
    return _bounded_int(text, 1, None, "a whole number of at least 1")


def _bounded_int(text: str, low: int, high: int | None, what: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text[:40]!r}") from None
    if value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value
