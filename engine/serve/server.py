"""The engine's broker behind Pulsar's binary protocol: an adapter, on the wall clock.

Every decision still comes from the machines (through :class:`~engine.broker.Broker`);
this module only translates frames into broker requests and their outcomes into frames, and drives
the broker's scheduler (:class:`~engine.scheduler.Simulation`) in real time: the simulation's
clock is set from a monotonic clock (in Unix milliseconds, so ``deliver_at_time`` and transaction
timeouts mean what a client means by them), the events that are due run, and the loop sleeps until
the next due event or socket input.  One thread does all of it, so given the order in which frames
arrive the machines behave deterministically.

What the adapter decides itself, because it is about the protocol rather than a machine:

* the connection handshake (protocol version negotiation, ``maxMessageSize``), PING/PONG;
* lookups (this broker owns every topic: LOOKUP answers "connect here", authoritative) and topic
  auto-creation (broker.conf's ``allowAutoTopicCreation``, ``allowAutoTopicCreationType``,
  ``defaultNumPartitions``), with the topic registry kept in the data folder;
* push delivery: a consumer's FLOW permits are spent on the engine's ``receive``; a batch entry
  travels as one MESSAGE with the ``ack_set`` of the indexes the dispatcher handed out;
* in-order receipts per producer, as a managed ledger's callbacks come back in order;
* the wire's checks that Pulsar makes outside the machines (checksums, an exclusive subscription's
  second consumer, a subscription type mismatch).

Requests that reach a component that is down are never answered, as in the simulation: the client's
own operation timeout ends them.  ``docs/serve.md`` says what a client sees, command by command.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import json
import logging
import os
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from engine.broker import BatchedMessage, Broker, Delivered, Partition, SubscriptionService
from engine.ledger_store import LedgerStore
from engine.recorder import HistoryRecorder, MachineObserver, RequestContext
from engine.scheduler import Future, Simulation
from engine.serve.faults import ServeFaults, ledger_faults
from engine.serve.wire import (
    COMMAND_FIELD,
    MAX_PROTOCOL_VERSION,
    SERVER_VERSION,
    TXN_RESPONSES,
    UINT64,
    ProtocolViolation,
    RequestError,
    ack_set,
    all_settled,
    error_response,
    failed,
    first_error,
    message_id,
    position_of,
    request_id_of,
    set_bits,
    topic_name,
    wire_error,
)
from engine.storage.ledger import InitialPosition, LedgerError
from reference import buffer as tb
from spec.config import Config
from spec.errors import InputError, ServerError
from spec.frame import (
    Frame,
    decode_batch,
    encode_command,
    encode_frame,
    max_frame_size,
    parse_frame,
)
from spec.pb import PulsarApi_pb2 as api
from spec.result import Ok
from spec.topics import InvalidTopicName, TopicName, parse_topic
from spec.types import Position, TxnAction, TxnID
from spec.types import Subscription as TxnSubscription

__all__ = ["SERVER_VERSION", "TC_ASSIGN_TOPIC", "PulsarServer", "ServerOptions", "WallClock"]

log = logging.getLogger("runners.serve")

# The partitioned topic whose partition i names transaction coordinator i (TransactionCoordinatorID):
# clients read its partition count to learn how many coordinators there are.
TC_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
TOPICS_FILE = "topics.json"  # the topic registry (Pulsar keeps partitioned-topic metadata in ZooKeeper)
_RECEIVE_WAIT_MS = 3_600_000  # a consumer's pending receive re-arms after this (it never misses a message)
_RECV_BYTES = 1 << 16
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


@dataclass
class _Producer:
    producer_id: int
    name: str
    partition: str
    receipts: collections.deque[tuple[int, int, Future[Position], RequestContext | None]] = field(
        default_factory=collections.deque
    )


@dataclass
class _Consumer:
    consumer_id: int  # the connection's id for it
    engine_id: int  # the subscription's (server-wide) consumer id
    partition: str
    subscription: str
    permits: int = 0
    held: collections.deque[Delivered] = field(default_factory=collections.deque)
    waiting: Future[Delivered | None] | None = None
    closed: bool = False


class _Connection:
    def __init__(self, server: PulsarServer, sock: socket.socket, peer: str) -> None:
        self.server = server
        self.sock = sock
        self.peer = peer
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.consumed = 0  # stream offset of inbuf[0], for error offsets
        self.connected = False
        self.closed = False
        self.protocol_version = 0
        self.producers: dict[int, _Producer] = {}
        self.consumers: dict[int, _Consumer] = {}
        self.last_dropped = False
        self.stalled: list[bytes] = []  # while stalled: a marker first, then the held output

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        if self.stalled:
            self.stalled.append(data)
            return
        self.outbuf += data
        self.server._flush(self)

    def command(self, command: Any) -> None:
        """Send a response; the faults may drop it (``last_dropped``) or hold this connection's
        output back for a while (everything after it waits too, so the order holds)."""
        faults = self.server.faults
        self.last_dropped = faults is not None and faults.drop_response(self, command)
        if not self.last_dropped:
            if faults is not None:
                faults.maybe_stall(self)
            self.send(encode_command(command))

    def release(self) -> None:
        """The stall is over: what waited goes out in order."""
        held, self.stalled = self.stalled, []
        for data in held[1:]:
            self.outbuf += data
        self.server._flush(self)


class PulsarServer:
    """One broker on one TCP socket.  :meth:`start` binds; :meth:`run` serves until :meth:`stop`."""

    def __init__(self, options: ServerOptions, *, clock: WallClock | None = None) -> None:
        self.options = options
        self.config = options.config
        self.clock = clock or WallClock()
        self.sim = Simulation(options.seed)
        self.sim.now = self.clock.now_ms()
        data = Path(options.data_dir) if options.data_dir else None
        if options.ledger == "file":
            if data is None:
                raise ValueError("a file ledger needs a data folder (--data)")
            data.mkdir(parents=True, exist_ok=True)
        self.data_dir = data
        self.store = LedgerStore(
            options.ledger,
            self.config,
            directory=(data / "ledgers") if data is not None else None,
            rng=self.sim.rng,
            faults=ledger_faults(options.faults),
        )
        self.recorder: HistoryRecorder | None = None
        self.observer: MachineObserver | None = None
        if options.record_history:
            self.recorder = HistoryRecorder(options.history_id, options.seed, lambda: self.sim.now)
            processes = itertools.count()
            self.observer = MachineObserver(self.recorder, lambda: next(processes), self.config)
        # topic full name -> partitions (0: non-partitioned); read back from the data folder.
        self.topics: dict[str, int] = self._read_topics()
        partitioned = {name: n for name, n in self.topics.items() if n > 0}
        self.broker = Broker(self.sim, self.store, self.config, topics=partitioned, observer=self.observer)
        self.broker.unload_listeners.append(self.close_handles)
        for name, n in self.topics.items():
            if n == 0:
                self._add_partition(name)
        self.schemas: dict[str, list[Any]] = {}  # topic -> schema versions (in memory only)
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._connections: dict[int, _Connection] = {}
        self._engine_ids = itertools.count(1)
        self._producer_names = itertools.count()
        self._dirty: set[int] = set()  # ids of consumers to pump
        self._consumers_by_key: dict[int, tuple[_Connection, _Consumer]] = {}
        self._stopping = False
        self.address: tuple[str, int] | None = None
        self.on_tick: list[Callable[[], None]] = []  # run once per loop turn (calls from other threads)
        self.faults: ServeFaults | None = None
        if options.faults is not None:
            self.faults = ServeFaults(self, options.faults)

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.address is not None, "start() first"
        host, port = self.address
        return f"pulsar://{host}:{port}"

    def start(self) -> str:
        listener = socket.create_server((self.options.host, self.options.port), reuse_port=False)
        listener.setblocking(False)
        self._listener = listener
        self.address = listener.getsockname()[:2]
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        return self.url

    def stop(self) -> None:
        """Ask :meth:`run` to return (from any thread, or a signal handler)."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def stop_waiting(self) -> None:
        """Wake the loop so that its next turn starts now (from any thread)."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def run(self) -> None:
        while not self._stopping:
            self.turn()

    def turn(self, max_wait_s: float = 1.0) -> None:
        """One turn of the loop: run what is due, wait for input or the next due event, handle it."""
        self._advance()
        due = self.sim.next_due()
        wait = max_wait_s if due is None else min(max_wait_s, max(0.0, (due - self.clock.now_ms()) / 1000))
        if self._dirty:
            wait = 0.0
        for key, mask in self._selector.select(wait):
            if key.data == "accept":
                self._accept()
            elif key.data == "wake":
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
            else:
                conn = self._connections.get(key.data)
                if conn is None:
                    continue
                if mask & selectors.EVENT_READ:
                    self._read(conn)
                if mask & selectors.EVENT_WRITE and not conn.closed:
                    self._flush(conn)
        self._advance()
        for hook in self.on_tick:
            hook()

    def close(self) -> None:
        """Close every connection and the listener, and every ledger handle (what was acknowledged
        is durable already: the file ledger syncs before it acknowledges)."""
        for conn in list(self._connections.values()):
            self._close(conn, None)
        if self._listener is not None:
            self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        self.store.close_all()

    def _advance(self) -> None:
        """Run every event due by the wall clock, then pump the consumers that have work."""
        now = self.clock.now_ms()
        if now > self.sim.now:
            self.sim.now = now
        while (due := self.sim.next_due()) is not None and due <= self.sim.now:
            self.sim.run_one()
        while self._dirty:
            dirty, self._dirty = self._dirty, set()
            for key in dirty:
                found = self._consumers_by_key.get(key)
                if found is not None:
                    self._pump(*found)

    # -- topics ----------------------------------------------------------------------------------

    def _read_topics(self) -> dict[str, int]:
        if self.data_dir is None or self.options.ledger != "file":
            return {}
        path = self.data_dir / TOPICS_FILE
        if not path.exists():
            return {}
        try:
            raw = json.loads(path.read_text())
            topics = raw["topics"]
            if raw.get("version") != 1 or not isinstance(topics, dict):
                raise ValueError("expected {'version': 1, 'topics': {...}}")
            return {str(k): int(v) for k, v in topics.items()}
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"unreadable topic registry: {exc}", where=str(path)) from None

    def _write_topics(self) -> None:
        if self.data_dir is None or self.options.ledger != "file":
            return
        path = self.data_dir / TOPICS_FILE
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as out:
            json.dump({"version": 1, "topics": dict(sorted(self.topics.items()))}, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        fd = os.open(self.data_dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _add_partition(self, name: str) -> Partition:
        part = Partition(self.broker, name)
        self.broker.partitions[name] = part
        if self.broker.up and not part.load():
            self.broker.restart_later(part)
        return part

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions (0: non-partitioned), as the admin API does."""
        name = parse_topic(topic)
        if name.partition is not None and partitions:
            raise InvalidTopicName(topic, "a partition cannot itself be partitioned")
        if name.full in self.topics:
            raise InvalidTopicName(topic, "already exists")
        self.topics[name.full] = partitions
        self._write_topics()
        if partitions == 0:
            self._add_partition(name.full)
        else:
            self.broker.topics[name.full] = partitions
            for i in range(partitions):
                self._add_partition(name.partition_name(i))

    def _partitions_of(self, name: TopicName) -> int | None:
        """The partition count of a known topic (0: non-partitioned), None if unknown."""
        if name.full == TC_ASSIGN_TOPIC:
            return 1
        return self.topics.get(name.full)

    def _partition_for(self, topic: str, *, create: bool) -> Partition:
        """The partition a producer or consumer names, created on demand when auto-creation allows."""
        name = parse_topic(topic)
        part = self.broker.partitions.get(name.full)
        if part is not None:
            return part
        if name.partition is not None and self.topics.get(name.base, 0) > name.partition:
            return self.broker.partitions[name.full]
        if name.full in self.topics and self.topics[name.full] > 0:
            raise RequestError(ServerError.NotAllowedError, f"{name.full} is partitioned: use its partitions")
        if not (create and self.config.allow_auto_topic_creation):
            raise RequestError(ServerError.TopicNotFound, f"Topic {name.full} does not exist")
        if name.partition is not None and name.base in self.topics:
            raise RequestError(ServerError.TopicNotFound, f"{name.base} has no partition {name.partition}")
        self.create_topic(name.full, 0)
        return self.broker.partitions[name.full]

    # -- sockets ---------------------------------------------------------------------------------

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and friends: keep serving those already connected
                log.warning("accept failed: %s", exc)
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = _Connection(self, sock, f"{addr[0]}:{addr[1]}")
            self._connections[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, sock.fileno())

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._close(conn, f"read failed: {exc}", gone=True)
            return
        if not data:
            self._close(conn, None)
            return
        conn.inbuf += data
        limit = max_frame_size(self.config.max_message_size)
        while not conn.closed:
            try:
                parsed = parse_frame(conn.inbuf, max_frame_size=limit, base=conn.consumed)
            except InputError as exc:
                self._close(conn, f"bad frame: {exc}")
                return
            if parsed is None:
                return
            frame, used = parsed
            del conn.inbuf[:used]
            conn.consumed += used
            try:
                self._handle(conn, frame)
            except ProtocolViolation as exc:
                self._close(conn, str(exc))
                return

    def _flush(self, conn: _Connection) -> None:
        if conn.closed or not conn.outbuf:
            return
        try:
            sent = conn.sock.send(conn.outbuf)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._close(conn, f"write failed: {exc}", gone=True)
            return
        del conn.outbuf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.modify(conn.sock, events, conn.sock.fileno())

    def _close(self, conn: _Connection, reason: str | None, *, gone: bool = False) -> None:
        """Close a connection: its consumers leave their subscriptions (what they held is
        redelivered), its producers go.  ``reason`` is logged as one line: a warning for a client
        that broke the protocol, information when the peer simply went away (``gone``)."""
        if conn.closed:
            return
        if reason is not None:
            log.log(logging.INFO if gone else logging.WARNING, "closing connection from %s: %s", conn.peer, reason)
        conn.closed = True
        for consumer in list(conn.consumers.values()):
            self._drop_consumer(conn, consumer)
        conn.producers.clear()
        fd = conn.sock.fileno()
        self._connections.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def close_handles(self, partition: str) -> None:
        """A partition's memory went while the broker stays up (an unload, a reload after a failed
        write, a deletion): its producers and consumers are told to reconnect (CLOSE_PRODUCER /
        CLOSE_CONSUMER with request id -1, as a broker sends when it unloads a topic).  A handle
        kept would name what the reloaded partition no longer knows: a consumer its subscription
        forgot (it would receive nothing again), a producer whose receipts wait behind a send the
        partition never answered."""
        for conn in list(self._connections.values()):
            for producer in [p for p in conn.producers.values() if p.partition == partition]:
                conn.producers.pop(producer.producer_id, None)
                close = api.CommandCloseProducer(producer_id=producer.producer_id, request_id=UINT64)
                conn.send(encode_command(T(type=T.CLOSE_PRODUCER, close_producer=close)))
        self._reconnect_consumers(lambda c: c.partition == partition)

    def _reconnect_consumers(self, chosen: Callable[[_Consumer], bool]) -> None:
        """Drop the chosen consumers and tell their clients to reconnect (CLOSE_CONSUMER, request id -1)."""
        for conn in list(self._connections.values()):
            for consumer in [c for c in conn.consumers.values() if chosen(c)]:
                self._drop_consumer(conn, consumer)
                close = api.CommandCloseConsumer(consumer_id=consumer.consumer_id, request_id=UINT64)
                conn.send(encode_command(T(type=T.CLOSE_CONSUMER, close_consumer=close)))

    def connections(self) -> list[_Connection]:
        return list(self._connections.values())

    def drop_connection(self, conn: _Connection) -> None:
        self._close(conn, None)

    def disconnect_all(self) -> None:
        """Drop every client connection (a broker crash, or a dropped-connections fault)."""
        for conn in list(self._connections.values()):
            self._close(conn, None)

    # -- dispatching a frame -----------------------------------------------------------------------

    def _handle(self, conn: _Connection, frame: Frame) -> None:
        cmd = frame.command
        kind = cmd.type
        if kind == T.CONNECT:
            self._connect(conn, cmd.connect)
            return
        if not conn.connected:
            raise ProtocolViolation(f"{T.Type.Name(kind)} before CONNECT")
        if self.faults is not None and self.faults.drop_request(conn, cmd):
            return
        handler = _HANDLERS.get(kind)
        if handler is None:
            self._unsupported(conn, cmd)
            return
        context = None
        if self.observer is not None:
            context = self.observer.begin_request(self.sim.now)
        try:
            handler(self, conn, frame, context)
        except RequestError as exc:
            request_id = request_id_of(cmd)
            if request_id is None:
                # Nothing to answer (an ACK or FLOW for a consumer that is gone, say): as a broker
                # does, the command is ignored and the connection stays.
                log.debug("ignored %s from %s: %s", T.Type.Name(kind), conn.peer, exc.message)
                return
            self._answer_error(conn, kind, cmd, exc.code, exc.message)
            if context is not None:
                assert self.observer is not None
                self.observer.answered(context, False)
            context = None
        finally:
            if self.observer is not None:
                self.observer.end_request()

    def _done(self, conn: _Connection, context: RequestContext | None, success: bool) -> None:
        """The answer to a request left for the client: its machine steps complete (a dropped
        answer never reaches the client, so they stay open, as in the simulation)."""
        if context is not None and self.observer is not None and not conn.last_dropped:
            self.observer.answered(context, success)

    def _unsupported(self, conn: _Connection, cmd: Any) -> None:
        name = T.Type.Name(cmd.type)
        request_id = request_id_of(cmd)
        if request_id is None:
            raise ProtocolViolation(f"{name} is not a command a broker accepts")
        self._answer_error(
            conn, cmd.type, cmd, ServerError.NotAllowedError, f"{name} is not supported by {SERVER_VERSION}"
        )

    def _answer_error(self, conn: _Connection, kind: int, cmd: Any, number: int, message: str) -> None:
        conn.command(error_response(kind, cmd, number, message))

    # -- connection ------------------------------------------------------------------------------

    def _connect(self, conn: _Connection, connect: Any) -> None:
        if conn.connected:
            raise ProtocolViolation("a second CONNECT on one connection")
        conn.connected = True
        conn.protocol_version = min(connect.protocol_version, MAX_PROTOCOL_VERSION)
        conn.command(
            T(
                type=T.CONNECTED,
                connected=api.CommandConnected(
                    server_version=SERVER_VERSION,
                    protocol_version=conn.protocol_version,
                    max_message_size=self.config.max_message_size,
                ),
            )
        )

    def _ping(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        conn.command(T(type=T.PONG, pong=api.CommandPong()))
        self._done(conn, context, True)

    def _pong(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        self._done(conn, context, True)

    # -- lookup ----------------------------------------------------------------------------------

    def _partitioned_metadata(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.partitionMetadata
        name = topic_name(cmd.topic)
        partitions = self._partitions_of(name)
        if partitions is None and name.partition is None:
            auto = self.config.allow_auto_topic_creation and cmd.metadata_auto_creation_enabled
            if auto and self.config.allow_auto_topic_creation_type == "partitioned":
                self.create_topic(name.full, self.config.default_num_partitions)
                partitions = self.config.default_num_partitions
            elif not cmd.metadata_auto_creation_enabled and not self.config.allow_auto_topic_creation:
                raise RequestError(ServerError.TopicNotFound, f"Topic {name.full} does not exist")
            else:
                partitions = 0  # created as a non-partitioned topic by its first producer or consumer
        conn.command(
            T(
                type=T.PARTITIONED_METADATA_RESPONSE,
                partitionMetadataResponse=api.CommandPartitionedTopicMetadataResponse(
                    request_id=cmd.request_id,
                    partitions=partitions or 0,
                    response=api.CommandPartitionedTopicMetadataResponse.Success,
                ),
            )
        )
        self._done(conn, context, True)

    def _lookup(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.lookupTopic
        topic_name(cmd.topic)
        conn.command(
            T(
                type=T.LOOKUP_RESPONSE,
                lookupTopicResponse=api.CommandLookupTopicResponse(
                    request_id=cmd.request_id,
                    brokerServiceUrl=self.url,
                    response=api.CommandLookupTopicResponse.Connect,
                    authoritative=True,
                    proxy_through_service_url=False,
                ),
            )
        )
        self._done(conn, context, True)

    def _topics_of_namespace(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.getTopicsOfNamespace
        prefix = f"persistent://{cmd.namespace}/"
        names = sorted(
            name for name in self.broker.partitions if name.startswith(prefix) and not name.startswith(prefix + "__")
        )
        conn.command(
            T(
                type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                getTopicsOfNamespaceResponse=api.CommandGetTopicsOfNamespaceResponse(
                    request_id=cmd.request_id, topics=names
                ),
            )
        )
        self._done(conn, context, True)

    # -- schemas ---------------------------------------------------------------------------------

    def _schema_version(self, topic: str, schema: Any) -> bytes:
        versions = self.schemas.setdefault(parse_topic(topic).base, [])
        for number, known in enumerate(versions):
            if known == schema:
                return number.to_bytes(8, "big")
        versions.append(schema)
        return (len(versions) - 1).to_bytes(8, "big")

    def _get_schema(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.getSchema
        versions = self.schemas.get(topic_name(cmd.topic).base, [])
        number = int.from_bytes(cmd.schema_version, "big") if cmd.HasField("schema_version") else len(versions) - 1
        if not 0 <= number < len(versions):
            raise RequestError(ServerError.TopicNotFound, f"no schema of {cmd.topic} at version {number}")
        conn.command(
            T(
                type=T.GET_SCHEMA_RESPONSE,
                getSchemaResponse=api.CommandGetSchemaResponse(
                    request_id=cmd.request_id, schema=versions[number], schema_version=number.to_bytes(8, "big")
                ),
            )
        )
        self._done(conn, context, True)

    def _get_or_create_schema(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.getOrCreateSchema
        version = self._schema_version(topic_name(cmd.topic).full, cmd.schema)
        conn.command(
            T(
                type=T.GET_OR_CREATE_SCHEMA_RESPONSE,
                getOrCreateSchemaResponse=api.CommandGetOrCreateSchemaResponse(
                    request_id=cmd.request_id, schema_version=version
                ),
            )
        )
        self._done(conn, context, True)

    # -- producers -------------------------------------------------------------------------------

    def _producer(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.producer
        if cmd.producer_id in conn.producers:
            known = conn.producers[cmd.producer_id]
            if known.partition != topic_name(cmd.topic).full:
                raise RequestError(ServerError.ProducerBusy, f"producer id {cmd.producer_id} is in use")
            producer = known  # a retried PRODUCER: the same answer
        else:
            part = self._partition_for(cmd.topic, create=True)
            if not self.broker.up or not part.ready:
                raise RequestError(ServerError.ServiceNotReady, f"topic {part.name} is not loaded")
            name = cmd.producer_name if cmd.HasField("producer_name") else f"txnmodel-{next(self._producer_names)}"
            producer = _Producer(cmd.producer_id, name, part.name)
            conn.producers[cmd.producer_id] = producer
        success = api.CommandProducerSuccess(request_id=cmd.request_id, producer_name=producer.name)
        if cmd.HasField("schema"):
            success.schema_version = self._schema_version(producer.partition, cmd.schema)
        conn.command(T(type=T.PRODUCER_SUCCESS, producer_success=success))
        self._done(conn, context, True)

    def _close_producer(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.close_producer
        conn.producers.pop(cmd.producer_id, None)
        conn.command(T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
        self._done(conn, context, True)

    def _send(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.send
        producer = conn.producers.get(cmd.producer_id)
        if producer is None:
            raise ProtocolViolation(f"SEND for unknown producer {cmd.producer_id}")
        message = frame.message
        assert message is not None
        future: Future[Position]
        if frame.checksum_ok is False:
            future = failed(ServerError.ChecksumError, "Checksum failed on the broker")
        elif cmd.is_chunk or message.metadata.HasField("num_chunks_from_msg"):
            future = failed(ServerError.NotAllowedError, "chunked messages are not supported")
        elif message.metadata.compression != api.NONE:
            future = failed(ServerError.NotAllowedError, "compressed messages are not supported yet")
        else:
            future = self._publish(producer, cmd, message)
        producer.receipts.append((cmd.sequence_id, cmd.highest_sequence_id, future, context))
        future.add_done_callback(lambda _: self._receipts(conn, producer))

    def _publish(self, producer: _Producer, cmd: Any, message: Any) -> Future[Position]:
        part = self.broker.partitions.get(producer.partition)
        if part is None:
            return failed(ServerError.TopicNotFound, f"topic {producer.partition} was deleted")
        if not self.broker.up:
            return Future()
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits) if cmd.HasField("txnid_most_bits") else None
        meta = message.metadata
        deliver_at = meta.deliver_at_time if meta.HasField("deliver_at_time") else None
        key = meta.partition_key if meta.HasField("partition_key") else None
        batch = None
        payload = message.payload
        if meta.HasField("num_messages_in_batch"):
            try:
                singles = decode_batch(payload, meta.num_messages_in_batch)
            except InputError as exc:
                return failed(ServerError.UnknownError, f"malformed batch: {exc}")
            batch = [
                BatchedMessage(s.payload, s.metadata.partition_key if s.metadata.HasField("partition_key") else None)
                for s in singles
            ]
            payload = b""
        return part.publish(payload, txn, deliver_at, partition_key=key, batch=batch, sent=(meta, message.payload))

    def _receipts(self, conn: _Connection, producer: _Producer) -> None:
        """Answer a producer's sends in the order they came (the client checks the order)."""
        while producer.receipts and producer.receipts[0][2].done:
            sequence_id, highest, future, context = producer.receipts.popleft()
            error = future.error
            if error is None:
                position = future.result()
                receipt = api.CommandSendReceipt(
                    producer_id=producer.producer_id,
                    sequence_id=sequence_id,
                    message_id=message_id(position),
                    highest_sequence_id=highest,
                )
                conn.command(T(type=T.SEND_RECEIPT, send_receipt=receipt))
            else:
                code, text = wire_error(error)
                conn.command(
                    T(
                        type=T.SEND_ERROR,
                        send_error=api.CommandSendError(
                            producer_id=producer.producer_id,
                            sequence_id=sequence_id,
                            error=api.ServerError.ValueType(code),
                            message=text,
                        ),
                    )
                )
            self._done(conn, context, error is None)

    # -- consumers -------------------------------------------------------------------------------

    def _subscribe(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.subscribe
        if cmd.consumer_id in conn.consumers:
            existing = conn.consumers[cmd.consumer_id]
            if existing.partition == topic_name(cmd.topic).full and existing.subscription == cmd.subscription:
                conn.command(T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
                self._done(conn, context, True)
                return
            raise RequestError(ServerError.ConsumerBusy, f"consumer id {cmd.consumer_id} is in use")
        if cmd.HasField("keySharedMeta") and cmd.keySharedMeta.keySharedMode != api.AUTO_SPLIT:
            raise RequestError(ServerError.NotAllowedError, "Key_Shared STICKY mode is not supported (AUTO_SPLIT is)")
        sub_type = api.CommandSubscribe.SubType.Name(cmd.subType)
        part = self._partition_for(cmd.topic, create=cmd.force_topic_creation)
        if not self.broker.up or not part.ready:
            # As for PRODUCER: the client retries after a fresh lookup, instead of timing out.
            raise RequestError(ServerError.ServiceNotReady, f"topic {part.name} is not loaded")
        existing_sub = part.subscriptions.get(cmd.subscription)
        if existing_sub is not None and existing_sub.ready:
            if existing_sub.sub_type.name != sub_type:
                raise RequestError(ServerError.ConsumerBusy, "Subscription is of different type")
            if sub_type == "Exclusive" and existing_sub.consumers:
                raise RequestError(ServerError.ConsumerBusy, "Exclusive consumer is already connected")
        initial = (
            InitialPosition.EARLIEST if cmd.initialPosition == api.CommandSubscribe.Earliest else InitialPosition.LATEST
        )
        engine_id = next(self._engine_ids)
        start = position_of(cmd.start_message_id) if cmd.HasField("start_message_id") else None  # a reader's (PA-24)
        future = self.broker.subscribe(
            part.name, cmd.subscription, sub_type, initial, engine_id, durable=cmd.durable, start_message=start
        )
        consumer = _Consumer(cmd.consumer_id, engine_id, part.name, cmd.subscription)

        def answered(f: Future[None]) -> None:
            if conn.closed:
                self._leave(consumer)
                return
            if f.error is not None:
                code, text = wire_error(f.error)
                self._answer_error(conn, T.SUBSCRIBE, frame.command, code, text)
            else:
                conn.consumers[cmd.consumer_id] = consumer
                self._consumers_by_key[engine_id] = (conn, consumer)
                conn.command(T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
            self._done(conn, context, f.error is None)

        future.add_done_callback(answered)

    def _service(self, consumer: _Consumer) -> SubscriptionService | None:
        part = self.broker.partitions.get(consumer.partition)
        if part is None or not self.broker.up:
            return None
        sub = part.subscriptions.get(consumer.subscription)
        return sub if sub is not None and sub.ready else None

    def _leave(self, consumer: _Consumer) -> None:
        consumer.closed = True
        self._consumers_by_key.pop(consumer.engine_id, None)
        sub = self._service(consumer)
        if sub is not None:
            sub.remove_consumer(consumer.engine_id)

    def _drop_consumer(self, conn: _Connection, consumer: _Consumer) -> None:
        conn.consumers.pop(consumer.consumer_id, None)
        self._leave(consumer)

    def _consumer(self, conn: _Connection, consumer_id: int) -> _Consumer:
        consumer = conn.consumers.get(consumer_id)
        if consumer is None:
            raise RequestError(ServerError.ConsumerNotFound, f"Consumer {consumer_id} not found")
        return consumer

    def _flow(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.flow
        consumer = conn.consumers.get(cmd.consumer_id)
        if consumer is not None:
            consumer.permits += cmd.messagePermits
            self._pump(conn, consumer)
        self._done(conn, context, True)

    def _pump(self, conn: _Connection, consumer: _Consumer) -> None:
        """Spend the consumer's permits on the engine's receive; a batch entry's messages that the
        dispatcher handed out together travel as one MESSAGE (its ``ack_set`` says which)."""
        while consumer.permits > 0 and not consumer.closed and not conn.closed:
            sub = self._service(consumer)
            if sub is None:
                return
            if consumer.held:
                first = consumer.held.popleft()
            elif consumer.waiting is not None:
                return
            else:
                got = sub.receive(consumer.engine_id, _RECEIVE_WAIT_MS)
                if not got.done:
                    consumer.waiting = got
                    got.add_done_callback(partial(self._arrived, consumer))
                    return
                received = None if got.error is not None else got.result()
                if received is None:
                    continue
                first = received
            group = [first]
            if first.batch_index is not None:
                slot = sub.consumers.get(consumer.engine_id)
                while (
                    slot is not None and first.position in slot.queued and slot.queue[0][0].position == first.position
                ):
                    more = sub.receive(consumer.engine_id, _RECEIVE_WAIT_MS)
                    if not more.done or more.error is not None or more.result() is None:
                        break
                    nxt = more.result()
                    assert nxt is not None
                    group.append(nxt)
            self._deliver(conn, consumer, sub, group)

    def _arrived(self, consumer: _Consumer, future: Future[Delivered | None]) -> None:
        if consumer.waiting is future:
            consumer.waiting = None
        if future.error is None and future.result() is not None:
            delivered = future.result()
            assert delivered is not None
            consumer.held.append(delivered)
        if not consumer.closed:
            self._dirty.add(consumer.engine_id)

    def _deliver(
        self, conn: _Connection, consumer: _Consumer, sub: SubscriptionService, group: list[Delivered]
    ) -> None:
        first = group[0]
        part = sub.partition
        assert part.ledger is not None
        try:
            # The entry is the message as the producer sent it (spec.topic_entry): sent as it is.
            stored = part.ledger.read_entry(first.position)
        except LedgerError as exc:
            # The entry cannot be read back: the consumer reconnects and the dispatcher hands what
            # it held out again (nothing is lost; it stays unacknowledged).
            self._close(conn, f"reading {first.position} of {part.name} failed: {exc}")
            return
        command = api.CommandMessage(
            consumer_id=consumer.consumer_id,
            message_id=message_id(first.position),
            redelivery_count=first.redelivery_count,
        )
        if first.batch_index is not None:
            indexes = sorted({d.batch_index for d in group if d.batch_index is not None})
            if len(indexes) < first.batch_size:
                command.ack_set.extend(ack_set(indexes, first.batch_size))
            consumer.permits -= first.batch_size
        else:
            consumer.permits -= 1
        conn.send(encode_frame(T(type=T.MESSAGE, message=command), stored))

    def _ack(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.ack
        consumer = self._consumer(conn, cmd.consumer_id)
        sub = self._service(consumer)
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits) if cmd.HasField("txnid_most_bits") else None
        cumulative = cmd.ack_type == api.CommandAck.Cumulative
        futures: list[Future[None]] = []
        for mid in cmd.message_id:
            position = position_of(mid)
            if sub is None:
                futures.append(Future())
                continue
            stored = sub.partition.messages.get(position)
            size = stored.batch_size if stored is not None and stored.batch is not None else None
            if size is not None and len(mid.ack_set) > 0:
                # Batch-index acks: the ack set's set bits are the indexes still unacknowledged.
                remaining = set_bits(list(mid.ack_set), size)
                if cumulative:
                    acked = [i for i in range(size) if i not in remaining]
                    futures.append(
                        sub.acknowledge(consumer.engine_id, position, txn, True, max(acked) if acked else None)
                    )
                else:
                    for index in range(size):
                        if index not in remaining:
                            futures.append(sub.acknowledge(consumer.engine_id, position, txn, False, index))
            else:
                futures.append(sub.acknowledge(consumer.engine_id, position, txn, cumulative))
        everything = all_settled(futures)

        def answered(_: Future[None]) -> None:
            error = next((f.error for f in futures if f.error is not None), None)
            if cmd.HasField("request_id") and not conn.closed:
                response = api.CommandAckResponse(
                    consumer_id=cmd.consumer_id,
                    request_id=cmd.request_id,
                    txnid_most_bits=cmd.txnid_most_bits,
                    txnid_least_bits=cmd.txnid_least_bits,
                )
                if error is not None:
                    code, response.message = wire_error(error)
                    response.error = api.ServerError.ValueType(code)
                conn.command(T(type=T.ACK_RESPONSE, ackResponse=response))
            self._done(conn, context, error is None)

        everything.add_done_callback(answered)

    def _redeliver(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.redeliverUnacknowledgedMessages
        consumer = conn.consumers.get(cmd.consumer_id)
        sub = None if consumer is None else self._service(consumer)
        if consumer is not None and sub is not None:
            positions = [position_of(m) for m in cmd.message_ids] if len(cmd.message_ids) > 0 else None
            if positions is None:
                # Redeliver everything: what this consumer holds but has not sent goes back too.
                consumer.held.clear()
            sub.redeliver(consumer.engine_id, positions)
            self._dirty.add(consumer.engine_id)
        self._done(conn, context, True)

    def _close_consumer(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.close_consumer
        consumer = conn.consumers.get(cmd.consumer_id)
        if consumer is not None:
            self._drop_consumer(conn, consumer)
        conn.command(T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
        self._done(conn, context, True)

    def _unsubscribe(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.unsubscribe
        consumer = self._consumer(conn, cmd.consumer_id)
        future = self.broker.unsubscribe(consumer.partition, consumer.subscription, consumer.engine_id)

        def answered(f: Future[None]) -> None:
            if f.error is None:
                conn.consumers.pop(consumer.consumer_id, None)
                consumer.closed = True
                self._consumers_by_key.pop(consumer.engine_id, None)
                conn.command(T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
            else:
                code, text = wire_error(f.error)
                self._answer_error(conn, T.UNSUBSCRIBE, frame.command, code, text)
            self._done(conn, context, f.error is None)

        future.add_done_callback(answered)

    def _get_last_message_id(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.getLastMessageId
        consumer = self._consumer(conn, cmd.consumer_id)
        part = self.broker.partitions.get(consumer.partition)
        if part is None or part.state is None or not self.broker.up:
            return  # the topic is down: no answer (the client times out and retries)
        # TB-18: the last dispatchable position (the buffer's, so never past max_read_position).
        result = tb.get_last_message_id(part.state)
        if not isinstance(result, Ok):
            raise RequestError(result.error.server_error, result.error.message or result.error.name)
        position: Position = result.value
        stored = part.messages.get(position)
        batch_index = stored.batch_size - 1 if stored is not None and stored.batch is not None else None
        response = api.CommandGetLastMessageIdResponse(
            request_id=cmd.request_id, last_message_id=message_id(position, batch_index=batch_index)
        )
        sub = part.subscriptions.get(consumer.subscription)
        if sub is not None and sub.cursor is not None:
            response.consumer_mark_delete_position.CopyFrom(message_id(sub.cursor.mark_delete_position))
        conn.command(T(type=T.GET_LAST_MESSAGE_ID_RESPONSE, getLastMessageIdResponse=response))
        self._done(conn, context, True)

    def _seek(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        """CommandSeek (PA-22, PA-23): reset the cursor, make the consumers reconnect, then succeed."""
        cmd = frame.command.seek
        by_id = cmd.HasField("message_id")
        if not (by_id or cmd.HasField("message_publish_time")):
            raise RequestError(ServerError.MetadataError, "Message id and message publish time were not present")
        consumer = conn.consumers.get(cmd.consumer_id)
        if consumer is None:
            raise RequestError(ServerError.MetadataError, "Consumer not found")
        sub, part, name = self._service(consumer), consumer.partition, consumer.subscription
        if sub is None:
            return  # the topic is down: no answer (the client times out and retries)
        mid = cmd.message_id
        future = (
            sub.seek(position_of(mid), tuple(mid.ack_set) or None) if by_id else sub.seek_time(cmd.message_publish_time)
        )

        def answered(f: Future[None]) -> None:
            if f.error is None:
                self._reconnect_consumers(lambda c: (c.partition, c.subscription) == (part, name))
                conn.command(T(type=T.SUCCESS, success=api.CommandSuccess(request_id=cmd.request_id)))
            else:
                code, text = wire_error(f.error)
                self._answer_error(conn, T.SEEK, frame.command, code, text)
            self._done(conn, context, f.error is None)

        future.add_done_callback(answered)

    # -- transactions ------------------------------------------------------------------------------

    def _txn_enabled(self) -> None:
        if not self.config.transaction_coordinator_enabled:
            raise RequestError(ServerError.NotAllowedError, "Transactions are not enabled.")

    def _coordinator(self, tc_id: int) -> Any:
        self._txn_enabled()
        coordinator = self.broker.coordinator
        if tc_id != coordinator.coordinator_id:
            raise RequestError(ServerError.TransactionCoordinatorNotFound, f"no transaction coordinator {tc_id}")
        return coordinator

    def _tc_connect(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.tcClientConnectRequest
        coordinator = self._coordinator(cmd.tc_id)
        if not self.broker.up or not coordinator.ready:
            raise RequestError(ServerError.ServiceNotReady, f"transaction coordinator {cmd.tc_id} is not loaded")
        conn.command(
            T(
                type=T.TC_CLIENT_CONNECT_RESPONSE,
                tcClientConnectResponse=api.CommandTcClientConnectResponse(request_id=cmd.request_id),
            )
        )
        self._done(conn, context, True)

    def _txn_request(
        self,
        conn: _Connection,
        kind: int,
        cmd: Any,
        future: Future[Any],
        context: RequestContext | None,
        fill: Callable[[Any, Any], None] = lambda body, value: None,
    ) -> None:
        response_type, field_name, message_type = TXN_RESPONSES[kind]

        def answered(f: Future[Any]) -> None:
            if f.error is not None:
                code, text = wire_error(f.error)
                wrapped = T(type=T.Type.ValueType(kind), **{COMMAND_FIELD[kind]: cmd})
                self._answer_error(conn, kind, wrapped, code, text)
            else:
                body = message_type(request_id=cmd.request_id)
                if "txnid_most_bits" in message_type.DESCRIPTOR.fields_by_name and hasattr(cmd, "txnid_most_bits"):
                    body.txnid_most_bits, body.txnid_least_bits = cmd.txnid_most_bits, cmd.txnid_least_bits
                fill(body, f.result())
                conn.command(T(type=T.Type.ValueType(response_type), **{field_name: body}))
            self._done(conn, context, f.error is None)

        future.add_done_callback(answered)

    def _new_txn(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.newTxn
        coordinator = self._coordinator(cmd.tc_id)
        timeout_ms = cmd.txn_ttl_seconds
        if self.faults is not None:
            timeout_ms = self.faults.txn_timeout(conn, timeout_ms)
        future = coordinator.new_txn(timeout_ms) if self.broker.up else Future()

        def fill(body: Any, txn: TxnID) -> None:
            body.txnid_most_bits, body.txnid_least_bits = txn.most_sig_bits, txn.least_sig_bits

        self._txn_request(conn, T.NEW_TXN, cmd, future, context, fill)

    def _add_partition_to_txn(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.addPartitionToTxn
        coordinator = self._coordinator(cmd.txnid_most_bits)
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
        names = [topic_name(p).full for p in cmd.partitions]
        futures = [coordinator.add_partition(txn, name) if self.broker.up else Future() for name in names]
        self._txn_request(conn, T.ADD_PARTITION_TO_TXN, cmd, first_error(futures), context)

    def _add_subscription_to_txn(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.addSubscriptionToTxn
        coordinator = self._coordinator(cmd.txnid_most_bits)
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
        subs = [TxnSubscription(topic_name(s.topic).full, s.subscription) for s in cmd.subscription]
        futures = [coordinator.add_subscription(txn, s) if self.broker.up else Future() for s in subs]
        self._txn_request(conn, T.ADD_SUBSCRIPTION_TO_TXN, cmd, first_error(futures), context)

    def _end_txn(self, conn: _Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.endTxn
        coordinator = self._coordinator(cmd.txnid_most_bits)
        txn = TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
        if not cmd.HasField("txn_action"):
            raise RequestError(ServerError.UnknownError, "END_TXN without txn_action")
        action = TxnAction.COMMIT if cmd.txn_action == api.COMMIT else TxnAction.ABORT
        future = coordinator.end_txn(txn, action) if self.broker.up else Future()
        self._txn_request(conn, T.END_TXN, cmd, future, context)


_Handler = Callable[[PulsarServer, _Connection, Frame, "RequestContext | None"], None]
_HANDLERS: dict[int, _Handler] = {
    T.PING: PulsarServer._ping,
    T.PONG: PulsarServer._pong,
    T.PARTITIONED_METADATA: PulsarServer._partitioned_metadata,
    T.LOOKUP: PulsarServer._lookup,
    T.GET_TOPICS_OF_NAMESPACE: PulsarServer._topics_of_namespace,
    T.GET_SCHEMA: PulsarServer._get_schema,
    T.GET_OR_CREATE_SCHEMA: PulsarServer._get_or_create_schema,
    T.PRODUCER: PulsarServer._producer,
    T.CLOSE_PRODUCER: PulsarServer._close_producer,
    T.SEND: PulsarServer._send,
    T.SUBSCRIBE: PulsarServer._subscribe,
    T.FLOW: PulsarServer._flow,
    T.ACK: PulsarServer._ack,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: PulsarServer._redeliver,
    T.CLOSE_CONSUMER: PulsarServer._close_consumer,
    T.UNSUBSCRIBE: PulsarServer._unsubscribe,
    T.GET_LAST_MESSAGE_ID: PulsarServer._get_last_message_id,
    T.SEEK: PulsarServer._seek,
    T.TC_CLIENT_CONNECT_REQUEST: PulsarServer._tc_connect,
    T.NEW_TXN: PulsarServer._new_txn,
    T.ADD_PARTITION_TO_TXN: PulsarServer._add_partition_to_txn,
    T.ADD_SUBSCRIPTION_TO_TXN: PulsarServer._add_subscription_to_txn,
    T.END_TXN: PulsarServer._end_txn,
}
