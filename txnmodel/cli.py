"""``txnmodel``: the command line, and its one error boundary.

Exit codes, the same for every subcommand (:mod:`txnmodel.common` has the details):

* 0 -- everything checked passed;
* 1 -- a check failed (a vector mismatch, a counterexample, an unproved property, a violation);
* 2 -- bad input or usage (unreadable or invalid files, unknown machine, bad config, a value out of
  range), said in one line naming the input and the place;
* 3 -- a bug in txnmodel: one line, and the traceback in a file (or on stderr with ``--debug``).

Each subcommand lives in its own module under :mod:`txnmodel.commands`.  Heavy imports (z3,
pyspark) happen inside the subcommands that need them.  Every subcommand runs inside
:func:`guarded`, so no input, however damaged, reaches the user as a Python traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from history_io.folders import UsageError
from history_io.inputs import describe_os_error
from spec.errors import InputError
from txnmodel.commands import COMMANDS
from txnmodel.common import EXIT_BAD_INPUT, EXIT_BUG, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_PIPE_CLOSED, one_line

__all__ = ["EXIT_BAD_INPUT", "EXIT_BUG", "EXIT_FAILED", "EXIT_OK", "build_parser", "guarded", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="txnmodel",
        description="A formally checked reference for Apache Pulsar's transaction and delayed-delivery "
        "machinery. Exit codes: 0 passed, 1 a check failed, 2 bad input or usage, 3 a bug in txnmodel "
        "(its traceback is written to a file; --debug prints it).",
    )
    parser.add_argument(
        "--debug", action="store_true", help="on an internal error, print the traceback instead of writing it to a file"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


def _version() -> str:
    """The installed distribution's version (pyproject.toml's), or the source tree's when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("txnmodel")
    except PackageNotFoundError:
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code) if isinstance(exc.code, int) else EXIT_BAD_INPUT
    argv_shown = list(sys.argv[1:] if argv is None else argv)
    return guarded(f"txnmodel {args.command}", lambda: int(args.func(args)), debug=args.debug, argv=argv_shown)


def guarded(name: str, body: Callable[[], int], *, debug: bool = False, argv: Sequence[str] = ()) -> int:
    """Run ``body`` and turn whatever it raises into one line and an exit code.

    Typed input errors (:class:`~spec.errors.InputError` and its kinds, which carry the file,
    offset or JSON path), usage errors and refusals of the file system (missing, not permitted,
    full, too large) are bad input: exit 2.  An early-closed output pipe ends quietly.  Anything
    else is a bug: exit 3, with the traceback in a private file.
    """
    try:
        code = body()
        sys.stdout.flush()  # inside the boundary: a reader gone early is seen here, not at exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_PIPE_CLOSED
    except KeyboardInterrupt:
        _say(f"{name}: interrupted")
        return EXIT_INTERRUPTED
    except SystemExit as exc:  # a command's own argparse (simulate, verify) exiting on a usage error
        return int(exc.code) if isinstance(exc.code, int) else EXIT_BAD_INPUT
    except (InputError, UsageError) as exc:
        _say(f"{name}: {one_line(str(exc))}")
        return EXIT_BAD_INPUT
    except OSError as exc:
        _say(f"{name}: {one_line(describe_os_error(exc))}")
        return EXIT_BAD_INPUT
    except Exception as exc:  # the boundary: every other exception is a bug in txnmodel
        return _report_bug(name, exc, debug=debug, argv=argv)


def _report_bug(name: str, exc: BaseException, *, debug: bool, argv: Sequence[str]) -> int:
    text = "".join(traceback.format_exception(exc))
    what = one_line(f"{type(exc).__name__}: {exc}", 200)
    if debug:
        _say(text.rstrip())
        _say(f"{name}: internal error (a bug in txnmodel, not in your input): {what}")
        return EXIT_BUG
    try:
        folder = Path(tempfile.mkdtemp(prefix="txnmodel-bug-"))  # private: mode 0700, a fresh name
        where = folder / "traceback.txt"
        where.write_text(f"txnmodel {' '.join(argv)}\npython {sys.version}\n\n{text}", encoding="utf-8")
        hint = f"traceback in {where}"
    except OSError:
        hint = "the traceback could not be written to a file"
    _say(f"{name}: internal error (a bug in txnmodel, not in your input): {what}; {hint}; txnmodel --debug prints it")
    return EXIT_BUG


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr itself closed: nothing left to tell
        print(line, file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (a test's capture)
        pass


if __name__ == "__main__":
    raise SystemExit(main())
