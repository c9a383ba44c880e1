"""``txnmodel``: the command line.

Exit codes, the same for every subcommand:

* 0 — everything checked passed;
* 1 — a check failed (a vector mismatch, a counterexample, an unproved property, a violation);
* 2 — bad input or usage (unreadable or invalid files, unknown machine, bad config).

Heavy imports (z3, pyspark) happen inside the subcommands that need them.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spec.errors import InputError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_VECTORS = Path(__file__).resolve().parent.parent / "spec" / "vectors"


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


# --- vectors -------------------------------------------------------------------------------------


def cmd_vectors_run(args: argparse.Namespace) -> int:
    from txnmodel.vectors import run_paths

    paths = args.paths or [str(DEFAULT_VECTORS)]
    try:
        results = run_paths(paths)
    except InputError as exc:
        print(f"txnmodel vectors: invalid input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    failed = [r for r in results if not r.passed]
    if args.json:
        _print_json(
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


# --- prove ---------------------------------------------------------------------------------------


def cmd_prove(args: argparse.Namespace) -> int:
    from proofs.framework import Verdict, available_machines, format_table, prove_machine
    from spec.machines import machine_info

    machines = available_machines() if args.machine == "all" else [args.machine]
    rows = []
    for name in machines:
        try:
            machine_info(name)
            rows.extend(prove_machine(name, timeout_ms=int(args.timeout * 1000), only=args.only))
        except KeyError as exc:
            print(f"txnmodel prove: {exc.args[0]}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.json:
        _print_json([r.to_json() for r in rows])
    else:
        print(format_table(rows) if rows else "no proofs available yet")
    bad = [r for r in rows if r.verdict is not Verdict.PROVED]
    if not args.json:
        print(f"{len(rows) - len(bad)} proved, {len(bad)} not proved")
    return EXIT_FAILED if bad else EXIT_OK


# --- inspect -------------------------------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    """A ledger directory, one entry of it, a ledger file, a METADATA file, or a raw entry file."""
    from google.protobuf import json_format

    from reference.engine.inspect import inspect_path, render_text
    from spec.envelope import LogKind, decode_entry
    from spec.types import Position

    path = Path(args.path)
    if not path.exists():
        print(f"txnmodel inspect: no such file or folder: {path}", file=sys.stderr)
        return EXIT_BAD_INPUT
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
            print(f"txnmodel inspect: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        if args.json:
            _print_json(report)
        else:
            print(render_text(report))
        one = report.get("entry", report)
        damaged = report.get("ok") is False or (
            report.get("kind") in ("entry", "directory_entry")
            and not one.get("decoded")
            and one.get("message") is None  # neither a log record nor a message
        )
        return EXIT_BAD_INPUT if damaged else EXIT_OK
    # One raw entry of a known kind: decode strictly, so damage is a typed error with its offset.
    raw = path.read_bytes()
    if args.hex:
        try:
            raw = bytes.fromhex(raw.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError) as exc:
            print(f"txnmodel inspect: {path}: not hex: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    kind = kind or LogKind.TRANSACTION_LOG
    try:
        entry = decode_entry(raw, kind, where=str(path))
    except InputError as exc:
        print(f"txnmodel inspect: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    records = [
        json_format.MessageToDict(r, preserving_proto_field_name=True, use_integers_for_enums=False)
        for r in entry.records
    ]
    if args.json:
        _print_json(
            {"batched": entry.batched, "version": entry.version, "batch_size": entry.batch_size, "records": records}
        )
    else:
        head = f"batched entry, version {entry.version}, {entry.batch_size} records" if entry.batched else "plain entry"
        print(f"{path}: {head} ({kind.value})")
        for index, record in enumerate(records):
            print(f"  [{index}] {json.dumps(record, sort_keys=True)}")
    return EXIT_OK


# --- config --------------------------------------------------------------------------------------


def cmd_config(args: argparse.Namespace) -> int:
    from spec.config import Config

    try:
        config = Config.from_broker_conf(Path(args.broker_conf).read_text()) if args.broker_conf else Config()
        if args.set:
            config = config.with_overrides(dict(item.split("=", 1) for item in args.set))
    except (InputError, OSError, ValueError) as exc:
        print(f"txnmodel config: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    items = dict(config.items())
    if args.json:
        _print_json({k: list(v) if isinstance(v, tuple) else v for k, v in items.items()})
    else:
        for key, value in items.items():
            shown = ",".join(value) if isinstance(value, tuple) else value
            print(f"{key}={str(shown).lower() if isinstance(shown, bool) else shown}")
    return EXIT_OK


# --- the main job --------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    """The main job: every real check the project has, then a summary table.

    1. the conformance vectors; 2. every Z3 proof; 3. seeded histories of every workload, with faults,
    on file ledgers; 4. those histories verified on local Spark (linearizability and transactional
    checks).  Every counterexample is printed with the seed that reproduces it.
    """
    import tempfile

    from invariants.bulk import verify_main
    from proofs.framework import Verdict, available_machines, prove_machine
    from reference.engine.simulate import simulate_main
    from txnmodel.vectors import run_paths

    started = time.perf_counter()
    summary: list[tuple[str, str, str]] = []
    worst = EXIT_OK

    t0 = time.perf_counter()
    print("== conformance vectors", flush=True)
    try:
        results = run_paths([str(DEFAULT_VECTORS)])
    except InputError as exc:
        print(f"invalid vector input: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    failed = [r for r in results if not r.passed]
    for result in failed:
        print(f"FAIL {result.vector_id}: {result.mismatch}")
    summary.append(
        (
            "conformance vectors",
            f"{len(results) - len(failed)}/{len(results)} passed",
            f"{time.perf_counter() - t0:.1f}s",
        )
    )
    if failed:
        worst = EXIT_FAILED

    print("== proofs", flush=True)
    for machine in available_machines():
        t0 = time.perf_counter()
        rows = prove_machine(machine, timeout_ms=int(args.timeout * 1000))
        bad = [r for r in rows if r.verdict is not Verdict.PROVED]
        for row in bad:
            print(f"NOT PROVED {machine}/{row.name}: {row.verdict.value}\n{row.counterexample or row.reason or ''}")
        summary.append(
            (f"proofs: {machine}", f"{len(rows) - len(bad)}/{len(rows)} proved", f"{time.perf_counter() - t0:.1f}s")
        )
        if bad:
            worst = EXIT_FAILED

    if args.histories > 0:
        out = Path(args.out)
        histories_dir, verdicts_dir = out / "histories", out / "verdicts"
        with tempfile.TemporaryDirectory(prefix="txnmodel-run-") as data:
            t0 = time.perf_counter()
            print(f"== simulate: {args.histories} seeds x 3 workloads, faults on, file ledgers", flush=True)
            code = simulate_main(
                [
                    "--seed",
                    str(args.seed),
                    "--workload",
                    "all",
                    "--histories",
                    str(args.histories),
                    "--ops",
                    str(args.ops),
                    "--ledger",
                    "file",
                    "--data",
                    data,
                    "--out",
                    str(histories_dir),
                    "--faults",
                    "on",
                    "--batch-messages",
                    "mixed",
                    "--key-shared",
                    "mixed",
                    "--delayed-tracker",
                    "mixed",
                    "--quiet",
                ]
            )
            elapsed = f"{time.perf_counter() - t0:.1f}s"
            summary.append(("simulate", "ok" if code == EXIT_OK else f"exit {code}", elapsed))
            worst = max(worst, code)
        t0 = time.perf_counter()
        print(f"== verify on Spark ({args.master})", flush=True)
        verify_args = [str(histories_dir), "--out", str(verdicts_dir), "--master", args.master]
        code = verify_main(verify_args)
        summary.extend(_verdict_summary(verdicts_dir, time.perf_counter() - t0))
        worst = max(worst, code)

    width = max(len(s[0]) for s in summary)
    print("\n== summary")
    for name, verdict, seconds in summary:
        print(f"{name.ljust(width)}  {verdict:<36} {seconds}")
    print(f"{'total'.ljust(width)}  {'PASS' if worst == EXIT_OK else 'FAIL':<36} {time.perf_counter() - started:.1f}s")
    return worst


def _verdict_summary(verdicts_dir: Path, seconds: float) -> list[tuple[str, str, str]]:
    """One summary line per checker: histories, operations and verdict counts."""
    import pyarrow.parquet as pq

    path = verdicts_dir / "verdicts.parquet"
    if not path.exists():
        return [("verify", "no verdicts written", f"{seconds:.1f}s")]
    rows = pq.read_table(path, columns=["history", "checker", "verdict", "ops", "detail"]).to_pylist()
    lines = []
    for checker in sorted({r["checker"] for r in rows}):
        mine = [r for r in rows if r["checker"] == checker]
        counts: dict[str, int] = {}
        for r in mine:
            counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        histories = len({r["history"] for r in mine})
        ops = sum(r["ops"] or 0 for r in mine)
        lines.append((f"verify: {checker}", f"{histories} histories, {ops} ops: {verdicts}", ""))
        if checker == "linearizability":
            lines.extend(_per_machine_summary(mine))
    lines[-1] = (*lines[-1][:2], f"{seconds:.1f}s")
    return lines


def _per_machine_summary(rows: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """One line per reference machine: the engine histories' objects checked against it (from the
    JSON ``detail`` of each linearizability verdict), their crash epochs, operations and verdicts."""
    totals: dict[str, dict[str, Any]] = {}
    for row in rows:
        try:
            models = json.loads(row["detail"] or "{}").get("models", {})
        except (json.JSONDecodeError, AttributeError):
            continue  # a generic model's reasons, not a per-machine summary
        for name, figures in models.items():
            total = totals.setdefault(name, {"objects": 0, "epochs": 0, "ops": 0, "seconds": 0.0, "verdicts": {}})
            for key in ("objects", "epochs", "ops", "seconds"):
                total[key] += figures[key]
            for verdict, count in figures.get("object_verdicts", {figures["verdict"]: 1}).items():
                total["verdicts"][verdict] = total["verdicts"].get(verdict, 0) + count
    return [
        (
            f"  per object: {name}",
            f"{t['objects']} objects, {t['epochs']} epochs, {t['ops']} ops: "
            + ", ".join(f"{n} {v}" for v, n in sorted(t["verdicts"].items())),
            f"{t['seconds']:.1f}s",
        )
        for name, t in totals.items()
    ]


# --- simulate ------------------------------------------------------------------------------------


def _add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    from reference.engine.simulate import build_parser

    build_parser(parser)


def _run_simulate(args: argparse.Namespace) -> int:
    from reference.engine.simulate import run_simulate

    return run_simulate(args)


# --- parser --------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="txnmodel",
        description="A formally checked reference for Apache Pulsar's transaction and delayed-delivery "
        "machinery. Exit codes: 0 passed, 1 a check failed, 2 bad input or usage.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="the main job: vectors, proofs, simulated histories verified on local Spark, then a summary",
        description="Run every conformance vector and every Z3 proof, simulate seeded histories of every workload "
        "with faults on file ledgers, verify them on Spark (local by default), and print a summary table with every "
        "counterexample and its seed. Exit 0 when everything passed, 1 otherwise.",
    )
    run.add_argument("--timeout", type=float, default=30.0, help="Z3 timeout per property, seconds (default 30)")
    run.add_argument(
        "--histories",
        type=int,
        default=70,
        help="seeds per workload (3 workloads; default 70, i.e. 210 histories; 0 skips simulation)",
    )
    run.add_argument("--ops", type=int, default=60, help="transactions attempted per history (default 60)")
    run.add_argument("--seed", type=int, default=1, help="the first seed (default 1)")
    run.add_argument("--out", default="out/run", help="where histories and verdicts go (default out/run)")
    run.add_argument("--master", default="local[2]", help="Spark master URL, passed unchanged (default local[2])")
    run.set_defaults(func=cmd_run)

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

    prove = sub.add_parser(
        "prove",
        help="prove a machine's invariants with Z3",
        description="Prove with Z3 that each invariant holds initially and is preserved by every command, "
        "and the machine's safety properties. Prints property, verdict (proved / counterexample / "
        "unknown), bound and seconds; a counterexample is printed as a concrete state and command. "
        "Exit 0 all proved, 1 otherwise, 2 unknown machine.",
    )
    prove.add_argument("machine", nargs="?", default="all", help="a machine name, or 'all' (default)")
    prove.add_argument("--only", help="only properties whose name contains this text")
    prove.add_argument("--timeout", type=float, default=30.0, help="Z3 timeout per property, seconds (default 30)")
    prove.add_argument("--json", action="store_true", help="machine-readable output")
    prove.set_defaults(func=cmd_prove)

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

    config = sub.add_parser(
        "config",
        help="show every broker.conf key the model uses, with Pulsar's defaults",
        description="Print every broker.conf key the machines use with its value: Pulsar's default, or "
        "the value from --broker-conf and --set. A bad key or value exits 2 naming the key.",
    )
    config.add_argument("--broker-conf", help="read overrides from a broker.conf file")
    config.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one key (repeatable)")
    config.add_argument("--json", action="store_true", help="machine-readable output")
    config.set_defaults(func=cmd_config)

    simulate = sub.add_parser(
        "simulate",
        help="simulate workloads with faults and record histories (engine)",
        description="Run named workloads (ctp: consume-transform-produce across topics; multi: atomic "
        "multi-partition produce; delayed: delayed delivery mixed with transactions) on the broker built from the "
        "reference machines, under a seeded scheduler that injects faults (broker and coordinator crashes, ledger "
        "failures, lost/delayed/duplicated requests and responses, transaction timeouts). Same seed, same history, "
        "byte for byte. Histories go to --out as Parquet. Exit 0 when every run finished (and with --check was "
        "clean), 1 otherwise.",
    )
    _add_simulate_arguments(simulate)
    simulate.set_defaults(func=_run_simulate)
    from invariants.bulk import add_verify_arguments, run_verify

    verify = sub.add_parser(
        "verify",
        help="check recorded histories: linearizability per object and transactional properties (Spark)",
        description="Check a folder of histories (Parquet, JSON Lines, or Jepsen logs) on Spark: linearizability "
        "of each object against its model, and the transactional properties of the whole history. Local mode is the "
        "default; --master takes a cluster URL unchanged. Exit 0 all ok, 1 a violation or an unknown verdict, 2 bad "
        "input.",
    )
    add_verify_arguments(verify)
    verify.set_defaults(func=run_verify)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code) if isinstance(exc.code, int) else EXIT_BAD_INPUT
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
