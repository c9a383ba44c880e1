"""Mutation report: which layer kills each automatic mutant of reference/ (``devtools.mutation``).

    .venv/bin/python benchmarks/mutation_report.py [--per-machine 8] [--seed 0] [--seeds 5] [--ops 30]
        [--jobs 2] [--machines buffer,delayed] [--tests changed|all|none] [--out out/mutation]
        [--mutants buffer:81,coordinator:222] [--deadline 600000] [--retest | --rewrite]

For a seeded sample of ``--per-machine`` mutants of each machine:

* **history**: the main job's workloads (ctp, multi, delayed with its batch, Key_Shared, bucket
  tracker and fault-mix variants by seed, faults on, memory ledger: the same histories as the file
  ledger, shorter) at seeds ``1..--seeds`` with ``--ops`` transactions, each compared with the
  unmutated run of the same seed.  A mutant whose function no workload executes (traced once on
  the unmutated runs) cannot change a history and is not run.  A changed history is checked by
  the **bulk** checker (``invariants.verify.check_histories``, what ``txnmodel verify`` runs) and by
  the **oracle** (``invariants.client_visible``), in a checker process forked *before* the mutant
  is applied: the mutated engine is the system under test, and its per-object linearizability
  check runs against the unmutated reference (a model that shared the mutant's bug would accept
  every step it took); each stops at its first flagged seed.  A broker component that raises is
  contained as its crash (``Broker.contain``): the history records the step that raised as failed
  (``UnknownError``), or a ``raised`` row when it raised outside any step, and the run goes on, so
  the history is judged like any other (the row notes ``raised``).  The client library's own
  exception fails the operation it was serving with the exception's type (TC-37) and is noted
  ``raised`` too.  A run that still raises (a workload's or the simulator's own exception) or does
  not finish is a **run fails** detection (the main job fails, though no checker judged a
  history).
* **vectors**: the machine's conformance vectors; **proofs**: ``prove_machine`` when the proofs can
  execute the mutated function at all (:func:`proof_reach`; Z3 proves the encoding, not the
  reference, so usually they cannot); **tests**: ``pytest -x tests/<machine>`` with the mutant, without the two
  pure Z3 tests (``test_every_obligation_is_proved``, ``test_a_broken_rule_is_refuted``: the proofs
  layer).  The static layers run in that order and stop at the first kill; ``--tests changed`` (the
  default) runs the tests only for mutants that changed a history and that vectors and proofs left
  alive, which is what the goals are about.
* **model checker**: ``txnmodel check`` on the default models at their default bounds (safety and
  liveness, the reductions on; each model stopped at ``MODEL_MAX_STATES``), with the mutant applied to
  the machines whose ``step`` functions the composed model runs: killed by a violation, or by a step
  that raises or diverges.  Run for every mutant, after the proofs, in the same child.

Each mutant runs in a forked child (a hang or a corrupted state dies with it).  Writes
``OUT/report.json`` and ``OUT/report.md`` and prints the per-machine table with the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.mutation import (  # noqa: E402
    MACHINE_MODULES,
    Mutant,
    MutationError,
    applied,
    enumerate_mutants,
    sample,
)
from engine.simulation.workloads import WORKLOADS, RunSpec, main_job_spec, run  # noqa: E402
from spec.history import Operation  # noqa: E402

PURE_Z3_TESTS = "not test_every_obligation_is_proved and not test_a_broken_rule_is_refuted"


@contextlib.contextmanager
def traced(modules: set[str]) -> Iterator[set[tuple[str, str]]]:
    """Collect (module, top-level qualname) of every function of ``modules`` called inside."""
    files = {str(Path(sys.modules[m].__file__ or "").resolve()): m for m in modules}
    seen: set[tuple[str, str]] = set()
    codes: set[Any] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code not in codes:
                codes.add(code)
                module = files.get(code.co_filename)
                if module is not None:
                    seen.add((module, code.co_qualname.split(".<locals>")[0]))

    for m in modules:
        __import__(m)
    files = {str(Path(sys.modules[m].__file__ or "").resolve()): m for m in modules}
    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


# The verdicts that flag a history: a violation (safety or liveness) or rows that break the history
# contract.  ``skipped`` (nothing to judge), ``unknown`` (the search gave up) and ``error`` (a checker
# raised) say the check could not judge: they are listed, never counted as flagging the mutant.
FLAGGING = ("illegal", "late", "bad-input")


def check_history(name: str, ops: list[Operation]) -> tuple[bool, bool, list[str]]:
    """(bulk flagged, oracle flagged, what) for one history, as ``txnmodel verify`` checks it: the
    linearizability and transactional rows are the bulk checker's, the ``delivery`` row the oracle's.
    ``what`` names every verdict that is not ok; only those in :data:`FLAGGING` flag."""
    from invariants.verify import VerifyOptions, check_histories

    bulk: list[str] = []
    oracle: list[str] = []
    undecided: list[str] = []
    for r in check_histories({name: ops}, "mutation", VerifyOptions(counterexamples=False)):
        if r.verdict == "ok":
            continue
        if r.verdict not in FLAGGING:
            undecided.append(f"{r.checker}:{r.verdict}")
            continue
        names = [r.verdict]
        if r.checker in ("transactional", "delivery") and r.verdict == "illegal":
            with contextlib.suppress(Exception):
                names = sorted(json.loads(r.detail)["counts"])
        (oracle if r.checker == "delivery" else bulk).extend(f"{r.checker}:{n}" for n in names)
    return bool(bulk), bool(oracle), bulk + oracle + undecided


@dataclass
class Context:
    specs: list[RunSpec]
    baseline: dict[str, list[Operation]]
    reached: set[tuple[str, str]]
    proof_reach: dict[str, set[str]]
    # The flip layer (``--flips``): the histories each mutant is judged on (by mutant id), and only
    # the history layer runs.
    specs_for: dict[str, list[RunSpec]] | None = None
    # and the histories it is judged on next when none of those flags it: one per variant of the main
    # job that none of them has switched on (:func:`_variant_histories`)
    more_for: dict[str, list[RunSpec]] | None = None
    # and, in a second round for a flip that none of those changed, the next histories in the reach
    # report's order that executed its ``if`` (``--per-seed``)
    seed_for: dict[str, list[RunSpec]] | None = None


def _name(spec: RunSpec) -> str:
    return f"{spec.workload}-seed{spec.seed}"


def checker(conn: Any, other: Any) -> None:
    """In a process forked before the mutant is applied: check each history sent, with the
    unmutated reference as the per-object model (the system under test is the mutated engine; the
    model it is checked against must not share its bug).  Ends when the child does (its end of the
    pipe closes), so a child stopped at its deadline leaves no checker behind."""
    other.close()
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        conn.send(check_history(*message))


def static_layers(mutant: Mutant, ctx: Context, conn: Any) -> None:
    """Vectors, proofs and the model checker, with the mutant applied; each result sent as it comes."""
    from proofs.framework import Verdict, prove_machine
    from runners.vectors import run_paths

    try:
        results = run_paths([str(ROOT / "spec" / "vectors" / mutant.machine)])
        failed = [r.vector_id for r in results if not r.passed]
        conn.send(("vectors", f"killed ({failed[0]})" if failed else "survived"))
    except Exception as exc:  # a mutant that makes the runner raise is killed by it
        conn.send(("vectors", f"killed (raised {type(exc).__name__})"))
    if mutant.function in ctx.proof_reach.get(mutant.machine, set()):
        try:
            # the framework's own resource limit (deterministic, unlike a timeout); an argument it
            # does not take had made every such call raise TypeError, counted as a kill
            rows = prove_machine(mutant.machine)
            bad = [r.name for r in rows if r.verdict is not Verdict.PROVED]
            conn.send(("proofs", f"killed ({bad[0]})" if bad else "survived"))
        except Exception as exc:
            conn.send(("proofs", f"killed (raised {type(exc).__name__})"))
    else:
        conn.send(("proofs", "unreached"))
    conn.send(("model", model_layer()))


def client_view(ops: list[Operation]) -> list[tuple[Any, ...]]:
    """What the clients saw, up to naming: each client operation without its index, its process
    renamed in order of first appearance.  The engine numbers client and machine-level processes
    from one counter and indexes every row, so a flip that only adds or drops machine rows renumbers
    the clients' processes and shifts their indexes without changing a thing any client saw (found
    triaging the pending ack's flips: ``_end_txn``'s commit arm on ctp seed 1)."""
    from spec.history import is_machine_operation

    names: dict[int, int] = {}
    return [
        (
            names.setdefault(op.process, len(names)),
            op.type,
            op.f,
            op.object,
            op.value,
            op.result,
            op.invoked_at,
            op.completed_at,
            op.error,
        )
        for op in ops
        if not is_machine_operation(op)
    ]


# A mutated machine's step that loops forever is stopped by the run's watchdog (engine.simulation.watchdog)
# after this many wall seconds and contained as its component's failure, so its history is judged;
# clean steps take milliseconds, and a mutant's runs get the layer's whole timeout between them.
MUTANT_EVENT_LIMIT_S = 5.0


def history_layer(
    specs: list[RunSpec], ctx: Context, conn: Any, to_checker: Any, more: list[RunSpec] | None = None
) -> dict[str, Any]:
    """The histories of ``specs`` with the mutant applied, each compared with its unmutated run and,
    when it changed, checked in the checker process.  ``client_changed``: a client operation
    changed, not only the machines' rows (:func:`client_view`).  ``more``: histories judged next,
    only while no check has flagged the mutant, up to the first that does (``by_variant`` names it)."""
    state: dict[str, Any] = {"changed": False, "reached": True, "bulk": None, "oracle": None, "flags": []}
    first = len(specs)
    for k, spec in enumerate([*specs, *(more or [])]):
        if k >= first and (state["bulk"] or state["oracle"] or "engine" in state):
            break
        if k == first:
            state["more_histories"] = len(more or [])
        name = _name(spec)
        conn.send(("running", name))
        try:
            result = run(spec, event_limit_s=MUTANT_EVENT_LIMIT_S)
        except Exception as exc:
            state.update(changed=True, engine=f"{name}: raised {type(exc).__name__}: {str(exc)[:120]}")
            state.setdefault("first_changed", name)
            break
        ops = result.operations
        if result.failures and "raised" not in state:
            # A broker component raised: contained as its crash, the history goes on.
            state["raised"] = f"{name}: {result.failures[0].describe()[:200]}"
        if ops == ctx.baseline[name]:
            continue
        state["changed"] = True
        state.setdefault("first_changed", name)
        if not state.get("client_changed") and client_view(ops) != client_view(ctx.baseline[name]):
            state["client_changed"] = name
        to_checker.send((name, ops))
        bulk, oracle, flags = to_checker.recv()
        had_flag = bool(state["bulk"] or state["oracle"])
        if bulk and state["bulk"] is None:
            state["bulk"] = name
        if oracle and state["oracle"] is None:
            state["oracle"] = name
        if flags and (not state["flags"] or ((bulk or oracle) and not had_flag)):
            state["flags"] = flags  # the first history's, or the first that flags
        if flags and not (bulk or oracle) and "undecided" not in state:
            state["undecided"] = name  # a check could not judge it (FLAGGING): not flagged
        if not state.get("client_check") and any(f.startswith(("transactional:", "delivery:")) for f in flags):
            state["client_check"] = name  # flagged by a check of the clients' operations
        if k >= first and (bulk or oracle):
            state["by_variant"] = name
        if state["bulk"] and state["oracle"]:
            break
    return state


def child(mutant: Mutant, ctx: Context, conn: Any) -> None:
    """In a forked child: vectors, proofs and histories with the mutant; each result sent as it comes.
    The histories are checked in a checker process forked before the mutant is applied."""
    fork = multiprocessing.get_context("fork")
    to_checker, checker_end = fork.Pipe()
    checking = fork.Process(target=checker, args=(checker_end, to_checker))
    checking.start()
    checker_end.close()
    try:
        with applied(mutant):
            if ctx.specs_for is None:
                static_layers(mutant, ctx, conn)
            if (mutant.module, mutant.function) not in ctx.reached:
                conn.send(("history", {"changed": False, "reached": False}))
                return
            specs = ctx.specs if ctx.specs_for is None else ctx.specs_for.get(mutant.id, [])
            more = None if ctx.more_for is None else ctx.more_for.get(mutant.id)
            conn.send(("history", history_layer(specs, ctx, conn, to_checker, more)))
    except MutationError as exc:
        conn.send(("error", str(exc)))
    finally:
        to_checker.send(None)
        checking.join(timeout=10)
        if checking.is_alive():
            checking.kill()
        conn.send(("done", None))
        conn.close()


MODEL_MAX_STATES = 100_000  # a mutant can blow a default model up; its unmutated size is at most 7,125


def model_layer() -> str:
    """``txnmodel check`` on the default models, in the mutant's child (the mutant applied)."""
    from proofs.check.models import DEFAULT_MODELS
    from txnmodel.commands.check import check_models

    try:
        runs = check_models(list(DEFAULT_MODELS), {}, max_states=MODEL_MAX_STATES, step_timeout_s=20.0)
    except Exception as exc:  # a step that raises is a defect the model checker shows
        return f"killed (raised {type(exc).__name__})"
    for one in runs:
        if one.result.violations:
            return f"killed ({one.name}: {one.result.violations[0].name})"
    incomplete = [one.name for one in runs if not one.result.complete]
    return f"survived (incomplete: {', '.join(incomplete)})" if incomplete else "survived"


