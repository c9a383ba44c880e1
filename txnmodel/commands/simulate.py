"""``txnmodel simulate``: seeded fault simulation of the engine, writing histories."""

from __future__ import annotations

import argparse


def _add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    from reference.engine.simulate import build_parser

    build_parser(parser)


def _run_simulate(args: argparse.Namespace) -> int:
    from reference.engine.simulate import WORKLOADS, run_simulate
    from txnmodel.progress import Reporter

    workloads = len(WORKLOADS) if args.workload == "all" else 1
    progress = Reporter(enabled=not args.quiet)
    with progress.phase("simulate", total=workloads * args.histories, unit="histories") as phase:
        return run_simulate(args, progress=phase)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    simulate = sub.add_parser(
        "simulate",
        help="simulate workloads with faults and record histories (engine)",
        description="Run named workloads (ctp: consume-transform-produce across topics; multi: atomic "
        "multi-partition produce; delayed: delayed delivery mixed with transactions) on the broker built from the "
        "reference machines, under a seeded scheduler that injects faults (broker and coordinator crashes, ledger "
        "failures, lost/delayed/duplicated requests and responses, transaction timeouts). Same seed, same history, "
        "byte for byte. Histories go to --out as Parquet. Progress goes to stderr (a live bar on a terminal, a line "
        "at least every 10 s otherwise). Exit 0 when every run finished (and with --check was clean), 1 otherwise.",
    )
    _add_simulate_arguments(simulate)
    simulate.set_defaults(func=_run_simulate)
