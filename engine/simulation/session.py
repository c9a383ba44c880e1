"""What a client's handles (a transaction, a producer, a consumer) need of the client that made
them: its simulation, broker and network, its history process, and the request plumbing that
records every call as an invocation and a completion (:class:`Session`); the outcomes a call fails
with; and how ids are spelled in the history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from engine.broker import Broker
from engine.scheduler import Future, Network, Simulation
from spec.errors import DomainError
from spec.types import Position, TxnID

__all__ = [
    "ClientLibraryError",
    "Connected",
    "OperationFailed",
    "OperationTimeout",
    "Session",
    "position_json",
    "txn_json",
]

T = TypeVar("T")


class OperationFailed(Exception):
    """The operation did not take effect: the broker (or the client) refused it with ``error``."""

    def __init__(self, error: DomainError) -> None:
        super().__init__(str(error))
        self.error = error


class OperationTimeout(Exception):
    """No answer within the operation timeout: the outcome is unknown (history type ``info``)."""


class ClientLibraryError(Exception):
    """The client library raised an exception of its own: a bug in the library, not one of Pulsar's
    errors.  A real client library that throws fails the application's call with that exception, so
    the call is recorded ``fail`` with the exception's type name as its error (the client-visible
    check ``unexpected-error``, TC-37, flags it) and the application goes on."""

    def __init__(self, exception: BaseException) -> None:
        super().__init__(f"{type(exception).__name__}: {exception}")
        self.exception = exception

    @property
    def name(self) -> str:
        return type(self.exception).__name__


class Connected(Protocol):
    """A consumer as its client sees it: a request left unanswered means a broken connection, and
    every consumer of the client reconnects."""

    def reconnect(self) -> None: ...


class Session(Protocol):
    """The client a handle was made by (:class:`engine.simulation.client.Client`)."""

    sim: Simulation
    broker: Broker
    network: Network
    operation_timeout_ms: int
    process: int  # the history process of the client's next operation

    def operation(
        self, f: str, obj: str, value: Any, call: Callable[[], Future[T]], render: Callable[[T], Any] = ...
    ) -> Future[T]:
        """Record ``f`` on ``obj`` as invoked, run ``call``, and record its outcome (or a timeout)."""
        ...

    def wait(self, future: Future[T]) -> T:
        """Run the simulation until ``future`` is done; its value, or its exception raised."""
        ...

    def forget(self, consumer: Connected) -> None:
        """A consumer closed or unsubscribed: it no longer reconnects with the client."""
        ...


def txn_json(txn: TxnID) -> list[int]:
    return [txn.most_sig_bits, txn.least_sig_bits]


def position_json(position: Position) -> list[int]:
    return [position.ledger_id, position.entry_id]
