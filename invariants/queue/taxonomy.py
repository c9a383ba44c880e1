"""Jepsen's Kafka-workload taxonomy in txnmodel: the anomalies, the rule each breaks, which of them
fail a history and which are information, and the two ways they are checked.

* A **Kafka-workload history** (read from Jepsen's ``history.edn`` by :mod:`history_io.kafka`) is
  judged by Jepsen's taxonomy alone, with Jepsen's meaning (:func:`invariants.queue.check_kafka`): the anomalies of
  :mod:`invariants.queue.kafka` and the cycles of :mod:`invariants.queue.cycles`.  As in Jepsen's
  ``allowed-error-types``, ``int-send-skip``, ``G0`` and ``G0-realtime`` never fail a history (a
  transaction's writes are not isolated from another's in Kafka's model), nor ``poll-skip`` and
  ``nonmonotonic-poll`` once a process subscribed (a consumer group rebalances), nor ``G1c`` and
  ``G1c-realtime`` with ``ww_deps`` (without write isolation ww edges close such cycles);
  ``realtime-lag`` is a measurement and ``G1b`` is txnmodel's addition, both information.
* **txnmodel's own histories** get, besides the transactional checks, the anomalies that mean
  something for Pulsar (:func:`invariants.queue.check_pulsar`, :mod:`invariants.queue.pulsar`): ``poll-skip``,
  ``lost-write`` and ``duplicate`` fail a history, ``unseen`` and ``realtime-lag`` inform.  The
  others are already judged there under txnmodel's name (:data:`PULSAR_EQUIVALENTS`) or have no
  meaning for Pulsar (:data:`NOT_FOR_PULSAR`, with the reason).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from invariants.queue import kafka, pulsar
from invariants.queue.model import Findings, QueueHistory

__all__ = [
    "KAFKA_CHECKS",
    "NOT_FOR_PULSAR",
    "PULSAR_CHECKS",
    "PULSAR_EQUIVALENTS",
    "QUEUE_ANOMALIES",
    "QUEUE_RULES",
    "KafkaOptions",
    "Statement",
    "kafka_informational",
]

# The anomalies Jepsen's Kafka checker names (G1b and the garbage-read it stops on aside), with the
# Adya class each is a variant of (None: the name is itself the class, or there is none).
QUEUE_ANOMALIES: dict[str, str | None] = {
    "G0": None,
    "G0-realtime": "G0",
    "G1a": None,
    "G1b": None,
    "G1c": None,
    "G1c-realtime": "G1c",
    "lost-write": None,
    "poll-skip": None,
    "nonmonotonic-poll": None,
    "nonmonotonic-send": None,
    "int-poll-skip": None,
    "int-nonmonotonic-poll": None,
    "int-send-skip": None,
    "int-nonmonotonic-send": None,
    "duplicate": None,
    "inconsistent-offsets": None,
    "precommitted-read": None,
    "unseen": None,
    "realtime-lag": None,
}

# What each breaks: the rules of spec/rules/*.md a Pulsar broker breaks with it (none for those that
# are Kafka's alone), and the rule in words.
QUEUE_RULES: dict[str, tuple[tuple[str, ...], str]] = {
    "G0": ((), "no cycle of write-write dependencies (Kafka does not isolate writes: informational)"),
    "G0-realtime": ((), "no cycle of write-write and real-time dependencies (informational, as G0)"),
    "G1a": (("TB-16",), "an aborted transaction's messages are never read (read committed)"),
    "G1b": ((), "a read never sees a transaction's intermediate state (informational: a poll may end anywhere)"),
    "G1c": (("TB-15", "TB-16"), "no cycle of write-read (and write-write) dependencies: no circular information flow"),
    "G1c-realtime": ((), "no cycle of write-read and real-time dependencies (strict serializability)"),
    "lost-write": (("TB-17", "TB-19"), "who read an offset could read the log before it: nothing committed is lost"),
    "poll-skip": (("TB-17",), "a consumer's next poll begins where its last committed one left off"),
    "nonmonotonic-poll": (("TB-17",), "a consumer's next poll begins after where its last committed one left off"),
    "nonmonotonic-send": ((), "one producer's later send lands after its earlier ones"),
    "int-poll-skip": (("TB-17",), "within one transaction, successive polls of a key read the log contiguously"),
    "int-nonmonotonic-poll": (("TB-17",), "within one transaction, successive polls of a key go forward"),
    "int-send-skip": ((), "a transaction's sends to a key are contiguous (informational: writes interleave in Kafka)"),
    "int-nonmonotonic-send": ((), "within one transaction, successive sends to a key land in order"),
    "duplicate": ((), "a message is written once, at one offset"),
    "inconsistent-offsets": ((), "an offset holds one message: sends and polls agree on it"),
    "precommitted-read": (
        ("TB-7", "TB-15"),
        "no one sees a message before its transaction commits, its own sender too",
    ),
    "unseen": ((), "every acknowledged message is eventually polled by someone"),
    "realtime-lag": ((), "how stale a poll was (a measurement, informational)"),
}
assert set(QUEUE_RULES) == set(QUEUE_ANOMALIES)

KafkaCheck = Callable[[QueueHistory, Findings], None]

# Every non-cyclic check of a Kafka-workload history, in the order they run and report.
KAFKA_CHECKS: dict[str, KafkaCheck] = {
    "garbage-read": kafka.garbage_reads,
    "inconsistent-offsets": kafka.inconsistent_offsets,
    "duplicate": kafka.duplicates,
    "G1a": kafka.g1a,
    "precommitted-read": kafka.precommitted_reads,
    "lost-write": kafka.lost_writes,
    "poll-skip": kafka.poll_skips,
    "nonmonotonic-poll": kafka.nonmonotonic_polls,
    "nonmonotonic-send": kafka.nonmonotonic_sends,
    "int-poll-skip": kafka.int_poll_skips,
    "int-nonmonotonic-poll": kafka.int_nonmonotonic_polls,
    "int-send-skip": kafka.int_send_skips,
    "int-nonmonotonic-send": kafka.int_nonmonotonic_sends,
    "G1b": kafka.g1b,
    "unseen": kafka.unseen,
    "realtime-lag": kafka.realtime_lag,
}
CYCLES = ("G0", "G1c", "G0-realtime", "G1c-realtime")

PulsarCheck = Callable[[pulsar.PulsarView, Findings], None]

# The anomalies judged on txnmodel's own histories, and those of them that only inform.
PULSAR_CHECKS: dict[str, PulsarCheck] = {
    "poll-skip": pulsar.poll_skips,
    "lost-write": pulsar.lost_writes,
    "duplicate": pulsar.duplicates,
    "unseen": pulsar.unseen,
    "realtime-lag": pulsar.realtime_lag,
}
PULSAR_INFORMATIONAL = frozenset({"unseen", "realtime-lag"})

# On txnmodel's own histories these are judged by a transactional check under its own name.
PULSAR_EQUIVALENTS: dict[str, str] = {
    "G1a": "aborted-read",
    "G1c": "cyclic-information-flow",
    "inconsistent-offsets": "inconsistent-position",
    "nonmonotonic-poll": "out-of-order-delivery",
    "nonmonotonic-send": "realtime-order",
    "int-nonmonotonic-send": "realtime-order",
    "precommitted-read": "premature-read",
}
# And these have no meaning for Pulsar, for the reason given.
NOT_FOR_PULSAR: dict[str, str] = {
    "G0": "Pulsar, like Kafka, does not isolate one transaction's writes from another's: write cycles are allowed",
    "G0-realtime": "as G0",
    "G1b": "a receive returns one message: a consumer always sees a transaction's messages one at a time",
    "G1c-realtime": "a Pulsar receive is not part of a transaction; real-time order of sends is realtime-order",
    "int-poll-skip": "a receive returns one message, so no operation polls a partition twice",
    "int-nonmonotonic-poll": "a receive returns one message, so no operation polls a partition twice",
    "int-send-skip": "Pulsar interleaves transactions' sends to a partition by design",
}
assert set(PULSAR_CHECKS) | set(PULSAR_EQUIVALENTS) | set(NOT_FOR_PULSAR) == set(QUEUE_ANOMALIES)


@dataclass(frozen=True)
class KafkaOptions:
    """How a Kafka-workload history is judged: ``ww_deps`` infers write-write dependencies from
    offsets (Jepsen's ``:ww-deps``; G1c is then informational), ``realtime`` adds real-time edges to
    the cycle search (Jepsen's checker asks for strict serializability, which has them)."""

    ww_deps: bool = False
    realtime: bool = True


@dataclass(frozen=True)
class Statement:
    """Whether a check had anything to judge in one history, and what (or why not), in words; the
    JSON of :class:`invariants.applicability.Applicability`."""

    check: str
    group: str
    applies: bool
    evidence: str

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "applies": self.applies, "evidence": self.evidence}


def kafka_informational(q: QueueHistory, options: KafkaOptions) -> frozenset[str]:
    """The anomalies that do not fail this Kafka-workload history (Jepsen's allowed error types)."""
    allowed = {"int-send-skip", "G0", "G0-realtime", "G1b", "realtime-lag"}
    if q.subscribed:
        allowed |= {"poll-skip", "nonmonotonic-poll"}
    if options.ww_deps:
        allowed |= {"G1c", "G1c-realtime"}
    return frozenset(allowed)
