"""``txnmodel``: the command line.

Exit codes, the same for every subcommand:

* 0 — everything checked passed;
* 1 — a check failed (a vector mismatch, a counterexample, an unproved property, a violation);
* 2 — bad input or usage (unreadable or invalid files, unknown machine, bad config).

Each subcommand lives in its own module under :mod:`txnmodel.commands`.  Heavy imports (z3,
pyspark) happen inside the subcommands that need them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from txnmodel.commands import COMMANDS
from txnmodel.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

__all__ = ["EXIT_BAD_INPUT", "EXIT_FAILED", "EXIT_OK", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="txnmodel",
        description="A formally checked reference for Apache Pulsar's transaction and delayed-delivery "
        "machinery. Exit codes: 0 passed, 1 a check failed, 2 bad input or usage.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code) if isinstance(exc.code, int) else EXIT_BAD_INPUT
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
