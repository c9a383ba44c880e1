"""The broker's shared delayed index (DD-30, an engine option): subscriptions of a partition share
one index, and each delivers every delayed message once it is due, as a tracker of its own would."""

from __future__ import annotations

from engine.simulation.client import Cluster, Consumer, ConsumerType
from engine.simulation.workloads import RunSpec, main_job_spec, run
from spec.config import Config

CONFIG = Config().with_overrides({"isDelayedDeliveryDeliverAtTimeStrict": True, "delayedDeliveryTickTimeMillis": 100})


def _drain(cluster: Cluster, consumer: Consumer) -> dict[str, int]:
    """payload -> simulated time it arrived, until nothing comes for a while."""
    got: dict[str, int] = {}
    while (message := consumer.receive(1_500)) is not None:
        got[message.payload.decode()] = cluster.sim.now
        consumer.acknowledge(message)
    return got


def test_two_subscriptions_sharing_the_index_each_get_every_message_when_due() -> None:
    cluster = Cluster.start(seed=5, topics={"t": 1}, config=CONFIG, shared_delayed_index=True)
    client = cluster.client()
    subs = [client.subscribe("t", name, consumer_type=ConsumerType.Shared) for name in ("a", "b")]
    producer = client.create_producer("t")
    due = {}
    for i in range(6):
        at = cluster.sim.now + 200 + 100 * i
        producer.send(f"m{i}", deliver_at=at)
        due[f"m{i}"] = at
    producer.send("now")
    due["now"] = 0
    for consumer in subs:
        got = _drain(cluster, consumer)
        assert set(got) == set(due)
        assert all(got[p] >= due[p] for p in got)  # never before its deliver-at (strict)
    part = cluster.broker.partitions[subs[0].partition]
    assert part.delayed_index is not None and set(part.delayed_index.index._subscriptions) == {"a", "b"}
    # no tracker of their own: the shared index took their delayed messages
    assert all(cluster.broker.subscription(subs[0].partition, name).delayed is None for name in ("a", "b"))


def test_a_subscription_that_joins_after_a_message_fell_due_still_gets_it() -> None:
    cluster = Cluster.start(seed=6, topics={"t": 1}, config=CONFIG, shared_delayed_index=True)
    client = cluster.client()
    first = client.subscribe("t", "a", consumer_type=ConsumerType.Shared)
    client.create_producer("t").send("later", deliver_at=cluster.sim.now + 300)
    assert set(_drain(cluster, first)) == {"later"}  # fell due, fanned out to "a" only
    late = client.subscribe("t", "b", consumer_type=ConsumerType.Shared)
    assert set(_drain(cluster, late)) == {"later"}
    late.unsubscribe()
    part = cluster.broker.partitions[first.partition]
    assert part.delayed_index is not None and "b" not in part.delayed_index.index._subscriptions


def test_the_main_job_turns_it_on_for_some_in_memory_delayed_runs_with_a_second_subscription() -> None:
    on = [s for s in range(1, 41) if main_job_spec("delayed", s).shared_delayed]
    assert on == [1, 5, 9, 13, 17, 21, 25, 29, 33, 37]
    assert all(main_job_spec("delayed", s).delayed_tracker == "memory" for s in on)
    assert not any(main_job_spec(w, s).shared_delayed for w in ("ctp", "multi") for s in range(1, 41))
    result = run(RunSpec(workload="delayed", seed=1, ops=10, shared_delayed=True))
    subscribed = {op.object.split("#")[1] for op in result.operations if op.f == "subscribe"}
    assert subscribed == {"read", "read-shared"}
    assert not [op for op in result.operations if op.object.startswith("tracker:")]
