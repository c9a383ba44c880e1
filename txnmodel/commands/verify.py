"""``txnmodel verify``: check recorded histories."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from invariants.bulk import add_verify_arguments

    verify = sub.add_parser(
        "verify",
        help="check recorded histories: linearizability per object and transactional properties (Spark)",
        description="Check a folder of histories (Parquet, JSON Lines, or Jepsen logs) on Spark: linearizability "
        "of each object against its model, and the transactional properties of the whole history. Local mode is the "
        "default; --master takes a cluster URL unchanged. Exit 0 all ok, 1 a violation or an unknown verdict, 2 bad "
        "input. Progress goes to stderr (a live bar on a terminal, a line at least every 10 s otherwise).",
    )
    add_verify_arguments(verify)
    verify.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from invariants.bulk import run_verify
    from txnmodel.progress import Reporter

    return run_verify(args, Reporter(enabled=not args.no_progress))
