"""``txnmodel verify``: check recorded histories, on Spark or in this process.

The job:

1. lists the history files under PATH (``--format parquet|jsonl|jepsen``);
2. checks them where it pays (:func:`runners.spark.use_spark`): on Spark
   (:mod:`runners.spark`; at ``--master URL``, passed unchanged, or ``local[<cores>]``)
   with ``--spark``, or when the input holds enough operations to pay for starting Spark and a
   master is named or there is more than one core; in this process (:mod:`runners.file_checks`)
   with ``--local``, for a small input, or on one core without a master.
   Each history gets every checker that applies (:mod:`invariants.verify`).  A history lives in
   one file (a file may hold many), unless ``--group-by-history``: then rows are grouped by
   history across files before checking;
3. each task (or, in this process, each file) writes its verdict rows to the Parquet dataset
   ``OUT/verdicts.parquet/`` and its counterexamples to ``OUT/counterexamples/`` (text and
   HTML); this process prints a summary.

Exit codes (:mod:`txnmodel.common`): 0 every history passed every checker that had something to
judge (a checker with nothing to judge is ``skipped``: said, not a failure); 1 a safety violation
(``illegal``), an ``error`` (a model or machine raised: a programming error, reported with its
traceback), a liveness miss (``late``: a bound the history or the checker states, missed) unless
``--late-ok``, or an ``unknown`` verdict (a budget ran out: nothing was proved, so a CI gate must not
pass) unless ``--unknown-ok``; 2 bad input (a file or row that breaks the history contract, an
unknown model or format, an input without a single operation, a non-empty ``--out`` without
``--overwrite``), which wins over 1 because the verdicts of bad input mean nothing.

:func:`verify` is the command as a function (what ``txnmodel run`` calls).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from invariants.verify import Outcome, VerdictRow, VerifyOptions, duplicate_histories
from txnmodel.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, one_line, positive_float, positive_int, spark_master

__all__ = [
    "DEFAULT_OUT",
    "VerifyRequest",
    "VerifyResult",
    "add_arguments",
    "build_parser",
    "register",
    "report",
    "run_verify",
    "verify",
]

DEFAULT_OUT = "out/verdicts"


@dataclass(frozen=True)
class VerifyRequest:
    """What to verify and how: the arguments of ``txnmodel verify`` as values."""

    path: str
    format: str = "parquet"
    options: VerifyOptions = field(default_factory=VerifyOptions)
    out: str = DEFAULT_OUT
    master: str | None = None  # a Spark master URL; None: local[<cores>] when Spark is used
    mode: str = "auto"  # auto | local | spark (see runners.spark.use_spark)
    group_by_history: bool = False
    unknown_ok: bool = False
    late_ok: bool = False
    overwrite: bool = False  # accept a non-empty ``out``, replacing what verify writes there
    progress: bool = True
    json: bool = False
    # where progress goes (a views.progress.Reporter); None: a Reporter of its own on stderr
    reporter: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class VerifyResult:
    """The exit code, every verdict row, and the wall-clock seconds of the whole verification."""

    exit_code: int
    rows: tuple[VerdictRow, ...] = ()
    seconds: float = 0.0


def verify(request: VerifyRequest) -> VerifyResult:
    """List, check, write and report; never raises on bad input (exit code 2 instead)."""
    from history_io.files import history_files
    from history_io.inputs import printable
    from invariants.models import model_by_name
    from spec.errors import InputError
    from spec.history import BadHistory

    started = time.perf_counter()
    out = Path(request.out)
    try:
        out_dir = Path(os.path.realpath(out))
        # never read our own output back as input (an --out folder inside PATH); realpath, which
        # never raises, since a listed name may be a link loop that its reader refuses by name
        files = [
            str(p)
            for p in history_files(request.path, request.format)
            if out_dir not in Path(os.path.realpath(p)).parents
        ]
        if not files:
            raise BadHistory(
                f"no {request.format} history files outside the output folder {printable(out_dir)}",
                where=printable(request.path),
            )
        if request.options.model != "auto":
            model_by_name(request.options.model)
    except InputError as exc:
        print(f"txnmodel verify: invalid input: {one_line(str(exc))}", file=sys.stderr)
        return VerifyResult(EXIT_BAD_INPUT)
    except KeyError as exc:
        print(f"txnmodel verify: {exc.args[0]}", file=sys.stderr)
        return VerifyResult(EXIT_BAD_INPUT)
    options = request.options
    if request.format == "jepsen" and options.model == "auto":
        options = dataclasses.replace(options, model="cas-register")
    from history_io.folders import UsageError, exclusive_folder
    from views.progress import Reporter

    reporter = request.reporter if request.reporter is not None else Reporter()
    if not request.progress:
        reporter = Reporter(enabled=False)
    with contextlib.ExitStack() as held:
        try:  # checked before any work: never a silent overwrite of an earlier run's verdicts
            held.enter_context(exclusive_folder(out, "--out", overwrite=request.overwrite, ours=_ours))
        except UsageError as exc:
            print(f"txnmodel verify: {one_line(str(exc))}", file=sys.stderr)
            return VerifyResult(EXIT_BAD_INPUT)
        rows = _check(request, files, options, reporter)
        return report(request, rows, time.perf_counter() - started)


def _ours(entry: Path) -> bool:
    """What ``verify`` writes in its ``--out`` (``--overwrite`` replaces these, and nothing else)."""
    from runners.verdicts import INDEX, PAGES, VERDICTS

    return entry.name in (VERDICTS, PAGES, INDEX)


def report(request: VerifyRequest, rows: Sequence[VerdictRow], elapsed: float) -> VerifyResult:
    """The end of a verification whose rows are in (each part already written under
    ``request.out``): the index and every counterexample's page, then the report on standard output
    (text, or JSON with ``request.json``); returns the exit code with the rows."""
    from runners.verdicts import write_index
    from views.summary import applicability_lines, history_results, print_report, summarize

    out = Path(request.out)
    written = write_index(out, rows)
    code = exit_code(rows, unknown_ok=request.unknown_ok, late_ok=request.late_ok)
    summary = summarize(rows, elapsed)
    if request.json:
        json.dump(
            {
                "exit_code": code,
                "histories": history_results(rows),
                "summary": summary.to_json(),
                "index": str(out / "index.html"),
                "counterexample_files": [str(path) for path in written],
            },
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
    else:
        print_report(rows, summary, out, written)
        for line in applicability_lines(rows):
            print(line)
    if code == EXIT_BAD_INPUT:  # the one line every exit 2 ends with, whatever else was printed
        bad = [row for row in rows if row.verdict == Outcome.BAD_INPUT.value]
        if not bad:
            first = next((row.detail for row in rows if row.detail), "no history in the input")
            print(f"txnmodel verify: nothing to check: {one_line(first)}", file=sys.stderr)
        else:
            first = next((row.detail for row in bad if row.detail), bad[0].history)
            print(
                f"txnmodel verify: bad input in {len(bad)} of {len(rows)} verdicts; first: {one_line(first)}",
                file=sys.stderr,
            )
    return VerifyResult(code, tuple(rows), elapsed)


def _check(request: VerifyRequest, files: list[str], options: VerifyOptions, reporter: Any) -> list[VerdictRow]:
    """Check the files where it pays (in this process or on Spark) and write every verdict under
    ``request.out``: each task writes its own part, and this process adds the histories found in
    two files.  Returns the verdict rows without their HTML pages."""
    from runners.file_checks import check_files_local
    from runners.spark import use_spark
    from runners.verdicts import clear_verdicts, write_part
    from txnmodel.commands.simulate import reproduce_command

    out = Path(request.out)
    clear_verdicts(out)
    out.mkdir(parents=True, exist_ok=True)
    cores = os.cpu_count() or 1
    spark, why = use_spark(files, request.format, request.mode, request.master, cores)
    grouped = request.group_by_history
    reporter.say(f"verify: {'on Spark' if spark else 'in this process'} ({why})")
    if spark:
        from runners.spark import check_files_spark, spark_session

        master = request.master or f"local[{cores}]"
        with reporter.phase("verify: start Spark", unit=""):
            session = spark_session(master)  # a JVM starts: tens of seconds on a busy machine
        with reporter.phase(f"verify on Spark ({master})", unit="tasks") as phase:
            rows = check_files_spark(
                files,
                request.format,
                options,
                master=master,
                progress=phase,
                spark=session,
                group_by_history=grouped,
                out=str(out.resolve()),
                reproduce=reproduce_command,
            )
    else:
        from runners.file_checks import operations_in

        # in operations where the files' footers say how many (progress inside a long history)
        total = None if grouped else operations_in(files, request.format)
        unit = "files" if total is None else "operations"
        with reporter.phase("verify", total=len(files) if total is None else total, unit=unit) as phase:
            rows = check_files_local(
                files,
                request.format,
                options,
                progress=phase,
                group_by_history=grouped,
                out=str(out),
                reproduce=reproduce_command,
            )
    if not grouped:
        duplicates = duplicate_histories(rows)
        if duplicates:
            rows = list(rows) + write_part(out, "duplicates", duplicates)
    return list(rows)


def request_from_args(args: argparse.Namespace) -> VerifyRequest:
    return VerifyRequest(
        path=args.path,
        format=args.format,
        options=VerifyOptions(
            model=args.model,
            step_budget=args.budget,
            seconds=args.seconds,
            counterexamples=not args.no_counterexamples,
            memory_mb=args.memory,
            ww_deps=args.ww_deps,
        ),
        out=args.out,
        master=args.master,
        mode="local" if args.local else "spark" if args.spark else "auto",
        group_by_history=args.group_by_history,
        unknown_ok=args.unknown_ok,
        late_ok=args.late_ok,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        json=args.json,
    )


def run_verify(args: argparse.Namespace) -> int:
    """The subcommand: parsed arguments in, exit code out."""
    if args.local and args.master:
        print("txnmodel verify: --local checks in this process; it takes no --master", file=sys.stderr)
        return EXIT_BAD_INPUT
    return verify(request_from_args(args)).exit_code


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``txnmodel verify``."""
    parser.add_argument("path", metavar="PATH", help="a history file, or a folder searched for them")
    parser.add_argument(
        "--format",
        choices=["parquet", "jsonl", "jepsen", "edn"],
        default="parquet",
        help="history format (default parquet; jepsen: Jepsen etcd logs; edn: Jepsen's history.edn, register, "
        "cas-register, set, queue and Kafka workloads)",
    )
    parser.add_argument(
        "--ww-deps",
        action="store_true",
        help="Kafka-workload histories: infer write-write dependencies from offsets, as Jepsen's :ww-deps (G0 is "
        "then looked for, and G1c becomes informational)",
    )
    parser.add_argument(
        "--model",
        default="auto",
        help="linearizability model: register / cas-register (Jepsen registers), kv, or a reference "
        "machine (coordinator, buffer, pending_ack, delayed); auto (default) picks a generic "
        "model from the objects, and transactional histories get the Elle-style checks",
    )
    parser.add_argument(
        "--master",
        type=spark_master,
        default=None,
        help="Spark master URL, passed unchanged (spark://HOST:PORT for a standalone cluster), for when Spark is "
        "used: with --spark, or for an input large enough to pay for it",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="check in this process, whatever the input's size")
    where.add_argument(
        "--spark",
        action="store_true",
        help="check on Spark (local[<cores>] unless --master), whatever the input's size; by default Spark is "
        "used only for enough operations to pay for starting it, and with --master or more than one core",
    )
    parser.add_argument(
        "--group-by-history",
        action="store_true",
        help="histories may be spread over several files (Spark part files): group rows by history "
        "across files with a shuffle before checking (default: a history lives in one file)",
    )
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        help=f"folder for verdicts.parquet, index.html and counterexamples/ (default {DEFAULT_OUT}), empty unless "
        "--overwrite",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="accept a non-empty --out: the verdicts, pages and index of an earlier run there are removed first "
        "(other files are left alone)",
    )
    parser.add_argument(
        "--budget",
        type=positive_int,
        default=2_000_000,
        help="search steps per object before the verdict is unknown (default 2,000,000)",
    )
    parser.add_argument(
        "--seconds",
        type=positive_float,
        default=60.0,
        help="wall-clock budget per history's linearizability check (default 60)",
    )
    parser.add_argument(
        "--memory",
        type=positive_int,
        default=1024,
        metavar="MB",
        help="memory budget per history's linearizability check: how much the process may grow while the "
        "search runs, in MB; past it the verdict is unknown (default 1024)",
    )
    parser.add_argument("--unknown-ok", action="store_true", help="exit 0 even if some verdict is unknown")
    parser.add_argument(
        "--late-ok",
        action="store_true",
        help="exit 0 even if some verdict is late (a liveness bound missed; safety violations still exit 1)",
    )
    parser.add_argument("--no-counterexamples", action="store_true", help="skip shrinking and rendering")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--json", action="store_true", help="print one result per history as JSON")
    return parser


