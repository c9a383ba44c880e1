"""The partitions of the composed model: each one's transaction buffer (:mod:`reference.buffer`),
the appends parked while its first snapshot is written, and its payload (what was stored where).

A partition slot is ``(buffer digest, parked ((client, seq, op, deliver_at), ...), payload
(((ledger, entry), client, seq, op, deliver_at), ...))``; beside it the history variables of the
transactions it ended and those a late send re-opened after that.
"""

from __future__ import annotations

from typing import Any

from proofs.check.machines import Machines
from proofs.check.program import ModelSpec
from proofs.check.state import (
    BUFFER_TOPIC,
    CODE,
    ENDP_RESP,
    PUBLISHED,
    SEND_RESP,
    Layout,
    Successor,
    WorkingState,
    error_code,
    pos_of,
)
from proofs.check.store import Store
from proofs.check.transitions import AddSuccessor
from reference import buffer as tb
from spec.result import Ok
from spec.types import Position, TxnAction, TxnID

__all__ = ["Partitions", "deliver_at"]


def deliver_at(w: WorkingState, p: int, pos: tuple[int, int]) -> int:
    """When the message at ``pos`` of partition ``p`` may be delivered (``-1``: at once)."""
    for entry in w.parts[p][2]:
        if entry[0] == pos:
            return int(entry[4])
    return -1


