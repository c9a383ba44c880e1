"""Typed errors, named after Pulsar's.

Two families, kept apart on purpose:

* **Domain errors** are *values*.  A machine that rejects a command returns one inside
  :class:`spec.result.Err`; it never raises.  Each carries the ``ServerError`` code a broker sends
  for it on the wire (``BrokerServiceException.getClientErrorCode``) and whether the coordinator's
  end-transaction path retries it.
* **Input errors** are *exceptions*: corrupt or truncated bytes, unknown magic numbers or
  versions, malformed vectors, histories or configs.  They say what is wrong and where (byte
  offset, file, JSON path) and derive from :class:`InputError`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from spec.types import PulsarName

__all__ = [
    "OFFICIAL_CLIENT_ERRORS",
    "BadConfig",
    "BadEnvelope",
    "BadRecord",
    "BadTopicEntry",
    "BadVector",
    "BucketNotExist",
    "BucketSnapshotPersistence",
    "BucketSnapshotSerialization",
    "ChecksumMismatch",
    "CoordinatorNotFound",
    "DomainError",
    "FrameTooLarge",
    "IllegalArgument",
    "InputError",
    "InvalidTxnStatus",
    "ManagedLedgerAlreadyClosed",
    "ManagedLedgerFenced",
    "ManagedLedgerIntercept",
    "NotAllowed",
    "PersistenceError",
    "ReachMaxActiveTxn",
    "RecoverDelayedDeliveryTracker",
    "RequestTimeout",
    "ServerError",
    "ServiceUnitNotReady",
    "SubscriptionBusy",
    "SubscriptionNotFound",
    "TransactionConflict",
    "TransactionHasOperationFailed",
    "TransactionMetadataStoreState",
    "TransactionNotFound",
    "TransactionNotSealed",
    "TransactionSealed",
    "TransactionStatusError",
    "TruncatedInput",
    "UnsupportedTxnAction",
    "UnsupportedVersion",
    "error_by_name",
    "is_pulsar_error",
]


class ServerError(PulsarName, enum.IntEnum):
    """PulsarApi.proto's ``ServerError``: the code of every failed request on the wire."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    TransactionCoordinatorNotFound = 20
    InvalidTxnStatus = 21
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25


@dataclass(frozen=True, slots=True)
class DomainError:
    """Base of every error value a machine returns.  ``name`` is the vectors' spelling."""

    message: str = ""

    server_error: ClassVar[ServerError] = ServerError.UnknownError
    # Retried by the coordinator's end-transaction loop (TransactionMetadataStoreService).
    retryable: ClassVar[bool] = False
    # Whether the broker answers the request that failed with it; False: no response is sent and
    # the client only sees its own request timeout.
    answered: ClassVar[bool] = True

    @property
    def name(self) -> str:
        return type(self).__name__

    def __str__(self) -> str:
        return f"{self.name}: {self.message}" if self.message else self.name


@dataclass(frozen=True, slots=True)
class CoordinatorNotFound(DomainError):
    """The TC of this txn is not loaded here (CoordinatorNotFoundException)."""

    server_error: ClassVar[ServerError] = ServerError.TransactionCoordinatorNotFound


@dataclass(frozen=True, slots=True)
class InvalidTxnStatus(DomainError):
    """A status check or transition failed (InvalidTxnStatusException)."""

    server_error: ClassVar[ServerError] = ServerError.InvalidTxnStatus


@dataclass(frozen=True, slots=True)
class TransactionNotFound(DomainError):
    """Unknown txn, a finished txn, or a caller who may not see it (TransactionNotFoundException)."""

    server_error: ClassVar[ServerError] = ServerError.TransactionNotFound


@dataclass(frozen=True, slots=True)
class ReachMaxActiveTxn(DomainError):
    """maxActiveTransactionsPerCoordinator reached; the broker sends no NEW_TXN response at all (TC-4)."""

    answered: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class TransactionMetadataStoreState(DomainError):
    """The metadata store is not Ready (TransactionMetadataStoreStateException); end-txn retries."""

    retryable: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class UnsupportedTxnAction(DomainError):
    """END_TXN with an action other than COMMIT or ABORT."""


@dataclass(frozen=True, slots=True)
class TransactionHasOperationFailed(DomainError):
    """Client: a send or ack of the txn failed, so commit became an abort."""


