"""``txnmodel check``: exhaustive exploration of the composed protocol (proofs/check)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from txnmodel.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, positive_int, print_json, spark_master

__all__ = ["CheckOutOfMemory", "ModelRun", "check_models", "cmd_check", "register"]


class CheckOutOfMemory(Exception):
    """A model's exploration ran out of memory (a ``MemoryError``, or an allocation or map refused
    under an address-space limit): what ran out, how far the run got, and what to do.  The run is
    incomplete, so it has no verdict; the command exits 2 (the bounds or the limits are the input
    at fault, not the model)."""

    def __init__(
        self,
        model: str,
        *,
        states: int,
        depth: int,
        frontier: int,
        spill: int | None,
        liveness: bool,
        detail: str,
    ) -> None:
        self.model, self.states, self.depth, self.frontier, self.spill = model, states, depth, frontier, spill
        if spill is None:
            if liveness:
                what = "the seen set, the frontier and the liveness check's state graph are all in memory"
                flags = "--no-liveness --spill 250000"
            else:
                what = "the seen set and the frontier are in memory"
                flags = "--spill 250000"
            advice = f"{what}: add {flags} to keep the seen set and the frontier on disk"
        else:
            smaller = max(1, spill // 4)
            advice = (
                f"--spill {spill} holds up to {spill:,} fingerprints, {spill:,} frontier states and {spill:,} pending "
                f"successors in memory: try --spill {smaller}, or raise the memory limit (ulimit -v)"
            )
        super().__init__(
            f"out of memory exploring model {model} after {states:,} distinct states (depth {depth} reached, "
            f"expanding its {frontier:,} states): {detail}; the run is incomplete, no verdict; {advice}"
        )


# How close to an address-space limit (``ulimit -v``) a run may grow before it stops with
# :class:`CheckOutOfMemory`.  At the limit itself glibc and CPython do not fail fast: every
# allocation first tries to map a new arena, fails, and falls back, so a process pressed against
# its limit can crawl for many minutes before one allocation finally raises ``MemoryError``.
_ADDRESS_SPACE_RESERVE = 16 * 1024 * 1024
_WATCH_INTERVAL_S = 0.05


def _address_space_limit() -> int | None:
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _mapped_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None  # not Linux: the allocator's own MemoryError is all there is


@contextlib.contextmanager
def _address_space_watch() -> Any:
    """Under an address-space limit, interrupt the run (``KeyboardInterrupt`` in the main thread)
    once it maps within :data:`_ADDRESS_SPACE_RESERVE` of the limit; yields a list that holds the
    mapped size at which it did.  Without a limit, or off Linux, it watches nothing."""
    import _thread
    import threading

    limit = _address_space_limit()
    tripped: list[int] = []
    if limit is None or _mapped_bytes() is None:
        yield tripped
        return
    done = threading.Event()

    def watch() -> None:
        while not done.wait(_WATCH_INTERVAL_S):
            mapped = _mapped_bytes()
            if mapped is not None and mapped >= limit - _ADDRESS_SPACE_RESERVE:
                tripped.append(mapped)
                _thread.interrupt_main()
                return

    old_size = threading.stack_size(256 * 1024)  # the watcher's stack counts against the limit too
    try:
        watcher = threading.Thread(target=watch, name="check-address-space", daemon=True)
        watcher.start()
    finally:
        threading.stack_size(old_size)
    try:
        yield tripped
    finally:
        done.set()
        watcher.join()


class ModelRun:
    """One model's run: its result and the model (for rendering its counterexamples)."""

    def __init__(self, name: str, result: Any, model: Any, quirks: tuple[str, ...]) -> None:
        self.name, self.result, self.model, self.quirks = name, result, model, quirks


def _parse_bounds(items: list[str]) -> dict[str, int]:
    bounds: dict[str, int] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--bound {item!r}: expected K=V")
        try:
            bounds[key.strip()] = int(value)
        except ValueError:
            raise ValueError(f"--bound {item!r}: {value!r} is not an integer") from None
    return bounds


