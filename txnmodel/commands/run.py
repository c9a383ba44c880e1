"""``txnmodel run``: the main job."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from history_io.folders import UsageError, exclusive_folder, output_folder
from invariants.verify import VerdictRow
from spec.errors import InputError
from txnmodel.common import (
    DEFAULT_VECTORS,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    INT64_MAX,
    non_negative_int,
    one_line,
    positive_int,
    seed_int,
    spark_master,
    z3_rlimit,
)

if TYPE_CHECKING:
    from engine.simulation.workloads import RunResult
    from runners.main_job import Pipeline
    from views.progress import Phase, Reporter

# Summary lines: (what, verdict, wall seconds, CPU seconds).
Line = tuple[str, str, str, str]
# The summary's parts, in the order they are printed (a new part goes where it runs).
PARTS = ("vectors", "proofs", "check", "simulate", "verify")

# Rows (operations) of the histories one verification task checks, about two seconds of CPU: small
# enough that the last tasks keep every worker busy, large enough that reading the task's histories
# out of their workload's file stays a small part of it.
VERIFY_TASK_ROWS = 60_000


def cmd_run(args: argparse.Namespace) -> int:
    """The main job: every real check the project has, then a summary table.

    1. the conformance vectors; 2. every Z3 proof; 3. the composed protocol model-checked (the
    default models of ``txnmodel check``, safety and liveness, at their default bounds); 4. seeded
    histories of every workload, with faults, on file ledgers, every variant and fault mix mixed by
    seed; 5. those histories verified (linearizability, transactional and delivery checks).  Every
    counterexample is printed with the seed that reproduces it.

    The parts run at once on ``--jobs`` worker processes (:class:`runners.main_job.Pipeline`): the
    proofs, a task per machine, beside the first simulations; a workload's histories verified, in
    tasks of some of its histories each, as soon as its file is written, while the next workload
    simulates; the vectors and the model checking in this process meanwhile.  With ``--master`` the
    histories are verified on that Spark cluster once all are written instead (:func:`txnmodel.commands.verify.verify`);
    without one, Spark would run the same checks in as many Python processes on this machine, plus a
    JVM, so it does not pay here (:mod:`runners.spark`).
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

    import engine.simulation.workloads  # noqa: F401

    # Imported before the workers fork, so that none of them imports them again.
    import invariants.verify  # noqa: F401
    import proofs.framework  # noqa: F401
    import runners.file_checks  # noqa: F401
    from runners.main_job import Pipeline
    from views.progress import Reporter

    started, cpu_started = time.perf_counter(), time.process_time()
    out = Path(args.out)
    pipeline = Pipeline(args.jobs)
    job = _MainJob(args, Reporter(), pipeline, out)
    try:
        with tempfile.TemporaryDirectory(prefix="txnmodel-run-") as data, contextlib.ExitStack() as phases:
            job.phases = phases
            job.prove()
            if args.histories > 0:
                job.simulate(data)
            # this process meanwhile: the vectors, then the composed protocol model-checked
            pipeline.run(idle=job.vectors_and_models)
            job.end_verify()
    finally:
        pipeline.close()
    if job.bad_input:
        return EXIT_BAD_INPUT
    return job.print_summary(time.perf_counter() - started, time.process_time() - cpu_started)


