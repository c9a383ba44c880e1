"""The clients of the composed model: each a program of transactions (:mod:`proofs.check.program`)
driving :mod:`reference.client`'s transaction machine, and the partial-order reduction over their
program steps.

A client slot is ``(phase, transaction index, txn sequence, client-txn digest, next op,
registrations ((target, status), ...), op statuses, held positions ((ledger, entry) | (), ...), end
asked)``; a registration target is partition ``p`` or ``SUB_TARGET + s`` for subscription ``s``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from proofs.check.machines import Machines
from proofs.check.program import ModelSpec, Op
from proofs.check.state import (
    ACK_REQ,
    ACK_RESP,
    ADDP_REQ,
    ADDP_RESP,
    ADDS_REQ,
    ADDS_RESP,
    BEGUN,
    CLIENT_BOUND,
    END_ABORT,
    END_COMMIT,
    END_NONE,
    END_REQ,
    END_RESP,
    ERRORS,
    FROM_CLIENT,
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
    SUB_TARGET,
    Layout,
    Successor,
    WorkingState,
    client_done,
    partition_name,
)
from proofs.check.store import Store
from proofs.check.subscriptions import Subscriptions
from proofs.check.transitions import AddSuccessor
from reference import client as ct
from spec.result import Err, Ok
from spec.types import ClientTxnState, Subscription, TxnID

__all__ = ["Clients"]

_SLOT_FIELDS = ("phase", "k", "seq", "ct", "pc", "regs", "ops", "held", "end")


class Clients:
    """The clients' transitions: their program steps, the answers they get, their timers."""

    def __init__(
        self,
        spec: ModelSpec,
        layout: Layout,
        store: Store,
        machines: Machines,
        add: AddSuccessor,
        subscriptions: Subscriptions,
        sub_names: tuple[Subscription, ...],
    ) -> None:
        self.spec = spec
        self.layout = layout
        self.store = store
        self.value = store.get
        self.machines = machines
        self.add = add
        self.subscriptions = subscriptions
        self.sub_names = sub_names
        self._slots = layout.client_slots
        self._own_footprints = tuple((slot,) for slot in self._slots)

    def initial(self) -> list[tuple[Any, ...]]:
        """Each client's slot: idle before its first transaction (done if it has none)."""
        return [
            (IDLE, 0, -1, 0, 0, (), (), (), END_NONE) if program else client_done() for program in self.spec.programs
        ]

    # --- what a client may do ------------------------------------------------------------------

    def actions(self, s: tuple[Any, ...], out: list[Successor]) -> None:
        """Every client's enabled steps, each its own fairness family (its timer another)."""
        add = self.add
        for c in range(len(self._slots)):
            for label, act in self.enabled(s, c):
                family = ("c", c) if label[0] != "client-timeout" else ("ct", c)
                add(out, s, label, family, act, self.footprint(label))

    def enabled(self, s: tuple[Any, ...], c: int) -> Iterator[tuple[tuple[Any, ...], Callable[..., Any]]]:
        """Client ``c``'s enabled steps in ``s``: their labels and actions."""
        phase, k, seq, ctd, pc, _regs, ops, _held, end = s[self._slots[c]]
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
                if self.subscriptions.consumer_allowed(c, op.target):
                    yield ("receive", c, op.target), lambda w: self._receive(w, c, op.target)
                return
            yield ("issue", c, pc), lambda w: self._issue(w, c)
            return
        if self.spec.pipelined or settled:
            for choice in script.ends:
                yield ("end", c, choice), lambda w, choice=choice: self._end(w, c, choice)

    def footprint(self, label: tuple[Any, ...]) -> tuple[int, ...]:
        """What a client's step reads and writes: its own slot, and a hand-out's for a receive."""
        c = label[1]
        if label[0] == "receive":
            return (self.layout.client(c), *self.subscriptions.reader_footprint(label[2]))
        return self._own_footprints[c]

    # --- partial-order reduction ---------------------------------------------------------------

    def ample(self, s: tuple[Any, ...]) -> Successor | None:
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
        busy = {m[1] for m in s[NET] if m[0] in CLIENT_BOUND or m[0] in FROM_CLIENT}
        for c in range(self.spec.clients):
            if c in busy or not self._quiet(s, c):
                continue
            actions = list(self.enabled(s, c))
            if len(actions) != 1 or actions[0][0][0] not in ("begin", "issue", "end"):
                continue
            label, act = actions[0]
            w = WorkingState(s, self.layout)
            if act(w) is False:
                continue
            after = w.freeze()
            if after != s:
                return Successor(label, after, ("c", c), tuple(w.broken))
        return None

    def _quiet(self, s: tuple[Any, ...], c: int) -> bool:
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

    # --- program steps -------------------------------------------------------------------------

    def _set(self, w: WorkingState, c: int, **changes: Any) -> None:
        current = dict(zip(_SLOT_FIELDS, w.clients[c], strict=True))
        current.update(changes)
        w.clients[c] = tuple(current[n] for n in _SLOT_FIELDS)

    def _begin(self, w: WorkingState, c: int) -> None:
        k = w.clients[c][1]
        self._set(w, c, phase=BEGUN)
        w.send((NEW_REQ, c, k))

    def _client_timeout(self, w: WorkingState, c: int) -> None:
        self.machines.client(w, c, ct.TimeoutFired())
        self._next_txn(w, c)  # the client gives the transaction up (TC-36)

    def _next_txn(self, w: WorkingState, c: int) -> None:
        k = w.clients[c][1] + 1
        if k < len(self.spec.programs[c]):
            w.clients[c] = (IDLE, k, -1, 0, 0, (), (), (), END_NONE)
        else:
            w.clients[c] = client_done()

    def _issue(self, w: WorkingState, c: int) -> None:
        """The client's next operation: a send, or the ack of a consumed message (TC-30, TC-31)."""
        _phase, k, seq, _ctd, pc, regs, ops, _held, _end = w.clients[c]
        op = self.spec.programs[c][k].ops[pc]
        if op.kind == "send":
            command: Any
            target, command = op.target, ct.Send(partition_name(op.target))
        else:
            target = SUB_TARGET + op.target
            command = ct.Ack(self.sub_names[op.target])
        result = self.machines.client(w, c, command)
        ops = list(ops)
        if isinstance(result, Err):
            ops[pc] = OP_FAILED  # the client refuses it: nothing was sent
            self._set(w, c, pc=pc + 1, ops=tuple(ops))
            return
        reg = dict(regs)
        if any(isinstance(e, ct.SendAddPartitionToTxn | ct.SendAddSubscriptionToTxn) for e in result.effects):
            reg[target] = REG_ASKED
            if op.kind == "send":
                w.send((ADDP_REQ, c, seq, op.target))
            else:
                w.send((ADDS_REQ, c, seq, op.target))
        status = reg.get(target)
        self._set(w, c, pc=pc + 1, regs=tuple(sorted(reg.items())))
        if status == REG_OK:
            self._send_op(w, c, pc)
        elif status == REG_FAILED:
            ops[pc] = OP_FAILED
            self._set(w, c, ops=tuple(ops))
            self._op_completed(w, c, True)
        else:
            ops[pc] = OP_REG
            self._set(w, c, ops=tuple(ops))

    def _send_op(self, w: WorkingState, c: int, i: int) -> None:
        _phase, k, seq, _ctd, _pc, _regs, ops, held, _end = w.clients[c]
        op = self.spec.programs[c][k].ops[i]
        ops = list(ops)
        ops[i] = OP_FLIGHT
        self._set(w, c, ops=tuple(ops))
        if op.kind == "send":
            w.send((SEND_REQ, c, seq, op.target, i, op.deliver_at))
        else:
            ledger, entry = held[i]
            w.send((ACK_REQ, c, seq, op.target, ledger, entry, i, int(op.cumulative)))

    def _op_completed(self, w: WorkingState, c: int, failed: bool) -> None:
        result = self.machines.client(w, c, ct.OpCompleted(failed=failed))
        self._effects(w, c, result)

    def _effects(self, w: WorkingState, c: int, result: Any) -> None:
        seq = w.clients[c][2]
        for effect in result.effects:
            if isinstance(effect, ct.SendEndTxn):
                w.send((END_REQ, c, seq, int(effect.action)))
            elif isinstance(effect, ct.CompleteEnd):
                self._next_txn(w, c)
                return

    def _end(self, w: WorkingState, c: int, choice: str) -> None:
        result = self.machines.client(w, c, ct.Commit() if choice == "commit" else ct.Abort())
        if isinstance(result, Err):
            self._next_txn(w, c)
            return
        self._set(w, c, end=END_COMMIT if choice == "commit" else END_ABORT)
        self._effects(w, c, result)

    def _receive(self, w: WorkingState, c: int, s: int) -> None:
        """The consumer asks subscription ``s`` for a message and holds what it is handed."""
        pos = self.subscriptions.receive(w, s, c)
        if pos is None:
            return
        _phase, _k, _seq, _ctd, pc, _regs, ops, held, _end = w.clients[c]
        ops, held = list(ops), list(held)
        ops[pc] = OP_HELD
        held[pc] = pos
        self._set(w, c, ops=tuple(ops), held=tuple(held))

    # --- answers ---------------------------------------------------------------------------------

    def answer(self, w: WorkingState, m: tuple[int, ...]) -> None:
        """A response reaches its client."""
        kind, c = m[0], m[1]
        phase, k, seq, _ctd, _pc, _regs, ops, _held, _end = w.clients[c]
        if kind == NEW_RESP:
            if phase != BEGUN or m[2] != k:
                return
            if m[4] != 0:
                self._next_txn(w, c)
                return
            txn = ct.initial(self.spec.config, TxnID(0, m[3]), self.spec.txn_timeout_ms)
            ops0 = tuple(OP_NEW for _ in self.spec.programs[c][k].ops)
            held0 = tuple(() for _ in ops0)
            w.clients[c] = (IN_TXN, k, m[3], self.store.put(txn), 0, (), ops0, held0, END_NONE)
            return
        if phase != IN_TXN or m[2] != seq:
            return  # an answer for a transaction this client gave up
        if kind in (ADDP_RESP, ADDS_RESP):
            self._registered(w, m)
            return
        if kind in (SEND_RESP, ACK_RESP):
            i = m[3]
            if ops[i] != OP_FLIGHT:
                return
            current = list(ops)
            current[i] = OP_OK if m[4] == 0 else OP_FAILED
            self._set(w, c, ops=tuple(current))
            self._op_completed(w, c, m[4] != 0)
            return
        if kind == END_RESP:
            error = ERRORS[m[3]] or None
            result = self.machines.client(w, c, ct.EndTxnResponse(error))
            if isinstance(result, Ok):
                self._effects(w, c, result)

    def _registered(self, w: WorkingState, m: tuple[int, ...]) -> None:
        """The answer to ADD_PARTITION_TO_TXN or ADD_SUBSCRIPTION_TO_TXN: the operations waiting on
        the registration go out, or fail."""
        kind, c = m[0], m[1]
        _phase, k, seq, _ctd, _pc, regs, ops, _held, _end = w.clients[c]
        target = m[3] if kind == ADDP_RESP else SUB_TARGET + m[3]
        reg = dict(regs)
        if reg.get(target) != REG_ASKED:
            return
        ok = m[4] == 0
        reg[target] = REG_OK if ok else REG_FAILED
        self._set(w, c, regs=tuple(sorted(reg.items())))
        script = self.spec.programs[c][k]
        for i, status in enumerate(ops):
            if status != OP_REG or _target(script.ops[i]) != target:
                continue
            if ok:
                self._send_op(w, c, i)
            else:
                current = list(w.clients[c][6])
                current[i] = OP_FAILED
                self._set(w, c, ops=tuple(current))
                self._op_completed(w, c, True)
                if w.clients[c][2] != seq:
                    return


def _target(op: Op) -> int:
    return op.target if op.kind == "send" else SUB_TARGET + op.target
