"""Conformance power: ``txnmodel conform`` against automatic mutants of the reference adapter.

    .venv/bin/python benchmarks/conform_power.py [--per-machine 20] [--seed 0] [--machines coordinator,buffer]
        [--mutants coordinator:12,buffer:81] [--examples 100] [--witness-seeds 1,2,3] [--witness-examples 300]
        [--jobs 2] [--timeout 900] [--out out/bench/conform_power]
    .venv/bin/python benchmarks/conform_power.py --known-bugs [--examples 100]

The implementation under test is the reference itself, served by ``txnmodel conform
--serve-reference`` (``conformance/serve.py``) in a child process with one mutant of
``devtools.mutation`` applied (the project's mutation operators: boundary, compare, boolean, branch,
statement, constant).  For a seeded sample of ``--per-machine`` mutants of each machine:

* **reached**: the mutant's function runs at all when the reference answers the machine's vectors
  and the generated runs (traced once, unmutated, over the witness seeds' runs); a mutant that is
  never reached cannot change an answer on these inputs and is not judged further;
* **changes an answer**: some step's answer (its result, effects, or an observation after it)
  differs from the unmutated reference's, or a step raises or never returns.  The witnesses: the
  judged ``conform`` run itself (a difference it finds is one), and, for a mutant it did not kill,
  the machine's vectors run on the mutated reference and a deeper search in process
  (``--witness-seeds`` x ``--witness-examples`` generated runs of up to 50 steps, other seeds than
  conform's, the unmutated reference on one side and the mutated one on the other, both behind the
  protocol's JSON);
* **killed**: ``txnmodel conform --machine M --impl "<the mutant served>"`` at its defaults (seed 0,
  100 generated runs, 30 steps at most, a 10 s step limit) exits 1.  Its counterexample's length
  (vector steps; a crash is two) is recorded for the kills whose property phase found one.

Writes ``OUT/report.json`` and ``OUT/report.md`` and prints the per-machine table, with the load
average before and after.  Each mutant's work runs in child processes with a time limit.

``--known-bugs`` instead serves each bug of the known-bug catalogue (``tests/known_bugs/catalogue.py``,
``docs/known_bugs.md``: real Pulsar bugs re-created in the reference) and runs ``conform`` against
it, writing ``OUT/known_bugs.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.mutation import MACHINE_MODULES, Mutant, enumerate_mutants, live_function, mutated_code, sample  # noqa: E402

PYTHON = sys.executable
WITNESS_STEPS = 50


def _serve_command(mutant: str, machine: str) -> str:
    code = (
        "import sys; from devtools.mutation import install; "
        f"install({mutant!r}); from conformance.serve import serve; "
        f"sys.exit(serve({machine!r}, sys.stdin.buffer, sys.stdout.buffer))"
    )
    return f"{shlex.quote(PYTHON)} -c {shlex.quote(code)}"


# --- reach ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def traced(modules: set[str]) -> Iterator[set[tuple[str, str]]]:
    """(module, qualified name) of every function of ``modules`` called inside."""
    seen: set[tuple[str, str]] = set()
    files = {sys.modules[m].__file__: m for m in modules}

    def tracer(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            module = files.get(frame.f_code.co_filename)
            if module is not None:
                seen.add((module, frame.f_code.co_qualname))

    sys.setprofile(tracer)
    try:
        yield seen
    finally:
        sys.setprofile(None)


def reached_functions(machine: str, seeds: list[int], examples: int) -> set[tuple[str, str]]:
    """The machine's functions the vectors and the generated runs execute (unmutated)."""
    import importlib

    from conformance.differential import explore
    from conformance.implementation import InProcess
    from reference.sessions import Session, run_vector
    from runners.vectors import collect_vector_files, load_vector
    from spec import conform

    modules = set(MACHINE_MODULES[machine])
    for module in modules:
        importlib.import_module(module)
    with traced(modules) as seen:
        for path in collect_vector_files([ROOT / "spec" / "vectors" / machine]):
            run_vector(path, load_vector(path))
        for seed in seeds:
            channel = InProcess(Session(machine).handle)
            hello = conform.check_hello(channel.exchange([conform.hello(machine)])[0], machine)
            explore(machine, channel, hello, seed=seed, examples=examples, max_steps=WITNESS_STEPS)
    return seen


