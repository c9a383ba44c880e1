"""One language-neutral JSON spelling for every domain value: vectors, histories and ``--json``.

Spellings (chosen so another broker's test harness can produce them without our classes):

================  ==============================================  ==========================
value             JSON                                            example
================  ==============================================  ==========================
TxnID             ``[most_sig_bits, least_sig_bits]``             ``[0, 7]``
Position          ``[ledger_id, entry_id]``                        ``[3, 12]``
BatchedPosition   ``[ledger_id, entry_id, batch_size, batch_index]`` ``[3, 12, 10, 4]``
Subscription      ``[topic, subscription]``                       ``["t1", "sub"]``
enum              its name                                        ``"COMMITTING"``
dataclass         object of its fields, plus ``"@type"``          ``{"@type": "Ok", ...}``
tuple, frozenset  array (frozenset sorted, see below)             ``[9, 10, 60, 130]``
mapping           array of ``[key, value]`` pairs, sorted by key  ``[[[0, 1], "OPEN"]]``
bytes             ``{"@bytes": "<hex>"}``
================  ==============================================  ==========================

Sets and mappings have no order of their own; their arrays are sorted in one total order of JSON
values (:func:`json_order`), so another implementation can produce the same arrays without our
classes: ``null`` < ``false`` < ``true`` < numbers (numerically) < strings (by Unicode code point)
< arrays (element by element, a prefix first) < objects (by their sorted ``[key, value]`` pairs).
Numbers sort as numbers, never as their JSON text (``[9, 10, 60, 130]``, not ``[10, 130, 60, 9]``);
a TxnID ``[0, 9]`` sorts before ``[0, 10]``.

Decoding is driven by the target's type hints, so ``[0, 7]`` becomes a TxnID where a TxnID is
expected and a Position where a Position is expected.  Errors say which JSON path is wrong.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Union, cast, get_args, get_origin, get_type_hints

import immutables
from pyroaring import BitMap, FrozenBitMap

from spec.types import BatchedPosition, Position, Subscription, TxnID

__all__ = ["JsonError", "from_json", "json_order", "to_json"]

# A JSON value as json.loads returns it (and json.dumps takes it).
JSON = None | bool | int | float | str | list["JSON"] | dict[str, "JSON"]


class JsonError(ValueError):
    """A JSON value that does not fit the expected type; ``path`` is a JSON-path-like location."""

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(f"{path}: {message}")


# Resolving a dataclass's annotations evaluates their strings every time; histories decode the same
# few command types hundreds of thousands of times, so the answer is kept per type.
_type_hints = functools.cache(get_type_hints)


def to_json(value: object) -> JSON:
    """Encode any domain value (see the module table)."""
    kind = type(value)
    encode = _ENCODERS.get(kind)
    if encode is None:
        encode = _ENCODERS[kind] = _encoder(kind)
    return encode(value)


# The spelling of a value depends on its type alone: the branch is chosen once per type.
_ENCODERS: dict[type, Callable[[Any], JSON]] = {}


def _encoder(kind: type) -> Callable[[Any], JSON]:
    """How to spell a value of type ``kind``, in the module table's order of precedence."""
    if issubclass(kind, enum.Enum):  # before int: IntEnum values are ints too
        return lambda value: value.name
    if kind is type(None) or issubclass(kind, bool | int | float | str):
        return lambda value: value
    if issubclass(kind, TxnID):
        return lambda value: [value.most_sig_bits, value.least_sig_bits]
    if issubclass(kind, BatchedPosition):
        return lambda value: [value.ledger_id, value.entry_id, value.batch_size, value.batch_index]
    if issubclass(kind, Position):
        return lambda value: [value.ledger_id, value.entry_id]
    if issubclass(kind, Subscription):
        return lambda value: [value.topic, value.subscription]
    if issubclass(kind, bytes):
        return lambda value: {"@bytes": value.hex()}
    if issubclass(kind, BitMap | FrozenBitMap):
        return list
    if dataclasses.is_dataclass(kind) and not issubclass(kind, type):
        name = kind.__name__
        # a field outside equality (a cache, an index) is not part of the value
        names = tuple(f.name for f in dataclasses.fields(kind) if f.compare)

        def encode_dataclass(value: Any) -> JSON:
            out: dict[str, JSON] = {"@type": name}
            for field_name in names:
                out[field_name] = to_json(getattr(value, field_name))
            return out

        return encode_dataclass
    if issubclass(kind, Mapping | immutables.Map):
        return lambda value: sorted(([to_json(k), to_json(v)] for k, v in value.items()), key=json_order)
    if issubclass(kind, frozenset | set):
        return lambda value: sorted((to_json(v) for v in value), key=json_order)
    if issubclass(kind, tuple | list | Sequence) and not issubclass(kind, str | bytes):
        # any other sequence (a machine's persistent log) is spelled as the tuple it stands for
        return lambda value: [to_json(v) for v in value]

    def unknown(value: Any) -> JSON:
        raise TypeError(f"no JSON spelling for {type(value).__name__}")

    return unknown


