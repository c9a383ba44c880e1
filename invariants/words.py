"""How the history checkers write times and names in what they report.

A recorded history's clock is Unix milliseconds and its topics carry the recorder's run prefix
(``persistent://public/default/txnmodel-nack-8d2dd818bee3-p0``), so an explanation that quotes them
raw is mostly digits and prefix.  :class:`Words` writes, for one history:

* an instant relative to the history's start (the first invocation): ``+1.162 s``;
* a duration: ``0.850 s``;
* an object without what every object of the history shares: ``p0#exclusive`` for the
  subscription above when all topics share ``txnmodel-nack-8d2dd818bee3-``
  (:meth:`Words.legend` says what was left out, once per report).

Pure: it reads the operations once and formats numbers and names.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from spec.history import Operation

__all__ = ["Words", "seconds"]


def seconds(ms: float) -> str:
    """A duration in milliseconds as seconds: ``0.850 s``; ``never`` for an infinite one."""
    if math.isinf(ms):
        return "never"
    return f"{ms / 1000:.3f} s"


class Words:
    """Times and names of one history, as its reports write them (see the module docstring)."""

    def __init__(self, ops: Sequence[Operation]) -> None:
        self.start = min((op.invoked_at for op in ops), default=0)
        topics = sorted({_topic(op.object) for op in ops if op.object.startswith(("partition:", "subscription:"))})
        self.namespace, self.prefix = _shared(topics)
        self._short: dict[str, str] = {}

    def at(self, t: float) -> str:
        """An instant relative to the history's start: ``+1.162 s`` (``never`` for an infinite one)."""
        if math.isinf(t):
            return "never"
        return f"{'+' if t >= self.start else '-'}{abs(t - self.start) / 1000:.3f} s"

    def end(self, op: Operation) -> str:
        """When an operation completed, relative to the start (when it was invoked, if it never did)."""
        return self.at(op.invoked_at if op.completed_at is None else op.completed_at)

    def name(self, obj: str) -> str:
        """An object id (or a bare topic or subscription name) without the kind and the prefix every
        topic of the history shares: ``p0#exclusive``, ``in``, ``coordinator 0``."""
        found = self._short.get(obj)
        if found is None:
            found = self._short[obj] = self._shorten(obj)
        return found

    def _shorten(self, obj: str) -> str:
        kind, sep, rest = obj.partition(":")
        if not sep or kind not in ("partition", "subscription", "coordinator", "tracker", "log", "register", "key"):
            kind, rest = "", obj
        if kind not in ("", "partition", "subscription"):
            return f"{kind} {rest}"
        topic, hash_sign, sub = rest.partition("#")
        if topic.startswith(self.namespace):
            topic = topic[len(self.namespace) :]
        if self.prefix and topic.startswith(self.prefix) and len(topic) > len(self.prefix):
            topic = topic[len(self.prefix) :]
        return f"{topic}{hash_sign}{sub}"

    def legend(self) -> str:
        """What :meth:`name` and :meth:`at` leave out, in words (empty when nothing was)."""
        left = self.namespace + self.prefix
        parts = [f"times from the history's start (+0.000 s = {self.start})"]
        if left:
            parts.append(f"topics without {left!r}")
        return "; ".join(parts)


def _topic(obj: str) -> str:
    """The topic partition an object id names (a subscription's topic, before ``#``)."""
    return obj.partition(":")[2].partition("#")[0]


def _shared(topics: Iterable[str]) -> tuple[str, str]:
    """What every topic shares: the scheme and namespace (``persistent://public/default/``), and a
    prefix of the topic names up to a ``-`` that leaves each a name of its own (one topic keeps its
    last word); a prefix that would leave a bare number (``partition-0`` -> ``0``) stops a word
    earlier."""
    names = list(topics)
    if not names:
        return "", ""
    heads = {name.rsplit("/", 1)[0] + "/" if "/" in name else "" for name in names}
    namespace = heads.pop() if len(heads) == 1 else ""
    rests = [name[len(namespace) :] for name in names]
    common = min(rests)
    for rest in rests:  # the longest prefix of characters every name shares
        same = next((k for k, (a, b) in enumerate(zip(common, rest, strict=False)) if a != b), None)
        common = common[: min(len(common), len(rest)) if same is None else same]
    cut = common.rfind("-")
    prefix = common[: cut + 1] if cut >= 0 else ""
    while prefix and any(not rest[len(prefix) :] or rest[len(prefix) :].isdigit() for rest in rests):
        prefix = prefix[: prefix[:-1].rfind("-") + 1]
    return namespace, prefix
