"""Persistent values the machines are written over: a fast ``replace`` and an append-only log.

Nothing here is a rule.  These are the two data structures that keep a step's cost independent
of how long the machine has run:

* :func:`evolve` is ``dataclasses.replace`` for the machines' frozen slotted values, without
  going through ``__init__``: a step changes one or two fields of a state of seven to fifteen,
  and ``replace`` (which looks the fields up, builds a dict and calls ``__init__`` with every
  field) was most of the time of a step.  The values a step computes were checked where they
  entered (a command's fields, a ``Position``'s range), so nothing is skipped that matters.
  :func:`evolver` hands out the function ``evolve`` calls, for a hot path to call with the new
  values positionally; :func:`unchecked` builds a value from all its fields the same way.
* :class:`Log` is an immutable sequence with O(1) amortised append and prefix removal, O(1)
  indexing, O(log n) search, and a hash maintained as items come and go (hashing a state that
  holds a long log costs the same as hashing one that holds a short one).  The transaction
  buffer's view of its topic is one: a topic gains an entry on every write and loses its oldest
  ledger to retention, and a tuple copied on every append made a long-running topic slow down
  with its length.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, Generic, TypeVar, overload

import immutables

__all__ = ["HashOnce", "Log", "evolve", "evolver", "slot_init", "unchecked"]

T = TypeVar("T")
V = TypeVar("V")

# --------------------------------------------------------------------------------------------
# evolve
# --------------------------------------------------------------------------------------------

_EVOLVERS: dict[tuple[Any, ...], Callable[..., Any]] = {}


def evolve(obj: V, **changes: Any) -> V:
    """A copy of the frozen dataclass ``obj`` with ``changes`` applied, as ``dataclasses.replace``
    builds it but without running ``__init__`` (and so ``__post_init__``); an unknown field name
    is a ``TypeError`` as there."""
    key = (type(obj), *changes)
    make = _EVOLVERS.get(key)
    if make is None:
        make = _EVOLVERS[key] = _evolver(type(obj), tuple(changes))
    result: V = make(obj, *changes.values())
    return result


def evolver(cls: type[V], *changed: str) -> Callable[..., V]:
    """The function :func:`evolve` calls for ``cls`` and the fields ``changed``, to call directly:
    ``evolver(cls, "a", "b")(obj, a, b)`` is ``evolve(obj, a=a, b=b)`` without building the
    keyword arguments and looking the function up on every call (half the time of an update of a
    large state).  For a step's hot path, where the fields it changes are known."""
    key = (cls, *changed)
    make = _EVOLVERS.get(key)
    if make is None:
        make = _EVOLVERS[key] = _evolver(cls, changed)
    return make


def unchecked(cls: type[V]) -> Callable[..., V]:
    """A constructor of ``cls`` taking every field positionally that skips ``__init__`` and so
    ``__post_init__``: for a step that rebuilds a value from fields the value they came from was
    checked for (an ack of an entry the state holds), where the checks would only be repeated."""
    make = evolver(cls, *(f.name for f in dataclasses.fields(cls)))  # type: ignore[arg-type]
    return functools.partial(make, None)  # every field is given, so the value to copy is none


