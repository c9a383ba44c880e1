"""A raw protocol peer for the boundary tests: frames as bytes, answers as commands, nothing checked.

Unlike a client library it sends whatever it is given (a frame no client would build, a command
out of order, another connection's ids) and reports what came back, or that the server closed the
connection.
"""

from __future__ import annotations

import socket
import time

from spec.frame import encode_command, encode_frame, encode_message, parse_frame
from spec.pb import PulsarApi_pb2 as api

__all__ = ["CONNECT", "RawPeer", "address", "message_bytes"]

T = api.BaseCommand
CONNECT = T(type=T.CONNECT, connect=api.CommandConnect(client_version="raw-peer", protocol_version=21))


def address(url: str) -> tuple[str, int]:
    host, port = url[len("pulsar://") :].rsplit(":", 1)
    return host, int(port)


def message_bytes(payload: bytes = b"body", **metadata: object) -> bytes:
    """A SEND's message: checksummed metadata and payload."""
    meta = api.MessageMetadata(producer_name="raw", sequence_id=0, publish_time=1)
    for name, value in metadata.items():
        setattr(meta, name, value)
    return encode_message(meta, payload)


class RawPeer:
    """One TCP connection to the server; :meth:`read` returns the next command, None when closed."""

    def __init__(self, url: str, *, connect: bool = True, timeout_s: float = 5.0, receive_buffer: int = 0) -> None:
        """``receive_buffer``: the socket's SO_RCVBUF, set before it connects (0: the system's)."""
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(timeout_s)
        self.sock.connect(address(url))
        self.timeout_s = timeout_s
        self.buffer = b""
        self.closed = False
        if connect:
            self.send(CONNECT)
            answer = self.read()
            assert answer is not None and answer.type == T.CONNECTED, answer

    def __enter__(self) -> RawPeer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, command: api.BaseCommand, message: bytes | None = None) -> None:
        self.send_bytes(encode_command(command) if message is None else encode_frame(command, message))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self, timeout_s: float | None = None) -> api.BaseCommand | None:
        """The next command the server sent; None if it closed the connection first.  A
        ``TimeoutError`` if neither happens within the timeout."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while (parsed := parse_frame(self.buffer)) is None:
            if self.closed:
                return None
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            except TimeoutError:
                raise TimeoutError("no answer from the server") from None
            if not chunk:
                self.closed = True
            self.buffer += chunk
        frame, used = parsed
        self.buffer = self.buffer[used:]
        return frame.command

    def read_type(self, kind: int, timeout_s: float | None = None) -> api.BaseCommand:
        """The next command of type ``kind``, skipping others (MESSAGE frames, say)."""
        while True:
            answer = self.read(timeout_s)
            assert answer is not None, f"closed before a {T.Type.Name(kind)}"
            if answer.type == kind:
                return answer

    def closed_by_server(self, timeout_s: float = 5.0) -> bool:
        """Read until the server closes the connection (True) or the timeout passes (False)."""
        try:
            while self.read(timeout_s) is not None:
                pass
        except TimeoutError:
            return False
        return True