_OrderKey = tuple[Any, ...]


def json_order(item: JSON) -> _OrderKey:
    """The sort key of a JSON value in the total order sets and mappings are spelled in (module
    docstring): kind first (null, false, true, number, string, array, object), then the value."""
    if item is None:
        return (0,)
    if isinstance(item, bool):  # before int: JSON booleans are not numbers
        return (1, item)
    if isinstance(item, int | float):
        return (2, item)
    if isinstance(item, str):
        return (3, item)
    if isinstance(item, list | tuple):
        return (4, tuple(json_order(v) for v in item))
    if isinstance(item, dict):
        return (5, tuple((key, json_order(item[key])) for key in sorted(item)))
    raise TypeError(f"not a JSON value: {type(item).__name__}")


# Pulsar stores every integer the machines take in a 64-bit field: signed (Java's long) or, for a
# few protobuf fields, unsigned.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def _short(value: int) -> str:
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"


def from_json(data: JSON, target: Any, path: str = "$") -> Any:
    """Decode ``data`` as ``target`` (a class or a typing form such as ``tuple[TxnID, ...]``)."""
    try:
        known = _DECODERS.get(target)
    except TypeError:  # a typing form that cannot be hashed is decoded without the cache
        return _decoder(target)(data, path)
    # Typing forms compare equal whatever the order of a union's options (``int | float == float |
    # int``), and the first option that fits wins: a cached decoder serves the very form it was built
    # for, or one spelled the same.
    if known is None or (known[0] is not target and known[1] != repr(target)):
        known = _DECODERS[target] = (target, repr(target), _decoder(target))
    return known[2](data, path)


# How to decode depends on the target alone: a checker decodes the same few command types hundreds
# of thousands of times, so the branch is chosen (and the hints resolved) once per target.
_Decoder = Callable[[JSON, str], Any]
_DECODERS: dict[Any, tuple[Any, str, _Decoder]] = {}


