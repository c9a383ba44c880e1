"""The JSON spellings shared by vectors, histories and --json output."""

from __future__ import annotations

import dataclasses
import json

import immutables
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyroaring import FrozenBitMap

from spec.jsonvalues import JsonError, from_json, to_json
from spec.types import BatchedPosition, Position, Subscription, TxnID, TxnStatus


@dataclasses.dataclass(frozen=True)
class Sample:
    txn: TxnID
    position: Position
    status: TxnStatus
    partitions: tuple[str, ...]
    subs: frozenset[Subscription]
    acked: immutables.Map[Position, int]
    bits: FrozenBitMap
    note: str | None = None
    payload: bytes = b""


samples = st.builds(
    Sample,
    txn=st.builds(TxnID, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)),
    position=st.builds(Position, st.integers(-1, 2**40), st.integers(-1, 2**40)),
    status=st.sampled_from(TxnStatus),
    partitions=st.lists(st.text(max_size=5), max_size=3).map(tuple),
    subs=st.frozensets(st.builds(Subscription, st.text(max_size=3), st.text(max_size=3)), max_size=3),
    acked=st.dictionaries(
        st.builds(Position, st.integers(0, 9), st.integers(0, 9)), st.integers(0, 99), max_size=3
    ).map(immutables.Map),
    bits=st.frozensets(st.integers(0, 2**32 - 1), max_size=5).map(FrozenBitMap),
    note=st.none() | st.text(max_size=4),
    payload=st.binary(max_size=8),
)


@given(samples)
def test_round_trip_through_json_text(sample: Sample) -> None:
    encoded = json.loads(json.dumps(to_json(sample)))
    assert from_json(encoded, Sample) == sample


def test_spellings_are_the_documented_ones() -> None:
    assert to_json(TxnID(1, 2)) == [1, 2]
    assert to_json(Position(3, 4)) == [3, 4]
    assert to_json(BatchedPosition(3, 4, 10, 2)) == [3, 4, 10, 2]
    assert to_json(Subscription("t", "s")) == ["t", "s"]
    assert to_json(TxnStatus.COMMITTING) == "COMMITTING"
    assert to_json(b"\x01\xff") == {"@bytes": "01ff"}
    assert to_json(frozenset({3, 1, 2})) == [1, 2, 3]


def test_txn_id_may_be_spelled_as_pulsar_prints_it() -> None:
    assert from_json("(3,7)", TxnID) == TxnID(3, 7)


@pytest.mark.parametrize(
    "data,target,path_fragment",
    [
        ([1], TxnID, "$"),
        (["a", 1], Position, "$[0]"),
        ("DONE", TxnStatus, "$"),
        ({"txn": [0, 1]}, Sample, "needs field"),
        ({"bogus": 1}, Sample, "no field"),
    ],
)
def test_errors_say_where(data: object, target: object, path_fragment: str) -> None:
    with pytest.raises(JsonError) as info:
        from_json(data, target)
    assert path_fragment in str(info.value)


def test_nested_error_path() -> None:
    bad = to_json(
        Sample(TxnID(0, 1), Position(1, 1), TxnStatus.OPEN, (), frozenset(), immutables.Map(), FrozenBitMap())
    )
    bad["acked"] = [[[1, "x"], 3]]
    with pytest.raises(JsonError) as info:
        from_json(bad, Sample)
    assert info.value.path == "$.acked[0][0][1]"


def test_a_union_tries_its_options_in_its_own_order() -> None:
    # int | float and float | int are equal (and hash alike) as typing forms, and so are forms that
    # nest them: the decoders kept per target must not let one stand for the other, since the first
    # option that fits wins.  Twice, so that the second round decodes with the kept decoders.
    for _ in range(2):
        assert type(from_json(3, int | float)) is int
        assert type(from_json(3, float | int)) is float
        assert type(from_json([3], tuple[float | int, ...])[0]) is float
        assert type(from_json([3], tuple[int | float, ...])[0]) is int


def test_a_recursive_dataclass_decodes() -> None:
    assert from_json({"value": 1, "rest": {"value": 2, "rest": None}}, Chain) == Chain(1, Chain(2, None))


@dataclasses.dataclass(frozen=True)
class Chain:
    value: int
    rest: Chain | None


def test_a_target_that_cannot_be_hashed_gets_the_decoders_answer() -> None:
    class Unhashable:
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(JsonError, match="no JSON decoding"):
        from_json(1, Unhashable())
