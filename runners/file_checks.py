"""Reading history files and checking them: the unit of work of both runners of ``txnmodel verify``.

:func:`check_file` is what one Spark task, or one turn of the in-process loop, does with a file (or
with some of its histories): read and type-check it, then :func:`invariants.verify.check_histories`.
Bad input becomes a ``bad-input`` verdict row; nothing raises.  :func:`read_groups` is the first
stage of ``--group-by-history`` (rows keyed by history, for histories spread over part files).
:func:`check_files_local` runs the same work in this process, file after file.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from history_io.inputs import printable
from invariants.verify import Outcome, VerdictRow, VerifyOptions, check_grouped, check_history
from spec.history import Operation
from views.report import rendered

__all__ = [
    "GroupedRows",
    "Reproduce",
    "Tally",
    "Unit",
    "check_file",
    "check_files_local",
    "check_units",
    "operations_in",
    "read_groups",
]

# Stage 1 of --group-by-history: (history, [(file, its rows)]), or (None, a bad-input row).
GroupedRows = tuple[str | None, Any]
Unit = tuple[str, "tuple[str, ...] | None"]  # a file, and the histories of it to check (None: all)
# The command that reruns a history from its run metadata (``txnmodel simulate``'s, which the
# command line hands in: a runner does not know the command line's options), or None.
Reproduce = Callable[[str, Mapping[str, Any]], "str | None"]


def _bad_file(path: str, options: VerifyOptions, detail: str) -> VerdictRow:
    shown = printable(path)
    return VerdictRow(Path(shown).name, "input", Outcome.BAD_INPUT.value, shown, options.model, detail=detail)


NOTHING_TO_CHECK = "holds no operations: nothing to check"


def _nothing_to_check(path: str, options: VerifyOptions, history: str | None = None) -> VerdictRow:
    """The verdict on a file, or a history, without a single operation: ``skipped``, never a pass
    (a recording cut short before its first operation, or an empty export)."""
    shown = printable(path)
    name = Path(shown).name if history is None else history
    what = "the file" if history is None else f"history {history!r}"
    return VerdictRow(
        name, "input", Outcome.SKIPPED.value, shown, options.model, detail=f"{shown}: {what} {NOTHING_TO_CHECK}"
    )


class Tally:
    """Progress in operations across files, for a phase counted in operations: each operation counts
    a share when its row is read (:data:`READ_SHARE`) and the rest as its history's checks go, so a
    long file or history moves the count while it is read and checked."""

    READ_SHARE = 0.3

    def __init__(self, phase: Any) -> None:
        self.phase = phase
        self.done = 0.0

    def add(self, amount: float, note: str | None = None) -> None:
        self.done += amount
        self.phase.update(done=round(self.done), note=note)


def check_file(
    path: str,
    fmt: str,
    options: VerifyOptions,
    only: Sequence[str] | None = None,
    reproduce: Reproduce | None = None,
    tally: Tally | None = None,
) -> list[VerdictRow]:
    """Read one file and check every history in it (or those named in ``only``, Parquet only), one
    history at a time: each is checked as soon as it has been read and dropped before the next, so
    memory holds one history, not the file.  Bad input becomes a ``bad-input`` row (histories
    checked before it keep their rows).  Counterexamples come back rendered (:func:`views.report.rendered`)."""
    from history_io.files import iter_histories
    from spec.errors import InputError

    rows: list[VerdictRow] = []
    commands, incomplete = _run_notes(path, reproduce)
    shown = printable(path)
    read = 0
    counted = tally is not None and fmt == "parquet"  # its rows were counted in the phase's total
    rows_read = (
        None
        if not counted or tally is None
        else (lambda n: tally.add(n * Tally.READ_SHARE, f"reading {Path(shown).name}"))
    )
    try:
        for name, ops in iter_histories(path, fmt, only, rows_read):
            read += 1
            if not ops:
                rows.append(_nothing_to_check(path, options, name))
                continue
            progress = None if not counted else _history_progress(tally, name, len(ops))
            rows.extend(rendered(check_history(name, ops, shown, options, commands.get(name), progress)))
            if name in incomplete:
                rows.append(_incomplete_row(name, shown, options, incomplete[name], commands.get(name)))
    except InputError as exc:
        rows.append(_bad_file(path, options, str(exc)))
    if not read and not rows and only is None:
        rows.append(_nothing_to_check(path, options))
    return rows


def operations_in(files: Sequence[str], fmt: str) -> int | None:
    """How many operations Parquet files hold, from their footers (None for another format, whose
    progress is counted in files)."""
    if fmt != "parquet":
        return None
    from history_io.files import parquet_rows

    return sum(parquet_rows(path) for path in files)


def _history_progress(tally: Tally | None, name: str, ops: int) -> Callable[[float, str], None]:
    """What :func:`invariants.verify.check_history` tells of one history, as operations of the tally."""
    share = ops * (1 - Tally.READ_SHARE)
    told = [0.0]

    def progress(done: float, what: str) -> None:
        if tally is not None and done > told[0]:
            tally.add(share * (done - told[0]), f"{name}: {what}")
            told[0] = done

    return progress


def _incomplete_row(history: str, path: str, options: VerifyOptions, why: str, reproduce: str | None) -> VerdictRow:
    """The verdict on a history whose run stopped early (its run metadata says ``incomplete``):
    ``unknown``, whatever the checks said of the part recorded, since the run did not do what it
    was asked to (a store lost to corruption or a full disk)."""
    return VerdictRow(
        history,
        "run",
        Outcome.UNKNOWN.value,
        path,
        options.model,
        detail=f"incomplete: the run stopped early ({why}); the checks judged only what was recorded until then",
        reproduce=reproduce,
    )


def _run_notes(path: str, reproduce: Reproduce | None) -> tuple[dict[str, str], dict[str, str]]:
    """From a file the simulator wrote (its run metadata), by history: the command that reruns
    each, and why a run stopped early (``incomplete``); nothing for files without metadata (Jepsen
    logs, other tools' histories)."""
    from history_io.files import read_metadata
    from spec.errors import InputError

    try:
        metadata = read_metadata(path)
    except InputError:
        return {}, {}  # the histories are checked (and refused, if they are bad) on their own
    commands: dict[str, str] = {}
    incomplete: dict[str, str] = {}
    for history, run in (metadata or {}).get("runs", {}).items():
        command = None if reproduce is None else reproduce(history, run)
        if command is not None:
            commands[history] = command
        if isinstance(run, dict) and run.get("incomplete"):
            incomplete[history] = str(run["incomplete"])
    return commands, incomplete


def check_units(
    units: Sequence[Unit],
    fmt: str,
    options: VerifyOptions,
    out: str | None = None,
    part: str = "00000",
    reproduce: Reproduce | None = None,
    tally: Tally | None = None,
) -> list[VerdictRow]:
    """Check some files (or some histories of them); with ``out``, write the verdicts there as part
    ``part`` (:func:`runners.verdicts.write_part`) and return them without their HTML pages."""
    rows = [row for path, names in units for row in check_file(path, fmt, options, names, reproduce, tally)]
    if out is None:
        return rows
    from runners.verdicts import write_part

    return write_part(Path(out), part, rows)


def read_groups(path: str, fmt: str, options: VerifyOptions, reproduce: Reproduce | None = None) -> list[GroupedRows]:
    """Stage 1 of ``--group-by-history``: one file's rows keyed by history, ``(None, row)`` for bad
    input and for a history whose run stopped early (its run metadata says ``incomplete``).

    Only the per-row contract is checked here; the cross-row rules need the whole history
    (:func:`invariants.verify.check_grouped`, stage 2).
    """
    from history_io.files import iter_jsonl, iter_parquet, read_file
    from spec.errors import InputError

    try:
        if fmt in ("jepsen", "edn"):
            return [(name, [(printable(path), ops)]) for name, ops in read_file(path, fmt).items()]
        groups: dict[str, list[Operation]] = {}
        for op in iter_parquet(path) if fmt == "parquet" else iter_jsonl(path):
            groups.setdefault(op.history, []).append(op)
    except InputError as exc:
        return [(None, _bad_file(path, options, str(exc)))]
    commands, incomplete = _run_notes(path, reproduce)
    stopped: list[GroupedRows] = [
        (None, _incomplete_row(name, printable(path), options, incomplete[name], commands.get(name)))
        for name in groups
        if name in incomplete
    ]
    return [(name, [(printable(path), ops)]) for name, ops in groups.items()] + stopped


def check_files_local(
    files: Sequence[str],
    fmt: str,
    options: VerifyOptions,
    progress: Any = None,
    group_by_history: bool = False,
    out: str | None = None,
    reproduce: Reproduce | None = None,
) -> list[VerdictRow]:
    """Every file checked in this process, file after file (or, grouped by history, all files read
    first).  ``progress``: a :class:`views.progress.Phase` told of every file, or None.  With
    ``out``, each file's verdicts are written as a part of their own, as a Spark task writes its
    share, and come back without their HTML pages."""
    phase = None if progress is None or isinstance(progress, bool) else progress
    tally = None
    if phase is not None and phase.unit == "operations" and fmt == "parquet" and not group_by_history:
        # Counted in operations (its total from the files' footers: :func:`operations_in`), so that
        # one long file or history moves the count as it is read and checked, not only when done.
        tally = Tally(phase)
    elif phase is not None:
        phase.set_total(len(files))
    rows: list[VerdictRow] = []
    if group_by_history:
        groups: dict[str, list[tuple[str, Sequence[Operation]]]] = {}
        for path in files:
            for key, payload in read_groups(path, fmt, options, reproduce):
                if key is None:
                    rows.append(payload)
                else:
                    groups.setdefault(key, []).extend(payload)
            if phase is not None:
                phase.advance(note=Path(path).name)
        checked = [row for history, parts in groups.items() for row in rendered(check_grouped(history, parts, options))]
        if out is None:
            return rows + checked
        from runners.verdicts import write_part

        return write_part(Path(out), "grouped", rows + checked)
    for number, path in enumerate(files):
        rows.extend(check_units([(path, None)], fmt, options, out, f"{number:05d}", reproduce, tally))
        if phase is not None and tally is None:
            phase.advance(note=Path(path).name)
    return rows
