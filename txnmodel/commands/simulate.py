"""``txnmodel simulate``: seeded fault simulation of the engine, writing histories.

The runs are the engine's (:mod:`engine.simulation.workloads`: :class:`SimulateOptions` says which,
``run`` returns each history); this command prints a line per run, checks each history's
transactional properties with ``--check``, and writes the histories (Parquet, JSON Lines).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shlex
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from history_io.folders import UsageError, exclusive_folder
from spec.config import QUIRKS
from spec.errors import InputError
from txnmodel.common import EXIT_FAILED, EXIT_OK, INT64_MAX, non_negative_int, one_line, positive_int, seed_int

if TYPE_CHECKING:
    from engine.simulation.workloads import RunResult, RunSpec, SimulateOptions

__all__ = [
    "Collector",
    "RunStopped",
    "build_parser",
    "history_file",
    "options_from_args",
    "register",
    "reproduce_argv",
    "reproduce_command",
    "run_simulate",
    "simulate",
    "simulate_main",
]


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The arguments of ``txnmodel simulate`` (on ``parser``, or on a parser of its own)."""
    from engine.simulation import workloads as engine

    parser = parser or argparse.ArgumentParser(
        prog="txnmodel simulate", description=(engine.__doc__ or "").split("\n\n")[0]
    )
    parser.add_argument("--seed", type=seed_int, default=0, help="the first seed (history k uses seed + k)")
    parser.add_argument("--ledger", choices=("memory", "file"), default="memory")
    parser.add_argument(
        "--data",
        default=None,
        help="directory for file ledgers, empty unless --overwrite (default: a temporary one)",
    )
    parser.add_argument(
        "--out", default=None, help="directory for histories (Parquet; see --jsonl), empty unless --overwrite"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="accept a non-empty --out or --data: the history files and ledger stores of earlier runs there are "
        "removed first (other files are left alone), so every run starts from nothing and a seed reproduces",
    )
    parser.add_argument("--workload", choices=(*engine.WORKLOADS, "all"), default="ctp")
    parser.add_argument("--histories", type=positive_int, default=1, help="how many seeds to run per workload")
    parser.add_argument("--ops", type=positive_int, default=200, help="transactions attempted per history")
    parser.add_argument(
        "--duration",
        type=positive_int,
        default=None,
        metavar="MS",
        help="also stop starting transactions after MS of simulated time",
    )
    parser.add_argument(
        "--deadline",
        type=positive_int,
        default=engine.DEFAULT_DEADLINE_MS,
        metavar="MS",
        help="stop a run at MS of simulated time; its open operations are recorded as invoke "
        f"(default {engine.DEFAULT_DEADLINE_MS})",
    )
    parser.add_argument("--clients", type=positive_int, default=4, help="concurrent transactional clients")
    parser.add_argument("--partitions", type=positive_int, default=2, help="partitions of each topic")
    parser.add_argument("--faults", choices=("on", "off"), default="on")
    _add_variants(parser, engine)
    _add_reach_variants(parser)
    _disk_arguments(parser)
    parser.add_argument(
        "--jobs", type=positive_int, default=1, metavar="N", help="run N histories at once (processes; default 1)"
    )
    parser.add_argument(
        "--quirk",
        action="append",
        choices=tuple(QUIRKS),
        metavar="NAME",
        help=f"switch on a named quirk, Pulsar's behaviour where the reference differs ({', '.join(QUIRKS)})",
    )
    parser.add_argument("--jsonl", action="store_true", help="also write JSON Lines")
    parser.add_argument(
        "--check", action="store_true", help="check each history's transactional properties (exit 1 on any anomaly)"
    )
    parser.add_argument("--quiet", action="store_true")
    return parser


