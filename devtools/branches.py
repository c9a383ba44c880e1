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
import functools
import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from devtools.branch_reasons import REASONS

if TYPE_CHECKING:
    from devtools.mutation import Mutant

__all__ = [
    "FLIP_EQUIVALENT",
    "FLIP_UNJUDGED",
    "UNREACHED",
    "Branch",
    "BranchSite",
    "Unjudged",
    "branch_sites",
    "flip_reason",
    "module_file",
    "reason_for",
    "unjudged",
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


@dataclass(frozen=True)
class Unjudged:
    """A flip that changes no history of the main job although it is not equivalent: ``why`` no
    workload of a correct engine shows it, and ``killer``, the test (a pytest node id) that fails with
    it applied (tests/devtools/test_branches.py runs each one so)."""

    why: str
    killer: str


def unjudged(mutant: Mutant) -> Unjudged | None:
    """The :data:`FLIP_UNJUDGED` entry of a flip mutant: for its condition's text in its function,
    the entry keyed with its occurrence (the k-th ``if`` of that text in the function, from 0) first."""
    text = mutant.before.removeprefix("if ")
    same = [
        m.index
        for m in _flips(mutant.machine)
        if (m.module, m.function, m.before) == (mutant.module, mutant.function, mutant.before)
    ]
    nth = same.index(mutant.index) if mutant.index in same else 0
    return FLIP_UNJUDGED.get((mutant.module, mutant.function, text, nth)) or FLIP_UNJUDGED.get(
        (mutant.module, mutant.function, text)
    )


@functools.cache
def _flips(machine: str) -> tuple[Mutant, ...]:
    from devtools.mutation import flip_mutants

    return tuple(flip_mutants(machine))


_PA_TESTS = "tests/pending_ack/test_rules.py::"
_BUFFER_TESTS = "tests/buffer/test_rules.py::"
_DELAYED_TESTS = "tests/delayed/test_rules.py::"

# Branch flips that change no history of the main job and are not equivalent: why no workload of a
# correct engine (or none of the main job's) shows them, and the test that kills each.  Keyed as
# FLIP_EQUIVALENT, with the occurrence of the condition's text in the function as a fourth element
# where the text is not unique there.
FLIP_UNJUDGED: dict[tuple[str, str, str] | tuple[str, str, str, int], Unjudged] = {
    ("reference.coordinator", "TxnLogRecord.__post_init__", "value is not None and (not 0 <= value < _U64_LIMIT)"): (
        Unjudged(
            "input validation: a record field outside uint64, which no step, decoder or engine builds",
            "tests/coordinator/test_rules.py::test_tc26_a_record_field_outside_uint64_is_refused",
        )
    ),
    ("reference.buffer", "entry_metadata", "entry.kind.is_marker"): Unjudged(
        "the wire metadata of an entry, which only `serve` encodes; the simulated broker hands entries over as values",
        _BUFFER_TESTS + "test_tb16_entry_metadata_round_trips_and_classifies",
    ),
    ("reference.buffer", "SnapshotStore.apply", "isinstance(effect, DeleteSnapshotSegment)"): Unjudged(
        "the machine's own fold of the snapshot topics is read only by the recovery that starts an epoch, "
        "and the engine starts each epoch from its own durable records: a delete the fold missed is never "
        "read again",
        _BUFFER_TESTS + "test_tb1_close_from_any_state_and_clear_only_from_close",
    ),
    ("reference.buffer", "SnapshotStore.apply", "effect.sequence_id not in self.segments"): Unjudged(
        "as the fold's delete above: the fold is read only by the recovery that starts an epoch",
        _BUFFER_TESTS + "test_vectors_all_pass",
    ),
    ("reference.buffer", "_end_markers", "e.kind.is_marker and e.txn_id is not None"): Unjudged(
        "the abort_hides_committed quirk's arms need an append after the transaction's commit marker and "
        "then its low-watermark abort; a client that holds END_TXN until every send is answered (TC-32) "
        "never causes the append",
        "tests/buffer/test_proofs.py::test_visible_agrees_with_reference_dispatchable",
    ),
    ("reference.buffer", "_AbortedMessages.__call__", "self.state.config.txnmodel_quirk_abort_hides_committed"): (
        Unjudged(
            "as _end_markers above: the quirk's arm matters only for a message of a committed transaction "
            "that a late append re-opened and the low watermark then aborted",
            "tests/buffer/test_proofs.py::test_visible_agrees_with_reference_dispatchable",
        )
    ),
    ("reference.pending_ack", "_normalize_cursor", "was_normal"): Unjudged(
        "every caller passes a cursor that may hold deletes at or below its new mark-delete position; the "
        "fast path leaves them in the view, which every question of the view answers as deleted all the "
        "same (is_deleted, deleted_bits, the admin check look at the mark-delete position first)",
        "tests/pending_ack/test_ledger_rollover.py::TestRollingTopic::runTest",
    ),
    ("reference.pending_ack", "_individual_checked", "bits == 0", 1): Unjudged(
        "a replay of a transaction's batch-index ack of which a plain ack took some indexes, not all, since "
        "(PA-11): it needs that plain ack and then a crash while the transaction is open; none of the "
        "main job's histories that replay a record has both",
        _PA_TESTS + "test_pa19_replay_keeps_the_batch_indexes_the_cursor_did_not_delete_since",
    ),
    ("reference.pending_ack", "recover", "next_record_id is not None"): Unjudged(
        "the engine passes exactly the count of records it replayed, so both arms agree there; a recovery "
        "without a record id (the tests') crashes the flip",
        _PA_TESTS + "test_pa16_replay_builds_the_sparse_index",
    ),
    (
        "reference.batched_log",
        "canonical_record",
        "message is not None and data and (data[0] != MAGIC >> 8) and message.HasField...",
    ): Unjudged(
        "a record the fast path rejects: the engine writes only records its own encoder made",
        "tests/batched_log/test_rules.py::test_bw7_unserializable_record_fails_alone",
    ),
    ("reference.delayed_bucket", "_trim", "state.mark_delete_ledger < 0"): Unjudged(
        "a trim below the mark-delete ledger at a seal: it needs a mark-delete position past undelivered "
        "delayed messages (a seek or skip), and the delayed workload's subscriptions only acknowledge",
        _DELAYED_TESTS + "test_dd22_trim_and_delete_failure",
    ),
    ("reference.delayed_bucket", "_add", "not dropped"): Unjudged(
        "a due add of a position the tracker still holds (added before it was due, read again once due "
        "before the tracker handed it out, DD-2): on the other arm the timer it re-arms is the one it has",
        _DELAYED_TESTS + "test_dd2_rejection_forgets_an_existing_bit",
    ),
}
