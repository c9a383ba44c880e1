"""Branches of the pure machines: where each one is, what statement makes it, and why the ones the
main job's workloads never take are not taken.

coverage.py (branch mode) names a branch by its arc, ``(line, target)``: from the line of an
``if``, ``while``, ``for``, ``match`` ... to the first line of the arm it took (a negative target
leaves the function).  :func:`branch_sites` reads a module's source with ``ast`` and says, for each
line that can branch, the function it is in, the kind of statement and its text, so a measured arc
becomes a :class:`Branch` a reader can find.  :data:`UNREACHED` states why a branch the workloads do
not take is not taken (``benchmarks/branch_reach.py`` lists every unreached branch with its reason,
or as unexplained; docs/known_bugs.md has the figures).  A reason is keyed by the module and the
function, and optionally by the branch statement's text, so it survives edits elsewhere in the file.

Pure: reading a module's source is the only thing it does.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

from devtools.branch_reasons import REASONS

__all__ = [
    "FLIP_EQUIVALENT",
    "UNREACHED",
    "Branch",
    "BranchSite",
    "branch_sites",
    "flip_reason",
    "module_file",
    "reason_for",
]


@dataclass(frozen=True)
class BranchSite:
    """A statement that branches: where it is and what it says."""

    function: str  # qualified name of the enclosing function (``Class.method``), "" at module level
    kind: str  # if, elif, while, for, match, case, with, try, ...
    text: str  # the statement's first line, stripped


@dataclass(frozen=True)
class Branch:
    """One arc of a branch statement, as coverage.py measures it."""

    machine: str
    module: str
    line: int
    target: int  # the first line of the arm taken; negative: out of the function
    site: BranchSite
    reached: bool

    @property
    def id(self) -> str:
        return f"{self.module}:{self.line}->{self.target}"

    def to_json(self) -> dict[str, object]:
        return {
            "machine": self.machine,
            "module": self.module,
            "line": self.line,
            "target": self.target,
            "function": self.site.function,
            "kind": self.site.kind,
            "text": self.site.text,
            "reached": self.reached,
        }


def module_file(module: str) -> Path:
    return Path(inspect.getfile(importlib.import_module(module))).resolve()


_KINDS: dict[type[ast.AST], str] = {
    ast.If: "if",
    ast.While: "while",
    ast.For: "for",
    ast.AsyncFor: "for",
    ast.Match: "match",
    ast.With: "with",
    ast.Try: "try",
    ast.Return: "return",
}


def branch_sites(module: str) -> dict[int, BranchSite]:
    """Line -> the statement starting there, for every statement of ``module`` (coverage.py's
    arcs start at a statement's first line); ``elif`` is told from ``if`` by the source text."""
    path = module_file(module)
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    out: dict[int, BranchSite] = {}

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, f"{function}.{child.name}" if function else child.name)
                continue
            if isinstance(child, ast.ClassDef):
                visit(child, f"{function}.{child.name}" if function else child.name)
                continue
            if isinstance(child, ast.stmt | ast.match_case):
                line = child.pattern.lineno if isinstance(child, ast.match_case) else child.lineno
                text = lines[line - 1].strip()
                kind = _KINDS.get(type(child), type(child).__name__.lower())
                if isinstance(child, ast.match_case):
                    kind = "case"
                elif kind == "if" and text.startswith("elif"):
                    kind = "elif"
                out.setdefault(line, BranchSite(function, kind, text))
            visit(child, function)

    visit(ast.parse(source), "")
    return out


def reason_for(branch: Branch) -> str | None:
    """Why the workloads do not take ``branch`` (:data:`UNREACHED`): the reason for its statement's
    text in its function, else for the whole function, else None (unexplained)."""
    site = branch.site
    return UNREACHED.get((branch.module, site.function, site.text)) or UNREACHED.get((branch.module, site.function))


# Why a branch is not taken by the main job's workloads: (module, function) for every branch of the
# function, (module, function, statement text) for one statement (devtools.branch_reasons).
UNREACHED: dict[tuple[str, str] | tuple[str, str, str], str] = REASONS


def flip_reason(module: str, function: str, before: str) -> str | None:
    """Why the flip of the ``if`` ``before`` (``if <condition>``) in ``function`` changes nothing a check
    can judge (:data:`FLIP_EQUIVALENT`): the reason for that statement, else for the function."""
    text = before.removeprefix("if ")
    found = FLIP_EQUIVALENT.get((module, function, text)) or FLIP_EQUIVALENT.get((module, function))
    return found


# Branch flips with no consequence a check can judge, and why: (module, function) for every ``if`` of
# the function, (module, function, condition) for one.  Filled from benchmarks/mutation_report.py
# --flips; docs/known_bugs.md lists them per machine.  Only flips whose two arms compute the same
# thing are here (tests/devtools/test_branches.py runs each flipped against the unflipped code); a
# flip that differs where no workload looks is not equivalent, however invisible.
FLIP_EQUIVALENT: dict[tuple[str, str] | tuple[str, str, str], str] = {
    ("reference.delayed_runs", "merge_runs", "len(packed) >= _ARRAY_MERGE * 24"): (
        "equivalent: both arms sort the same 24-byte keys (numpy's stable sort past _ARRAY_MERGE records, "
        "Python's below it); the threshold picks the faster one, never the order"
    ),
    ("reference.buffer", "BufferState.__post_init__", "not isinstance(self.entries, Log)"): (
        "equivalent in every step: every state the machine builds already holds its entries as a Log "
        "(initial's Log(), recovery's _as_log, a step's append or drop_first), so the flip only copies "
        "the log into an equal one"
    ),
    ("reference.delayed_bucket", "_Popping.drop", "b.bucket_id < 0 and (not b.pending_create)"): (
        "equivalent in every step: ``reshaped`` only makes the pop loop finish the gathered pops and go on "
        "from the state they make, which is the state it would reach anyway (tests/delayed/"
        "test_batched_pops.py); a memory-mode bucket left in the range map after its last bit went owns no "
        "boundary (its boundary is None) and answers every later drop in its range as not tracked, as the "
        "gap it leaves does"
    ),
    ("reference.delayed_bucket", "_get_scheduled", "pops.reshaped"): (
        "equivalent in every step: finishing the gathered pops and going on from the state they make is "
        "what popping on would make (tests/delayed/test_batched_pops.py), so finishing after every other "
        "pop and not after an emptied memory-mode bucket (which owns no boundary and answers every drop "
        "in its range as not tracked) only changes when the pops reach the state"
    ),
    ("reference.delayed_bucket", "boundary_owner", "ledger is None"): (
        "equivalent in every step: the tracker's one call passes the ledger it unpacked from the same "
        "head, so the flip recomputes the same value (only a direct call without the ledger differs)"
    ),
}
