"""Which checks a history gives something to judge, stated beside every verdict.

A check that finds nothing to judge passes vacuously: a history without delayed messages has no
early delivery, one without transactions no aborted read.  So that an absent check is never taken
for a pass, ``txnmodel verify`` states, for each check of :data:`invariants.transactional.CHECKS`,
whether it *applies* to the history (the history holds what the check reads) and what it had to
look at, in words.  A check that applies can still leave some cases unjudged (a receive of unknown
outcome blinds the loss check for what it may have taken, for instance): each check's docstring
says what it gives the benefit of the doubt.

The checks fall in two groups (each row of :data:`invariants.transactional.checks.TAXONOMY` names
its group, :data:`GROUPS` here too):

* **delivery** checks hold of any Pulsar-protocol broker, with or without transactions: garbage,
  positions, loss, order, delayed delivery (early and late), redelivery after a negative ack or
  the ack timeout;
* **transactional** checks need transactions in the history: aborted, uncommitted, premature and
  fractured reads, duplicates after commit, missing redelivery after abort, cycles, a transaction
  that both committed and aborted.

This module is pure: it reads the analysis :class:`~invariants.transactional.TxnAnalysis` builds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from invariants.analysis import TxnAnalysis, TxnFate
from invariants.heap import without_cyclic_gc
from invariants.transactional.anomaly import TxnResult
from invariants.transactional.checks import CHECKS, GROUPS, check_transactional
from spec.history import Operation

__all__ = ["GROUPS", "Applicability", "applicability", "applicability_of", "describe"]


@dataclass(frozen=True)
class Applicability:
    """Whether a check had anything to judge in one history, and what (or why not), in words."""

    check: str
    group: str
    applies: bool
    evidence: str

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "applies": self.applies, "evidence": self.evidence}


def _plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


def _txn_messages(a: TxnAnalysis) -> list[Any]:
    return [m for m in a.messages.values() if m.txn is not None]


def _delivered_partitions(a: TxnAnalysis) -> set[str]:
    return {d.partition for d in a.deliveries}


Statement = Callable[[], tuple[bool, str]]


def _statements(a: TxnAnalysis) -> dict[str, Statement]:
    """Each check's statement of whether it applies, in :data:`~invariants.transactional.CHECKS`'
    order: first the checks of sends and deliveries, then those of transactions."""
    return {**_delivery_statements(a), **_txn_statements(a)}


def _delivery_statements(a: TxnAnalysis) -> dict[str, Statement]:
    delivered = len(a.deliveries)

    def garbage() -> tuple[bool, str]:
        return (delivered > 0, f"{_plural(delivered, 'delivery')}" if delivered else "nothing was received")

    def positions() -> tuple[bool, str]:
        placed = sum(m.position is not None for m in a.messages.values())
        if not placed:
            return False, "no send returned a position"
        return True, f"{_plural(placed, 'send')} with a position, {_plural(delivered, 'delivery')}"

    def loss() -> tuple[bool, str]:
        drained = [v for v in a.views if v.drain is not None]
        if not drained:
            return False, "no subscription was read to its end (no empty receive after every send and commit)"
        return True, f"{_plural(len(drained), 'subscription')} read to the end"

    def realtime() -> tuple[bool, str]:
        per_partition = Counter(m.partition for m in a.messages.values() if m.position is not None)
        judged = sum(n for n in per_partition.values() if n > 1)
        if not judged:
            return False, "no partition has two sends with positions"
        return True, f"{_plural(judged, 'send')} on {_plural(len(per_partition), 'partition')}"

    def order() -> tuple[bool, str]:
        placed = {d.subscription for d in a.deliveries if d.position is not None}
        ordered = [sub for sub in placed if a.kind(sub) not in ("Shared", "mixed")]
        if not ordered:
            return False, "no delivery with a position on a subscription that dispatches in order"
        return True, f"{_plural(len(ordered), 'ordered subscription')}"

    def early() -> tuple[bool, str]:
        delayed = [m for m in a.messages.values() if m.deliver_at is not None]
        if not delayed:
            return False, "no delayed message"
        held = [(d, m) for d, m in a.delivered_delayed() if a.holds_delays(d.subscription)]
        if not held:
            return False, f"{_plural(len(delayed), 'delayed message')}, none received where delays are held back"
        # A delivery can be seen early only if its time, less the earliness a non-strict broker may
        # take, comes after its send was invoked (a receive cannot return a message before that).
        seen = [d for d, m in held if m.deliver_at is not None and m.deliver_at - m.early_ms > m.send.invoked_at]
        if not seen:
            longest = max((m.deliver_at or 0) - m.send.invoked_at for _, m in held)
            allowed = max(m.early_ms for _, m in held)
            return False, (
                f"cannot judge: every delay (at most {longest} ms) is within the allowed earliness "
                f"({allowed} ms, deliver_early_ms): no delivery of the {_plural(len(held), 'delivery')} could be early "
                f"enough to be seen"
            )
        return True, f"{_plural(len(held), 'delivery')} of delayed messages on Shared or Key_Shared subscriptions"

    def late() -> tuple[bool, str]:
        bounded = [m for m in a.messages.values() if m.deliver_at is not None and m.within_ms is not None]
        if not bounded:
            return False, "no delayed message states a bound (deliver_within_ms)"
        bounds = sorted({m.within_ms or 0 for m in bounded})
        return True, f"{_plural(len(bounded), 'delayed message')} with a bound of {'/'.join(map(str, bounds))} ms"

    def redelivery() -> tuple[bool, str]:
        nacks = sum(
            1
            for ops in a.negative_acks.values()
            for op in ops
            if isinstance(op.args, dict) and "redeliver_within_ms" in op.args
        )
        timed = sum(
            1
            for ops in a.subscribes.values()
            for op in ops
            if isinstance(op.args, dict) and "ack_timeout_ms" in op.args and "redeliver_within_ms" in op.args
        )
        if not nacks and not timed:
            return False, "no negative ack or ack timeout states a redelivery bound"
        return True, f"{_plural(nacks, 'negative ack')}, {_plural(timed, 'consumer')} with an ack timeout"

    return {
        "garbage-read": garbage,
        "inconsistent-position": positions,
        "lost-message": loss,
        "realtime-order": realtime,
        "out-of-order-delivery": order,
        "early-delivery": early,
        "late-delivery": late,
        "lost-redelivery": redelivery,
    }


def _txn_statements(a: TxnAnalysis) -> dict[str, Statement]:
    txns = set(a.commits) | set(a.aborts)
    txn_messages = _txn_messages(a)
    read = _delivered_partitions(a)
    no_txn = (False, "no transaction in the history")

    def commit_abort() -> tuple[bool, str]:
        return (True, f"{_plural(len(txns), 'transaction')} ended") if txns else no_txn

    def txn_reads(fates: tuple[TxnFate, ...], words: str) -> Statement:
        def statement() -> tuple[bool, str]:
            if not txn_messages:
                return False, "no transactional send"
            mine = [m for m in txn_messages if a.fate(m.txn) in fates]
            seen = [m for m in mine if m.partition in read]
            if not seen:
                return False, f"no message of a {words} transaction on a partition anyone read"
            return True, f"{_plural(len(seen), 'message')} of {words} transactions on partitions that were read"

        return statement

    def fractured() -> tuple[bool, str]:
        groups = Counter(
            (m.txn, m.partition) for m in txn_messages if a.fate(m.txn) is TxnFate.COMMITTED and m.position is not None
        )
        multi = [key for key, n in groups.items() if n > 1 and key[1] in read]
        if not multi:
            return False, "no committed transaction with two messages on a partition that was read"
        return True, f"{_plural(len(multi), 'committed transaction')} with several messages on a read partition"

    def duplicates() -> tuple[bool, str]:
        committed = [k for k in a.acks if a.fate(k.txn) is TxnFate.COMMITTED]
        if not committed:
            return False, "no acknowledgement inside a committed transaction" if txns else no_txn[1]
        return True, f"{_plural(len(committed), 'ack')} inside committed transactions"

    def abort_redelivery() -> tuple[bool, str]:
        aborted = [
            k
            for k in a.acks
            if a.fate(k.txn) is TxnFate.ABORTED and not k.cumulative and a.kind(k.subscription) == "Exclusive"
        ]
        if not aborted:
            return (
                False,
                "no individual ack of an aborted transaction on an Exclusive subscription" if txns else no_txn[1],
            )
        return True, f"{_plural(len(aborted), 'ack')} of aborted transactions on Exclusive subscriptions"

    def cycles() -> tuple[bool, str]:
        readers = [k for k in a.acks if a.fate(k.txn) is TxnFate.COMMITTED]
        if not readers or not txn_messages:
            return False, "no committed transaction both consumed and produced" if txns else no_txn[1]
        return True, f"{_plural(len(readers), 'ack')} in committed transactions, {_plural(len(txn_messages), 'send')}"

    return {
        "commit-and-abort": commit_abort,
        "aborted-read": txn_reads((TxnFate.ABORTED,), "aborted"),
        "uncommitted-read": txn_reads((TxnFate.OPEN,), "never ended"),
        "premature-read": txn_reads((TxnFate.COMMITTED, TxnFate.UNKNOWN), "committed"),
        "fractured-read": fractured,
        "duplicate-after-commit": duplicates,
        "missing-redelivery": abort_redelivery,
        "cyclic-information-flow": cycles,
    }


def applicability(ops: Sequence[Operation]) -> list[Applicability]:
    """Every check of :data:`~invariants.transactional.CHECKS`, in its order, with whether it applies
    to these client operations and what it had to look at (raises what ``TxnAnalysis.build`` raises
    on a malformed history)."""
    analysis = TxnAnalysis.build(ops)
    return applicability_of(analysis, check_transactional(ops, analysis=analysis))


def applicability_of(analysis: TxnAnalysis, result: TxnResult | None = None) -> list[Applicability]:
    """:func:`applicability` of a history already analysed, and checked when ``result`` is given: a
    check that counts the cases it judged (``result.judged``: loss, and the liveness checks) and
    judged none cannot judge the history, whatever it holds, and says why (its most frequent
    reasons, ``result.unjudged``)."""
    with without_cyclic_gc():  # invariants.heap: its indexes are more small objects without cycles
        return _applicability_of(analysis, result)


def _applicability_of(analysis: TxnAnalysis, result: TxnResult | None) -> list[Applicability]:
    statements = _statements(analysis)
    transactions = bool(analysis.commits or analysis.aborts or analysis.acks or _txn_messages(analysis))
    out = []
    for name in CHECKS:
        if GROUPS[name] == "transactional" and not transactions:
            out.append(Applicability(name, GROUPS[name], False, "no transaction in the history"))
            continue
        applies, evidence = statements[name]()
        if applies and result is not None and name in result.judged and not result.judged[name]:
            why = _reasons(result.unjudged[name]) if name in result.unjudged else "no case to judge"
            applies, evidence = False, f"cannot judge: {why} ({evidence})"
        out.append(Applicability(name, GROUPS[name], applies, evidence))
    return out


def _reasons(why: dict[str, int]) -> str:
    """The reasons a check could not judge its cases, the most frequent first, each with its count
    when there are several."""
    ranked = sorted(why.items(), key=lambda kv: (-kv[1], kv[0]))
    if len(ranked) == 1:
        return ranked[0][0]
    return "; ".join(f"{reason} (x{n})" for reason, n in ranked[:3]) + ("; ..." if len(ranked) > 3 else "")


def describe(found: Sequence[Applicability], ops: Sequence[Operation]) -> str:
    """A few lines for a person: what was recorded and which checks had nothing to judge."""
    txns = any(op.f in ("commit", "abort") for op in ops)
    unknown = sum(op.type.indeterminate for op in ops)
    lines = [
        f"{len(ops)} client operations, {'with' if txns else 'without'} transactions, "
        f"{_plural(unknown, 'operation')} of unknown outcome"
    ]
    for group in ("delivery", "transactional"):
        mine = [f for f in found if f.group == group]
        applied = [f.check for f in mine if f.applies]
        absent = [f"{f.check} ({f.evidence})" for f in mine if not f.applies]
        lines.append(f"{group} checks applied: {', '.join(applied) or 'none'}")
        if absent:
            lines.append(f"{group} checks with nothing to judge: {'; '.join(absent)}")
    return "\n".join(lines)
