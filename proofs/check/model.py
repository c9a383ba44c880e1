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

The parts, each over the state's layout (:mod:`proofs.check.state`) and the machine steps
(:mod:`proofs.check.machines`), adding their actions through :mod:`proofs.check.transitions`:

* :mod:`proofs.check.clients` -- the client programs, and the partial-order reduction over them;
* :mod:`proofs.check.coordinator` -- the coordinator over its log (:mod:`proofs.check.batched`
  for PIP-160's batched writer);
* :mod:`proofs.check.partitions` and :mod:`proofs.check.subscriptions` -- the participants;
* :mod:`proofs.check.network` and :mod:`proofs.check.environment` -- deliveries and faults;
* :mod:`proofs.check.symmetry` -- the states' representatives under the model's automorphisms;
* :mod:`proofs.check.checks` -- the properties: safety predicates, the liveness goals' view.
"""

from __future__ import annotations

from typing import Any

from invariants import composed
from proofs.check.checks import Properties
from proofs.check.clients import Clients
from proofs.check.coordinator import Coordinator
from proofs.check.environment import Environment
from proofs.check.machines import Machines, StepObserver
from proofs.check.network import Network
from proofs.check.partitions import Partitions
from proofs.check.program import ModelSpec, Symmetry
from proofs.check.state import (
    CLOCK,
    ERRORS,
    Layout,
    StepDiverged,
    Successor,
    WorkingState,
    message_name,
    partition_name,
    subscription_of,
)
from proofs.check.store import Store
from proofs.check.subscriptions import Subscriptions
from proofs.check.symmetry import Symmetries
from proofs.check.transitions import Transitions
from spec.types import TxnID, TxnStatus

__all__ = [
    "ERRORS",
    "Model",
    "StepDiverged",
    "StepObserver",
    "Successor",
    "message_name",
    "partition_name",
    "subscription_of",
]


class Model:
    """The transition system of one :class:`ModelSpec` (see the module docstring): its parts,
    composed.  ``observer`` sees every machine step (:class:`~proofs.check.machines.StepObserver`)."""

    def __init__(
        self,
        spec: ModelSpec,
        store: Store | None = None,
        *,
        step_timeout_s: float | None = None,
        observer: StepObserver | None = None,
    ) -> None:
        self.spec = spec
        self.layout = layout = Layout(spec.partitions, len(spec.subscriptions), spec.clients)
        self.store = store = store if store is not None else Store()
        self.config = spec.config
        self.step_timeout_s = step_timeout_s
        self.sub_names = sub_names = tuple(subscription_of(spec, s) for s in range(len(spec.subscriptions)))
        # The batched log's deferred answers name clients inside interned values: no symmetry there.
        self.symmetries: tuple[Symmetry, ...] = spec.symmetries()[:1] if spec.batched_log else spec.symmetries()
        self.machines = machines = Machines(spec, store, step_timeout_s=step_timeout_s, observer=observer)
        self.transitions = Transitions(layout)
        add = self.transitions.add
        self.partitions = partitions = Partitions(spec, layout, store, machines, add)
        self.subscriptions = subscriptions = Subscriptions(spec, layout, store, machines, add)
        self.clients = clients = Clients(spec, layout, store, machines, add, subscriptions, sub_names)
        self.coordinator = coordinator = Coordinator(spec, store, machines, add, sub_names)
        self.batched = coordinator.batched
        self.network = Network(layout, add, clients, coordinator, partitions, subscriptions)
        self.environment = Environment(spec, layout, store, machines, add, coordinator, subscriptions)
        self.symmetry = Symmetries(self.symmetries, layout, store, sub_names)
        self.properties = Properties(spec, layout, store, sub_names, self.batched)
        # The parts' own steps after the deliveries, in the order a state's successors list them
        # (bound once: this is the explorer's innermost loop).
        steps = [clients.actions, coordinator.actions, partitions.actions, subscriptions.actions]
        if any(spec.publishes):
            steps.append(partitions.publish_actions)
        self._steps = tuple(steps)
        # What the explorer asks of every state, answered by the parts themselves (bound here, not
        # wrapped: they are called once per state or transition): its representative under the
        # symmetries (Symmetries.canonical), the safety predicates it breaks (Properties.violations,
        # with the slots a transition changed: only what reads them), the liveness goals
        # (Properties.goals, in the order of the properties given).
        self.canonical = self.symmetry.canonical
        self.violations = self.properties.violations
        self.goals = self.properties.goals

    @property
    def verify_deltas(self) -> bool:
        """Tests set this: every memoised transition is recomputed and compared (footprints complete)."""
        return self.transitions.verify_deltas

    @verify_deltas.setter
    def verify_deltas(self, on: bool) -> None:
        self.transitions.verify_deltas = on

    def value(self, d: int) -> Any:
        """The component state interned under digest ``d``."""
        return self.store.get(d)

    def initial(self) -> tuple[Any, ...]:
        """The initial state: every component fresh, nothing in flight, no fault used."""
        spec = self.spec
        coord, clog, caux = self.coordinator.initial()
        parts = self.partitions.initial()
        subs = self.subscriptions.initial()
        clients = self.clients.initial()
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

    def successors(self, s: tuple[Any, ...], *, por: bool = False) -> list[Successor]:
        """Every transition from ``s`` that changes it.  With ``por``, the single local step of a
        client whose every other step is disabled, when one exists (see :meth:`Clients.ample`)."""
        if por:
            ample = self.clients.ample(s)
            if ample is not None:
                return [ample]
        out: list[Successor] = []
        messages = self.network.actions(s, out)
        for actions in self._steps:
            actions(s, out)
        clock_limit = self.spec.clock_limit
        if clock_limit and s[CLOCK] < clock_limit:
            self.transitions.add(out, s, ("time",), ("clock",), _advance_clock, (CLOCK,))
        if not self.spec.faults.timeouts and not any(x.family is not None for x in out):
            # Without ``timeouts`` the transaction timeout is long against everything else: the
            # coordinator's timeout tracker (TC-18) fires only once nothing but a fault can happen,
            # which is when a client waits for an answer that will never come or for a message that
            # is not there.  Pulsar's coordinator always runs the tracker, so a transaction no one
            # ends is aborted; a model without it would find every lost answer a liveness violation.
            self.coordinator.ticks(s, out)
        self.environment.actions(s, out, messages)
        return out

    # --- symmetry: proofs/check/symmetry.py ------------------------------------------------------

    def permute(self, s: tuple[Any, ...], g: int) -> tuple[Any, ...]:
        """The image of ``s`` under symmetry ``g``."""
        return self.symmetry.permute(s, g)

    # --- properties: proofs/check/checks.py ------------------------------------------------------

    def decided(self, s: tuple[Any, ...]) -> dict[TxnID, TxnStatus]:
        """The status each transaction's logged records gave it."""
        return self.properties.decided(s)

    def view(self, s: tuple[Any, ...]) -> composed.SystemView:
        """What the cross-machine predicates and the liveness goals read of ``s``."""
        return self.properties.view(s)


def _advance_clock(w: WorkingState) -> None:
    w.clock += 1