def _decoder(target: Any) -> _Decoder:
    """How to decode a value as ``target``, in the module table's order of precedence."""
    origin = get_origin(target)
    if target is Any:
        return lambda data, path: data
    if origin in (Union, types.UnionType):
        return _union_decoder(target)
    if origin is typing.Literal:
        allowed = get_args(target)

        def decode_literal(data: JSON, path: str) -> Any:
            if data in allowed:
                return data
            raise JsonError(path, f"expected one of {allowed}, got {data!r}")

        return decode_literal
    if target is type(None):
        return _decode_null
    if target is bool:
        return _decode_bool
    if target is int:
        return _decode_int
    if target is float:
        return _decode_float
    if target is str:
        return _decode_str
    if target is bytes:
        return _decode_bytes
    if target in (TxnID, Position, BatchedPosition):
        return _word_decoder(target)
    if target is Subscription:
        return lambda data, path: _decode_word(data, target, path)
    if isinstance(target, type) and issubclass(target, enum.Enum):
        members = target.__members__

        def decode_enum(data: JSON, path: str) -> Any:
            if isinstance(data, str) and data in members:
                return members[data]
            raise JsonError(path, f"expected one of {', '.join(members)}, got {data!r}")

        return decode_enum
    if origin in (tuple, frozenset, list) or target in (tuple, frozenset):
        return _sequence_decoder(target, origin)
    if origin in (Mapping, dict, immutables.Map) or origin is typing.Mapping:
        return _mapping_decoder(target, origin)
    if target in (FrozenBitMap, BitMap):
        return _decode_bitmap
    if dataclasses.is_dataclass(target) and isinstance(target, type):
        return _dataclass_decoder(target)

    def no_decoding(data: JSON, path: str) -> Any:
        raise JsonError(path, f"no JSON decoding for {target!r}")

    return no_decoding


def _union_decoder(target: Any) -> _Decoder:
    options = get_args(target)
    nullable = type(None) in options
    tried = tuple(option for option in options if option is not type(None))

    def decode_union(data: JSON, path: str) -> Any:
        if data is None and nullable:
            return None
        problems = []
        for option in tried:
            try:
                return from_json(data, option, path)
            except JsonError as exc:
                problems.append(str(exc))
        raise JsonError(path, f"does not fit {target}: " + "; ".join(problems))

    return decode_union


def _decode_null(data: JSON, path: str) -> None:
    if data is not None:
        raise JsonError(path, f"expected null, got {data!r}")


def _decode_bool(data: JSON, path: str) -> bool:
    if not isinstance(data, bool):
        raise JsonError(path, f"expected true/false, got {data!r}")
    return data


def _decode_int(data: JSON, path: str) -> int:
    if not isinstance(data, int) or isinstance(data, bool):
        raise JsonError(path, f"expected an integer, got {data!r}")
    if not _INT_MIN <= data <= _INT_MAX:
        raise JsonError(path, f"expected an integer Pulsar's 64-bit fields can hold, got {_short(data)}")
    return data


def _decode_float(data: JSON, path: str) -> float:
    if not isinstance(data, int | float) or isinstance(data, bool):
        raise JsonError(path, f"expected a number, got {data!r}")
    return float(data)


def _decode_str(data: JSON, path: str) -> str:
    if not isinstance(data, str):
        raise JsonError(path, f"expected a string, got {data!r}")
    return data


def _decode_bytes(data: JSON, path: str) -> bytes:
    if isinstance(data, dict) and set(data) == {"@bytes"} and isinstance(data["@bytes"], str):
        try:
            return bytes.fromhex(data["@bytes"])
        except ValueError as exc:
            raise JsonError(path, f"bad hex: {exc}") from None
    raise JsonError(path, f'expected {{"@bytes": "<hex>"}}, got {data!r}')


def _decode_bitmap(data: JSON, path: str) -> FrozenBitMap:
    if not isinstance(data, list) or not all(isinstance(x, int) and x >= 0 for x in data):
        raise JsonError(path, f"expected an array of non-negative integers, got {data!r}")
    return FrozenBitMap(cast("list[int]", data))


def _sequence_decoder(target: Any, origin: Any) -> _Decoder:
    args = get_args(target)
    if origin is tuple and args and args[-1] is not Ellipsis:

        def decode_fixed(data: JSON, path: str) -> Any:
            if not isinstance(data, list):
                raise JsonError(path, f"expected an array, got {data!r}")
            if len(args) != len(data):
                raise JsonError(path, f"expected {len(args)} items, got {len(data)}")
            return tuple(from_json(d, a, f"{path}[{i}]") for i, (d, a) in enumerate(zip(data, args, strict=True)))

        return decode_fixed
    item = args[0] if args else Any
    frozen = origin is frozenset or target is frozenset

    def decode_items(data: JSON, path: str) -> Any:
        if not isinstance(data, list):
            raise JsonError(path, f"expected an array, got {data!r}")
        items = [from_json(d, item, f"{path}[{i}]") for i, d in enumerate(data)]
        return frozenset(items) if frozen else tuple(items)

    return decode_items


