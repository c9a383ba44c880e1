"""The protocol's vocabulary for the server: message ids, ack sets, request ids and error answers.

Conversions between Pulsar's wire values (``spec.pb``) and the engine's, with nothing of a
connection in them: a message id and a :class:`~spec.types.Position`, a batch's ``ack_set`` and the
indexes it names, the ``ServerError`` code a failed request carries, and the frame that answers a
failed request of each kind.  A request that waits on several machine steps waits on one future
made here (:func:`all_settled`, :func:`first_error`).
"""

from __future__ import annotations

from typing import Any

from engine.broker import BrokerError
from engine.scheduler import Future
from engine.storage.ledger import LedgerError
from spec.errors import DomainError, ServerError
from spec.pb import PulsarApi_pb2 as api
from spec.topics import InvalidTopicName, TopicName, parse_topic
from spec.types import Position

__all__ = [
    "COMMAND_FIELD",
    "MAX_PROTOCOL_VERSION",
    "SERVER_VERSION",
    "TXN_RESPONSES",
    "UINT64",
    "ProtocolViolation",
    "RequestError",
    "ack_set",
    "all_settled",
    "error_response",
    "failed",
    "first_error",
    "java_long",
    "message_id",
    "position_of",
    "request_id_of",
    "set_bits",
    "topic_name",
    "wire_error",
]

SERVER_VERSION = "txnmodel-serve-0.1"
# The highest protocol version this server speaks: v21 (AUTO_CONSUME schemas); CONNECTED answers
# the lower of the client's and this.
MAX_PROTOCOL_VERSION = 21
UINT64 = (1 << 64) - 1
T = api.BaseCommand


class ProtocolViolation(Exception):
    """The connection must close (a protocol violation); the message is the one log line."""


class RequestError(Exception):
    """A request refused before it reached a machine (or by the adapter's own checks): answered
    with ``code`` and ``message`` when the request has a request id, ignored otherwise."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- values ---------------------------------------------------------------------------------------


def java_long(value: int) -> int:
    """A uint64 on the wire carrying a Java long (entry id -1 travels as 2^64 - 1)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def position_of(mid: Any) -> Position:
    """The position a ``MessageIdData`` names; an id below -1 (as a Java long) names none, and
    the request is refused (NotAllowedError)."""
    ledger_id, entry_id = java_long(mid.ledgerId), java_long(mid.entryId)
    if ledger_id < -1 or entry_id < -1:
        raise RequestError(
            ServerError.NotAllowedError, f"message id {ledger_id}:{entry_id} names no position (an id is -1 or more)"
        )
    return Position(ledger_id, entry_id)


def message_id(position: Position, *, batch_index: int | None = None, batch_size: int | None = None) -> Any:
    """The ``MessageIdData`` of ``position`` (and of one message of its batch)."""
    mid = api.MessageIdData(ledgerId=position.ledger_id & UINT64, entryId=position.entry_id & UINT64)
    if batch_index is not None:
        mid.batch_index = batch_index
    if batch_size is not None:
        mid.batch_size = batch_size
    return mid


