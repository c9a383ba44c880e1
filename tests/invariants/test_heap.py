"""The checks' model of a history holds no reference cycle (``invariants.heap``): verify builds it
with cyclic collection off, so a cycle would leave the whole model, millions of objects for a long
history, to a collection that walks all of it.  And an object id parsed once per history is still
refused at the row of its first operation."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invariants.applicability import applicability_of
from invariants.client_visible import check_client_visible
from invariants.transactional import TxnAnalysis, check_transactional
from invariants.verify import VerifyOptions, check_history
from spec.history import BadHistory, Operation
from tests.invariants.synthetic import generate, op

P = "persistent://public/default/t-partition-0"
PART = f"partition:{P}"
SUB = f"subscription:{P}#sub"


def _cyclic_garbage_of(check: Callable[[], object]) -> int:
    """How many objects only a cyclic collection frees once ``check()``'s result is dropped."""
    gc.collect()
    gc.disable()
    try:
        result = check()
        del result
        return gc.collect()
    finally:
        gc.enable()


@given(st.integers(0, 10_000))
def test_the_checks_leave_no_cycle_behind(seed: int) -> None:
    ops = generate(seed)

    def transactional() -> object:
        analysis = TxnAnalysis.build(ops)
        return applicability_of(analysis, check_transactional(ops, analysis=analysis))

    assert _cyclic_garbage_of(transactional) == 0
    assert _cyclic_garbage_of(lambda: check_client_visible(ops)) == 0
    assert _cyclic_garbage_of(lambda: check_history("synthetic", ops, "synthetic", VerifyOptions())) == 0


def test_the_oracle_reading_a_partition_leaves_no_cycle_behind() -> None:
    # an empty receive after a send: late-visibility reads when the message was readable
    ops = [
        op(0, 1, "subscribe", SUB, {"sub_type": "Shared"}, at=0),
        op(1, 2, "send", PART, {"message": "a"}, {"position": [1, 0]}, at=10),
        op(2, 1, "receive", SUB, {}, None, at=20_000),
    ]
    assert _cyclic_garbage_of(lambda: check_client_visible(ops)) == 0


def _with_bad_subscription(bad: str) -> list[Operation]:
    return [
        op(0, 1, "subscribe", SUB, {"sub_type": "Shared"}, at=0),
        op(1, 2, "send", PART, {"message": "a"}, {"position": [1, 0]}, at=10),
        op(2, 1, "receive", SUB, {}, {"message": "a", "position": [1, 0]}, at=20),
        op(3, 1, "ack", bad, {"position": [1, 0]}, at=30),
        op(4, 1, "ack", bad, {"position": [1, 0]}, at=40),
    ]


@pytest.mark.parametrize("bad", [PART, f"subscription:{P}", f"subscription:#{P}"])
def test_a_malformed_subscription_is_refused_at_its_first_row(bad: str) -> None:
    ops = _with_bad_subscription(bad)
    for check in (check_transactional, check_client_visible):
        with pytest.raises(BadHistory) as info:
            check(ops)
        assert info.value.row == 3 and info.value.column == "object"