def run_tests(mutant: Mutant, timeout: float) -> str:
    with tempfile.TemporaryDirectory(prefix="txnmodel-mutant-") as scratch:
        env = {**os.environ, "TXNMODEL_MUTANT": mutant.id, "HYPOTHESIS_STORAGE_DIRECTORY": scratch}
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:xdist",
            "-p",
            "no:cacheprovider",
            "-p",
            "devtools.mutation_pytest",
            f"tests/{mutant.machine}",
            "-k",
            PURE_Z3_TESTS,
        ]
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return "killed (timeout)"
    if done.returncode == 0 or done.returncode == 5:
        return "survived"
    failed = next((line for line in done.stdout.splitlines() if line.startswith("FAILED")), "")
    return f"killed ({failed[7:80] or f'exit {done.returncode}'})"


def judge(mutant: Mutant, ctx: Context, args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    row: dict[str, Any] = {**mutant.to_json(), "vectors": None, "proofs": None, "tests": "not run", "model": None}
    fork = multiprocessing.get_context("fork")
    parent, end = fork.Pipe(duplex=False)
    proc = fork.Process(target=child, args=(mutant, ctx, end))
    proc.start()
    end.close()
    deadline = time.monotonic() + args.timeout
    running = None
    finished = False
    while time.monotonic() < deadline:
        if parent.poll(1.0):
            try:
                kind, value = parent.recv()
            except EOFError:
                break
            if kind == "done":
                finished = True
                break
            if kind == "running":
                running = value
            elif kind == "history":
                row.update(value)
                running = None
            else:
                row[kind] = value
        elif not proc.is_alive():
            break
    if proc.is_alive():
        proc.kill()
    proc.join()
    if not finished:
        if running is not None:  # a run that does not finish: the main job would hang
            row.update(changed=True, reached=True, engine=f"{running}: did not finish in {args.timeout:.0f} s")
            row.setdefault("first_changed", running)
        elif row.get("vectors") is None and ctx.specs_for is None:  # the vectors never finished: CI would time out
            row["vectors"] = f"killed (did not finish in {args.timeout:.0f} s)"
            row["history"] = "not judged (the child was stopped in the vectors layer)"
        else:
            row["error"] = row.get("error") or f"child ended early (exit {proc.exitcode})"
    static = [row.get("vectors") or "", row.get("proofs") or ""]
    want_tests = args.tests == "all" or (args.tests == "changed" and row.get("changed"))
    if want_tests and not any(s.startswith("killed") for s in static) and "error" not in row:
        row["tests"] = run_tests(mutant, args.test_timeout)
    row["static"] = next(
        (layer for layer in ("vectors", "proofs", "tests") if str(row.get(layer) or "").startswith("killed")), None
    )
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def baseline(args: argparse.Namespace) -> Context:
    from invariants.client_visible import check_client_visible
    from invariants.verify import VerifyOptions, check_histories  # noqa: F401  (imported before tracing)

    specs = [
        dataclasses.replace(main_job_spec(w, seed, args.ops), deadline_ms=args.deadline)
        for seed in range(1, args.seeds + 1)
        for w in WORKLOADS
    ]
    modules = {m for group in MACHINE_MODULES.values() for m in group}
    histories: dict[str, list[Operation]] = {}
    with traced(modules) as reached:
        for spec in specs:
            histories[_name(spec)] = run(spec).operations
    for name, ops in histories.items():
        *_, flags = check_history(name, ops)
        if flags:
            raise SystemExit(f"the unmutated history {name} is not clean: {flags}")
        assert check_client_visible(ops).ok
    again = run(specs[0]).operations
    if again != histories[_name(specs[0])]:
        raise SystemExit("the simulator is not deterministic in one process: mutants cannot be compared by seed")
    return Context(specs, histories, reached, proof_reach(args))


def proof_reach(args: argparse.Namespace) -> dict[str, set[str]]:
    """Per machine, the reference functions its proofs can execute: what ``proofs/<machine>.py`` names
    from its reference module, closed over the names each of those mentions (a class brings its
    methods).  Static and an over-approximation: a mutant outside it cannot be seen by the proofs,
    which prove the Z3 encoding, not the reference."""
    import ast

    reach: dict[str, set[str]] = {}
    for machine, group in MACHINE_MODULES.items():
        module = group[0]
        proof = ROOT / "proofs" / f"{machine}.py"
        tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
        defs: dict[str, set[str]] = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
                defs[node.name] = names
                if isinstance(node, ast.ClassDef):
                    for item in node.body:
                        if isinstance(item, ast.FunctionDef):
                            defs[node.name].add(f"{node.name}.{item.name}")
                            defs[f"{node.name}.{item.name}"] = {
                                n.id for n in ast.walk(item) if isinstance(n, ast.Name)
                            } | {n.attr for n in ast.walk(item) if isinstance(n, ast.Attribute)}
        used: set[str] = set()
        if proof.exists():
            ptree = ast.parse(proof.read_text(encoding="utf-8"))
            short = module.rsplit(".", 1)[1]
            for found in ast.walk(ptree):
                if isinstance(found, ast.ImportFrom) and found.module == module:
                    used |= {a.name for a in found.names}
                elif (
                    isinstance(found, ast.ImportFrom)
                    and found.module == "reference"
                    and any(a.name == short for a in found.names)
                ):
                    used |= {n.attr for n in ast.walk(ptree) if isinstance(n, ast.Attribute)}
        todo = [n for n in used if n in defs]
        seen: set[str] = set()
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            todo += [n for n in defs.get(name, ()) if n in defs and n not in seen]
        reach[machine] = seen
    return reach


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "0/0"


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    table = []
    for machine in [*sorted({r["machine"] for r in rows}), "overall"]:
        mine = [r for r in rows if machine in ("overall", r["machine"]) and "error" not in r]
        changed = [r for r in mine if r.get("changed")]
        table.append(
            {
                "machine": machine,
                "sampled": len(mine),
                "reached": sum(bool(r.get("reached")) for r in mine),
                "changed": len(changed),
                "engine": sum(bool(r.get("engine")) for r in changed),
                "raised": sum(bool(r.get("raised")) for r in changed),
                "raised_flagged": sum(bool(r.get("raised") and (r.get("bulk") or r.get("oracle"))) for r in changed),
                "quiet_flagged": sum(
                    bool(not r.get("raised") and not r.get("engine") and (r.get("bulk") or r.get("oracle")))
                    for r in changed
                ),
                "quiet": sum(bool(not r.get("raised") and not r.get("engine")) for r in changed),
                "bulk": sum(bool(r.get("bulk")) for r in changed),
                "oracle": sum(bool(r.get("oracle")) for r in changed),
                "checker": sum(bool(r.get("bulk") or r.get("oracle")) for r in changed),
                "checker_or_engine": sum(
                    bool(r.get("bulk") or r.get("oracle") or r.get("engine") or r.get("raised")) for r in changed
                ),
                "static": sum(bool(r.get("static")) for r in changed),
                "vectors": sum(r.get("static") == "vectors" for r in changed),
                "proofs": sum(r.get("static") == "proofs" for r in changed),
                "tests": sum(r.get("static") == "tests" for r in changed),
                "static_all": sum(bool(r.get("static")) for r in mine),
                "model": sum(str(r.get("model") or "").startswith("killed") for r in changed),
                "any_layer": sum(
                    bool(
                        r.get("bulk")
                        or r.get("oracle")
                        or r.get("static")
                        or str(r.get("model") or "").startswith("killed")
                    )
                    for r in changed
                ),
                "errors": sum("error" in r for r in rows if machine in ("overall", r["machine"])),
            }
        )
    return table


def markdown(table: list[dict[str, Any]]) -> str:
    lines = [
        "| machine | sampled | reached by workloads | change a history | bulk flags | oracle flags | bulk or oracle "
        "| component raised: flagged | no raise: flagged | + run fails | tests+vectors+proofs kill "
        "| (vectors / proofs / tests first) | model checker kills | any layer |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in table:
        c = t["changed"]
        lines.append(
            f"| {t['machine']} | {t['sampled']} | {t['reached']} | {c} | {_pct(t['bulk'], c)} | {_pct(t['oracle'], c)} "
            f"| {_pct(t['checker'], c)} | {_pct(t['raised_flagged'], t['raised'])} "
            f"| {_pct(t['quiet_flagged'], t['quiet'])} | {_pct(t['checker_or_engine'], c)} | {_pct(t['static'], c)} "
            f"| {t['vectors']} / {t['proofs']} / {t['tests']} | {_pct(t.get('model', 0), c)} "
            f"| {_pct(t.get('any_layer', 0), c)} |"
        )
    return "\n".join(lines)


def write_report(
    rows: list[dict[str, Any]],
    *,
    chosen_count: int,
    population: int,
    args: argparse.Namespace,
    wall: float,
    load: tuple[float, float, float] | None = None,
) -> None:
    table = summarize(rows)
    load = load or os.getloadavg()
    text = markdown(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "population": population,
        "sampled": chosen_count,
        "per_machine": args.per_machine,
        "seed": args.seed,
        "history_seeds": args.seeds,
        "ops": args.ops,
        "wall_seconds": round(wall, 1),
        "load_average": load,
        "model_checker": f"txnmodel check, default models, at most {MODEL_MAX_STATES:,} states each",
    }
    (out / "report.json").write_text(json.dumps({"meta": meta, "table": table, "mutants": rows}, indent=1))
    survivors = [r for r in rows if r.get("changed") and not (r.get("bulk") or r.get("oracle") or r.get("engine"))]
    static_survivors = [r for r in rows if r.get("changed") and not r.get("static")]
    lines = [
        text,
        "",
        f"{chosen_count} mutants, wall {wall:.0f} s, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
    ]

    def line(r: dict[str, Any]) -> str:
        where = f"{r['module']}.{r['function']} line {r['line']}"
        return f"- {r['id']} {where} ({r['operator']}): {r['before']} -> {r['after']}"

    lines += ["", "History-changing mutants no history checker flags:"]
    lines += [line(r) for r in survivors]
    lines += ["", "History-changing mutants tests, vectors and proofs all miss:"]
    lines += [line(r) for r in static_survivors]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n" + "\n".join(lines))


def retest(args: argparse.Namespace) -> int:
    """``--retest``: run the tests layer again for the history-changing mutants of an earlier report
    that vectors and proofs left alive, and rewrite the report (the other layers are kept)."""
    out = Path(args.out)
    data = json.loads((out / "report.json").read_text())
    started = time.perf_counter()
    by_id = {m.id: m for machine in MACHINE_MODULES for m in enumerate_mutants(machine)}
    rows = data["mutants"]
    for row in rows:
        static = [str(row.get("vectors") or ""), str(row.get("proofs") or "")]
        if row.get("changed") and not any(x.startswith("killed") for x in static) and "error" not in row:
            mutant = by_id[row["id"]]
            assert mutant.describe().endswith(f"{row['before']} -> {row['after']}"), row["id"]
            row["tests"] = run_tests(mutant, args.test_timeout)
            row["static"] = next(
                (layer for layer in ("vectors", "proofs", "tests") if str(row.get(layer) or "").startswith("killed")),
                None,
            )
            print(f"  {row['id']:16} tests: {row['tests']}", flush=True)
    meta = data["meta"]
    for key in ("per_machine", "seed", "ops"):
        setattr(args, key, meta[key])
    args.seeds = meta["history_seeds"]
    wall = meta["wall_seconds"] + time.perf_counter() - started
    write_report(rows, chosen_count=meta["sampled"], population=meta["population"], args=args, wall=wall)
    return 0


def _spread(histories: list[str], k: int) -> list[tuple[str, int]]:
    """The first ``k`` of ``histories`` (``workload:seed``), in the reach report's order: the
    histories that take the rarest paths of the flip's function, alternating with the lowest seeds
    (``benchmarks/branch_reach.py``, ``site_histories``)."""
    picked: list[tuple[str, int]] = []
    for h in histories[:k]:
        workload, _, seed = h.partition(":")
        picked.append((workload, int(seed)))
    return picked


def _variant_histories(histories: list[str], picked: list[tuple[str, int]], limit: int) -> list[tuple[str, int]]:
    """For each variant of the main job (a switch :data:`MAIN_JOB` mixes by seed) that none of
    ``picked`` has on, the first of ``histories`` (the reach report's order) with it on; at most
    ``limit`` in all.  A flip's consequence often shows only where a variant asks a question that
    shows it (the admin check after a transaction ends, of the queries variant, shows the pending
    ack's own view of the cursor), and neither the rarest paths nor the lowest seeds need have it."""
    from engine.simulation.options import MAIN_JOB

    switches = [f.name for f in dataclasses.fields(RunSpec) if getattr(MAIN_JOB, f.name, None) == "mixed"]
    specs: dict[tuple[str, int], RunSpec] = {}

    def spec_of(key: tuple[str, int]) -> RunSpec:
        found = specs.get(key)
        if found is None:
            found = specs[key] = main_job_spec(*key)
        return found

    on = {name for h in picked for name in switches if getattr(spec_of(h), name) is True}
    out: list[tuple[str, int]] = []
    for name in switches:
        if name in on or len(out) >= limit:
            continue
        for h in histories:
            workload, _, seed = h.partition(":")
            key = (workload, int(seed))
            if key in picked or key in out:
                continue
            spec = spec_of(key)
            if getattr(spec, name) is True:
                out.append(key)
                on.update(n for n in switches if getattr(spec, n) is True)
                break
    return out


@functools.cache
def _callers(module: str) -> dict[str, list[tuple[str, list[int]]]]:
    """For each function of ``module`` (by its last name), the functions of the same module that call
    it (their qualified names, a call by name or as an attribute) with the lines of their ``if``,
    ``for`` and ``while`` statements."""
    import ast
    import importlib

    source = Path(importlib.import_module(module).__file__ or "").read_text(encoding="utf-8")
    out: dict[str, list[tuple[str, list[int]]]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                called: set[str] = set()
                lines: list[int] = []
                for inner in ast.walk(child):
                    if isinstance(inner, ast.Call):
                        func = inner.func
                        called.add(func.id if isinstance(func, ast.Name) else getattr(func, "attr", ""))
                    elif isinstance(inner, ast.If | ast.For | ast.While):
                        lines.append(inner.lineno)
                for callee in called - {"", child.name}:
                    out.setdefault(callee, []).append((name, sorted(lines)))

    visit(ast.parse(source), "")
    return out


def _caller_histories(
    m: Mutant, sites: dict[str, dict[str, list[str]]], picked: list[tuple[str, int]], limit: int
) -> list[tuple[str, int]]:
    """For a flip in a function that others of its module call, the history that takes the rarest
    path of each caller (of each branch site of a caller, the first of its first three histories in the
    reach report's order that is not taken yet), at most
    ``limit`` in all.  A small helper's own lines are taken by every history that calls it, so its
    rarest paths are its callers': the low-watermark abort in ``_first_ongoing``'s one caller is
    taken by a few histories only, none of them among the lowest seeds."""
    module_sites = sites.get(m.module, {})
    out: list[tuple[str, int]] = []
    for _, lines in _callers(m.module).get(m.function.rsplit(".", 1)[-1], []):
        for line in lines:
            for h in module_sites.get(str(line), [])[:3]:
                workload, _, seed = h.partition(":")
                key = (workload, int(seed))
                if key not in picked and key not in out and len(out) < limit:
                    out.append(key)
                    break
    return out


def flip_context(args: argparse.Namespace, machines: list[str]) -> tuple[list[Mutant], int, Context]:
    """The flip mutants (``devtools.mutation.flip_mutants``) of ``machines`` whose ``if`` some history of
    the branch-reach report executed, the flips in all, and the context judging each one on up to
    ``--per-branch`` of those histories (the main job's runs at ``--flip-ops``) and, while none of them
    flags it, on the histories of :func:`_variant_histories` (``--per-variant``) and
    :func:`_caller_histories` (``--per-caller``), against their unmutated runs; and the histories
    of :func:`further_seeds`' second round (``--per-seed``), whose clean runs wait for it."""
    from devtools.mutation import flip_mutants

    sites = json.loads(Path(args.flips).read_text())["sites"]
    population = [m for machine in machines for m in flip_mutants(machine)]
    chosen: list[Mutant] = []
    specs_for: dict[str, list[RunSpec]] = {}
    more_for: dict[str, list[RunSpec]] = {}
    tried_for: dict[str, list[tuple[str, int]]] = {}
    for m in population:
        executed = sites.get(m.module, {}).get(str(m.line), [])
        if executed:
            picked = _spread(executed, args.per_branch)
            specs_for[m.id] = [
                dataclasses.replace(main_job_spec(w, seed, args.flip_ops), deadline_ms=args.deadline)
                for w, seed in picked
            ]
            more = _variant_histories(executed, picked, args.per_variant)
            more += [h for h in _caller_histories(m, sites, [*picked, *more], args.per_caller) if h not in more]
            more_for[m.id] = [
                dataclasses.replace(main_job_spec(w, seed, args.flip_ops), deadline_ms=args.deadline)
                for w, seed in more
            ]
            chosen.append(m)
            seen = {*picked, *more}
            tried_for[m.id] = [key for key in (_key(h) for h in executed) if key not in seen][: args.per_seed]
    if args.mutants:
        wanted = set(args.mutants.split(","))
        chosen = [m for m in chosen if m.id in wanted]
    histories: dict[str, list[Operation]] = {}
    _clean_baselines([s for m in chosen for s in [*specs_for[m.id], *more_for[m.id]]], histories, args.jobs)
    reached = {(m.module, m.function) for m in chosen}
    seed_for = {
        m.id: [
            dataclasses.replace(main_job_spec(w, seed, args.flip_ops), deadline_ms=args.deadline)
            for w, seed in tried_for[m.id]
        ]
        for m in chosen
    }
    return chosen, len(population), Context([], histories, reached, {}, specs_for, more_for, seed_for)


def _key(history: str) -> tuple[str, int]:
    workload, _, seed = history.partition(":")
    return workload, int(seed)


def _baseline(spec: RunSpec) -> tuple[str, list[Operation], list[str], bool]:
    from invariants.client_visible import check_client_visible

    name = _name(spec)
    ops = run(spec).operations
    *_, flags = check_history(name, ops)
    return name, ops, flags, check_client_visible(ops).ok


def _clean_baselines(specs: list[RunSpec], into: dict[str, list[Operation]], jobs: int) -> None:
    """The unmutated runs of ``specs`` not in ``into`` yet, ``jobs`` at a time in forked processes
    (each run is CPU-bound Python), each checked clean: a flip is judged against a history every
    check passes, or the report would credit the checker with a false alarm."""
    todo = list({_name(s): s for s in specs if _name(s) not in into}.values())
    if not todo:
        return
    with multiprocessing.get_context("fork").Pool(max(1, jobs)) as pool:
        for name, ops, flags, client_ok in pool.imap_unordered(_baseline, todo):
            if flags or not client_ok:
                raise SystemExit(f"the unmutated history {name} is not clean: {flags}")
            into[name] = ops


def flip_table(rows: list[dict[str, Any]], population: dict[str, int]) -> list[dict[str, Any]]:
    """Per machine: the ``if`` statements, those reached (judged), the flips that changed a history,
    a client operation, were flagged by any check or by a check of the clients' operations."""
    table = []
    for machine in [*sorted(population), "overall"]:
        mine = [r for r in rows if machine in ("overall", r["machine"]) and "error" not in r]
        changed = [r for r in mine if r.get("changed")]
        table.append(
            {
                "machine": machine,
                "ifs": sum(population.values()) if machine == "overall" else population[machine],
                "reached": len(mine),
                "changed": len(changed),
                "client_changed": sum(bool(r.get("client_changed")) for r in changed),
                "flagged": sum(bool(r.get("bulk") or r.get("oracle")) for r in changed),
                "client_flagged": sum(bool(r.get("client_check")) for r in changed),
                "by_variant": sum(bool(r.get("by_variant")) for r in changed),
                "run_fails": sum(bool(r.get("engine") or r.get("raised")) for r in changed),
                "undecided": sum(bool(r.get("undecided")) and not (r.get("bulk") or r.get("oracle")) for r in changed),
                "errors": sum("error" in r for r in rows if machine in ("overall", r["machine"])),
            }
        )
    return table


def _why(row: dict[str, Any]) -> str:
    """Why a flip that is not flagged is not: listed equivalent, or listed as unjudged by any history
    with the test that kills it (``devtools.branches``), or unexplained."""
    from devtools.branches import flip_reason, unjudged
    from devtools.mutation import flip_mutants

    found = flip_reason(row["module"], row["function"], row["before"])
    if found is not None:
        return found
    mutant = next((m for m in flip_mutants(row["machine"]) if m.id == row["id"]), None)
    entry = None if mutant is None else unjudged(mutant)
    if entry is None:
        return "unexplained"
    return f"not equivalent, no history shows it: {entry.why} (killed by {entry.killer})"


def flip_markdown(table: list[dict[str, Any]], rows: list[dict[str, Any]]) -> str:

    lines = [
        "| machine | if statements | reached | flip changes a history | a client operation | flagged by a check "
        "| by a check of client operations | first on a further history (a variant's, a caller's) "
        "| not flagged, a check could not judge | component raised or run failed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in table:
        c = t["changed"]
        lines.append(
            f"| {t['machine']} | {t['ifs']} | {t['reached']} | {_pct(c, t['reached'])} "
            f"| {_pct(t['client_changed'], c)} | {_pct(t['flagged'], c)} | {_pct(t['client_flagged'], c)} "
            f"| {t.get('by_variant', 0)} | {t.get('undecided', 0)} | {t['run_fails']} |"
        )
    sections: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
        (
            "Flips no check flags (the history changed)",
            lambda r: r.get("changed") and not (r.get("bulk") or r.get("oracle")),
        ),
        (
            "Flips that change no history where the branch is reached",
            lambda r: not r.get("changed") and "error" not in r,
        ),
        ("Flips not judged (errors)", lambda r: "error" in r),
    )
    for title, keep in sections:
        lines += ["", f"{title}:", ""]
        for r in rows:
            if keep(r):
                why = _why(r)
                if r.get("undecided") and not (r.get("bulk") or r.get("oracle")):
                    why += f" (could not judge: {', '.join(r['flags'])} on {r['undecided']})"
                lines.append(f"- {r['id']} `{r['module']}.{r['function']}` line {r['line']} `{r['before']}`: {why}")
    return "\n".join(lines)


def further_seeds(
    rows: list[dict[str, Any]], chosen: list[Mutant], ctx: Context, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """The second round: each flip that changed none of its histories is judged again on the next
    ``--per-seed`` histories that executed its ``if`` (the reach report's order), up to the first
    that a check flags; its row is replaced when one of them changes.  A branch taken in a hundred
    histories may matter in one: the client's error arm 64 changes ctp seed 12, the tenth history
    that executes it.  Their clean runs are made only now, for the few flips that need them."""
    by_id = {m.id: m for m in chosen}
    again = [
        by_id[r["id"]]
        for r in rows
        if r["id"] in by_id and r.get("reached") and not r.get("changed") and "error" not in r
    ]
    seed_for = ctx.seed_for or {}
    again = [m for m in again if seed_for.get(m.id)]
    if not again:
        return rows
    _clean_baselines([s for m in again for s in seed_for[m.id]], ctx.baseline, args.jobs)
    print(f"second round: {len(again)} flips changed no history; up to {args.per_seed} more each", flush=True)
    second = dataclasses.replace(ctx, specs_for={m.id: [] for m in again}, more_for=seed_for)
    redone: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for row in pool.map(lambda m: judge(m, second, args), again):
            if row.get("changed"):
                row["by_seed"] = row.get("first_changed")
                redone[row["id"]] = row
    return [redone.get(r["id"], r) for r in rows]


def flips_main(args: argparse.Namespace, machines: list[str]) -> int:
    """``--flips``: the branch-flip layer (see the module docstring)."""
    from devtools.mutation import flip_mutants
    from views.progress import Reporter

    started = time.perf_counter()
    chosen, population, ctx = flip_context(args, machines)
    per_machine = {machine: len(flip_mutants(machine)) for machine in machines}
    print(
        f"{population} flips of {len(machines)} machines; {len(chosen)} reached; {len(ctx.baseline)} clean histories",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    judging = Reporter().phase("mutation_report: flips", total=len(chosen), unit="flips")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool, judging as phase:
        for row in pool.map(lambda m: judge(m, ctx, args), chosen):
            rows.append(row)
            phase.advance(note=row["id"])
    rows = further_seeds(rows, chosen, ctx, args)
    table = flip_table(rows, per_machine)
    wall, load = time.perf_counter() - started, os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"flips": population, "reached": len(chosen), "per_branch": args.per_branch,
            "per_variant": args.per_variant, "per_caller": args.per_caller, "per_seed": args.per_seed,
            "ops": args.flip_ops, "wall_seconds": round(wall, 1), "load_average": load,
            "reach": args.flips}  # fmt: skip
    (out / "flips.json").write_text(json.dumps({"meta": meta, "table": table, "flips": rows}, indent=1))
    return write_flips_markdown(out)


def write_flips_markdown(out: Path) -> int:
    """``OUT/flips.md`` from ``OUT/flips.json`` (``--flips --rewrite`` makes it again, with the reasons
    ``devtools.branches`` gives now)."""
    data = json.loads((out / "flips.json").read_text())
    meta, load = data["meta"], data["meta"]["load_average"]
    text = flip_markdown(data["table"], data["flips"])
    text += (
        f"\n\n{meta['reached']} flips judged, wall {meta['wall_seconds']:.0f} s, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n"
    )
    (out / "flips.md").write_text(text)
    print("\n" + text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-machine", type=int, default=8, help="mutants sampled per machine (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="the sampling seed (default 0)")
    parser.add_argument("--seeds", type=int, default=5, help="history seeds 1..N per workload (default 5)")
    parser.add_argument("--ops", type=int, default=30, help="transactions per history (default 30)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants judged at once (default 2)")
    parser.add_argument(
        "--deadline",
        type=int,
        default=600_000,
        help="simulated ms after which a run stops (default 600000: clean runs end far sooner; a "
        "component that keeps raising stays down and its clients retry until then)",
    )
    parser.add_argument("--machines", default=",".join(MACHINE_MODULES), help="comma-separated machines")
    parser.add_argument("--mutants", default="", help="judge these mutants (comma-separated ids) instead of a sample")
    parser.add_argument("--tests", choices=("changed", "all", "none"), default="changed")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's in-process layers")
    parser.add_argument("--test-timeout", type=float, default=600.0, help="seconds per mutant's test run")
    parser.add_argument("--out", default=str(ROOT / "out" / "mutation"))
    parser.add_argument(
        "--retest", action="store_true", help="rerun only the tests layer of the report in --out, and rewrite it"
    )
    parser.add_argument("--rewrite", action="store_true", help="rewrite the report in --out from its report.json")
    parser.add_argument(
        "--flips",
        default=None,
        metavar="REACH_JSON",
        help="the branch-flip layer: every if of the machines that a history of this branch-reach report "
        "(benchmarks/branch_reach.py's report.json) executed, with its condition negated, judged by the history "
        "checkers on up to --per-branch of those histories (those that take the rarest paths of the if's "
        "function, alternating with the lowest seeds) and, while none flags it, on up to --per-variant more (one "
        "per variant of the main job none of those has on) and --per-caller more (one per caller of the if's "
        "function, the history taking its rarest path), then, for a flip none of them changed, on up to --per-seed "
        "more (the next histories that executed it); writes OUT/flips.{json,md}",
    )
    parser.add_argument("--per-branch", type=int, default=3, help="--flips: histories per flip (default 3)")
    parser.add_argument(
        "--per-variant",
        type=int,
        default=16,
        help="--flips: at most this many more histories for a flip its first ones leave unflagged, one per "
        "variant none of them has on (default 16: every switch of the main job)",
    )
    parser.add_argument(
        "--per-caller",
        type=int,
        default=8,
        help="--flips: and at most this many more, the history that takes the rarest path of each function of "
        "the module that calls the flip's function (default 8)",
    )
    parser.add_argument(
        "--per-seed",
        type=int,
        default=16,
        help="--flips: a second round for a flip none of those histories changed: at most this many more, the "
        "next in the reach report's order that executed its if (default 16)",
    )
    parser.add_argument("--flip-ops", type=int, default=60, help="--flips: transactions per history (default 60)")
    args = parser.parse_args(argv)
    if args.retest:
        return retest(args)
    if args.rewrite and args.flips:
        return write_flips_markdown(Path(args.out))
    if args.rewrite:
        data = json.loads((Path(args.out) / "report.json").read_text())
        meta = data["meta"]
        for key in ("per_machine", "seed", "ops"):
            setattr(args, key, meta[key])
        args.seeds = meta["history_seeds"]
        write_report(
            data["mutants"],
            chosen_count=meta["sampled"],
            population=meta["population"],
            args=args,
            wall=meta["wall_seconds"],
            load=tuple(meta["load_average"]),
        )
        return 0
    started = time.perf_counter()
    machines = [m for m in args.machines.split(",") if m]
    unknown = sorted(set(machines) - set(MACHINE_MODULES))
    if unknown:
        parser.error(f"unknown machines {unknown}; machines are {', '.join(MACHINE_MODULES)}")
    if args.flips:
        return flips_main(args, machines)
    population = [m for machine in machines for m in enumerate_mutants(machine)]
    chosen = sample(population, args.per_machine, args.seed)
    if args.mutants:
        by_id = {m.id: m for m in population}
        missing = sorted(set(args.mutants.split(",")) - set(by_id))
        if missing:
            parser.error(f"unknown mutants {missing} (of the machines {', '.join(machines)})")
        chosen = [by_id[i] for i in args.mutants.split(",")]
    print(
        f"{len(population)} mutants of {len(machines)} machines; sampled {len(chosen)} "
        f"({args.per_machine} per machine, seed {args.seed}); histories: {len(WORKLOADS)} workloads x seeds "
        f"1..{args.seeds}, ops={args.ops}",
        flush=True,
    )
    ctx = baseline(args)
    print(f"baseline: {len(ctx.baseline)} clean histories, {len(ctx.reached)} reference functions reached", flush=True)
    rows: list[dict[str, Any]] = []
    from views.progress import Reporter

    judging = Reporter().phase("mutation_report: mutants", total=len(chosen), unit="mutants")
    with ThreadPoolExecutor(max_workers=args.jobs) as pool, judging as phase:
        for row in pool.map(lambda m: judge(m, ctx, args), chosen):
            rows.append(row)
            phase.advance(note=row["id"])
            print(
                f"  {row['id']:16} {row['operator']:9} {row['function'][:32]:32} changed={row.get('changed')!s:5} "
                f"bulk={row.get('bulk') or '-'} oracle={row.get('oracle') or '-'} "
                f"raised={'y' if row.get('raised') else '-'} engine={'y' if row.get('engine') else '-'} "
                f"static={row.get('static') or '-'} "
                f"model={'killed' if str(row.get('model') or '').startswith('killed') else '-'} "
                f"({row['seconds']} s)",
                flush=True,
            )
    write_report(
        rows, chosen_count=len(chosen), population=len(population), args=args, wall=time.perf_counter() - started
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