def ack_set(indexes: list[int], size: int) -> list[int]:
    """The words of a Java BitSet with ``indexes`` set (signed 64-bit words)."""
    words = [0] * ((size + 63) // 64)
    for i in indexes:
        words[i // 64] |= 1 << (i % 64)
    return [java_long(w) for w in words]


def set_bits(words: list[int], size: int) -> set[int]:
    """The indexes below ``size`` that the BitSet ``words`` has set."""
    return {i for i in range(size) if i // 64 < len(words) and (words[i // 64] >> (i % 64)) & 1}


def topic_name(topic: str) -> TopicName:
    """``topic`` parsed; a bad name is the request's error (InvalidTopicName or NotAllowedError)."""
    try:
        return parse_topic(topic)
    except InvalidTopicName as exc:
        code = ServerError.NotAllowedError if exc.not_allowed else ServerError.InvalidTopicName
        raise RequestError(code, str(exc)) from None


# -- failed requests ------------------------------------------------------------------------------


def wire_error(error: BaseException) -> tuple[int, str]:
    """The ``ServerError`` code and message a failed request is answered with: a machine's domain
    error carries its own code (spec/errors.py); a ledger failure is a PersistenceError."""
    if isinstance(error, RequestError):
        return error.code, error.message
    if isinstance(error, BrokerError):
        domain: DomainError = error.error
        return int(domain.server_error), domain.message or domain.name
    if isinstance(error, LedgerError):
        domain = error.domain_error()
        return int(domain.server_error), domain.message or domain.name
    inner = getattr(error, "error", None)
    if isinstance(inner, DomainError):
        return int(inner.server_error), inner.message or inner.name
    return int(ServerError.UnknownError), str(error)


# BaseCommand's field number equals its type's number.
COMMAND_FIELD: dict[int, str] = {field.number: field.name for field in T.DESCRIPTOR.fields if field.name != "type"}
# A transaction request's kind -> its response's kind, BaseCommand field and message type.
TXN_RESPONSES: dict[int, tuple[int, str, Any]] = {
    T.NEW_TXN: (T.NEW_TXN_RESPONSE, "newTxnResponse", api.CommandNewTxnResponse),
    T.ADD_PARTITION_TO_TXN: (
        T.ADD_PARTITION_TO_TXN_RESPONSE,
        "addPartitionToTxnResponse",
        api.CommandAddPartitionToTxnResponse,
    ),
    T.ADD_SUBSCRIPTION_TO_TXN: (
        T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
        "addSubscriptionToTxnResponse",
        api.CommandAddSubscriptionToTxnResponse,
    ),
    T.END_TXN: (T.END_TXN_RESPONSE, "endTxnResponse", api.CommandEndTxnResponse),
    T.TC_CLIENT_CONNECT_REQUEST: (
        T.TC_CLIENT_CONNECT_RESPONSE,
        "tcClientConnectResponse",
        api.CommandTcClientConnectResponse,
    ),
}


def request_id_of(cmd: Any) -> int | None:
    """The request id of a command, if it has one."""
    field_name = COMMAND_FIELD.get(cmd.type)
    if field_name is None or not cmd.HasField(field_name):
        return None
    sub = getattr(cmd, field_name)
    if "request_id" in sub.DESCRIPTOR.fields_by_name and sub.HasField("request_id"):
        return int(sub.request_id)
    return None


def error_response(kind: int, cmd: Any, number: int, message: str) -> Any:
    """The answer to the failed request ``cmd`` (of type ``kind``, with a request id): the kind's
    own response with its error fields where it has one, else ERROR."""
    code = api.ServerError.ValueType(number)
    request_id = request_id_of(cmd)
    assert request_id is not None
    if kind == T.PARTITIONED_METADATA:
        return T(
            type=T.PARTITIONED_METADATA_RESPONSE,
            partitionMetadataResponse=api.CommandPartitionedTopicMetadataResponse(
                request_id=request_id,
                response=api.CommandPartitionedTopicMetadataResponse.Failed,
                error=code,
                message=message,
            ),
        )
    if kind == T.LOOKUP:
        return T(
            type=T.LOOKUP_RESPONSE,
            lookupTopicResponse=api.CommandLookupTopicResponse(
                request_id=request_id,
                response=api.CommandLookupTopicResponse.Failed,
                error=code,
                message=message,
            ),
        )
    if kind == T.GET_SCHEMA:
        return T(
            type=T.GET_SCHEMA_RESPONSE,
            getSchemaResponse=api.CommandGetSchemaResponse(
                request_id=request_id, error_code=code, error_message=message
            ),
        )
    if kind == T.GET_OR_CREATE_SCHEMA:
        return T(
            type=T.GET_OR_CREATE_SCHEMA_RESPONSE,
            getOrCreateSchemaResponse=api.CommandGetOrCreateSchemaResponse(
                request_id=request_id, error_code=code, error_message=message
            ),
        )
    if kind in TXN_RESPONSES:
        response_type, field_name, message_type = TXN_RESPONSES[kind]
        sub = getattr(cmd, COMMAND_FIELD[kind])
        body = message_type(request_id=request_id, error=code, message=message)
        if hasattr(sub, "txnid_most_bits") and "txnid_most_bits" in message_type.DESCRIPTOR.fields_by_name:
            body.txnid_most_bits, body.txnid_least_bits = sub.txnid_most_bits, sub.txnid_least_bits
        return T(type=T.Type.ValueType(response_type), **{field_name: body})
    if kind == T.ACK:
        return T(
            type=T.ACK_RESPONSE,
            ackResponse=api.CommandAckResponse(
                consumer_id=cmd.ack.consumer_id,
                request_id=request_id,
                txnid_most_bits=cmd.ack.txnid_most_bits,
                txnid_least_bits=cmd.ack.txnid_least_bits,
                error=code,
                message=message,
            ),
        )
    return T(type=T.ERROR, error=api.CommandError(request_id=request_id, error=code, message=message))


# -- requests that wait on machine steps ----------------------------------------------------------


def failed(code: int, message: str) -> Future[Any]:
    """A future already failed with a :class:`RequestError`."""
    future: Future[Any] = Future()
    future.set_exception(RequestError(code, message))
    return future


def all_settled(futures: list[Future[Any]]) -> Future[None]:
    """Completes (with None) when every future did, whatever their outcomes."""
    out: Future[None] = Future()
    remaining = [len(futures)]
    if not futures:
        out.set_result(None)
        return out

    def one(_: Future[Any]) -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            out.set_result(None)

    for future in futures:
        future.add_done_callback(one)
    return out


def first_error(futures: list[Future[Any]]) -> Future[None]:
    """Completes when every future did: with the first error (in order), else with None."""
    out: Future[None] = Future()

    def settled(_: Future[None]) -> None:
        error = next((f.error for f in futures if f.error is not None), None)
        if error is not None:
            out.set_exception(error)
        else:
            out.set_result(None)

    all_settled(futures).add_done_callback(settled)
    return out
