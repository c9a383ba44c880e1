"""Faults on demand for ``txnmodel serve``: the simulator's fault kinds and rates, on a real socket.

``serve --faults on`` injects, seeded by ``--seed`` and logged one line each (and listed in the
history's metadata), the faults of :data:`engine.simulated.faults.FAULT_RATES`:

* every 1-4 s a component fault is drawn: a broker crash (every connection drops, every component
  loses its memory, the broker restarts after 20-300 ms and reloads from its ledgers), a
  coordinator crash (reloaded after 20-300 ms), or a topic unload (the partition reloads; its
  producers and consumers get CLOSE_PRODUCER / CLOSE_CONSUMER and reconnect); and, serve's own
  kind, a dropped connection (``connection_drop``);
* a request frame is dropped (``drop_request``): the client's operation timeout ends it.  Only a
  request the client awaits an answer to is dropped (one with a request id, or a SEND): FLOW,
  REDELIVER_UNACKNOWLEDGED_MESSAGES and an ACK without a receipt are never answered, so no timeout
  would ever tell the client, and TCP loses no frame on a live connection;
* a response is dropped (``drop_response``) or, one time in ten, the connection's output is held
  back up to ``max_extra_delay_ms`` (later frames wait behind it: TCP keeps the order);
* ledger appends and reads fail (``ledger_append``, ``ledger_read``): the component reloads from
  what is durable and the request fails with PersistenceError (or goes unanswered);
* a new transaction gets a short timeout of 50-400 ms (``short_txn_timeout``) instead of the one
  the client asked for, so it expires (the coordinator aborts it, TC-18);
* END_TXN_ON_* requests time out in the coordinator's buffer client (``participant_timeout``).

``duplicate_request`` is accepted and ignored: TCP does not duplicate, and a client that retries
on its own is the only source of duplicates on a socket.

Besides these faults, which a correct broker survives, the **quirks** of :mod:`engine.serve.quirks`
make the server break one promise each (hide a message, deliver a delayed one at once, ignore a
redelivery request, ...), so that a check of ``txnmodel verify`` has something to catch.

A spec is ``on`` (the fault rates, no quirk), ``off``, or comma-separated ``KIND=RATE`` items (a
fault or a quirk), after ``on`` to override some rates or alone to inject only those kinds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from engine.broker import Broker, BrokerFaults, Delivered, SubscriptionService
from engine.ledger_store import LedgerFaults, LedgerStore
from engine.scheduler import Simulation
from engine.serve.connection import Connection, Consumer, Network
from engine.serve.quirks import MILLISECOND_QUIRKS, QUIRKS, Quirks
from engine.simulated.faults import FAULT_RATES as SIMULATOR_RATES
from spec.frame import Frame
from spec.pb import PulsarApi_pb2 as api

__all__ = ["FAULT_RATES", "QUIRKS", "FaultEvent", "ServeFaults", "awaited", "ledger_faults", "parse_faults"]

log = logging.getLogger("runners.serve.faults")

FAULT_RATES: dict[str, float] = {**{k: float(v) for k, v in SIMULATOR_RATES.items()}, "connection_drop": 0.2}
T = api.BaseCommand
# Responses never dropped: without them nothing else can happen on the connection, and a dropped
# handshake tells a client developer nothing a refused connection would not.
_KEPT = frozenset({T.CONNECTED, T.PONG, T.MESSAGE})


def awaited(command: Any) -> bool:
    """Whether the client waits for an answer to ``command`` and gives up after its timeout: a
    request with a request id, or a SEND (its receipt).  Nothing answers the others (FLOW,
    REDELIVER_UNACKNOWLEDGED_MESSAGES, an ACK without a request id, PING's PONG aside), so a client
    never learns that one was lost: dropping one would leave a consumer without permits, an
    unacknowledged message never redelivered or an ack never made, for as long as the connection
    lives."""
    if command.type == T.SEND:
        return True
    for descriptor, body in command.ListFields():
        if descriptor.message_type is not None and "request_id" in descriptor.message_type.fields_by_name:
            return bool(body.HasField("request_id"))
    return False


def parse_faults(spec: str) -> dict[str, float] | None:
    """``on`` / ``off`` / ``on,KIND=RATE,...`` / ``KIND=RATE,...`` (a fault of :data:`FAULT_RATES`
    or a quirk of :data:`~engine.serve.quirks.QUIRKS`); a bad kind or rate is a ValueError."""
    items = [item.strip() for item in spec.split(",") if item.strip()]
    if items == ["off"]:
        return None
    rates: dict[str, float] = {}
    if items and items[0] == "on":
        rates = dict(FAULT_RATES)
        items = items[1:]
    elif items and "=" not in items[0]:
        raise ValueError(f"fault spec {spec!r}: expected on, off, or KIND=RATE items")
    else:
        rates = dict.fromkeys(FAULT_RATES, 0.0)
    for item in items:
        kind, sep, value = item.partition("=")
        if not sep or (kind not in FAULT_RATES and kind not in QUIRKS):
            raise ValueError(
                f"fault {item!r}: kinds are {', '.join(sorted(FAULT_RATES))}; quirks are {', '.join(sorted(QUIRKS))}"
            )
        try:
            rate = float(value)
        except ValueError:
            raise ValueError(f"fault {item!r}: {value!r} is not a number") from None
        milliseconds = kind == "max_extra_delay_ms" or kind in MILLISECOND_QUIRKS
        if rate < 0 or (not milliseconds and rate > 1):
            raise ValueError(
                f"fault {item!r}: a rate is in [0, 1] (max_extra_delay_ms, deliver_late_ms: milliseconds >= 0)"
            )
        rates[kind] = rate
    return rates


def ledger_faults(rates: dict[str, float] | None) -> LedgerFaults | None:
    if not rates or not (rates.get("ledger_append") or rates.get("ledger_read")):
        return None
    return LedgerFaults(append=rates.get("ledger_append", 0.0), read=rates.get("ledger_read", 0.0))


@dataclass(frozen=True)
class FaultEvent:
    time_ms: int
    kind: str
    target: str

    def to_json(self) -> dict[str, Any]:
        return {"time_ms": self.time_ms, "kind": self.kind, "target": self.target}


class ServeFaults:
    """Draws every fault from the server's seeded random source (its scheduler's) and records what
    it injected.  It hits the broker and the ledger store directly, and the connections through the
    server's :class:`~engine.serve.connection.Network`."""

    def __init__(
        self, rates: dict[str, float], *, sim: Simulation, broker: Broker, store: LedgerStore, network: Network
    ) -> None:
        self.sim = sim
        self.broker = broker
        self.store = store
        self.network = network
        self.rates = rates
        self.rng = sim.rng
        self.events: list[FaultEvent] = []
        if rates.get("participant_timeout"):
            broker.faults = BrokerFaults(participant_timeout=rates["participant_timeout"])
        store.on_fault = lambda fault: self.injected(
            f"ledger-{fault.operation.op.value.replace('_', '-')}-failed", fault.operation.ledger
        )
        if any(rates.get(k) for k in ("broker_crash", "coordinator_crash", "topic_unload", "connection_drop")):
            self._schedule_component_fault()
        # The broker's quirks stay on through a heal: they are what it is, not a passing disturbance.
        self.quirks = Quirks(rates, sim=sim, injected=self.injected)

    def heal(self) -> None:
        """Stop injecting (what was injected stays in :attr:`events`); a crashed broker restarts."""
        self.rates = dict.fromkeys(self.rates, 0.0)
        self.store.set_faults(False)
        self.broker.faults = BrokerFaults()
        if not self.broker.up:
            self._restart()
        self.injected("heal", "server")

    def injected(self, kind: str, target: str) -> None:
        event = FaultEvent(self.sim.now, kind, target)
        self.events.append(event)
        log.info("fault %s on %s", kind, target)

    def _chance(self, kind: str) -> bool:
        rate = self.rates.get(kind, 0.0)
        return rate > 0 and self.rng.random() < rate

    # -- per frame --------------------------------------------------------------------------------

    def drop_request(self, conn: Connection, command: Any, frame: Frame | None = None) -> bool:
        """Whether a request goes no further: dropped (a fault), or taken by a quirk (dropped or
        answered; a quirk may also rewrite it in place and let it through)."""
        if self.quirks.inbound(conn, command, frame):
            return True
        if not awaited(command) or not self._chance("drop_request"):
            return False
        self.injected(f"request-dropped-{T.Type.Name(command.type)}", conn.peer)
        return True

    def drop_response(self, conn: Connection, command: Any) -> bool:
        """Whether a response is dropped (a quirk may rewrite it in place first)."""
        self.quirks.response(conn, command)
        if command.type in _KEPT or not self._chance("drop_response"):
            return False
        self.injected(f"response-dropped-{T.Type.Name(command.type)}", conn.peer)
        return True

    def dispatch(
        self,
        conn: Connection,
        consumer: Consumer,
        sub: SubscriptionService,
        group: list[Delivered],
        command: Any,
        stored: bytes,
    ) -> bool:
        """Whether the quirks took a MESSAGE (sent, held or hidden it); else the caller sends it."""
        if not self.quirks.active:
            return False
        self.quirks.dispatch(conn, consumer, sub, group, command, stored)
        return True

    def maybe_stall(self, conn: Connection) -> None:
        top = int(self.rates.get("max_extra_delay_ms", 0))
        if top <= 0 or conn.holding or self.rng.random() >= 0.1:
            return
        delay = self.rng.randint(0, top)
        self.injected(f"output-held-{delay}ms", conn.peer)
        conn.hold()
        self.sim.schedule(delay, conn.release)

    def txn_timeout(self, conn: Connection, asked_ms: int) -> int:
        if not self._chance("short_txn_timeout"):
            return asked_ms
        timeout = self.rng.randint(50, 400)
        self.injected(f"short-txn-timeout-{timeout}ms", conn.peer)
        return timeout

    # -- components -------------------------------------------------------------------------------

    def _schedule_component_fault(self) -> None:
        self.sim.schedule(self.rng.randint(1000, 4000), self._component_fault)

    def _component_fault(self) -> None:
        roll = self.rng.random()
        for kind in ("broker_crash", "coordinator_crash", "topic_unload", "connection_drop"):
            rate = self.rates.get(kind, 0.0)
            if roll < rate:
                self.inject(kind)
                break
            roll -= rate
        self._schedule_component_fault()

    def inject(self, kind: str) -> bool:
        """Inject one component fault now: ``broker_crash``, ``coordinator_crash``, ``topic_unload``
        or ``connection_drop``.  False when there was nothing to hit (the broker or the coordinator
        already down, no loaded topic, no connection)."""
        broker, sim = self.broker, self.sim
        if kind == "broker_crash":
            if not broker.up:
                return False
            broker.crash()
            self.network.close_all()
            self.injected("broker-crash", "broker")
            sim.schedule(self.rng.randint(20, 300), self._restart)
        elif kind == "coordinator_crash":
            if not (broker.up and broker.coordinator.ready):
                return False
            broker.coordinator.crash()
            self.injected("coordinator-crash", "coordinator")
            sim.schedule(self.rng.randint(20, 300), self._reload_coordinator)
        elif kind == "topic_unload":
            names = sorted(n for n, p in broker.partitions.items() if p.ready)
            if not (broker.up and names):
                return False
            name = self.rng.choice(names)
            broker.partitions[name].crash()  # its producers and consumers are sent away (close_handles)
            self.injected("topic-unload", name)
            broker.restart_later(broker.partitions[name])
        elif kind == "connection_drop":
            connections = self.network.connections()
            if not connections:
                return False
            conn = connections[self.rng.randrange(len(connections))]
            self.injected("connection-dropped", conn.peer)
            self.network.close(conn, None)
        else:
            raise ValueError(
                f"{kind!r} is not a component fault (broker_crash, coordinator_crash, topic_unload, connection_drop)"
            )
        return True

    def _restart(self) -> None:
        self.broker.restart()
        self.injected("broker-restart", "broker")

    def _reload_coordinator(self) -> None:
        broker = self.broker
        if broker.up and not broker.coordinator.ready:
            loaded = broker.coordinator.load()
            self.injected("coordinator-reload" if loaded else "coordinator-reload-failed", "coordinator")
            if not loaded:
                broker.restart_later(broker.coordinator)
