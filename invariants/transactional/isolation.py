"""What a transaction's readers may see, and how a transaction ends: the Adya anomalies (G1a, G1b,
G1c), Elle's fractured read (atomic visibility), and a transaction that both committed and aborted.
One function per anomaly, each reading the analysis (:mod:`invariants.analysis`)."""

from __future__ import annotations

import collections
import itertools
from collections import defaultdict
from typing import Any

from invariants.analysis import Message, Txn, TxnAnalysis, TxnFate
from invariants.graphs import strongly_connected_components
from invariants.transactional.anomaly import Collector, fmt_pos, fmt_txn
from invariants.words import seconds
from spec.history import Operation, OpType, parse_object, split_subscription

__all__ = [
    "aborted_reads",
    "commit_and_abort",
    "cyclic_information_flow",
    "fractured_reads",
    "premature_reads",
    "uncommitted_reads",
]


def commit_and_abort(a: TxnAnalysis, out: Collector) -> None:
    """``commit-and-abort``: one transaction both committed and aborted (a commit and an abort of it
    returned ok).  A transaction ends exactly once: COMMITTED and ABORTED are absorbing and neither is
    reachable from the other's path (TC-6), and the client learns the terminal status only (TC-15)."""
    for txn in set(a.commits) | set(a.aborts):
        c_ok = [o for o in a.commits[txn] if o.type is OpType.OK]
        a_ok = [o for o in a.aborts[txn] if o.type is OpType.OK]
        if c_ok and a_ok:
            out.add(
                "commit-and-abort",
                [c_ok[0], a_ok[0]],
                f"{fmt_txn(txn)}: commit op {c_ok[0].index} returned ok and abort op {a_ok[0].index} returned "
                f"ok; a transaction ends exactly once",
                where=fmt_txn(txn),
            )


def aborted_reads(a: TxnAnalysis, out: Collector) -> None:
    """``aborted-read`` (Adya G1a, Elle ``:G1a``): a message of a transaction that did not commit
    (an abort returned ok, or every end attempt completed without committing) was delivered.  The
    dispatcher skips and acknowledges an aborted transaction's messages (TB-16)."""
    for d, message in a.delivered_in_txn():
        txn = message.txn
        if txn is None or a.fate(txn) is not TxnFate.ABORTED:
            continue
        ended = a.aborts.get(txn, []) + a.commits.get(txn, [])
        how = "; ".join(f"{o.f} op {o.index} {o.type.value}{' ' + o.error if o.error else ''}" for o in ended)
        out.add(
            "aborted-read",
            [message.send, d.op, *ended],
            f"{d.payload!r} was sent in {fmt_txn(txn)} (op {message.send.index}), which did not commit "
            f"({how}); yet receive op {d.op.index} delivered it at {a.words.end(d.op)}",
            where=a.words.name(d.subscription),
        )


def uncommitted_reads(a: TxnAnalysis, out: Collector) -> None:
    """``uncommitted-read`` (Adya G1a, Elle ``:G1a``, for a transaction nobody ended): a message of a
    transaction that no commit or abort ever named was delivered.  An open transaction's messages lie
    beyond ``max_read_position`` and are never dispatched (TB-7, TB-15)."""
    for d, message in a.delivered_in_txn():
        txn = message.txn
        if txn is None or a.fate(txn) is not TxnFate.OPEN:
            continue
        out.add(
            "uncommitted-read",
            [message.send, d.op],
            f"{d.payload!r} was sent in {fmt_txn(txn)} (op {message.send.index}), which nobody ever "
            f"committed; yet receive op {d.op.index} delivered it at {a.words.end(d.op)}",
            where=a.words.name(d.subscription),
        )


def premature_reads(a: TxnAnalysis, out: Collector) -> None:
    """``premature-read`` (Adya G1b in this project's table): a receive completed before the first
    commit of the message's (committed or maybe-committed) transaction was even invoked, so the
    message was dispatched while its transaction was open: a dispatch beyond ``max_read_position``
    (TB-7, TB-15)."""
    for d, message in a.delivered_in_txn():
        txn = message.txn
        if txn is None or a.fate(txn) in (TxnFate.ABORTED, TxnFate.OPEN):
            continue
        start = a.first_commit_call(txn)
        if start is not None and d.op.completed_at is not None and d.op.completed_at < start:
            out.add(
                "premature-read",
                [message.send, d.op, *a.commits[txn]],
                f"receive op {d.op.index} delivered {d.payload!r} of {fmt_txn(txn)} by "
                f"{a.words.at(d.op.completed_at)}, {seconds(start - d.op.completed_at)} before the first commit of "
                f"that txn was even invoked (at {a.words.at(start)}): the message was dispatched while its "
                f"transaction was open",
                where=a.words.name(d.subscription),
                early_ms=start - d.op.completed_at,
            )