def _evolver(cls: type, changed: tuple[str, ...]) -> Callable[..., Any]:
    """One function per class and set of changed fields (what ``dataclasses`` itself does for
    ``__init__``, generated once): it takes the new values positionally and copies every other
    field from ``obj``.

    The copy is filled as an instance of a *twin* of ``cls``: a class with the same bases and the
    same slots in the same order, so the same memory layout, but without the frozen dataclass's
    ``__setattr__``, so each field is a plain attribute store (which the interpreter specialises
    to a slot write), instead of a call of the slot descriptor's ``__set__`` per field; the copy
    then becomes a ``cls`` (``__class__`` assignment, which CPython allows between classes of the
    same layout).  A class the twin cannot stand in for (a base with a ``__setattr__`` of its own,
    a ``__dict__``) is filled through the slot descriptors, which a frozen dataclass's
    ``__setattr__`` does not guard."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"evolve needs a slotted dataclass, got {cls.__name__}")
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = [n for n in changed if n not in names]
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    params = "".join(f", {n}" for n in changed)
    twin = _twin(cls, names)
    if twin is not None:
        scope: dict[str, Any] = {"_TWIN": twin, "_CLS": cls}
        body = "".join(f"    new.{n} = {n if n in changed else 'obj.' + n}\n" for n in names)
        source = (
            f"def evolve_{cls.__name__}(obj{params}, *, _new=object.__new__, _twin=_TWIN, _cls=_CLS):\n"
            f"    new = _new(_twin)\n{body}    new.__class__ = _cls\n    return new\n"
        )
    else:
        scope = {"_CLS": cls, **{f"_SET_{n}": _slot(cls, n).__set__ for n in names}}
        # the class and the setters are bound as defaults: local names, the cheapest to reach
        bound = ", ".join(f"_set_{n}=_SET_{n}" for n in names)
        body = "".join(f"    _set_{n}(new, {n if n in changed else 'obj.' + n})\n" for n in names)
        source = (
            f"def evolve_{cls.__name__}(obj{params}, *, _new=object.__new__, _cls=_CLS, {bound}):\n"
            f"    new = _new(_cls)\n{body}    return new\n"
        )
    exec(source, scope)
    made: Callable[..., Any] = scope[f"evolve_{cls.__name__}"]
    return made


def _slot(cls: type, name: str) -> Any:
    """The slot descriptor of field ``name``: the class's own, or a base's for an inherited field."""
    return next(c.__dict__[name] for c in cls.__mro__ if name in c.__dict__)


_TWINS: dict[type, type | None] = {}


def _twin(cls: type, names: list[str]) -> type | None:
    """The mutable twin of the frozen slotted dataclass ``cls`` (see :func:`_evolver`), or None
    when there cannot be one: every field must be one of ``cls``'s own slots, no base but
    ``object`` may define ``__setattr__``, and ``__class__`` assignment must be allowed."""
    if cls in _TWINS:
        return _TWINS[cls]
    twin: type | None = None
    slots = cls.__dict__["__slots__"]
    slots = (slots,) if isinstance(slots, str) else tuple(slots)
    plain = all("__setattr__" not in base.__dict__ for base in cls.__mro__[1:-1])
    if plain and list(slots) == names and "__dict__" not in slots and "__weakref__" not in slots:
        candidate = type(f"_Mutable{cls.__name__}", cls.__bases__, {"__slots__": slots, "__module__": cls.__module__})
        try:
            probe: Any = object.__new__(candidate)
            probe.__class__ = cls
            twin = candidate
        except TypeError:
            twin = None
    _TWINS[cls] = twin
    return twin


_FACTORY: Final = object()  # the default of a parameter whose field has a default_factory


def slot_init(cls: type[V]) -> type[V]:
    """Give a frozen slotted dataclass an ``__init__`` that sets its fields through the slot
    descriptors (as :func:`evolve` does) instead of ``object.__setattr__`` field by field: the
    same parameters and defaults as the dataclass's own, then ``__post_init__`` if it has one.
    For the records a step makes every time (a log record, an effect), where the generated
    ``__init__`` of ten fields costs more than the rule that fills them."""
    if not dataclasses.is_dataclass(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"slot_init needs a slotted dataclass, got {cls.__name__}")
    scope: dict[str, Any] = {"_FACTORY": _FACTORY}
    params: list[str] = []
    body: list[str] = []
    for f in dataclasses.fields(cls):
        if not f.init or f.kw_only:
            raise TypeError(f"slot_init: {cls.__name__}.{f.name} is not a plain positional field")
        scope[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            scope[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            scope[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            body.append(f"    if {f.name} is _FACTORY:\n        {f.name} = _factory_{f.name}()\n")
        else:
            params.append(f.name)
        body.append(f"    _set_{f.name}(self, {f.name})\n")
    if hasattr(cls, "__post_init__"):
        body.append("    self.__post_init__()\n")
    source = f"def __init__(self, {', '.join(params)}):\n{''.join(body) or '    pass'}\n"
    exec(source, scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


# --------------------------------------------------------------------------------------------
# HashOnce
# --------------------------------------------------------------------------------------------


class HashOnce:
    """A base for frozen slotted dataclasses whose hash is computed once per value and kept.

    The linearizability checker memoises on states and the model checker interns them, so a
    state is hashed again and again, and the records it shares with the state before it (a
    snapshot store, a bucket, a transaction's metadata) are hashed with every new state.  A
    dataclass's generated ``__hash__`` recomputes the hash of every field each time; a class that
    derives from ``HashOnce`` and says ``__hash__ = HashOnce.__hash__`` in its body (which
    ``dataclass`` then keeps) hashes the same fields, once.  The kept hash is in a slot of its own,
    outside the fields: ``evolve``, ``replace``, pickling and copying never carry it over.
    """

    __slots__ = ("_hash",)

    def __hash__(self) -> int:
        try:
            known: int = self._hash  # type: ignore[attr-defined]
            return known
        except AttributeError:
            names = _HASHED.get(type(self))
            if names is None:
                fields = dataclasses.fields(self)  # type: ignore[arg-type]
                names = _HASHED[type(self)] = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
            value = hash(tuple(getattr(self, name) for name in names))
            object.__setattr__(self, "_hash", value)
            return value


_HASHED: dict[type, tuple[str, ...]] = {}  # per class, the fields a dataclass's own hash covers


# --------------------------------------------------------------------------------------------
# Log
# --------------------------------------------------------------------------------------------

CHUNK: Final = 32
_MASK: Final = (1 << 64) - 1
_EMPTY_CHUNKS: Final[immutables.Map[int, tuple[Any, ...]]] = immutables.Map()


class Log(Sequence[T], Generic[T]):
    """An immutable sequence that grows at the end and shrinks at the front, persistently.

    Items live in chunks of :data:`CHUNK`: the full ones in an ``immutables.Map`` by chunk number
    (a hash trie, so a new version shares all but a few nodes with the old), the last one as a
    short tuple.  Item ``i`` of the log is item ``start + i`` counted from the first ever
    appended, in chunk ``(start + i) // CHUNK``.  Appending copies the last chunk (at most
    ``CHUNK`` references); dropping ``n`` items from the front forgets the chunks they emptied.

    Equality is a sequence's: the same items in the same order, whatever the chunking.  The hash
    agrees with it and costs O(1): it is kept as the sum of the items' hashes (an item's place is
    part of the item wherever a log is used, so the sum tells two logs apart as well as the items'
    hashes do).
    """

    __slots__ = ("_chunks", "_start", "_stop", "_sum", "_tail")

    _chunks: immutables.Map[int, tuple[T, ...]]
    _tail: tuple[T, ...]
    _start: int
    _stop: int
    _sum: int

    def __init__(self, items: Iterable[T] = ()) -> None:
        built = _build(items)
        self._chunks, self._tail, self._start, self._stop, self._sum = (
            built._chunks,
            built._tail,
            0,
            built._stop,
            built._sum,
        )

    @classmethod
    def _of(
        cls, chunks: immutables.Map[int, tuple[T, ...]], tail: tuple[T, ...], start: int, stop: int, total: int
    ) -> Log[T]:
        log: Log[T] = object.__new__(cls)
        log._chunks, log._tail, log._start, log._stop, log._sum = chunks, tail, start, stop, total
        return log

    # -- growing and shrinking -------------------------------------------------------------------

    def append(self, item: T) -> Log[T]:
        """A log with ``item`` after the last one."""
        tail = (*self._tail, item)
        chunks = self._chunks
        stop = self._stop + 1
        if len(tail) == CHUNK:
            chunks = chunks.set(self._stop // CHUNK, tail)
            tail = ()
        return Log._of(chunks, tail, self._start, stop, (self._sum + hash(item)) & _MASK)

    def drop_first(self, n: int) -> Log[T]:
        """A log without its first ``n`` items."""
        if not 0 <= n <= len(self):
            raise IndexError(f"cannot drop {n} items from a log of {len(self)}")
        if n == 0:
            return self
        total = self._sum
        for item in itertools.islice(iter(self), n):
            total -= hash(item)
        start = self._start + n
        chunks = self._chunks
        with chunks.mutate() as doomed:
            for k in range(self._start // CHUNK, min(start // CHUNK, self._stop // CHUNK)):
                del doomed[k]
            chunks = doomed.finish()
        return Log._of(chunks, self._tail, start, self._stop, total & _MASK)

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        n = self._stop - self._start
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"log index {index} out of range for {n} items")
        at = self._start + index
        chunk_no = at // CHUNK
        if chunk_no == self._stop // CHUNK:
            return self._tail[at % CHUNK]
        return self._chunks[chunk_no][at % CHUNK]

    def __iter__(self) -> Iterator[T]:
        return self.iter_from(0)

    def iter_from(self, index: int) -> Iterator[T]:
        """The items from ``index`` on, in order (without copying the log)."""
        at = self._start + max(0, index)
        last_chunk = self._stop // CHUNK
        chunks = self._chunks
        while at < self._stop:
            chunk_no = at // CHUNK
            chunk = self._tail if chunk_no == last_chunk else chunks[chunk_no]
            yield from chunk[at % CHUNK :]
            at = (chunk_no + 1) * CHUNK

    def __reversed__(self) -> Iterator[T]:
        for i in range(len(self) - 1, -1, -1):
            yield self[i]

    def bisect_left(self, value: Any, key: Callable[[T], Any]) -> int:
        """The first index whose item's ``key`` is not below ``value`` (the log is sorted by ``key``)."""
        return bisect.bisect_left(self, value, key=key)

    def bisect_right(self, value: Any, key: Callable[[T], Any]) -> int:
        """The first index whose item's ``key`` is above ``value`` (the log is sorted by ``key``)."""
        return bisect.bisect_right(self, value, key=key)

    # -- value semantics -----------------------------------------------------------------------

    def __hash__(self) -> int:
        return hash((len(self), self._sum))

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Log):
            if len(self) != len(other) or self._sum != other._sum:
                return False
            if self._start % CHUNK == other._start % CHUNK:
                return self._same_chunks(other)
            return all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def _same_chunks(self, other: Log[Any]) -> bool:
        """Two logs of the same length and alignment: compare chunk by chunk, where chunks two
        versions share are the same tuple and compare at once."""
        offset = self._start % CHUNK
        for a, b in zip(self._chunk_views(), other._chunk_views(), strict=True):
            if a is not b and a[offset:] != b[offset:]:
                return False
            offset = 0
        return True

    def _chunk_views(self) -> Iterator[tuple[T, ...]]:
        last_chunk = self._stop // CHUNK
        for chunk_no in range(self._start // CHUNK, last_chunk + 1):
            yield self._tail if chunk_no == last_chunk else self._chunks[chunk_no]

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __repr__(self) -> str:
        shown = ", ".join(repr(item) for item in itertools.islice(self, 8))
        more = f", … {len(self) - 8} more" if len(self) > 8 else ""
        return f"Log([{shown}{more}])"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Log, (tuple(self),))


def _build(items: Iterable[T]) -> Log[T]:
    values = tuple(items)
    full = len(values) - len(values) % CHUNK
    chunks = immutables.Map({k // CHUNK: values[k : k + CHUNK] for k in range(0, full, CHUNK)})
    total = sum(hash(item) for item in values) & _MASK
    return Log._of(chunks, values[full:], 0, len(values), total)