def check_models(
    names: list[str],
    bounds: dict[str, int],
    *,
    quirks: tuple[str, ...] = (),
    master: str | None = None,
    symmetry: bool = True,
    por: bool = True,
    liveness: bool = True,
    strict: bool = False,
    max_states: int | None = None,
    spill: int | None = None,
    keep_going: bool = False,
    progress: bool = False,
    level: Callable[[int, int, int], None] | None = None,
    step_timeout_s: float | None = 20.0,
    reporter: Any = None,
) -> list[ModelRun]:
    """Run the named models (bounds apply to every model that has them); raise BadBound on bad input.
    ``reporter`` (a :class:`views.progress.Reporter`): a progress phase per model, its distinct
    states counted at every breadth-first level."""
    from proofs.check.explore import Options
    from proofs.check.models import MODELS, BadBound, build

    on_level = level

    runs = []
    for name in names:
        known = MODELS.get(name)
        if known is None:
            raise BadBound(f"unknown model {name!r}; models are {', '.join(MODELS)}")
        mine = {k: v for k, v in bounds.items() if k in known.defaults}
        if len(names) == 1:
            mine = bounds  # a single model: an unknown bound is an error
        spec = build(name, mine, quirks=quirks)
        spec = _with_quirks(spec, quirks)
        reached = [0, 1, 1]  # the last level's (depth, states, frontier), for an out-of-memory report
        phases = contextlib.ExitStack()
        phase = phases.enter_context(reporter.phase(f"check: {name}", unit="states")) if reporter else None

        def printer(
            depth: int, states: int, frontier: int, name: str = name, phase: Any = phase, reached: list[int] = reached
        ) -> None:
            reached[:] = [depth, states, frontier]
            if progress:
                print(f"  {name}: depth {depth}, {states} states, frontier {frontier}", file=sys.stderr, flush=True)
            if phase is not None:
                phase.advance(states - phase.done, note=f"depth {depth}, frontier {frontier}")
            if on_level is not None:
                on_level(depth, states, frontier)

        visited, frontier, spilled, spill_dir = _seen_sets(spill, liveness=liveness, master=master)

        options = Options(
            symmetry=symmetry,
            por=por,
            liveness=liveness,
            strict=strict,
            max_states=max_states,
            stop_at_first=not keep_going,
            step_timeout_s=step_timeout_s,
            progress=printer,
            visited=visited,
            frontier=frontier,
            settle_every=spill,
        )
        with phases:
            if master is None:
                result, model = _explore_here(
                    name, spec, options, step_timeout_s, spilled, spill_dir, reached, spill=spill, liveness=liveness
                )
            else:
                from proofs.check.spark import explore_spark
                from runners.spark import spark_session

                result, model = explore_spark(spec, options, spark_session(master, "txnmodel-check"))
        runs.append(ModelRun(name, result, model, quirks))
    return runs


def _explore_here(
    name: str,
    spec: Any,
    options: Any,
    step_timeout_s: float | None,
    spilled: list[Any],
    spill_dir: str | None,
    reached: list[int],
    *,
    spill: int | None,
    liveness: bool,
) -> tuple[Any, Any]:
    """Explore ``spec`` in this process: the result and the model.  The seen sets made are closed and
    the spill directory removed, however it ends; a run that runs out of memory (``reached``: its
    last level's depth, states and frontier) raises :class:`CheckOutOfMemory`."""
    from proofs.check.explore import MemoryVisited, explore
    from proofs.check.model import Model

    model = Model(spec, step_timeout_s=step_timeout_s)
    ran_out = ""
    try:
        result = _explore_watched(explore, model, options)
    except MemoryError as exc:
        ran_out = f"{type(exc).__name__}: {exc}" if str(exc) else "MemoryError"
    except OSError as exc:
        if exc.errno != errno.ENOMEM:
            raise
        ran_out = f"a memory map was refused ({exc.strerror})"
    finally:
        states = len(spilled[0]) if spilled else reached[1]
        for seen in spilled:
            if not isinstance(seen, MemoryVisited):
                seen.close()
        spilled.clear()
        if spill_dir is not None:
            shutil.rmtree(spill_dir, ignore_errors=True)
    # Raised out of the except clause, so the failed exploration's frames (and all they held) are
    # released before the report is built.
    if ran_out:
        depth, _states, level_states = reached
        raise CheckOutOfMemory(
            name,
            states=states,
            depth=depth,
            frontier=level_states,
            spill=spill,
            liveness=liveness,
            detail=ran_out,
        )
    return result, model


def _seen_sets(spill: int | None, *, liveness: bool, master: str | None) -> tuple[Any, Any, list[Any], str | None]:
    """The explorer's seen-set and frontier factories: in memory, or spilling to a fresh directory
    (``--spill``); with the list every seen set made is put in (to close them) and that directory."""
    from proofs.check.explore import MemoryVisited
    from proofs.check.models import BadBound

    spilled: list[Any] = []
    if spill is None:

        def in_memory() -> Any:
            seen = MemoryVisited()
            spilled.append(seen)
            return seen

        return in_memory, None, spilled, None
    import tempfile

    from proofs.check.fpset import SpillingFrontier, SpillingVisited

    if liveness:
        raise BadBound(
            "--spill bounds the seen set and the frontier, not the liveness check's graph (the whole "
            "reachable graph, in memory): a spilled run checks safety only, add --no-liveness"
        )
    if master is not None:
        raise BadBound("--spill is for the single-process run (on Spark the seen set is on disk already)")
    spill_dir = tempfile.mkdtemp(prefix="txnmodel-frontier-")

    def spilling() -> Any:
        seen = SpillingVisited(memory_states=spill)
        spilled.append(seen)
        return seen

    def frontier() -> Any:
        return SpillingFrontier(spill_dir, memory_states=spill)

    return spilling, frontier, spilled, spill_dir