# --- one mutant's witnesses (a child process) -------------------------------------------------------


def witness(mutant: Mutant, seeds: list[int], examples: int) -> dict[str, Any]:
    """Whether the mutant changes some step's answer: its vectors, then a deep in-process search."""
    from conformance.differential import Aborted, NotDeterministic, explore
    from conformance.implementation import InProcess
    from reference.sessions import Session, run_vector
    from runners.vectors import collect_vector_files, load_vector
    from spec import conform

    func = live_function(mutant)
    code, original = mutated_code(mutant), func.__code__
    machine = mutant.machine

    @contextlib.contextmanager
    def mutated() -> Iterator[None]:
        func.__code__ = code
        try:
            yield
        finally:
            func.__code__ = original

    for path in collect_vector_files([ROOT / "spec" / "vectors" / machine]):
        data = load_vector(path)
        try:
            with mutated():
                passed = run_vector(path, data).passed
        except Exception as exc:  # a raise is a changed answer too
            return {"changes": True, "by": "vectors", "detail": f"{path.name}: {type(exc).__name__}"}
        if not passed:
            return {"changes": True, "by": "vectors", "detail": path.name}
    session = Session(machine)

    def handle(request: dict[str, Any]) -> dict[str, Any]:
        with mutated():
            try:
                return session.handle(request)
            except Exception as exc:  # the protocol's answer for an implementation that throws
                return {"fail": f"{type(exc).__name__}: {exc}"}

    for seed in seeds:
        channel = InProcess(handle)
        hello = conform.check_hello(channel.exchange([conform.hello(machine)])[0], machine)
        try:
            found = explore(machine, channel, hello, seed=seed, examples=examples, max_steps=WITNESS_STEPS)
        except (Aborted, NotDeterministic) as exc:
            return {"changes": True, "by": f"search seed {seed}", "detail": str(exc)[:200]}
        if found.divergence is not None:
            return {"changes": True, "by": f"search seed {seed}", "detail": found.divergence.difference.summary}
    return {"changes": False, "by": "", "detail": ""}


def _child_witness(spec: str, seeds: list[int], examples: int) -> None:
    machine, _, index = spec.partition(":")
    mutant = enumerate_mutants(machine)[int(index)]
    print(json.dumps(witness(mutant, seeds, examples)))


# --- the judged run ---------------------------------------------------------------------------------


def judge(mutant: Mutant, args: argparse.Namespace) -> dict[str, Any]:
    """The judged ``conform`` run first; the witnesses only for a mutant it did not kill (a kill is
    its own witness: conform saw an answer differ)."""
    row: dict[str, Any] = {"id": mutant.id, "describe": mutant.describe(), "operator": mutant.operator}
    row.update(_conform_run(mutant, args))
    row["witness"] = {"changes": True, "by": "conform", "detail": row["message"][:200]}
    row["witness_seconds"] = 0.0
    if not row["killed"]:
        started = time.monotonic()
        row["witness"] = _witness_run(mutant, args)
        row["witness_seconds"] = round(time.monotonic() - started, 1)
    row["changes"] = bool(row["witness"]["changes"])
    return row


def _witness_run(mutant: Mutant, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        PYTHON,
        __file__,
        "--witness-of",
        mutant.id,
        "--witness-seeds",
        args.witness_seeds,
        "--witness-examples",
        str(args.witness_examples),
    ]
    try:
        found = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"changes": True, "by": "search never returned", "detail": f"over {args.timeout} s"}
    if found.returncode != 0 or not found.stdout.strip():
        return {"changes": True, "by": "search raised", "detail": found.stderr.strip()[-200:]}
    result: dict[str, Any] = json.loads(found.stdout.strip().splitlines()[-1])
    return result