def _add_variants(parser: argparse.ArgumentParser, engine: ModuleType) -> None:
    """The workload variants and fault mixes of ``txnmodel simulate``: each on, off, or mixed by seed."""
    parser.add_argument(
        "--batching",
        choices=("on", "off", "mixed"),
        default="off",
        help="PIP-160 batched log writes; mixed: seeds = 1 mod 4",
    )
    parser.add_argument(
        "--batch-messages",
        choices=("on", "off", "mixed"),
        default="mixed",
        help="batching producers shared by the clients (batch messages, PIP-54 acks); mixed (default): odd seeds",
    )
    parser.add_argument(
        "--key-shared",
        choices=("on", "off", "mixed"),
        default="mixed",
        help=f"partition keys on every send and {engine.KEY_SHARED_READERS} Key_Shared consumers per "
        "partition instead of the workload's readers; mixed (default): seeds = 1 mod 3",
    )
    parser.add_argument(
        "--delayed-tracker",
        choices=(*engine.TRACKERS, "mixed"),
        default="mixed",
        help="the delayed workload's tracker: Pulsar's in-memory default or the bucket tracker "
        "(its runs go to delayed-bucket.parquet); mixed (default): bucket on seeds 2, 3, 6, 7, ... "
        "(seed // 2 odd)",
    )
    parser.add_argument(
        "--fault-mix",
        choices=(*engine.FAULT_MIXES, "mixed"),
        default="default",
        help="with --faults on: the fault rates' overrides (FAULT_MIXES in engine/simulation/workloads.py); "
        f"mixed: by seed modulo {len(engine.MIX_CYCLE)}, {', '.join(engine.MIX_CYCLE)}",
    )
    parser.add_argument(
        "--unsubscribe",
        choices=("on", "off", "mixed"),
        default="off",
        help="readers unsubscribe when done instead of closing; mixed: seeds = 1 mod 5",
    )
    parser.add_argument(
        "--cumulative",
        choices=("on", "off", "mixed"),
        default="off",
        help="ctp processors ack their input cumulatively in the txn; mixed: seeds = 1 mod 7",
    )
    parser.add_argument(
        "--redeliver",
        choices=("on", "off", "mixed"),
        default="off",
        help="ctp processors ask for redelivery and receive again before ending their txn; mixed: seeds = 3 mod 6",
    )
    parser.add_argument(
        "--queries",
        choices=("on", "off", "mixed"),
        default="off",
        help="readers ask the last message id before they stop, ctp processors the admin check of the position "
        "they acked in the txn; mixed: seeds = 4 mod 5",
    )
    parser.add_argument(
        "--shared-delayed",
        choices=("on", "off", "mixed"),
        default="off",
        help="the delayed workload on the in-memory tracker: the broker's subscriptions share one delayed index "
        "(PIP-195's never-built option, rule DD-30) and a second subscription reads the topic; mixed: seeds = 1 mod 4",
    )
    parser.add_argument(
        "--readers",
        choices=("on", "off", "mixed"),
        default="off",
        help="every reader, once drained, looks back with a Reader (a non-durable subscription) from the last message "
        "it received, then seeks it by publish time and reads again; mixed: seeds = 3 mod 5",
    )
    parser.add_argument(
        "--reread",
        choices=("on", "off", "mixed"),
        default="off",
        help="the ctp workload: once every transaction has ended, the input partitions are unloaded and every "
        "processor reads its recovered subscription again to its end; the pending-ack log is indexed every 2 "
        "records, so it is trimmed within the run; mixed: seeds = 2 mod 3",
    )