class _MainJob:
    """The main job's phases: what each hands to the pipeline, and what each result does."""

    def __init__(self, args: argparse.Namespace, progress: Reporter, pipeline: Pipeline, out: Path) -> None:
        self.args, self.progress, self.pipeline, self.out = args, progress, pipeline, out
        self.phases = contextlib.ExitStack()
        self.summary: dict[str, list[Line]] = {}  # by phase, printed in the phases' order
        self.worst = EXIT_OK
        self.bad_input = False
        self.verdicts: list[VerdictRow] = []
        self.histories = 0
        self.verify_phase: tuple[Phase, Callable[[], None]] | None = None

    def _open(self, name: str, *, total: int | None, unit: str) -> tuple[Phase, Callable[[], None]]:
        """A progress phase that ends when the returned function is called (or, at the latest, when
        the job ends): phases overlap here, so they cannot nest as ``with`` blocks."""
        context = self.progress.phase(name, total=total, unit=unit)
        phase = context.__enter__()
        ended = [False]

        def end() -> None:
            if not ended[0]:
                ended[0] = True
                context.__exit__(None, None, None)

        self.phases.callback(end)
        return phase, end

    # -- 1. conformance vectors, in this process while the workers start --------------------------

    def vectors(self) -> None:
        from runners.vectors import run_paths

        t0, c0 = time.perf_counter(), time.process_time()
        phase, end = self._open("conformance vectors", total=None, unit="vectors")
        try:
            results = run_paths(
                [str(DEFAULT_VECTORS)], on_total=phase.set_total, on_result=lambda r: phase.advance(note=r.vector_id)
            )
        except InputError as exc:
            end()
            print(f"txnmodel run: invalid vector input: {one_line(str(exc))}", file=sys.stderr)
            self.bad_input = True
            return
        end()
        failed = [r for r in results if not r.passed]
        for result in failed:
            self.progress.say(f"FAIL {result.vector_id}: {result.mismatch}")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        verdict = f"{len(results) - len(failed)}/{len(results)} passed"
        self.summary["vectors"] = [("conformance vectors", verdict, f"{wall:.1f}s", f"{cpu:.1f}s")]
        if failed:
            self.worst = EXIT_FAILED

    def vectors_and_models(self) -> None:
        self.vectors()
        self.model_check()

    # -- 3. the composed protocol model-checked: the default models of txnmodel check ------------

    def model_check(self) -> None:
        """The default models of ``txnmodel check`` at their default bounds (a few CPU seconds in
        all), safety and liveness: a phase and a summary line each; a counterexample is printed and
        written under ``OUT/check``."""
        from proofs.check.models import DEFAULT_MODELS
        from proofs.check.trace import render_text
        from txnmodel.commands.check import check_models, write_counterexamples

        lines: list[Line] = []
        for name in DEFAULT_MODELS:
            t0, c0 = time.perf_counter(), time.process_time()
            phase, end = self._open(f"model check: {name}", total=None, unit="states")

            def level(depth: int, states: int, frontier: int, phase: Phase = phase) -> None:
                phase.advance(states - phase.done, note=f"depth {depth}, frontier {frontier}")

            try:
                (run,) = check_models([name], {}, level=level)
            finally:
                end()
            result = run.result
            if not result.ok:
                self.worst = EXIT_FAILED
                folders = write_counterexamples(run, self.out / "check")
                for violation, folder in zip(result.violations, folders, strict=False):
                    self.progress.say(f"{render_text(run.model, violation)}\ncounterexample files: {folder}")
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            lines.append(
                (f"model check: {name}", f"{result.verdict}, {result.states:,} states", f"{wall:.1f}s", f"{cpu:.1f}s")
            )
        self.summary["check"] = lines

    # -- 2. every Z3 proof, a task per machine ----------------------------------------------------

    def prove(self) -> None:
        from proofs.framework import RLIMIT, Row, Verdict, available_machines, count_obligations
        from runners.main_job import prove_task

        machines = available_machines()
        # the biggest first, so that the last to finish is a small one
        machines.sort(key=count_obligations, reverse=True)
        total = sum(count_obligations(m) for m in machines)
        phase, end = self._open(f"proofs: {len(machines)} machines", total=total, unit="properties")
        times = self.pipeline.phase("proofs")
        lines: dict[str, Line] = {}

        def proved(machine: str, rows: list[Row]) -> None:
            phase.advance(len(rows), note=machine)
            bad = [r for r in rows if r.verdict is not Verdict.PROVED]
            for row in bad:
                self.progress.say(
                    f"NOT PROVED {machine}/{row.name}: {row.verdict.value}\n{row.counterexample or row.reason or ''}"
                )
            seconds = sum(r.seconds for r in rows)
            # its seconds in the worker, wall-clock: the CPU column is the phase's, below
            lines[machine] = (f"proofs: {machine}", f"{len(rows) - len(bad)}/{len(rows)} proved", f"{seconds:.1f}s", "")
            if bad:
                self.worst = EXIT_FAILED
            if len(lines) == len(machines):
                end()
                self.summary["proofs"] = [
                    *(lines[m] for m in sorted(machines, key=available_machines().index)),
                    ("proofs", f"{phase.done}/{total} properties", f"{times.wall:.1f}s", f"{times.cpu:.1f}s"),
                ]

        for machine in machines:
            self.pipeline.submit(
                "proofs", prove_task, (machine, self.args.rlimit or RLIMIT), functools.partial(proved, machine)
            )

    # -- 3. simulation, a task per history; 4. a workload verified once its file is written ------

    def simulate(self, data: str) -> None:
        from engine.simulation.workloads import MAIN_JOB, WORKLOADS
        from runners.main_job import simulate_task
        from runners.verdicts import clear_verdicts
        from txnmodel.commands.simulate import Collector

        args = self.args
        # MAIN_JOB: faults on, every variant and fault mix mixed by seed (engine/simulation/workloads.py).
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
        specs = [spec for workload in options.workloads for spec in options.specs(workload, data)]
        self.histories = len(specs)
        histories_dir = self.out / "histories"
        histories_dir.mkdir(parents=True, exist_ok=True)
        verdicts_dir = self.out / "verdicts"
        clear_verdicts(verdicts_dir)
        verdicts_dir.mkdir(parents=True, exist_ok=True)
        phase, end = self._open(
            f"simulate: {args.histories} seeds x {len(WORKLOADS)} workloads, faults on, file ledgers on the "
            f"{args.disk} disk",
            total=len(specs),
            unit="histories",
        )
        times = self.pipeline.phase("simulate")
        on_spark = args.master is not None
        if not on_spark:
            self.verify_phase = self._open("verify", total=len(specs), unit="histories")
        collector = Collector(
            specs, out=histories_dir, progress=phase, on_written=None if on_spark else self._verify_file
        )

        def simulated(index: int, value: tuple[RunResult, Any]) -> None:
            collector.add(index, *value)
            if collector.stopped is not None and "stopped" not in self.summary:
                # A store lost for good (a full disk, corruption): its history is written, marked
                # incomplete (verify's run check says so); the job's exit is that of bad input.
                history, why = collector.stopped
                self.progress.say(f"simulate: {history} stopped early, its storage lost: {one_line(why)}")
                self.summary["stopped"] = [("simulate: stopped", history, "", "")]
                self.worst = max(self.worst, EXIT_BAD_INPUT)
            if times.tasks == len(specs):
                end()
                code = collector.status
                self.summary["simulate"] = [
                    ("simulate", "ok" if code == EXIT_OK else f"exit {code}", f"{times.wall:.1f}s", f"{times.cpu:.1f}s")
                ]
                self.worst = max(self.worst, code)

        for index, spec in enumerate(specs):
            self.pipeline.submit_throttled("simulate", simulate_task, (spec,), functools.partial(simulated, index))

    def _verify_file(self, path: Path, sizes: dict[str, int]) -> None:
        """Hand in the verification of one written history file, in tasks of about
        :data:`VERIFY_TASK_ROWS` rows (the largest histories first, each task's histories read alone)."""
        from runners.main_job import verify_task
        from runners.spark import pack
        from txnmodel.commands.simulate import reproduce_command

        count = max(1, -(-sum(sizes.values()) // VERIFY_TASK_ROWS))
        tasks = pack([((str(path), (name,)), float(size)) for name, size in sizes.items()], min(count, len(sizes)))
        for number, task in enumerate(tasks):
            names = tuple(sorted(name for _, chosen in task for name in chosen or ()))
            histories = len(names)
            self.pipeline.submit(
                "verify",
                verify_task,
                ([(str(path), names)], str(self.out / "verdicts"), f"{path.stem}-{number:04d}", reproduce_command),
                functools.partial(self._verified, histories),
            )

    def _verified(self, histories: int, rows: list[VerdictRow]) -> None:
        assert self.verify_phase is not None
        self.verdicts.extend(rows)
        self.verify_phase[0].advance(histories)

    def end_verify(self) -> None:
        """The verification's end: its report, the verdicts' index; on a Spark cluster
        (``--master``) the whole verification, now that every history is written."""
        from txnmodel.commands.verify import VerifyRequest, report, verify

        if self.args.histories <= 0 or self.bad_input:
            return
        request = VerifyRequest(
            str(self.out / "histories"), out=str(self.out / "verdicts"), master=self.args.master, reporter=self.progress
        )
        if self.args.master is not None:
            t0, c0 = time.perf_counter(), time.process_time()
            verified = verify(dataclasses.replace(request, mode="spark"))
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        else:
            from invariants.verify import duplicate_histories
            from runners.verdicts import write_part

            assert self.verify_phase is not None
            self.verify_phase[1]()
            duplicates = duplicate_histories(self.verdicts)
            if duplicates:
                self.verdicts.extend(write_part(self.out / "verdicts", "duplicates", duplicates))
            times = self.pipeline.phase("verify")
            c0 = time.process_time()
            verified = report(request, self.verdicts, times.wall)
            wall, cpu = times.wall, times.cpu + time.process_time() - c0
        self.summary["verify"] = _verdict_summary(verified.rows, wall, cpu)
        self.worst = max(self.worst, verified.exit_code)

    def print_summary(self, wall: float, cpu: float) -> int:
        """The table: a line per part (wall and CPU seconds; the parts overlap), and the total (the
        CPU of this process and of every worker)."""
        order = [*PARTS, *(key for key in self.summary if key not in PARTS)]
        lines = [line for key in order for line in self.summary.get(key, [])]
        workers = sum(times.cpu for times in self.pipeline.phases.values())
        width = max(len(line[0]) for line in [*lines, ("total", "", "", "")])
        print("\n== summary" + " " * max(0, width + 39 - 12) + "   wall     cpu")
        for name, verdict, seconds, cpu_seconds in lines:
            print(f"{name.ljust(width)}  {verdict:<36} {seconds:>7} {cpu_seconds:>7}")
        verdict = "PASS" if self.worst == EXIT_OK else "FAIL"
        print(f"{'total'.ljust(width)}  {verdict:<36} {wall:>6.1f}s {cpu + workers:>6.1f}s")
        return self.worst


def _verdict_summary(rows: Sequence[VerdictRow], wall: float, cpu: float) -> list[Line]:
    """One summary line per checker: histories, operations and verdict counts; the verification's
    wall and CPU seconds on the last."""
    if not rows:
        return [("verify", "no verdicts", f"{wall:.1f}s", f"{cpu:.1f}s")]
    lines: list[Line] = []
    for checker in sorted({r.checker for r in rows}):
        mine = [r for r in rows if r.checker == checker]
        counts: dict[str, int] = {}
        for r in mine:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        verdicts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        histories = len({r.history for r in mine})
        ops = sum(r.ops or 0 for r in mine)
        lines.append((f"verify: {checker}", f"{histories} histories, {ops} ops: {verdicts}", "", ""))
        if checker == "linearizability":
            lines.extend(_per_machine_summary(mine))
    lines.append(("verify", f"{len({r.history for r in rows})} histories", f"{wall:.1f}s", f"{cpu:.1f}s"))
    return lines


def _per_machine_summary(rows: Sequence[VerdictRow]) -> list[Line]:
    """One line per reference machine: the engine histories' objects checked against it (from the
    JSON ``detail`` of each linearizability verdict), their crash epochs, operations and verdicts,
    and the seconds their checks took (in the workers, added up)."""
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
            "",
        )
        for name, t in totals.items()
    ]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = sub.add_parser(
        "run",
        help="the main job: vectors, proofs, simulated histories verified, all at once, then a summary",
        description="Run every conformance vector and every Z3 proof, simulate seeded histories of every workload "
        "with faults on file ledgers and verify them, all at once on --jobs worker processes (a workload's histories "
        "are verified while the next one simulates; on a Spark cluster with --master), and print a summary table "
        "(wall and CPU seconds) with every counterexample and its seed. Exit 0 when everything passed, 1 otherwise.",
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
        default=100,
        help="seeds per workload (3 workloads; default 100, i.e. 300 histories; 0 skips simulation)",
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
        "--jobs",
        type=positive_int,
        default=2,
        help="worker processes: proofs, simulations and verifications run at once on them (default 2)",
    )
    run.add_argument("--seed", type=seed_int, default=1, help="the first seed (default 1)")
    run.add_argument("--out", default="out/run", help="where histories and verdicts go (default out/run)")
    run.add_argument(
        "--master",
        type=spark_master,
        default=None,
        help="Spark master URL for the verify phase, passed unchanged: the histories are verified on that cluster once "
        "all are written (default: in the worker processes, as they are written; local Spark would run the same "
        "checks in as many processes plus a JVM)",
    )
    run.set_defaults(func=cmd_run)