def _conform_run(mutant: Mutant, args: argparse.Namespace, impl: str | None = None) -> dict[str, Any]:
    started = time.monotonic()
    row: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="conform-power-") as out:
        command = [
            str(ROOT / ".venv" / "bin" / "txnmodel"),
            "conform",
            "--machine",
            mutant.machine,
            "--impl",
            impl or _serve_command(mutant.id, mutant.machine),
            "--examples",
            str(args.examples),
            "--json",
            "--out",
            out,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
            report = json.loads(done.stdout) if done.stdout.strip() else None
            row["exit"] = done.returncode
        except subprocess.TimeoutExpired:
            report, row["exit"] = None, "timeout"
    row["conform_seconds"] = round(time.monotonic() - started, 1)
    row["killed"] = row["exit"] == 1
    row["verdict"] = report["verdict"] if report else None
    row["vectors_failed"] = report["vectors"]["failed"] if report else None
    counterexample = report.get("counterexample") if report else None
    row["steps"] = counterexample["steps"] if counterexample else None
    row["message"] = (report or {}).get("message", "")[:300]
    return row


# --- the known-bug catalogue ------------------------------------------------------------------------

_MACHINE_OF_MODULE = {
    "reference.buffer": "buffer",
    "reference.pending_ack": "pending_ack",
    "reference.coordinator": "coordinator",
    "reference.delayed_common": "delayed",
}


def known_bugs(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``conform`` against each bug of ``tests/known_bugs/catalogue.py`` served in the reference."""
    from tests.known_bugs.catalogue import MUTANTS

    rows = []
    for bug in MUTANTS:
        module = bug.target.__module__ if isinstance(bug.target, type) else bug.target.__name__
        machine = _MACHINE_OF_MODULE[module]
        code = (
            # Patched for the child's lifetime; ``applied(bug).__enter__()`` would not do, since the
            # unreferenced context manager is collected at once and its ``finally`` restores the original.
            "import sys; from tests.known_bugs.catalogue import MUTANTS; "
            f"bug = next(m for m in MUTANTS if m.name == {bug.name!r}); "
            "setattr(bug.target, bug.attribute, bug.make(bug.current())); "
            f"from conformance.serve import serve; sys.exit(serve({machine!r}, sys.stdin.buffer, sys.stdout.buffer))"
        )
        mutant = Mutant(machine, module, -1, bug.attribute, 0, 0, "known bug", 0, bug.name, "")
        row = {"bug": bug.name, "machine": machine, "where": bug.where}
        row.update(_conform_run(mutant, args, f"{shlex.quote(PYTHON)} -c {shlex.quote(code)}"))
        rows.append(row)
        print(f"{bug.name} ({machine}): killed={row['killed']} steps={row['steps']} {row['message'][:160]}", flush=True)
    return rows


def _known_bugs_main(args: argparse.Namespace) -> int:
    load_before = os.getloadavg()
    rows = known_bugs(args)
    load_after = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "known_bugs.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    killed = [r for r in rows if r["killed"]]
    steps = sorted(r["steps"] for r in killed if r["steps"])
    median = statistics.median(steps) if steps else "-"
    print(f"{len(killed)} of {len(rows)} known bugs killed; counterexample steps {steps} (median {median})")
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    return 0


# --- the report -------------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]], machines: list[str], sampled: dict[str, int]) -> list[str]:
    lines = [
        "| machine | sampled | reached | change an answer | conform kills | by vectors | with a counterexample "
        "| median counterexample steps | max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    groups = [(m, [r for r in rows if r["id"].startswith(m + ":")]) for m in machines]
    groups.append(("overall", rows))
    for name, group in groups:
        reached = [r for r in group if r.get("reached")]
        changing = [r for r in reached if r.get("changes")]
        killed = [r for r in changing if r.get("killed")]
        by_vectors = [r for r in killed if r.get("vectors_failed")]
        lengths = [r["steps"] for r in killed if r.get("steps")]
        pct = f"{100 * len(killed) // len(changing)}%" if changing else "-"
        median = f"{statistics.median(lengths):g}" if lengths else "-"
        total = sum(sampled.values()) if name == "overall" else sampled.get(name, 0)
        lines.append(
            f"| {name} | {total} | {len(reached)} | {len(changing)} | {len(killed)}/{len(changing)} ({pct}) "
            f"| {len(by_vectors)} | {len(lengths)} | {median} | {max(lengths) if lengths else '-'} |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default=",".join(MACHINE_MODULES))
    parser.add_argument("--per-machine", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mutants", default="", help="judge these (machine:index,...) instead of a sample")
    parser.add_argument("--examples", type=int, default=100, help="conform's --examples (its default: 100)")
    parser.add_argument("--witness-seeds", default="1,2,3")
    parser.add_argument("--witness-examples", type=int, default=300)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=900, help="seconds for each child process")
    parser.add_argument("--out", default=str(ROOT / "out" / "bench" / "conform_power"))
    parser.add_argument("--known-bugs", action="store_true", help="instead: conform against the known-bug catalogue")
    parser.add_argument("--witness-of", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.known_bugs:
        return _known_bugs_main(args)
    seeds = [int(s) for s in args.witness_seeds.split(",")]
    if args.witness_of:
        _child_witness(args.witness_of, seeds, args.witness_examples)
        return 0
    load_before = os.getloadavg()
    started = time.monotonic()
    machines = [m for m in args.machines.split(",") if m]
    if args.mutants:
        chosen = []
        for spec in args.mutants.split(","):
            machine, _, index = spec.partition(":")
            chosen.append(enumerate_mutants(machine)[int(index)])
        machines = [m for m in MACHINE_MODULES if any(c.machine == m for c in chosen)]
    else:
        everything = [m for machine in machines for m in enumerate_mutants(machine)]
        chosen = sample(everything, args.per_machine, args.seed)
    sampled = {m: sum(1 for c in chosen if c.machine == m) for m in machines}
    rows: list[dict[str, Any]] = []
    todo: list[Mutant] = []
    for machine in machines:
        reach = reached_functions(machine, seeds[:1], args.witness_examples)
        for mutant in (c for c in chosen if c.machine == machine):
            row: dict[str, Any] = {"id": mutant.id, "describe": mutant.describe(), "operator": mutant.operator}
            row["reached"] = (mutant.module, mutant.function) in reach
            if row["reached"]:
                todo.append(mutant)
            else:
                rows.append(row)
        print(f"{machine}: {sum(1 for m in todo if m.machine == machine)} of {sampled[machine]} reached", flush=True)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for row in pool.map(lambda m: judge(m, args), todo):
            row["reached"] = True
            rows.append(row)
            print(
                f"{row['id']}: changes={row['changes']} killed={row['killed']} steps={row['steps']} "
                f"({row['witness_seconds']} + {row['conform_seconds']} s) {row['describe']}",
                flush=True,
            )
    elapsed = time.monotonic() - started
    load_after = os.getloadavg()
    lines = table(rows, machines, sampled)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {
        "command": " ".join(sys.argv),
        "seconds": round(elapsed),
        "load_before": load_before,
        "load_after": load_after,
        "rows": sorted(rows, key=lambda r: (r["id"].split(":")[0], int(r["id"].split(":")[1]))),
    }
    (out / "report.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    misses = [r for r in rows if r.get("changes") and not r.get("killed")]
    text = [
        f"# conform power ({' '.join(sys.argv[1:])})",
        "",
        *lines,
        "",
        f"{round(elapsed)} s, load {load_before[0]:.1f} before, {load_after[0]:.1f} after.",
        "",
        "Changing mutants conform missed:",
        *(f"* `{r['id']}` {r['describe']} (witness: {r['witness']['by']}: {r['witness']['detail']})" for r in misses),
    ]
    (out / "report.md").write_text("\n".join(text) + "\n", encoding="utf-8")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