def fractured_reads(a: TxnAnalysis, out: Collector) -> None:
    """``fractured-read`` (atomic visibility; Elle's "fractured read" of read-atomic isolation): a
    subscription received some of a committed transaction's messages on a partition and read past
    (a later position delivered, or a final drain) the others.  Once nothing is open a committed
    transaction is visible whole (TB-19; the prefix it may show while another transaction is open
    is not read past)."""
    for f in a.fractures:
        out.add(
            "fractured-read",
            [f.seen.send, f.first.op, f.missing.send],
            f"{fmt_txn(f.txn)} committed with {f.size} messages on {a.words.name(f.view.partition)}; the "
            f"subscription received {f.seen.payload!r} (op {f.first.op.index}) and read past "
            f"{fmt_pos(f.missing.position)} without receiving {f.missing.payload!r} (sent by op "
            f"{f.missing.send.index}): the transaction became visible only in part",
            where=a.words.name(f.view.subscription),
        )


def cyclic_information_flow(a: TxnAnalysis, out: Collector) -> None:
    """``cyclic-information-flow`` (Adya G1c, Elle ``:G1c``): a cycle of write-read edges between
    committed transactions.

    Edge ``Tw -> Tr``: Tr acknowledged (inside Tr) the position of a message Tw produced, so Tr
    consumed Tw's output.  Under read-committed Tr can only have seen it after Tw committed (an open
    or aborted transaction's messages are never dispatched: TB-15, TB-16), so Tw committed before Tr
    did; a cycle of such edges is impossible.  Found with Tarjan's strongly connected components,
    one shortest cycle per component, every edge explained.
    """
    edges: dict[Txn, dict[Txn, tuple[Message, Operation]]] = defaultdict(dict)
    for ack in a.acks:
        partition, _ = split_subscription(parse_object(ack.subscription)[1])
        for message in a.acked_messages(partition, ack.position):
            if message.txn is None or message.txn == ack.txn:
                continue
            if a.fate(message.txn) is TxnFate.COMMITTED and a.fate(ack.txn) is TxnFate.COMMITTED:
                edges[message.txn].setdefault(ack.txn, (message, ack.op))
    for cycle in _cycles(edges):
        steps = []
        ops: list[Operation] = []
        drawn: list[tuple[str, str, str]] = []  # the cycle edge by edge, for the viewer to draw
        for writer, reader in itertools.pairwise([*cycle, cycle[0]]):
            message, ack_op = edges[writer][reader]
            ops += [message.send, ack_op]
            steps.append(
                f"{fmt_txn(reader)} consumed {message.payload!r} that {fmt_txn(writer)} produced (send op "
                f"{message.send.index}, acked in {fmt_txn(reader)} by op {ack_op.index}), so "
                f"{fmt_txn(writer)} committed first"
            )
            drawn.append(
                (
                    fmt_txn(writer),
                    fmt_txn(reader),
                    f"{message.payload!r}: sent by op {message.send.index}, acked by op {ack_op.index}",
                )
            )
        out.add(
            "cyclic-information-flow",
            ops,
            "; ".join(steps) + "; a transaction cannot commit before itself",
            tuple(drawn),
            where=" -> ".join(fmt_txn(txn) for txn in cycle),
        )


def _cycles(edges: dict[tuple[int, int], dict[tuple[int, int], Any]]) -> list[list[tuple[int, int]]]:
    """One shortest cycle per strongly connected component (Tarjan, then BFS inside the component)."""
    components = strongly_connected_components(edges)
    cycles = []
    for component in components:
        members = set(component)
        start = component[0]
        parent: dict[tuple[int, int], tuple[int, int]] = {}
        queue = collections.deque([start])
        found = None
        while queue and found is None:
            node = queue.popleft()
            for child in sorted(edges.get(node, {})):
                if child not in members:
                    continue
                if child == start:
                    found = node
                    break
                if child not in parent:
                    parent[child] = node
                    queue.append(child)
        if found is None:
            continue
        path = [found]
        while path[-1] != start:
            path.append(parent[path[-1]])
        cycles.append(list(reversed(path)))
    return cycles
