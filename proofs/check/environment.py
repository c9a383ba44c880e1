"""The environment of the composed model: losses, duplicates, crashes and reloads, roll-overs and
retention, each within the model's fault budget (:class:`proofs.check.program.Faults`).  Its steps
belong to no fairness family: a fault may happen, never must."""

from __future__ import annotations

from typing import Any

from proofs.check.coordinator import Coordinator
from proofs.check.machines import Machines
from proofs.check.program import ModelSpec
from proofs.check.state import (
    CAUX,
    CLOG,
    COORD,
    DECIDED,
    DUPLICABLE,
    ENDP,
    ENDP_RESP,
    ENDS,
    ENDS_RESP,
    PUBLISHED,
    SEND_RESP,
    TIMEOUT_CODE,
    USED,
    Layout,
    Successor,
    WorkingState,
)
from proofs.check.store import Store
from proofs.check.subscriptions import Subscriptions
from proofs.check.transitions import AddSuccessor
from reference import buffer as tb
from reference.ledger import consumed_ledgers
from spec.result import Err

__all__ = ["Environment"]

_CRASH_COORDINATOR = (COORD, CLOG, CAUX, DECIDED, USED)  # the coordinator's footprint and the fault budget


class Environment:
    """The faults the environment may inject in a state, and what each does."""

    def __init__(
        self,
        spec: ModelSpec,
        layout: Layout,
        store: Store,
        machines: Machines,
        add: AddSuccessor,
        coordinator: Coordinator,
        subscriptions: Subscriptions,
    ) -> None:
        self.spec = spec
        self.layout = layout
        self.value = store.get
        self.machines = machines
        self.add = add
        self.coordinator = coordinator
        self.subscriptions = subscriptions
        self.subs_of: tuple[tuple[int, ...], ...] = tuple(
            tuple(s for s, sub in enumerate(spec.subscriptions) if sub.partition == p) for p in range(spec.partitions)
        )
        L = layout
        # What a crash or a retention of each partition's topic reads and writes, and a roll-over.
        self.topic_footprints = tuple(
            (L.part(p), *(L.sub(s) for s in self.subs_of[p]), L.reopen(p), L.end(p), USED)
            for p in range(spec.partitions)
        )
        self._rollover_footprints = tuple((L.part(p), USED) for p in range(spec.partitions))

    def actions(self, s: tuple[Any, ...], out: list[Successor], messages: set[tuple[int, ...]]) -> None:
        """Every fault the budget left in ``s`` allows; ``messages`` are the distinct ones in flight."""
        add = self.add
        faults = self.spec.faults
        used = s[USED]
        if used[0] < faults.loss:
            for m in sorted(messages):
                add(out, s, ("lose", m), None, lambda w, m=m: self._lose(w, m))
        if used[1] < faults.duplicate:
            kinds = {DUPLICABLE[k] for k in faults.duplicable}
            for m in sorted(messages):
                if m[0] in kinds:
                    add(out, s, ("duplicate", m), None, lambda w, m=m: _duplicate(w, m))
        if used[2] < faults.crash_coordinator:
            add(out, s, ("crash-coordinator",), None, self._crash_coordinator, _CRASH_COORDINATOR)
        if used[3] < faults.crash_partition:
            for p in range(self.spec.partitions):
                add(
                    out,
                    s,
                    ("crash-partition", p),
                    None,
                    lambda w, p=p: self._crash_partition(w, p),
                    self.topic_footprints[p],
                )
        if used[4] < faults.rollover:
            for p in range(self.spec.partitions):
                add(out, s, ("roll-over", p), None, lambda w, p=p: self._roll_over(w, p), self._rollover_footprints[p])
        if used[5] < faults.retention:
            for p in range(self.spec.partitions):
                add(out, s, ("retention", p), None, lambda w, p=p: self._retention(w, p), self.topic_footprints[p])

    def _lose(self, w: WorkingState, m: tuple[int, ...]) -> None:
        w.take(m)
        w.used[0] += 1
        if m[0] in (ENDP, ENDS):
            # The TB client times out the request: the coordinator hears RequestTimeout (retryable).
            w.send((m[0] + 1, *m[1:], TIMEOUT_CODE))
        elif m[0] in (ENDP_RESP, ENDS_RESP):
            w.send((*m[:-1], TIMEOUT_CODE))

    def _crash_coordinator(self, w: WorkingState) -> None:
        w.used[2] += 1
        self.coordinator.crash(w)

    def _crash_partition(self, w: WorkingState, p: int) -> None:
        """The topic crashes or is unloaded and loaded again: the buffer recovers from its ledgers
        and snapshot topics (TB-1, TB-24); each subscription reopens its cursor and replays its
        pending-ack log (PA-17 .. PA-20).  Parked appends and queued requests are lost with the
        topic's memory: their callers' requests time out (the connection is gone), which is the
        answer they get here."""
        w.used[3] += 1
        self.machines.buffer(w, p, tb.ReloadTopic())
        self.machines.buffer(w, p, tb.StartRecovery())
        self.machines.buffer(w, p, tb.CompleteRecovery())
        part = w.parts[p]
        w.parts[p] = (part[0], (), part[2])
        for c, seq, op, _deliver_at in part[1]:
            w.send((SEND_RESP, c, seq, op, TIMEOUT_CODE))
        for s in self.subs_of[p]:
            sub = w.subs[s]
            for request, _extra in sub[6]:
                w.send((*request, TIMEOUT_CODE))
            w.subs[s] = self.subscriptions.reload(sub, s)

    def _roll_over(self, w: WorkingState, p: int) -> None:
        w.used[4] += 1
        self.machines.buffer(w, p, tb.RollOverLedger())

    def _retention(self, w: WorkingState, p: int) -> bool:
        """Retention deletes the oldest ledger every cursor has consumed, if the buffer agrees (TB-23)."""
        subs = self.subs_of[p]
        if not subs:
            return False  # the engine never trims a topic without subscriptions
        buffer = self.value(w.parts[p][0])
        marks = [self.value(w.subs[s][0]).cursor.mark_delete_position for s in subs]
        consumed = consumed_ledgers(buffer.ledgers, buffer.ledgers[-1].ledger_id, marks)
        if not consumed:
            return False
        ledger = consumed[0]
        result = self.machines.buffer(w, p, tb.DeleteLedger(ledger))
        if isinstance(result, Err):
            return False
        w.used[5] += 1
        part = w.parts[p]
        # A published entry stays (as the count of what the producer published), the rest goes.
        kept = tuple(e for e in part[2] if e[0][0] != ledger or e[2] == PUBLISHED)
        w.parts[p] = (part[0], part[1], kept)
        return True


def _duplicate(w: WorkingState, m: tuple[int, ...]) -> None:
    w.used[1] += 1
    w.send(m)