def _add_reach_variants(parser: argparse.ArgumentParser) -> None:
    """The variants that take the machines' branches the others leave (issue 32): liveness bounds, small
    limits, every ack an application may send, and clients that do not wait for one operation."""
    parser.add_argument(
        "--bounds",
        choices=("on", "off", "mixed"),
        default="off",
        help="the clients state liveness bounds: consumers are named in every operation, delayed sends outside a "
        "transaction state deliver_within_ms, and readers give some messages back by negative ack stating "
        "redeliver_within_ms (judged by late-delivery and lost-redelivery); mixed: seeds = 2 mod 4",
    )
    parser.add_argument(
        "--limits",
        choices=("on", "off", "mixed"),
        default="off",
        help="small size and count limits in broker.conf: segmented transaction-buffer snapshots in 64-byte "
        "segments taken every other move of maxReadPosition, PIP-160 batches flushed at 2 records or 64 bytes, at "
        "most 6 open transactions per coordinator (its runs go to <workload>-limits.parquet); mixed: seeds = 1 mod 6",
    )
    parser.add_argument(
        "--acks",
        choices=("on", "off", "mixed"),
        default="off",
        help="readers acknowledge in every way an application may: individually, cumulatively, twice, in a "
        "transaction that commits or aborts, and against another transaction holding the message; mixed: seeds = "
        "0 mod 3",
    )
    parser.add_argument(
        "--pipelined",
        choices=("on", "off", "mixed"),
        default="off",
        help="the ctp workload: a processor does not wait for one operation before the next (it sends from a second "
        "session, acknowledges meanwhile and commits while the send is in flight); mixed: seeds = 0 mod 4",
    )
    parser.add_argument(
        "--delayed-async",
        choices=("on", "off", "mixed"),
        default="off",
        help="the delayed workload as asynchronous as Pulsar's: the dispatcher asks hasMessageAvailable first and "
        "the bucket tracker creates snapshots asynchronously (DD-31); mixed: seeds = 4..7 mod 8",
    )
    parser.add_argument(
        "--bucket-faults",
        choices=("on", "off", "mixed"),
        default="off",
        help="the delayed workload on the bucket tracker, faults on: its snapshot storage fails now and then "
        "(a creation, segment load or delete, a recovery's reads); mixed: odd seeds",
    )


def _disk_arguments(parser: argparse.ArgumentParser) -> None:
    """File ledgers' disk: real or simulated, the journal's group commit, the simulated disk's size."""
    parser.add_argument(
        "--disk",
        choices=("real", "sim"),
        default="real",
        help="file ledgers: the real file system (under --data; a broker crash kills the process) or the simulated "
        "disk (a broker crash is a power cut: unsynced writes lost, torn or reordered; with --data the store's "
        "final files are written there). Same seed, same history on either",
    )
    parser.add_argument(
        "--group-commit",
        type=non_negative_int,
        default=None,
        metavar="MS",
        help="file ledgers: commit the store's journal every MS simulated ms, one sync for every change waiting "
        "(answers wait for it); default: every change committed as it is made",
    )
    parser.add_argument(
        "--disk-capacity",
        type=positive_int,
        default=None,
        metavar="BYTES",
        help="--disk sim: the bytes its files may hold; past them every write fails with ENOSPC, a full disk, "
        "which stops the run (exit 2) with the history recorded until then kept and marked incomplete",
    )


def options_from_args(args: argparse.Namespace) -> SimulateOptions:
    """The runs the parsed arguments ask for."""
    from engine.simulation.workloads import SimulateOptions

    return SimulateOptions(
        seed=args.seed,
        workload=args.workload,
        histories=args.histories,
        ops=args.ops,
        ledger=args.ledger,
        data=args.data,
        duration=args.duration,
        deadline=args.deadline,
        clients=args.clients,
        partitions=args.partitions,
        faults=args.faults == "on",
        batching=args.batching,
        batch_messages=args.batch_messages,
        key_shared=args.key_shared,
        delayed_tracker=args.delayed_tracker,
        fault_mix=args.fault_mix,
        unsubscribe=args.unsubscribe,
        cumulative=args.cumulative,
        redeliver=args.redeliver,
        queries=args.queries,
        shared_delayed=args.shared_delayed,
        readers=args.readers,
        reread=args.reread,
        bounds=args.bounds,
        acks=args.acks,
        limits=args.limits,
        pipelined=args.pipelined,
        delayed_async=args.delayed_async,
        bucket_faults=args.bucket_faults,
        disk=args.disk,
        group_commit_ms=args.group_commit,
        disk_capacity=args.disk_capacity,
        quirks=tuple(args.quirk or ()),
    )


