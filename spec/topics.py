"""Pulsar's topic names, as a broker resolves what a client sends.

``my-topic``, ``tenant/ns/my-topic`` and ``persistent://tenant/ns/my-topic`` name the same
persistent topic; a partition of a partitioned topic is ``<topic>-partition-<i>``.  Only persistent
topics exist here (the machines model managed ledgers); anything else is refused by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["InvalidTopicName", "TopicName", "parse_topic"]

_PARTITION = re.compile(r"^(?P<base>.+)-partition-(?P<index>0|[1-9][0-9]{0,8})$")
_PART = re.compile(r"^[A-Za-z0-9_=:.%~-][A-Za-z0-9_=:.%~ -]*$")


class InvalidTopicName(ValueError):
    """A topic name a broker refuses (the wire's ``InvalidTopicName``, or ``NotAllowedError`` for a
    domain this broker does not serve)."""

    def __init__(self, name: str, why: str, *, not_allowed: bool = False) -> None:
        self.name = name
        self.not_allowed = not_allowed
        super().__init__(f"topic {name!r}: {why}")


@dataclass(frozen=True, slots=True)
class TopicName:
    """A resolved topic name.  ``full`` is ``persistent://tenant/namespace/local``; ``partition`` is
    the partition index when ``local`` ends in ``-partition-<i>``, and ``base`` the partitioned
    topic's full name then (else ``full`` itself)."""

    tenant: str
    namespace: str
    local: str
    partition: int | None

    @property
    def full(self) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/{self.local}"

    @property
    def base(self) -> str:
        if self.partition is None:
            return self.full
        match = _PARTITION.match(self.local)
        assert match is not None
        return f"persistent://{self.tenant}/{self.namespace}/{match['base']}"

    def partition_name(self, index: int) -> str:
        """The full name of partition ``index`` of this (partitioned) topic."""
        return f"{self.base}-partition-{index}"


def parse_topic(name: str) -> TopicName:
    """Resolve a topic name as a client may spell it; :class:`InvalidTopicName` names the problem."""
    if not name or len(name) > 1024:
        raise InvalidTopicName(name[:80], "empty or longer than 1024 characters")
    domain, sep, rest = name.partition("://")
    if not sep:
        domain, rest = "persistent", name
        parts = rest.split("/")
        if len(parts) == 1:
            parts = ["public", "default", parts[0]]
    else:
        parts = rest.split("/")
    if domain == "non-persistent":
        raise InvalidTopicName(
            name, "non-persistent topics are not served (the model has managed ledgers only)", not_allowed=True
        )
    if domain != "persistent":
        raise InvalidTopicName(name, f"unknown domain {domain!r} (persistent:// or non-persistent://)")
    if len(parts) != 3:
        raise InvalidTopicName(name, "expected tenant/namespace/topic")
    for part in parts:
        if not _PART.match(part):
            raise InvalidTopicName(name, f"invalid name part {part!r}")
    tenant, namespace, local = parts
    match = _PARTITION.match(local)
    return TopicName(tenant, namespace, local, int(match["index"]) if match else None)