class Partitions:
    """The partitions' transitions: appends, ends of transactions, snapshots, plain publishes."""

    def __init__(self, spec: ModelSpec, layout: Layout, store: Store, machines: Machines, add: AddSuccessor) -> None:
        self.spec = spec
        self.layout = layout
        self.store = store
        self.value = store.get
        self.machines = machines
        self.add = add
        # What a partition's actions read and write (fixed per model, so computed once): a request
        # to it (and its first snapshot), its snapshot timer, a publish.
        L = layout
        parts = range(spec.partitions)
        self._footprints = tuple((L.part(p), L.reopen(p), L.end(p)) for p in parts)
        self._snapshot_footprints = tuple((L.part(p),) for p in parts)
        self._publish_footprints = tuple((L.part(p), L.reopen(p)) for p in parts)

    def initial(self) -> list[tuple[Any, ...]]:
        """Each partition's slot: a fresh buffer with the model's preloaded messages."""
        spec = self.spec
        parts = []
        for p in range(spec.partitions):
            state = tb.initial(spec.config, topic=BUFFER_TOPIC)
            payload = []
            for i in range(spec.preload[p] if spec.preload else 0):
                state, result = tb.step(state, tb.PublishMessage())
                assert isinstance(result, Ok) and isinstance(result.value, Position)
                payload.append((pos_of(result.value), -1, -1, i, -1))
            parts.append((self.store.put(state), (), tuple(payload)))
        return parts

    def footprint(self, p: int) -> tuple[int, ...]:
        """What a request to partition ``p`` reads and writes."""
        return self._footprints[p]

    # --- requests ------------------------------------------------------------------------------

    def append(self, w: WorkingState, m: tuple[int, ...]) -> None:
        """A send reaches the partition: appendBufferToTxn (TB-4 .. TB-8)."""
        _kind, c, seq, p, op, deliver = m
        before = self.value(w.parts[p][0]).ongoing
        result = self.machines.buffer(w, p, tb.AppendBufferToTxn(TxnID(0, seq)))
        self._note_reopened(w, p, before, (seq,))
        if isinstance(result, Ok) and isinstance(result.value, tb.Queued):
            part = w.parts[p]
            w.parts[p] = (part[0], (*part[1], (c, seq, op, deliver)), part[2])
            return
        if isinstance(result, Ok):
            self._stored(w, p, result.value, c, seq, op, deliver)
        w.send((SEND_RESP, c, seq, op, error_code(result)))

    def _stored(self, w: WorkingState, p: int, position: Position, c: int, seq: int, op: int, deliver: int) -> None:
        part = w.parts[p]
        w.parts[p] = (part[0], part[1], (*part[2], (pos_of(position), c, seq, op, deliver)))

    def first_snapshot(self, w: WorkingState, p: int) -> None:
        """The first snapshot is durable: FirstSnapshotting -> Ready, parked appends written (TB-4)."""
        before = self.value(w.parts[p][0]).ongoing
        result = self.machines.buffer(w, p, tb.CompleteFirstSnapshot())
        part = w.parts[p]
        parked = part[1]
        self._note_reopened(w, p, before, tuple(x[1] for x in parked))
        w.parts[p] = (part[0], (), part[2])
        outcomes = result.value if isinstance(result, Ok) else ()
        for (c, seq, op, deliver), outcome in zip(parked, outcomes, strict=True):
            if outcome.position is not None:
                self._stored(w, p, outcome.position, c, seq, op, deliver)
                w.send((SEND_RESP, c, seq, op, 0))
            else:
                w.send((SEND_RESP, c, seq, op, CODE[outcome.error or "ServiceUnitNotReady"]))

    def _note_reopened(self, w: WorkingState, p: int, before: Any, seqs: tuple[int, ...]) -> None:
        """History variable: a send made ongoing a transaction whose end this partition had
        already processed (TB-8's re-open, quirk Q8)."""
        after = self.value(w.parts[p][0]).ongoing
        ended = w.ended[p]
        fresh = {seq for seq in seqs if seq in ended and TxnID(0, seq) in after and TxnID(0, seq) not in before}
        if fresh:
            w.reopened[p] = tuple(sorted({*w.reopened[p], *fresh}))

    def end_on_partition(self, w: WorkingState, m: tuple[int, ...]) -> None:
        """END_TXN_ON_PARTITION (TB-11 .. TB-14)."""
        _kind, epoch, seq, action, to, lwm, p = m
        txn = TxnID(0, seq)
        command = tb.CommitTxn(txn, lwm) if action == TxnAction.COMMIT else tb.AbortTxn(txn, lwm)
        result = self.machines.buffer(w, p, command)
        if isinstance(result, Ok):
            w.ended[p] = tuple(sorted({*w.ended[p], seq}))
        w.send((ENDP_RESP, epoch, seq, action, to, lwm, p, error_code(result)))

    def publish(self, w: WorkingState, p: int) -> None:
        """A plain producer publishes one normal message on partition ``p`` (TB-9)."""
        result = self.machines.buffer(w, p, tb.PublishMessage())
        if isinstance(result, Ok):
            part = w.parts[p]
            w.parts[p] = (part[0], part[1], (*part[2], (pos_of(result.value), -1, PUBLISHED, len(part[2]), -1)))

    # --- steps of their own ----------------------------------------------------------------------

    def actions(self, s: tuple[Any, ...], out: list[Successor]) -> None:
        """The first snapshot completing, and the snapshot timer where topics may crash."""
        add = self.add
        L = self.layout
        for p, part in enumerate(s[L.parts]):
            buffer = self.value(part[0])
            if buffer.status is tb.BufferStatus.FIRST_SNAPSHOTTING:
                add(
                    out,
                    s,
                    ("first-snapshot", p),
                    ("fs", p),
                    lambda w, p=p: self.first_snapshot(w, p),
                    self._footprints[p],
                )
            if (
                self.spec.faults.crash_partition
                and buffer.status is tb.BufferStatus.READY
                and buffer.change_max_read_position_count > 0
            ):
                # The timer's snapshots (TB-21) only matter to a recovery, so only where topics crash.
                add(
                    out,
                    s,
                    ("snapshot", p),
                    ("snap", p),
                    lambda w, p=p: self.machines.buffer(w, p, tb.TakeSnapshot()),
                    self._snapshot_footprints[p],
                )

    def publish_actions(self, s: tuple[Any, ...], out: list[Successor]) -> None:
        """The plain producers' publishes, up to each partition's count."""
        L = self.layout
        for p, count in enumerate(self.spec.publishes):
            published = sum(1 for entry in s[L.part(p)][2] if entry[2] == PUBLISHED)
            if published < count:
                self.add(
                    out, s, ("publish", p), ("pub", p), lambda w, p=p: self.publish(w, p), self._publish_footprints[p]
                )