def simulate(
    options: SimulateOptions,
    *,
    out: Path | None = None,
    jsonl: bool = False,
    check: bool = False,
    quiet: bool = False,
    progress: Any = None,
    jobs: int = 1,
) -> int:
    """Run ``options``'s histories; write them under ``out`` (one Parquet file per workload, the
    delayed workload's bucket-tracker runs apart; ``jsonl``: JSON Lines too); with ``check``, check
    each one's transactional properties; ``progress`` (a :class:`views.progress.Phase`) hears of
    every history.  ``jobs`` runs that many at once, in processes (each run is deterministic on its
    own, so the histories are the same).  EXIT_OK when every run finished (and, with ``check``, was
    clean), EXIT_FAILED otherwise -- also when a broker component raised (contained as its crash,
    so the history is still written; each failure is named on stderr, even with ``quiet``).
    :class:`RunStopped` when a run's store was lost for good (corrupted ledger data, a full disk):
    the batch stops there, the histories recorded so far are written, that one marked
    ``incomplete`` in its run metadata."""
    from engine.simulation.workloads import run

    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    say: Callable[[str], None] = (lambda _: None) if quiet else (lambda m: print(m, file=sys.stderr))
    if progress is not None:
        progress.set_total(len(options.workloads) * options.histories)
    with tempfile.TemporaryDirectory(prefix="txnmodel-sim-") as scratch:
        specs = [spec for workload in options.workloads for spec in options.specs(workload, scratch)]
        collector = Collector(specs, out=out, jsonl=jsonl, check=check, say=say, progress=progress)
        for index, result in enumerate(_runs(specs, jobs, say, run)):
            collector.add(index, result)
            if collector.stopped is not None:
                break  # the runs after it are not started (the pool's are ended)
    if collector.stopped is not None:
        history, why = collector.stopped
        kept = f"kept in {out}, marked incomplete" if out is not None else "not written (no --out)"
        raise RunStopped(
            f"{history} stopped early, its storage lost: {one_line(why)}; "
            f"the history recorded until then is {kept}; later runs were not started"
        )
    return collector.status


