"""The .proto files: Pulsar's facts, hand-encoded bytes, round trips, and regeneration.

Four independent guards against a wrong field number, type or label:

* ``PULSAR_FIELDS`` restates, field by field, what Pulsar's own .proto files declare (read from
  apache/pulsar: PulsarApi.proto, PulsarMarkers.proto, PulsarTransactionMetadata.proto,
  TransactionPendingAck.proto, DelayedMessageIndexBucketMetadata.proto,
  DelayedMessageIndexBucketSegment.proto) and compares it with the compiled descriptors;
* hand-encoded wire bytes, written from the protobuf encoding rules and not from the generated
  code, must parse to the expected records (a swapped number cannot round-trip silently here);
* a Hypothesis round trip for every message: random valid message -> bytes -> message is the
  identity, deterministic re-serialisation is byte-identical, and ``spec.wire.check_message``
  accepts what the runtime writes;
* regenerating ``spec/pb`` from ``spec/proto`` must reproduce the committed files byte for byte.
"""

from __future__ import annotations

import filecmp
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import given
from hypothesis import strategies as st

from spec.pb import (
    DelayedMessageIndexBucketMetadata_pb2,
    DelayedMessageIndexBucketSegment_pb2,
    PulsarApi_pb2,
    PulsarMarkers_pb2,
    PulsarTransactionMetadata_pb2,
    TransactionBufferSnapshot_pb2,
    TransactionPendingAck_pb2,
)
from spec.wire import check_message

ROOT = Path(__file__).resolve().parents[2]
MODULES: tuple[ModuleType, ...] = (
    PulsarApi_pb2,
    PulsarMarkers_pb2,
    PulsarTransactionMetadata_pb2,
    TransactionPendingAck_pb2,
    DelayedMessageIndexBucketMetadata_pb2,
    DelayedMessageIndexBucketSegment_pb2,
    TransactionBufferSnapshot_pb2,
)

T = FieldDescriptor


def _all_messages() -> list[Descriptor]:
    found: list[Descriptor] = []

    def visit(desc: Descriptor) -> None:
        if desc.GetOptions().map_entry:
            return
        found.append(desc)
        for nested in desc.nested_types:
            visit(nested)

    for module in MODULES:
        for desc in module.DESCRIPTOR.message_types_by_name.values():
            visit(desc)
    return found


MESSAGES = _all_messages()


def _message_class(desc: Descriptor) -> type[Message]:
    module = next(m for m in MODULES if m.DESCRIPTOR is desc.file)
    obj: Any = module
    for part in desc.full_name[len(desc.file.package) + 1 :].split("."):
        obj = getattr(obj, part)
    assert isinstance(obj, type) and issubclass(obj, Message)
    return obj


# ---------------------------------------------------------------------------------------------
# Pulsar's declarations, restated.  (message, field, number, type, label, default or None)

