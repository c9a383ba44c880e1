"""Reading history files and checking them: the unit of work of both runners of ``txnmodel verify``.

:func:`check_file` is what one Spark task, or one turn of the in-process loop, does with a file (or
with some of its histories): read and type-check it, then :func:`invariants.verify.check_histories`.
Bad input becomes a ``bad-input`` verdict row; nothing raises.  :func:`read_groups` is the first
stage of ``--group-by-history`` (rows keyed by history, for histories spread over part files).
:func:`check_files_local` runs the same work in this process, file after file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from invariants.verify import Outcome, VerdictRow, VerifyOptions, check_grouped, check_histories
from spec.history import Operation

__all__ = ["GroupedRows", "check_file", "check_files_local", "read_groups"]

# Stage 1 of --group-by-history: (history, [(file, its rows)]), or (None, a bad-input row).
GroupedRows = tuple[str | None, Any]


def _bad_file(path: str, options: VerifyOptions, detail: str) -> VerdictRow:
    return VerdictRow(Path(path).name, "input", Outcome.BAD_INPUT.value, path, options.model, detail=detail)


def check_file(path: str, fmt: str, options: VerifyOptions, only: Sequence[str] | None = None) -> list[VerdictRow]:
    """Read one file and check every history in it (or those named in ``only``, Parquet only); bad
    input becomes a ``bad-input`` row."""
    from invariants.history import read_file
    from spec.errors import InputError

    try:
        histories = read_file(path, fmt, only)
    except InputError as exc:
        return [_bad_file(path, options, str(exc))]
    return check_histories(histories, path, options)


def read_groups(path: str, fmt: str, options: VerifyOptions) -> list[GroupedRows]:
    """Stage 1 of ``--group-by-history``: one file's rows keyed by history, ``(None, row)`` for bad input.

    Only the per-row contract is checked here; the cross-row rules need the whole history
    (:func:`invariants.verify.check_grouped`, stage 2).
    """
    from invariants.history import iter_jsonl, iter_parquet, read_file
    from spec.errors import InputError

    try:
        if fmt == "jepsen":
            return [(name, [(path, ops)]) for name, ops in read_file(path, fmt).items()]
        groups: dict[str, list[Operation]] = {}
        for op in iter_parquet(path) if fmt == "parquet" else iter_jsonl(path):
            groups.setdefault(op.history, []).append(op)
    except InputError as exc:
        return [(None, _bad_file(path, options, str(exc)))]
    return [(name, [(path, ops)]) for name, ops in groups.items()]


def check_files_local(
    files: Sequence[str], fmt: str, options: VerifyOptions, progress: Any = None, group_by_history: bool = False
) -> list[VerdictRow]:
    """Every file checked in this process, file after file (or, grouped by history, all files read
    first).  ``progress``: a :class:`txnmodel.progress.Phase` told of every file, or None."""
    phase = None if progress is None or isinstance(progress, bool) else progress
    if phase is not None:
        phase.set_total(len(files))
    rows: list[VerdictRow] = []
    if group_by_history:
        groups: dict[str, list[tuple[str, Sequence[Operation]]]] = {}
        for path in files:
            for key, payload in read_groups(path, fmt, options):
                if key is None:
                    rows.append(payload)
                else:
                    groups.setdefault(key, []).extend(payload)
            if phase is not None:
                phase.advance(note=Path(path).name)
        for history, parts in groups.items():
            rows.extend(check_grouped(history, parts, options))
        return rows
    for path in files:
        rows.extend(check_file(path, fmt, options))
        if phase is not None:
            phase.advance(note=Path(path).name)
    return rows