def _explore_watched(explore: Callable[[Any, Any], Any], model: Any, options: Any) -> Any:
    """``explore`` under :func:`_address_space_watch`: the watcher's interrupt is a ``MemoryError``."""
    with _address_space_watch() as tripped:
        try:
            return explore(model, options)
        except KeyboardInterrupt:
            if not tripped:
                raise
            limit = _address_space_limit() or 0
            raise MemoryError(
                f"{tripped[0] / 2**20:,.0f} MiB mapped, within {_ADDRESS_SPACE_RESERVE // 2**20} MiB of the "
                f"address-space limit ({limit / 2**20:,.0f} MiB, ulimit -v)"
            ) from None


def _with_quirks(spec: Any, quirks: tuple[str, ...]) -> Any:
    from dataclasses import replace

    if not quirks:
        return spec
    return replace(spec, bounds={**spec.bounds, "quirks": list(quirks)})


def _bounds_text(bounds: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in bounds.items())


def write_counterexamples(run: ModelRun, out: Path) -> list[str]:
    """Write each violation's trace as text, as the viewer's trace JSON and its page, as a history
    (JSON Lines, which ``txnmodel verify`` checks), as a replayable test and, when it involves one
    machine, as a vector.  The folders written."""
    from history_io.files import write_jsonl
    from proofs.check.trace import render_text, trace_history, trace_json, trace_test, trace_vector
    from proofs.check.trace_format import Trace
    from views.trace import trace_page

    written = []
    for violation in run.result.violations:
        stem = violation.name.replace("/", "-")
        folder = out / run.name / stem
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "trace.txt").write_text(render_text(run.model, violation) + "\n", encoding="utf-8")
        document = trace_json(run.model, violation, run.result)
        (folder / "trace.json").write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        (folder / "trace.html").write_text(trace_page(Trace.from_json(document)), encoding="utf-8")
        history = trace_history(run.model, violation.trace, name=f"check-{run.name}-{stem}")
        write_jsonl(folder / "history.jsonl", history)
        (folder / f"test_{stem.replace('-', '_')}.py").write_text(
            trace_test(run.model, violation, quirks=run.quirks), encoding="utf-8"
        )
        vector = trace_vector(run.model, violation)
        if vector is not None:
            vector = {"$schema": "../../../spec/vectors.schema.json", **vector}
            (folder / "vector.json").write_text(json.dumps(vector, indent=2) + "\n", encoding="utf-8")
        written.append(str(folder))
    return written


def summary_json(run: ModelRun, written: list[str]) -> dict[str, Any]:
    r = run.result
    return {
        "model": run.name,
        "bounds": dict(run.model.spec.bounds),
        "verdict": r.verdict,
        "states": r.states,
        "transitions": r.transitions,
        "depth": r.depth,
        "seconds": round(r.seconds, 3),
        "states_per_second": round(r.states / r.seconds, 1) if r.seconds > 0 else None,
        "reductions": r.reductions,
        "liveness_checked": r.liveness_checked,
        "notes": r.notes,
        "violations": [
            {"kind": v.kind, "property": v.name, "length": v.length, "cycle_start": v.cycle_start, "detail": v.detail}
            for v in r.violations
        ],
        "counterexamples": written,
    }


