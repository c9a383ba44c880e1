"""Every broker.conf key the machines use, with Pulsar's defaults and validation.

``Config`` is addressed two ways: by Python attribute (``config.max_active_transactions_per_coordinator``)
inside the code, and by Pulsar's broker.conf key (``maxActiveTransactionsPerCoordinator``) at every
boundary a user writes: vectors, the command line, broker.conf files.  A bad key or value is a
:class:`spec.errors.BadConfig` naming the key.

Constants that Pulsar hard-codes (not configurable) are module constants below, each citing the
class that holds it.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from spec.errors import BadConfig

__all__ = [
    "CLIENT_DEFAULT_TXN_TIMEOUT_MS",
    "DELAYED_MAX_MERGE_NUM",
    "DELAYED_STORAGE_MAX_RETRIES",
    "END_TXN_RETRY_INTERVAL_MS",
    "PENDING_ACK_INIT_BACKOFF_INITIAL_MS",
    "QUIRKS",
    "TIMEOUT_TRACKER_TICK_MS",
    "TRANSACTION_COORDINATOR_COUNT",
    "Config",
]

# TransactionTimeoutTrackerImpl: a timeout below this aborts at once.
TIMEOUT_TRACKER_TICK_MS: Final = 100
# TransactionMetadataStoreService: the end-transaction retry interval.
END_TXN_RETRY_INTERVAL_MS: Final = 1000
# TransactionBuilderImpl: the client's default transaction timeout.
CLIENT_DEFAULT_TXN_TIMEOUT_MS: Final = 60_000
# PendingAckHandleImpl: initial backoff of a retried initialisation.
PENDING_ACK_INIT_BACKOFF_INITIAL_MS: Final = 100
# `pulsar initialize-transaction-coordinator-metadata` default partition count.
TRANSACTION_COORDINATOR_COUNT: Final = 16
# BucketDelayedDeliveryTracker.MAX_MERGE_NUM and the storage retry count (1 try + 3 retries).
DELAYED_MAX_MERGE_NUM: Final = 4
DELAYED_STORAGE_MAX_RETRIES: Final = 3

_Check = Callable[[Any], str | None]


def _min(low: int) -> _Check:
    return lambda v: None if v >= low else f"must be >= {low}, got {v}"


def _positive_or(sentinel: int) -> _Check:
    return lambda v: None if v > 0 or v == sentinel else f"must be > 0 or {sentinel}, got {v}"


def _key(pulsar_key: str, default: Any, check: _Check | None = None, doc: str = "") -> Any:
    return field(default=default, metadata={"key": pulsar_key, "check": check, "doc": doc})


@dataclass(frozen=True, slots=True)
class Config:
    # --- transaction coordinator -------------------------------------------------------------
    transaction_coordinator_enabled: bool = _key(
        "transactionCoordinatorEnabled", False, doc="Enable transactions in the broker."
    )
    max_active_transactions_per_coordinator: int = _key(
        "maxActiveTransactionsPerCoordinator", 0, _min(0), "0 means unlimited."
    )
    transaction_log_batched_write_enabled: bool = _key("transactionLogBatchedWriteEnabled", False)
    transaction_log_batched_write_max_records: int = _key(
        "transactionLogBatchedWriteMaxRecords",
        512,
        _min(1),
        "Batching is effective only when this is > 1 (PIP-160 W1).",
    )
    transaction_log_batched_write_max_size: int = _key(
        "transactionLogBatchedWriteMaxSize", 4 * 1024 * 1024, _min(1), "Bytes."
    )
    transaction_log_batched_write_max_delay_in_millis: int = _key(
        "transactionLogBatchedWriteMaxDelayInMillis", 1, _min(1)
    )
    # --- transaction buffer --------------------------------------------------------------------
    transaction_buffer_snapshot_max_transaction_count: int = _key(
        "transactionBufferSnapshotMaxTransactionCount",
        1000,
        _min(1),
        "Snapshot after a commit/abort once maxReadPosition moved this many times.",
    )
    transaction_buffer_snapshot_min_time_in_millis: int = _key(
        "transactionBufferSnapshotMinTimeInMillis", 5000, _min(1), "Periodic snapshot interval."
    )
    transaction_buffer_snapshot_segment_size: int = _key(
        "transactionBufferSnapshotSegmentSize", 262144, _min(64), "Bytes per snapshot segment."
    )
    transaction_buffer_segmented_snapshot_enabled: bool = _key("transactionBufferSegmentedSnapshotEnabled", False)
    transaction_buffer_client_max_concurrent_requests: int = _key(
        "transactionBufferClientMaxConcurrentRequests", 1000, _min(1)
    )
    transaction_buffer_client_operation_timeout_in_mills: int = _key(
        "transactionBufferClientOperationTimeoutInMills", 3000, _min(1)
    )
    # --- pending ack ---------------------------------------------------------------------------
    transaction_pending_ack_log_index_min_lag: int = _key("transactionPendingAckLogIndexMinLag", 500, _min(1))
    transaction_pending_ack_batched_write_enabled: bool = _key("transactionPendingAckBatchedWriteEnabled", False)
    transaction_pending_ack_batched_write_max_records: int = _key(
        "transactionPendingAckBatchedWriteMaxRecords", 512, _min(1)
    )
    transaction_pending_ack_batched_write_max_size: int = _key(
        "transactionPendingAckBatchedWriteMaxSize", 4 * 1024 * 1024, _min(1)
    )
    transaction_pending_ack_batched_write_max_delay_in_millis: int = _key(
        "transactionPendingAckBatchedWriteMaxDelayInMillis", 1, _min(1)
    )
    acknowledgment_at_batch_index_level_enabled: bool = _key("acknowledgmentAtBatchIndexLevelEnabled", True)
    # --- delayed delivery (PIP-195) ------------------------------------------------------------
    delayed_delivery_enabled: bool = _key("delayedDeliveryEnabled", True)
    delayed_delivery_tracker_factory_class_name: str = _key(
        "delayedDeliveryTrackerFactoryClassName",
        "org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory",
    )
    delayed_delivery_tick_time_millis: int = _key("delayedDeliveryTickTimeMillis", 1000, _min(1))
    is_delayed_delivery_deliver_at_time_strict: bool = _key("isDelayedDeliveryDeliverAtTimeStrict", False)
    delayed_delivery_min_index_count_per_bucket: int = _key("delayedDeliveryMinIndexCountPerBucket", 50000, _min(1))
    delayed_delivery_max_time_step_per_bucket_snapshot_segment_seconds: int = _key(
        "delayedDeliveryMaxTimeStepPerBucketSnapshotSegmentSeconds", 300, _min(0)
    )
    delayed_delivery_max_indexes_per_bucket_snapshot_segment: int = _key(
        "delayedDeliveryMaxIndexesPerBucketSnapshotSegment",
        5000,
        _positive_or(-1),
        "-1 means unlimited.",
    )
    delayed_delivery_max_num_buckets: int = _key("delayedDeliveryMaxNumBuckets", -1, None, "<= 0 disables merging.")
    delayed_delivery_fixed_delay_detection_lookahead: int = _key(
        "delayedDeliveryFixedDelayDetectionLookahead", 50000, _min(0), "In-memory tracker only."
    )
    delayed_delivery_max_delay_in_millis: int = _key(
        "delayedDeliveryMaxDelayInMillis", 0, _min(0), "0 means unlimited."
    )
    # --- managed ledger and security (what the engine needs) -----------------------------------
    managed_ledger_max_entries_per_ledger: int = _key("managedLedgerMaxEntriesPerLedger", 50000, _min(1))
    managed_ledger_max_size_per_ledger_mbytes: int = _key("managedLedgerMaxSizePerLedgerMbytes", 2048, _min(1))
    max_message_size: int = _key(
        "maxMessageSize", 5 * 1024 * 1024, _min(1), "Bytes; a protocol frame may be 10 KiB longer (serve)."
    )
    # --- topic auto-creation (what ``txnmodel serve`` needs) -----------------------------------
    allow_auto_topic_creation: bool = _key(
        "allowAutoTopicCreation", True, doc="A lookup, producer or consumer of an unknown topic creates it."
    )
    allow_auto_topic_creation_type: str = _key(
        "allowAutoTopicCreationType",
        "non-partitioned",
        lambda v: (
            None if v in ("partitioned", "non-partitioned") else f"must be partitioned or non-partitioned, got {v!r}"
        ),
        "What auto-creation creates.",
    )
    default_num_partitions: int = _key(
        "defaultNumPartitions", 1, _min(1), "Partitions of an auto-created partitioned topic."
    )
    # --- connections and dispatch (what ``txnmodel serve`` needs to bound each peer) ------------
    keep_alive_interval_seconds: int = _key(
        "keepAliveIntervalSeconds",
        30,
        _min(1),
        "A connection that has not sent CONNECT by this is closed; after it, the broker sends a PING every "
        "interval and closes a connection that sent nothing (and read nothing) since the last one.",
    )
    broker_max_connections: int = _key(
        "brokerMaxConnections",
        0,
        _min(0),
        "New connections past this are closed at once. 0: no limit but the process's open-file limit "
        "(serve keeps a quarter of it for its ledgers).",
    )
    broker_max_connections_per_ip: int = _key(
        "brokerMaxConnectionsPerIp", 0, _min(0), "New connections from one address past this are closed; 0: no limit."
    )
    max_unacked_messages_per_consumer: int = _key(
        "maxUnackedMessagesPerConsumer",
        50000,
        _min(0),
        "A Shared or Key_Shared consumer holding this many unacknowledged messages gets no more until it is "
        "down to half; 0: no limit.",
    )
    pulsar_channel_write_buffer_high_water_mark: int = _key(
        "pulsarChannelWriteBufferHighWaterMark",
        64 * 1024,
        _min(1),
        "Bytes. A connection with this much output waiting is not writable: its consumers get no more "
        "messages until its output is down to the low water mark.",
    )
    pulsar_channel_write_buffer_low_water_mark: int = _key(
        "pulsarChannelWriteBufferLowWaterMark", 32 * 1024, _min(0), "Bytes; see the high water mark."
    )
    pulsar_channel_pause_receiving_requests_if_unwritable: bool = _key(
        "pulsarChannelPauseReceivingRequestsIfUnwritable",
        False,
        doc="While a connection is not writable, its requests are not read either.",
    )
    txnmodel_connection_max_pending_output_bytes: int = _key(
        "txnmodelConnectionMaxPendingOutputBytes",
        4 * 1024 * 1024,
        _min(1),
        "Not a Pulsar key. A connection whose peer does not read, with more than this waiting to go out, is "
        "closed (a single larger frame, a big message, still goes out whole).",
    )
    authentication_enabled: bool = _key("authenticationEnabled", False)
    authorization_enabled: bool = _key("authorizationEnabled", False)
    super_user_roles: tuple[str, ...] = _key("superUserRoles", ())
    # --- named quirks: Pulsar behaviour the reference does not adopt, switchable to reproduce it --
    # Not broker.conf keys: txnmodel's own switches (see QUIRKS).  Off is the intended behaviour.
    txnmodel_quirk_append_after_abort: bool = _key(
        "txnmodelQuirkAppendAfterAbort",
        False,
        doc="Not a Pulsar key. On: a send of a transaction the buffer already aborted is written after the abort "
        "marker, as Pulsar does, and becomes readable once retention drops the marker's ledger (TB-8, TB-23). "
        "Off (default): it is refused.",
    )
    txnmodel_quirk_abort_hides_committed: bool = _key(
        "txnmodelQuirkAbortHidesCommitted",
        False,
        doc="Not a Pulsar key. On: a message of a txn in the buffer's aborted set is filtered whatever its "
        "position, as Pulsar's isTxnAborted does, so a low-water-mark abort of a committed txn that a late send "
        "re-opened hides the messages its commit made visible (TB-8, TB-16). Off (default): a message belongs to "
        "the first end marker of its txn after it, so such an abort filters only the late message.",
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            key = f.metadata["key"]
            _check_type(key, f.type, value)
            check = f.metadata["check"]
            if check is not None and (problem := check(value)) is not None:
                raise BadConfig(key, problem)
        high = self.pulsar_channel_write_buffer_high_water_mark
        if self.pulsar_channel_write_buffer_low_water_mark > high:
            raise BadConfig("pulsarChannelWriteBufferLowWaterMark", f"must be <= the high water mark ({high})")

    # -- broker.conf addressing --------------------------------------------------------------

    @classmethod
    def broker_conf_keys(cls) -> tuple[str, ...]:
        return tuple(f.metadata["key"] for f in dataclasses.fields(cls))

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every broker.conf key with Pulsar's default."""
        return {f.metadata["key"]: f.default for f in dataclasses.fields(cls)}

    def get(self, key: str) -> Any:
        return getattr(self, _attr_of(key))

    def items(self) -> Iterator[tuple[str, Any]]:
        for f in dataclasses.fields(self):
            yield f.metadata["key"], getattr(self, f.name)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        """A copy with broker.conf keys overridden; strings are parsed as broker.conf would."""
        changes = {}
        for key, raw in overrides.items():
            attr = _attr_of(key)
            changes[attr] = _coerce(key, _FIELD_TYPES[attr], raw)
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_mapping(cls, overrides: Mapping[str, Any]) -> Config:
        return cls().with_overrides(overrides)

    @classmethod
    def from_broker_conf(cls, text: str, *, where: str = "broker.conf") -> Config:
        """Parse broker.conf text as Pulsar does: Java properties (``java.util.Properties.load``).

        Every syntax of the format is accepted: ``key=value``, ``key: value``, ``key value``,
        ``\\`` line continuations, ``#`` and ``!`` comments, ``\\uXXXX`` and the other escapes; a
        key given twice keeps its last value.  Keys we do not model are ignored (a real broker.conf
        holds hundreds).  A blank value keeps the default, as Pulsar's ``FieldParser.update`` does
        for scalar fields (and makes a list key empty).  A bad value is a :class:`BadConfig` naming
        the key and the line it starts on; a malformed ``\\u`` escape names the line.
        """
        import javaproperties

        known = set(cls.broker_conf_keys())
        raw: dict[str, tuple[str, int]] = {}
        line = 1
        elements = javaproperties.parse(text)
        while True:
            try:
                element = next(elements)
            except StopIteration:
                break
            except javaproperties.InvalidUEscapeError as exc:
                start = _offset_of_line(text, line)
                at = text.find(exc.escape, start)
                bad = line + _line_breaks(text[start:at]) if at >= 0 else line
                named = re.match(r"[ \t\f]*([^ \t\f=:\r\n]*)", text[start:])
                raise BadConfig(
                    named.group(1) if named and named.group(1) else f"line {bad}",
                    f"malformed \\uXXXX escape {exc.escape!r} (Java properties need four hex digits)",
                    where=f"{where} line {bad}",
                ) from None
            if isinstance(element, javaproperties.KeyValue) and element.key in known:
                raw[element.key] = (element.value, line)
            line += _line_breaks(element.source)
        overrides: dict[str, Any] = {}
        for key, (value, number) in raw.items():
            attr = _KEY_TO_ATTR[key]
            if not value.strip() and _FIELD_TYPES[attr] != "tuple[str, ...]":
                continue  # blank: Pulsar keeps the default of a scalar field
            try:
                overrides[key] = _coerce(key, _FIELD_TYPES[attr], value)
                cls.from_mapping({key: overrides[key]})  # each key's range alone, to name its line
            except BadConfig as exc:
                raise BadConfig(key, exc.problem, where=f"{where} line {number}") from None
        return cls.from_mapping(overrides)


