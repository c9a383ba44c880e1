"""Reach: which numbered rules a workload drives, measured on the engine's own step records.

An engine history records every step of the coordinator, buffer, pending-ack and delayed-tracker
machines, and every load as a ``recover`` row with its durable inputs (``engine/
recorder.py``).  :func:`replay_reach` replays each object's records in step order -- the
``recover`` rows rebuild the machine exactly as the engine did -- with a profiler on, and collects
the reference functions that ran.  :func:`rule_map` maps each function (and each class, for a
command or state class whose docstring cites rules) to the rule ids in its docstring, so the
functions that ran give the rules reached.

The client's transaction machine and the PIP-160 batched log writer also run inside every
simulation, but the history does not record their steps; :func:`traced` measures them (and
anything else) on a live run instead, which is the same run by seed.

A few rules live in the engine alone -- an engine option Pulsar never built (DD-30), what the
broker does around the machines (a reader's non-durable cursor, PA-24; a seek by publish time,
PA-23; a log's closed-ledger roll, BW-26) -- and are cited only there.  :data:`ENGINE_SITES` names
the engine functions that carry them out, each run only on that rule's path; the live trace counts
those, and nothing else of the engine (engine docstrings also cite rules for a parameter or a
path they merely pass through, which would count a rule as reached when it was not).

Nothing here decides anything: the replay steps the machines the engine stepped, with the commands
the engine recorded, and only watches which code runs.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import re
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from spec.history import RAISED, RECOVER, Operation, OpType, is_machine_operation, is_query, parse_object

__all__ = [
    "ENGINE_SITES",
    "MACHINE_OF_KIND",
    "REFERENCE_MODULES",
    "all_rules",
    "replay_reach",
    "rule_map",
    "rules_reached",
    "traced",
]

RULE_ID = re.compile(r"\b(TC|TB|PA|BW|DD)-\d+\b")
REFERENCE_MODULES = (
    "reference.coordinator",
    "reference.client",
    "reference.buffer",
    "reference.pending_ack",
    "reference.batched_log",
    "reference.delayed",
    "reference.delayed_common",
    "reference.delayed_memory",
    "reference.delayed_bucket",
    "reference.delayed_runs",
)
# Engine functions that carry out a rule cited nowhere in ``reference/`` outside the engine, and
# run only on that rule's path (see the module docstring).
ENGINE_SITES: dict[tuple[str, str], tuple[str, ...]] = {
    ("engine.storage.record_log", "RecordLog._roll"): ("BW-26",),
    ("engine.delayed.shared", "SharedDelayedIndex.get_scheduled_messages"): ("DD-13", "DD-30"),
    ("engine.broker.subscription", "SubscriptionService.seek_time"): ("PA-23",),
    ("engine.broker.subscription", "reader_start"): ("PA-24",),
    ("engine.simulation.client", "Client._fail_with_pulsar_error"): ("TC-37",),
}
ENGINE_MODULES = tuple(sorted({module for module, _ in ENGINE_SITES}))
# The history's machine object kinds and the machine each is recorded for.
MACHINE_OF_KIND = {
    "coordinator": "coordinator",
    "partition": "buffer",
    "subscription": "pending_ack",
    "tracker": "delayed",
    "log": "batched_log",
}

Site = tuple[str, str]  # (module, qualname)


def all_rules() -> dict[str, str]:
    """Every rule id of ``spec/rules/*.md`` with its title."""
    from spec.rules import RULES_DIR, parse_rules

    out: dict[str, str] = {}
    for page in sorted(RULES_DIR.glob("*.md")):
        for rule in parse_rules(page.read_text(encoding="utf-8"), page.stem):
            out[rule.id] = rule.title
    return out


def rule_map(modules: Sequence[str] = REFERENCE_MODULES) -> dict[Site, tuple[str, ...]]:
    """(module, qualname) -> the rule ids its docstring cites, for every function, method and class;
    with the default modules also :data:`ENGINE_SITES`, each checked against its docstring."""
    out: dict[Site, tuple[str, ...]] = {}
    if modules is REFERENCE_MODULES:
        cited = rule_map(ENGINE_MODULES)
        for site, ids in ENGINE_SITES.items():
            if not set(ids) <= set(cited.get(site, ())):
                raise ValueError(f"{site[0]}.{site[1]} does not cite {', '.join(ids)} in its docstring")
            out[site] = ids
    for module in modules:
        path = Path(inspect.getfile(importlib.import_module(module)))
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(body: list[ast.stmt], prefix: str, module: str = module) -> None:
            for node in body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    name = f"{prefix}{node.name}"
                    ids = tuple(dict.fromkeys(m.group(0) for m in RULE_ID.finditer(ast.get_docstring(node) or "")))
                    if ids:
                        out[(module, name)] = ids
                    if isinstance(node, ast.ClassDef):
                        visit(node.body, f"{name}.")

        visit(tree.body, "")
    return out


@contextlib.contextmanager
def traced(modules: Iterable[str] = REFERENCE_MODULES + ENGINE_MODULES) -> Iterator[Counter[Site]]:
    """Count the calls of every function of ``modules`` made inside the block (all threads)."""
    files: dict[str, str] = {}
    for module in modules:
        files[str(Path(inspect.getfile(importlib.import_module(module))).resolve())] = module
    calls: Counter[Site] = Counter()
    sites: dict[Any, Site | None] = {}

    def trace(frame: Any, event: str, arg: Any) -> None:
        # A global trace function sees each new Python frame once ('call') and, returning None,
        # traces nothing inside it: far cheaper than a profiler, which also sees every C call.
        code = frame.f_code
        site = sites.get(code, ...)
        if site is ...:
            module = files.get(code.co_filename)
            site = sites[code] = None if module is None else (module, code.co_qualname.split(".<locals>")[0])
        if site is not None:
            calls[site] += 1

    previous = sys.gettrace()
    sys.settrace(trace)
    threading.settrace(trace)
    try:
        yield calls
    finally:
        sys.settrace(previous)
        threading.settrace(None)


def replay_reach(ops: Sequence[Operation]) -> Counter[Site]:
    """Replay one history's machine records, object by object in step order, and count which
    reference functions ran (the commands' classes count as reached when they are stepped)."""
    from invariants.linearizability import UNKNOWN
    from invariants.models import MachineModel

    by_object: dict[str, list[Operation]] = defaultdict(list)
    for op in ops:
        if is_machine_operation(op):
            by_object[op.object].append(op)
    models: dict[str, Any] = {}
    calls: Counter[Site] = Counter()
    for obj in sorted(by_object):
        kind, _ = parse_object(obj)
        machine = MACHINE_OF_KIND.get(kind)
        if machine is None:
            continue
        model = models.get(machine)
        if model is None:
            vectors = importlib.import_module(f"reference.{machine}").VECTORS
            model = models[machine] = MachineModel.from_vectors(vectors)
        mine = sorted(by_object[obj], key=lambda o: o.index)
        decoded = model.decode_all(mine)
        state = model.init()
        with traced() as seen:
            for op, (op_input, _) in zip(mine, decoded, strict=True):
                if (op.type is OpType.FAIL and op.error is None) or op.f == RAISED:
                    continue  # never reached the machine, or raised outside any step
                if op.f != RECOVER and not is_query(op):  # a query's observer is traced as it runs
                    command = op_input.command
                    calls[(type(command).__module__, type(command).__qualname__)] += 1
                # UNKNOWN: step and keep whatever it returned (the replay only watches).
                _, state = model.step(state, op_input, UNKNOWN)
        calls.update(seen)
    return calls


def rules_reached(calls: Counter[Site], mapping: dict[Site, tuple[str, ...]] | None = None) -> Counter[str]:
    """Rule id -> calls of the functions and classes that cite it (a class also counts when one of
    its methods ran)."""
    mapping = rule_map() if mapping is None else mapping
    out: Counter[str] = Counter()
    for (module, name), count in calls.items():
        parts = name.split(".")
        for k in range(len(parts), 0, -1):
            for rule in mapping.get((module, ".".join(parts[:k])), ()):
                out[rule] += count
    return out