@dataclass(frozen=True, slots=True)
class RequestTimeout(DomainError):
    """A request got no answer in time (client side)."""

    retryable: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class NotAllowed(DomainError):
    """NotAllowedException."""

    server_error: ClassVar[ServerError] = ServerError.NotAllowedError


@dataclass(frozen=True, slots=True)
class TransactionConflict(DomainError):
    """TransactionConflictException: the ack conflicts with a deletion or another txn's pending ack."""

    server_error: ClassVar[ServerError] = ServerError.TransactionConflict


@dataclass(frozen=True, slots=True)
class ServiceUnitNotReady(DomainError):
    """ServiceUnitNotReadyException: not loaded, recovering, or closed."""

    server_error: ClassVar[ServerError] = ServerError.ServiceNotReady
    retryable: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class SubscriptionNotFound(DomainError):
    """SubscriptionNotFoundException: the request names a subscription the topic does not have
    (the admin API answers 404 "Subscription not found")."""

    server_error: ClassVar[ServerError] = ServerError.SubscriptionNotFound


@dataclass(frozen=True, slots=True)
class PersistenceError(DomainError):
    """A ledger write failed (PersistenceException / ManagedLedgerException)."""

    server_error: ClassVar[ServerError] = ServerError.PersistenceError
    retryable: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class ManagedLedgerFenced(DomainError):
    """ManagedLedgerFencedException; also what a closing batched writer fails buffered records with."""


@dataclass(frozen=True, slots=True)
class ManagedLedgerAlreadyClosed(DomainError):
    """ManagedLedgerAlreadyClosedException: the ledger must roll before the next write."""

    retryable: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class ManagedLedgerIntercept(DomainError):
    """ManagedLedgerInterceptException: a record could not be sized or serialized."""


@dataclass(frozen=True, slots=True)
class TransactionSealed(DomainError):
    """Append to a txn that is no longer OPEN."""


@dataclass(frozen=True, slots=True)
class TransactionNotSealed(DomainError):
    """A reader was opened on a txn that is still OPEN (in-memory buffer)."""


@dataclass(frozen=True, slots=True)
class TransactionStatusError(DomainError):
    """TransactionStatusException of the in-memory buffer (commit or abort from a wrong status)."""


@dataclass(frozen=True, slots=True)
class BucketNotExist(DomainError):
    """The bucket snapshot ledger does not exist."""


@dataclass(frozen=True, slots=True)
class BucketSnapshotPersistence(DomainError):
    """A bucket snapshot storage operation failed (BucketSnapshotPersistenceException)."""


@dataclass(frozen=True, slots=True)
class BucketSnapshotSerialization(DomainError):
    """A bucket snapshot could not be parsed."""


@dataclass(frozen=True, slots=True)
class RecoverDelayedDeliveryTracker(DomainError):
    """Bucket recovery failed; the factory falls back to in-memory."""


@dataclass(frozen=True, slots=True)
class IllegalArgument(DomainError):
    """IllegalArgumentException, e.g. a blank transaction owner (the broker reports UnknownError)."""


@dataclass(frozen=True, slots=True)
class SubscriptionBusy(DomainError):
    """An unsubscribe while other consumers are connected (SubscriptionBusyException)."""

    server_error: ClassVar[ServerError] = ServerError.ConsumerBusy


# Every error value is declared in this module, so the subclass list is the whole taxonomy.
_ALL_ERRORS: dict[str, type[DomainError]] = {cls.__name__: cls for cls in DomainError.__subclasses__()}


def error_by_name(name: str) -> type[DomainError]:
    """The error class a vector or history names; a clear ``KeyError`` lists the known names."""
    try:
        return _ALL_ERRORS[name]
    except KeyError:
        known = ", ".join(sorted(_ALL_ERRORS))
        raise KeyError(f"unknown error name {name!r}; known: {known}") from None


def all_error_names() -> tuple[str, ...]:
    return tuple(sorted(_ALL_ERRORS))


