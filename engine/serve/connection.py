"""Client connections: the listening socket, frames in, bytes out, and what each connection holds.

:class:`Network` owns the sockets and one selector: it accepts, reads and parses frames (handing each
to the server's ``handle``), writes what a connection has queued, and closes a connection (a client
that left, broke the protocol, or a fault).  Nothing here looks inside a command: a
:class:`ProtocolViolation` raised by ``handle`` closes the connection with its message as the one
log line.

A :class:`Connection` is the server's view of one client: its protocol version, its producers and
consumers by the client's ids, and its output, which may be held back for a while (a fault) with
everything after it waiting too, as TCP keeps the order.

Each peer is bounded (:class:`Limits`, from broker.conf): its output past the high water mark makes
it not writable (its consumers get nothing more until it is down to the low water mark, and with
``pulsarChannelPauseReceivingRequestsIfUnwritable`` its requests are not read meanwhile); a peer
that lets more than ``txnmodelConnectionMaxPendingOutputBytes`` wait is dropped; connections past
``brokerMaxConnections`` (or ``brokerMaxConnectionsPerIp`` from one address) are closed as they
come.  When the process runs out of file descriptors, accepting pauses a moment instead of spinning.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import resource
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from engine.broker import Delivered
from engine.recorder import RequestContext
from engine.scheduler import Future
from engine.serve.wire import ProtocolViolation
from spec.config import Config
from spec.errors import InputError
from spec.frame import Frame, max_frame_size, parse_frame
from spec.pb import PulsarApi_pb2 as api
from spec.types import Position

__all__ = ["Connection", "Consumer", "Limits", "Network", "Producer", "command_name"]

log = logging.getLogger("runners.serve")

_RECV_BYTES = 1 << 16
T = TypeVar("T")


# Accept errors that say the process or the system is out of something: accepting pauses.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_PAUSE_S = 0.1
_REFUSAL_LOG_EVERY_S = 10.0


@dataclass(frozen=True)
class Limits:
    """What one peer may hold of the server (see the module's docstring); 0: no limit."""

    high_water: int = 64 * 1024
    low_water: int = 32 * 1024
    pause_reading: bool = False
    max_pending_output: int = 4 * 1024 * 1024
    max_connections: int = 0
    max_connections_per_ip: int = 0

    @classmethod
    def of(cls, config: Config) -> Limits:
        cap = config.broker_max_connections
        if cap == 0:
            # No configured cap: the open-file limit is, less a quarter kept for the ledgers' files.
            soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
            cap = 0 if soft == resource.RLIM_INFINITY else max(1, soft * 3 // 4)
        return cls(
            high_water=config.pulsar_channel_write_buffer_high_water_mark,
            low_water=config.pulsar_channel_write_buffer_low_water_mark,
            pause_reading=config.pulsar_channel_pause_receiving_requests_if_unwritable,
            max_pending_output=config.txnmodel_connection_max_pending_output_bytes,
            max_connections=cap,
            max_connections_per_ip=config.broker_max_connections_per_ip,
        )


def command_name(kind: int) -> str:
    """A command type's name in the protocol (its number, for one the protocol does not name)."""
    names = api.BaseCommand.Type
    return names.Name(kind) if kind in names.values() else str(kind)  # type: ignore[arg-type]


@dataclass
class Producer:
    """A producer of a connection: its sends wait here for their receipts, in the order they came."""

    producer_id: int
    name: str
    partition: str
    receipts: collections.deque[tuple[int, int, Future[Position], RequestContext | None]] = field(
        default_factory=collections.deque
    )


@dataclass
class Consumer:
    """A consumer of a connection: the permits its FLOWs gave, and what the dispatcher handed it
    that has not gone out yet."""

    consumer_id: int  # the connection's id for it
    engine_id: int  # the subscription's (server-wide) consumer id
    partition: str
    subscription: str
    permits: int = 0
    asked: bool = False  # a FLOW gave it permits: only then does a Shared or Key_Shared dispatcher serve it
    held: collections.deque[Delivered] = field(default_factory=collections.deque)
    waiting: Future[Delivered | None] | None = None
    closed: bool = False
    blocked: bool = False  # on maxUnackedMessagesPerConsumer, until it is down to half


class Connection:
    """One client connection."""

    def __init__(self, network: Network, sock: socket.socket, peer: str) -> None:
        self.network = network
        self.sock = sock
        self.peer = peer
        self.address = peer.rsplit(":", 1)[0]
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.consumed = 0  # stream offset of inbuf[0], for error offsets
        self.connected = False
        self.closed = False
        self.protocol_version = 0
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self.last_dropped = False  # whether the last response was dropped (a fault)
        self.opened = time.monotonic()
        self.frames_in = 0  # frames read from the peer
        self.bytes_out = 0  # bytes the peer has taken
        self.keep_alive: tuple[int, int] | None = None  # (frames_in, bytes_out) when the last PING left
        self.keep_alive_checks = 0  # keep-alive intervals checked since the connection opened
        self._holding = False
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._writable = True
        self.watching = 0  # the selector events watched for (0: not registered)

    @property
    def holding(self) -> bool:
        """Whether the output is held back (:meth:`hold`)."""
        return self._holding

    @property
    def pending_output(self) -> int:
        """Bytes waiting to go out (held back by a fault or not yet taken by the socket)."""
        return len(self.outbuf) + self._held_bytes

    @property
    def writable(self) -> bool:
        """False from the moment the pending output passes the high water mark until it is down
        to the low water mark (Netty's channel writability, which Pulsar's dispatch respects)."""
        return self._writable

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        if self._holding:
            self._held.append(data)
            self._held_bytes += len(data)
        else:
            self.outbuf += data
        limits = self.network.limits
        pending = self.pending_output
        if pending > limits.high_water:
            self._writable = False
        if pending > limits.max_pending_output and pending > len(data):
            self.network.close(self, f"the peer does not read: {pending} bytes wait to go out")
            return
        if not self._holding:
            self.network.flush(self)

    def hold(self) -> None:
        """Hold the output back until :meth:`release`: everything sent meanwhile waits, in order."""
        self._holding = True

    def release(self) -> None:
        """The hold is over: what waited goes out in order."""
        held, self._held, self._holding, self._held_bytes = self._held, [], False, 0
        for data in held:
            self.outbuf += data
        self.network.flush(self)

    def drained(self) -> bool:
        """After a write: True when the connection just became writable again."""
        if self._writable or self.pending_output > self.network.limits.low_water:
            return False
        self._writable = True
        return True


class Network:
    """The listening socket, the client connections and the loop's wake-up pair, on one selector."""

    def __init__(
        self, max_message_size: int, handle: Callable[[Connection, Frame], None], *, limits: Limits | None = None
    ) -> None:
        self.max_message_size = max_message_size
        self.handle = handle
        self.limits = limits or Limits()
        # Run when a connection closes, before its socket goes (its consumers leave their subscriptions).
        self.on_close: list[Callable[[Connection], None]] = []
        # Run when a connection that was not writable is again (its consumers are pumped).
        self.on_writable: list[Callable[[Connection], None]] = []
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._connections: dict[int, Connection] = {}
        self._per_address: collections.Counter[str] = collections.Counter()
        self._accept_paused_until: float | None = None
        self._refused = 0
        self._refusal_logged = 0.0

    def listen(self, host: str, port: int) -> tuple[str, int]:
        """Bind and listen; the address bound."""
        listener = socket.create_server((host, port), reuse_port=False, backlog=128)
        listener.setblocking(False)
        self._listener = listener
        self._selector.register(listener, selectors.EVENT_READ, "accept")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        host_bound, port_bound = listener.getsockname()[:2]
        return host_bound, port_bound

    def wake(self) -> None:
        """End a :meth:`poll` that is waiting (from any thread, or a signal handler)."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def poll(self, wait_s: float) -> None:
        """Wait up to ``wait_s`` for socket input, a socket ready for output or a wake-up; handle it."""
        paused = self._accept_paused_until
        if paused is not None:
            if time.monotonic() >= paused:
                self._resume_accepting()
            else:
                wait_s = min(wait_s, paused - time.monotonic())
        for key, mask in self._selector.select(max(0.0, wait_s)):
            if key.data == "accept":
                self.accept()
            elif key.data == "wake":
                with contextlib.suppress(OSError):
                    self._wake_r.recv(4096)
            else:
                conn = self._connections.get(key.data)
                if conn is None:
                    continue
                if mask & selectors.EVENT_READ:
                    self.read(conn)
                if mask & selectors.EVENT_WRITE and not conn.closed:
                    self.flush(conn)

    def accept(self) -> None:
        assert self._listener is not None
        while self._accept_paused_until is None:
            try:
                sock, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    # Out of descriptors or memory: the pending connection stays in the backlog and
                    # the listener would be ready again at once; wait a moment instead of spinning.
                    log.warning("accept failed: %s; accepting again in %.1f s", exc, _ACCEPT_PAUSE_S)
                    self._pause_accepting()
                else:
                    log.warning("accept failed: %s", exc)
                return
            if self._over_limit(str(addr[0])):
                self._refuse(sock, str(addr[0]))
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = Connection(self, sock, f"{addr[0]}:{addr[1]}")
            self._connections[sock.fileno()] = conn
            self._per_address[conn.address] += 1
            self._watch(conn)

    def _over_limit(self, address: str) -> bool:
        limits = self.limits
        if limits.max_connections and len(self._connections) >= limits.max_connections:
            return True
        return bool(limits.max_connections_per_ip and self._per_address[address] >= limits.max_connections_per_ip)

    def _refuse(self, sock: socket.socket, address: str) -> None:
        """Close a connection past a cap as it comes (logged at most every few seconds, with a count)."""
        with contextlib.suppress(OSError):
            sock.close()
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged >= _REFUSAL_LOG_EVERY_S:
            self._refusal_logged = now
            log.warning(
                "refused %d connection(s), the last from %s: brokerMaxConnections %d, brokerMaxConnectionsPerIp %d",
                self._refused,
                address,
                self.limits.max_connections,
                self.limits.max_connections_per_ip,
            )
            self._refused = 0

    def _pause_accepting(self) -> None:
        assert self._listener is not None
        self._accept_paused_until = time.monotonic() + _ACCEPT_PAUSE_S
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self._listener)

    def _resume_accepting(self) -> None:
        self._accept_paused_until = None
        if self._listener is not None:
            self._selector.register(self._listener, selectors.EVENT_READ, "accept")

    def read(self, conn: Connection) -> None:
        """Read what arrived and hand each whole frame to ``handle``, in order."""
        try:
            data = conn.sock.recv(_RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.close(conn, f"read failed: {exc}", gone=True)
            return
        if not data:
            self.close(conn, None)
            return
        conn.inbuf += data
        limit = max_frame_size(self.max_message_size)
        while not conn.closed:
            try:
                parsed = parse_frame(conn.inbuf, max_frame_size=limit, base=conn.consumed)
            except InputError as exc:
                self.close(conn, f"bad frame: {exc}")
                return
            if parsed is None:
                return
            frame, used = parsed
            del conn.inbuf[:used]
            conn.consumed += used
            conn.frames_in += 1
            try:
                self.handle(conn, frame)
            except ProtocolViolation as exc:
                self.close(conn, str(exc))
                return
            except Exception as exc:  # a bug this peer's frame reached: its connection only
                self.crashed(conn, f"handling {command_name(frame.type)}", exc)
                return

    def flush(self, conn: Connection) -> None:
        """Write what the socket takes now; the rest waits for the socket to be ready."""
        if conn.closed:
            return
        if conn.outbuf:
            try:
                sent = conn.sock.send(conn.outbuf)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self.close(conn, f"write failed: {exc}", gone=True)
                return
            del conn.outbuf[:sent]
            conn.bytes_out += sent
            if conn.drained():
                for hook in self.on_writable:
                    hook(conn)
        if not conn.closed:
            self._watch(conn)

    def _watch(self, conn: Connection) -> None:
        """Watch for input unless the connection's reading is paused (not writable, with
        ``pause_reading``), and for output while some waits."""
        reading = conn.writable or not self.limits.pause_reading
        events = (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if conn.outbuf else 0)
        if events == conn.watching:
            return
        with contextlib.suppress(KeyError, ValueError):
            if not events:
                self._selector.unregister(conn.sock)
            elif not conn.watching:
                self._selector.register(conn.sock, events, conn.sock.fileno())
            else:
                self._selector.modify(conn.sock, events, conn.sock.fileno())
        conn.watching = events

    def reading_paused(self, conn: Connection) -> bool:
        """Whether the connection's input is not read now (see :meth:`_watch`)."""
        return not conn.watching & selectors.EVENT_READ

    def close(self, conn: Connection, reason: str | None, *, gone: bool = False) -> None:
        """Close a connection: the :attr:`on_close` hooks run (its consumers leave their
        subscriptions, and what they held is redelivered), its producers go.  ``reason`` is logged
        as one line: a warning for a client that broke the protocol, information when the peer
        simply went away (``gone``)."""
        if conn.closed:
            return
        if reason is not None:
            log.log(logging.INFO if gone else logging.WARNING, "closing connection from %s: %s", conn.peer, reason)
        conn.closed = True
        for hook in self.on_close:
            hook(conn)
        conn.producers.clear()
        fd = conn.sock.fileno()
        if self._connections.pop(fd, None) is not None:
            self._per_address[conn.address] -= 1
            if self._per_address[conn.address] <= 0:
                del self._per_address[conn.address]
        if conn.watching:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(conn.sock)
            conn.watching = 0
        with contextlib.suppress(OSError):
            conn.sock.close()
        conn.inbuf.clear()
        conn.outbuf.clear()

    def crashed(self, conn: Connection, what: str, exc: BaseException) -> None:
        """``what`` raised while serving ``conn``: a bug reached by this peer's input (or by what
        the broker answered it).  Logged once, with the peer and the traceback, and only this
        connection closes (what its consumers held is redelivered); every other client is served
        on.  Whoever knows the request answers it first, where the protocol has an error."""
        if conn.closed:
            return
        log.error("closing connection from %s: internal error %s", conn.peer, what, exc_info=exc)
        self.close(conn, None)

    def guarded(self, conn: Connection, what: str, action: Callable[[T], None]) -> Callable[[T], None]:
        """``action`` (a callback that answers ``conn``), with a failure in it contained as in
        :meth:`crashed`: whatever completes the future it waits on (the broker's own events) goes
        on."""

        def run(value: T) -> None:
            try:
                action(value)
            except Exception as exc:
                self.crashed(conn, what, exc)

        return run

    def connections(self) -> list[Connection]:
        return list(self._connections.values())

    def close_all(self) -> None:
        """Drop every client connection (a broker crash, a dropped-connections fault, shutdown)."""
        for conn in list(self._connections.values()):
            self.close(conn, None)

    def shutdown(self) -> None:
        """Close every connection, the listener, the selector and the wake-up pair."""
        self.close_all()
        if self._listener is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
