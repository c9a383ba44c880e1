"""``txnmodel vectors run``: conformance vectors against the reference; ``txnmodel vectors
transcript``: their transcripts, checked against what the reference prints or rewritten."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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


def cmd_vectors_transcript(args: argparse.Namespace) -> int:
    from runners.transcripts import DEFAULT_TRANSCRIPTS, check_transcripts

    paths = args.paths or [str(DEFAULT_VECTORS)]
    folder = Path(args.transcripts) if args.transcripts else DEFAULT_TRANSCRIPTS
    try:
        checks = check_transcripts(paths, folder, rewrite=args.rewrite, stale=not args.paths)
    except InputError as exc:
        print(f"txnmodel vectors: invalid input: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    counts: dict[str, int] = {}
    for check in checks:
        counts[check.status] = counts.get(check.status, 0) + 1
        if check.status == "differs":
            print(f"{check.path}:{check.line}: differs from what the reference prints")
            for line in check.diff:
                print(f"    {line}")
        elif check.status == "missing":
            print(f"{check.path}: missing; --rewrite writes it")
        elif check.status == "stale":
            print(f"{check.path}: no vector has this id; --rewrite removes it")
        elif check.status in ("written", "removed"):
            print(f"{check.status} {check.path}")
    order = ("same", "written", "removed", "differs", "missing", "stale")
    print(", ".join(f"{counts[s]} {s}" for s in order if s in counts) or "no transcripts")
    return EXIT_OK if all(check.passed for check in checks) else EXIT_FAILED


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
    vtranscript = vsub.add_parser(
        "transcript",
        help="check the vectors' transcripts against the reference, or rewrite them",
        description="Each vector spec/vectors/<machine>/<id>.json has a transcript "
        "spec/transcripts/<machine>/<id>.txt: every step's command and arguments, ----, then what the "
        "reference returned, the effects and the observer checks (docs/spec/vectors.md, Transcripts). "
        "Without --rewrite, compare each transcript with what the reference prints now and print the "
        "differences (the file and first line, then a unified diff); with no PATH, transcripts no "
        "vector has are reported too. With --rewrite, write what the reference prints (and, with no "
        "PATH, remove those transcripts). Exit 0 all agree (or were written), 1 any differs, is "
        "missing or has no vector, 2 unreadable or invalid input (a vector, or a transcript that is "
        "not one: file and line).",
    )
    vtranscript.add_argument(
        "paths", nargs="*", metavar="PATH", help=f"vector files or folders (default {DEFAULT_VECTORS})"
    )
    vtranscript.add_argument("--rewrite", action="store_true", help="write the transcripts instead of checking them")
    vtranscript.add_argument(
        "--transcripts", metavar="DIR", help="the transcripts folder (default spec/transcripts beside spec/vectors)"
    )
    vtranscript.set_defaults(func=cmd_vectors_transcript)
