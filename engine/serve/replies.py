"""Answering a request: the response frame, a failed request's error, and the history's window.

Every command handler (lookup, producers, consumers, acks, transactions) answers through
:class:`Replies`: a response may be dropped or held back by the faults, and the request's machine
steps complete only when its answer really left for the client.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from engine.recorder import RequestContext
from engine.scheduler import Future
from engine.serve.connection import Connection
from engine.serve.faults import ServeFaults
from engine.serve.history import ServeHistory
from engine.serve.wire import error_response
from spec.frame import Frame, encode_command

__all__ = ["Handler", "Replies"]

# A command handler: the connection, the frame, and the request's window in the history (if recorded).
Handler = Callable[[Connection, Frame, "RequestContext | None"], None]
V = TypeVar("V")


class Replies:
    """Sends responses and closes the requests' windows in the history."""

    def __init__(self, history: ServeHistory, faults: ServeFaults | None) -> None:
        self.history = history
        self.faults = faults

    def send(self, conn: Connection, command: Any) -> None:
        """Send a response; the faults may drop it (``conn.last_dropped``) or hold this connection's
        output back for a while (everything after it waits too, so the order holds)."""
        faults = self.faults
        conn.last_dropped = faults is not None and faults.drop_response(conn, command)
        if not conn.last_dropped:
            if faults is not None:
                faults.maybe_stall(conn)
            conn.send(encode_command(command))

    def error(self, conn: Connection, kind: int, cmd: Any, code: int, message: str) -> None:
        """Answer the failed request ``cmd`` (of type ``kind``) with ``code`` and ``message``."""
        self.send(conn, error_response(kind, cmd, code, message))

    def when_done(self, conn: Connection, future: Future[V], what: str, answer: Callable[[Future[V]], None]) -> None:
        """Run ``answer`` when ``future`` completes; a failure in it closes ``conn`` only
        (:meth:`~engine.serve.connection.Network.guarded`), never the broker event completing it."""
        future.add_done_callback(conn.network.guarded(conn, what, answer))

    def done(self, conn: Connection, context: RequestContext | None, success: bool) -> None:
        """The answer to a request left for the client: its machine steps complete (a dropped
        answer never reaches the client, so they stay open, as in the simulation)."""
        if not conn.last_dropped:
            self.history.answered(context, success)