def cmd_check(args: argparse.Namespace) -> int:
    from proofs.check.models import DEFAULT_MODELS, MODELS, BadBound
    from proofs.check.trace import render_text
    from views.progress import Reporter

    if args.list:
        for name, model in MODELS.items():
            print(f"{name}: {model.summary}\n    bounds: {_bounds_text(dict(model.defaults))}")
        return EXIT_OK
    names = list(DEFAULT_MODELS) if not args.model or args.model == ["default"] else list(args.model)
    if names == ["all"]:
        names = list(MODELS)
    try:
        bounds = _parse_bounds(args.bound or [])
        started = time.perf_counter()
        runs = check_models(
            names,
            bounds,
            quirks=tuple(args.quirk or ()),
            master=None if args.local or args.master is None else args.master,
            symmetry=not args.no_symmetry,
            por=not args.no_por,
            liveness=not args.no_liveness,
            strict=args.strict,
            max_states=args.max_states,
            spill=args.spill,
            keep_going=args.keep_going,
            progress=args.progress,
            reporter=Reporter(enabled=not args.json and not args.no_progress),
        )
    except (BadBound, ValueError) as exc:
        print(f"txnmodel check: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except CheckOutOfMemory as exc:
        print(f"txnmodel check: {exc}", file=sys.stderr)
        if args.json:
            print_json(
                {
                    "error": "out-of-memory",
                    "model": exc.model,
                    "states": exc.states,
                    "depth": exc.depth,
                    "message": str(exc),
                    "exit": EXIT_BAD_INPUT,
                }
            )
        return EXIT_BAD_INPUT
    out = Path(args.out)
    worst = EXIT_OK
    summaries = []
    for run in runs:
        written = write_counterexamples(run, out) if run.result.violations else []
        if not run.result.ok:
            worst = EXIT_FAILED
        summaries.append(summary_json(run, written))
        if args.json:
            continue
        r = run.result
        print(f"== {run.name}: {run.model.spec.description}")
        print(f"   bounds: {_bounds_text(dict(run.model.spec.bounds))}")
        reductions = ", ".join(k for k, v in r.reductions.items() if v) or "none"
        rate = f"{r.states / r.seconds:,.0f} states/s" if r.seconds > 0 else ""
        print(
            f"   {r.verdict.upper()}: {r.states:,} states, {r.transitions:,} transitions, depth {r.depth}, "
            f"{r.seconds:.1f}s ({rate}); reductions: {reductions}; "
            f"liveness {'checked' if r.liveness_checked else 'off'}"
        )
        for note in r.notes:
            print(f"   note: {note}")
        for violation, folder in zip(r.violations, written, strict=False):
            print()
            print(render_text(run.model, violation))
            print(f"   counterexample files: {folder}")
        if r.violations:
            print()
    if args.json:
        print_json({"models": summaries, "seconds": round(time.perf_counter() - started, 3), "exit": worst})
    return worst


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check",
        help="model-check the composed protocol exhaustively within bounds (safety and liveness)",
        description="Explore every interleaving of the composed protocol -- clients, the coordinator, partition "
        "buffers, subscriptions' pending acks, a network that loses, duplicates and reorders, crashes and "
        "timeouts -- built from the reference machines' own steps, within explicit bounds. Checks every "
        "invariant and the cross-machine properties in every reachable state, and liveness (fair lassos). "
        "Counterexamples are shortest traces, printed step by step and written under --out as text, the "
        "viewer's trace JSON and its page, a history for `txnmodel verify`, a replayable test and, for one "
        "machine, a vector. "
        "Exit 0 all models passed, 1 a violation (or an incomplete run), 2 bad input.",
    )
    check.add_argument(
        "--model",
        action="append",
        help="a model name (repeatable); 'default' (the main job's) or 'all'; see --list",
    )
    check.add_argument("--bound", action="append", metavar="K=V", help="override a bound (repeatable)")
    check.add_argument(
        "--quirk",
        action="append",
        metavar="NAME",
        help="switch on a named quirk (append-after-abort, abort-hides-committed)",
    )
    where = check.add_mutually_exclusive_group()
    where.add_argument(
        "--master", type=spark_master, help="run on Spark at this master URL (e.g. local[2], spark://host:7077)"
    )
    where.add_argument("--local", action="store_true", help="run in this process (the default)")
    check.add_argument("--json", action="store_true", help="machine-readable summary on stdout")
    check.add_argument("--strict", action="store_true", help="also the liveness Pulsar does not promise (re-opens)")
    check.add_argument("--no-symmetry", action="store_true", help="explore without symmetry reduction")
    check.add_argument("--no-por", action="store_true", help="explore without partial-order reduction")
    check.add_argument(
        "--no-liveness", action="store_true", help="safety only (reductions apply; no graph kept in memory)"
    )
    check.add_argument(
        "--keep-going",
        action="store_true",
        help="explore the whole graph after a violation: every violated property, with its shortest trace",
    )
    check.add_argument(
        "--max-states", type=positive_int, help="stop after this many states (the verdict is incomplete)"
    )
    check.add_argument(
        "--spill",
        type=positive_int,
        metavar="N",
        help=(
            "bounded memory for big safety runs (with --no-liveness): at most N fingerprints, N frontier states "
            "and N pending successors in memory, the rest on disk"
        ),
    )
    check.add_argument("--out", default=os.path.join("out", "check"), help="where counterexamples go (out/check)")
    check.add_argument("--progress", action="store_true", help="print each BFS level to stderr")
    check.add_argument("--no-progress", action="store_true", help="no progress display on stderr (--json implies it)")
    check.add_argument("--list", action="store_true", help="list the models and their default bounds")
    check.set_defaults(func=cmd_check)
