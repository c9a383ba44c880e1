"""Shared pieces of the command line: exit codes, the error boundary's message helpers, argument
types and output helpers.

Exit codes, the same for every subcommand:

* 0 (:data:`EXIT_OK`) -- everything checked passed;
* 1 (:data:`EXIT_FAILED`) -- a check failed (a vector mismatch, a counterexample, an unproved
  property, a violation);
* 2 (:data:`EXIT_BAD_INPUT`) -- bad input or usage: an unreadable, damaged or invalid file, a
  value out of range, a file system that refused (missing, not permitted, full); the one-line
  message names the input, the place (file, line, byte offset, JSON path) and what was expected;
* 3 (:data:`EXIT_BUG`) -- an unexpected exception: a bug in txnmodel, never in the input.  One
  line says so and where its traceback was written (a file in a private temporary folder);
  ``txnmodel --debug`` prints the traceback instead.

An output pipe closed early (``txnmodel prove --json | head -1``) ends the command quietly with
:data:`EXIT_PIPE_CLOSED` (141, what a shell reports for a process ended by SIGPIPE).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_BUG = 0, 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
EXIT_PIPE_CLOSED = 141  # 128 + SIGPIPE
DEFAULT_VECTORS = Path(__file__).resolve().parent.parent / "spec" / "vectors"

#: The longest message the error boundary prints; longer ones (an exception quoting its whole
#: input) are cut, saying how much was left out.
MESSAGE_LIMIT = 400

INT64_MAX = 2**63 - 1


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` on one line (line breaks and the whitespace around them become one space), at
    most ``limit`` characters; what is cut is counted, never printed."""
    flat = re.sub(r"\s*[\r\n]+\s*", " ", text).strip()
    if len(flat) <= limit:
        return flat
    return f"{flat[:limit]}... ({len(flat) - limit:,} more characters)"


def port_int(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    return _bounded_int(text, 0, 65535, "a port from 0 to 65535")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a usage error otherwise, before any work)."""
    return _bounded_int(text, 1, INT64_MAX, "a whole number from 1")


def positive_float(text: str) -> float:
    """An argparse type: a finite number above 0."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {one_line(repr(text), 60)}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {text}")
    return value


def z3_rlimit(text: str) -> int:
    """An argparse type: a Z3 resource budget (Z3 takes an unsigned 32-bit ``rlimit``)."""
    return _bounded_int(text, 1, 2**32 - 1, f"a Z3 rlimit from 1 to {2**32 - 1}")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0."""
    return _bounded_int(text, 0, INT64_MAX, "a whole number from 0")


def seed_int(text: str) -> int:
    """An argparse type: a seed, which histories store as a signed 64-bit integer."""
    return _bounded_int(text, -INT64_MAX - 1, INT64_MAX, f"a seed from {-INT64_MAX - 1} to {INT64_MAX}")


_SPARK_MASTER = re.compile(
    r"local(\[(\d+|\*)(,\d+)?\])?"  # local, local[N], local[*], local[N,F]
    r"|local-cluster\[\d+,\d+,\d+\]"
    r"|spark://[\w.-]+:\d{1,5}(,[\w.-]+:\d{1,5})*"
    r"|yarn"
    r"|k8s://(https?://)?[\w.-]+(:\d{1,5})?"
    r"|mesos://[\w.@:/-]+"
)


def spark_master(text: str) -> str:
    """An argparse type: a Spark master URL in one of the forms Spark accepts (passed on unchanged)."""
    if not _SPARK_MASTER.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected a Spark master URL (local, local[N], local[*], local-cluster[N,C,M], spark://HOST:PORT, "
            f"yarn or k8s://HOST:PORT), got {one_line(repr(text), 80)}"
        )
    return text


def _bounded_int(text: str, low: int, high: int, what: str) -> int:
    shown = one_line(repr(text), 60)
    if len(text) > 40:  # int() of a huge digit string is slow (and refused past 4300 digits)
        raise argparse.ArgumentTypeError(f"expected {what}, got {shown}")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {shown}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
    return value
