"""``spec.json_limits.first_excess``: its shortcuts (short text, few brackets, the C regex passes of
``_within`` for long values) give the answer of the plain definition, a character walk that skips
strings, counts the nesting of arrays and objects and the length of digit runs."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from spec.json_limits import first_excess


def _walk(text: str, max_depth: int, max_digits: int) -> tuple[str, int] | None:
    depth = 0
    i = 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j < len(text):  # a whole string: nothing inside it counts
                i = j + 1
                continue
            i += 1  # an unterminated quote: the rest is scanned as it is
            continue
        if c in "[{":
            depth += 1
            if depth > max_depth:
                return f"nested deeper than {max_depth} levels", i
        elif c in "]}":
            depth -= 1
        elif c.isdigit():
            j = i
            while j < len(text) and text[j].isdigit():
                j += 1
            if j - i > max_digits:
                return f"a number of {j - i:,} digits, more than {max_digits}", i
            i = j
            continue
        i += 1
    return None


_CHARS = st.sampled_from(["[", "]", "{", "}", '"', "\\", "1", "2", "0", "a", ",", ":", " "])
_JSON = st.recursive(
    st.none() | st.integers() | st.text(alphabet='ab[{"\\1'),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet="ab1", max_size=3), inner, max_size=3),
    max_leaves=40,
)


@given(st.lists(_CHARS, max_size=140).map("".join), st.sampled_from([(2, 1), (3, 2), (5, 10), (64, 40)]))
def test_any_text_gets_the_plain_answer(text: str, bounds: tuple[int, int]) -> None:
    max_depth, max_digits = bounds
    assert first_excess(text, max_depth=max_depth, max_digits=max_digits) == _walk(text, max_depth, max_digits)


@given(_JSON, st.sampled_from([(2, 3), (4, 6), (64, 40)]))
def test_json_values_get_the_plain_answer(value: object, bounds: tuple[int, int]) -> None:
    text = json.dumps(value)
    max_depth, max_digits = bounds
    assert first_excess(text, max_depth=max_depth, max_digits=max_digits) == _walk(text, max_depth, max_digits)


def test_a_long_value_within_bounds_and_one_just_past_them() -> None:
    # longer than the quick checks: over 64 brackets, strings holding brackets and long digit runs
    row = json.dumps({"log": [[[1, i], {"@bytes": "9" * 60 + "[{"}, None] for i in range(40)]})
    assert first_excess(row, max_depth=64, max_digits=40) is None
    deep = "[" * 65 + "]" * 65
    assert first_excess(deep, max_depth=64, max_digits=40) == ("nested deeper than 64 levels", 64)
    assert first_excess(deep[1:-1], max_depth=64, max_digits=40) is None
    number = "[" * 70 + "]" * 69 + ",1" + "2" * 41 + "]"
    assert first_excess(number, max_depth=64, max_digits=40) == ("nested deeper than 64 levels", 64)
    assert first_excess(json.dumps([0] * 80 + [10**41]), max_depth=64, max_digits=40) == (
        "a number of 42 digits, more than 40",
        len(json.dumps([0] * 80)) + 1,
    )
