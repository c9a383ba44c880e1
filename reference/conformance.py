"""Run conformance vectors (``spec/vectors/**.json``) against the reference machines.

Each reference module that has vectors exports ``VECTORS``, a :class:`MachineVectors` naming its
command classes and observers.  The runner is generic: it validates the file against
``spec/vectors.schema.json``, decodes each step's arguments through the command class's type hints
(``spec.jsonvalues``), steps the pure machine and compares the JSON spelling of what happened with
what the vector expects.

Exit-code contract of ``txnmodel vectors run``: 0 all pass, 1 any fails, 2 unreadable or invalid
input (the message names the file and the JSON path).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, get_type_hints

from spec.config import Config
from spec.errors import BadConfig, BadVector
from spec.jsonvalues import JsonError, from_json, to_json
from spec.machines import machine_info
from spec.result import Err, Ok

__all__ = [
    "MachineVectors",
    "VectorResult",
    "collect_vector_files",
    "describe_result",
    "load_vector",
    "matches",
    "run_paths",
    "run_vector",
]

SCHEMA_PATH = Path(__file__).resolve().parent.parent / "spec" / "vectors.schema.json"


@dataclass(frozen=True)
class MachineVectors:
    """What a reference module tells the runner about itself."""

    name: str
    initial: Callable[[Config, Mapping[str, Any]], Any]
    step: Callable[[Any, Any], tuple[Any, Ok[Any] | Err]]
    commands: Mapping[str, type]
    observers: Mapping[str, Callable[..., Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Mismatch:
    step: int
    command: str
    what: str
    expected: Any
    actual: Any

    def __str__(self) -> str:
        return (
            f"step {self.step} ({self.command}): {self.what} expected {json.dumps(self.expected)}, "
            f"actual {json.dumps(self.actual)}"
        )


@dataclass(frozen=True)
class VectorResult:
    path: str
    vector_id: str
    machine: str
    steps: int
    passed: bool
    mismatch: Mismatch | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "id": self.vector_id,
            "machine": self.machine,
            "steps": self.steps,
            "passed": self.passed,
        }
        if self.mismatch is not None:
            out["mismatch"] = dataclasses.asdict(self.mismatch)
        return out


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


def _machine_vectors(machine: str) -> MachineVectors | None:
    info = machine_info(machine)
    try:
        module = importlib.import_module(f"reference.{info.module}")
    except ModuleNotFoundError as exc:
        if exc.name == f"reference.{info.module}":
            return None
        raise
    vectors = getattr(module, "VECTORS", None)
    return vectors if isinstance(vectors, MachineVectors) else None


def describe_result(result: Ok[Any] | Err) -> dict[str, Any]:
    """The JSON spelling of a step's result that vectors compare against."""
    if isinstance(result, Ok):
        return {"ok": to_json(result.value), "effects": [to_json(e) for e in result.effects]}
    return {
        "error": result.error.name,
        "message": result.error.message,
        "effects": [to_json(e) for e in result.effects],
    }


