"""``txnmodel check --master local[2]``: breadth-first levels on Spark, frontier and seen set
partitioned by fingerprint, the same counts and verdicts as the single process."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import SimpleNamespace

import pytest

from proofs.check.explore import Options, explore
from proofs.check.model import Model
from proofs.check.models import build

pytestmark = pytest.mark.slow


def _session() -> object:
    from runners.spark import spark_session

    return spark_session("local[2]", "txnmodel-check")


@pytest.mark.parametrize(
    ("name", "bounds", "liveness"),
    [
        ("delayed", {}, True),
        ("produce", {"clients": 2, "partitions": 2, "spread": 1, "readers": 0, "loss": 0, "duplicate": 0}, False),
    ],
)
def test_spark_local_2_matches_the_single_process(name: str, bounds: dict[str, int], liveness: bool) -> None:
    from proofs.check.spark import explore_spark

    spec = build(name, bounds)
    local = explore(Model(spec), Options(liveness=liveness))
    spark, _model = explore_spark(spec, Options(liveness=liveness), _session(), partitions=3)
    assert (spark.states, spark.transitions, spark.depth, spark.verdict) == (
        local.states,
        local.transitions,
        local.depth,
        local.verdict,
    )
    assert spark.reductions == local.reductions and spark.liveness_checked == liveness


def test_spark_stops_at_max_states_at_the_single_process_level() -> None:
    from proofs.check.spark import explore_spark

    spec = build("end-path", {})
    options = Options(liveness=False, symmetry=False, por=False, max_states=1000)
    local = explore(Model(spec), options)
    spark, _model = explore_spark(spec, options, _session(), partitions=2)
    assert local.verdict == "incomplete" and local.states >= 1000
    assert (spark.states, spark.transitions, spark.depth, spark.verdict) == (
        local.states,
        local.transitions,
        local.depth,
        local.verdict,
    )


class _InProcess:
    """Spark's scheduling in this process (one task after another), so a known-bug mutant patched into a
    machine module here reaches the tasks: the driver's and the tasks' logic, not Spark, is under test."""

    defaultParallelism = 2

    def broadcast(self, value: object) -> SimpleNamespace:
        return SimpleNamespace(value=value)

    def parallelize(self, items: Iterable[int], slices: int) -> _Tasks:
        return _Tasks(list(items), slices)


class _Tasks:
    def __init__(self, items: list[int], slices: int) -> None:
        self.items, self.slices = items, slices
        self.task: Callable[[int, Iterator[int]], Iterable[object]] | None = None

    def mapPartitionsWithIndex(self, task: Callable[[int, Iterator[int]], Iterable[object]]) -> _Tasks:
        done = _Tasks(self.items, self.slices)
        done.task = task
        return done

    def collect(self) -> list[object]:
        assert self.task is not None
        out: list[object] = []
        for index in range(self.slices):
            out.extend(self.task(index, iter(self.items[index :: self.slices])))
        return out


@pytest.mark.parametrize("keep_going", [False, True])
def test_the_spark_driver_and_tasks_find_what_the_single_process_finds(keep_going: bool) -> None:
    from proofs.check.spark import explore_spark
    from tests.known_bugs.catalogue import MUTANTS, applied

    bounds = {"clients": 2, "partitions": 2, "spread": 1, "readers": 0, "loss": 0, "duplicate": 0}
    mutant = next(m for m in MUTANTS if m.name == "abort-not-recorded")
    options = Options(liveness=False, stop_at_first=not keep_going)
    with applied(mutant):
        local = explore(Model(build("produce", bounds)), options)
        spark, _model = explore_spark(
            build("produce", bounds),
            options,
            SimpleNamespace(sparkContext=_InProcess()),
            partitions=3,
        )
    assert local.violations
    assert (spark.states, spark.transitions, spark.depth, spark.verdict) == (
        local.states,
        local.transitions,
        local.depth,
        local.verdict,
    )
    assert [(v.kind, v.name, v.length) for v in spark.violations] == [
        (v.kind, v.name, v.length) for v in local.violations
    ]
