"""The network of the composed model: a multiset of the requests and responses in flight, any of
which may be delivered next; each delivery goes to the component the message is for.

Losing and duplicating a message are the environment's (:mod:`proofs.check.environment`).
"""

from __future__ import annotations

from typing import Any

from proofs.check.clients import Clients
from proofs.check.coordinator import Coordinator
from proofs.check.partitions import Partitions
from proofs.check.state import (
    ACK_REQ,
    ADDP_REQ,
    ADDS_REQ,
    CLIENT_BOUND,
    COORDINATOR_SLOTS,
    END_REQ,
    ENDP,
    ENDP_RESP,
    ENDS,
    ENDS_RESP,
    NET,
    NEW_REQ,
    SEND_REQ,
    Layout,
    Successor,
    WorkingState,
)
from proofs.check.subscriptions import Subscriptions
from proofs.check.transitions import AddSuccessor

__all__ = ["Network"]


class Network:
    """Deliveries: each distinct message in flight, delivered to its receiver."""

    def __init__(
        self,
        layout: Layout,
        add: AddSuccessor,
        clients: Clients,
        coordinator: Coordinator,
        partitions: Partitions,
        subscriptions: Subscriptions,
    ) -> None:
        self.layout = layout
        self.add = add
        self.clients = clients
        self.coordinator = coordinator
        self.partitions = partitions
        self.subscriptions = subscriptions
        # Per message in flight: its delivery's label, fairness family and footprint.
        self._deliveries: dict[tuple[int, ...], tuple[tuple[Any, ...], tuple[Any, ...], tuple[int, ...]]] = {}

    def actions(self, s: tuple[Any, ...], out: list[Successor]) -> set[tuple[int, ...]]:
        """A delivery of each distinct message in flight; the distinct messages."""
        add = self.add
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
                    self.footprint(message),
                )
            label, family, footprint = delivery
            add(out, s, label, family, lambda w, m=message: self.deliver(w, m), footprint)
        return seen_messages

    def footprint(self, m: tuple[int, ...]) -> tuple[int, ...]:
        """What delivering ``m`` reads and writes besides the network: its receiver's slots."""
        kind = m[0]
        if kind in CLIENT_BOUND:
            return (self.layout.client(m[1]),)
        if kind in (SEND_REQ, ENDP):
            return self.partitions.footprint(m[3] if kind == SEND_REQ else m[6])
        if kind in (ENDS, ACK_REQ):
            return self.subscriptions.footprint(m[3] if kind == ACK_REQ else m[6])
        return COORDINATOR_SLOTS

    def deliver(self, w: WorkingState, m: tuple[int, ...]) -> None:
        w.take(m)
        kind = m[0]
        if kind in CLIENT_BOUND:
            self.clients.answer(w, m)
        elif kind in (NEW_REQ, ADDP_REQ, ADDS_REQ, END_REQ):
            self.coordinator.request(w, m)
        elif kind in (ENDP_RESP, ENDS_RESP):
            self.coordinator.participant_answer(w, m)
        elif kind == SEND_REQ:
            self.partitions.append(w, m)
        elif kind == ENDP:
            self.partitions.end_on_partition(w, m)
        elif kind in (ENDS, ACK_REQ):
            self.subscriptions.request(w, m)
        else:
            raise AssertionError(f"unknown message {m}")