class Collector:
    """The results of ``specs``' runs, taken in any order and dealt with in the specs' order: a line
    per run (and its transactional check with ``check``), ``progress`` told, and a workload's
    history files written under ``out`` once its last run is in (its results then let go);
    ``on_written`` hears of each file written, with the number of rows of each history in it.
    A run whose store was lost for good sets ``stopped`` and has its files written at once.
    ``status`` is EXIT_FAILED once a checked run was not clean or a run's broker component raised
    (each failure named on stderr)."""

    def __init__(
        self,
        specs: Sequence[RunSpec],
        *,
        out: Path | None = None,
        jsonl: bool = False,
        check: bool = False,
        say: Callable[[str], None] = lambda _: None,
        progress: Any = None,
        on_written: Callable[[Path, dict[str, int]], None] | None = None,
    ) -> None:
        self.specs, self.out, self.jsonl, self.check, self.say = specs, out, jsonl, check, say
        self.progress, self.on_written = progress, on_written
        self.status = EXIT_OK
        self.stopped: tuple[str, str] | None = None  # (history, why) of a run whose store was lost
        self._last = {spec.workload: index for index, spec in enumerate(specs)}
        self._early: dict[int, tuple[RunResult, Any]] = {}
        self._next = 0
        self._files: dict[str, dict[str, tuple[RunResult, Any]]] = {}

    def add(self, index: int, result: RunResult, table: Any = None) -> None:
        """The result of ``specs[index]``'s run; ``table``: its operations as a history table
        (:func:`history_io.files.history_table`, made where the run was) in place of
        ``result.operations``."""
        self._early[index] = (result, table)
        while self._next in self._early:
            self._take(self._next, *self._early.pop(self._next))
            self._next += 1

    def _take(self, index: int, result: RunResult, table: Any) -> None:
        from engine.simulation.workloads import file_stem

        spec = self.specs[index]
        if table is not None:
            rows = table.num_rows
            history = table.column("history")[0].as_py() if rows else f"{spec.workload}-{spec.seed}"
        else:
            rows = len(result.operations)
            history = result.operations[0].history if result.operations else f"{spec.workload}-{spec.seed}"
        self._files.setdefault(file_stem(spec), {})[history] = (result, table)
        line = (
            f"{history}: {rows} ops, {result.committed} commits, {result.aborted} "
            f"aborts, {result.crashes} broker crashes, {result.sim_time_ms} ms simulated"
            f"{' (cut at the deadline)' if result.cut else ''}"
            f"{f' (stopped: {result.incomplete})' if result.incomplete else ''}"
        )
        if result.failures:
            # A component raised: contained so the history is written, but the run failed.
            self.status = EXIT_FAILED
            for failure in result.failures:
                print(f"{history}: engine failure: {failure.describe()}", file=sys.stderr)
        if self.check:
            clean, verdict_line = _check(result, self.say)
            line += verdict_line
            if not clean:
                self.status = EXIT_FAILED
        self.say(line)
        if self.progress is not None:
            self.progress.advance(note=history)
        if result.incomplete is not None:
            self.stopped = (history, result.incomplete)
        if index == self._last[spec.workload] or self.stopped is not None:
            # A workload's files are written once its last run is in, and its results let go.
            if self.out is not None:
                _write(self.out, self._files, self.jsonl, self.say)
                if self.on_written is not None:
                    for stem, runs in sorted(self._files.items()):
                        sizes = {
                            name: table.num_rows if table is not None else len(result.operations)
                            for name, (result, table) in runs.items()
                        }
                        self.on_written(self.out / f"{stem}.parquet", sizes)
            self._files = {}


class RunStopped(InputError):
    """A run's store was lost for good (:func:`engine.ledger_store.storage_lost`): the batch
    stopped, exit 2 (the input it was given, a disk or a store, cannot hold the run)."""


def _runs(
    specs: Sequence[RunSpec], jobs: int, say: Callable[[str], None], run: Callable[..., RunResult]
) -> Iterator[RunResult]:
    """Every run's result, in the order of ``specs``: here, or ``jobs`` at a time in processes."""
    if jobs == 1 or len(specs) < 2:
        for spec in specs:
            yield run(spec, say)
        return
    import gc
    import multiprocessing

    # Fork: the children inherit the imported engine instead of importing it again, and leave what
    # they inherited to this process's collector (runners.main_job.Pipeline says why).
    context = multiprocessing.get_context("fork")
    with context.Pool(min(jobs, len(specs)), initializer=gc.freeze) as pool:
        yield from pool.imap(run, specs)


def _check(result: RunResult, say: Callable[[str], None]) -> tuple[bool, str]:
    """The transactional checker's verdict on one run: (clean, the text for its line); the first
    anomalies are said on their own lines."""
    from invariants.transactional import check_transactional

    verdict = check_transactional(result.operations)
    text = ", transactional: " + ("ok" if verdict.ok else json.dumps(verdict.counts))
    if not verdict.ok:
        for anomaly in verdict.anomalies[:5]:
            say(f"    {anomaly}")
    return verdict.ok, text


