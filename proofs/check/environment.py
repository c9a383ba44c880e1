"""The environment of the composed model: losses, duplicates, crashes and reloads, roll-overs and
retention (methods of :class:`proofs.check.model.Model`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proofs.check.state import (
    _DUPLICABLE,
    _PUBLISHED,
    _TIMEOUT_CODE,
    _W,
    CAUX,
    CLOG,
    COORD,
    DECIDED,
    ENDP,
    ENDP_RESP,
    ENDS,
    ENDS_RESP,
    SEND_RESP,
    USED,
    Successor,
    _duplicate,
    _pos,
)
from reference import buffer as tb
from reference import coordinator as tc
from reference import pending_ack as pa
from reference.ledger import consumed_ledgers
from spec.result import Err

if TYPE_CHECKING:
    from proofs.check.model import Model


_CRASH_COORDINATOR = (COORD, CLOG, CAUX, DECIDED, USED)  # the coordinator's footprint and the fault budget


def _environment_actions(self: Model, s: tuple[Any, ...], out: list[Successor], messages: set[tuple[int, ...]]) -> None:
    faults = self.spec.faults
    used = s[USED]
    if used[0] < faults.loss:
        for m in sorted(messages):
            self._add(out, s, ("lose", m), None, lambda w, m=m: self._lose(w, m))
    if used[1] < faults.duplicate:
        kinds = {_DUPLICABLE[k] for k in faults.duplicable}
        for m in sorted(messages):
            if m[0] in kinds:
                self._add(out, s, ("duplicate", m), None, lambda w, m=m: _duplicate(w, m))
    if used[2] < faults.crash_coordinator:
        self._add(out, s, ("crash-coordinator",), None, self._crash_coordinator, _CRASH_COORDINATOR)
    if used[3] < faults.crash_partition:
        for p in range(self.spec.partitions):
            self._add(
                out,
                s,
                ("crash-partition", p),
                None,
                lambda w, p=p: self._crash_partition(w, p),
                self._topic_footprint(p),
            )
    if used[4] < faults.rollover:
        for p in range(self.spec.partitions):
            self._add(out, s, ("roll-over", p), None, lambda w, p=p: self._roll_over(w, p), (self.layout.part(p), USED))
    if used[5] < faults.retention:
        for p in range(self.spec.partitions):
            self._add(out, s, ("retention", p), None, lambda w, p=p: self._retention(w, p), self._topic_footprint(p))


def _lose(self: Model, w: _W, m: tuple[int, ...]) -> None:
    w.take(m)
    w.used[0] += 1
    if m[0] in (ENDP, ENDS):
        # The TB client times out the request: the coordinator hears RequestTimeout (retryable).
        w.send((m[0] + 1, *m[1:], _TIMEOUT_CODE))
    elif m[0] in (ENDP_RESP, ENDS_RESP):
        w.send((*m[:-1], _TIMEOUT_CODE))


def _crash_coordinator(self: Model, w: _W) -> None:
    """Memory lost; the store reloads from its log (TC-21 .. TC-25), as the engine's load."""
    w.used[2] += 1
    if self.batched is not None:
        self.batched.crash(w)
        return
    records, max_local = self.value(w.clog)
    renumbered = tuple((i, record) for i, (_rid, record) in enumerate(records))
    state, effects = self.store.memo(
        ("tc-recover", w.clog),
        lambda: tc.recover(self.config, 0, renumbered, max_local, next_record_id=len(renumbered)),
    )
    log = list(renumbered)
    timers = []
    for effect in effects:
        if isinstance(effect, tc.DeleteRecords):
            doomed = set(effect.record_ids)
            log = [r for r in log if r[0] not in doomed]
        elif isinstance(effect, tc.ScheduleResumeEndTxn):
            timers.append((effect.txn_id.least_sig_bits, int(effect.action), int(effect.is_timeout)))
    w.coord = self.store.put(state)
    w.clog = self.store.put((tuple(log), max(max_local, state.sequence_id)))
    w.caux[:] = [w.caux[0] + 1, (), (), tuple(sorted(set(timers)))]


def _crash_partition(self: Model, w: _W, p: int) -> None:
    """The topic crashes or is unloaded and loaded again: the buffer recovers from its ledgers
    and snapshot topics (TB-1, TB-24); each subscription reopens its cursor and replays its
    pending-ack log (PA-17 .. PA-20).  Parked appends and queued requests are lost with the
    topic's memory: their callers' requests time out (the connection is gone), which is the
    answer they get here."""
    w.used[3] += 1
    self._buf_step(w, p, tb.ReloadTopic())
    self._buf_step(w, p, tb.StartRecovery())
    self._buf_step(w, p, tb.CompleteRecovery())
    part = w.parts[p]
    w.parts[p] = (part[0], (), part[2])
    for c, seq, op, _deliver_at in part[1]:
        w.send((SEND_RESP, c, seq, op, _TIMEOUT_CODE))
    for s in self.subs_of[p]:
        sub = w.subs[s]
        for request, _extra in sub[6]:
            w.send((*request, _TIMEOUT_CODE))
        w.subs[s] = self._reload_subscription(sub, s)


def _reload_subscription(self: Model, sub: tuple[Any, ...], s: int) -> tuple[Any, ...]:
    live = self.value(sub[0])
    spec = self.spec.subscriptions[s]

    def reload() -> int:
        if not sub[2]:
            return self.store.put(pa.initial(self.config, sub_type=pa.SubType[spec.sub_type], cursor=live.cursor))
        records = tuple((i, r) for i, (_rid, r) in enumerate(self.value(sub[1])))
        state = pa.recover(
            self.config, records, cursor=live.cursor, sub_type=live.sub_type, next_record_id=len(records)
        )
        return self.store.put(state)

    state_d = self.store.memo(("pa-reload", sub[0], sub[1], sub[2]), reload)
    log = self.value(sub[1])
    renumbered = self.store.put(tuple((i, r) for i, (_rid, r) in enumerate(log)))
    cursor = self.value(state_d).cursor
    return (state_d, renumbered, sub[2], _pos(cursor.mark_delete_position), (), (), (), 0)


def _roll_over(self: Model, w: _W, p: int) -> None:
    w.used[4] += 1
    self._buf_step(w, p, tb.RollOverLedger())


def _retention(self: Model, w: _W, p: int) -> bool:
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
    result = self._buf_step(w, p, tb.DeleteLedger(ledger))
    if isinstance(result, Err):
        return False
    w.used[5] += 1
    part = w.parts[p]
    # A published entry stays (as the count of what the producer published), the rest goes.
    kept = tuple(e for e in part[2] if e[0][0] != ledger or e[2] == _PUBLISHED)
    w.parts[p] = (part[0], part[1], kept)
    return True
