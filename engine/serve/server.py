"""The engine's broker behind Pulsar's binary protocol: an adapter, on the wall clock.

Every decision still comes from the machines (through :class:`~engine.broker.Broker`); the server
only translates frames into broker requests and their outcomes into frames, and drives the broker's
scheduler (:class:`~engine.scheduler.Simulation`) in real time: the simulation's clock is set from a
monotonic clock (in Unix milliseconds, so ``deliver_at_time`` and transaction timeouts mean what a
client means by them), the events that are due run, and the loop sleeps until the next due event or
socket input.  One thread does all of it, so given the order in which frames arrive the machines
behave deterministically.

:class:`PulsarServer` puts the parts together and runs the loop; each part has a module:

* :mod:`~engine.serve.connection`: the sockets, frames in and bytes out, each connection's producers
  and consumers; :mod:`~engine.serve.wire`: message ids, ack sets, error answers;
* :mod:`~engine.serve.topics`: the topic registry, auto-creation and lookups;
  :mod:`~engine.serve.schemas`: schema versions;
* :mod:`~engine.serve.producers`: producers, sends and their in-order receipts;
* :mod:`~engine.serve.consumers`: subscriptions' consumers, FLOW permits and push delivery;
* :mod:`~engine.serve.acks`: acks, redelivery, seeks and the last message id;
* :mod:`~engine.serve.transactions`: the transaction coordinator's commands;
* :mod:`~engine.serve.replies` and :mod:`~engine.serve.history`: answering a request, and the
  machine-level history of the session; :mod:`~engine.serve.faults`: faults on demand.

What the server decides itself, here, is the connection handshake (protocol version negotiation,
``maxMessageSize``), PING/PONG, and which part a command goes to.  Requests that reach a component
that is down are never answered, as in the simulation: the client's own operation timeout ends them.
``docs/serve.md`` says what a client sees, command by command.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.broker import Broker
from engine.ledger_store import LedgerStore
from engine.recorder import RequestContext
from engine.scheduler import Simulation
from engine.serve.acks import Acks
from engine.serve.connection import Connection, Limits, Network
from engine.serve.consumers import Consumers
from engine.serve.faults import ServeFaults, ledger_faults
from engine.serve.history import ServeHistory
from engine.serve.producers import Producers
from engine.serve.replies import Handler, Replies
from engine.serve.schemas import Schemas
from engine.serve.topics import TC_ASSIGN_TOPIC, TOPICS_FILE, Lookup, TopicRegistry, read_topics
from engine.serve.transactions import Transactions
from engine.serve.wire import MAX_PROTOCOL_VERSION, SERVER_VERSION, ProtocolViolation, RequestError, request_id_of
from engine.storage.disk import FileSystem
from engine.storage.ledger import LedgerError
from spec.config import Config
from spec.errors import InputError, ServerError
from spec.frame import Frame, encode_command
from spec.pb import PulsarApi_pb2 as api

__all__ = ["SERVER_VERSION", "TC_ASSIGN_TOPIC", "PulsarServer", "ServerOptions", "WallClock"]

log = logging.getLogger("runners.serve")

T = api.BaseCommand


class WallClock:
    """Unix milliseconds, advanced by a monotonic clock (never backwards, whatever NTP does)."""

    def __init__(self) -> None:
        self._epoch_ms = int(time.time() * 1000)
        self._start = time.monotonic()

    def now_ms(self) -> int:
        return self._epoch_ms + int((time.monotonic() - self._start) * 1000)


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 0
    ledger: str = "memory"
    data_dir: str | None = None
    config: Config = field(default_factory=lambda: Config(transaction_coordinator_enabled=True))
    seed: int = 0
    record_history: bool = False
    history_id: str = "serve"
    faults: dict[str, float] | None = None  # fault rates (engine.serve.faults.FAULT_RATES); None: off
    disk: FileSystem | None = None  # a file ledger's file system (None: the real one; tests: the simulated disk)


# Bytes kept free in a file ledger's data folder: below it, sends and acks are refused until there
# is room again (a bookie turns read-only the same way, at its disk usage threshold), so that a
# checkpoint and the writes already let through still fit.
ROOM_RESERVE = 1024 * 1024


def open_store(options: ServerOptions, data: Path | None, sim: Simulation) -> LedgerStore:
    """The server's ledger store.  A file store is recovered now, so that an unusable data folder
    (not a folder, its ``ledgers`` a plain file, unreadable or damaged) is refused at startup with
    one line (:class:`InputError`) instead of answering ServiceNotReady forever."""
    if options.ledger == "file":
        if data is None:
            raise ValueError("a file ledger needs a data folder (--data)")
        data.mkdir(parents=True, exist_ok=True)
    store = LedgerStore(
        options.ledger,
        options.config,
        directory=(data / "ledgers") if data is not None else None,
        rng=sim.rng,
        faults=ledger_faults(options.faults),
        disk=options.disk,
        room_reserve=ROOM_RESERVE if options.ledger == "file" else 0,
        full_disk_fatal=False,
    )
    if options.ledger == "file":
        try:
            store.file_store()
        except (LedgerError, OSError) as exc:
            raise InputError(f"unusable data folder: {exc}", where=str(data)) from None
    return store


class PulsarServer:
    """One broker on one TCP socket.  :meth:`start` binds; :meth:`run` serves until :meth:`stop`."""

    def __init__(self, options: ServerOptions, *, clock: WallClock | None = None) -> None:
        self.options = options
        self.config = options.config
        self.clock = clock or WallClock()
        self.sim = Simulation(options.seed)
        self.sim.now = self.clock.now_ms()
        data = Path(options.data_dir) if options.data_dir else None
        self.data_dir = data
        self.store = open_store(options, data, self.sim)
        self._no_room: str | None = None
        self.history = ServeHistory(
            options.history_id, options.seed, self.config, lambda: self.sim.now, record=options.record_history
        )
        # The topic registry is kept in the data folder of a file ledger only.
        registry = data / TOPICS_FILE if data is not None and options.ledger == "file" else None
        known = read_topics(registry)
        partitioned = {name: n for name, n in known.items() if n > 0}
        self.broker = Broker(self.sim, self.store, self.config, topics=partitioned, observer=self.history.observer)
        self.topics = TopicRegistry(self.broker, self.config, registry, known)
        self.topics.load()
        self.network = Network(self.config.max_message_size, self._handle, limits=Limits.of(self.config))
        self.faults: ServeFaults | None = None
        if options.faults is not None:
            self.faults = ServeFaults(
                options.faults, sim=self.sim, broker=self.broker, store=self.store, network=self.network
            )
        self.replies = Replies(self.history, self.faults)
        self.schemas = Schemas(self.replies)
        self.producers = Producers(self.broker, self.topics, self.schemas, self.network, self.replies)
        self.consumers = Consumers(self.broker, self.topics, self.network, self.replies)
        self.broker.consumer_asked = self.consumers.asked
        self.network.on_close.append(self.consumers.drop_all)
        self.network.on_writable.append(self.consumers.writable)
        self.broker.unload_listeners.append(self.close_handles)
        self._handlers: dict[int, Handler] = {
            T.PING: self._ping,
            T.PONG: self._pong,
            **Lookup(self.topics, self.replies, lambda: self.url).handlers(),
            **self.schemas.handlers(),
            **self.producers.handlers(),
            **self.consumers.handlers(),
            **Acks(self.broker, self.consumers, self.replies).handlers(),
            **Transactions(self.broker, self.config, self.replies, self.faults).handlers(),
        }
        # A broker component that raises in one of its own events (a ledger write completing, a
        # timer) crashes and reloads from what is durable, as in the simulation, instead of ending
        # the server for every client.
        self.sim.on_error = self._contain
        self._stopping = False
        self._next_keep_alive = 0.0
        self.address: tuple[str, int] | None = None
        self.on_tick: list[Callable[[], None]] = []  # run once per loop turn (calls from other threads)

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.address is not None, "start() first"
        host, port = self.address
        return f"pulsar://{host}:{port}"

    def start(self) -> str:
        self.address = self.network.listen(self.options.host, self.options.port)
        return self.url

    def stop(self) -> None:
        """Ask :meth:`run` to return (from any thread, or a signal handler)."""
        self._stopping = True
        self.network.wake()

    def stop_waiting(self) -> None:
        """Wake the loop so that its next turn starts now (from any thread)."""
        self.network.wake()

    def run(self) -> None:
        while not self._stopping:
            self.turn()

    def turn(self, max_wait_s: float = 1.0) -> None:
        """One turn of the loop: run what is due, wait for input or the next due event, handle it."""
        self._advance()
        due = self.sim.next_due()
        wait = max_wait_s if due is None else min(max_wait_s, max(0.0, (due - self.clock.now_ms()) / 1000))
        if self.consumers.woken:
            wait = 0.0
        self.network.poll(wait)
        self._advance()
        self._keep_alive()
        self._check_room()
        for hook in self.on_tick:
            hook()

    def close(self) -> None:
        """Close every connection and the listener, and every ledger handle (what was acknowledged
        is durable already: the file ledger syncs before it acknowledges)."""
        self.network.shutdown()
        self.store.close_all()

    def _advance(self) -> None:
        """Run every event due by the wall clock, then pump the consumers that have work."""
        now = self.clock.now_ms()
        if now > self.sim.now:
            self.sim.now = now
        while (due := self.sim.next_due()) is not None and due <= self.sim.now:
            self.sim.run_one()
        self.consumers.pump_woken()

    def _check_room(self) -> None:
        """A file store's room to write (:meth:`LedgerStore.check_room`, a statvfs), every turn of
        the loop: its changes are logged, once each way."""
        reason = self.store.check_room() if self.store.kind == "file" else self.store.no_room
        if reason is not None and self._no_room is None:
            log.warning(
                "no room to write (%s): sends and acks get PersistenceError and new producers "
                "ProducerBlockedQuotaExceededException until there is room again; stored messages are still read",
                reason,
            )
        elif reason is None and self._no_room is not None:
            log.warning("room to write again in %s: sends and acks resume", self.data_dir)
        self._no_room = reason

    def _keep_alive(self) -> None:
        """Pulsar's keep-alive, every ``keepAliveIntervalSeconds`` of each connection: one that has
        not sent CONNECT is closed; one that sent no frame since the last PING is closed (unless
        its input is paused while it still reads what waits for it); the others get a PING."""
        now = time.monotonic()
        if now < self._next_keep_alive:
            return
        interval = self.config.keep_alive_interval_seconds
        self._next_keep_alive = now + min(1.0, interval / 4)
        for conn in self.network.connections():
            checks = int((now - conn.opened) // interval)
            if checks <= conn.keep_alive_checks:
                continue
            conn.keep_alive_checks = checks
            if not conn.connected:
                self.network.close(conn, f"no CONNECT within keepAliveIntervalSeconds ({interval} s)")
                continue
            ping = conn.keep_alive
            still_reading = ping is not None and self.network.reading_paused(conn) and conn.bytes_out > ping[1]
            if ping is not None and conn.frames_in == ping[0] and not still_reading:
                self.network.close(conn, f"no answer to a PING within keepAliveIntervalSeconds ({interval} s)")
                continue
            if conn.protocol_version >= 1:
                conn.keep_alive = (conn.frames_in, conn.bytes_out)
                conn.send(encode_command(T(type=T.PING, ping=api.CommandPing())))

    def _contain(self, exc: Exception) -> bool:
        contained = self.broker.contain(exc)
        if contained:
            log.error("%s; it reloads from what is durable", self.broker.failures[-1].describe())
        return contained

    def close_handles(self, partition: str) -> None:
        """A partition's memory went while the broker stays up (an unload, a reload after a failed
        write, a deletion): its producers and consumers are told to reconnect (CLOSE_PRODUCER /
        CLOSE_CONSUMER with request id -1, as a broker sends when it unloads a topic).  A handle
        kept would name what the reloaded partition no longer knows: a consumer its subscription
        forgot (it would receive nothing again), a producer whose receipts wait behind a send the
        partition never answered."""
        self.producers.send_away(partition)
        self.consumers.reconnect(lambda c: c.partition == partition)

    # -- dispatching a frame -----------------------------------------------------------------------

    def _handle(self, conn: Connection, frame: Frame) -> None:
        cmd = frame.command
        kind = cmd.type
        if kind == T.CONNECT:
            self._connect(conn, cmd.connect)
            return
        if not conn.connected:
            raise ProtocolViolation(f"{T.Type.Name(kind)} before CONNECT")
        if self.faults is not None and self.faults.drop_request(conn, cmd, frame):
            return
        handler = self._handlers.get(kind)
        if handler is None:
            self._unsupported(conn, cmd)
            return
        context = self.history.begin(self.sim.now)
        try:
            if kind == T.PRODUCER and self.store.no_room is not None:
                # Pulsar's error for a producer that may not write now (a backlog quota's
                # producer_exception): a client fails its pending sends at once on it, where a
                # SEND_ERROR would have it reconnect and resend until its send timeout.
                raise RequestError(
                    ServerError.ProducerBlockedQuotaExceededException, f"no room to write: {self.store.no_room}"
                )
            handler(conn, frame, context)
        except OSError as exc:
            # The data folder refused a write outside the ledgers (the topic registry on a full,
            # read-only or unwritable file system): the request fails, the connection stays.
            log.warning("%s from %s failed: %s", T.Type.Name(kind), conn.peer, exc)
            if request_id_of(cmd) is not None and not conn.closed:
                self.replies.error(conn, kind, cmd, ServerError.PersistenceError, f"cannot write: {exc}")
                self.history.answered(context, False)
        except RequestError as exc:
            if request_id_of(cmd) is None:
                # Nothing to answer (an ACK or FLOW for a consumer that is gone, say): as a broker
                # does, the command is ignored and the connection stays.
                log.debug("ignored %s from %s: %s", T.Type.Name(kind), conn.peer, exc.message)
                return
            self.replies.error(conn, kind, cmd, exc.code, exc.message)
            self.history.answered(context, False)
        except ProtocolViolation:
            raise
        except Exception:
            # A bug this frame reached: the request gets an error where the protocol has one, and
            # the network closes this connection only, logging the failure once with the peer.
            if request_id_of(cmd) is not None and not conn.closed:
                self.replies.error(conn, kind, cmd, ServerError.UnknownError, "internal error: see the broker's log")
            raise
        finally:
            self.history.end()

    def _unsupported(self, conn: Connection, cmd: Any) -> None:
        name = T.Type.Name(cmd.type)
        if request_id_of(cmd) is None:
            raise ProtocolViolation(f"{name} is not a command a broker accepts")
        self.replies.error(
            conn, cmd.type, cmd, ServerError.NotAllowedError, f"{name} is not supported by {SERVER_VERSION}"
        )

    def _connect(self, conn: Connection, connect: Any) -> None:
        if conn.connected:
            raise ProtocolViolation("a second CONNECT on one connection")
        conn.connected = True
        conn.protocol_version = min(connect.protocol_version, MAX_PROTOCOL_VERSION)
        self.replies.send(
            conn,
            T(
                type=T.CONNECTED,
                connected=api.CommandConnected(
                    server_version=SERVER_VERSION,
                    protocol_version=conn.protocol_version,
                    max_message_size=self.config.max_message_size,
                ),
            ),
        )

    def _ping(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        self.replies.send(conn, T(type=T.PONG, pong=api.CommandPong()))
        self.replies.done(conn, context, True)

    def _pong(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        self.replies.done(conn, context, True)
