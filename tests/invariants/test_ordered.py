"""The ordered lookups the history checkers share, against the loops they replace."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from invariants.ordered import MaxTree, PrefixBest

values = st.lists(st.integers(-5, 20), max_size=40)


@given(values, st.data())
def test_max_tree_finds_every_value_above_a_threshold_in_a_range(numbers: list[int], data: st.DataObject) -> None:
    tree = MaxTree(numbers)
    lo = data.draw(st.integers(0, len(numbers)))
    hi = data.draw(st.integers(0, len(numbers) + 2))
    threshold = data.draw(st.integers(-6, 21))
    expected = [i for i in range(lo, min(hi, len(numbers))) if numbers[i] > threshold]
    assert list(tree.above(lo, hi, threshold)) == expected
    assert tree.leftmost_above(lo, hi, threshold) == (expected[0] if expected else None)


@given(
    st.lists(st.tuples(st.integers(0, 10), st.integers(0, 50), st.sampled_from(["a", "b", "c", None])), max_size=30),
    st.integers(-1, 11),
    st.sampled_from(["a", "b", "c", None, "nobody"]),
    st.booleans(),
)
def test_prefix_best_is_the_best_of_another_owner_up_to_a_key(
    entries: list[tuple[int, int, str | None]], key: int, exclude: str | None, inclusive: bool
) -> None:
    best = PrefixBest([(k, v, owner, (k, v, owner)) for k, v, owner in entries])
    mine = [
        (v, (k, v, owner))
        for k, v, owner in entries
        if (k <= key if inclusive else k < key) and (exclude == "nobody" or owner != exclude)
    ]
    got = (
        best.best(key, inclusive=inclusive)
        if exclude == "nobody"
        else best.best(key, exclude=exclude, inclusive=inclusive)
    )
    if not mine:
        assert got is None
    else:
        assert got is not None and got[0] == max(v for v, _ in mine)
        assert got[1][2] != exclude or exclude == "nobody"
