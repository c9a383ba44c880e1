"""One connection of the wire client to one broker: frames out, frames in, requests and their answers.

A request waits for its answer up to the client's operation timeout; the frames that arrive
meanwhile are kept (a MESSAGE goes to its consumer's queue, anything else waits for whoever asks
for it), and PING is answered.  A timeout names the command and what its silence means
(:data:`SILENCE`), because the outcome of a request that was never answered is unknown.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import socket
import time
from collections.abc import Callable
from typing import Any

from spec.errors import InputError, ServerError
from spec.frame import Frame, encode_command, encode_frame, parse_frame
from spec.pb import PulsarApi_pb2 as api

__all__ = ["CLIENT_VERSION", "PROTOCOL_VERSION", "SILENCE", "Connection", "WireError", "WireTimeout", "parse_url"]

T = api.BaseCommand
CLIENT_VERSION = "txnmodel-wire-client-0.2"
PROTOCOL_VERSION = 19  # TC_CLIENT_CONNECT exists from v19

# What a broker's silence on each request means, for the timeout's message.
SILENCE: dict[int, str] = {
    T.CONNECT: "the server may not speak Pulsar's binary protocol",
    T.TC_CLIENT_CONNECT_REQUEST: "the broker may not support transactions (transactionCoordinatorEnabled)",
    T.NEW_TXN: "the transaction coordinator may be down or recovering; no transaction was opened, or one was and "
    "will time out",
    T.ADD_PARTITION_TO_TXN: "the coordinator may be down or recovering; the partition may or may not be registered",
    T.ADD_SUBSCRIPTION_TO_TXN: "the coordinator may be down or recovering; the subscription may or may not be "
    "registered",
    T.END_TXN: "the coordinator may be down or recovering; the transaction may or may not have ended",
    T.PARTITIONED_METADATA: "the broker may be down or the topic's metadata unavailable",
    T.LOOKUP: "the broker may be down or no broker owns the topic yet",
    T.PRODUCER: "the topic may be loading or the broker down; retry",
    T.SUBSCRIBE: "the topic may be loading or the broker down; the subscription may or may not exist",
    T.SEND: "the message may or may not be stored",
    T.ACK: "the ack may or may not have taken effect",
    T.PING: "the broker is not handling this connection's frames",
}


class WireError(Exception):
    """The broker refused a request with a ``ServerError`` code."""

    def __init__(self, code: int, message: str) -> None:
        self.code = ServerError(code) if code in ServerError._value2member_map_ else code
        name = self.code.name if isinstance(self.code, ServerError) else str(code)
        super().__init__(f"{name}: {message}")
        self.message = message


class WireTimeout(Exception):
    """No answer in time (or the broker closed the connection): the request may or may not have
    taken effect.  The message names the command and what the silence means."""


def parse_url(url: str) -> tuple[str, int]:
    """``pulsar://HOST:PORT`` as (host, port)."""
    if not url.startswith("pulsar://"):
        raise ValueError(f"expected pulsar://HOST:PORT, got {url!r}")
    host, _, port = url[len("pulsar://") :].rstrip("/").rpartition(":")
    if not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected pulsar://HOST:PORT, got {url!r}")
    return host, int(port)