def _write(
    out: Path, files: dict[str, dict[str, tuple[RunResult, Any]]], jsonl: bool, say: Callable[[str], None]
) -> None:
    """One history file per stem, its runs in id order with their metadata."""
    from engine.simulation.workloads import file_metadata
    from history_io.files import write_jsonl, write_parquet, write_parquet_tables

    for stem, runs in sorted(files.items()):
        metadata = file_metadata({name: result for name, (result, _) in runs.items()})
        tables = [table for _, table in runs.values()]
        if all(table is not None for table in tables):
            write_parquet_tables(out / f"{stem}.parquet", tables, metadata=metadata)
        else:
            histories = {name: result.operations for name, (result, _) in runs.items()}
            write_parquet(out / f"{stem}.parquet", histories, metadata=metadata)
            if jsonl:
                write_jsonl(out / f"{stem}.jsonl", histories, metadata=metadata)
        say(f"wrote {out / f'{stem}.parquet'}")


def run_simulate(args: argparse.Namespace) -> int:
    """``txnmodel simulate`` for arguments already parsed by :func:`build_parser`; progress on
    stderr unless ``--quiet``.  Usage errors (a seed range past int64, ``--data`` without file
    ledgers, an ``--out`` or ``--data`` that is not an empty folder of this run alone) come before
    any work."""
    from views.progress import Reporter

    last = args.seed + args.histories - 1
    if last > INT64_MAX:
        raise UsageError(
            f"--seed {args.seed} with --histories {args.histories}: the last seed {last} passes {INT64_MAX}"
        )
    if args.data is not None and args.ledger != "file":
        raise UsageError("--data is where file ledgers go: it needs --ledger file")
    if args.disk_capacity is not None and (args.ledger != "file" or args.disk != "sim"):
        raise UsageError("--disk-capacity bounds the simulated disk: it needs --ledger file --disk sim")
    options = options_from_args(args)
    total = len(options.workloads) * options.histories
    with contextlib.ExitStack() as folders:
        out = None
        if args.out is not None:
            out = folders.enter_context(
                exclusive_folder(Path(args.out), "--out", overwrite=args.overwrite, ours=history_file)
            )
        if args.data is not None and not _same_folder(args.data, args.out):
            folders.enter_context(
                exclusive_folder(Path(args.data), "--data", overwrite=args.overwrite, ours=_store_folder)
            )
        elif args.data is not None and args.overwrite:  # one folder for both, already locked
            for entry in Path(args.data).iterdir():
                if _store_folder(entry):
                    shutil.rmtree(entry)
        with Reporter(enabled=not args.quiet).phase("simulate", total=total, unit="histories") as phase:
            return simulate(
                options,
                out=out,
                jsonl=args.jsonl,
                check=args.check,
                quiet=args.quiet,
                progress=phase,
                jobs=args.jobs,
            )


def reproduce_argv(run: Mapping[str, Any]) -> list[str] | None:
    """The ``txnmodel simulate`` arguments that rerun one run, from its metadata (a history file's
    ``runs[history]``, :meth:`RunSpec.to_json` and more), or None when the command line cannot say
    it: parsing the arguments back must give the very same run configuration, fault rates and
    broker.conf overrides included, so the line never promises what it does not do.  The fault mix
    is not recorded by name: the one whose rates the run used is found by trying each."""
    from engine.simulation.workloads import FAULT_MIXES

    def on_off(flag: object) -> str:
        return "on" if flag else "off"

    try:
        argv = [
            "--workload", str(run["workload"]),
            "--seed", str(run["seed"]),
            "--histories", "1",
            "--ops", str(run["ops"]),
            "--ledger", str(run["ledger"]),
            "--clients", str(run["clients"]),
            "--partitions", str(run["partitions"]),
            "--faults", on_off(run["faults"]),
            "--batching", on_off(run["batching"]),
            "--batch-messages", on_off(run["batch_messages"]),
            "--key-shared", on_off(run["key_shared"]),
            "--delayed-tracker", str(run["delayed_tracker"]),
            "--unsubscribe", on_off(run["unsubscribe"]),
            "--cumulative", on_off(run["cumulative"]),
            "--redeliver", on_off(run["redeliver"]),
            "--queries", on_off(run.get("queries", False)),
            "--shared-delayed", on_off(run.get("shared_delayed", False)),
            "--readers", on_off(run.get("readers", False)),
            "--reread", on_off(run.get("reread", False)),
            "--bounds", on_off(run.get("bounds", False)),
            "--acks", on_off(run.get("acks", False)),
            "--limits", on_off(run.get("limits", False)),
            "--pipelined", on_off(run.get("pipelined", False)),
            "--delayed-async", on_off(run.get("delayed_async", False)),
            "--bucket-faults", on_off(run.get("bucket_faults", False)),
            "--deadline", str(run["deadline_ms"]),
        ]  # fmt: skip
    except KeyError:
        return None
    if run.get("duration_ms") is not None:
        argv += ["--duration", str(run["duration_ms"])]
    if run.get("disk") is not None:
        argv += ["--disk", str(run["disk"])]
    if run.get("group_commit_ms") is not None:
        argv += ["--group-commit", str(run["group_commit_ms"])]
    if run.get("disk_capacity") is not None:
        argv += ["--disk-capacity", str(run["disk_capacity"])]
    for mix in FAULT_MIXES:
        candidate = [*argv, "--fault-mix", mix] if mix != "default" else argv
        if _says(candidate, run):
            return candidate
    return None