# Named quirks: what ``--quirk NAME`` (txnmodel check, txnmodel simulate) switches on.
QUIRKS: Final[Mapping[str, Mapping[str, Any]]] = {
    "append-after-abort": {"txnmodelQuirkAppendAfterAbort": True},
    "abort-hides-committed": {"txnmodelQuirkAbortHidesCommitted": True},
}


_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # the line terminators of java.util.Properties


def _line_breaks(text: str) -> int:
    return len(_LINE_BREAK.findall(text))


def _offset_of_line(text: str, line: int) -> int:
    """The offset where ``line`` (1-based) starts."""
    if line <= 1:
        return 0
    found = list(itertools.islice(_LINE_BREAK.finditer(text), line - 1))
    return found[-1].end() if found else len(text)


_KEY_TO_ATTR: dict[str, str] = {f.metadata["key"]: f.name for f in dataclasses.fields(Config)}
_FIELD_TYPES: dict[str, str] = {f.name: str(f.type) for f in dataclasses.fields(Config)}


def _attr_of(key: str) -> str:
    try:
        return _KEY_TO_ATTR[key]
    except KeyError:
        close = difflib.get_close_matches(key, list(_KEY_TO_ATTR), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise BadConfig(key, f"not a broker.conf key this model knows{hint}") from None


def _check_type(key: str, type_name: object, value: Any) -> None:
    name = str(type_name)
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "str": isinstance(value, str),
        "tuple[str, ...]": isinstance(value, tuple) and all(isinstance(v, str) for v in value),
    }.get(name, True)
    if not ok:
        raise BadConfig(key, f"expected {name}, got {value!r}")


def _coerce(key: str, type_name: str, raw: Any) -> Any:
    if not isinstance(raw, str):
        if type_name == "tuple[str, ...]" and isinstance(raw, list | tuple):
            return tuple(raw)
        return raw
    text = raw.strip()
    if type_name == "bool":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise BadConfig(key, f"expected true or false, got {raw!r}")
    if type_name == "int":
        try:
            return int(text)
        except ValueError:
            raise BadConfig(key, f"expected an integer, got {raw!r}") from None
    if type_name == "tuple[str, ...]":
        return tuple(part.strip() for part in text.split(",") if part.strip())
    return text
