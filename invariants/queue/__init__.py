"""Jepsen's Kafka-workload anomalies (``jepsen.tests.kafka``) in txnmodel: the taxonomy
(:mod:`invariants.queue.taxonomy`), the model of a Kafka-workload history
(:mod:`invariants.queue.model`), its checks (:mod:`invariants.queue.kafka`,
:mod:`invariants.queue.cycles`), the same anomalies on txnmodel's own histories where they mean
something for Pulsar (:mod:`invariants.queue.pulsar`), and what each check had to judge
(:mod:`invariants.queue.statements`).  :mod:`invariants.transactional` runs them: a Kafka-workload
history by Jepsen's taxonomy alone, any other beside its own checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from invariants.analysis import TxnAnalysis
from invariants.heap import without_cyclic_gc
from invariants.queue import cycles as cyclic
from invariants.queue import pulsar
from invariants.queue.model import Finding, Findings, QueueHistory, is_kafka_history
from invariants.queue.statements import kafka_statements, pulsar_statements
from invariants.queue.taxonomy import (
    KAFKA_CHECKS,
    PULSAR_CHECKS,
    PULSAR_INFORMATIONAL,
    QUEUE_ANOMALIES,
    QUEUE_RULES,
    KafkaOptions,
    Statement,
    kafka_informational,
)
from spec.history import Operation

__all__ = [
    "QUEUE_ANOMALIES",
    "QUEUE_RULES",
    "Finding",
    "Findings",
    "KafkaOptions",
    "QueueVerdict",
    "Statement",
    "check_kafka",
    "check_pulsar",
    "is_kafka_history",
    "pulsar_statements_of",
    "without_cyclic_gc",
]


@dataclass(frozen=True)
class QueueVerdict:
    """What the taxonomy found in one history and what each of its checks had to judge."""

    findings: Findings
    statements: tuple[Statement, ...]
    transactions: int = 0
    messages: int = 0


def check_kafka(ops: Sequence[Operation], *, cap: int = 20, options: KafkaOptions | None = None) -> QueueVerdict:
    """Every anomaly of Jepsen's taxonomy in one Kafka-workload history (see the module docstring)."""
    options = options or KafkaOptions()
    with without_cyclic_gc():
        q = QueueHistory.build(ops)
        out = Findings(cap, kafka_informational(q, options))
        for check in KAFKA_CHECKS.values():
            check(q, out)
        cyclic.cycles(q, out, ww_deps=options.ww_deps, realtime=options.realtime)
        messages = sum(len(u.writes) for u in q.units)
        return QueueVerdict(out, tuple(kafka_statements(q, options)), len(q.units), messages)


def check_pulsar(analysis: TxnAnalysis, ops: Sequence[Operation], *, cap: int = 20) -> QueueVerdict:
    """The anomalies of the taxonomy that mean something for Pulsar, on one of txnmodel's own
    histories (see the module docstring)."""
    view = pulsar.PulsarView(analysis, ops)
    out = Findings(cap, PULSAR_INFORMATIONAL)
    for check in PULSAR_CHECKS.values():
        check(view, out)
    return QueueVerdict(out, tuple(pulsar_statements(view)))


def pulsar_statements_of(ops: Sequence[Operation]) -> list[Statement]:
    """What each check of the taxonomy had to judge in one of txnmodel's own histories."""
    return list(pulsar_statements(pulsar.PulsarView(TxnAnalysis.build(ops), ops)))