def matches(expected: Any, actual: Any) -> bool:
    """Partial match: objects compare only the expected keys; arrays element-wise, same length."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and matches(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(matches(e, a) for e, a in zip(expected, actual, strict=True))
        )
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return bool(expected == actual)


def _decode_args(fn: Callable[..., Any], args: Mapping[str, Any], where: str) -> dict[str, Any]:
    hints = get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())[1:]
    names = {p.name for p in params}
    unknown = set(args) - names
    if unknown:
        raise JsonError(where, f"unknown argument(s) {', '.join(sorted(unknown))}; takes {', '.join(names) or 'none'}")
    out: dict[str, Any] = {}
    for p in params:
        if p.name in args:
            out[p.name] = from_json(args[p.name], hints.get(p.name, Any), f"{where}.{p.name}")
        elif p.default is inspect.Parameter.empty:
            raise JsonError(where, f"missing argument {p.name!r}")
    return out


def run_vector(path: Path, data: Mapping[str, Any], *, where: str | None = None) -> VectorResult:
    """Run one (schema-valid) vector.  Input problems raise :class:`BadVector`."""
    label = where or str(path)
    machine = data["machine"]
    steps: Sequence[Mapping[str, Any]] = data["steps"]
    adapter = _machine_vectors(machine)
    if adapter is None:
        return VectorResult(
            label, data["id"], machine, len(steps), False,
            Mismatch(0, "-", "machine", f"reference.{machine_info(machine).module} with VECTORS", "not implemented"),
        )
    try:
        config = Config().with_overrides(data.get("config", {}))
    except BadConfig as exc:
        raise BadVector(f"$.config: {exc}", where=label) from None
    try:
        state = adapter.initial(config, data.get("init", {}))
    except (JsonError, ValueError, TypeError, KeyError) as exc:
        raise BadVector(f"$.init: {exc}", where=label) from None
    for index, step in enumerate(steps):
        name = step["command"]
        command_type = adapter.commands.get(name)
        if command_type is None:
            known = ", ".join(sorted(adapter.commands))
            raise BadVector(f"$.steps[{index}].command: {machine} has no command {name!r}; known: {known}", where=label)
        try:
            command = from_json(step.get("args", {}), command_type, f"$.steps[{index}].args")
        except JsonError as exc:
            raise BadVector(str(exc), where=label) from None
        state, result = adapter.step(state, command)
        actual = describe_result(result)
        expect = step.get("expect")
        if expect is not None:
            mismatch = _compare_expect(index, name, expect, actual)
            if mismatch is not None:
                return VectorResult(label, data["id"], machine, len(steps), False, mismatch)
        for check_index, check in enumerate(step.get("check", [])):
            observer = adapter.observers.get(check["observe"])
            if observer is None:
                known = ", ".join(sorted(adapter.observers))
                raise BadVector(
                    f"$.steps[{index}].check[{check_index}].observe: {machine} has no observer "
                    f"{check['observe']!r}; known: {known}",
                    where=label,
                )
            try:
                kwargs = _decode_args(observer, check.get("args", {}), f"$.steps[{index}].check[{check_index}].args")
            except JsonError as exc:
                raise BadVector(str(exc), where=label) from None
            observed = to_json(observer(state, **kwargs))
            if not matches(check["equals"], observed):
                what = f"observe {check['observe']}({json.dumps(check.get('args', {}))})"
                return VectorResult(
                    label, data["id"], machine, len(steps), False,
                    Mismatch(index, name, what, check["equals"], observed),
                )
    return VectorResult(label, data["id"], machine, len(steps), True)


def _compare_expect(index: int, name: str, expect: Any, actual: dict[str, Any]) -> Mismatch | None:
    if expect == "ok":
        if "ok" in actual:
            return None
        return Mismatch(index, name, "result", "ok", actual)
    if "error" in expect:
        if actual.get("error") != expect["error"]:
            return Mismatch(index, name, "result", {"error": expect["error"]}, actual)
        contains = expect.get("message_contains")
        if contains is not None and contains not in actual.get("message", ""):
            return Mismatch(index, name, "error message", contains, actual.get("message"))
    elif "ok" not in actual or not matches(expect["ok"], actual["ok"]):
        return Mismatch(index, name, "result", {"ok": expect["ok"]}, actual)
    if "effects" in expect and not matches(expect["effects"], actual["effects"]):
        return Mismatch(index, name, "effects", expect["effects"], actual["effects"])
    return None


def run_paths(paths: Iterable[str | Path]) -> list[VectorResult]:
    """Run every vector under ``paths``; vector ids must be unique.  Bad input raises BadVector."""
    results: list[VectorResult] = []
    seen: dict[str, Path] = {}
    for path in collect_vector_files(paths):
        data = load_vector(path)
        if data["id"] in seen:
            raise BadVector(f"$.id: {data['id']!r} is also the id of {seen[data['id']]}", where=str(path))
        seen[data["id"]] = path
        results.append(run_vector(path, data))
    return results
