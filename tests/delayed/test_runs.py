"""The packed runs under the delayed trackers: a merge keeps exactly the records not yet consumed.

A run consumed from the front (``offset``) and a sealed segment's 12-byte relative records must
merge like any other run, on both merge paths (a Python sort of keys for small merges, a numpy
sort past ``_ARRAY_MERGE`` records)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reference.delayed_runs import Run, compact_run, merge_runs, pack

INDEXES = st.tuples(st.integers(0, 2**40), st.integers(0, 2**20), st.integers(0, 2**20))


@st.composite
def runs(draw: st.DrawFn) -> Run:
    indexes = sorted(draw(st.lists(INDEXES, min_size=1, max_size=300)))
    run = compact_run(indexes) if draw(st.booleans()) else Run(b"".join(pack(i) for i in indexes))
    consumed = draw(st.integers(0, len(run)))
    return Run(run.data, run.width, run.base_ts, run.base_ledger, consumed)


@given(st.lists(runs(), min_size=1, max_size=4))
def test_a_merge_holds_the_records_not_consumed_in_order(parts: list[Run]) -> None:
    expected = sorted(key for run in parts for key in run.key_list())
    merged = merge_runs(parts)
    assert merged.width == 24 and merged.offset == 0
    assert merged.key_list() == expected


def test_both_merge_paths_skip_consumed_records() -> None:
    for size in (10, 600):  # below and above the array merge
        first = Run(b"".join(pack((t, 1, 0)) for t in range(size)), offset=3)
        second = compact_run([(t, 2, 0) for t in range(size)])
        second = Run(second.data, second.width, second.base_ts, second.base_ledger, 5)
        merged = merge_runs([first, second])
        assert len(merged) == 2 * size - 8
        assert merged.key_list() == sorted([*first.key_list(), *second.key_list()])
