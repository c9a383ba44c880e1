"""Pulsar's admin REST API on its own port: the paths and JSON of ``/admin/v2`` and ``/admin/v3``.

What ``pulsar-admin``, dashboards and ``txnmodel record --admin-url`` call: tenants, namespaces and
clusters (the defaults), topics and partitioned topics (create, list, delete, stats, internal
stats), subscriptions (create, delete, reset cursor, skip) and the transaction endpoints
(coordinator stats, a transaction's metadata, slow transactions, transaction-buffer and pending-ack
stats).  Every answer is read from the broker's machines (:mod:`~engine.serve.admin_topics`,
:mod:`~engine.serve.admin_transactions`); every change is one the broker makes through its own
public methods, as the binary protocol's commands do.

Threads.  The HTTP side (the standard library's ``http.server``) parses a request on its own
thread; what the request reads or changes runs on the server's loop thread, handed over between
two turns of its loop (:class:`LoopCalls`), and the HTTP thread waits for the answer, so the
broker and the scheduler are only ever touched from their own thread.

The socket is untrusted like the protocol's: at most :data:`MAX_CONNECTIONS` requests are served at
once (past that a connection gets 503 at once), a request has :data:`REQUEST_DEADLINE_S` to arrive
whole (a slow client is cut off, whatever it sends), a body over :data:`MAX_BODY` is refused with 413
unread, and bad JSON or a bad number is a 400.  Errors are Pulsar's: ``{"reason": "..."}`` with the
status code Pulsar's REST layer uses.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import re
import socket
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from engine.broker import BrokerError
from engine.scheduler import Future
from engine.serve.wire import RequestError, wire_error
from spec.errors import ServerError

if TYPE_CHECKING:
    from engine.serve.server import PulsarServer

__all__ = [
    "ANSWER_TIMEOUT_S",
    "MAX_BODY",
    "MAX_CONNECTIONS",
    "REQUEST_DEADLINE_S",
    "AdminError",
    "AdminServer",
    "LoopCalls",
    "Reply",
    "Request",
]

log = logging.getLogger("runners.serve")

MAX_CONNECTIONS = 16  # requests served at once; more get 503 without a thread
MAX_BODY = 1024 * 1024  # Pulsar's admin bodies are a number or a small JSON object
REQUEST_DEADLINE_S = 10.0  # for the request line, headers and body to arrive
ANSWER_TIMEOUT_S = 30.0  # for the broker to answer (a component that is down never does)

# Pulsar's REST status for a failed broker request, by the ServerError it carries.
_STATUS: dict[int, int] = {
    ServerError.TopicNotFound: 404,
    ServerError.SubscriptionNotFound: 404,
    ServerError.TransactionNotFound: 404,
    ServerError.TransactionCoordinatorNotFound: 404,
    ServerError.ConsumerBusy: 412,
    ServerError.NotAllowedError: 412,
    ServerError.ServiceNotReady: 503,
    ServerError.MetadataError: 412,
}


class AdminError(Exception):
    """A request answered with an error status and Pulsar's ``{"reason": ...}`` body."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Reply:
    """An answer: a status and a JSON body (None: no body, as Pulsar's 204)."""

    status: int = 204
    body: Any = None
    text: str | None = None  # a plain-text body instead (the health check's "ok")


@dataclass(frozen=True)
class Request:
    """A parsed request: the path's segments (percent-decoded), the query and the body's JSON."""

    method: str
    segments: tuple[str, ...]
    query: dict[str, str]
    body: Any = None

    def flag(self, name: str) -> bool:
        return self.query.get(name, "false").lower() == "true"


def status_of(error: BaseException) -> AdminError:
    """The REST answer of a broker request that failed (its ServerError, as Pulsar maps it)."""
    if isinstance(error, AdminError):
        return error
    code, text = wire_error(error)
    return AdminError(_STATUS.get(code, 500), text)


class LoopCalls:
    """Runs actions on the server's loop thread, between two turns, and hands back their result.

    An action returns a value, or a broker :class:`~engine.scheduler.Future` that the loop completes
    later: the caller waits for either, up to ``timeout_s``."""

    def __init__(self, server: PulsarServer) -> None:
        self.server = server
        self._queue: queue.SimpleQueue[tuple[Callable[[], Any], _Box]] = queue.SimpleQueue()
        server.on_tick.append(self._drain)

    def close(self) -> None:
        with contextlib.suppress(ValueError):
            self.server.on_tick.remove(self._drain)

    def call(self, action: Callable[[], Any], timeout_s: float = ANSWER_TIMEOUT_S) -> Any:
        box = _Box()
        self._queue.put((action, box))
        self.server.stop_waiting()
        if not box.done.wait(timeout_s):
            raise AdminError(
                503, f"the broker did not answer in {timeout_s:g} s (a component is down or reloading): try again"
            )
        if box.error is not None:
            raise status_of(box.error)
        return box.value

    def _drain(self) -> None:
        while True:
            try:
                action, box = self._queue.get_nowait()
            except queue.Empty:
                return
            try:
                result = action()
            except (AdminError, RequestError, BrokerError) as exc:
                box.fail(exc)
                continue
            except Exception as exc:  # a bug answers 500 and the broker goes on serving
                log.exception("admin request failed")
                box.fail(AdminError(500, f"{type(exc).__name__}: {exc}"))
                continue
            if isinstance(result, Future):
                result.add_done_callback(box.settle)
            else:
                box.set(result)