OPT, REQ, REP = "optional", "required", "repeated"
PULSAR_FIELDS: list[tuple[str, str, int, int, str, object]] = [
    # PulsarApi.proto (the subset txnmodel uses)
    ("pulsar.proto.KeyValue", "key", 1, T.TYPE_STRING, REQ, None),
    ("pulsar.proto.KeyValue", "value", 2, T.TYPE_STRING, REQ, None),
    ("pulsar.proto.MessageIdData", "ledgerId", 1, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.MessageIdData", "entryId", 2, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.MessageIdData", "partition", 3, T.TYPE_INT32, OPT, -1),
    ("pulsar.proto.MessageIdData", "batch_index", 4, T.TYPE_INT32, OPT, -1),
    ("pulsar.proto.MessageIdData", "ack_set", 5, T.TYPE_INT64, REP, None),
    ("pulsar.proto.MessageIdData", "batch_size", 6, T.TYPE_INT32, OPT, None),
    ("pulsar.proto.MessageIdData", "first_chunk_message_id", 7, T.TYPE_MESSAGE, OPT, None),
    ("pulsar.proto.MessageMetadata", "producer_name", 1, T.TYPE_STRING, REQ, None),
    ("pulsar.proto.MessageMetadata", "sequence_id", 2, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.MessageMetadata", "publish_time", 3, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.MessageMetadata", "properties", 4, T.TYPE_MESSAGE, REP, None),
    ("pulsar.proto.MessageMetadata", "replicated_from", 5, T.TYPE_STRING, OPT, None),
    ("pulsar.proto.MessageMetadata", "partition_key", 6, T.TYPE_STRING, OPT, None),
    ("pulsar.proto.MessageMetadata", "replicate_to", 7, T.TYPE_STRING, REP, None),
    ("pulsar.proto.MessageMetadata", "uncompressed_size", 9, T.TYPE_UINT32, OPT, 0),
    ("pulsar.proto.MessageMetadata", "num_messages_in_batch", 11, T.TYPE_INT32, OPT, 1),
    ("pulsar.proto.MessageMetadata", "event_time", 12, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.MessageMetadata", "deliver_at_time", 19, T.TYPE_INT64, OPT, None),
    ("pulsar.proto.MessageMetadata", "marker_type", 20, T.TYPE_INT32, OPT, None),
    ("pulsar.proto.MessageMetadata", "txnid_least_bits", 22, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.MessageMetadata", "txnid_most_bits", 23, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.MessageMetadata", "highest_sequence_id", 24, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.MessageMetadata", "null_value", 25, T.TYPE_BOOL, OPT, False),
    ("pulsar.proto.MessageMetadata", "uuid", 26, T.TYPE_STRING, OPT, None),
    ("pulsar.proto.MessageMetadata", "null_partition_key", 30, T.TYPE_BOOL, OPT, False),
    ("pulsar.proto.Subscription", "topic", 1, T.TYPE_STRING, REQ, None),
    ("pulsar.proto.Subscription", "subscription", 2, T.TYPE_STRING, REQ, None),
    ("pulsar.proto.CommandAck", "consumer_id", 1, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.CommandAck", "ack_type", 2, T.TYPE_ENUM, REQ, None),
    ("pulsar.proto.CommandAck", "message_id", 3, T.TYPE_MESSAGE, REP, None),
    ("pulsar.proto.CommandAck", "txnid_least_bits", 6, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.CommandAck", "txnid_most_bits", 7, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.CommandAck", "request_id", 8, T.TYPE_UINT64, OPT, None),
    *[
        (cmd, name, number, typ, label, default)
        for cmd in ("pulsar.proto.CommandEndTxnOnPartition", "pulsar.proto.CommandEndTxnOnSubscription")
        for name, number, typ, label, default in (
            ("request_id", 1, T.TYPE_UINT64, REQ, None),
            ("txnid_least_bits", 2, T.TYPE_UINT64, OPT, 0),
            ("txnid_most_bits", 3, T.TYPE_UINT64, OPT, 0),
            ("txn_action", 5, T.TYPE_ENUM, OPT, None),
            ("txnid_least_bits_of_low_watermark", 6, T.TYPE_UINT64, OPT, None),
        )
    ],
    ("pulsar.proto.CommandEndTxnOnPartition", "topic", 4, T.TYPE_STRING, OPT, None),
    ("pulsar.proto.CommandEndTxnOnSubscription", "subscription", 4, T.TYPE_MESSAGE, OPT, None),
    # PulsarApi.proto: the commands serve speaks (request ids, ids, and the fields it reads or writes)
    ("pulsar.proto.BaseCommand", "type", 1, T.TYPE_ENUM, REQ, None),
    *[
        ("pulsar.proto.BaseCommand", name, number, T.TYPE_MESSAGE, OPT, None)
        for name, number in (
            ("connect", 2),
            ("connected", 3),
            ("subscribe", 4),
            ("producer", 5),
            ("send", 6),
            ("send_receipt", 7),
            ("send_error", 8),
            ("message", 9),
            ("ack", 10),
            ("flow", 11),
            ("unsubscribe", 12),
            ("success", 13),
            ("error", 14),
            ("close_producer", 15),
            ("close_consumer", 16),
            ("producer_success", 17),
            ("ping", 18),
            ("pong", 19),
            ("redeliverUnacknowledgedMessages", 20),
            ("partitionMetadata", 21),
            ("partitionMetadataResponse", 22),
            ("lookupTopic", 23),
            ("lookupTopicResponse", 24),
            ("seek", 28),
            ("getLastMessageId", 29),
            ("getLastMessageIdResponse", 30),
            ("getSchema", 34),
            ("getSchemaResponse", 35),
            ("ackResponse", 38),
            ("getOrCreateSchema", 39),
            ("getOrCreateSchemaResponse", 40),
            ("newTxn", 50),
            ("newTxnResponse", 51),
            ("addPartitionToTxn", 52),
            ("addPartitionToTxnResponse", 53),
            ("addSubscriptionToTxn", 54),
            ("addSubscriptionToTxnResponse", 55),
            ("endTxn", 56),
            ("endTxnResponse", 57),
            ("tcClientConnectRequest", 62),
            ("tcClientConnectResponse", 63),
        )
    ],
    ("pulsar.proto.CommandConnect", "client_version", 1, T.TYPE_STRING, REQ, None),
    ("pulsar.proto.CommandConnect", "protocol_version", 4, T.TYPE_INT32, OPT, 0),
    ("pulsar.proto.CommandConnected", "server_version", 1, T.TYPE_STRING, REQ, None),
    ("pulsar.proto.CommandConnected", "protocol_version", 2, T.TYPE_INT32, OPT, 0),
    ("pulsar.proto.CommandConnected", "max_message_size", 3, T.TYPE_INT32, OPT, None),
    ("pulsar.proto.CommandSend", "producer_id", 1, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.CommandSend", "sequence_id", 2, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.CommandSend", "num_messages", 3, T.TYPE_INT32, OPT, 1),
    ("pulsar.proto.CommandSend", "txnid_least_bits", 4, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.CommandSend", "txnid_most_bits", 5, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.CommandSend", "highest_sequence_id", 6, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.CommandSend", "is_chunk", 7, T.TYPE_BOOL, OPT, False),
    ("pulsar.proto.CommandSendReceipt", "message_id", 3, T.TYPE_MESSAGE, OPT, None),
    ("pulsar.proto.CommandSendError", "error", 3, T.TYPE_ENUM, REQ, None),
    ("pulsar.proto.CommandMessage", "consumer_id", 1, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.CommandMessage", "message_id", 2, T.TYPE_MESSAGE, REQ, None),
    ("pulsar.proto.CommandMessage", "redelivery_count", 3, T.TYPE_UINT32, OPT, 0),
    ("pulsar.proto.CommandMessage", "ack_set", 4, T.TYPE_INT64, REP, None),
    ("pulsar.proto.CommandFlow", "messagePermits", 2, T.TYPE_UINT32, REQ, None),
    ("pulsar.proto.CommandSubscribe", "subType", 3, T.TYPE_ENUM, REQ, None),
    ("pulsar.proto.CommandSubscribe", "start_message_id", 9, T.TYPE_MESSAGE, OPT, None),
    ("pulsar.proto.CommandSubscribe", "initialPosition", 13, T.TYPE_ENUM, OPT, 0),
    ("pulsar.proto.CommandSubscribe", "keySharedMeta", 17, T.TYPE_MESSAGE, OPT, None),
    ("pulsar.proto.CommandLookupTopicResponse", "response", 3, T.TYPE_ENUM, OPT, None),
    ("pulsar.proto.CommandLookupTopicResponse", "request_id", 4, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.CommandLookupTopicResponse", "authoritative", 5, T.TYPE_BOOL, OPT, False),
    ("pulsar.proto.CommandLookupTopicResponse", "proxy_through_service_url", 8, T.TYPE_BOOL, OPT, False),
    ("pulsar.proto.CommandPartitionedTopicMetadataResponse", "partitions", 1, T.TYPE_UINT32, OPT, None),
    ("pulsar.proto.CommandProducerSuccess", "last_sequence_id", 3, T.TYPE_INT64, OPT, -1),
    ("pulsar.proto.CommandAckResponse", "request_id", 6, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.CommandSeek", "message_publish_time", 4, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.CommandGetLastMessageIdResponse", "consumer_mark_delete_position", 3, T.TYPE_MESSAGE, OPT, None),
    ("pulsar.proto.CommandNewTxn", "txn_ttl_seconds", 2, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.CommandNewTxn", "tc_id", 3, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.CommandNewTxnResponse", "error", 4, T.TYPE_ENUM, OPT, None),
    ("pulsar.proto.CommandAddPartitionToTxn", "partitions", 4, T.TYPE_STRING, REP, None),
    ("pulsar.proto.CommandAddSubscriptionToTxn", "subscription", 4, T.TYPE_MESSAGE, REP, None),
    ("pulsar.proto.CommandEndTxn", "txn_action", 4, T.TYPE_ENUM, OPT, None),
    ("pulsar.proto.CommandTcClientConnectRequest", "tc_id", 2, T.TYPE_UINT64, REQ, 0),
    ("pulsar.proto.MessageMetadata", "compression", 8, T.TYPE_ENUM, OPT, 0),
    ("pulsar.proto.MessageMetadata", "ordering_key", 18, T.TYPE_BYTES, OPT, None),
    ("pulsar.proto.MessageMetadata", "num_chunks_from_msg", 27, T.TYPE_INT32, OPT, None),
    ("pulsar.proto.SingleMessageMetadata", "payload_size", 3, T.TYPE_INT32, REQ, None),
    ("pulsar.proto.SingleMessageMetadata", "sequence_id", 8, T.TYPE_UINT64, OPT, None),
    # PulsarTransactionMetadata.proto
    ("pulsar.proto.TransactionMetadataEntry", "metadata_op", 1, T.TYPE_ENUM, OPT, None),
    ("pulsar.proto.TransactionMetadataEntry", "txnid_least_bits", 2, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.TransactionMetadataEntry", "txnid_most_bits", 3, T.TYPE_UINT64, OPT, 0),
    ("pulsar.proto.TransactionMetadataEntry", "expected_status", 4, T.TYPE_ENUM, OPT, None),
    ("pulsar.proto.TransactionMetadataEntry", "new_status", 5, T.TYPE_ENUM, OPT, None),
    ("pulsar.proto.TransactionMetadataEntry", "partitions", 6, T.TYPE_STRING, REP, None),
    ("pulsar.proto.TransactionMetadataEntry", "subscriptions", 7, T.TYPE_MESSAGE, REP, None),
    ("pulsar.proto.TransactionMetadataEntry", "timeout_ms", 8, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.TransactionMetadataEntry", "start_time", 9, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.TransactionMetadataEntry", "last_modification_time", 10, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.TransactionMetadataEntry", "max_local_txn_id", 11, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.TransactionMetadataEntry", "owner", 12, T.TYPE_STRING, OPT, None),
    ("pulsar.proto.BatchedTransactionMetadataEntry", "transaction_logs", 1, T.TYPE_MESSAGE, REP, None),
    # TransactionPendingAck.proto (Pulsar's package is pulsar.proto; see the file's comment)
    ("pulsar.proto.pendingack.PendingAckMetadata", "ledgerId", 1, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.pendingack.PendingAckMetadata", "entryId", 2, T.TYPE_UINT64, REQ, None),
    ("pulsar.proto.pendingack.PendingAckMetadata", "ack_set", 3, T.TYPE_INT64, REP, None),
    ("pulsar.proto.pendingack.PendingAckMetadata", "batch_size", 4, T.TYPE_INT32, OPT, None),
    ("pulsar.proto.pendingack.PendingAckMetadataEntry", "pending_ack_op", 1, T.TYPE_ENUM, OPT, None),
    ("pulsar.proto.pendingack.PendingAckMetadataEntry", "ack_type", 2, T.TYPE_ENUM, OPT, None),
    ("pulsar.proto.pendingack.PendingAckMetadataEntry", "txnid_least_bits", 3, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.pendingack.PendingAckMetadataEntry", "txnid_most_bits", 4, T.TYPE_UINT64, OPT, None),
    ("pulsar.proto.pendingack.PendingAckMetadataEntry", "pending_ack_metadata", 5, T.TYPE_MESSAGE, REP, None),
    ("pulsar.proto.pendingack.BatchedPendingAckMetadataEntry", "pending_ack_logs", 1, T.TYPE_MESSAGE, REP, None),
    # DelayedMessageIndexBucketMetadata.proto / DelayedMessageIndexBucketSegment.proto
    ("pulsar.delay.SnapshotSegmentMetadata", "delayed_index_bit_map", 1, T.TYPE_MESSAGE, REP, None),
    ("pulsar.delay.SnapshotSegmentMetadata", "max_schedule_timestamp", 2, T.TYPE_UINT64, REQ, None),
    ("pulsar.delay.SnapshotSegmentMetadata", "min_schedule_timestamp", 3, T.TYPE_UINT64, REQ, None),
    ("pulsar.delay.SnapshotMetadata", "metadata_list", 1, T.TYPE_MESSAGE, REP, None),
    ("pulsar.delay.DelayedIndex", "timestamp", 1, T.TYPE_UINT64, REQ, None),
    ("pulsar.delay.DelayedIndex", "ledger_id", 2, T.TYPE_UINT64, REQ, None),
    ("pulsar.delay.DelayedIndex", "entry_id", 3, T.TYPE_UINT64, REQ, None),
    ("pulsar.delay.SnapshotSegment", "indexes", 1, T.TYPE_MESSAGE, REP, None),
]

PULSAR_ENUMS: list[tuple[str, dict[str, int]]] = [
    ("pulsar.proto.TxnAction", {"COMMIT": 0, "ABORT": 1}),
    ("pulsar.proto.CommandAck.AckType", {"Individual": 0, "Cumulative": 1}),
    (
        "pulsar.proto.MarkerType",
        {
            "UNKNOWN_MARKER": 0,
            "REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST": 10,
            "REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE": 11,
            "REPLICATED_SUBSCRIPTION_SNAPSHOT": 12,
            "REPLICATED_SUBSCRIPTION_UPDATE": 13,
            "TXN_COMMITTING": 20,
            "TXN_COMMIT": 21,
            "TXN_ABORT": 22,
        },
    ),
    (
        "pulsar.proto.BaseCommand.Type",
        {
            **{"CONNECT": 2, "CONNECTED": 3, "SUBSCRIBE": 4, "PRODUCER": 5, "SEND": 6, "SEND_RECEIPT": 7},
            **{"SEND_ERROR": 8, "MESSAGE": 9, "ACK": 10, "FLOW": 11, "UNSUBSCRIBE": 12, "SUCCESS": 13},
            **{"ERROR": 14, "CLOSE_PRODUCER": 15, "CLOSE_CONSUMER": 16, "PRODUCER_SUCCESS": 17, "PING": 18},
            **{"PONG": 19, "REDELIVER_UNACKNOWLEDGED_MESSAGES": 20, "PARTITIONED_METADATA": 21},
            **{"PARTITIONED_METADATA_RESPONSE": 22, "LOOKUP": 23, "LOOKUP_RESPONSE": 24, "CONSUMER_STATS": 25},
            **{"CONSUMER_STATS_RESPONSE": 26, "REACHED_END_OF_TOPIC": 27, "SEEK": 28, "GET_LAST_MESSAGE_ID": 29},
            **{"GET_LAST_MESSAGE_ID_RESPONSE": 30, "ACTIVE_CONSUMER_CHANGE": 31, "GET_TOPICS_OF_NAMESPACE": 32},
            **{"GET_TOPICS_OF_NAMESPACE_RESPONSE": 33, "GET_SCHEMA": 34, "GET_SCHEMA_RESPONSE": 35},
            **{"AUTH_CHALLENGE": 36, "AUTH_RESPONSE": 37, "ACK_RESPONSE": 38, "GET_OR_CREATE_SCHEMA": 39},
            **{"GET_OR_CREATE_SCHEMA_RESPONSE": 40, "NEW_TXN": 50, "NEW_TXN_RESPONSE": 51},
            **{"ADD_PARTITION_TO_TXN": 52, "ADD_PARTITION_TO_TXN_RESPONSE": 53, "ADD_SUBSCRIPTION_TO_TXN": 54},
            **{"ADD_SUBSCRIPTION_TO_TXN_RESPONSE": 55, "END_TXN": 56, "END_TXN_RESPONSE": 57},
            **{"END_TXN_ON_PARTITION": 58, "END_TXN_ON_PARTITION_RESPONSE": 59, "END_TXN_ON_SUBSCRIPTION": 60},
            **{"END_TXN_ON_SUBSCRIPTION_RESPONSE": 61, "TC_CLIENT_CONNECT_REQUEST": 62},
            **{"TC_CLIENT_CONNECT_RESPONSE": 63, "TOPIC_MIGRATED": 68},
        },
    ),
    (
        "pulsar.proto.ServerError",
        {
            **{"UnknownError": 0, "MetadataError": 1, "PersistenceError": 2, "AuthenticationError": 3},
            **{"AuthorizationError": 4, "ConsumerBusy": 5, "ServiceNotReady": 6},
            **{"ProducerBlockedQuotaExceededError": 7, "ProducerBlockedQuotaExceededException": 8},
            **{"ChecksumError": 9, "UnsupportedVersionError": 10, "TopicNotFound": 11, "SubscriptionNotFound": 12},
            **{"ConsumerNotFound": 13, "TooManyRequests": 14, "TopicTerminatedError": 15, "ProducerBusy": 16},
            **{"InvalidTopicName": 17, "IncompatibleSchema": 18, "ConsumerAssignError": 19},
            **{"TransactionCoordinatorNotFound": 20, "InvalidTxnStatus": 21, "NotAllowedError": 22},
            **{"TransactionConflict": 23, "TransactionNotFound": 24, "ProducerFenced": 25},
        },
    ),
    ("pulsar.proto.CommandSubscribe.SubType", {"Exclusive": 0, "Shared": 1, "Failover": 2, "Key_Shared": 3}),
    ("pulsar.proto.CommandSubscribe.InitialPosition", {"Latest": 0, "Earliest": 1}),
    ("pulsar.proto.CommandLookupTopicResponse.LookupType", {"Redirect": 0, "Connect": 1, "Failed": 2}),
    ("pulsar.proto.CommandPartitionedTopicMetadataResponse.LookupType", {"Success": 0, "Failed": 1}),
    ("pulsar.proto.CompressionType", {"NONE": 0, "LZ4": 1, "ZLIB": 2, "ZSTD": 3, "SNAPPY": 4}),
    ("pulsar.proto.TxnStatus", {"OPEN": 0, "COMMITTING": 1, "COMMITTED": 2, "ABORTING": 3, "ABORTED": 4}),
    (
        "pulsar.proto.TransactionMetadataEntry.TransactionMetadataOp",
        {"NEW": 0, "ADD_PARTITION": 1, "ADD_SUBSCRIPTION": 2, "UPDATE": 3},
    ),
    ("pulsar.proto.pendingack.PendingAckOp", {"ACK": 1, "COMMIT": 2, "ABORT": 3}),
]

# Message types whose field list is Pulsar's complete list (the PulsarApi messages are subsets).
COMPLETE = {
    "pulsar.proto.TransactionMetadataEntry",
    "pulsar.proto.BatchedTransactionMetadataEntry",
    "pulsar.proto.pendingack.PendingAckMetadata",
    "pulsar.proto.pendingack.PendingAckMetadataEntry",
    "pulsar.proto.pendingack.BatchedPendingAckMetadataEntry",
    "pulsar.delay.SnapshotSegmentMetadata",
    "pulsar.delay.SnapshotMetadata",
    "pulsar.delay.DelayedIndex",
    "pulsar.delay.SnapshotSegment",
    "pulsar.proto.KeyValue",
    "pulsar.proto.Subscription",
    "pulsar.proto.MessageIdData",
}

_BY_NAME = {desc.full_name: desc for desc in MESSAGES}


def _label(field: FieldDescriptor) -> str:
    return REP if field.is_repeated else REQ if field.is_required else OPT


@pytest.mark.parametrize(("message", "name", "number", "typ", "label", "default"), PULSAR_FIELDS)
def test_field_is_declared_as_in_pulsar(
    message: str, name: str, number: int, typ: int, label: str, default: object
) -> None:
    field = _BY_NAME[message].fields_by_name[name]
    assert (field.number, field.type, _label(field)) == (number, typ, label)
    if default is not None:
        assert field.has_default_value and field.default_value == default
    elif typ != T.TYPE_MESSAGE and label == OPT:
        assert not field.has_default_value


def test_complete_messages_declare_nothing_else() -> None:
    for message in COMPLETE:
        declared = {name for m, name, *_ in PULSAR_FIELDS if m == message}
        assert set(_BY_NAME[message].fields_by_name) == declared, message


def test_map_field_is_uint64_to_bytes() -> None:
    entry = _BY_NAME["pulsar.delay.SnapshotSegmentMetadata"].fields_by_name["delayed_index_bit_map"].message_type
    assert entry.GetOptions().map_entry
    assert (entry.fields_by_name["key"].type, entry.fields_by_name["value"].type) == (T.TYPE_UINT64, T.TYPE_BYTES)


@pytest.mark.parametrize(("enum", "values"), PULSAR_ENUMS)
def test_enum_is_declared_as_in_pulsar(enum: str, values: dict[str, int]) -> None:
    for module in MODULES:
        pool = module.DESCRIPTOR.pool
        try:
            desc = pool.FindEnumTypeByName(enum)
        except KeyError:
            continue
        assert {v.name: v.number for v in desc.values} == values
        return
    pytest.fail(f"{enum} is not declared")


def test_record_types_reference_pulsar_api_types() -> None:
    entry = _BY_NAME["pulsar.proto.pendingack.PendingAckMetadataEntry"]
    assert entry.fields_by_name["ack_type"].enum_type.full_name == "pulsar.proto.CommandAck.AckType"
    tc = _BY_NAME["pulsar.proto.TransactionMetadataEntry"]
    assert tc.fields_by_name["subscriptions"].message_type.full_name == "pulsar.proto.Subscription"
    assert tc.fields_by_name["expected_status"].enum_type.full_name == "pulsar.proto.TxnStatus"


# ---------------------------------------------------------------------------------------------
# Hand-encoded bytes.  Tags are (number << 3) | wire type; varints little-endian base 128;
# negative int64/int32 values take ten bytes.

MINUS_ONE_VARINT = bytes([0xFF] * 9 + [0x01])
MINUS_TWO_VARINT = bytes([0xFE] + [0xFF] * 8 + [0x01])


def test_transaction_metadata_entry_known_bytes() -> None:
    tc = PulsarTransactionMetadata_pb2
    data = (
        b"\x08\x01"  # 1 metadata_op = ADD_PARTITION
        b"\x10\x07"  # 2 txnid_least_bits = 7
        b"\x18\x03"  # 3 txnid_most_bits = 3
        b"\x20\x00"  # 4 expected_status = OPEN
        b"\x28\x01"  # 5 new_status = COMMITTING
        b"\x32\x03p-0"  # 6 partitions += "p-0"
        b"\x3a\x06\x0a\x01t\x12\x01s"  # 7 subscriptions += {topic "t", subscription "s"}
        b"\x40\xe8\x07"  # 8 timeout_ms = 1000
        b"\x48\x0a"  # 9 start_time = 10
        b"\x50\x0b"  # 10 last_modification_time = 11
        b"\x58\x2a"  # 11 max_local_txn_id = 42
        b"\x62\x02tc"  # 12 owner = "tc"
    )
    expected = tc.TransactionMetadataEntry(
        metadata_op=tc.TransactionMetadataEntry.ADD_PARTITION,
        txnid_least_bits=7,
        txnid_most_bits=3,
        expected_status=tc.OPEN,
        new_status=tc.COMMITTING,
        partitions=["p-0"],
        subscriptions=[PulsarApi_pb2.Subscription(topic="t", subscription="s")],
        timeout_ms=1000,
        start_time=10,
        last_modification_time=11,
        max_local_txn_id=42,
        owner="tc",
    )
    assert tc.TransactionMetadataEntry.FromString(data) == expected
    assert expected.SerializeToString(deterministic=True) == data
    batch = tc.BatchedTransactionMetadataEntry(transaction_logs=[expected, expected])
    framed = b"\x0a" + bytes([len(data)]) + data
    assert batch.SerializeToString(deterministic=True) == framed * 2


def test_pending_ack_entry_known_bytes() -> None:
    pa = TransactionPendingAck_pb2
    inner = b"\x08\x0a" + b"\x10\x14" + b"\x18" + MINUS_TWO_VARINT + b"\x18\x01" + b"\x20\x40"
    data = (
        b"\x08\x01"  # 1 pending_ack_op = ACK
        b"\x10\x01"  # 2 ack_type = Cumulative
        b"\x18\x05"  # 3 txnid_least_bits = 5
        b"\x20\x02"  # 4 txnid_most_bits = 2
        + b"\x2a"
        + bytes([len(inner)])
        + inner  # 5 pending_ack_metadata += {10, 20, ack_set [-2, 1] (unpacked, proto2), batch_size 64}
    )
    expected = pa.PendingAckMetadataEntry(
        pending_ack_op=pa.ACK,
        ack_type=PulsarApi_pb2.CommandAck.Cumulative,
        txnid_least_bits=5,
        txnid_most_bits=2,
        pending_ack_metadata=[pa.PendingAckMetadata(ledgerId=10, entryId=20, ack_set=[-2, 1], batch_size=64)],
    )
    assert pa.PendingAckMetadataEntry.FromString(data) == expected
    assert expected.SerializeToString(deterministic=True) == data
    # A packed ack_set (what a writer may also produce) reads the same.
    packed_inner = b"\x08\x0a\x10\x14\x1a" + bytes([len(MINUS_TWO_VARINT) + 1]) + MINUS_TWO_VARINT + b"\x01\x20\x40"
    packed = data[:8] + b"\x2a" + bytes([len(packed_inner)]) + packed_inner
    assert pa.PendingAckMetadataEntry.FromString(packed) == expected
    check_message(packed, pa.PendingAckMetadataEntry.DESCRIPTOR)


def test_txn_marker_metadata_known_bytes() -> None:
    # What the transaction buffer writes for a commit marker: producer "pulsar.txn.marker",
    # sequence id -1 (as uint64), marker_type 21 (field 20), the txn id in fields 22/23.
    name = b"pulsar.txn.marker"
    data = (
        b"\x0a"
        + bytes([len(name)])
        + name
        + b"\x10"
        + MINUS_ONE_VARINT
        + b"\x18\x64"  # publish_time = 100
        + b"\xa0\x01\x15"  # 20 marker_type = 21 (TXN_COMMIT)
        + b"\xb0\x01\x09"  # 22 txnid_least_bits = 9
        + b"\xb8\x01\x04"  # 23 txnid_most_bits = 4
    )
    md = PulsarApi_pb2.MessageMetadata.FromString(data)
    assert md.producer_name == "pulsar.txn.marker"
    assert md.sequence_id == (1 << 64) - 1
    assert md.marker_type == PulsarMarkers_pb2.TXN_COMMIT == 21
    assert (md.txnid_most_bits, md.txnid_least_bits) == (4, 9)
    assert md.num_messages_in_batch == 1 and not md.HasField("num_messages_in_batch")
    assert md.SerializeToString(deterministic=True) == data


def test_delayed_bucket_records_known_bytes() -> None:
    meta_pb = DelayedMessageIndexBucketMetadata_pb2
    seg_pb = DelayedMessageIndexBucketSegment_pb2
    bitmap = b"\x3a\x30\x00\x00"  # opaque here; a RoaringBitmap's portable bytes in practice
    entry = b"\x08\x07\x12" + bytes([len(bitmap)]) + bitmap  # map entry {key 7, value bitmap}
    segment_meta = b"\x0a" + bytes([len(entry)]) + entry + b"\x10\xc8\x01" + b"\x18\x64"
    data = b"\x0a" + bytes([len(segment_meta)]) + segment_meta
    meta = meta_pb.SnapshotMetadata.FromString(data)
    assert len(meta.metadata_list) == 1
    only = meta.metadata_list[0]
    assert dict(only.delayed_index_bit_map) == {7: bitmap}
    assert (only.max_schedule_timestamp, only.min_schedule_timestamp) == (200, 100)
    assert meta.SerializeToString(deterministic=True) == data

    index = b"\x08\x64\x10\x05\x18\x06"  # timestamp 100, ledger 5, entry 6
    segment = seg_pb.SnapshotSegment.FromString(b"\x0a\x06" + index + b"\x0a\x06" + index)
    assert [(i.timestamp, i.ledger_id, i.entry_id) for i in segment.indexes] == [(100, 5, 6)] * 2


def test_message_id_defaults() -> None:
    msg = PulsarApi_pb2.MessageIdData.FromString(b"\x08\x01\x10\x02")
    assert (msg.ledgerId, msg.entryId, msg.partition, msg.batch_index) == (1, 2, -1, -1)
    assert not msg.HasField("partition")


# ---------------------------------------------------------------------------------------------
# Round trips of random valid messages, for every message type.

_SCALARS: dict[int, st.SearchStrategy[Any]] = {
    T.TYPE_UINT64: st.integers(0, (1 << 64) - 1),
    T.TYPE_INT64: st.integers(-(1 << 63), (1 << 63) - 1),
    T.TYPE_UINT32: st.integers(0, (1 << 32) - 1),
    T.TYPE_INT32: st.integers(-(1 << 31), (1 << 31) - 1),
    T.TYPE_BOOL: st.booleans(),
    T.TYPE_STRING: st.text(max_size=12),
    T.TYPE_BYTES: st.binary(max_size=12),
    T.TYPE_DOUBLE: st.floats(allow_nan=False),  # NaN != NaN would fail the identity, not the codec
}


def _value(field: FieldDescriptor, depth: int) -> st.SearchStrategy[Any]:
    if field.type == T.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    if field.type == T.TYPE_MESSAGE:
        return messages(field.message_type, depth + 1)
    return _SCALARS[field.type]


def messages(desc: Descriptor, depth: int = 0) -> st.SearchStrategy[Message]:
    """Random valid messages: every required field set, recursion cut off at depth 3."""
    cls = _message_class(desc)

    @st.composite
    def build(draw: st.DrawFn) -> Message:
        msg = cls()
        for field in desc.fields:
            if field.type == T.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
                key_field, value_field = field.message_type.fields
                entries = draw(st.dictionaries(_value(key_field, depth), _value(value_field, depth), max_size=3))
                getattr(msg, field.name).update(entries)
                continue
            if field.type == T.TYPE_MESSAGE and depth >= 3 and not field.is_required:
                continue
            if field.is_repeated:
                values = draw(st.lists(_value(field, depth), max_size=3))
                target = getattr(msg, field.name)
                if field.type == T.TYPE_MESSAGE:
                    for value in values:
                        target.add().CopyFrom(value)
                else:
                    target.extend(values)
            elif field.is_required or draw(st.booleans()):
                value = draw(_value(field, depth))
                if field.type == T.TYPE_MESSAGE:
                    getattr(msg, field.name).CopyFrom(value)
                else:
                    setattr(msg, field.name, value)
        return msg

    return build()


@pytest.mark.parametrize("desc", MESSAGES, ids=[d.full_name for d in MESSAGES])
def test_every_message_round_trips(desc: Descriptor) -> None:
    cls = _message_class(desc)

    @given(messages(desc))
    def check(msg: Message) -> None:
        data = msg.SerializeToString(deterministic=True)
        check_message(data, desc)  # the structural checker accepts whatever the runtime writes
        again = cls.FromString(data)
        assert again == msg
        assert again.SerializeToString(deterministic=True) == data
        assert not data or data[0] != 0x0E  # no record can look like the PIP-160 magic

    check()


def test_every_message_type_is_covered() -> None:
    names = {d.full_name for d in MESSAGES}
    assert {
        "pulsar.proto.TransactionMetadataEntry",
        "pulsar.proto.BatchedTransactionMetadataEntry",
        "pulsar.proto.pendingack.PendingAckMetadataEntry",
        "pulsar.proto.pendingack.BatchedPendingAckMetadataEntry",
        "pulsar.proto.MessageMetadata",
        "pulsar.delay.SnapshotMetadata",
        "pulsar.delay.SnapshotSegment",
        "pulsar.txnmodel.buffer.TransactionBufferSnapshot",
        "pulsar.txnmodel.buffer.TransactionBufferSnapshotSegment",
        "pulsar.txnmodel.buffer.TransactionBufferSnapshotIndexes",
    } <= names


# ---------------------------------------------------------------------------------------------
# The generated code is reproducible from the .proto files.


def test_regenerating_changes_nothing(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpc_tools (dev dependency grpcio-tools) is not installed: cannot run protoc")
    plugin = Path(sys.executable).parent / "protoc-gen-mypy"
    if shutil.which("protoc-gen-mypy") is None and not plugin.exists():
        pytest.skip("protoc-gen-mypy (dev dependency mypy-protobuf) is not installed")
    out = tmp_path / "pb"
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    committed = ROOT / "spec" / "pb"
    generated_names = sorted(p.name for p in out.iterdir())
    committed_names = sorted(p.name for p in committed.iterdir() if p.is_file())
    assert generated_names == committed_names
    _, mismatch, errors = filecmp.cmpfiles(committed, out, generated_names, shallow=False)
    assert not mismatch and not errors, f"regenerate with scripts/gen_protos.py: {mismatch or errors}"