# The exceptions of the official Python client (``pulsar.exceptions``, pulsar-client 3.x): what
# ``txnmodel record`` writes as the error of an operation the real client failed.
OFFICIAL_CLIENT_ERRORS: frozenset[str] = frozenset(
    {
        "AlreadyClosed",
        "AuthenticationError",
        "AuthorizationError",
        "BrokerMetadataError",
        "BrokerPersistenceError",
        "ChecksumError",
        "ConnectError",
        "ConsumerAssignError",
        "ConsumerBusy",
        "ConsumerNotFound",
        "ConsumerNotInitialized",
        "CryptoError",
        "CumulativeAcknowledgementNotAllowedError",
        "ErrorGettingAuthenticationData",
        "IncompatibleSchema",
        "Interrupted",
        "InvalidConfiguration",
        "InvalidMessage",
        "InvalidTopicName",
        "InvalidTxnStatusError",
        "InvalidUrl",
        "LookupError",
        "MemoryBufferIsFull",
        "MessageTooBig",
        "NotAllowedError",
        "NotConnected",
        "OperationNotSupported",
        "ProducerBlockedQuotaExceededError",
        "ProducerBlockedQuotaExceededException",
        "ProducerBusy",
        "ProducerFenced",
        "ProducerNotInitialized",
        "ProducerQueueIsFull",
        "PulsarException",
        "ReadError",
        "ServiceUnitNotReady",
        "SubscriptionNotFound",
        "Timeout",
        "TooManyLookupRequestException",
        "TopicNotFound",
        "TopicTerminated",
        "TransactionConflict",
        "TransactionCoordinatorNotFoundError",
        "TransactionNotFound",
        "UnknownError",
        "UnsupportedVersionError",
    }
)


def is_pulsar_error(name: str) -> bool:
    """``name`` is an error Pulsar defines (TC-37): a domain error of this module, a ``ServerError``
    code, or an exception of the official client.  Anything else a client operation failed with is
    an exception of the client library's own (a bug in it)."""
    return name in _ALL_ERRORS or name in ServerError.__members__ or name in OFFICIAL_CLIENT_ERRORS


# ---------------------------------------------------------------------------------------------
# Input errors (exceptions).


class InputError(Exception):
    """Bad input: says what is wrong and where.  Nothing is half-applied when one is raised."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class TruncatedInput(InputError):
    """Bytes ended early."""

    def __init__(self, message: str, *, offset: int, where: str | None = None) -> None:
        self.offset = offset
        super().__init__(f"{message} (at byte offset {offset})", where=where)


class BadEnvelope(InputError):
    """A batched-entry envelope that is not what it claims to be."""

    def __init__(self, message: str, *, offset: int, where: str | None = None) -> None:
        self.offset = offset
        super().__init__(f"{message} (at byte offset {offset})", where=where)


class UnsupportedVersion(BadEnvelope):
    """A known magic number with a version this code does not read."""


class BadRecord(InputError):
    """Bytes that do not parse as the record they should be."""

    def __init__(self, message: str, *, offset: int, where: str | None = None) -> None:
        self.offset = offset
        super().__init__(f"{message} (at byte offset {offset})", where=where)


class ChecksumMismatch(BadRecord):
    """A message's CRC32C does not match its bytes (the wire's ``ChecksumError``)."""


class FrameTooLarge(InputError):
    """A protocol frame longer than the connection allows (``maxMessageSize`` plus Pulsar's padding)."""

    def __init__(self, message: str, *, size: int, limit: int, where: str | None = None) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"{message}: {size} bytes, the limit is {limit}", where=where)


class BadTopicEntry(BadRecord, ValueError):
    """Bytes that are not a topic entry (``spec.topic_entry``): a metadata size or a batch message
    that runs past the end, metadata that does not parse, bytes after a batch's last message.
    ``reason`` is the message without the location.  Also a ``ValueError``, which the broker's own
    entry decoder raised before the codec moved here."""

    def __init__(self, message: str, *, offset: int, where: str | None = None) -> None:
        self.reason = message
        super().__init__(message, offset=offset, where=where)


class BadConfig(InputError):
    """A config key that does not exist or a value out of range; names the key (and, read from a
    file, where: ``broker.conf line 12``)."""

    def __init__(self, key: str, message: str, *, where: str | None = None) -> None:
        self.key = key
        self.problem = message
        super().__init__(f"{key}: {message}", where=where)


class BadVector(InputError):
    """A conformance vector that is unreadable or does not follow the schema; names file and path."""
