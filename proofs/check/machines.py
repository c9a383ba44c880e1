"""The reference machines of a composed model, stepped through its :class:`~proofs.check.store.Store`.

Every part of the transition system (clients, coordinator, partitions, subscriptions, the
environment) changes a component only through :class:`Machines`: the machine's own ``step`` on the
component's interned state, memoised by the store, under the divergence guard, with the step
properties it breaks recorded on the transition.  An observer (:class:`StepObserver`) sees every
step and every reload that bypasses ``step``; the counterexample vectors of
:mod:`proofs.check.trace` are recorded that way.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any, Protocol

from invariants import buffer as buffer_inv
from invariants import client as client_inv
from invariants import coordinator as coordinator_inv
from invariants import delayed as delayed_inv
from invariants import pending_ack as pending_ack_inv
from proofs.check.program import ModelSpec
from proofs.check.state import StepDiverged, WorkingState
from proofs.check.store import Store
from reference import buffer as tb
from reference import client as ct
from reference import coordinator as tc
from reference import delayed as dl
from reference import pending_ack as pa

__all__ = ["Machines", "StepObserver"]


class StepObserver(Protocol):
    """What sees the machine steps of a model: each step with its result, and each reload of a
    component's state that is not a step (a crashed coordinator, a topic's pending acks)."""

    def stepped(self, machine: str, index: int, command: Any, result: Any) -> None: ...

    def reloaded(self, machine: str, index: int) -> None: ...


class Machines:
    """The machine steps of one model: each returns the step's result and writes the component's
    new digest into the opened state."""

    def __init__(
        self,
        spec: ModelSpec,
        store: Store,
        *,
        step_timeout_s: float | None = None,
        observer: StepObserver | None = None,
    ) -> None:
        self.spec = spec
        self.config = spec.config
        self.store = store
        self.step_timeout_s = step_timeout_s
        self.observer = observer

    def guard(self, compute: Callable[[], tuple[Any, Any]]) -> tuple[Any, Any]:
        """Run a machine step, raising :class:`StepDiverged` when it outlives the step timeout."""
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

    def coordinator(self, w: WorkingState, command: Any) -> Any:
        w.coord, result, broken = self.store.step(
            "coordinator", tc.step, w.coord, command, coordinator_inv.STEP_PROPERTIES, self.guard
        )
        if broken:
            w.broken.extend(f"coordinator/{b}" for b in broken)
        if self.observer is not None:
            self.observer.stepped("coordinator", 0, command, result)
        return result

    def buffer(self, w: WorkingState, p: int, command: Any) -> Any:
        part = w.parts[p]
        d, result, broken = self.store.step("buffer", tb.step, part[0], command, buffer_inv.STEP_PROPERTIES, self.guard)
        w.parts[p] = (d, *part[1:])
        if broken:
            w.broken.extend(f"buffer/{b}" for b in broken)
        if self.observer is not None:
            self.observer.stepped("buffer", p, command, result)
        return result

    def pending_ack(self, w: WorkingState, s: int, command: Any) -> Any:
        sub = w.subs[s]
        d, result, broken = self.store.step(
            "pending_ack", pa.step, sub[0], command, pending_ack_inv.STEP_PROPERTIES, self.guard
        )
        w.subs[s] = (d, *sub[1:])
        if broken:
            w.broken.extend(f"pending_ack/{b}" for b in broken)
        if self.observer is not None:
            self.observer.stepped("pending_ack", s, command, result)
        return result

    def client(self, w: WorkingState, c: int, command: Any) -> Any:
        cl = w.clients[c]
        d, result, broken = self.store.step("client", ct.step, cl[3], command, client_inv.STEP_PROPERTIES)
        w.clients[c] = (*cl[:3], d, *cl[4:])
        if broken:
            w.broken.extend(f"client/{b}" for b in broken)
        if self.observer is not None:
            self.observer.stepped("client", c, command, result)
        return result

    def delayed(self, w: WorkingState, s: int, command: Any) -> Any:
        """A step of subscription ``s``'s delayed-delivery tracker (created on its first use)."""
        sub = w.subs[s]
        tracker = sub[7]
        if tracker == 0:
            tracker = self.store.put(dl.initial(self.config, tracker=self.spec.tracker))
        d, result, broken = self.store.step("delayed", dl.step, tracker, command, delayed_inv.STEP_PROPERTIES)
        w.subs[s] = (*sub[:7], d)
        if broken:
            w.broken.extend(f"delayed/{b}" for b in broken)
        if self.observer is not None:
            self.observer.stepped("delayed", s, command, result)
        return result

    def reloaded(self, machine: str, index: int) -> None:
        """A component's state was rebuilt from what it made durable, not stepped."""
        if self.observer is not None:
            self.observer.reloaded(machine, index)
