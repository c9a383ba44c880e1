"""The composed protocol as a transition system over the reference machines' own ``step``.

Components (each a reference machine, stepped through :class:`~proofs.check.store.Store`):

* the **coordinator** (:mod:`reference.coordinator`) over its transaction log;
* one **transaction buffer** per partition (:mod:`reference.buffer`), whose state holds the
  partition's ledgers, entries and snapshot topics (what survives a crash);
* one **pending ack** per subscription (:mod:`reference.pending_ack`) over its log and cursor, with
  the dispatcher the engine puts in front of it (read position, messages ready to hand out, what
  each consumer holds) and, for delayed delivery, a tracker (:mod:`reference.delayed`);
* the **clients**: each a program of transactions (:mod:`proofs.check.program`) driving
  :mod:`reference.client`'s transaction machine;
* the **network**: a multiset of the requests and responses in flight (any delivery order), and
  the **environment**, which may lose or duplicate a message, crash a component (its memory is
  lost and it reloads from what it made durable, as ``engine/broker.py`` loads it), fire
  the timeout trackers, roll a ledger over, and let retention delete a consumed ledger.

The messages are the engine's: NEW_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, a send, an
ack, END_TXN between clients and the coordinator, END_TXN_ON_PARTITION and
END_TXN_ON_SUBSCRIPTION (with the low watermark) from the coordinator to the participants, and
their answers.  A lost END_TXN_ON_* request or answer is the TB client's ``RequestTimeout``,
exactly as the engine's participant call fails.

Modelling choices (each is a statement about the state space, documented in docs/check):

* A step and the log writes it asks for are one transition.  Every message and answer a step
  produces waits for its writes (the effect-ordering contract of docs/design.md), so a crash while
  a write is in flight is the same as a crash before the step: the step's effects never left.
  (The ``batched-log`` model keeps writes asynchronous, since there durability *is* the question.)
* A crash and the reload it causes are one transition; a request reaching a component that is
  down is a lost request, which the loss budget covers.
* Time is abstract.  A transaction started as the ``n``-th of its coordinator has deadline
  ``n + timeout``, so deadlines come in creation order, as they do when every client uses one
  timeout; the timeout tracker's tick for transaction ``n`` aborts every OPEN one due by then.

The composed state is a tuple of ints and tuples of ints only: component states appear as their
content digests (:mod:`proofs.check.store`), names as indexes.  So Python's ``hash`` of a state
is the same in every process: it is the state's fingerprint.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from operator import itemgetter
from typing import Any, Final

from invariants import buffer as buffer_inv
from invariants import client as client_inv
from invariants import composed
from invariants import coordinator as coordinator_inv
from invariants import delayed as delayed_inv
from invariants import pending_ack as pending_ack_inv
from proofs.check import checks, environment, symmetry
from proofs.check.program import ModelSpec, Symmetry
from proofs.check.state import (
    _CLIENT_BOUND,
    _CODE,
    _FROM_CLIENT,
    _NO_POS,
    _PUBLISHED,
    _SUB_TARGET,
    _W,
    ACK_REQ,
    ACK_RESP,
    ADDP_REQ,
    ADDP_RESP,
    ADDS_REQ,
    ADDS_RESP,
    BAD,
    BEGUN,
    BUFFER_TOPIC,
    CAUX,
    CLOCK,
    CLOG,
    COORD,
    DECIDED,
    END_ABORT,
    END_COMMIT,
    END_NONE,
    END_REQ,
    END_RESP,
    ENDP,
    ENDP_RESP,
    ENDS,
    ENDS_RESP,
    ERRORS,
    IDLE,
    IN_TXN,
    NET,
    NEW_REQ,
    NEW_RESP,
    OP_FAILED,
    OP_FLIGHT,
    OP_HELD,
    OP_NEW,
    OP_OK,
    OP_REG,
    REG_ASKED,
    REG_FAILED,
    REG_OK,
    SEND_REQ,
    SEND_RESP,
    USED,
    Layout,
    StepDiverged,
    Successor,
    _advance_clock,
    _apply,
    _code,
    _delta,
    _done,
    _one,
    _pos,
    _retries,
    _target,
    _txn_seq,
    message_name,
    partition_name,
    subscription_of,
)
from proofs.check.store import Store
from reference import buffer as tb
from reference import client as ct
from reference import coordinator as tc
from reference import delayed as dl
from reference import pending_ack as pa
from spec.result import Err, Ok
from spec.types import (
    AckType,
    ClientTxnState,
    MessageState,
    Position,
    TxnAction,
    TxnID,
    TxnStatus,
)

__all__ = [
    "ERRORS",
    "Model",
    "StepDiverged",
    "Successor",
    "message_name",
    "partition_name",
    "subscription_of",
]


class Model:
    """The transition system of one :class:`ModelSpec` (see the module docstring)."""

    def __init__(self, spec: ModelSpec, store: Store | None = None, *, step_timeout_s: float | None = None) -> None:
        self.spec = spec
        self.layout = Layout(spec.partitions, len(spec.subscriptions), spec.clients)
        self.store = store if store is not None else Store()
        self.config = spec.config
        self.step_timeout_s = step_timeout_s
        self.subs_of: tuple[tuple[int, ...], ...] = tuple(
            tuple(s for s, sub in enumerate(spec.subscriptions) if sub.partition == p) for p in range(spec.partitions)
        )
        self.sub_names = tuple(subscription_of(spec, s) for s in range(len(spec.subscriptions)))
        consumed = {
            op.target for program in spec.programs for script in program for op in script.ops if op.kind == "consume"
        }
        # Subscriptions no one reads: their dispatcher reads on its own (a separate action).
        self._unread = frozenset(i for i, sub in enumerate(spec.subscriptions) if not sub.reader and i not in consumed)
        self._sub_index = {name: s for s, name in enumerate(self.sub_names)}
        self._part_index = {partition_name(p): p for p in range(spec.partitions)}
        # The batched log's deferred answers name clients inside interned values: no symmetry there.
        self.symmetries: tuple[Symmetry, ...] = spec.symmetries()[:1] if spec.batched_log else spec.symmetries()
        self._perm_cache: dict[tuple[int, int, int], int] = {}
        self._deltas: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._getters: dict[tuple[int, ...], Callable[[tuple[Any, ...]], Any]] = {}
        # Per message in flight: its delivery's label, fairness family and footprint.
        self._deliveries: dict[tuple[int, ...], tuple[tuple[Any, ...], tuple[Any, ...], tuple[int, ...]]] = {}
        # Tests set this: every memoised transition is recomputed and compared (footprints complete).
        self.verify_deltas = False
        self.family_ids: dict[tuple[Any, ...], int] = {}
        # The liveness goals read the hand-outs and the clock where delayed delivery is modelled.
        self._delayed_goals = any(sub.delayed for sub in spec.subscriptions)
        self.batched = None
        if spec.batched_log:
            from proofs.check.batched import BatchedLog

            self.batched = BatchedLog(self)

    # ------------------------------------------------------------------------------------------
    # machine steps through the store

    def _guard(self, compute: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
        if self.step_timeout_s is None:
            return compute()

        def alarm(signum: int, frame: Any) -> None:
            raise StepDiverged(f"a machine step ran for more than {self.step_timeout_s} s")

        old = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, self.step_timeout_s)
        try:
            return compute()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)

    def _coord_step(self, w: _W, command: Any) -> Any:
        w.coord, result, broken = self.store.step(
            "coordinator", tc.step, w.coord, command, coordinator_inv.STEP_PROPERTIES, self._guard
        )
        if broken:
            w.broken.extend(f"coordinator/{b}" for b in broken)
        return result

    def _buf_step(self, w: _W, p: int, command: Any) -> Any:
        part = w.parts[p]
        d, result, broken = self.store.step(
            "buffer", tb.step, part[0], command, buffer_inv.STEP_PROPERTIES, self._guard
        )
        w.parts[p] = (d, *part[1:])
        if broken:
            w.broken.extend(f"buffer/{b}" for b in broken)
        return result

    def _pa_step(self, w: _W, s: int, command: Any) -> Any:
        sub = w.subs[s]
        d, result, broken = self.store.step(
            "pending_ack", pa.step, sub[0], command, pending_ack_inv.STEP_PROPERTIES, self._guard
        )
        w.subs[s] = (d, *sub[1:])
        if broken:
            w.broken.extend(f"pending_ack/{b}" for b in broken)
        return result

    def _ct_step(self, w: _W, c: int, command: Any) -> Any:
        cl = w.clients[c]
        d, result, broken = self.store.step("client", ct.step, cl[3], command, client_inv.STEP_PROPERTIES)
        w.clients[c] = (*cl[:3], d, *cl[4:])
        if broken:
            w.broken.extend(f"client/{b}" for b in broken)
        return result

    def _dl_step(self, w: _W, s: int, command: Any) -> Any:
        sub = w.subs[s]
        tracker = sub[7]
        if tracker == 0:
            tracker = self.store.put(dl.initial(self.config, tracker=self.spec.tracker))
        d, result, broken = self.store.step("delayed", dl.step, tracker, command, delayed_inv.STEP_PROPERTIES)
        w.subs[s] = (*sub[:7], d)
        if broken:
            w.broken.extend(f"delayed/{b}" for b in broken)
        return result

    def value(self, d: int) -> Any:
        return self.store.get(d)

    # ------------------------------------------------------------------------------------------
    # the initial state

    def initial(self) -> tuple[Any, ...]:
        spec = self.spec
        put = self.store.put
        coord = put(tc.initial(self.config, 0))
        clog = put(((), -1))
        parts = []
        for p in range(spec.partitions):
            state = tb.initial(self.config, topic=BUFFER_TOPIC)
            payload = []
            for i in range(spec.preload[p] if spec.preload else 0):
                state, result = tb.step(state, tb.PublishMessage())
                assert isinstance(result, Ok) and isinstance(result.value, Position)
                payload.append((_pos(result.value), -1, -1, i, -1))
            parts.append((put(state), (), tuple(payload)))
        subs = []
        for sub in spec.subscriptions:
            # The engine's cursor at EARLIEST starts just before the first ledger: (first, -1).
            cursor = pa.CursorView(Position(tb.initial(self.config).ledgers[0].ledger_id, -1))
            pending = pa.initial(self.config, sub_type=pa.SubType[sub.sub_type], cursor=cursor)
            subs.append((put(pending), put(()), 0, _NO_POS, (), (), (), 0))
        clients = [(IDLE, 0, -1, 0, 0, (), (), (), END_NONE) if program else _done() for program in spec.programs]
        caux: tuple[Any, ...] = (0, (), (), ())
        if self.batched is not None:
            caux = self.batched.initial_aux()
            clog = self.batched.initial_log()
        per_sub = (((), (), ()),) * len(spec.subscriptions)
        per_part = ((),) * spec.partitions
        return (
            coord,
            clog,
            caux,
            (),
            (0, 0, 0, 0, 0, 0),
            0,
            (),
            (),
            *parts,
            *subs,
            *clients,
            *per_sub,
            *per_part,
            *per_part,
        )

    # ------------------------------------------------------------------------------------------
    # successors

    def successors(self, s: tuple[Any, ...], *, por: bool = False) -> list[Successor]:
        """Every transition from ``s`` that changes it.  With ``por``, the single local step of a
        client whose every other step is disabled, when one exists (see :meth:`_ample`)."""
        if por:
            ample = self._ample(s)
            if ample is not None:
                return [ample]
        out: list[Successor] = []
        seen_messages: set[tuple[int, ...]] = set()
        for message in s[NET]:
            if message in seen_messages:
                continue
            seen_messages.add(message)
            delivery = self._deliveries.get(message)
            if delivery is None:
                delivery = self._deliveries[message] = (
                    ("deliver", message),
                    ("d", message),
                    self._message_footprint(message),
                )
            label, family, footprint = delivery
            self._add(out, s, label, family, lambda w, m=message: self._deliver(w, m), footprint)
        for c in range(self.spec.clients):
            for label, act in self._client_actions(s, c):
                family = ("c", c) if label[0] != "client-timeout" else ("ct", c)
                self._add(out, s, label, family, act, self._client_footprint(label))
        self._component_actions(s, out)
        if not self.spec.faults.timeouts and not any(x.family is not None for x in out):
            self._quiescent_ticks(s, out)
        self._environment_actions(s, out, seen_messages)
        return out

    def _quiescent_ticks(self, s: tuple[Any, ...], out: list[Successor]) -> None:
        """Without ``timeouts`` the transaction timeout is long against everything else: the
        coordinator's timeout tracker (TC-18) fires only once nothing but a fault can happen, which
        is when a client waits for an answer that will never come or for a message that is not
        there.  Pulsar's coordinator always runs the tracker, so a transaction no one ends is
        aborted; a model without it would find every lost answer a liveness violation."""
        coord = self.value(s[COORD])
        for seq, meta in sorted(coord.txns.items()):
            if meta.status is TxnStatus.OPEN:
                self._add(
                    out, s, ("tick", seq), ("tick", seq), lambda w, seq=seq: self._tick(w, seq), self._COORDINATOR
                )

    def _add(
        self,
        out: list[Successor],
        s: tuple[Any, ...],
        label: tuple[Any, ...],
        family: tuple[Any, ...] | None,
        act: Callable[..., Any],
        footprint: tuple[int, ...] | None = None,
    ) -> None:
        """Add the successor ``act`` makes of ``s``.  With a ``footprint`` (the paths into the state
        the action reads and writes; it also removes and adds messages) the transition is memoised
        on the values at those paths: the same delivery to the same component state is computed
        once however the rest of the system stands."""
        if footprint is None:
            w = _W(s, self.layout)
            if act(w) is False:
                return
            after = w.freeze()
            if after != s:
                out.append(Successor(label, after, family, tuple(w.broken)))
            return
        getter = self._getters.get(footprint)
        if getter is None:
            getter = self._getters[footprint] = itemgetter(*footprint) if len(footprint) > 1 else _one(footprint[0])
        key = (label, getter(s))
        delta = self._deltas.get(key)
        applied = None  # the successor, when this call computed it
        if delta is None or self.verify_deltas:
            w = _W(s, self.layout)
            fresh: tuple[Any, ...] | None
            if act(w) is False:
                fresh = None
            else:
                after = w.freeze()
                fresh = None if after == s else _delta(s, after, footprint, tuple(w.broken))
                if fresh is not None:
                    applied = _apply(s, fresh, footprint)
                    if applied != after:
                        raise AssertionError(f"{label}: the action changed the state outside its footprint {footprint}")
            if delta is not None and delta != fresh:
                raise AssertionError(f"{label}: a memoised transition differs from the computed one")
            delta = self._deltas[key] = fresh if fresh is not None else ()
        if not delta:
            return
        if applied is None:
            applied = _apply(s, delta, footprint)
        out.append(Successor(label, applied, family, delta[3], footprint))

    def _w(self, s: tuple[Any, ...]) -> _W:
        return _W(s, self.layout)

    # --- footprints: what each action reads and writes besides the network --------------------

    _COORDINATOR: Final = (COORD, CLOG, CAUX, DECIDED)

    def _message_footprint(self, m: tuple[int, ...]) -> tuple[int, ...]:
        L = self.layout
        kind = m[0]
        if kind in _CLIENT_BOUND:
            return (L.client(m[1]),)
        if kind in (SEND_REQ, ENDP):
            p = m[3] if kind == SEND_REQ else m[6]
            return (L.part(p), L.reopen(p), L.end(p))
        if kind in (ENDS, ACK_REQ):
            s = m[3] if kind == ACK_REQ else m[6]
            return (L.sub(s), L.ack(s))
        return self._COORDINATOR

    def _client_footprint(self, label: tuple[Any, ...]) -> tuple[int, ...]:
        L = self.layout
        c = label[1]
        if label[0] == "receive":
            s = label[2]
            p = self.spec.subscriptions[s].partition
            return (L.client(c), L.sub(s), L.ack(s), BAD, L.part(p), CLOCK)
        return (L.client(c),)

    def _reader_footprint(self, i: int) -> tuple[int, ...]:
        L = self.layout
        p = self.spec.subscriptions[i].partition
        return (L.sub(i), L.ack(i), BAD, L.part(p), CLOCK)

    def _topic_footprint(self, p: int) -> tuple[int, ...]:
        L = self.layout
        return (L.part(p), *(L.sub(s) for s in self.subs_of[p]), L.reopen(p), L.end(p), USED)

    # --- partial-order reduction ---------------------------------------------------------------

    def _ample(self, s: tuple[Any, ...]) -> Successor | None:
        """A singleton ample set: the next program step of a client that is idle on the network.

        The step is the client's only enabled action (its program is at a deterministic point, no
        answer to it is in flight or can come: it has no request outstanding and no message to or
        from it is in the network, and its transaction timer cannot fire), it touches only the
        client's own state and adds one message, so it commutes with every other enabled action
        and stays enabled until taken (C1); no safety predicate but the client's own reads the
        client's state (C2); and program steps strictly advance the client's program, so no cycle
        is made of reduced steps (C3).  Used for safety only: the explorer turns it off when it
        checks liveness.
        """
        busy = {m[1] for m in s[NET] if m[0] in _CLIENT_BOUND or m[0] in _FROM_CLIENT}
        for c in range(self.spec.clients):
            if c in busy or not self._client_quiet(s, c):
                continue
            actions = list(self._client_actions(s, c))
            if len(actions) != 1 or actions[0][0][0] not in ("begin", "issue", "end"):
                continue
            label, act = actions[0]
            w = self._w(s)
            if act(w) is False:
                continue
            after = w.freeze()
            if after != s:
                return Successor(label, after, ("c", c), tuple(w.broken))
        return None

    def _client_quiet(self, s: tuple[Any, ...], c: int) -> bool:
        phase, _k, _seq, ctd, _pc, regs, ops, _held, end = s[self.layout.client(c)]
        if phase == BEGUN:
            return False
        if phase != IN_TXN:
            return bool(phase == IDLE)
        if any(status in (OP_REG, OP_FLIGHT) for status in ops) or any(st == REG_ASKED for _, st in regs):
            return False
        if end in (END_COMMIT, END_ABORT):
            return False
        txn = self.value(ctd)
        return not (self.spec.faults.timeouts and txn.state is ClientTxnState.OPEN)

    # ------------------------------------------------------------------------------------------
    # clients

    def _client_actions(self, s: tuple[Any, ...], c: int) -> Iterator[tuple[tuple[Any, ...], Callable[..., Any]]]:
        phase, k, seq, ctd, pc, _regs, ops, _held, end = s[self.layout.client(c)]
        program = self.spec.programs[c]
        if phase == IDLE:
            yield ("begin", c, k), lambda w: self._begin(w, c)
            return
        if phase != IN_TXN or end != END_NONE:
            return
        script = program[k]
        txn = self.value(ctd)
        if self.spec.faults.timeouts and txn.state is ClientTxnState.OPEN:
            yield ("client-timeout", c, seq), lambda w: self._client_timeout(w, c)
        if txn.state is not ClientTxnState.OPEN:
            return
        settled = all(status in (OP_OK, OP_FAILED) for status in ops[:pc])
        if pc < len(script.ops):
            op = script.ops[pc]
            if not self.spec.pipelined and not settled:
                return
            if op.kind == "consume" and ops[pc] == OP_NEW:
                if self._can_receive(s, c, op.target):
                    yield ("receive", c, op.target), lambda w: self._receive(w, c, op.target)
                return
            yield ("issue", c, pc), lambda w: self._issue(w, c)
            return
        if self.spec.pipelined or settled:
            for choice in script.ends:
                yield ("end", c, choice), lambda w, choice=choice: self._end(w, c, choice)

    def _set_client(self, w: _W, c: int, **changes: Any) -> None:
        names = ("phase", "k", "seq", "ct", "pc", "regs", "ops", "held", "end")
        current = dict(zip(names, w.clients[c], strict=True))
        current.update(changes)
        w.clients[c] = tuple(current[n] for n in names)

    def _begin(self, w: _W, c: int) -> None:
        k = w.clients[c][1]
        self._set_client(w, c, phase=BEGUN)
        w.send((NEW_REQ, c, k))

    def _client_timeout(self, w: _W, c: int) -> None:
        self._ct_step(w, c, ct.TimeoutFired())
        self._next_txn(w, c)  # the client gives the transaction up (TC-36)

    def _next_txn(self, w: _W, c: int) -> None:
        k = w.clients[c][1] + 1
        if k < len(self.spec.programs[c]):
            w.clients[c] = (IDLE, k, -1, 0, 0, (), (), (), END_NONE)
        else:
            w.clients[c] = _done()

    def _issue(self, w: _W, c: int) -> None:
        """The client's next operation: a send, or the ack of a consumed message (TC-30, TC-31)."""
        _phase, k, seq, _ctd, pc, regs, ops, _held, _end = w.clients[c]
        op = self.spec.programs[c][k].ops[pc]
        if op.kind == "send":
            command: Any
            target, command = op.target, ct.Send(partition_name(op.target))
        else:
            target = _SUB_TARGET + op.target
            command = ct.Ack(self.sub_names[op.target])
        result = self._ct_step(w, c, command)
        ops = list(ops)
        if isinstance(result, Err):
            ops[pc] = OP_FAILED  # the client refuses it: nothing was sent
            self._set_client(w, c, pc=pc + 1, ops=tuple(ops))
            return
        reg = dict(regs)
        if any(isinstance(e, ct.SendAddPartitionToTxn | ct.SendAddSubscriptionToTxn) for e in result.effects):
            reg[target] = REG_ASKED
            if op.kind == "send":
                w.send((ADDP_REQ, c, seq, op.target))
            else:
                w.send((ADDS_REQ, c, seq, op.target))
        status = reg.get(target)
        self._set_client(w, c, pc=pc + 1, regs=tuple(sorted(reg.items())))
        if status == REG_OK:
            self._send_op(w, c, pc)
        elif status == REG_FAILED:
            ops[pc] = OP_FAILED
            self._set_client(w, c, ops=tuple(ops))
            self._op_completed(w, c, True)
        else:
            ops[pc] = OP_REG
            self._set_client(w, c, ops=tuple(ops))

    def _send_op(self, w: _W, c: int, i: int) -> None:
        _phase, k, seq, _ctd, _pc, _regs, ops, held, _end = w.clients[c]
        op = self.spec.programs[c][k].ops[i]
        ops = list(ops)
        ops[i] = OP_FLIGHT
        self._set_client(w, c, ops=tuple(ops))
        if op.kind == "send":
            w.send((SEND_REQ, c, seq, op.target, i, op.deliver_at))
        else:
            ledger, entry = held[i]
            w.send((ACK_REQ, c, seq, op.target, ledger, entry, i, int(op.cumulative)))

    def _op_completed(self, w: _W, c: int, failed: bool) -> None:
        result = self._ct_step(w, c, ct.OpCompleted(failed=failed))
        self._client_effects(w, c, result)

    def _client_effects(self, w: _W, c: int, result: Any) -> None:
        seq = w.clients[c][2]
        for effect in result.effects:
            if isinstance(effect, ct.SendEndTxn):
                w.send((END_REQ, c, seq, int(effect.action)))
            elif isinstance(effect, ct.CompleteEnd):
                self._next_txn(w, c)
                return

    def _end(self, w: _W, c: int, choice: str) -> None:
        result = self._ct_step(w, c, ct.Commit() if choice == "commit" else ct.Abort())
        if isinstance(result, Err):
            self._next_txn(w, c)
            return
        self._set_client(w, c, end=END_COMMIT if choice == "commit" else END_ABORT)
        self._client_effects(w, c, result)

    def _client_message(self, w: _W, m: tuple[int, ...]) -> None:
        kind, c = m[0], m[1]
        phase, k, seq, _ctd, _pc, regs, ops, _held, _end = w.clients[c]
        if kind == NEW_RESP:
            if phase != BEGUN or m[2] != k:
                return
            if m[4] != 0:
                self._next_txn(w, c)
                return
            txn = ct.initial(self.config, TxnID(0, m[3]), self.spec.txn_timeout_ms)
            ops0 = tuple(OP_NEW for _ in self.spec.programs[c][k].ops)
            held0 = tuple(() for _ in ops0)
            w.clients[c] = (IN_TXN, k, m[3], self.store.put(txn), 0, (), ops0, held0, END_NONE)
            return
        if phase != IN_TXN or m[2] != seq:
            return  # an answer for a transaction this client gave up
        if kind in (ADDP_RESP, ADDS_RESP):
            target = m[3] if kind == ADDP_RESP else _SUB_TARGET + m[3]
            reg = dict(regs)
            if reg.get(target) != REG_ASKED:
                return
            ok = m[4] == 0
            reg[target] = REG_OK if ok else REG_FAILED
            self._set_client(w, c, regs=tuple(sorted(reg.items())))
            script = self.spec.programs[c][k]
            for i, status in enumerate(ops):
                if status != OP_REG or _target(script.ops[i]) != target:
                    continue
                if ok:
                    self._send_op(w, c, i)
                else:
                    current = list(w.clients[c][6])
                    current[i] = OP_FAILED
                    self._set_client(w, c, ops=tuple(current))
                    self._op_completed(w, c, True)
                    if w.clients[c][2] != seq:
                        return
            return
        if kind in (SEND_RESP, ACK_RESP):
            i = m[3]
            if ops[i] != OP_FLIGHT:
                return
            current = list(ops)
            current[i] = OP_OK if m[4] == 0 else OP_FAILED
            self._set_client(w, c, ops=tuple(current))
            self._op_completed(w, c, m[4] != 0)
            return
        if kind == END_RESP:
            error = ERRORS[m[3]] or None
            result = self._ct_step(w, c, ct.EndTxnResponse(error))
            if isinstance(result, Ok):
                self._client_effects(w, c, result)

    # --- consuming ------------------------------------------------------------------------------

    def _consumer_allowed(self, c: int, s: int) -> bool:
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

    def _handout(self, sub: tuple[Any, ...]) -> tuple[int, int] | None:
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

    def _can_receive(self, s: tuple[Any, ...], c: int, sub_index: int) -> bool:
        return self._consumer_allowed(c, sub_index)

    def _receive(self, w: _W, c: int, s: int) -> None:
        """The consumer asks: the dispatcher reads what it may (:meth:`_refresh`) and hands out the
        next message, if there is one."""
        self._refresh(w, s)
        pos = self._handout(w.subs[s])
        if pos is None:
            return
        self._hand(w, s, pos, c)
        _phase, _k, _seq, _ctd, pc, _regs, ops, held, _end = w.clients[c]
        ops, held = list(ops), list(held)
        ops[pc] = OP_HELD
        held[pc] = pos
        self._set_client(w, c, ops=tuple(ops), held=tuple(held))

    def _hand(self, w: _W, s: int, pos: tuple[int, int], c: int) -> None:
        """Hand ``pos`` to consumer ``c`` (``-1``: the subscription's reader), checking the
        hand-out predicates of invariants/composed.py."""
        sub = w.subs[s]
        avail = tuple(p for p in sub[4] if p != pos)
        w.subs[s] = (*sub[:4], avail, tuple(sorted((*sub[5], (pos, c)))), *sub[6:])
        acked = w.acks[s][0]
        covered = [p for p, cumulative in acked if p == pos or (cumulative and pos <= p)]
        if composed.committed_ack_redelivered([Position(*p) for p in covered], Position(*pos)):
            w.flag("committed-ack-redelivered", s, *pos)
        deliver_at = self._deliver_at(w, self.spec.subscriptions[s].partition, pos)
        if composed.delivered_too_early(deliver_at, w.clock):
            w.flag("delivered-too-early", s, *pos)

    def _deliver_at(self, w: _W, p: int, pos: tuple[int, int]) -> int:
        for entry in w.parts[p][2]:
            if entry[0] == pos:
                return int(entry[4])
        return -1

    # ------------------------------------------------------------------------------------------
    # deliveries

    def _deliver(self, w: _W, m: tuple[int, ...]) -> None:
        w.take(m)
        kind = m[0]
        if kind in _CLIENT_BOUND:
            self._client_message(w, m)
        elif kind in (NEW_REQ, ADDP_REQ, ADDS_REQ, END_REQ):
            self._coordinator_request(w, m)
        elif kind in (ENDP_RESP, ENDS_RESP):
            self._participant_answer(w, m)
        elif kind == SEND_REQ:
            self._append(w, m)
        elif kind == ENDP:
            self._end_on_partition(w, m)
        elif kind in (ENDS, ACK_REQ):
            self._subscription_request(w, m)
        else:
            raise AssertionError(f"unknown message {m}")

    # --- the coordinator -----------------------------------------------------------------------

    def _coordinator_request(self, w: _W, m: tuple[int, ...]) -> None:
        kind, c = m[0], m[1]
        if kind == NEW_REQ:
            before = self.value(w.coord)
            result = self._coord_step(w, tc.NewTxn(self.spec.txn_timeout_ms, before.sequence_id + 1))
            self._coord_effects(w, result, reply=(NEW_RESP, c, m[2], _txn_seq(result), _code(result)))
            return
        if kind == ADDP_REQ:
            result = self._coord_step(w, tc.AddPartitionToTxn(TxnID(0, m[2]), (partition_name(m[3]),), 0))
            self._coord_effects(w, result, reply=(ADDP_RESP, c, m[2], m[3], _code(result)))
            return
        if kind == ADDS_REQ:
            result = self._coord_step(w, tc.AddSubscriptionToTxn(TxnID(0, m[2]), (self.sub_names[m[3]],), 0))
            self._coord_effects(w, result, reply=(ADDS_RESP, c, m[2], m[3], _code(result)))
            return
        # END_TXN: answered once phase 3 decided (TC-13 .. TC-16), as the engine's end_txn
        seq, action = m[2], m[3]
        result = self._coord_step(w, tc.EndTxn(TxnID(0, seq), TxnAction(action), 0))
        if isinstance(result, Err) and not _retries(result):
            self._coord_effects(w, result, reply=(END_RESP, c, seq, _code(result)))
            return
        caux = w.caux
        caux[2] = tuple(sorted((*caux[2], (seq, action, c))))
        self._coord_effects(w, result, settle=(seq, action))

    def _coord_effects(
        self,
        w: _W,
        result: Any,
        *,
        reply: tuple[int, ...] | None = None,
        settle: tuple[int, int] | None = None,
    ) -> None:
        """Carry out a coordinator step's effects in order, then answer (TC-28: the log first)."""
        if self.batched is not None:
            self.batched.effects(w, result, reply=reply, settle=settle)
            return
        records, max_local = self.value(w.clog)
        log = list(records)
        runs: list[Any] = []
        for effect in result.effects:
            if isinstance(effect, tc.AppendRecord):
                log.append((effect.record_id, effect.record))
                if effect.record.max_local_txn_id is not None:
                    max_local = max(max_local, effect.record.max_local_txn_id)
            elif isinstance(effect, tc.DeleteRecords):
                doomed = set(effect.record_ids)
                log = [r for r in log if r[0] not in doomed]
            elif isinstance(effect, tc.EndTxnInTransactionBuffer):
                runs.append(effect)
            elif isinstance(effect, tc.ScheduleResumeEndTxn):
                self._arm_resume(w, effect)
        if isinstance(result, Ok):
            self._decide(w, result.effects)
        w.clog = self.store.put((tuple(log), max_local))
        self.release(w, runs, reply, settle, result)

    def release(
        self,
        w: _W,
        runs: list[tc.EndTxnInTransactionBuffer],
        reply: tuple[int, ...] | None,
        settle: tuple[int, int] | None,
        result: Any,
    ) -> None:
        """What waits for a step's writes: phase 2, the answer, the settlement of END_TXN waiters."""
        for run in runs:
            self._start_run(w, run)
        if reply is not None and not (isinstance(result, Err) and not result.error.answered):
            w.send(reply)
        if settle is not None:
            self._settle(w, settle[0], settle[1], result)

    def _arm_resume(self, w: _W, effect: tc.ScheduleResumeEndTxn) -> None:
        timer = (effect.txn_id.least_sig_bits, int(effect.action), int(effect.is_timeout))
        w.caux[3] = tuple(sorted({*w.caux[3], timer}))

    def _decide(self, w: _W, effects: tuple[Any, ...]) -> None:
        """The history variable ``decided``: the status each logged record gave its transaction."""
        decided = list(w.decided)
        for effect in effects:
            if not isinstance(effect, tc.AppendRecord):
                continue
            record = effect.record
            seq = record.txn_id.least_sig_bits
            while len(decided) <= seq:
                decided.append(-1)
            if record.metadata_op is tc.TxnMetadataOp.NEW:
                decided[seq] = int(TxnStatus.OPEN)
            elif record.metadata_op is tc.TxnMetadataOp.UPDATE and record.new_status is not None:
                decided[seq] = int(record.new_status)
        w.decided = tuple(decided)

    def _start_run(self, w: _W, effect: tc.EndTxnInTransactionBuffer) -> None:
        """Phase 2 (TC-14): END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION to every participant."""
        epoch = w.caux[0]
        seq, action, to, lwm = (
            effect.txn_id.least_sig_bits,
            int(effect.action),
            int(effect.is_timeout),
            effect.low_water_mark,
        )
        parts = tuple(sorted(self._part_index[name] for name in effect.partitions))
        subs = tuple(sorted(self._sub_index[sub] for sub in effect.subscriptions))
        run = (seq, action, to, lwm, parts, subs, ())
        if not parts and not subs:
            self._finish_run(w, run)
            return
        w.caux[1] = tuple(sorted((*w.caux[1], run)))
        for p in parts:
            w.send((ENDP, epoch, seq, action, to, lwm, p))
        for s in subs:
            w.send((ENDS, epoch, seq, action, to, lwm, s))

    def _participant_answer(self, w: _W, m: tuple[int, ...]) -> None:
        epoch, seq, action, to, lwm, who, error = m[1:]
        if epoch != w.caux[0]:
            return  # an answer to a coordinator that has since crashed
        slot = 4 if m[0] == ENDP_RESP else 5
        runs = list(w.caux[1])
        for i, run in enumerate(runs):
            if run[:4] == (seq, action, to, lwm) and who in run[slot]:
                pending = tuple(x for x in run[slot] if x != who)
                errors = (*run[6], error) if error else run[6]
                run = (*run[:slot], pending, *run[slot + 1 : 6], tuple(sorted(errors)))
                if run[4] or run[5]:
                    runs[i] = run
                    w.caux[1] = tuple(sorted(runs))
                else:
                    del runs[i]
                    w.caux[1] = tuple(sorted(runs))
                    self._finish_run(w, run)
                return

    def _finish_run(self, w: _W, run: tuple[Any, ...]) -> None:
        """Phase 3 (TC-15, TC-16) once every participant answered."""
        seq, action, to = run[0], run[1], run[2]
        errors = tuple(ERRORS[e] for e in run[6])
        result = self._coord_step(
            w, tc.EndTxnInTransactionBufferResult(TxnID(0, seq), TxnAction(action), 0, bool(to), errors)
        )
        self._coord_effects(w, result, settle=(seq, action))

    def _settle(self, w: _W, seq: int, action: int, result: Any) -> None:
        """Answer the END_TXN requests waiting on (txn, action) unless the end goes on (the engine's
        ``_settle``)."""
        if isinstance(result, Err) and _retries(result):
            return
        if isinstance(result, Ok) and any(isinstance(e, tc.EndTxnInTransactionBuffer) for e in result.effects):
            return
        waiting = [x for x in w.caux[2] if x[0] == seq and x[1] == action]
        if not waiting:
            return
        w.caux[2] = tuple(x for x in w.caux[2] if not (x[0] == seq and x[1] == action))
        for _seq, _action, c in waiting:
            w.send((END_RESP, c, seq, _code(result)))

    # --- partitions ----------------------------------------------------------------------------

    def _append(self, w: _W, m: tuple[int, ...]) -> None:
        """A send reaches the partition: appendBufferToTxn (TB-4 .. TB-8)."""
        _kind, c, seq, p, op, deliver_at = m
        before = self.value(w.parts[p][0]).ongoing
        result = self._buf_step(w, p, tb.AppendBufferToTxn(TxnID(0, seq)))
        self._note_reopened(w, p, before, (seq,))
        if isinstance(result, Ok) and isinstance(result.value, tb.Queued):
            part = w.parts[p]
            w.parts[p] = (part[0], (*part[1], (c, seq, op, deliver_at)), part[2])
            return
        if isinstance(result, Ok):
            self._stored(w, p, result.value, c, seq, op, deliver_at)
        w.send((SEND_RESP, c, seq, op, _code(result)))

    def _stored(self, w: _W, p: int, position: Position, c: int, seq: int, op: int, deliver_at: int) -> None:
        part = w.parts[p]
        w.parts[p] = (part[0], part[1], (*part[2], (_pos(position), c, seq, op, deliver_at)))

    def _first_snapshot(self, w: _W, p: int) -> None:
        """The first snapshot is durable: FirstSnapshotting -> Ready, parked appends written (TB-4)."""
        before = self.value(w.parts[p][0]).ongoing
        result = self._buf_step(w, p, tb.CompleteFirstSnapshot())
        part = w.parts[p]
        parked = part[1]
        self._note_reopened(w, p, before, tuple(x[1] for x in parked))
        w.parts[p] = (part[0], (), part[2])
        outcomes = result.value if isinstance(result, Ok) else ()
        for (c, seq, op, deliver_at), outcome in zip(parked, outcomes, strict=True):
            if outcome.position is not None:
                self._stored(w, p, outcome.position, c, seq, op, deliver_at)
                w.send((SEND_RESP, c, seq, op, 0))
            else:
                w.send((SEND_RESP, c, seq, op, _CODE[outcome.error or "ServiceUnitNotReady"]))

    def _note_reopened(self, w: _W, p: int, before: Any, seqs: tuple[int, ...]) -> None:
        """History variable: a send made ongoing a transaction whose end this partition had
        already processed (TB-8's re-open, quirk Q8)."""
        after = self.value(w.parts[p][0]).ongoing
        ended = w.ended[p]
        fresh = {seq for seq in seqs if seq in ended and TxnID(0, seq) in after and TxnID(0, seq) not in before}
        if fresh:
            w.reopened[p] = tuple(sorted({*w.reopened[p], *fresh}))

    def _end_on_partition(self, w: _W, m: tuple[int, ...]) -> None:
        """END_TXN_ON_PARTITION (TB-11 .. TB-14)."""
        _kind, epoch, seq, action, to, lwm, p = m
        txn = TxnID(0, seq)
        command = tb.CommitTxn(txn, lwm) if action == TxnAction.COMMIT else tb.AbortTxn(txn, lwm)
        result = self._buf_step(w, p, command)
        if isinstance(result, Ok):
            w.ended[p] = tuple(sorted({*w.ended[p], seq}))
        w.send((ENDP_RESP, epoch, seq, action, to, lwm, p, _code(result)))

    # --- subscriptions -------------------------------------------------------------------------

    def _subscription_request(self, w: _W, m: tuple[int, ...]) -> None:
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
        result = self._pa_step(w, s, command)
        if isinstance(result, Ok) and isinstance(result.value, pa.Queued):
            sub = w.subs[s]
            w.subs[s] = (*sub[:6], (*sub[6], (request, extra)), sub[7])
            self._pa_effects(w, s, result, command)
            return
        self._pa_effects(w, s, result, command)
        if isinstance(result, Ok):
            self._note_sub(w, s, m[0] == ENDS, seq)
        if m[0] == ACK_REQ and isinstance(result, Ok):
            self._unhand_if_held(w, s, (m[4], m[5]))
        w.send((*request, _code(result)))

    def _note_sub(self, w: _W, s: int, ended: bool, seq: int) -> None:
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

    def _unhand_if_held(self, w: _W, s: int, pos: tuple[int, int]) -> None:
        """A message a txn acknowledged leaves its consumer's hands once no longer PENDING (5.9)."""
        sub = w.subs[s]
        state = self.value(sub[0])
        if pa.message_state(state, Position(*pos)) is not MessageState.PENDING:
            w.subs[s] = (*sub[:5], tuple(h for h in sub[5] if h[0] != pos), *sub[6:])

    def _pa_effects(self, w: _W, s: int, result: Any, command: Any) -> None:
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
                gone = {_pos(a.position) for a in effect.positions}
                handed = [h for h in handed if h[0] not in gone]
                if committed:
                    acks.extend((p, 0) for p in sorted(gone))
            elif isinstance(effect, pa.CursorCumulativeAck):
                upto = _pos(effect.position.position)
                handed = [h for h in handed if h[0] > upto]
                if committed:
                    acks.append((upto, 1))
            elif isinstance(effect, pa.RedeliverUnacknowledgedMessages):
                back = {_pos(p) for p in effect.positions}
                handed = [h for h in handed if h[0] not in back]
                avail = sorted(set(avail) | back)
        w.acks[s] = (tuple(sorted(set(acks))), *w.acks[s][1:])
        sub = w.subs[s]
        w.subs[s] = (sub[0], self.store.put(tuple(log)), sub[2], sub[3], tuple(avail), tuple(sorted(handed)), *sub[6:])

    def _init_complete(self, w: _W, s: int) -> None:
        """The pending-ack store opened (PA-17): the queued requests run, in order."""
        result = self._pa_step(w, s, pa.PendingAckInitComplete())
        sub = w.subs[s]
        queued = sub[6]
        w.subs[s] = (*sub[:2], 1, *sub[3:6], (), sub[7])
        self._pa_effects(w, s, result, pa.PendingAckInitComplete())
        outcomes = result.value if isinstance(result, Ok) else ()
        for (request, extra), outcome in zip(queued, outcomes, strict=True):
            if isinstance(outcome, Ok):
                self._note_sub(w, s, request[0] == ENDS_RESP, request[2])
            if request[0] == ACK_RESP and isinstance(outcome, Ok):
                self._unhand_if_held(w, s, (extra[0], extra[1]))
            w.send((*request, _code(outcome)))

    def _refresh(self, w: _W, s: int) -> None:
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
            result = self._pa_step(w, s, command)
            self._pa_effects(w, s, result, command)
        seen = [_pos(p) for p in (*read.delivered, *read.auto_acked)]
        sub = w.subs[s]
        read_after = max([sub[3], *seen])
        fresh = []
        for position in read.delivered:
            deliver_at = self._deliver_at(w, spec.partition, _pos(position))
            if spec.delayed and deliver_at >= 0:
                added = self._dl_step(w, s, dl.AddMessage(position.ledger_id, position.entry_id, deliver_at, w.clock))
                if isinstance(added, Ok) and added.value:
                    continue
            fresh.append(_pos(position))
        if spec.delayed and w.subs[s][7] != 0:
            due = self._dl_step(w, s, dl.GetScheduledMessages(1 << 20, w.clock))
            if isinstance(due, Ok):
                fresh.extend(_pos(p) for p in due.value)
        sub = w.subs[s]
        w.subs[s] = (*sub[:3], read_after, tuple(sorted({*sub[4], *fresh})), *sub[5:])

    def _read(self, w: _W, s: int) -> None:
        """The subscription's reader asks: the dispatcher reads (:meth:`_refresh`), and the reader
        takes the next message and acknowledges it (not in a txn)."""
        self._refresh(w, s)
        pos = self._handout(w.subs[s])
        if pos is None:
            return
        self._hand(w, s, pos, -1)
        command = pa.NormalAck(AckType.INDIVIDUAL, (pa.AckedPosition(Position(*pos)),))
        result = self._pa_step(w, s, command)
        self._pa_effects(w, s, result, command)

    # ------------------------------------------------------------------------------------------
    # component steps of their own (timers, snapshots, the dispatcher)

    def _component_actions(self, s: tuple[Any, ...], out: list[Successor]) -> None:
        coord = self.value(s[COORD])
        if self.spec.faults.timeouts:
            for seq, meta in sorted(coord.txns.items()):
                if meta.status is TxnStatus.OPEN:
                    self._add(
                        out, s, ("tick", seq), ("tick", seq), lambda w, seq=seq: self._tick(w, seq), self._COORDINATOR
                    )
        for timer in s[CAUX][3]:
            self._add(
                out, s, ("resume", *timer), ("r", timer), lambda w, t=timer: self._resume(w, t), self._COORDINATOR
            )
        if self.batched is not None:
            self.batched.actions(
                s, out, lambda out, s, label, family, act: self._add(out, s, label, family, act, self._COORDINATOR)
            )
        L = self.layout
        for p, part in enumerate(s[L.parts]):
            buffer = self.value(part[0])
            if buffer.status is tb.BufferStatus.FIRST_SNAPSHOTTING:
                self._add(
                    out,
                    s,
                    ("first-snapshot", p),
                    ("fs", p),
                    lambda w, p=p: self._first_snapshot(w, p),
                    (L.part(p), L.reopen(p), L.end(p)),
                )
            if (
                self.spec.faults.crash_partition
                and buffer.status is tb.BufferStatus.READY
                and buffer.change_max_read_position_count > 0
            ):
                # The timer's snapshots (TB-21) only matter to a recovery, so only where topics crash.
                self._add(
                    out,
                    s,
                    ("snapshot", p),
                    ("snap", p),
                    lambda w, p=p: self._buf_step(w, p, tb.TakeSnapshot()),
                    (L.part(p),),
                )
        for i, sub in enumerate(s[L.subs]):
            state = self.value(sub[0])
            if state.handle_state is pa.HandleState.INITIALIZING:
                self._add(
                    out,
                    s,
                    ("pending-ack-init", i),
                    ("pi", i),
                    lambda w, i=i: self._init_complete(w, i),
                    (L.sub(i), L.ack(i)),
                )
            partition = self.spec.subscriptions[i].partition
            if i in self._unread:
                # Nobody reads here: the dispatcher still reads on its own (markers are acknowledged).
                self._add(
                    out,
                    s,
                    ("dispatch", i),
                    ("rf", i),
                    lambda w, i=i: self._refresh(w, i),
                    (L.sub(i), L.part(partition), CLOCK, L.ack(i)),
                )
            if self.spec.subscriptions[i].reader:
                self._add(out, s, ("reader", i), ("rd", i), lambda w, i=i: self._read(w, i), self._reader_footprint(i))
        for p, count in enumerate(self.spec.publishes):
            published = sum(1 for entry in s[L.part(p)][2] if entry[2] == _PUBLISHED)
            if published < count:
                self._add(
                    out, s, ("publish", p), ("pub", p), lambda w, p=p: self._publish(w, p), (L.part(p), L.reopen(p))
                )
        if self.spec.clock_limit and s[CLOCK] < self.spec.clock_limit:
            self._add(out, s, ("time",), ("clock",), _advance_clock, (CLOCK,))

    def _publish(self, w: _W, p: int) -> None:
        """A plain producer publishes one normal message on partition ``p`` (TB-9)."""
        result = self._buf_step(w, p, tb.PublishMessage())
        if isinstance(result, Ok):
            part = w.parts[p]
            w.parts[p] = (part[0], part[1], (*part[2], (_pos(result.value), -1, _PUBLISHED, len(part[2]), -1)))

    def _tick(self, w: _W, seq: int) -> None:
        """The timeout tracker fires at the deadline of transaction ``seq`` (TC-18)."""
        coord = self.value(w.coord)
        start = coord.txns[seq].start_time
        result = self._coord_step(w, tc.Tick(start + self.spec.txn_timeout_ms + 1))
        self._coord_effects(w, result)

    def _resume(self, w: _W, timer: tuple[int, int, int]) -> None:
        """A scheduled re-run of an end (TC-16 retry, TC-24 re-drive)."""
        seq, action, to = timer
        w.caux[3] = tuple(t for t in w.caux[3] if t != timer)
        result = self._coord_step(w, tc.ResumeEndTxn(TxnID(0, seq), TxnAction(action), 0, bool(to)))
        self._coord_effects(w, result, settle=(seq, action))

    # environment: proofs/check/environment.py
    _environment_actions = environment._environment_actions
    _lose = environment._lose
    _crash_coordinator = environment._crash_coordinator
    _crash_partition = environment._crash_partition
    _reload_subscription = environment._reload_subscription
    _roll_over = environment._roll_over
    _retention = environment._retention
    # symmetry: proofs/check/symmetry.py
    canonical = symmetry.canonical
    permute = symmetry.permute
    _permute_client = symmetry._permute_client
    _renamed = symmetry._renamed
    # checks: proofs/check/checks.py
    decided = checks.decided
    violations = checks.violations
    _buffer_recovers = checks._buffer_recovers
    _partition_safety = checks._partition_safety
    view = checks.view
    _undelivered_due = checks._undelivered_due
    goals = checks.goals
