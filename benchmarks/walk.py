"""The walk of one history, from the simulator through ``verify`` to its page: which files it enters.

Runs ``txnmodel simulate`` of one seeded history and ``txnmodel verify`` of it (every checker, and
the page and text of any counterexample) in this process, through the command line only, under a
profile hook.  A reader following the history's path goes from file to file at each call that
crosses into another file; this reports, for every product file on the path, from how many places
(a function of another file) control enters it.  In a tree whose layers call only downward a
file is entered from one or two places; import circles send a reader back and forth (the issue
that restructured the tree counted eight).  The simulator's own event loop (the scheduler resuming
client processes, the broker stepping its machines) is a loop, not a walk: calls between the
engine, the machines and their vocabulary (``engine/``, ``reference/``, ``spec/``) are left out.

Usage: ``python benchmarks/walk.py [--seed 1] [--out out/walk]``.  Writes ``OUT/walk.json``
(every file's entry points) and prints the files entered from more than two places.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOOP = ("engine/", "reference/", "spec/")


def _product_file(filename: str) -> str | None:
    path = Path(filename)
    if not path.is_absolute() or not path.is_relative_to(ROOT):
        return None
    rel = path.relative_to(ROOT)
    if rel.parts[0] in (".venv", "benchmarks", "tests") or rel.suffix != ".py":
        return None
    return str(rel)


def bounces(argv_list: list[list[str]]) -> tuple[dict[str, set[str]], dict[str, int]]:
    """The walk's files, each with the places (a function of another file) it is entered from, and
    every re-entry: a call into a file that is already on the call stack below another file (the
    reader goes back into a file they have not left), counted by the path it took."""
    from txnmodel.cli import main

    entries: dict[str, set[str]] = defaultdict(set)
    returns: dict[str, int] = defaultdict(int)
    importing = [0]  # modules being imported on the stack: their code is no step of the walk
    stack: list[str | None] = []  # the product file of every frame ("<module>" for imports)

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_code.co_name == "<module>"
            importing[0] += module
            callee = None if importing[0] else _product_file(frame.f_code.co_filename)
            if callee is not None and not callee.startswith("txnmodel/"):
                caller = next((f for f in reversed(stack) if f not in (None, "<module>")), None)
                if (
                    caller is not None
                    and caller != callee
                    and not (callee.startswith(LOOP) and caller.startswith(LOOP))
                ):
                    entries[callee].add(f"{caller}:{frame.f_back.f_code.co_name if frame.f_back else '?'}")
                    if callee in stack:
                        at = len(stack) - 1 - stack[::-1].index(callee)
                        path = [f for f in stack[at:] if f not in (None, "<module>")]
                        path = [f for i, f in enumerate(path) if i == 0 or path[i - 1] != f]
                        if not all(f.startswith(LOOP) for f in path):
                            returns[" -> ".join([*path, callee])] += 1
            stack.append("<module>" if module else callee)
        elif event == "return" and stack:
            importing[0] -= stack.pop() == "<module>"

    for argv in argv_list:
        sys.setprofile(hook)
        try:
            main(argv)
        finally:
            sys.setprofile(None)
        stack.clear()
    return entries, returns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "walk")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="walk-") as tmp:
        hist, verdicts = Path(tmp) / "h", Path(tmp) / "v"
        simulate = ["simulate", "--seed", str(args.seed), "--workload", "ctp", "--histories", "1", "--ops", "10"]
        simulate += ["--out", str(hist), "--quiet"]
        verify = ["verify", str(hist), "--local", "--no-progress", "--out", str(verdicts)]
        with open(os.devnull, "w") as quiet:
            saved, sys.stdout = sys.stdout, quiet
            try:
                found, returns = bounces([simulate, verify])
            finally:
                sys.stdout = saved
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"entries": {n: sorted(p) for n, p in sorted(found.items())}, "re-entries": dict(returns)}
    (args.out / "walk.json").write_text(json.dumps(report, indent=2))
    reentered = sorted({path.rsplit(" -> ", 1)[1] for path in returns})
    print(f"the walk enters {len(found)} files; files entered again while still on the stack: {len(reentered)}")
    for path, count in sorted(returns.items(), key=lambda kv: -kv[1]):
        print(f"  {count:>6}x  {path}")
    print(f"written: {args.out / 'walk.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
