"""Topic names as the server resolves them (spec/topics.py)."""

from __future__ import annotations

import pytest

from spec.topics import InvalidTopicName, parse_topic


@pytest.mark.parametrize(
    "spelled",
    ["orders", "public/default/orders", "persistent://public/default/orders"],
)
def test_three_spellings_of_one_topic(spelled: str) -> None:
    name = parse_topic(spelled)
    assert name.full == "persistent://public/default/orders"
    assert name.partition is None and name.base == name.full


def test_partitions() -> None:
    name = parse_topic("t/ns/orders-partition-12")
    assert name.partition == 12
    assert name.base == "persistent://t/ns/orders"
    assert name.partition_name(3) == "persistent://t/ns/orders-partition-3"
    assert parse_topic("orders-partition-01").partition is None  # not Pulsar's spelling of a partition


@pytest.mark.parametrize(
    ("spelled", "not_allowed"),
    [
        ("", False),
        ("a/b", False),
        ("a/b/c/d", False),
        ("http://a/b/c", False),
        ("non-persistent://public/default/x", True),
        ("public/default/bad\x00name", False),
    ],
)
def test_refused_names(spelled: str, not_allowed: bool) -> None:
    with pytest.raises(InvalidTopicName) as caught:
        parse_topic(spelled)
    assert caught.value.not_allowed is not_allowed
