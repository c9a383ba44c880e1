"""``txnmodel conform``: check an implementation of a machine against the reference, over stdio."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from spec.errors import InputError
from spec.machines import MACHINES
from txnmodel.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    one_line,
    positive_float,
    positive_int,
    print_json,
    seed_int,
)

MACHINE_NAMES = [m.name for m in MACHINES]


def cmd_conform(args: argparse.Namespace) -> int:
    if args.serve_reference:
        from conformance.serve import serve

        return serve(args.serve_reference, sys.stdin.buffer, sys.stdout.buffer)
    if not args.machine or args.impl is None:
        print("txnmodel conform: usage: --machine NAME --impl COMMAND, or --serve-reference NAME", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        argv = shlex.split(args.impl)
    except ValueError as exc:
        print(f"txnmodel conform: --impl: cannot split {args.impl!r} into words: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not argv:
        print("txnmodel conform: --impl: the command is empty", file=sys.stderr)
        return EXIT_BAD_INPUT
    return _check(args, argv)


def _check(args: argparse.Namespace, argv: list[str]) -> int:
    from conformance.implementation import Subprocess
    from conformance.run import Options, conform, load_vectors

    options = Options(
        machine=args.machine,
        implementation=args.impl,
        seed=args.seed,
        examples=args.examples,
        max_steps=args.steps,
        vectors=args.vectors or None,
        out=Path(args.out),
    )
    try:
        vectors = load_vectors(options)
    except InputError as exc:
        print(f"txnmodel conform: invalid input: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        channel = Subprocess(argv, timeout=args.step_timeout)
    except OSError as exc:
        print(f"txnmodel conform: --impl: cannot start {argv[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with ExitStack() as stack:
        progress = stack.enter_context(_progress(enabled=not args.json and not args.no_progress))
        report = conform(options, channel, progress, vectors)
    if args.json:
        print_json(report.to_json())
    else:
        _print(report)
    return EXIT_OK if report.passed else EXIT_FAILED


def _print(report: Any) -> None:
    vectors = report.vectors
    passed = sum(v.passed for v in vectors)
    skipped = [v for v in vectors if v.skipped]
    failed = [v for v in vectors if not v.passed and not v.skipped]
    print(f"conform {report.machine}: {report.implementation}")
    for v in failed:
        print(f"FAIL vector {v.vector_id}: {v.mismatch}")
    print(f"vectors: {passed} passed, {len(failed)} failed, {len(skipped)} skipped")
    for v in skipped:
        print(f"     skipped {v.vector_id}: {v.skipped}")
    print(
        f"properties: {report.examples} runs compared"
        + (f", {report.shrinks} while shrinking" if report.shrinks else "")
    )
    if report.verdict == "pass":
        print("PASS: the implementation answered every vector and every run as the reference does")
        return
    print(f"FAIL ({report.verdict}): {report.message}")
    if report.files:
        print(f"counterexample ({report.steps} vector steps):")
        for name in report.files:
            print(f"  {name}")


class _Reporting:
    """Progress on standard error through :class:`views.progress.Reporter`."""

    def __init__(self, enabled: bool) -> None:
        from views.progress import Reporter

        self.reporter = Reporter(enabled=enabled)
        self._phase: Any = None
        self._stack = ExitStack()

    def __enter__(self) -> _Reporting:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def vectors(self, total: int) -> Callable[[Any], None]:
        phase = self._stack.enter_context(self.reporter.phase("vectors", total=total, unit="vectors"))
        return lambda outcome: phase.advance(note=outcome.vector_id)

    def runs(self, examples: int) -> Callable[[Any], None]:
        phase = self._stack.enter_context(self.reporter.phase("properties", total=examples, unit="runs"))

        def seen(explored: Any) -> None:
            note = f"shrinking: {explored.shrinks} runs" if explored.divergence is not None else None
            phase.update(done=min(explored.examples, examples), note=note)

        return seen

    def done(self) -> None:
        self._stack.close()
        self._stack = ExitStack()


def _progress(*, enabled: bool) -> _Reporting:
    return _Reporting(enabled)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conform = sub.add_parser(
        "conform",
        help="check an implementation of a machine, in any language, against the reference",
        description="Run an implementation of one machine as a child process speaking the conformance "
        "protocol (docs/spec/conform.md) on its standard input and output: first every conformance vector "
        "of the machine, then command sequences generated from the machine's stateful-test strategies "
        "(crashes and recoveries included), each run on the reference and on the implementation with every "
        "answer and observation compared. A difference is shrunk to a vector file and a viewer page under "
        "--out. Exit 0 all agree, 1 a difference or a failing implementation, 2 bad usage or input.",
    )
    conform.add_argument("--machine", choices=MACHINE_NAMES, help="the machine the implementation implements")
    conform.add_argument("--impl", metavar="COMMAND", help='the implementation\'s command line, e.g. "java -cp out Tc"')
    conform.add_argument(
        "--serve-reference",
        choices=MACHINE_NAMES,
        metavar="NAME",
        help="instead: speak the protocol over stdio as the reference machine NAME",
    )
    conform.add_argument("--seed", type=seed_int, default=0, help="seed of the generated runs (default 0)")
    conform.add_argument("--examples", type=positive_int, default=100, help="generated runs to compare (default 100)")
    conform.add_argument("--steps", type=positive_int, default=50, help="at most this many steps a run (default 50)")
    conform.add_argument(
        "--step-timeout",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="time limit of one step and its observations (default 10); the handshake gets 60",
    )
    conform.add_argument(
        "--vectors",
        nargs="+",
        metavar="PATH",
        help="vector files or folders to run first (default spec/vectors/<machine>); other machines' are ignored",
    )
    conform.add_argument(
        "--out", default=str(Path("out") / "conform"), help="where a counterexample goes (out/conform/<machine>/)"
    )
    conform.add_argument("--json", action="store_true", help="machine-readable summary on stdout")
    conform.add_argument("--no-progress", action="store_true", help="no progress on stderr (--json implies it)")
    conform.set_defaults(func=cmd_conform)
