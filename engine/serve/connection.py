"""Client connections: the listening socket, frames in, bytes out, and what each connection holds.

:class:`Network` owns the sockets and one selector: it accepts, reads and parses frames (handing each
to the server's ``handle``), writes what a connection has queued, and closes a connection (a client
that left, broke the protocol, or a fault).  Nothing here looks inside a command: a
:class:`ProtocolViolation` raised by ``handle`` closes the connection with its message as the one
log line.

A :class:`Connection` is the server's view of one client: its protocol version, its producers and
consumers by the client's ids, and its output, which may be held back for a while (a fault) with
everything after it waiting too, as TCP keeps the order.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import selectors
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.broker import Delivered
from engine.recorder import RequestContext
from engine.scheduler import Future
from engine.serve.wire import ProtocolViolation
from spec.errors import InputError
from spec.frame import Frame, max_frame_size, parse_frame
from spec.types import Position

__all__ = ["Connection", "Consumer", "Network", "Producer"]

log = logging.getLogger("runners.serve")

_RECV_BYTES = 1 << 16


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
    held: collections.deque[Delivered] = field(default_factory=collections.deque)
    waiting: Future[Delivered | None] | None = None
    closed: bool = False


class Connection:
    """One client connection."""

    def __init__(self, network: Network, sock: socket.socket, peer: str) -> None:
        self.network = network
        self.sock = sock
        self.peer = peer
        self.inbuf = bytearray()
        self.outbuf = bytearray()
        self.consumed = 0  # stream offset of inbuf[0], for error offsets
        self.connected = False
        self.closed = False
        self.protocol_version = 0
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self.last_dropped = False  # whether the last response was dropped (a fault)
        self._holding = False
        self._held: list[bytes] = []

    @property
    def holding(self) -> bool:
        """Whether the output is held back (:meth:`hold`)."""
        return self._holding

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        if self._holding:
            self._held.append(data)
            return
        self.outbuf += data
        self.network.flush(self)

    def hold(self) -> None:
        """Hold the output back until :meth:`release`: everything sent meanwhile waits, in order."""
        self._holding = True

    def release(self) -> None:
        """The hold is over: what waited goes out in order."""
        held, self._held, self._holding = self._held, [], False
        for data in held:
            self.outbuf += data
        self.network.flush(self)


class Network:
    """The listening socket, the client connections and the loop's wake-up pair, on one selector."""

    def __init__(self, max_message_size: int, handle: Callable[[Connection, Frame], None]) -> None:
        self.max_message_size = max_message_size
        self.handle = handle
        # Run when a connection closes, before its socket goes (its consumers leave their subscriptions).
        self.on_close: list[Callable[[Connection], None]] = []
        self._selector = selectors.DefaultSelector()
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._connections: dict[int, Connection] = {}

    def listen(self, host: str, port: int) -> tuple[str, int]:
        """Bind and listen; the address bound."""
        listener = socket.create_server((host, port), reuse_port=False)
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
        for key, mask in self._selector.select(wait_s):
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
            conn = Connection(self, sock, f"{addr[0]}:{addr[1]}")
            self._connections[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, sock.fileno())

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
            try:
                self.handle(conn, frame)
            except ProtocolViolation as exc:
                self.close(conn, str(exc))
                return

    def flush(self, conn: Connection) -> None:
        """Write what the socket takes now; the rest waits for the socket to be ready."""
        if conn.closed or not conn.outbuf:
            return
        try:
            sent = conn.sock.send(conn.outbuf)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self.close(conn, f"write failed: {exc}", gone=True)
            return
        del conn.outbuf[:sent]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.outbuf else 0)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.modify(conn.sock, events, conn.sock.fileno())

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
        self._connections.pop(fd, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            conn.sock.close()

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
            self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
