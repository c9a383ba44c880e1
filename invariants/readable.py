"""Domain values as a person reads them: the reference machines' states and commands in words.

Two forms, both pure:

* :func:`short` — one line: ``EndTxn(txn_id=(0,3), action=ABORT, now_ms=32)``.  Fields left at
  their defaults are omitted, TxnIDs print as ``(most,least)``, positions as ``ledger:entry``,
  enums by Pulsar's name (:class:`spec.types.PulsarName`), a ``Config`` as the broker.conf keys
  that differ from Pulsar's defaults.
* :func:`rows` — a state flattened to ``(path, value)`` rows, one per leaf, in a stable order:
  ``txns[(0,3)].status = COMMITTING``.  Two states' rows differ exactly where the states differ,
  which is what the counterexample viewer shows as a step's change.

Both are capped (characters, rows) so a large state never produces a page nobody can open.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import immutables
from pyroaring import BitMap, FrozenBitMap

from spec.config import Config
from spec.jsonvalues import json_order, to_json
from spec.types import BatchedPosition, Position, Subscription, TxnID

__all__ = ["MAX_ROWS", "Row", "diff_rows", "rows", "short"]

MAX_ROWS = 400
_MAX_ITEMS = 12  # items of a set shown inline before "… N more"
Row = tuple[str, str]


def short(value: Any, *, limit: int = 240) -> str:
    """One line, at most ``limit`` characters (cut with ``…``)."""
    text = _short(value, depth=0)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _atom(value: Any) -> str | None:
    """The text of a value that is one leaf, or None for a container."""
    if value is None:
        return "null"
    if isinstance(value, enum.Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, TxnID):
        return f"({value.most_sig_bits},{value.least_sig_bits})"
    if isinstance(value, BatchedPosition):
        return f"{value.ledger_id}:{value.entry_id}#{value.batch_index}/{value.batch_size}"
    if isinstance(value, Position):
        return f"{value.ledger_id}:{value.entry_id}"
    if isinstance(value, Subscription):
        return f"{value.topic}#{value.subscription}"
    if isinstance(value, bytes | bytearray):
        shown = bytes(value[:8]).hex()
        return f"<{len(value)} bytes {shown}{'…' if len(value) > 8 else ''}>"
    if isinstance(value, BitMap | FrozenBitMap):
        return _set_text([str(v) for v in value], len(value))
    if isinstance(value, Config):
        changed = [f"{key}={_atom(v) or v}" for key, v in value.items() if Config.defaults()[key] != v]
        return "Config(" + (", ".join(changed) if changed else "Pulsar's defaults") + ")"
    return None


def _set_text(items: list[str], total: int) -> str:
    shown = items[:_MAX_ITEMS]
    more = f", … {total - len(shown)} more" if total > len(shown) else ""
    return "{" + ", ".join(shown) + more + "}"


def _sorted_items(values: Any) -> list[Any]:
    try:
        return sorted(values, key=lambda v: json_order(to_json(v)))
    except TypeError:
        return sorted(values, key=repr)


def _short(value: Any, depth: int) -> str:
    atom = _atom(value)
    if atom is not None:
        return atom
    if depth > 4:
        return "…"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        parts = [f"{name}={_short(v, depth + 1)}" for name, v in _fields(value, omit_defaults=True)]
        return f"{type(value).__name__}(" + ", ".join(parts) + ")"
    if isinstance(value, Mapping | immutables.Map):
        keys = _sorted_items(value.keys())
        shown = [f"{_short(k, depth + 1)}: {_short(value[k], depth + 1)}" for k in keys[:_MAX_ITEMS]]
        more = f", … {len(keys) - len(shown)} more" if len(keys) > len(shown) else ""
        return "{" + ", ".join(shown) + more + "}"
    if isinstance(value, frozenset | set):
        return _set_text([_short(v, depth + 1) for v in _sorted_items(value)], len(value))
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        shown = [_short(v, depth + 1) for v in itertools.islice(value, _MAX_ITEMS)]
        more = f", … {len(value) - len(shown)} more" if len(value) > len(shown) else ""
        return "[" + ", ".join(shown) + more + "]"
    return repr(value)


def _fields(value: Any, *, omit_defaults: bool) -> Iterator[tuple[str, Any]]:
    for f in dataclasses.fields(value):
        if not f.repr:
            continue
        v = getattr(value, f.name)
        if omit_defaults:
            if f.default is not dataclasses.MISSING and _same(v, f.default):
                continue
            if f.default_factory is not dataclasses.MISSING and _same(v, f.default_factory()):
                continue
        yield f.name, v


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(type(a) is type(b) and a == b)
    except Exception:  # a value whose equality raises is simply shown
        return False


def rows(value: Any, *, max_rows: int = MAX_ROWS) -> tuple[list[Row], int]:
    """``value`` flattened to ``(path, text)`` rows; returns (rows, rows left out by the cap).

    A dataclass contributes one path segment per field (``.field``), a map one per key
    (``[key]``), a sequence of containers one per index; sets, bitmaps and sequences of leaves are
    one row each.  Empty containers are one row (``{}``, ``[]``) so that a map emptied by a step
    shows as a change.
    """
    out: list[Row] = []
    total = 0
    for row in _rows(value, ""):
        total += 1
        if len(out) < max_rows:
            out.append(row)
    return out, total - len(out)


def _rows(value: Any, path: str) -> Iterator[Row]:
    atom = _atom(value)
    if atom is not None:
        yield (path or "value", atom)
        return
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if isinstance(value, tuple) and len(dataclasses.fields(value)) == 0:
            yield (path or "value", type(value).__name__)
            return
        fields = list(_fields(value, omit_defaults=False))
        if not fields:
            yield (path or "value", type(value).__name__ + "()")
        for name, v in fields:
            yield from _rows(v, f"{path}.{name}" if path else name)
        return
    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
        # a JSON object (a model checker's trace): fields in their order, "@type" as the type name
        fields = [(k, v) for k, v in value.items() if k != "@type"]
        if not fields:
            yield (path or "value", str(value.get("@type", "{}")))
        for name, v in fields:
            yield from _rows(v, f"{path}.{name}" if path else name)
        return
    if isinstance(value, Mapping | immutables.Map):
        if not len(value):
            yield (path or "value", "{}")
        for key in _sorted_items(value.keys()):
            yield from _rows(value[key], f"{path}[{_short(key, 1)}]")
        return
    if isinstance(value, frozenset | set):
        yield (path or "value", _set_text([_short(v, 1) for v in _sorted_items(value)], len(value)))
        return
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        if all(_atom(v) is not None for v in value):
            yield (path or "value", "[" + ", ".join(_atom(v) or "" for v in value) + "]")
            return
        for index, v in enumerate(value):
            yield from _rows(v, f"{path}[{index}]")
        return
    yield (path or "value", repr(value))


def diff_rows(before: list[Row], after: list[Row]) -> tuple[list[Row], list[str]]:
    """What a step changed: the rows of ``after`` that are new or different, and the paths of
    ``before`` that are gone."""
    old = dict(before)
    new = dict(after)
    changed = [(path, text) for path, text in after if old.get(path) != text]
    removed = [path for path, _ in before if path not in new]
    return changed, removed
