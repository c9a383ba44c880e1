"""Read, schema-check and run conformance vector files (``spec/vectors/**.json``).

The I/O half of the vector runner; the pure half is :mod:`reference.conformance`.

Exit-code contract of ``txnmodel vectors run``: 0 all pass, 1 any fails, 2 unreadable or invalid
input (the message names the file and the JSON path, or the line and byte offset).

Every file is bounded before it is parsed: at most :data:`MAX_VECTOR_BYTES` bytes, JSON nested at
most :data:`MAX_VECTOR_DEPTH` levels deep (the deepest vector has 10), integers of at most
:data:`MAX_INTEGER_DIGITS` digits; a file past a limit is refused with the limit's name.
"""

from __future__ import annotations

import json
import os
import reprlib
import stat
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

from history_io.inputs import decode_utf8, file_kind, read_input_bytes, text_place
from reference.conformance import VectorResult
from reference.sessions import run_vector
from spec.errors import BadVector, InputError
from spec.json_limits import first_excess

__all__ = [
    "MAX_INTEGER_DIGITS",
    "MAX_VECTOR_BYTES",
    "MAX_VECTOR_DEPTH",
    "SCHEMA_PATH",
    "collect_vector_files",
    "load_vector",
    "run_paths",
]

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "spec" / "vectors.schema.json"

#: The largest vector file read (the largest in spec/vectors is about 0.4 MB).
MAX_VECTOR_BYTES = 8 * 1024 * 1024
#: The deepest nesting of arrays and objects in a vector (the deepest in spec/vectors is 10).
MAX_VECTOR_DEPTH = 32
#: The longest integer literal: enough for any 64-bit value, far below where parsing gets slow.
MAX_INTEGER_DIGITS = 40


@cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def collect_vector_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand folders to their ``*.json`` files (sorted); a missing path, something that is neither
    a file nor a folder, and a folder without vectors are bad input."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            raise BadVector(f"cannot read: {exc.strerror}", where=str(path)) from None
        if stat.S_ISDIR(mode):
            found = sorted(p for p in path.rglob("*.json") if p.is_file())
            if not found:
                raise BadVector("no *.json vector files in this folder", where=str(path))
            files.extend(found)
        elif stat.S_ISREG(mode):
            files.append(path)
        else:
            raise BadVector(f"not a file or a folder ({file_kind(mode)})", where=str(path))
    return files


def load_vector(path: Path) -> dict[str, Any]:
    """Read, bound and schema-check one vector; raises :class:`BadVector` with the file and the
    JSON path, or the line and byte offset."""
    try:
        raw = read_input_bytes(path, limit=MAX_VECTOR_BYTES, limit_name="MAX_VECTOR_BYTES")
        text = decode_utf8(raw, str(path))
    except OSError as exc:
        raise BadVector(f"cannot read: {exc.strerror}", where=str(path)) from None
    except InputError as exc:
        raise BadVector(str(exc)) from None
    _check_bounds(text, str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadVector(f"not JSON: {exc.msg} at {text_place(text, exc.pos)}", where=str(path)) from None
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        raise BadVector(f"{first.json_path}: {_schema_message(first)}", where=str(path))
    return data  # type: ignore[no-any-return]


def _check_bounds(text: str, where: str) -> None:
    """Refuse nesting past :data:`MAX_VECTOR_DEPTH` and numbers past :data:`MAX_INTEGER_DIGITS`
    before parsing, so neither reaches the parser's recursion or Python's integer conversion."""
    excess = first_excess(text, max_depth=MAX_VECTOR_DEPTH, max_digits=MAX_INTEGER_DIGITS)
    if excess is not None:
        what, index = excess
        limit = "MAX_VECTOR_DEPTH" if what.startswith("nested") else "MAX_INTEGER_DIGITS"
        raise BadVector(f"JSON {what} at {text_place(text, index)} (limit {limit})", where=where)


def _schema_message(error: Any) -> str:
    """jsonschema's message, with the offending value shortened: it quotes the whole value, which
    may be megabytes long."""
    quoted = repr(error.instance)
    if len(quoted) <= 80:
        return str(error.message)
    if isinstance(error.instance, str):
        short = f"{error.instance[:40]!r}... ({len(error.instance):,} characters)"
    else:
        short = reprlib.repr(error.instance)
    return str(error.message).replace(quoted, short)


def run_paths(
    paths: Iterable[str | Path],
    *,
    on_total: Callable[[int], None] | None = None,
    on_result: Callable[[VectorResult], None] | None = None,
) -> list[VectorResult]:
    """Run every vector under ``paths``; vector ids must be unique.  Bad input raises BadVector.
    ``on_total`` hears how many files there are, ``on_result`` each result (progress)."""
    results: list[VectorResult] = []
    seen: dict[str, Path] = {}
    files = collect_vector_files(paths)
    if on_total is not None:
        on_total(len(files))
    for path in files:
        data = load_vector(path)
        if data["id"] in seen:
            raise BadVector(f"$.id: {data['id']!r} is also the id of {seen[data['id']]}", where=str(path))
        seen[data["id"]] = path
        results.append(run_vector(path, data))
        if on_result is not None:
            on_result(results[-1])
    return results
