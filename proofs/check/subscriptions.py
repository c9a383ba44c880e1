"""The subscriptions of the composed model: each one's pending ack (:mod:`reference.pending_ack`)
over its log and cursor, with the dispatcher the engine puts in front of it and, for delayed
delivery, a tracker (:mod:`reference.delayed`).

A subscription slot is ``(pending-ack digest, log digest, log exists, read after (ledger, entry),
ready ((ledger, entry), ...), handed (((ledger, entry), consumer), ...), queued ((answer, extra),
...), tracker digest or 0)``; beside it the history variables of the acknowledgements committed
on it, the transactions whose end it processed and those a late ack re-opened after that.
"""

from __future__ import annotations

from typing import Any

from invariants import composed
from proofs.check.machines import Machines
from proofs.check.partitions import deliver_at
from proofs.check.program import ModelSpec
from proofs.check.state import (
    ACK_REQ,
    ACK_RESP,
    BAD,
    CLOCK,
    ENDS,
    ENDS_RESP,
    NO_POS,
    Layout,
    Successor,
    WorkingState,
    error_code,
    pos_of,
)
from proofs.check.store import Store
from proofs.check.transitions import AddSuccessor
from reference import buffer as tb
from reference import delayed as dl
from reference import pending_ack as pa
from spec.result import Ok
from spec.types import AckType, MessageState, Position, TxnAction, TxnID

__all__ = ["Subscriptions"]