class _Box:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def set(self, value: Any) -> None:
        self.value = value
        self.done.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.done.set()

    def settle(self, future: Future[Any]) -> None:
        if future.error is not None:
            self.fail(future.error)
        else:
            self.set(future.result())


Route = Callable[[Request, re.Match[str]], Reply]


class AdminServer:
    """The admin API of one :class:`~engine.serve.server.PulsarServer`: :meth:`start` binds and
    serves on a background thread, :meth:`stop` closes."""

    def __init__(
        self,
        server: PulsarServer,
        routes: Callable[[PulsarServer, LoopCalls], list[tuple[str, re.Pattern[str], Route]]],
        host: str = "127.0.0.1",
        port: int = 8080,
    ) -> None:
        # the routes (engine.serve.admin_routes) read the broker through this module's pieces, so
        # they are handed in rather than imported back
        self.server = server
        self.host = host
        self.port = port
        self.calls = LoopCalls(server)
        self.routes = routes(server, self.calls)
        self._http: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._http is not None, "start() first"
        return f"http://{self.host}:{self._http.server_port}"

    def start(self) -> str:
        """Bind and serve; an OSError (the port is taken) leaves nothing running."""
        try:
            self._http = _HTTPServer((self.host, self.port), self)
        except OSError:
            self.calls.close()
            raise
        self._thread = threading.Thread(target=self._http.serve_forever, name="txnmodel-admin", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        self.calls.close()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def answer(self, request: Request) -> Reply:
        """The reply to ``request``: the first route whose method and path match."""
        path = "/" + "/".join(request.segments)
        allowed = False
        for method, pattern, route in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if method != request.method:
                allowed = True
                continue
            return route(request, match)
        if allowed:
            raise AdminError(405, f"{request.method} is not allowed on {path}")
        raise AdminError(404, f"no such admin path: {path}")


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], admin: AdminServer) -> None:
        self.admin = admin
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.settimeout(1.0)
                request.sendall(_busy())
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        deadline = threading.Timer(REQUEST_DEADLINE_S + ANSWER_TIMEOUT_S + 5, _cut, (request,))
        deadline.daemon = True
        deadline.start()
        try:
            super().process_request_thread(request, client_address)
        finally:
            deadline.cancel()
            self.slots.release()


def _cut(sock: socket.socket) -> None:
    """A client that has not finished in time: its socket is shut down (the handler ends)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _busy() -> bytes:
    body = json.dumps({"reason": f"more than {MAX_CONNECTIONS} admin requests at once: try again"}).encode()
    head = f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    timeout = REQUEST_DEADLINE_S  # each read; the whole request is bounded by the server's timer
    server_version = "txnmodel-admin"

    def do_GET(self) -> None:
        self._serve("GET")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("admin %s %s", self.address_string(), format % args)

    def _serve(self, method: str) -> None:
        try:
            request = self._parse(method)
            reply = self.server.admin.answer(request)
        except AdminError as exc:
            reply = Reply(exc.status, {"reason": exc.reason})
        except (TimeoutError, ConnectionError):
            self.close_connection = True
            return
        self._send(reply)

    def _parse(self, method: str) -> Request:
        split = urllib.parse.urlsplit(self.path)
        segments = tuple(urllib.parse.unquote(s) for s in split.path.split("/") if s)
        try:
            query = {k: v for k, v in urllib.parse.parse_qsl(split.query, max_num_fields=32)}
        except ValueError as exc:
            raise AdminError(400, f"bad query: {exc}") from None
        length_text = self.headers.get("Content-Length", "0") or "0"
        if not length_text.isdigit():
            raise AdminError(400, f"bad Content-Length {length_text[:40]!r}")
        length = int(length_text)
        if length > MAX_BODY:
            self.close_connection = True
            raise AdminError(413, f"a body of {length} bytes is over the {MAX_BODY} an admin request may carry")
        raw = self.rfile.read(length) if length else b""
        if len(raw) < length:
            raise AdminError(400, "the body ended before its Content-Length")
        body: Any = None
        if raw.strip():
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                raise AdminError(400, f"the body is not JSON: {exc}") from None
        return Request(method, segments, query, body)

    def _send(self, reply: Reply) -> None:
        if reply.text is not None:
            data, kind = reply.text.encode(), "text/plain"
        elif reply.body is not None:
            data, kind = json.dumps(reply.body).encode(), "application/json"
        else:
            data, kind = b"", ""
        with contextlib.suppress(OSError):
            self.send_response(reply.status)
            if kind:
                self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if data and self.command != "HEAD":
                self.wfile.write(data)
