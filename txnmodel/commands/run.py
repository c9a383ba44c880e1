"""``txnmodel run``: the main job."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from invariants.verify import VerdictRow
from spec.errors import InputError
from txnmodel.common import (
    DEFAULT_VECTORS,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    INT64_MAX,
    UsageError,
    exclusive_folder,
    non_negative_int,
    one_line,
    output_folder,
    positive_int,
    seed_int,
    spark_master,
    z3_rlimit,
)


def cmd_run(args: argparse.Namespace) -> int:
    """The main job: every real check the project has, then a summary table.

    1. the conformance vectors; 2. every Z3 proof; 3. the composed protocol model-checked (the
    default models of ``txnmodel check``, safety and liveness, at their default bounds); 4. seeded
    histories of every workload, with faults, on file ledgers, every variant and fault mix mixed by
    seed; 5. those histories verified
    (linearizability, transactional and delivery checks), on Spark when they are large enough to pay
    for it (the process's one session, :func:`txnmodel.spark_runner.spark_session`).  Every
    counterexample is printed with the seed that reproduces it.
    """
    from txnmodel.commands.simulate import history_file

    # Usage errors before any work: the last seed must fit a history's int64, the folder be writable
    # and this run's alone (the main job replaces its own earlier history files; a concurrent run on
    # the same folder is refused).
    if args.seed + max(args.histories, 1) - 1 > INT64_MAX:
        raise UsageError(f"--seed {args.seed} with --histories {args.histories}: the last seed passes {INT64_MAX}")
    if args.histories == 0:
        return _job(args)
    output_folder(Path(args.out), "--out")
    with exclusive_folder(Path(args.out) / "histories", "--out", overwrite=True, ours=history_file):
        return _job(args)


def _job(args: argparse.Namespace) -> int:
    import tempfile

    from proofs.framework import RLIMIT, Row, Verdict, available_machines, count_obligations, prove_machine
    from reference.engine.simulate import MAIN_JOB, WORKLOADS
    from txnmodel.commands.simulate import RunStopped, simulate
    from txnmodel.commands.verify import VerifyRequest, verify
    from txnmodel.progress import Phase, Reporter
    from txnmodel.vectors import run_paths

    started = time.perf_counter()
    summary: list[tuple[str, str, str]] = []
    worst = EXIT_OK
    progress = Reporter()

    t0 = time.perf_counter()
    try:
        with progress.phase("conformance vectors", unit="vectors") as phase:
            results = run_paths(
                [str(DEFAULT_VECTORS)], on_total=phase.set_total, on_result=lambda r: phase.advance(note=r.vector_id)
            )
    except InputError as exc:
        print(f"txnmodel run: invalid vector input: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    failed = [r for r in results if not r.passed]
    for result in failed:
        progress.say(f"FAIL {result.vector_id}: {result.mismatch}")
    summary.append(
        (
            "conformance vectors",
            f"{len(results) - len(failed)}/{len(results)} passed",
            f"{time.perf_counter() - t0:.1f}s",
        )
    )
    if failed:
        worst = EXIT_FAILED

    for machine in available_machines():
        t0 = time.perf_counter()
        with progress.phase(f"proofs: {machine}", total=count_obligations(machine), unit="properties") as phase:

            def proved(row: Row, phase: Phase = phase) -> None:
                phase.advance(note=row.name)

            rows = prove_machine(machine, rlimit=args.rlimit or RLIMIT, on_row=proved)
        bad = [r for r in rows if r.verdict is not Verdict.PROVED]
        for row in bad:
            progress.say(
                f"NOT PROVED {machine}/{row.name}: {row.verdict.value}\n{row.counterexample or row.reason or ''}"
            )
        summary.append(
            (f"proofs: {machine}", f"{len(rows) - len(bad)}/{len(rows)} proved", f"{time.perf_counter() - t0:.1f}s")
        )
        if bad:
            worst = EXIT_FAILED

    worst = max(worst, _model_check(progress, summary, Path(args.out) / "check"))

    if args.histories > 0:
        out = Path(args.out)
        histories_dir, verdicts_dir = out / "histories", out / "verdicts"
        with tempfile.TemporaryDirectory(prefix="txnmodel-run-") as data:
            t0 = time.perf_counter()
            # MAIN_JOB: faults on, every variant and fault mix mixed by seed (reference/engine/simulate.py).
            # The simulated disk by default: no real sync or directory fsync is paid (the run is
            # CPU-bound), and a broker crash is a power cut -- unsynced writes lost, torn or
            # reordered, the journal replayed at every restart -- which a real disk under a killed
            # process never shows.  The file store's durability on a real disk is the crash tests'.
            options = dataclasses.replace(
                MAIN_JOB,
                seed=args.seed,
                histories=args.histories,
                ops=args.ops,
                ledger="file",
                data=data if args.disk == "real" else None,
                disk=args.disk,
                group_commit_ms=args.group_commit,
            )
            with progress.phase(
                f"simulate: {args.histories} seeds x {len(WORKLOADS)} workloads, faults on, file ledgers on the "
                f"{args.disk} disk",
                total=len(WORKLOADS) * args.histories,
                unit="histories",
            ) as phase:
                # a line per history is too many here: the progress says how far it is
                try:
                    code = simulate(options, out=histories_dir, quiet=True, progress=phase, jobs=args.jobs)
                except RunStopped as stopped:
                    # A store lost for good (a full disk): the histories written are still verified,
                    # the stopped one marked incomplete (verify's run check says so).
                    progress.say(f"simulate: {one_line(str(stopped))}")
                    code = EXIT_BAD_INPUT
            elapsed = f"{time.perf_counter() - t0:.1f}s"
            summary.append(("simulate", "ok" if code == EXIT_OK else f"exit {code}", elapsed))
            worst = max(worst, code)
        t0 = time.perf_counter()
        verified = verify(
            VerifyRequest(str(histories_dir), out=str(verdicts_dir), master=args.master, reporter=progress)
        )
        summary.extend(_verdict_summary(verified.rows, time.perf_counter() - t0))
        worst = max(worst, verified.exit_code)

    width = max(len(s[0]) for s in summary)
    print("\n== summary")
    for name, verdict, seconds in summary:
        print(f"{name.ljust(width)}  {verdict:<36} {seconds}")
    print(f"{'total'.ljust(width)}  {'PASS' if worst == EXIT_OK else 'FAIL':<36} {time.perf_counter() - started:.1f}s")
    return worst


def _model_check(progress: Any, summary: list[tuple[str, str, str]], out: Path) -> int:
    """The default models of ``txnmodel check`` at their default bounds (a few seconds in all):
    a phase and a summary line each; a counterexample is printed and written under ``out``."""
    from proofs.check.models import DEFAULT_MODELS
    from proofs.check.trace import render_text
    from txnmodel.commands.check import check_models, write_counterexamples

    worst = EXIT_OK
    for name in DEFAULT_MODELS:
        t0 = time.perf_counter()
        with progress.phase(f"model check: {name}", unit="states") as phase:

            def level(depth: int, states: int, frontier: int, phase: Any = phase) -> None:
                phase.advance(states - phase.done, note=f"depth {depth}, frontier {frontier}")

            (run,) = check_models([name], {}, level=level)
        result = run.result
        if not result.ok:
            worst = EXIT_FAILED
            folders = write_counterexamples(run, out)
            for violation, folder in zip(result.violations, folders, strict=False):
                progress.say(f"{render_text(run.model, violation)}\ncounterexample files: {folder}")
        verdict = f"{result.verdict}, {result.states:,} states"
        summary.append((f"model check: {name}", verdict, f"{time.perf_counter() - t0:.1f}s"))
    return worst


def _verdict_summary(rows: Sequence[VerdictRow], seconds: float) -> list[tuple[str, str, str]]:
    """One summary line per checker: histories, operations and verdict counts."""
    if not rows:
        return [("verify", "no verdicts", f"{seconds:.1f}s")]
    lines = []
    for checker in sorted({r.checker for r in rows}):
        mine = [r for r in rows if r.checker == checker]
        counts: dict[str, int] = {}
        for r in mine:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        histories = len({r.history for r in mine})
        ops = sum(r.ops or 0 for r in mine)
        lines.append((f"verify: {checker}", f"{histories} histories, {ops} ops: {verdicts}", ""))
        if checker == "linearizability":
            lines.extend(_per_machine_summary(mine))
    lines[-1] = (*lines[-1][:2], f"{seconds:.1f}s")
    return lines


def _per_machine_summary(rows: Sequence[VerdictRow]) -> list[tuple[str, str, str]]:
    """One line per reference machine: the engine histories' objects checked against it (from the
    JSON ``detail`` of each linearizability verdict), their crash epochs, operations and verdicts."""
    totals: dict[str, dict[str, Any]] = {}
    for row in rows:
        try:
            models = json.loads(row.detail or "{}").get("models", {})
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


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        help="the main job: vectors, proofs, model checking, simulated histories verified (on Spark when it pays), "
        "then a summary",
        description="Run every conformance vector and every Z3 proof, model-check the composed protocol (the default "
        "models of `txnmodel check`), simulate seeded histories of every workload "
        "with faults on file ledgers, verify them (on local Spark when they are large enough to pay for it), and "
        "print a summary table with every counterexample and its seed. Exit 0 when everything passed, 1 otherwise.",
    )
    run.add_argument(
        "--rlimit",
        type=z3_rlimit,
        default=None,
        help="Z3 resource budget of each proof query (rlimit units; default the framework's RLIMIT)",
    )
    run.add_argument(
        "--histories",
        type=non_negative_int,
        default=70,
        help="seeds per workload (3 workloads; default 70, i.e. 210 histories; 0 skips simulation)",
    )
    run.add_argument("--ops", type=positive_int, default=60, help="transactions attempted per history (default 60)")
    run.add_argument(
        "--disk",
        choices=("sim", "real"),
        default="sim",
        help="the file ledgers' disk: simulated (default; broker crashes are power cuts) or real",
    )
    run.add_argument(
        "--group-commit",
        type=non_negative_int,
        default=1,
        metavar="MS",
        help="the file store's journal commits every MS simulated ms (default 1)",
    )
    run.add_argument(
        "--jobs", type=positive_int, default=2, help="histories simulated at once, in processes (default 2)"
    )
    run.add_argument("--seed", type=seed_int, default=1, help="the first seed (default 1)")
    run.add_argument("--out", default="out/run", help="where histories and verdicts go (default out/run)")
    run.add_argument(
        "--master",
        type=spark_master,
        default=None,
        help="Spark master URL for the verify phase, passed unchanged (default: local Spark when the histories are "
        "large enough to pay for it, else in this process; see txnmodel verify)",
    )
    run.set_defaults(func=cmd_run)