HELP = "check recorded histories: linearizability per object and transactional properties (Spark)"
DESCRIPTION = (
    "Check a folder of histories (Parquet, JSON Lines, or Jepsen logs): linearizability of each "
    "object against its model (Wing-Gong-Lowe, split per object, budgeted) and the transactional properties "
    "of the whole history (read-committed, atomic visibility, no loss, no duplicates, order, delayed never "
    "early), on Spark or locally. Writes verdicts as Parquet, every counterexample as text and as an interactive "
    "HTML page, and an index.html linking them; prints the path of each. Progress goes to stderr (a live bar on a "
    "terminal, a line at least every 10 s otherwise). Verdicts: ok, skipped (nothing to judge: not a pass), late "
    "(a liveness bound missed), illegal (a safety violation), unknown, error, bad-input. Exit 0 all ok or skipped, "
    "1 a safety violation, an error, a late verdict (unless --late-ok) or an unknown one (unless --unknown-ok), 2 "
    "bad input (or nothing to check, or a non-empty --out without --overwrite)."
)


def build_parser() -> argparse.ArgumentParser:
    """A stand-alone parser of ``txnmodel verify`` (the CLI registers the same one as a subcommand)."""
    return add_arguments(argparse.ArgumentParser(prog="txnmodel verify", description=DESCRIPTION))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("verify", help=HELP, description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=run_verify)


def exit_code(rows: Iterable[VerdictRow], unknown_ok: bool = False, late_ok: bool = False) -> int:
    """2 for any bad input (it wins: verdicts on bad input mean nothing), or when nothing at all was
    checked (every file empty); 1 for a safety violation, an error, a liveness miss unless
    ``late_ok``, or an unknown verdict unless ``unknown_ok``; else 0 (``skipped``, a checker with
    nothing to judge, is said and fails nothing)."""
    rows = list(rows)
    verdicts = {Outcome(row.verdict) for row in rows}
    if Outcome.BAD_INPUT in verdicts or all(row.checker == "input" for row in rows):
        return EXIT_BAD_INPUT
    if (
        Outcome.ILLEGAL in verdicts
        or Outcome.ERROR in verdicts
        or (Outcome.LATE in verdicts and not late_ok)
        or (Outcome.UNKNOWN in verdicts and not unknown_ok)
    ):
        return EXIT_FAILED
    return EXIT_OK
