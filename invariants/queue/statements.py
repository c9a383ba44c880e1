"""Which checks of Jepsen's taxonomy a history gives something to judge, in words (the statements
``txnmodel verify`` prints beside every verdict, so that a check with nothing to judge is never
read as a pass)."""

from __future__ import annotations

from collections.abc import Iterator

from invariants.queue.model import QueueHistory
from invariants.queue.pulsar import PulsarView
from invariants.queue.taxonomy import (
    CYCLES,
    KAFKA_CHECKS,
    PULSAR_CHECKS,
    PULSAR_INFORMATIONAL,
    KafkaOptions,
    Statement,
    kafka_informational,
)
from spec.history import OpType

__all__ = ["kafka_statements", "pulsar_statements"]


def _n(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _kafka_evidence(q: QueueHistory, options: KafkaOptions) -> dict[str, tuple[bool, str]]:
    units = q.units
    reads = sum(len(u.reads) for u in units)
    ok_polls = [u for u in units if u.type is OpType.OK and u.reads]
    failed_sends = [u for u in units if u.type is OpType.FAIL and u.writes]
    placed = sum(len(order.offsets) for order in q.orders.values())
    repeat_reads = [u for u in units if any(len(v) > 1 for v in u.read_keys().values())]
    repeat_sends = [
        u for u in units if u.type is not OpType.INVOKE and any(len(v) > 1 for v in u.write_keys().values())
    ]
    both = [u for u in units if u.reads and u.writes]
    polls_per_process = sum(max(0, sum(1 for e in t if getattr(e, "reads", None)) - 1) for t in q.timelines.values())
    sends_per_process = sum(max(0, sum(1 for e in t if getattr(e, "writes", None)) - 1) for t in q.timelines.values())
    ok_sends = [u for u in units if u.type is OpType.OK and u.writes]
    graph = [u for u in units if u.type in (OpType.OK, OpType.INFO)]
    none = "nothing was polled"
    return {
        "garbage-read": (reads > 0, f"{_n(reads, 'value')} polled" if reads else none),
        "inconsistent-offsets": (placed > 0, f"{_n(placed, 'offset')} known" if placed else "no offset is known"),
        "duplicate": (placed > 0, f"{_n(placed, 'offset')} known" if placed else "no offset is known"),
        "G1a": (
            bool(failed_sends and ok_polls),
            f"{_n(len(failed_sends), 'failed operation')} that sent, {_n(len(ok_polls), 'ok poll')}",
        ),
        "precommitted-read": (bool(both), f"{_n(len(both), 'operation')} that both sent and polled"),
        "lost-write": (bool(ok_polls and placed), f"{_n(len(ok_polls), 'ok poll')} that returned something"),
        "poll-skip": (polls_per_process > 0, f"{_n(polls_per_process, 'poll')} after an earlier one of its process"),
        "nonmonotonic-poll": (polls_per_process > 0, f"{_n(polls_per_process, 'poll')} after an earlier one"),
        "nonmonotonic-send": (sends_per_process > 0, f"{_n(sends_per_process, 'send operation')} after an earlier one"),
        "int-poll-skip": (bool(repeat_reads), f"{_n(len(repeat_reads), 'operation')} that polled a key twice"),
        "int-nonmonotonic-poll": (bool(repeat_reads), f"{_n(len(repeat_reads), 'operation')} that polled a key twice"),
        "int-send-skip": (bool(repeat_sends), f"{_n(len(repeat_sends), 'operation')} that sent to a key twice"),
        "int-nonmonotonic-send": (bool(repeat_sends), f"{_n(len(repeat_sends), 'operation')} that sent to a key twice"),
        "G1b": (bool(ok_polls and repeat_sends), "ok polls, and operations that sent to a key twice"),
        "unseen": (bool(ok_sends), f"{_n(len(ok_sends), 'ok send operation')}"),
        "realtime-lag": (bool(ok_polls), f"{_n(len(ok_polls), 'ok poll')}"),
        "G0": (options.ww_deps and len(graph) > 1, "ww dependencies inferred" if options.ww_deps else "no --ww-deps"),
        "G1c": (len(graph) > 1 and reads > 0, f"{_n(len(graph), 'operation')} that committed or may have"),
        "G0-realtime": (
            options.ww_deps and options.realtime and len(graph) > 1,
            "ww and real-time dependencies" if options.ww_deps else "no --ww-deps",
        ),
        "G1c-realtime": (options.realtime and len(graph) > 1 and reads > 0, "write-read and real-time dependencies"),
    }


def kafka_statements(q: QueueHistory, options: KafkaOptions) -> Iterator[Statement]:
    """Each check of a Kafka-workload history, in the order they run, with whether it applies."""
    informational = kafka_informational(q, options)
    evidence = _kafka_evidence(q, options)
    for name in [*KAFKA_CHECKS, *CYCLES]:
        applies, words = evidence[name]
        if name in informational:
            words += " (informational: it does not fail the history, as in Jepsen)"
        yield Statement(name, "kafka", applies, words)


def pulsar_statements(v: PulsarView) -> Iterator[Statement]:
    """Each check of the taxonomy judged on a Pulsar history, with whether it applies (the others
    are judged there under txnmodel's name, or mean nothing for Pulsar: :mod:`invariants.queue.taxonomy`)."""
    a = v.a
    exclusive = [sub for sub in a.subscribes if v.exclusive(sub)]
    delivered = {d.subscription for d in a.deliveries if d.position is not None}
    judged = [sub for sub in exclusive if sub in delivered]
    unplaced = [m for m in a.messages.values() if m.position is None and not m.repeatable and m.payload in v.delivered]
    receives = len(a.deliveries) + sum(len(ops) for ops in a.drains.values())
    evidence = {
        "poll-skip": (bool(judged), f"{_n(len(judged), 'Exclusive subscription')} with deliveries"),
        "lost-write": (bool(judged), f"{_n(len(judged), 'Exclusive subscription')} with deliveries"),
        "duplicate": (bool(unplaced), f"{_n(len(unplaced), 'delivered message')} whose send returned no position"),
        "unseen": (bool(v.owed), f"{_n(sum(len(o) for o in v.owed.values()), 'message')} owed to subscriptions"),
        "realtime-lag": (receives > 0, f"{_n(receives, 'receive')}"),
    }
    for name in PULSAR_CHECKS:
        applies, words = evidence[name]
        if name in PULSAR_INFORMATIONAL:
            words += " (informational)"
        if not applies and name in ("poll-skip", "lost-write"):
            words = "no Exclusive, durable subscription delivered anything"
        yield Statement(name, "jepsen", applies, words)
