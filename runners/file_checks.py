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

from invariants.verify import Outcome, VerdictRow, VerifyOptions, check_grouped, check_history
from spec.history import Operation
from views.report import rendered

__all__ = ["GroupedRows", "Reproduce", "Unit", "check_file", "check_files_local", "check_units", "read_groups"]

# Stage 1 of --group-by-history: (history, [(file, its rows)]), or (None, a bad-input row).
GroupedRows = tuple[str | None, Any]
Unit = tuple[str, "tuple[str, ...] | None"]  # a file, and the histories of it to check (None: all)
# The command that reruns a history from its run metadata (``txnmodel simulate``'s, which the
# command line hands in: a runner does not know the command line's options), or None.
Reproduce = Callable[[str, Mapping[str, Any]], "str | None"]


def _bad_file(path: str, options: VerifyOptions, detail: str) -> VerdictRow:
    return VerdictRow(Path(path).name, "input", Outcome.BAD_INPUT.value, path, options.model, detail=detail)


def check_file(
    path: str,
    fmt: str,
    options: VerifyOptions,
    only: Sequence[str] | None = None,
    reproduce: Reproduce | None = None,
) -> list[VerdictRow]:
    """Read one file and check every history in it (or those named in ``only``, Parquet only), one
    history at a time: each is checked as soon as it has been read and dropped before the next, so
    memory holds one history, not the file.  Bad input becomes a ``bad-input`` row (histories
    checked before it keep their rows).  Counterexamples come back rendered (:func:`views.report.rendered`)."""
    from history_io.files import iter_histories
    from spec.errors import InputError

    rows: list[VerdictRow] = []
    commands, incomplete = _run_notes(path, reproduce)
    try:
        for name, ops in iter_histories(path, fmt, only):
            rows.extend(rendered(check_history(name, ops, path, options, reproduce=commands.get(name))))
            if name in incomplete:
                rows.append(_incomplete_row(name, path, options, incomplete[name], commands.get(name)))
    except InputError as exc:
        rows.append(_bad_file(path, options, str(exc)))
    return rows


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
) -> list[VerdictRow]:
    """Check some files (or some histories of them); with ``out``, write the verdicts there as part
    ``part`` (:func:`runners.verdicts.write_part`) and return them without their HTML pages."""
    rows = [row for path, names in units for row in check_file(path, fmt, options, names, reproduce)]
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
            return [(name, [(path, ops)]) for name, ops in read_file(path, fmt).items()]
        groups: dict[str, list[Operation]] = {}
        for op in iter_parquet(path) if fmt == "parquet" else iter_jsonl(path):
            groups.setdefault(op.history, []).append(op)
    except InputError as exc:
        return [(None, _bad_file(path, options, str(exc)))]
    commands, incomplete = _run_notes(path, reproduce)
    stopped: list[GroupedRows] = [
        (None, _incomplete_row(name, path, options, incomplete[name], commands.get(name)))
        for name in groups
        if name in incomplete
    ]
    return [(name, [(path, ops)]) for name, ops in groups.items()] + stopped


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
    if phase is not None:
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
        rows.extend(check_units([(path, None)], fmt, options, out, f"{number:05d}", reproduce))
        if phase is not None:
            phase.advance(note=Path(path).name)
    return rows
