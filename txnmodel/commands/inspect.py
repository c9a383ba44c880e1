"""``txnmodel inspect``: decode ledger stores, ledgers and entries."""

from __future__ import annotations

import argparse
import errno
import json
import os
import stat
import sys
from pathlib import Path

from history_io.inputs import file_kind, printable, read_input_bytes
from spec.errors import InputError
from txnmodel.common import EXIT_BAD_INPUT, EXIT_OK, one_line, print_json

# One raw entry: Pulsar's largest message is maxMessageSize (5 MB by default); hex doubles it.
RAW_ENTRY_LIMIT = 64 * 1024 * 1024


def cmd_inspect(args: argparse.Namespace) -> int:
    """A ledger directory, one entry of it, a ledger file, a METADATA file, or a raw entry file."""
    from google.protobuf import json_format

    from engine.storage.inspect import inspect_path, render_text
    from spec.envelope import LogKind, decode_entry
    from spec.types import Position

    path = Path(args.path)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            why = "a symbolic link loop (a link that leads back to itself); expected a file or a folder"
        elif path.is_symlink():
            why = f"a symbolic link to {printable(os.readlink(path))}, which does not exist"
        else:
            why = "no such file or folder" if exc.errno == errno.ENOENT else (exc.strerror or str(exc))
        print(f"txnmodel inspect: {printable(path)}: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):  # a FIFO would block, a device never end
        raise InputError(f"not a file or a folder ({file_kind(mode)})", where=printable(path))
    kind = LogKind(args.kind) if args.kind else None
    position = None
    if args.entry:
        try:
            ledger_id, entry_id = (int(part) for part in args.entry.split(":"))
            position = Position(ledger_id, entry_id)
        except ValueError:
            print(f"txnmodel inspect: --entry takes LEDGER:ENTRY, got {args.entry!r}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if path.is_dir() or args.entry or (not args.hex and kind is None):
        try:
            report = inspect_path(path, entry=position, kind=kind)
        except (InputError, OSError) as exc:
            print(f"txnmodel inspect: {one_line(str(exc))}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if args.json:
            print_json(report)
        else:
            print(render_text(report))
        one = report.get("entry", report)
        damaged = report.get("ok") is False or (
            report.get("kind") in ("entry", "directory_entry")
            and not one.get("decoded")
            and one.get("message") is None  # neither a log record nor a message
        )
        if damaged:  # the one line every exit 2 ends with, whatever was printed above it
            print(f"txnmodel inspect: {path}: damaged: {one_line(_first_damage(report))}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return EXIT_OK
    # One raw entry of a known kind: decode strictly, so damage is a typed error with its offset.
    raw = read_input_bytes(path, limit=RAW_ENTRY_LIMIT, limit_name="RAW_ENTRY_LIMIT")
    if args.hex:
        try:
            raw = bytes.fromhex(raw.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError) as exc:
            print(f"txnmodel inspect: {path}: not hex: {one_line(str(exc))}", file=sys.stderr)
            return EXIT_BAD_INPUT
    kind = kind or LogKind.TRANSACTION_LOG
    try:
        entry = decode_entry(raw, kind, where=str(path))
    except InputError as exc:
        print(f"txnmodel inspect: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    records = [
        json_format.MessageToDict(r, preserving_proto_field_name=True, use_integers_for_enums=False)
        for r in entry.records
    ]
    if args.json:
        print_json(
            {"batched": entry.batched, "version": entry.version, "batch_size": entry.batch_size, "records": records}
        )
    else:
        head = f"batched entry, version {entry.version}, {entry.batch_size} records" if entry.batched else "plain entry"
        print(f"{path}: {head} ({kind.value})")
        for index, record in enumerate(records):
            print(f"  [{index}] {json.dumps(record, sort_keys=True)}")
    return EXIT_OK


def _first_damage(report: dict[str, object]) -> str:
    """The first error a report holds (a store's journal, a managed ledger, a ledger file, an
    entry), for the one line an exit 2 ends with."""
    stack: list[object] = [report]
    while stack:
        item = stack.pop(0)
        if isinstance(item, dict):
            for key in ("journal_error", "error"):
                error = item.get(key)
                if isinstance(error, dict) and error.get("message"):
                    return str(error["message"])
            stack.extend(value for value in item.values() if isinstance(value, dict | list))
        elif isinstance(item, list):
            stack.extend(item)
    entry = report.get("entry", report)
    return "neither a log record nor a message" if isinstance(entry, dict) else "damaged"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    inspect_ = sub.add_parser(
        "inspect",
        help="decode a ledger directory, ledger file or entry and print it",
        description="Decode a file ledger directory (every ledger, frame, CRC and record; --entry L:E for one "
        "entry), a ledger file, a METADATA file, or one raw transaction-log / pending-ack entry (bytes, or hex "
        "with --hex): the PIP-160 envelope if present and every record. Damage is reported with its file and "
        "byte offset (exit 2).",
    )
    inspect_.add_argument("path", help="a ledger directory, a ledger or METADATA file, or a file holding one entry")
    inspect_.add_argument("--entry", metavar="LEDGER:ENTRY", help="one entry of a ledger directory")
    inspect_.add_argument(
        "--kind", choices=["transaction_log", "pending_ack"], help="the log the entry belongs to (default: try both)"
    )
    inspect_.add_argument("--hex", action="store_true", help="the file holds one entry as hex text")
    inspect_.add_argument("--json", action="store_true", help="machine-readable output")
    inspect_.set_defaults(func=cmd_inspect)
