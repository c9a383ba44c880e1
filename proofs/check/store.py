"""Interned machine states with stable content digests, and memoised machine steps.

The composed model checker never copies a machine's state: every state a machine's ``step``
returns is interned once under a 60-bit *digest* of its content, and the composed state holds
digests only.  Two properties make this the fast path:

* **Stable across processes.**  The digest is BLAKE2b over a canonical rendering of the value
  (maps and sets sorted, enums by name), never Python's ``hash``, which is randomised per
  process for strings.  A composed state is a tuple of ints, and Python hashes a tuple of ints
  the same way in every process, so a Spark executor and the driver agree on every fingerprint.
* **One step per distinct component transition.**  Machines are pure, so ``step`` is memoised on
  ``(machine, digest, command)``: the composed system steps the same buffer state with the same
  command in thousands of composed states, and computes it once.  The per-machine invariants are
  memoised on the digest and the step properties on the transition, for the same reason.

The caches belong to one :class:`Store` (one exploration): a known-bug mutant patched into a
machine module is seen by a fresh store, never hidden by a cache of the unpatched machine.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import operator
from collections.abc import Callable, Iterable
from typing import Any, Final

import immutables
from pyroaring import BitMap, FrozenBitMap

from invariants.base import Invariant, StepProperty
from reference.persistent import Log
from spec.config import Config

__all__ = ["DigestCollision", "Store", "canonical", "digest_of"]

_MASK = (1 << 60) - 1  # below 2**61 - 1, so Python's int hash of a digest is the digest itself


class DigestCollision(Exception):
    """Two different values got the same 60-bit digest (about 1 in 10^9 at 10^6 values)."""


def canonical(value: Any) -> Any:
    """A rendering of ``value`` as nested tuples of primitives whose ``repr`` is the same in every
    process: maps and sets sorted by the repr of their canonical items, enums by class and name,
    dataclasses by class and fields.  The configuration is one token: a run has one."""
    kind = _KINDS.get(type(value))
    if kind is None:
        kind = _KINDS[type(value)] = _kind_of(value)
    if kind is _PRIMITIVE:
        return value
    if kind is _TUPLE:
        return tuple([canonical(v) for v in value])
    if kind is _DATACLASS:
        cls = type(value)
        return (cls.__name__, *[canonical(getattr(value, name)) for name in cls.__dataclass_fields__])
    if kind is _ENUM:
        return ("E", type(value).__name__, value.name)
    if kind is _CONFIG:
        return "CONFIG"
    if kind is _SET:
        return ("S", *sorted([canonical(v) for v in value], key=repr))
    if kind is _MAP:
        return ("M", *sorted([(canonical(k), canonical(v)) for k, v in value.items()], key=repr))
    if kind is _BITMAP:
        return ("B", *value)
    return ("P", type(value).__name__, value.SerializeToString(deterministic=True))


# How ``canonical`` renders a value of each type, decided once per type (the first matching rule).
_PRIMITIVE, _TUPLE, _DATACLASS, _ENUM, _CONFIG, _SET, _MAP, _BITMAP, _PROTOBUF = range(9)
_KINDS: dict[type, int] = {}


def _kind_of(value: Any) -> int:
    if value is None or isinstance(value, bool | int | str | bytes | float):
        return _PRIMITIVE
    if isinstance(value, enum.Enum):
        return _ENUM
    if isinstance(value, tuple | list | Log):
        return _TUPLE
    if isinstance(value, Config):
        return _CONFIG
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _DATACLASS
    if isinstance(value, frozenset | set):
        return _SET
    if isinstance(value, immutables.Map):
        return _MAP
    if isinstance(value, FrozenBitMap | BitMap):
        return _BITMAP
    if hasattr(value, "SerializeToString"):  # a protobuf message: its deterministic bytes
        return _PROTOBUF
    raise TypeError(f"no canonical form for {type(value).__name__}: {value!r}")


def digest_of(value: Any, texts: dict[int, tuple[Any, str]] | None = None) -> int:
    """The 60-bit content digest of ``value`` (stable across processes and runs): BLAKE2b of
    ``repr(canonical(value))``.  ``texts`` (a :class:`Store`'s) keeps the rendering of the
    immutable parts already rendered, by identity: a new state shares most of its parts (a
    buffer's log, a writer's entries, a coordinator's transactions) with the state it came from."""
    text = rendering(value, texts if texts is not None else {}).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") & _MASK


def rendering(value: Any, texts: dict[int, tuple[Any, str]]) -> str:
    """``repr(canonical(value))``, built from the renderings of the parts, with those of the
    immutable composite parts (dataclasses, maps, sets, frozen bitmaps, logs) kept in ``texts``
    under their ``id`` (with the part itself, so the id is not reused while the entry lives)."""
    kind = _KINDS.get(type(value))
    if kind is None:
        kind = _KINDS[type(value)] = _kind_of(value)
    if kind is _PRIMITIVE:
        return repr(value)
    cacheable = _KEPT.get(type(value))
    if cacheable is None:
        cacheable = _KEPT[type(value)] = _immutable_composite(value, kind)
    if cacheable:
        known = texts.get(id(value))
        if known is not None:
            return known[1]
    if kind is _TUPLE:
        text = _tuple_text([repr(v) if type(v) in _PRIMITIVES else rendering(v, texts) for v in value])
    elif kind is _DATACLASS:
        cls = type(value)
        fields_of = _FIELDS.get(cls)
        if fields_of is None:
            fields_of = _FIELDS[cls] = _fields_getter(cls)
        items = [repr(v) if type(v) in _PRIMITIVES else rendering(v, texts) for v in fields_of(value)]
        text = _tuple_text([repr(cls.__name__), *items])
    elif kind is _ENUM:
        text = repr(("E", type(value).__name__, value.name))
    elif kind is _CONFIG:
        text = "'CONFIG'"
    elif kind is _SET:
        text = _tuple_text(["'S'", *sorted([rendering(v, texts) for v in value])])
    elif kind is _MAP:
        items = [f"({rendering(k, texts)}, {rendering(v, texts)})" for k, v in value.items()]
        text = _tuple_text(["'M'", *sorted(items)])
    elif kind is _BITMAP:
        text = repr(("B", *value))
    else:
        text = repr(("P", type(value).__name__, value.SerializeToString(deterministic=True)))
    if cacheable:
        if len(texts) >= _TEXTS_KEPT:
            texts.clear()
        texts[id(value)] = (value, text)
    return text


def _tuple_text(items: list[str]) -> str:
    """The ``repr`` of a tuple whose items' ``repr`` are ``items``."""
    if len(items) == 1:
        return f"({items[0]},)"
    return f"({', '.join(items)})"


def _immutable_composite(value: Any, kind: int) -> bool:
    """Whether a rendering of a value of this type may be kept: an immutable composite (not plain
    tuples, which are mostly built afresh around kept parts, nor anything mutable)."""
    if kind is _DATACLASS:
        return bool(type(value).__dataclass_params__.frozen)
    return kind is _ENUM or isinstance(value, frozenset | immutables.Map | FrozenBitMap | Log)


# Per type, whether its renderings are kept; and how many are kept at most: a bounded cache, so a
# long run's memory is the seen set's, not this one's.
_KEPT: dict[type, bool] = {}
_PRIMITIVES: Final = frozenset({int, bool, str, bytes, float, type(None)})  # rendered by ``repr``
_TEXTS_KEPT: Final = 1 << 15
_FIELDS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _fields_getter(cls: type) -> Callable[[Any], tuple[Any, ...]]:
    """A function giving a dataclass value's fields, in ``__dataclass_fields__`` order, as a tuple."""
    names = tuple(cls.__dataclass_fields__)  # type: ignore[attr-defined]
    if not names:
        return lambda value: ()
    if len(names) == 1:
        name = names[0]
        return lambda value: (getattr(value, name),)
    return operator.attrgetter(*names)


class Store:
    """Interned values by digest, memoised steps and memoised invariant verdicts of one exploration."""

    def __init__(self) -> None:
        self.values: dict[int, Any] = {}
        self._digests: dict[Any, int] = {}
        self._steps: dict[tuple[str, int, Any], tuple[int, Any, tuple[str, ...]]] = {}
        self._violations: dict[tuple[str, int], tuple[str, ...]] = {}
        self._memo: dict[Any, Any] = {}
        self._interned: dict[int, int] = {}  # id of each value in ``values`` -> its digest
        self._texts: dict[int, tuple[Any, str]] = {}  # renderings of parts (:func:`rendering`)
        self.step_misses = 0
        self.step_hits = 0
        # Digests interned since the last ``take_new`` (a Spark task ships them to the driver).
        self.new_digests: list[int] = []

    def put(self, value: Any) -> int:
        """Intern ``value``; its digest."""
        # The interned object itself (a memoised step hands the same result and state out again)
        # is found by identity, without hashing it: the store holds it, so its id is not reused.
        found = self._interned.get(id(value))
        if found is not None:
            return found
        found = self._digests.get(value)
        if found is not None:
            return found
        d = digest_of(value, self._texts)
        known = self.values.get(d)
        if known is not None and known != value:
            raise DigestCollision(f"digest {d:#x} names two values: {known!r} and {value!r}")
        self.values[d] = value
        self._digests[value] = d
        self._interned[id(value)] = d
        self.new_digests.append(d)
        return d

    def adopt(self, d: int, value: Any) -> None:
        """Intern ``value`` under the digest another process computed for it."""
        if d not in self.values:
            self.values[d] = value
            self._digests[value] = d

    def take_new(self) -> list[tuple[int, Any]]:
        """The values interned since the last call, with their digests."""
        out = [(d, self.values[d]) for d in self.new_digests]
        self.new_digests = []
        return out

    def get(self, d: int) -> Any:
        return self.values[d]

    def step(
        self,
        tag: str,
        step: Callable[[Any, Any], tuple[Any, Any]],
        d: int,
        command: Any,
        properties: Iterable[StepProperty[Any]] = (),
        guard: Callable[[Callable[[], tuple[Any, Any]]], tuple[Any, Any]] | None = None,
        key: Any = None,
    ) -> tuple[int, Any, tuple[str, ...]]:
        """``step(state, command)`` on the interned state ``d``: the new state's digest, the result,
        and the names of the step properties the transition breaks (checked once per transition).
        ``guard`` wraps a step that is actually computed (the divergence guard).  ``key`` replaces
        the command in the memo key when the command's equality is coarser than its content
        (``BatchedPosition`` equals its plain position, whatever its batch index)."""
        key = (tag, d, command if key is None else key)
        hit = self._steps.get(key)
        if hit is not None:
            self.step_hits += 1
            return hit
        self.step_misses += 1
        before = self.values[d]
        after, result = guard(lambda: step(before, command)) if guard is not None else step(before, command)
        after_d = d if after is before else self.put(after)
        broken = tuple(p.name for p in properties if not p.holds(before, command, result, after))
        entry = (after_d, result, broken)
        self._steps[key] = entry
        return entry

    def violated(self, tag: str, invariants: Iterable[Invariant[Any]], d: int) -> tuple[str, ...]:
        """Names of the invariants the interned state ``d`` breaks (checked once per state)."""
        key = (tag, d)
        found = self._violations.get(key)
        if found is None:
            value = self.values[d]
            found = tuple(inv.name for inv in invariants if not inv.holds(value))
            self._violations[key] = found
        return found

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """A value computed once per ``key`` (cross-machine predicates over digests)."""
        try:
            return self._memo[key]
        except KeyError:
            found = self._memo[key] = compute()
            return found