def _mapping_decoder(target: Any, origin: Any) -> _Decoder:
    key_t, value_t = get_args(target) or (Any, Any)
    persistent = origin is immutables.Map

    def decode_mapping(data: JSON, path: str) -> Any:
        if not isinstance(data, list):
            raise JsonError(path, f"expected an array of [key, value] pairs, got {data!r}")
        pairs = {}
        for i, pair in enumerate(data):
            if not isinstance(pair, list) or len(pair) != 2:
                raise JsonError(f"{path}[{i}]", f"expected [key, value], got {pair!r}")
            pairs[from_json(pair[0], key_t, f"{path}[{i}][0]")] = from_json(pair[1], value_t, f"{path}[{i}][1]")
        return immutables.Map(pairs) if persistent else pairs

    return decode_mapping


_WORD_WIDTHS: dict[type, int] = {TxnID: 2, Position: 2, BatchedPosition: 4, Subscription: 2}


def _decode_word(data: JSON, target: type, path: str) -> Any:
    if target is TxnID and isinstance(data, str):
        try:
            return TxnID.parse(data)
        except ValueError as exc:
            raise JsonError(path, str(exc)) from None
    width = _WORD_WIDTHS[target]
    if not isinstance(data, list) or len(data) != width:
        raise JsonError(path, f"expected a {target.__name__} as an array of {width}, got {data!r}")
    kind = str if target is Subscription else int
    for i, part in enumerate(data):
        if not isinstance(part, kind) or isinstance(part, bool):
            raise JsonError(f"{path}[{i}]", f"expected {kind.__name__}, got {part!r}")
    try:
        return target(*data)
    except (TypeError, ValueError) as exc:
        raise JsonError(path, str(exc)) from None


def _word_decoder(target: type) -> _Decoder:
    """A TxnID, Position or BatchedPosition spelled as it nearly always is (an array of plain ints)
    is built at once; anything else takes :func:`_decode_word`'s checks and errors."""
    width = _WORD_WIDTHS[target]

    def decode_word(data: JSON, path: str) -> Any:
        if type(data) is list and len(data) == width and all(type(part) is int for part in data):
            try:
                return target(*data)
            except (TypeError, ValueError) as exc:
                raise JsonError(path, str(exc)) from None
        return _decode_word(data, target, path)

    return decode_word


def _dataclass_decoder(target: type) -> _Decoder:
    """A dataclass's decoder; its fields and hints are looked up on first use, so a dataclass whose
    fields name types defined after it (or itself) can be decoded."""
    layout: list[tuple[dict[str, dataclasses.Field[Any]], dict[str, Any], frozenset[str]]] = []

    def decode_dataclass(data: JSON, path: str) -> Any:
        if not layout:
            fields = {f.name: f for f in dataclasses.fields(target) if f.init}
            layout.append((fields, _type_hints(target), frozenset(fields) | {"@type"}))
        fields, hints, known = layout[0]
        if not isinstance(data, dict):
            raise JsonError(path, f"expected an object for {target.__name__}, got {data!r}")
        if not known.issuperset(data):
            unknown = set(data) - known
            raise JsonError(
                path,
                f"{target.__name__} has no field(s) {', '.join(sorted(unknown))}; "
                f"fields are {', '.join(fields) or '(none)'}",
            )
        kwargs = {}
        for name, f in fields.items():
            if name in data:
                kwargs[name] = from_json(data[name], hints[name], f"{path}.{name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise JsonError(path, f"{target.__name__} needs field {name!r}")
        try:
            return target(**kwargs)
        except (TypeError, ValueError) as exc:
            raise JsonError(path, f"{target.__name__}: {exc}") from None

    return decode_dataclass
