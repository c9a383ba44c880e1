"""Check and rewrite the transcripts of the conformance vectors (``spec/transcripts/**.txt``).

The I/O half of :mod:`reference.transcripts`: each vector ``spec/vectors/<machine>/<id>.json`` has a
transcript ``spec/transcripts/<machine>/<id>.txt``, the text the reference prints when it replays
the vector.  Checking reads each transcript (bounded, UTF-8, and in the transcript format: a file
that is not one is bad input naming its line) and compares it with what the reference prints now;
rewriting writes what the reference prints now, each file replaced whole.

Exit-code contract of ``txnmodel vectors transcript``: 0 every transcript is what the reference
prints (or, with ``--rewrite``, has been written), 1 a transcript differs, is missing or has no
vector, 2 unreadable or invalid input (a vector, or a transcript that is not one: file and line).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from history_io.inputs import decode_utf8, describe_os_error, read_input_bytes
from reference.sessions import replay_vector
from reference.transcripts import TranscriptError, read_transcript, render_transcript
from runners.vectors import collect_vector_files, load_vector
from spec.errors import BadVector, InputError
from spec.machines import MACHINES

__all__ = [
    "DEFAULT_TRANSCRIPTS",
    "MAX_TRANSCRIPT_BYTES",
    "BadTranscript",
    "TranscriptCheck",
    "check_transcripts",
    "transcript_path",
]

DEFAULT_TRANSCRIPTS = Path(__file__).resolve().parent.parent / "spec" / "transcripts"

#: The largest transcript read (the largest in spec/transcripts is about 0.3 MB).
MAX_TRANSCRIPT_BYTES = 16 * 1024 * 1024

#: How many lines of context the differences show around each change.
_CONTEXT = 2

Status = Literal["same", "differs", "missing", "stale", "written", "removed"]


class BadTranscript(InputError):
    """A transcript file that cannot be read or is not in the transcript format; names the file
    and, for the format, the line (``path:line: what``)."""


@dataclass(frozen=True)
class TranscriptCheck:
    """What became of one transcript: the same as the reference prints, different (``line`` is
    the first line of the file that differs, ``diff`` the differences as a unified diff), missing,
    stale (no vector has its id), or written or removed by a rewrite."""

    path: Path
    status: Status
    line: int | None = None
    diff: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status in ("same", "written", "removed")


def transcript_path(folder: Path, machine: str, vector_id: str) -> Path:
    """Where the transcript of the vector ``vector_id`` of ``machine`` lives under ``folder``."""
    return folder / machine / f"{vector_id}.txt"


def check_transcripts(
    paths: Iterable[str | Path], folder: Path, *, rewrite: bool = False, stale: bool = False
) -> list[TranscriptCheck]:
    """Compare (or, with ``rewrite``, write) the transcript under ``folder`` of every vector under
    ``paths``.  With ``stale``, transcripts under ``folder``'s machine folders that no vector has
    are reported (or removed); only sensible when ``paths`` are all the vectors.  Every vector is
    read and replayed before anything is written, so bad input leaves ``folder`` as it was."""
    expected: dict[Path, str] = {}
    seen: dict[str, Path] = {}
    for path in collect_vector_files(paths):
        data = load_vector(path)
        if data["id"] in seen:
            raise BadVector(f"$.id: {data['id']!r} is also the id of {seen[data['id']]}", where=str(path))
        seen[data["id"]] = path
        target = transcript_path(folder, data["machine"], data["id"])
        expected[target] = render_transcript(data, replay_vector(data, where=str(path)))
    extra = _stale(folder, expected) if stale else []
    if rewrite:
        return [*(_write(target, text) for target, text in expected.items()), *(_remove(p) for p in extra)]
    return [
        *(_compare(target, text) for target, text in expected.items()),
        *(TranscriptCheck(p, "stale") for p in extra),
    ]


def _stale(folder: Path, expected: dict[Path, str]) -> list[Path]:
    found: list[Path] = []
    for info in MACHINES:
        machine_folder = folder / info.name
        if machine_folder.is_dir():
            found += sorted(p for p in machine_folder.glob("*.txt") if p not in expected)
    return found


def _read(path: Path) -> str | None:
    """The text of the transcript at ``path``, or None when there is none."""
    if not path.is_symlink() and not path.exists():
        return None  # asked before reading: the reader refuses a missing file as bad input
    try:
        raw = read_input_bytes(path, limit=MAX_TRANSCRIPT_BYTES, limit_name="MAX_TRANSCRIPT_BYTES")
    except OSError as exc:
        raise BadTranscript(f"cannot read: {exc.strerror}", where=str(path)) from None
    except InputError as exc:
        raise BadTranscript(str(exc)) from None
    try:
        return decode_utf8(raw, str(path))
    except InputError as exc:
        raise BadTranscript(str(exc)) from None


def _compare(path: Path, text: str) -> TranscriptCheck:
    on_disk = _read(path)
    if on_disk is None:
        return TranscriptCheck(path, "missing")
    try:
        read_transcript(on_disk)
    except TranscriptError as exc:
        raise BadTranscript(exc.message, where=f"{path}:{exc.line}") from None
    if on_disk == text:
        return TranscriptCheck(path, "same")
    return TranscriptCheck(path, "differs", *_differences(path, on_disk, text))


def _differences(path: Path, on_disk: str, text: str) -> tuple[int, tuple[str, ...]]:
    """The first line of ``on_disk`` that is not ``text``'s, and a unified diff between them."""
    import difflib

    old, new = on_disk.split("\n"), text.split("\n")
    first = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    diff = difflib.unified_diff(
        old, new, f"{path} (on disk)", f"{path} (what the reference prints)", n=_CONTEXT, lineterm=""
    )
    return first + 1, tuple(diff)


def _write(path: Path, text: str) -> TranscriptCheck:
    encoded = text.encode("utf-8")
    try:
        # the size first: a file of another size differs, and is never read whole
        if path.is_file() and path.stat().st_size == len(encoded) and path.read_bytes() == encoded:
            return TranscriptCheck(path, "same")
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(encoded)
        os.replace(partial, path)
    except OSError as exc:
        raise BadTranscript(f"cannot write: {describe_os_error(exc)}") from None
    return TranscriptCheck(path, "written")


def _remove(path: Path) -> TranscriptCheck:
    try:
        path.unlink()
    except OSError as exc:
        raise BadTranscript(f"cannot remove: {describe_os_error(exc)}") from None
    return TranscriptCheck(path, "removed")
