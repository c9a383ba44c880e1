"""Bounds on JSON text, checked before it is parsed.

Python's ``json`` parser recurses once per nesting level (deep input raises ``RecursionError``)
and converts every digit run to an ``int`` (past 4,300 digits a ``ValueError``; well before that,
quadratic time).  Every reader of JSON input (vectors, history rows, JSON Lines) asks
:func:`first_excess` first, so input past a bound is refused as bad input naming the bound and
the place, never a crash or a hang.  Pure: text in, the first problem out.
"""

from __future__ import annotations

import functools
import re

__all__ = ["first_excess"]


@functools.cache
def _tokens(max_digits: int) -> re.Pattern[str]:
    # A JSON string (skipped whole: brackets and digits inside it do not count), a bracket, or a
    # run of digits longer than allowed.
    return re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]|\d{' + str(max_digits + 1) + ",}")


@functools.cache
def _long_number(max_digits: int) -> re.Pattern[str]:
    return re.compile(r"\d{" + str(max_digits + 1) + ",}")


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
# an array or object with no array or object inside it
_INNERMOST = re.compile(r"[\[{][^\[\]{}]*[\]}]")


def _within(text: str, max_depth: int, max_digits: int) -> bool:
    """Whether ``text`` certainly keeps both bounds, by passes of C regexes: its strings blanked
    (brackets and digits inside them do not count), no number too long, then the innermost arrays
    and objects removed a level a pass.  False when it does not, or when brackets are left
    unpaired (text that is not JSON): the token scan below then finds the place, or leaves the text
    to the parser."""
    bare = _STRING.sub('""', text)
    if _long_number(max_digits).search(bare) is not None:
        return False
    for _ in range(max_depth + 1):
        bare, removed = _INNERMOST.subn("0", bare)
        if not removed:
            return "[" not in bare and "{" not in bare and "]" not in bare and "}" not in bare
    return False


def first_excess(text: str, *, max_depth: int, max_digits: int) -> tuple[str, int] | None:
    """The first place where ``text`` nests arrays and objects deeper than ``max_depth`` or has a
    number of more than ``max_digits`` digits: ``(what, character index)``; ``None`` within bounds.

    Linear in the text and without recursion.  Text that is not JSON at all is left to the parser.
    """
    if len(text) <= max_digits and len(text) <= max_depth:
        return None  # too short to hold either: most of a history's values
    if text.count("[") + text.count("{") <= max_depth and _long_number(max_digits).search(text) is None:
        return None  # the common case, decided in C
    if _within(text, max_depth, max_digits):
        return None  # a long value (a recovery's log, a long list), decided in C too
    depth = 0
    for token in _tokens(max_digits).finditer(text):
        first = token.group()[0]
        if first in "[{":
            depth += 1
            if depth > max_depth:
                return f"nested deeper than {max_depth} levels", token.start()
        elif first in "]}":
            depth -= 1
        elif first != '"':
            return f"a number of {len(token.group()):,} digits, more than {max_digits}", token.start()
    return None
