"""The walk of one history, from the simulator through ``verify`` to its page: which files it enters.

Runs ``txnmodel simulate`` of one seeded history and ``txnmodel verify`` of it (every checker, a
counterexample page when one fails) in this process, through the command line only, under a profile
hook, and reports the files of the product a reader follows: the sequence of files on the call
stack down to ``--depth`` frames of product code below the command line, consecutive repeats
collapsed.  A file's *entries* are how often that sequence comes back to it.  In a tree whose
layers call only downward, a walk enters each file once or twice; a tree of import circles sends
it back and forth (the issue that restructured the tree counted eight).

Usage: ``python benchmarks/walk.py [--depth 3] [--seed 1] [--out out/walk]``.  Writes
``OUT/walk.json`` (the sequence and the counts) and prints the files entered more than twice.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _product_file(filename: str) -> str | None:
    path = Path(filename)
    if not path.is_absolute() or not path.is_relative_to(ROOT) or "tests" in path.relative_to(ROOT).parts[:1]:
        return None
    rel = path.relative_to(ROOT)
    if rel.parts[0] in (".venv", "benchmarks") or rel.suffix != ".py":
        return None
    return str(rel)


def walk(argv_list: list[list[str]], depth: int) -> list[list[str]]:
    """For each command, the sequence of product files at most ``depth`` product frames below the
    command line."""
    from txnmodel.cli import main

    walks: list[list[str]] = []
    sequence: list[str] = []
    stack: list[str | None] = []

    importing = [0]  # frames of modules being imported on the stack: their code is no step of the walk

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            module = frame.f_code.co_name == "<module>"
            importing[0] += module
            name = None if importing[0] else _product_file(frame.f_code.co_filename)
            stack.append("<module>" if module else name)
            if name is not None and not name.startswith("txnmodel/"):
                level = sum(1 for s in stack if s is not None and s != "<module>" and not s.startswith("txnmodel/"))
                if level <= depth and (not sequence or sequence[-1] != name):
                    sequence.append(name)
        elif event == "return" and stack:
            importing[0] -= stack.pop() == "<module>"

    for argv in argv_list:
        sequence = []
        sys.setprofile(hook)
        try:
            main(argv)
        finally:
            sys.setprofile(None)
        stack.clear()
        walks.append(sequence)
    return walks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depth", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "walk")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="walk-") as tmp:
        hist, verdicts = Path(tmp) / "h", Path(tmp) / "v"
        simulate = ["simulate", "--seed", str(args.seed), "--workload", "ctp", "--histories", "1", "--ops", "10"]
        simulate += ["--out", str(hist), "--quiet"]
        verify = ["verify", str(hist), "--local", "--no-progress", "--out", str(verdicts)]
        simulated, verified = walk([simulate, verify], args.depth)
    # The simulator's own event loop (the scheduler resuming client processes, the broker stepping
    # its machines) is a loop, not a walk: the history's walk leaves the engine once, with the
    # history it returns.
    halves = {
        "simulate (outside the engine's event loop)": [f for f in simulated if not f.startswith("engine/")],
        "verify, to the page": verified,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"depth": args.depth, "walks": {}}
    for title, sequence in halves.items():
        collapsed = [f for i, f in enumerate(sequence) if i == 0 or sequence[i - 1] != f]
        entries = Counter(collapsed)
        most = entries.most_common()
        report["walks"][title] = {"sequence": collapsed, "entries": dict(most)}
        print(
            f"{title}: {len(collapsed)} steps over {len(entries)} files; "
            f"most entries of one file {most[0][1] if most else 0}; "
            f"files entered more than twice: {sum(1 for _, n in most if n > 2)}"
        )
        for name, count in most:
            if count > 2:
                print(f"  {count:>4}  {name}")
    (args.out / "walk.json").write_text(json.dumps(report, indent=2))
    print(f"written: {args.out / 'walk.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
