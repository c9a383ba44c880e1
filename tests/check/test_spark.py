"""``txnmodel check --master local[2]``: breadth-first levels on Spark, frontier and seen set
partitioned by fingerprint, the same counts and verdicts as the single process."""

from __future__ import annotations

import pytest

from proofs.check.explore import Options, explore
from proofs.check.model import Model
from proofs.check.models import build

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("name", "bounds", "liveness"),
    [
        ("delayed", {}, True),
        ("produce", {"clients": 2, "partitions": 2, "spread": 1, "readers": 0, "loss": 0, "duplicate": 0}, False),
    ],
)
def test_spark_local_2_matches_the_single_process(name: str, bounds: dict[str, int], liveness: bool) -> None:
    from txnmodel.check_spark import explore_spark

    spec = build(name, bounds)
    local = explore(Model(spec), Options(liveness=liveness))
    spark, _model = explore_spark(spec, Options(liveness=liveness), "local[2]", partitions=3)
    assert (spark.states, spark.transitions, spark.depth, spark.verdict) == (
        local.states,
        local.transitions,
        local.depth,
        local.verdict,
    )
    assert spark.reductions == local.reductions and spark.liveness_checked == liveness


def test_spark_stops_at_max_states_at_the_single_process_level() -> None:
    from txnmodel.check_spark import explore_spark

    spec = build("end-path", {})
    options = Options(liveness=False, symmetry=False, por=False, max_states=1000)
    local = explore(Model(spec), options)
    spark, _model = explore_spark(spec, options, "local[2]", partitions=2)
    assert local.verdict == "incomplete" and local.states >= 1000
    assert (spark.states, spark.transitions, spark.depth, spark.verdict) == (
        local.states,
        local.transitions,
        local.depth,
        local.verdict,
    )
