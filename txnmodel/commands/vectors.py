"""``txnmodel vectors run``: conformance vectors against the reference."""

from __future__ import annotations

import argparse
import sys

from spec.errors import InputError
from txnmodel.common import DEFAULT_VECTORS, EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, one_line, print_json


def cmd_vectors_run(args: argparse.Namespace) -> int:
    from runners.vectors import run_paths

    paths = args.paths or [str(DEFAULT_VECTORS)]
    try:
        results = run_paths(paths)
    except InputError as exc:
        print(f"txnmodel vectors: invalid input: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    failed = [r for r in results if not r.passed]
    if args.json:
        print_json(
            {"passed": len(results) - len(failed), "failed": len(failed), "results": [r.to_json() for r in results]}
        )
    else:
        for r in results:
            status = "PASS" if r.passed else "FAIL"
            print(f"{status} {r.machine:<12} {r.vector_id} ({r.steps} steps)")
            if r.mismatch is not None:
                print(f"     {r.path}: {r.mismatch}")
        print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return EXIT_FAILED if failed else EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    vectors = sub.add_parser("vectors", help="conformance vectors", description="Conformance vectors.")
    vsub = vectors.add_subparsers(dest="vectors_command", required=True, metavar="ACTION")
    vrun = vsub.add_parser(
        "run",
        help="run vector files or folders against the reference",
        description="Run conformance vectors (JSON files, or folders searched for *.json) against the "
        "reference machines. Each vector is reported PASS or FAIL with its first mismatch "
        "(step index, expected, actual). Exit 0 all pass, 1 any fails, 2 unreadable or invalid input.",
    )
    vrun.add_argument("paths", nargs="*", metavar="PATH", help=f"files or folders (default {DEFAULT_VECTORS})")
    vrun.add_argument("--json", action="store_true", help="machine-readable output")
    vrun.set_defaults(func=cmd_vectors_run)
