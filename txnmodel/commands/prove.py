"""``txnmodel prove``: the Z3 proofs of one machine or all."""

from __future__ import annotations

import argparse

from history_io.folders import UsageError
from txnmodel.common import EXIT_FAILED, EXIT_OK, print_json, z3_rlimit


def cmd_prove(args: argparse.Namespace) -> int:
    from proofs.framework import RLIMIT, Row, Verdict, available_machines, format_table, obligations_of, prove_machine
    from spec.machines import machine_info
    from views.progress import Phase, Reporter

    machines = available_machines() if args.machine == "all" else [args.machine]
    try:  # every usage error before the first proof
        selected = {name: obligations_of(machine_info(name).name, args.only) for name in machines}
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    if args.only is not None and not any(selected.values()):
        raise UsageError(f"no property of {args.machine} has {args.only!r} in its name (--only)")
    rows = []
    progress = Reporter(enabled=not args.json)
    for name in machines:
        with progress.phase(f"proofs: {name}", total=len(selected[name]), unit="properties") as phase:

            def proved(row: Row, phase: Phase = phase) -> None:
                phase.advance(note=row.name)

            rows.extend(prove_machine(name, rlimit=args.rlimit or RLIMIT, only=args.only, on_row=proved))
    if args.json:
        print_json([r.to_json() for r in rows])
    else:
        print(format_table(rows) if rows else "no proofs available yet")
    bad = [r for r in rows if r.verdict is not Verdict.PROVED]
    if not args.json:
        print(f"{len(rows) - len(bad)} proved, {len(bad)} not proved")
    return EXIT_FAILED if bad else EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    prove = sub.add_parser(
        "prove",
        help="prove a machine's invariants with Z3",
        description="Prove with Z3 that each invariant holds initially and is preserved by every command, "
        "and the machine's safety properties. Prints property, verdict (proved / counterexample / "
        "unknown), bound, the Z3 resources the largest query used and its margin (how many times over the "
        "budget covers it), and seconds; a counterexample is printed as a concrete state and command. Budgets "
        "are Z3 resource counts (rlimit), not seconds, so verdicts do not depend on the machine's load. "
        "Exit 0 all proved, 1 otherwise, 2 unknown machine.",
    )
    prove.add_argument("machine", nargs="?", default="all", help="a machine name, or 'all' (default)")
    prove.add_argument("--only", help="only properties whose name contains this text")
    prove.add_argument(
        "--rlimit",
        type=z3_rlimit,
        default=None,
        help="Z3 resource budget of each query (rlimit units; default the framework's RLIMIT)",
    )
    prove.add_argument("--json", action="store_true", help="machine-readable output")
    prove.set_defaults(func=cmd_prove)
