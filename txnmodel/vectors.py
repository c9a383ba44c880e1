"""Read, schema-check and run conformance vector files (``spec/vectors/**.json``).

The I/O half of the vector runner; the pure half is :mod:`reference.conformance`.

Exit-code contract of ``txnmodel vectors run``: 0 all pass, 1 any fails, 2 unreadable or invalid
input (the message names the file and the JSON path).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any

from reference.conformance import VectorResult, run_vector
from spec.errors import BadVector

__all__ = ["SCHEMA_PATH", "collect_vector_files", "load_vector", "run_paths"]

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "spec" / "vectors.schema.json"


@cache
def _validator() -> Any:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def collect_vector_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand folders to their ``*.json`` files (sorted); a missing path is bad input."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.json") if p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise BadVector("no such file or folder", where=str(path))
    return files


def load_vector(path: Path) -> dict[str, Any]:
    """Read and schema-check one vector; raises :class:`BadVector` with file and JSON path."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise BadVector(f"cannot read: {exc}", where=str(path)) from None
    except json.JSONDecodeError as exc:
        raise BadVector(f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", where=str(path)) from None
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        raise BadVector(f"{first.json_path}: {first.message}", where=str(path))
    return data  # type: ignore[no-any-return]


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
