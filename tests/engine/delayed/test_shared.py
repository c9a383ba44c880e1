"""DD-30: subscriptions sharing one delayed index deliver exactly what separate trackers deliver."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given

from engine.delayed.shared import SharedDelayedIndex
from reference import delayed as dd
from spec.config import Config
from spec.result import Ok

SUBS = ("a", "b", "c")

operations = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.booleans(), st.integers(-5, 60)),
        st.tuples(st.just("get"), st.sampled_from(SUBS), st.sampled_from([1, 2, 5, 1000])),
        st.tuples(st.just("advance"), st.integers(0, 20), st.just(0)),
    ),
    max_size=60,
)


@given(
    ops=operations,
    tracker=st.sampled_from(["bucket", "in_memory"]),
    strict=st.booleans(),
    min_index=st.sampled_from([1, 3, 50000]),
)
def test_dd30_shared_index_delivers_what_separate_trackers_deliver(
    ops: list[tuple[str, object, object]], tracker: str, strict: bool, min_index: int
) -> None:
    config = Config().with_overrides(
        {
            "delayedDeliveryTickTimeMillis": 2,
            "isDelayedDeliveryDeliverAtTimeStrict": strict,
            "delayedDeliveryMinIndexCountPerBucket": min_index,
            "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds": 0,
            "delayedDeliveryMaxNumBuckets": 2,
        }
    )
    shared = SharedDelayedIndex(config, tracker=tracker)
    separate = {name: dd.initial(config, tracker=tracker) for name in SUBS}
    for name in SUBS:
        shared.subscribe(name)
    now, ledger, entry = 0, 1, 0
    for op, x, y in ops:
        if op == "advance":
            assert isinstance(x, int)
            now += x
        elif op == "publish":
            assert isinstance(y, int)
            if x:
                ledger, entry = ledger + 1, 0
            entry += 1
            indexed = shared.add_message(ledger, entry, now + y, now)
            for name in SUBS:
                separate[name], result = dd.step(separate[name], dd.AddMessage(ledger, entry, now + y, now))
                assert isinstance(result, Ok) and result.value == indexed
        else:
            assert isinstance(x, str) and isinstance(y, int)
            got = shared.get_scheduled_messages(x, y, now)
            separate[x], result = dd.step(separate[x], dd.GetScheduledMessages(y, now))
            assert isinstance(result, Ok)
            assert got == result.value
    for name in SUBS:
        assert shared.number_of_delayed_messages(name) == separate[name].count


def test_dd30_acknowledged_messages_are_filtered() -> None:
    shared = SharedDelayedIndex(Config().with_overrides({"delayedDeliveryTickTimeMillis": 1}))
    shared.subscribe("a")
    shared.subscribe("b")
    assert shared.add_message(1, 1, 100, 0)
    shared.acknowledge("b", 1, 1)
    assert [str(p) for p in shared.get_scheduled_messages("a", 10, 200)] == ["1:1"]
    assert shared.get_scheduled_messages("b", 10, 200) == ()
