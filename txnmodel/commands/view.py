"""``txnmodel view``: draw a model checker's counterexample trace as a self-contained HTML page."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from history_io.inputs import describe_os_error, printable, read_json_input
from spec.errors import InputError
from txnmodel.common import EXIT_BAD_INPUT, EXIT_OK, one_line

# A trace is a model checker's counterexample: states step by step.  Bounded before it is parsed.
MAX_TRACE_BYTES = 64 * 1024 * 1024
MAX_TRACE_DEPTH = 64


def cmd_view(args: argparse.Namespace) -> int:
    from proofs.check.trace_format import Trace
    from views.trace import trace_page

    source = Path(args.trace)
    try:
        data = read_json_input(source, limit=MAX_TRACE_BYTES, limit_name="MAX_TRACE_BYTES", max_depth=MAX_TRACE_DEPTH)
        trace = Trace.from_json(data, where=printable(source))
    except OSError as exc:
        print(f"txnmodel view: cannot read {printable(source)}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InputError as exc:
        print(f"txnmodel view: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = Path(args.out) if args.out else source.with_suffix(".html")
    if _same_file(source, out):
        print(
            f"txnmodel view: {printable(out)}: the page would overwrite its own input, the trace; expected another "
            "path (--out PAGE.html)",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(trace_page(trace), encoding="utf-8")
    except OSError as exc:
        print(f"txnmodel view: cannot write the page: {describe_os_error(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"counterexample page: {printable(out)}")
    return EXIT_OK


def _same_file(source: Path, out: Path) -> bool:
    """Whether writing ``out`` would replace ``source`` (the same name, or another name of the same
    file: a link, a path through a link)."""
    if os.path.realpath(source) == os.path.realpath(out):
        return True
    try:
        return os.path.samefile(source, out)
    except OSError:
        return False  # ``out`` does not exist yet


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    view = sub.add_parser(
        "view",
        help="draw a model-checking counterexample trace (JSON) as an HTML page",
        description="Read a counterexample trace in the txnmodel-trace JSON shape (docs/viewer.md) and write a "
        "self-contained HTML page that steps through it, each component's state change highlighted. Exit 0 "
        "written, 2 unreadable or not a trace (the message names the JSON path).",
    )
    view.add_argument("trace", help="a trace JSON file")
    view.add_argument("--out", help="the page to write (default: the trace's path with .html)")
    view.set_defaults(func=cmd_view)
