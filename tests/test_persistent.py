"""reference.persistent: the log against a plain tuple, evolve against dataclasses.replace.

The log is the transaction buffer's view of its topic, so it must be indistinguishable from the
tuple it replaced in everything a reader does (length, indexing, iteration, search, equality and
a hash that agrees with it), whatever sequence of appends and front removals built it.
"""

from __future__ import annotations

import dataclasses
import pickle
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference.persistent import CHUNK, HashOnce, Log, _twin, evolve, slot_init

# An operation: ("append", value) or ("drop", how many of the current items, as a fraction).
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(-5, 200)),
        st.tuples(st.just("drop"), st.floats(0, 1)),
    ),
    max_size=3 * CHUNK + 10,
)


def build(operations: list[tuple[str, float]]) -> tuple[Log[int], list[int]]:
    log: Log[int] = Log()
    model: list[int] = []
    for op, arg in operations:
        if op == "append":
            log = log.append(int(arg))
            model.append(int(arg))
        else:
            n = int(arg * len(model))
            log = log.drop_first(n)
            del model[:n]
    return log, model


@given(ops)
def test_log_reads_as_its_tuple(operations: list[tuple[str, float]]) -> None:
    log, model = build(operations)
    assert len(log) == len(model)
    assert list(log) == model
    assert [log[i] for i in range(len(model))] == model
    assert [log[-i] for i in range(1, len(model) + 1)] == [model[-i] for i in range(1, len(model) + 1)]
    assert log[1:4] == tuple(model[1:4])
    assert list(reversed(log)) == model[::-1]
    for start in range(len(model) + 1):
        assert list(log.iter_from(start)) == model[start:]
    with pytest.raises(IndexError):
        log[len(model)]
    assert pickle.loads(pickle.dumps(log)) == log


@given(ops, ops)
def test_log_equality_and_hash_are_the_sequences(
    a_ops: list[tuple[str, float]], b_ops: list[tuple[str, float]]
) -> None:
    a, a_model = build(a_ops)
    b, b_model = build(b_ops)
    assert (a == b) == (a_model == b_model)
    assert (a != b) == (a_model != b_model)
    rebuilt = Log(a_model)  # the same items, chunked from the start
    assert rebuilt == a and hash(rebuilt) == hash(a)
    if a == b:
        assert hash(a) == hash(b)


@given(st.lists(st.integers(0, 50), max_size=3 * CHUNK), st.integers(0, 2 * CHUNK), st.integers(-1, 51))
def test_log_search(values: list[int], dropped: int, probe: int) -> None:
    import bisect

    model = sorted(values)
    log = Log(model).drop_first(min(dropped, len(model)))
    model = model[min(dropped, len(model)) :]
    assert log.bisect_left(probe, key=lambda v: v) == bisect.bisect_left(model, probe)
    assert log.bisect_right(probe, key=lambda v: v) == bisect.bisect_right(model, probe)


def test_dropping_forgets_emptied_chunks() -> None:
    log = Log(range(10 * CHUNK))
    assert len(log.drop_first(9 * CHUNK + 3)._chunks) == 1
    with pytest.raises(IndexError):
        log.drop_first(10 * CHUNK + 1)


@dataclass(frozen=True, slots=True)
class Sample:
    a: int
    b: tuple[int, ...] = ()
    c: str = "c"

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a < 0")


@given(st.integers(0, 9), st.integers(0, 9), st.sampled_from(["x", "y"]))
def test_evolve_is_replace_without_init(a: int, a2: int, c: str) -> None:
    value = Sample(a, (a,), c)
    assert evolve(value, a=a2) == dataclasses.replace(value, a=a2)
    assert evolve(value, b=(1, 2), c="z") == dataclasses.replace(value, b=(1, 2), c="z")
    assert evolve(value) == value and evolve(value) is not value
    with pytest.raises(dataclasses.FrozenInstanceError):
        evolve(value, a=1).a = 2  # type: ignore[misc]


def test_evolve_refuses_an_unknown_field() -> None:
    with pytest.raises(TypeError):
        evolve(Sample(1), d=1)


@dataclass(frozen=True, slots=True)
class Kept(HashOnce):
    __hash__ = HashOnce.__hash__

    a: int
    b: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Guarded(Sample):
    """A subclass of a frozen dataclass: its base has a ``__setattr__``, so no twin stands in."""

    d: int = 0


@given(st.integers(0, 9), st.integers(0, 9))
def test_evolve_makes_a_value_of_the_class_itself(a: int, a2: int) -> None:
    for value, changes in ((Kept(a, (a,)), {"a": a2}), (Guarded(a, d=a), {"d": a2, "a": a2})):
        hash(value)  # a kept hash is never carried over to the copy
        new = evolve(value, **changes)
        assert type(new) is type(value)
        assert new == dataclasses.replace(value, **changes)
        assert hash(new) == hash(dataclasses.replace(value, **changes))
        assert pickle.loads(pickle.dumps(new)) == new
        with pytest.raises(dataclasses.FrozenInstanceError):
            new.a = 2  # type: ignore[misc]
    assert _twin(Kept, ["a", "b"]) is not None
    assert _twin(Guarded, ["a", "b", "c", "d"]) is None


@slot_init
@dataclass(frozen=True, slots=True)
class Fast:
    a: int
    b: tuple[int, ...] = ()
    c: list[int] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a < 0")


@dataclass(frozen=True, slots=True)
class Plain:
    a: int
    b: tuple[int, ...] = ()
    c: list[int] = dataclasses.field(default_factory=list)


@given(st.integers(0, 9), st.lists(st.integers(0, 9), max_size=3))
def test_slot_init_builds_what_the_dataclass_init_builds(a: int, c: list[int]) -> None:
    for args, kwargs in (((a,), {}), ((a, (a,)), {}), ((a,), {"c": c}), ((), {"a": a, "b": (1,), "c": c})):
        fast, plain = Fast(*args, **kwargs), Plain(*args, **kwargs)  # type: ignore[arg-type]
        assert dataclasses.astuple(fast) == dataclasses.astuple(plain)
        assert fast == Fast(*args, **kwargs) and hash(fast.b) == hash(plain.b)  # type: ignore[arg-type]
        assert pickle.loads(pickle.dumps(fast)) == fast
    assert Fast(a).c is not Fast(a).c  # a fresh default per value, as default_factory makes it
    with pytest.raises(dataclasses.FrozenInstanceError):
        Fast(a).a = 2  # type: ignore[misc]


def test_slot_init_keeps_post_init_and_the_signature() -> None:
    with pytest.raises(ValueError, match="a < 0"):
        Fast(-1)
    with pytest.raises(TypeError):
        Fast()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Fast(1, (), [], 4)  # type: ignore[call-arg]


def test_slot_init_refuses_what_it_cannot_build() -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class KeywordOnly:
        a: int

    with pytest.raises(TypeError):
        slot_init(KeywordOnly)
