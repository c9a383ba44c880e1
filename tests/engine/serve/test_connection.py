"""A connection's output, without a server: a hold keeps everything after it back, in order."""

from __future__ import annotations

import socket

from engine.serve.connection import Connection, Network
from spec.frame import Frame


def _refuse(conn: Connection, frame: Frame) -> None:
    raise AssertionError("no frame is read in this test")


def test_held_output_goes_out_in_order_on_release() -> None:
    network = Network(5 * 1024 * 1024, _refuse)
    ours, theirs = socket.socketpair()
    theirs.settimeout(5)
    try:
        conn = Connection(network, ours, "peer")
        conn.send(b"a")
        assert theirs.recv(16) == b"a"
        conn.hold()
        assert conn.holding
        conn.send(b"b")
        conn.send(b"c")
        theirs.setblocking(False)
        assert conn.outbuf == b"" and _pending(theirs) == b""
        conn.release()
        assert not conn.holding
        theirs.settimeout(5)
        assert theirs.recv(16) == b"bc"
        network.close(conn, None)
        assert conn.closed
        conn.send(b"d")  # a closed connection sends nothing
        assert theirs.recv(16) == b""
    finally:
        theirs.close()
        network.shutdown()


def _pending(sock: socket.socket) -> bytes:
    try:
        return sock.recv(16)
    except BlockingIOError:
        return b""