class Connection:
    """One TCP connection, after CONNECT/CONNECTED: requests, and the MESSAGE frames of its consumers."""

    def __init__(self, url: str, *, operation_timeout_s: float, connection_timeout_s: float, ids: Any) -> None:
        host, port = parse_url(url)
        self.url = url
        self.operation_timeout_s = operation_timeout_s
        self.ids: itertools.count[int] = ids  # request, producer and consumer ids: one counter per client
        self.sock = socket.create_connection((host, port), timeout=connection_timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = bytearray()
        self.queues: dict[int, collections.deque[Frame]] = {}  # consumer id -> its MESSAGE frames
        self.pending: list[Frame] = []
        self.closed_by_broker = False
        # consumer ids the broker closed (CLOSE_CONSUMER: a topic unloaded); their queued messages
        # were dropped, as a Pulsar client clears its receiver queue before it subscribes again
        self.closed_consumers: set[int] = set()
        self.send(
            T(
                type=T.CONNECT,
                connect=api.CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION),
            )
        )
        connected = self.wait(lambda f: f.command.type in (T.CONNECTED, T.ERROR), what=T.CONNECT)
        if connected.command.type == T.ERROR:
            raise WireError(connected.command.error.error, connected.command.error.message)
        self.server_version = connected.command.connected.server_version

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def send(self, command: Any, message: bytes | None = None) -> None:
        data = encode_command(command) if message is None else encode_frame(command, message)
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.closed_by_broker = True
            name = T.Type.Name(command.type)
            raise WireTimeout(f"{name} not sent: the connection to {self.url} is gone ({exc})") from None

    def _timeout(self, what: int | None, timeout_s: float, closed: bool = False) -> WireTimeout:
        name = T.Type.Name(what) if what is not None else "the request"  # type: ignore[arg-type]
        if closed:
            return WireTimeout(f"no answer to {name}: the broker closed the connection ({self.url})")
        meaning = SILENCE.get(what, "the outcome is unknown") if what is not None else "the outcome is unknown"
        return WireTimeout(f"no answer to {name} in {timeout_s:g} s: {meaning}")

    def _read_frame(self, deadline: float, what: int | None, timeout_s: float) -> Frame:
        while True:
            try:
                parsed = parse_frame(self.buffer)
            except InputError as exc:
                raise WireError(ServerError.UnknownError, f"the broker sent a bad frame: {exc}") from None
            if parsed is not None:
                frame, used = parsed
                del self.buffer[:used]
                return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._timeout(what, timeout_s)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                raise self._timeout(what, timeout_s) from None
            except OSError:
                chunk = b""
            if not chunk:
                self.closed_by_broker = True
                raise self._timeout(what, timeout_s, closed=True)
            self.buffer += chunk

    def wait(self, match: Callable[[Frame], bool], timeout_s: float | None = None, *, what: int | None = None) -> Frame:
        """Read frames until one matches; messages and pings are handled on the way."""
        for i, frame in enumerate(self.pending):
            if match(frame):
                return self.pending.pop(i)
        timeout = self.operation_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        while True:
            frame = self._read_frame(deadline, what, timeout)
            if self._keep(frame) and match(frame):
                return frame

    def poll(self, *, read: bool) -> bool:
        """Take in the frames that have arrived (with ``read``, up to 64 KiB of what the socket holds
        too), without waiting: messages go to their consumers' queues.  True when bytes were read."""
        chunk: bytes | None = None
        if read:
            self.sock.settimeout(0.0)
            try:
                chunk = self.sock.recv(1 << 16)
            except (BlockingIOError, TimeoutError):
                chunk = None
            except OSError:
                chunk = b""
            if chunk == b"":
                self.closed_by_broker = True
            elif chunk:
                self.buffer += chunk
        while True:
            try:
                parsed = parse_frame(self.buffer)
            except InputError as exc:
                raise WireError(ServerError.UnknownError, f"the broker sent a bad frame: {exc}") from None
            if parsed is None:
                return bool(chunk)
            frame, used = parsed
            del self.buffer[:used]
            self._keep(frame)

    def _keep(self, frame: Frame) -> bool:
        """Route an unasked-for frame; True when it may still match what is awaited."""
        kind = frame.command.type
        if kind == T.PING:
            self.send(T(type=T.PONG, pong=api.CommandPong()))
            return False
        if kind == T.MESSAGE:
            if frame.command.message.consumer_id in self.closed_consumers:
                return False  # the broker no longer counts it as this consumer's
            self.queues.setdefault(frame.command.message.consumer_id, collections.deque()).append(frame)
            return True
        if kind == T.CLOSE_CONSUMER:
            # The broker sent this consumer away: what it had pushed is back with the subscription
            # and may go to another consumer, whose transaction may acknowledge it; a copy kept here
            # would be received after that commit.
            consumer_id = frame.command.close_consumer.consumer_id
            self.closed_consumers.add(consumer_id)
            self.queues.pop(consumer_id, None)
            return False
        self.pending.append(frame)
        return True

    def take_pending(self, frame: Frame) -> None:
        if frame in self.pending:
            self.pending.remove(frame)

    def request(self, command: Any, response_type: int, *, message: bytes | None = None) -> Any:
        """Send a request and wait for its answer; a refusal raises :class:`WireError`."""
        body_name = _FIELD_BY_TYPE[command.type]
        request_id = getattr(command, body_name).request_id
        self.send(command, message)

        def match(frame: Frame) -> bool:
            cmd = frame.command
            if cmd.type == T.ERROR and cmd.error.request_id == request_id:
                return True
            return bool(cmd.type == response_type and response_field(cmd).request_id == request_id)

        frame = self.wait(match, what=command.type)
        self.take_pending(frame)
        cmd = frame.command
        if cmd.type == T.ERROR:
            raise WireError(cmd.error.error, cmd.error.message)
        body = response_field(cmd)
        if "error" in body.DESCRIPTOR.fields_by_name and body.HasField("error"):
            raise WireError(body.error, body.message)
        if "error_code" in body.DESCRIPTOR.fields_by_name and body.HasField("error_code"):
            raise WireError(body.error_code, body.error_message)
        return body


def response_field(command: Any) -> Any:
    return getattr(command, _FIELD_BY_TYPE[command.type])


_FIELD_BY_TYPE = {f.number: f.name for f in T.DESCRIPTOR.fields if f.name != "type"}
