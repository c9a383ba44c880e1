"""The simulated broker: Pulsar's transaction machinery built from the reference machines.

Every decision is a ``step`` of a pure machine; this package carries out what the step returns.
One module per responsibility:

* :mod:`.component` -- the lifecycle every component shares: step the machine, then record the
  step; epochs that void a crashed component's callbacks; reload from durable state when a write
  fails; the futures helpers and :class:`BrokerError`.
* :mod:`.coordinator` -- :class:`CoordinatorService`, :mod:`reference.coordinator` over its
  transaction log (:class:`~engine.storage.record_log.RecordLog`, PIP-160 batching on or off).
  It writes and deletes log records, sends END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION with the
  low watermark to the participants (through the :class:`~.coordinator.Participants` interface)
  and feeds their answers back, re-runs ends the machine schedules, and ticks the timeout tracker
  every ``TIMEOUT_TRACKER_TICK_MS``.
* :mod:`.partition` -- :class:`Partition`, one topic partition: its managed ledger and
  :mod:`reference.buffer`.  The buffer assigns every entry's position; the engine writes the entry
  and checks the ledger agrees.  Consumed ledgers go when the buffer agrees (TB-23).
* :mod:`.subscription` -- :class:`SubscriptionService`: a durable cursor on the partition and
  :mod:`reference.pending_ack` (the pending-ack handle), with its parts beside it:
  :mod:`.pending_ack_log` (the pending-ack log), :mod:`.dispatcher` (the consumers and what is
  handed to them, batch entries per index; :mod:`.redelivery`, the redelivery counts),
  :mod:`.delayed_delivery` (for Shared and Key_Shared subscriptions, the delayed-delivery service,
  :mod:`engine.delayed.service` over :mod:`reference.delayed`), :mod:`.acks` (the pending ack's view
  of the cursor and the cursor writes it asks for) and :mod:`.seek` (where a seek restarts).
* :mod:`.key_shared` -- Key_Shared routing: Murmur3, hash ranges, the selector.
* :mod:`.snapshot_topics` -- snapshot records as keyed Avro messages on the namespace's system
  topics, read back on load.
* :mod:`.entries` -- a partition's entries in and out of the topic-entry codec
  (:mod:`spec.topic_entry`).
* :mod:`.broker` -- :class:`Broker`: start, crash, restart, the requests clients send, and the
  coordinator's transaction-buffer client.

Every machine step and every load is reported to ``Broker.observer`` when one is set (the
machine-level history the bulk checker replays against the reference machines).

Failure policy.  A machine's new state is adopted as soon as it steps (Pulsar's in-memory
structures move before the write completes, too).  When a write the step asked for fails, the
component is *reloaded from its durable state* -- exactly what a broker does when it fences or
unloads a topic or a coordinator whose ledger failed -- and the request fails with the ledger's
error.  A broker crash loses all memory; :meth:`Broker.restart` reloads every component from the
ledgers.  Requests that reach a component that is down are never answered (the client times out).
"""

from __future__ import annotations

from engine.broker.broker import Broker, BrokerFaults, TransactionBufferClient, partition_name
from engine.broker.component import BrokerError, ComponentFailure, read_all
from engine.broker.coordinator import MAX_LOCAL_TXN_ID, CoordinatorService, Participants
from engine.broker.dispatcher import ConsumerSlot, Delivered, Handout
from engine.broker.entries import (
    MARKER_ABORT,
    MARKER_COMMIT,
    BatchedMessage,
    MessageBody,
    StoredMessage,
    decode_batch_payload,
    decode_stored_message,
    encode_batch_payload,
    encode_entry,
)
from engine.broker.key_shared import NONE_KEY, STICKY_KEY_HASH_RANGE, murmur3_32, sticky_key_hash
from engine.broker.partition import Partition
from engine.broker.snapshot_topics import (
    INDEXES_TOPIC,
    SEGMENTS_TOPIC,
    SNAPSHOT_TOPIC,
    decode_keyed_message,
    encode_keyed_message,
    latest_by_key,
    namespace_topic,
    segment_key,
    snapshot_messages,
    snapshot_records,
)
from engine.broker.subscription import SubscriptionService

__all__ = [
    "INDEXES_TOPIC",
    "MARKER_ABORT",
    "MARKER_COMMIT",
    "MAX_LOCAL_TXN_ID",
    "NONE_KEY",
    "SEGMENTS_TOPIC",
    "SNAPSHOT_TOPIC",
    "STICKY_KEY_HASH_RANGE",
    "BatchedMessage",
    "Broker",
    "BrokerError",
    "BrokerFaults",
    "ComponentFailure",
    "ConsumerSlot",
    "CoordinatorService",
    "Delivered",
    "Handout",
    "MessageBody",
    "Participants",
    "Partition",
    "StoredMessage",
    "SubscriptionService",
    "TransactionBufferClient",
    "decode_batch_payload",
    "decode_keyed_message",
    "decode_stored_message",
    "encode_batch_payload",
    "encode_entry",
    "encode_keyed_message",
    "latest_by_key",
    "murmur3_32",
    "namespace_topic",
    "partition_name",
    "read_all",
    "segment_key",
    "snapshot_messages",
    "snapshot_records",
    "sticky_key_hash",
]