def _says(argv: list[str], run: Mapping[str, Any]) -> bool:
    """Whether ``argv``, parsed as the command line would, asks for exactly the run ``run`` is."""
    try:
        args = build_parser(argparse.ArgumentParser(exit_on_error=False, add_help=False)).parse_args(argv)
    except (TypeError, argparse.ArgumentError):
        return False
    (spec,) = options_from_args(args).specs(str(run["workload"]), "unused")
    return all(run.get(key) == value for key, value in spec.to_json().items())


def reproduce_command(history: str, run: Mapping[str, Any]) -> str | None:
    """The shell command that reruns one history into a folder of its own, or None (see
    :func:`reproduce_argv`)."""
    argv = reproduce_argv(run)
    if argv is None:
        return None
    return shlex.join(["txnmodel", "simulate", *argv, "--out", f"reproduce-{history}"])


def history_file(entry: Path) -> bool:  # also the main job's
    """What simulate writes in ``--out``: history files and their metadata sidecars."""
    return entry.is_file() and entry.name.endswith((".parquet", ".jsonl", ".meta.json"))


_STORE = re.compile(r"[a-z]+-seed-?\d+")


def _store_folder(entry: Path) -> bool:
    """What simulate writes in ``--data``: one ledger store per run, ``<workload>-seed<N>``."""
    return entry.is_dir() and not entry.is_symlink() and _STORE.fullmatch(entry.name) is not None


def _same_folder(a: str, b: str | None) -> bool:
    return b is not None and Path(a).resolve() == Path(b).resolve()


def simulate_main(argv: Sequence[str]) -> int:
    """``txnmodel simulate``: 0 when every run finished (and, with --check, was clean), 1 otherwise."""
    return run_simulate(build_parser().parse_args(argv))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "simulate",
        help="simulate workloads with faults and record histories (engine)",
        description="Run named workloads (ctp: consume-transform-produce across topics; multi: atomic "
        "multi-partition produce; delayed: delayed delivery mixed with transactions) on the broker built from the "
        "reference machines, under a seeded scheduler that injects faults (broker and coordinator crashes, ledger "
        "failures, lost/delayed/duplicated requests and responses, transaction timeouts). Same seed, same history, "
        "byte for byte. Histories go to --out as Parquet. Progress goes to stderr (a live bar on a terminal, a line "
        "at least every 10 s otherwise). Exit 0 when every run finished (and with --check was "
        "clean), 1 otherwise.",
    )
    build_parser(parser)
    parser.set_defaults(func=run_simulate)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(simulate_main(sys.argv[1:]))