class Subscriptions:
    """The subscriptions' transitions: acknowledgements and ends in transactions, the pending-ack
    store opening, the dispatcher reading the partition and handing messages out, the readers."""

    def __init__(self, spec: ModelSpec, layout: Layout, store: Store, machines: Machines, add: AddSuccessor) -> None:
        self.spec = spec
        self.layout = layout
        self.store = store
        self.value = store.get
        self.machines = machines
        self.add = add
        consumed = {
            op.target for program in spec.programs for script in program for op in script.ops if op.kind == "consume"
        }
        # Subscriptions no one reads: their dispatcher reads on its own (a separate action).
        self.unread = frozenset(i for i, sub in enumerate(spec.subscriptions) if not sub.reader and i not in consumed)
        # What each subscription's actions read and write (fixed per model, so computed once): a
        # request to it; a hand-out (its reader's or a consumer's); its dispatcher reading alone.
        L = layout
        subs = range(len(spec.subscriptions))
        part = [L.part(spec.subscriptions[i].partition) for i in subs]
        self._footprints = tuple((L.sub(i), L.ack(i)) for i in subs)
        self._reader_footprints = tuple((L.sub(i), L.ack(i), BAD, part[i], CLOCK) for i in subs)
        self._dispatch_footprints = tuple((L.sub(i), part[i], CLOCK, L.ack(i)) for i in subs)

    def initial(self) -> list[tuple[Any, ...]]:
        """Each subscription's slot: a pending ack at EARLIEST, no log yet, nothing read."""
        config = self.spec.config
        put = self.store.put
        subs = []
        for sub in self.spec.subscriptions:
            # The engine's cursor at EARLIEST starts just before the first ledger: (first, -1).
            cursor = pa.CursorView(Position(tb.initial(config).ledgers[0].ledger_id, -1))
            pending = pa.initial(config, sub_type=pa.SubType[sub.sub_type], cursor=cursor)
            subs.append((put(pending), put(()), 0, NO_POS, (), (), (), 0))
        return subs

    def footprint(self, s: int) -> tuple[int, ...]:
        """What a request to subscription ``s`` reads and writes."""
        return self._footprints[s]

    def reader_footprint(self, i: int) -> tuple[int, ...]:
        """What a hand-out of subscription ``i`` reads and writes (its reader's, or a consumer's)."""
        return self._reader_footprints[i]

    def consumer_allowed(self, c: int, s: int) -> bool:
        """Exclusive and Failover subscriptions serve one consumer: the first client that consumes."""
        if self.spec.subscriptions[s].sub_type not in ("Exclusive", "Failover"):
            return True
        first = next(
            (
                i
                for i, program in enumerate(self.spec.programs)
                if any(op.kind == "consume" and op.target == s for script in program for op in script.ops)
            ),
            None,
        )
        return first == c

    # --- requests ------------------------------------------------------------------------------

    def request(self, w: WorkingState, m: tuple[int, ...]) -> None:
        """An ack in a transaction, or END_TXN_ON_SUBSCRIPTION (PA-3 .. PA-16)."""
        if m[0] == ENDS:
            _kind, epoch, seq, action, to, lwm, s = m
            txn = TxnID(0, seq)
            command: Any = pa.CommitTxn(txn, lwm) if action == TxnAction.COMMIT else pa.AbortTxn(txn, lwm)
            request: tuple[int, ...] = (ENDS_RESP, epoch, seq, action, to, lwm, s)
            extra: tuple[int, ...] = ()
        else:
            _kind, c, seq, s, ledger, entry, op, cumulative = m
            acked = (pa.AckedPosition(Position(ledger, entry)),)
            txn = TxnID(0, seq)
            command = pa.CumulativeAck(txn, acked) if cumulative else pa.IndividualAck(txn, acked)
            request = (ACK_RESP, c, seq, op)
            extra = (ledger, entry)
        result = self.machines.pending_ack(w, s, command)
        if isinstance(result, Ok) and isinstance(result.value, pa.Queued):
            sub = w.subs[s]
            w.subs[s] = (*sub[:6], (*sub[6], (request, extra)), sub[7])
            self._effects(w, s, result, command)
            return
        self._effects(w, s, result, command)
        if isinstance(result, Ok):
            self._note_sub(w, s, m[0] == ENDS, seq)
        if m[0] == ACK_REQ and isinstance(result, Ok):
            self._unhand_if_held(w, s, (m[4], m[5]))
        w.send((*request, error_code(result)))

    def _note_sub(self, w: WorkingState, s: int, ended: bool, seq: int) -> None:
        """History variables of a subscription: the transactions whose end it processed, and those
        an acknowledgement re-opened after that (a late ack: it stays PENDING_ACK until a later low
        watermark, PA-14, as a late send re-opens a transaction on a buffer, TB-8)."""
        acks, ends, reopened = w.acks[s]
        if ended:
            w.acks[s] = (acks, tuple(sorted({*ends, seq})), reopened)
            return
        if seq in ends:
            state = self.value(w.subs[s][0])
            txn = TxnID(0, seq)
            slot = state.cumulative_ack
            if txn in state.individual_ack_of_transaction or (slot is not None and slot.txn_id == txn):
                w.acks[s] = (acks, ends, tuple(sorted({*reopened, seq})))

    def _unhand_if_held(self, w: WorkingState, s: int, pos: tuple[int, int]) -> None:
        """A message a txn acknowledged leaves its consumer's hands once no longer PENDING (5.9)."""
        sub = w.subs[s]
        state = self.value(sub[0])
        if pa.message_state(state, Position(*pos)) is not MessageState.PENDING:
            w.subs[s] = (*sub[:5], tuple(h for h in sub[5] if h[0] != pos), *sub[6:])

    def _effects(self, w: WorkingState, s: int, result: Any, command: Any) -> None:
        """Carry out a pending-ack step's effects: its log, the cursor, redeliveries."""
        sub = w.subs[s]
        log = list(self.value(sub[1]))
        avail, handed = list(sub[4]), list(sub[5])
        # Queued requests run at init: only a commit among them touches the cursor (PA-12).
        committed = isinstance(command, pa.CommitTxn | pa.PendingAckInitComplete)
        acks = list(w.acks[s][0])
        for effect in result.effects:
            if isinstance(effect, pa.AppendPendingAckRecord):
                log.append((effect.record_id, effect.record))
            elif isinstance(effect, pa.TrimPendingAckLog):
                log = [r for r in log if r[0] > effect.record_id]
            elif isinstance(effect, pa.CursorIndividualAck):
                gone = {pos_of(a.position) for a in effect.positions}
                handed = [h for h in handed if h[0] not in gone]
                if committed:
                    acks.extend((p, 0) for p in sorted(gone))
            elif isinstance(effect, pa.CursorCumulativeAck):
                upto = pos_of(effect.position.position)
                handed = [h for h in handed if h[0] > upto]
                if committed:
                    acks.append((upto, 1))
            elif isinstance(effect, pa.RedeliverUnacknowledgedMessages):
                back = {pos_of(p) for p in effect.positions}
                handed = [h for h in handed if h[0] not in back]
                avail = sorted(set(avail) | back)
        w.acks[s] = (tuple(sorted(set(acks))), *w.acks[s][1:])
        sub = w.subs[s]
        w.subs[s] = (sub[0], self.store.put(tuple(log)), sub[2], sub[3], tuple(avail), tuple(sorted(handed)), *sub[6:])

    def init_complete(self, w: WorkingState, s: int) -> None:
        """The pending-ack store opened (PA-17): the queued requests run, in order."""
        result = self.machines.pending_ack(w, s, pa.PendingAckInitComplete())
        sub = w.subs[s]
        queued = sub[6]
        w.subs[s] = (*sub[:2], 1, *sub[3:6], (), sub[7])
        self._effects(w, s, result, pa.PendingAckInitComplete())
        outcomes = result.value if isinstance(result, Ok) else ()
        for (request, extra), outcome in zip(queued, outcomes, strict=True):
            if isinstance(outcome, Ok):
                self._note_sub(w, s, request[0] == ENDS_RESP, request[2])
            if request[0] == ACK_RESP and isinstance(outcome, Ok):
                self._unhand_if_held(w, s, (extra[0], extra[1]))
            w.send((*request, error_code(outcome)))

    # --- the dispatcher ----------------------------------------------------------------------

    def refresh(self, w: WorkingState, s: int) -> None:
        """The dispatcher reads what the buffer lets it (TB-15 .. TB-17): markers and aborted
        messages are acknowledged away, messages become ready (delayed ones go to the tracker,
        DD-1), and the tracker's due messages become ready."""
        sub = w.subs[s]
        spec = self.spec.subscriptions[s]
        buffer = self.value(w.parts[spec.partition][0])
        read = tb.dispatch(buffer, Position(*sub[3]))
        if read.auto_acked:
            positions = tuple(pa.AckedPosition(p) for p in read.auto_acked)
            command = pa.NormalAck(AckType.INDIVIDUAL, positions)
            result = self.machines.pending_ack(w, s, command)
            self._effects(w, s, result, command)
        seen = [pos_of(p) for p in (*read.delivered, *read.auto_acked)]
        sub = w.subs[s]
        read_after = max([sub[3], *seen])
        fresh = []
        for position in read.delivered:
            at = deliver_at(w, spec.partition, pos_of(position))
            if spec.delayed and at >= 0:
                added = self.machines.delayed(w, s, dl.AddMessage(position.ledger_id, position.entry_id, at, w.clock))
                if isinstance(added, Ok) and added.value:
                    continue
            fresh.append(pos_of(position))
        if spec.delayed and w.subs[s][7] != 0:
            due = self.machines.delayed(w, s, dl.GetScheduledMessages(1 << 20, w.clock))
            if isinstance(due, Ok):
                fresh.extend(pos_of(p) for p in due.value)
        sub = w.subs[s]
        w.subs[s] = (*sub[:3], read_after, tuple(sorted({*sub[4], *fresh})), *sub[5:])

    def handout(self, sub: tuple[Any, ...]) -> tuple[int, int] | None:
        """The first message the subscription would hand out now: ready, still PENDING on the
        pending ack, held by no consumer."""
        if not sub[4]:
            return None
        state = self.value(sub[0])
        handed = {pos for pos, _c in sub[5]}
        for pos in sub[4]:
            if pos in handed:
                continue
            if pa.message_state(state, Position(*pos)) is MessageState.PENDING:
                return (int(pos[0]), int(pos[1]))
        return None

    def hand(self, w: WorkingState, s: int, pos: tuple[int, int], c: int) -> None:
        """Hand ``pos`` to consumer ``c`` (``-1``: the subscription's reader), checking the
        hand-out predicates of invariants/composed.py."""
        sub = w.subs[s]
        avail = tuple(p for p in sub[4] if p != pos)
        w.subs[s] = (*sub[:4], avail, tuple(sorted((*sub[5], (pos, c)))), *sub[6:])
        acked = w.acks[s][0]
        covered = [p for p, cumulative in acked if p == pos or (cumulative and pos <= p)]
        if composed.committed_ack_redelivered([Position(*p) for p in covered], Position(*pos)):
            w.flag("committed-ack-redelivered", s, *pos)
        at = deliver_at(w, self.spec.subscriptions[s].partition, pos)
        if composed.delivered_too_early(at, w.clock):
            w.flag("delivered-too-early", s, *pos)

    def receive(self, w: WorkingState, s: int, c: int) -> tuple[int, int] | None:
        """Consumer ``c`` asks: the dispatcher reads what it may (:meth:`refresh`) and hands out the
        next message, if there is one; its position."""
        self.refresh(w, s)
        pos = self.handout(w.subs[s])
        if pos is not None:
            self.hand(w, s, pos, c)
        return pos

    def read(self, w: WorkingState, s: int) -> None:
        """The subscription's reader asks: the dispatcher reads (:meth:`refresh`), and the reader
        takes the next message and acknowledges it (not in a txn)."""
        pos = self.receive(w, s, -1)
        if pos is None:
            return
        command = pa.NormalAck(AckType.INDIVIDUAL, (pa.AckedPosition(Position(*pos)),))
        result = self.machines.pending_ack(w, s, command)
        self._effects(w, s, result, command)

    # --- crash and reload ----------------------------------------------------------------------

    def reload(self, sub: tuple[Any, ...], s: int) -> tuple[Any, ...]:
        """Subscription ``s``'s slot after its topic reloads: the cursor reopens and the pending-ack
        log is replayed (PA-17 .. PA-20); what it had read, handed out and queued is gone."""
        live = self.value(sub[0])
        spec = self.spec.subscriptions[s]
        config = self.spec.config

        def reload() -> int:
            if not sub[2]:
                return self.store.put(pa.initial(config, sub_type=pa.SubType[spec.sub_type], cursor=live.cursor))
            records = tuple((i, r) for i, (_rid, r) in enumerate(self.value(sub[1])))
            state = pa.recover(config, records, cursor=live.cursor, sub_type=live.sub_type, next_record_id=len(records))
            return self.store.put(state)

        state_d = self.store.memo(("pa-reload", sub[0], sub[1], sub[2]), reload)
        log = self.value(sub[1])
        renumbered = self.store.put(tuple((i, r) for i, (_rid, r) in enumerate(log)))
        cursor = self.value(state_d).cursor
        self.machines.reloaded("pending_ack", s)
        return (state_d, renumbered, sub[2], pos_of(cursor.mark_delete_position), (), (), (), 0)

    # --- steps of their own ----------------------------------------------------------------------

    def actions(self, s: tuple[Any, ...], out: list[Successor]) -> None:
        """The pending-ack store opening, the dispatchers of unread subscriptions, the readers."""
        add = self.add
        specs = self.spec.subscriptions
        for i, sub in enumerate(s[self.layout.subs]):
            state = self.value(sub[0])
            if state.handle_state is pa.HandleState.INITIALIZING:
                add(
                    out,
                    s,
                    ("pending-ack-init", i),
                    ("pi", i),
                    lambda w, i=i: self.init_complete(w, i),
                    self._footprints[i],
                )
            if i in self.unread:
                # Nobody reads here: the dispatcher still reads on its own (markers are acknowledged).
                add(out, s, ("dispatch", i), ("rf", i), lambda w, i=i: self.refresh(w, i), self._dispatch_footprints[i])
            if specs[i].reader:
                add(out, s, ("reader", i), ("rd", i), lambda w, i=i: self.read(w, i), self._reader_footprints[i])
