"""Every anomaly the transactional checker knows, in one table, and the runner that applies them.

:data:`TAXONOMY` is the one place an anomaly is declared: its name, the Adya class it is the
Pulsar analogue of (where there is one), its group (``delivery``: holds of any Pulsar-protocol
broker; ``transactional``: needs transactions, see :mod:`invariants.applicability`), its check
(one function in the module of its family) and what was observed, in words.  The rows are in the
order :func:`check_transactional` runs the checks and reports what they find.  A new anomaly is a
function in its family's module (:mod:`~invariants.transactional.isolation`,
:mod:`~invariants.transactional.order`, :mod:`~invariants.transactional.delivery`,
:mod:`~invariants.transactional.timing`, or a new one) and a row here; ``invariants.applicability``
states when it has something to judge, and ``invariants.explain`` which rules it breaks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from invariants.analysis import TxnAnalysis
from invariants.queue import KafkaOptions, check_kafka, check_pulsar, is_kafka_history, without_cyclic_gc
from invariants.queue.taxonomy import QUEUE_ANOMALIES
from invariants.transactional import delivery, isolation, order, timing
from invariants.transactional.anomaly import Anomaly, Check, Collector, TxnResult
from spec.history import Operation

__all__ = [
    "ANOMALIES",
    "CHECKS",
    "GROUPS",
    "LIVENESS",
    "QUEUE_GROUP",
    "TAXONOMY",
    "AnomalyKind",
    "check_transactional",
    "find",
    "of_group",
]


@dataclass(frozen=True)
class AnomalyKind:
    """One row of the taxonomy.  ``liveness``: a bound missed (something did not happen in time),
    reported as its own verdict, ``late``, apart from the safety anomalies (``illegal``)."""

    name: str
    adya: str | None
    group: str  # "delivery" or "transactional"
    check: Check
    observed: str  # what the history showed, in words
    liveness: bool = False


TAXONOMY: tuple[AnomalyKind, ...] = (
    AnomalyKind(
        "commit-and-abort",
        None,
        "transactional",
        isolation.commit_and_abort,
        "one transaction both committed and aborted",
    ),
    AnomalyKind(
        "inconsistent-position",
        "G0",
        "delivery",
        order.inconsistent_positions,
        "a message was delivered at a position other than the one its send returned, or two messages share a position",
    ),
    AnomalyKind("garbage-read", None, "delivery", order.garbage_reads, "a receive returned a message nobody sent"),
    AnomalyKind(
        "early-delivery",
        None,
        "delivery",
        timing.early_deliveries,
        "a delayed message was delivered before its deliver-at time (less the ``deliver_early_ms`` a non-strict "
        "broker may take)",
    ),
    AnomalyKind(
        "aborted-read",
        "G1a",
        "transactional",
        isolation.aborted_reads,
        "a message of an aborted transaction was delivered",
    ),
    AnomalyKind(
        "uncommitted-read",
        "G1a",
        "transactional",
        isolation.uncommitted_reads,
        "a message of a transaction that never committed was delivered",
    ),
    AnomalyKind(
        "premature-read",
        "G1b",
        "transactional",
        isolation.premature_reads,
        "a message was delivered before its transaction's commit began (Pulsar: a dispatch beyond maxReadPosition)",
    ),
    AnomalyKind(
        "fractured-read",
        None,
        "transactional",
        isolation.fractured_reads,
        "a subscription read past a committed transaction's messages on a partition but saw only some of them "
        "(atomic visibility)",
    ),
    AnomalyKind(
        "lost-message",
        None,
        "delivery",
        delivery.lost_messages,
        "a committed message never reached a subscription that read the partition to its end",
    ),
    AnomalyKind(
        "duplicate-after-commit",
        None,
        "transactional",
        delivery.duplicates_after_commit,
        "a message acked inside a committed transaction was delivered again to the same subscription after the "
        "commit completed",
    ),
    AnomalyKind(
        "missing-redelivery",
        None,
        "transactional",
        delivery.missing_redeliveries,
        "a message acked individually inside a transaction that aborted was not delivered again on its Exclusive "
        "subscription before the consumer went past it (liveness under a bound)",
        liveness=True,
    ),
    AnomalyKind(
        "cyclic-information-flow",
        "G1c",
        "transactional",
        isolation.cyclic_information_flow,
        "committed transactions each consumed (received and acked in the transaction) a message another one "
        "produced, in a cycle",
    ),
    AnomalyKind(
        "realtime-order",
        None,
        "delivery",
        order.realtime_order,
        "a send that completed before another began got a later position",
    ),
    AnomalyKind(
        "out-of-order-delivery",
        None,
        "delivery",
        order.out_of_order_deliveries,
        "a consumer got first deliveries of a partition out of order",
    ),
    AnomalyKind(
        "late-delivery",
        None,
        "delivery",
        timing.late_deliveries,
        "a delayed message did not reach the consumers within the bound its send states (``deliver_within_ms``) "
        "after its time",
        liveness=True,
    ),
    AnomalyKind(
        "lost-redelivery",
        None,
        "delivery",
        timing.lost_redeliveries,
        "a message given back (negative ack, ack timeout) was not delivered again within the bound the history states",
        liveness=True,
    ),
)

# The taxonomy by name: each anomaly's Adya class, its check (in run order) and its group; the liveness ones.
# Jepsen's Kafka-workload taxonomy (invariants.queue) is registered beside it: on Pulsar histories its
# meaningful anomalies run after these checks, and a Kafka-workload history is judged by it alone.
ANOMALIES: Mapping[str, str | None] = MappingProxyType(
    {**{kind.name: kind.adya for kind in TAXONOMY}, **QUEUE_ANOMALIES}
)
CHECKS: Mapping[str, Check] = MappingProxyType({kind.name: kind.check for kind in TAXONOMY})
GROUPS: Mapping[str, str] = MappingProxyType({kind.name: kind.group for kind in TAXONOMY})
LIVENESS: frozenset[str] = frozenset(kind.name for kind in TAXONOMY if kind.liveness)
assert len(ANOMALIES) == len(TAXONOMY) + len(QUEUE_ANOMALIES), "an anomaly is declared twice"
assert set(GROUPS.values()) <= {"delivery", "transactional"}, GROUPS
# The row that reports Jepsen's anomalies on a Pulsar history: the ones that mean something for
# Pulsar (lost-write, duplicate, poll-skip, unseen, realtime-lag) are about what reaches a consumer,
# with or without transactions.  A Kafka-workload history has one row, ``transactional``.
QUEUE_GROUP = "delivery"


def check_transactional(
    ops: Sequence[Operation],
    *,
    cap: int = 20,
    analysis: TxnAnalysis | None = None,
    on_check: Callable[[str], None] | None = None,
    ww_deps: bool = False,
) -> TxnResult:
    """Every check of the taxonomy over one history: the analysis built once (or the one given, of
    these operations), then each anomaly's check in :data:`TAXONOMY` order, then Jepsen's taxonomy
    where it means something for Pulsar (:func:`invariants.queue.check_pulsar`); a Kafka-workload
    history is judged by Jepsen's taxonomy alone (:func:`invariants.queue.check_kafka`, ``ww_deps``
    as Jepsen's ``:ww-deps``).  ``cap`` anomalies of each kind are kept in full (all are counted).
    ``on_check`` is told each check's name once it ran (``jepsen`` for Jepsen's taxonomy)."""
    history = ops[0].history if ops else ""
    judged: dict[str, int] = {}
    unjudged: dict[str, dict[str, int]] = {}
    legend = ""
    if is_kafka_history(ops):
        queue = check_kafka(ops, cap=cap, options=KafkaOptions(ww_deps=ww_deps))
        found: list[Anomaly] = []
        counts: dict[str, int] = {}
        txns, messages = queue.transactions, queue.messages
    else:
        # The analysis and the checks' indexes are millions of small objects without reference
        # cycles: a cyclic collection would walk them all again and again as they grow, which made
        # the checks' time grow faster than the operations (issue 28's verify_scale).
        with without_cyclic_gc():
            analysis = TxnAnalysis.build(ops) if analysis is None else analysis
            out = Collector(analysis.history, cap, ANOMALIES)
            for kind in TAXONOMY:
                kind.check(analysis, out)
                if on_check is not None:
                    on_check(kind.name)
            queue = check_pulsar(analysis, ops, cap=cap)
        found, counts = list(out.found), dict(out.counts)
        txns, messages = len(set(analysis.commits) | set(analysis.aborts)), len(analysis.messages)
        judged, unjudged = dict(out.judged), {name: dict(why) for name, why in out.unjudged.items()}
        legend = analysis.words.legend()
    if on_check is not None:
        on_check("jepsen")
    queued = [
        Anomaly(
            f.name,
            history,
            f.ops,
            f.explanation,
            f.cycle,
            ANOMALIES[f.name],
            informational=f.informational,
        )
        for f in queue.findings.found
    ]
    found += [a for a in queued if not a.informational]
    counts.update(queue.findings.counts)
    return TxnResult(
        history,
        tuple(found),
        counts,
        txns,
        messages,
        len(ops),
        judged=judged,
        unjudged=unjudged,
        legend=legend,
        informational=tuple(a for a in queued if a.informational),
        notes=dict(queue.findings.notes),
        statements=queue.statements,
    )


def of_group(result: TxnResult, group: str) -> TxnResult:
    """The part of a result whose anomalies belong to ``group`` (:data:`GROUPS`): what the verdict
    row of that group reports.  Jepsen's anomalies on a Pulsar history, with what its checks had to
    judge, belong to :data:`QUEUE_GROUP`."""
    queue = group == QUEUE_GROUP

    def mine(name: str) -> bool:
        return GROUPS[name] == group if name in GROUPS else queue

    return dataclasses.replace(
        result,
        anomalies=tuple(a for a in result.anomalies if mine(a.name)),
        counts={name: n for name, n in result.counts.items() if mine(name)},
        judged={name: n for name, n in result.judged.items() if mine(name)},
        unjudged={name: why for name, why in result.unjudged.items() if mine(name)},
        informational=result.informational if queue else (),
        notes=result.notes if queue else {},
        statements=result.statements if queue else (),
    )


def find(name: str, ops: Sequence[Operation], *, cap: int = 20) -> list[Anomaly]:
    """The anomalies of one kind alone (for tests and tools): the analysis, then that check only."""
    analysis = TxnAnalysis.build(ops)
    out = Collector(analysis.history, cap, ANOMALIES)
    CHECKS[name](analysis, out)
    return out.found
