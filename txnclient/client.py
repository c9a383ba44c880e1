"""A small transactional Pulsar client that speaks the binary protocol itself.

The official Python client has no transaction API, so this one speaks the transaction commands
(TC_CLIENT_CONNECT, NEW_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN) and SEND and
ACK with a transaction id, over the same codec as the server (:mod:`spec.frame`).  Where it does
what the official client does, it has the official client's names and units (``receive(
timeout_millis=)``, ``subscribe(topic, subscription_name, consumer_type=, initial_position=,
receiver_queue_size=)``, ``send(content, partition_key=, deliver_at=, properties=)`` returning a
message id with ``ledger_id()`` and ``entry_id()``, ``operation_timeout_seconds``); one difference
stays: a ``receive`` that times out returns None instead of raising.

Like Pulsar's clients it asks for a topic's partitions (PARTITIONED_METADATA) and looks up each
partition's broker (LOOKUP, following redirects), keeping one connection per broker; the
transaction coordinator is found the same way (the owner of partition 0 of
``transaction_coordinator_assign``).  A transaction registers a partition before its first send
there and a subscription before its first ack on it, and is a context manager: committed when the
block ends, aborted when it raises.  It is synchronous and single-threaded: a request blocks until
its answer arrives or the operation timeout passes (:class:`WireTimeout`, naming the command and
what its silence means).

::

    with WireClient("pulsar://127.0.0.1:6650") as client:
        producer = client.create_producer("out")
        consumer = client.subscribe("in", "sub", consumer_type="Shared", initial_position="Earliest")
        with client.new_transaction(timeout_ms=10_000) as txn:
            message = consumer.receive(timeout_millis=5000)
            producer.send(b"result", txn=txn)
            consumer.acknowledge(message, txn=txn)

It knows nothing of the engine: any broker that speaks the protocol will do.
"""

from __future__ import annotations

import collections
import itertools
import select
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

from spec.compression import compress
from spec.frame import Frame, decode_message_batch, encode_message, message_payload
from spec.pb import PulsarApi_pb2 as api
from spec.types import TxnID
from txnclient.connection import CLIENT_VERSION, Connection, WireError, WireTimeout

__all__ = [
    "CLIENT_VERSION",
    "WireClient",
    "WireConsumer",
    "WireError",
    "WireMessage",
    "WireMessageId",
    "WireProducer",
    "WireTimeout",
    "WireTransaction",
]

T = api.BaseCommand
TC_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
_MAX_REDIRECTS = 10


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _name(value: Any) -> str:
    """An enum spelled as a string, or the official client's enum (its ``name``)."""
    return value if isinstance(value, str) else str(value.name)


@dataclass(frozen=True)
class WireMessageId:
    """A message id, with the official client's accessors."""

    ledger: int
    entry: int
    partition_index: int = -1
    batch: int = -1

    def ledger_id(self) -> int:
        return self.ledger

    def entry_id(self) -> int:
        return self.entry

    def partition(self) -> int:
        return self.partition_index

    def batch_index(self) -> int:
        return self.batch


@dataclass(frozen=True)
class WireMessage:
    """A received message, with the official client's accessors; ``payload`` and ``metadata`` raw."""

    consumer_id: int
    id: WireMessageId
    metadata: Any
    payload: bytes
    redeliveries: int
    topic: str
    single: Any = None  # a batch's message: its SingleMessageMetadata (its key and properties)

    def data(self) -> bytes:
        return self.payload

    def message_id(self) -> WireMessageId:
        return self.id

    def redelivery_count(self) -> int:
        return self.redeliveries

    def partition_key(self) -> str:
        return str((self.single or self.metadata).partition_key)

    def properties(self) -> dict[str, str]:
        return {p.key: p.value for p in (self.single or self.metadata).properties}

    def publish_timestamp(self) -> int:
        return int(self.metadata.publish_time)

    def topic_name(self) -> str:
        return self.topic


class WireClient:
    """A client of one Pulsar service URL: one connection per broker it is sent to."""

    def __init__(
        self, service_url: str, *, operation_timeout_seconds: float = 30, connection_timeout_ms: int = 10_000
    ) -> None:
        self.service_url = service_url
        self.operation_timeout_seconds = operation_timeout_seconds
        self.connection_timeout_ms = connection_timeout_ms
        self.ids: itertools.count[int] = itertools.count()
        self.connections: dict[str, Connection] = {}
        self.primary = self._connection(service_url)
        self.server_version = self.primary.server_version
        self._tc: Connection | None = None

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()

    @property
    def closed_by_broker(self) -> bool:
        """Whether a broker closed one of the connections (every later request on it times out)."""
        return any(c.closed_by_broker for c in self.connections.values())

    def _connection(self, url: str) -> Connection:
        known = self.connections.get(url)
        if known is None or known.closed_by_broker:
            known = self.connections[url] = Connection(
                url,
                operation_timeout_s=self.operation_timeout_seconds,
                connection_timeout_s=self.connection_timeout_ms / 1000,
                ids=self.ids,
            )
        return known

    def ping(self) -> None:
        """A PING/PONG round trip on the service URL's connection: the broker has handled every frame
        sent on it before (FLOW, an ACK without a receipt, REDELIVER_UNACKNOWLEDGED_MESSAGES)."""
        self.primary.send(T(type=T.PING, ping=api.CommandPing()))
        frame = self.primary.wait(lambda f: f.command.type == T.PONG, what=T.PING)
        self.primary.take_pending(frame)

    # -- lookups ---------------------------------------------------------------------------------

    def get_partitions(self, topic: str) -> int:
        """The topic's partition count (PARTITIONED_METADATA); 0 for a non-partitioned topic."""
        request = api.CommandPartitionedTopicMetadata(topic=topic, request_id=next(self.ids))
        request.metadata_auto_creation_enabled = True
        body = self.primary.request(
            T(type=T.PARTITIONED_METADATA, partitionMetadata=request), T.PARTITIONED_METADATA_RESPONSE
        )
        return int(body.partitions)

    def lookup(self, topic: str) -> Connection:
        """The connection to the broker that owns ``topic`` (LOOKUP, redirects followed)."""
        connection, authoritative = self.primary, False
        for _ in range(_MAX_REDIRECTS):
            request = api.CommandLookupTopic(topic=topic, request_id=next(self.ids), authoritative=authoritative)
            body = connection.request(T(type=T.LOOKUP, lookupTopic=request), T.LOOKUP_RESPONSE)
            if body.response == api.CommandLookupTopicResponse.Failed:
                raise WireError(body.error, body.message)
            url = body.brokerServiceUrl
            if body.response == api.CommandLookupTopicResponse.Connect:
                return self.primary if body.proxy_through_service_url or not url else self._connection(url)
            connection, authoritative = self._connection(url), body.authoritative  # a redirect
        raise WireError(api.ServiceNotReady, f"more than {_MAX_REDIRECTS} lookup redirects for {topic}")

    # -- transactions ------------------------------------------------------------------------------

    def tc_connect(self) -> Connection:
        """The transaction coordinator's connection (TC_CLIENT_CONNECT once, on its owner)."""
        if self._tc is None or self._tc.closed_by_broker:
            connection = self.lookup(f"{TC_ASSIGN_TOPIC}-partition-0")
            request = api.CommandTcClientConnectRequest(request_id=next(self.ids), tc_id=0)
            connection.request(
                T(type=T.TC_CLIENT_CONNECT_REQUEST, tcClientConnectRequest=request), T.TC_CLIENT_CONNECT_RESPONSE
            )
            self._tc = connection
        return self._tc

    def new_transaction(self, timeout_ms: int = 60_000) -> WireTransaction:
        """Open a transaction that the coordinator aborts after ``timeout_ms``."""
        connection = self.tc_connect()
        request = api.CommandNewTxn(request_id=next(self.ids), txn_ttl_seconds=timeout_ms, tc_id=0)
        body = connection.request(T(type=T.NEW_TXN, newTxn=request), T.NEW_TXN_RESPONSE)
        return WireTransaction(self, TxnID(body.txnid_most_bits, body.txnid_least_bits))

    def add_partitions(self, txn: TxnID, partitions: list[str]) -> None:
        request = api.CommandAddPartitionToTxn(
            request_id=next(self.ids),
            txnid_most_bits=txn.most_sig_bits,
            txnid_least_bits=txn.least_sig_bits,
            partitions=partitions,
        )
        self.tc_connect().request(
            T(type=T.ADD_PARTITION_TO_TXN, addPartitionToTxn=request), T.ADD_PARTITION_TO_TXN_RESPONSE
        )

    def add_subscription(self, txn: TxnID, topic: str, subscription: str) -> None:
        request = api.CommandAddSubscriptionToTxn(
            request_id=next(self.ids),
            txnid_most_bits=txn.most_sig_bits,
            txnid_least_bits=txn.least_sig_bits,
            subscription=[api.Subscription(topic=topic, subscription=subscription)],
        )
        self.tc_connect().request(
            T(type=T.ADD_SUBSCRIPTION_TO_TXN, addSubscriptionToTxn=request), T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE
        )

    def end_transaction(self, txn: TxnID, *, commit: bool) -> None:
        request = api.CommandEndTxn(
            request_id=next(self.ids),
            txnid_most_bits=txn.most_sig_bits,
            txnid_least_bits=txn.least_sig_bits,
            txn_action=api.COMMIT if commit else api.ABORT,
        )
        self.tc_connect().request(T(type=T.END_TXN, endTxn=request), T.END_TXN_RESPONSE)

    # -- producers and consumers ---------------------------------------------------------------------

    def create_producer(
        self, topic: str, producer_name: str | None = None, compression_type: Any = api.NONE
    ) -> WireProducer:
        """A producer of ``topic``, of each of its partitions if it is partitioned (keyless messages
        go round robin, keyed ones to a partition by a stable hash of the key).  ``compression_type``:
        a ``CompressionType`` value (or the official client's enum), applied to each message."""
        codec = int(compression_type if isinstance(compression_type, int) else compression_type.value)
        count = self.get_partitions(topic)
        names = [f"{topic}-partition-{i}" for i in range(count)] if count else [topic]
        parts = [self._producer(name, producer_name, index if count else -1) for index, name in enumerate(names)]
        return WireProducer(topic, parts, codec)

    def _producer(self, topic: str, name: str | None, partition: int) -> _PartitionProducer:
        connection = self.lookup(topic)
        producer_id = next(self.ids)
        request = api.CommandProducer(topic=topic, producer_id=producer_id, request_id=next(self.ids))
        if name is not None:
            request.producer_name = name
        body = connection.request(T(type=T.PRODUCER, producer=request), T.PRODUCER_SUCCESS)
        return _PartitionProducer(self, connection, topic, producer_id, body.producer_name, partition)

    def subscribe(
        self,
        topic: str,
        subscription_name: str,
        consumer_type: Any = "Exclusive",
        initial_position: Any = "Latest",
        receiver_queue_size: int = 1000,
    ) -> WireConsumer:
        """A consumer of ``topic`` (of each of its partitions if it is partitioned), with the
        official client's defaults: Exclusive, from the latest message, 1000 permits."""
        count = self.get_partitions(topic)
        names = [f"{topic}-partition-{i}" for i in range(count)] if count else [topic]
        kind = _name(consumer_type)
        sub_type = api.CommandSubscribe.SubType.Value("Key_Shared" if kind == "KeyShared" else kind)
        start = api.CommandSubscribe.InitialPosition.Value(_name(initial_position))
        parts = []
        for index, name in enumerate(names):
            connection = self.lookup(name)
            consumer_id = next(self.ids)
            request = api.CommandSubscribe(
                topic=name,
                subscription=subscription_name,
                subType=sub_type,
                consumer_id=consumer_id,
                request_id=next(self.ids),
                initialPosition=start,
            )
            connection.request(T(type=T.SUBSCRIBE, subscribe=request), T.SUCCESS)
            connection.queues.setdefault(consumer_id, collections.deque())
            part = _PartitionConsumer(connection, name, consumer_id, index if count else -1)
            part.flow(receiver_queue_size)
            parts.append(part)
        return WireConsumer(self, topic, subscription_name, parts)


@dataclass
class WireTransaction:
    """An open transaction: it registers partitions and subscriptions on first use.  As a context
    manager it commits when the block ends and aborts when the block raises (unless it was ended
    inside the block)."""

    client: WireClient
    txn_id: TxnID
    partitions: set[str] = field(default_factory=set)
    subscriptions: set[tuple[str, str]] = field(default_factory=set)
    ended: bool = False

    def __enter__(self) -> WireTransaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, _tb: object) -> None:
        if self.ended:
            return
        if kind is None:
            self.commit()
            return
        try:
            self.abort()
        except (WireError, WireTimeout) as exc:
            # The block's own error is the one raised; the failed abort is noted on it.
            if error is not None:
                error.add_note(f"the abort of transaction {self.txn_id} failed too: {exc}")

    def use_partition(self, topic: str) -> None:
        if topic not in self.partitions:
            self.client.add_partitions(self.txn_id, [topic])
            self.partitions.add(topic)

    def use_subscription(self, topic: str, subscription: str) -> None:
        if (topic, subscription) not in self.subscriptions:
            self.client.add_subscription(self.txn_id, topic, subscription)
            self.subscriptions.add((topic, subscription))

    def commit(self) -> None:
        self.ended = True
        self.client.end_transaction(self.txn_id, commit=True)

    def abort(self) -> None:
        self.ended = True
        self.client.end_transaction(self.txn_id, commit=False)


@dataclass
class _PartitionProducer:
    client: WireClient
    connection: Connection
    topic: str
    producer_id: int
    name: str
    partition: int
    sequence: itertools.count[int] = field(default_factory=itertools.count)

    def send(self, metadata: Any, payload: bytes, txn: WireTransaction | None) -> WireMessageId:
        if txn is not None:
            txn.use_partition(self.topic)
        sequence_id = next(self.sequence)
        metadata.producer_name, metadata.sequence_id = self.name, sequence_id
        command = api.CommandSend(producer_id=self.producer_id, sequence_id=sequence_id)
        if txn is not None:
            command.txnid_most_bits, command.txnid_least_bits = txn.txn_id.most_sig_bits, txn.txn_id.least_sig_bits
            metadata.txnid_most_bits, metadata.txnid_least_bits = command.txnid_most_bits, command.txnid_least_bits
        self.connection.send(T(type=T.SEND, send=command), encode_message(metadata, payload))

        def match(frame: Frame) -> bool:
            cmd = frame.command
            body = cmd.send_receipt if cmd.type == T.SEND_RECEIPT else cmd.send_error
            ours = cmd.type in (T.SEND_RECEIPT, T.SEND_ERROR)
            return bool(ours and body.producer_id == self.producer_id and body.sequence_id == sequence_id)

        frame = self.connection.wait(match, what=T.SEND)
        self.connection.take_pending(frame)
        if frame.command.type == T.SEND_ERROR:
            raise WireError(frame.command.send_error.error, frame.command.send_error.message)
        mid = frame.command.send_receipt.message_id
        return WireMessageId(_signed(mid.ledgerId), _signed(mid.entryId), self.partition)


@dataclass
class WireProducer:
    """A producer of a topic (each partition's, for a partitioned one)."""

    topic: str
    parts: list[_PartitionProducer]
    compression: int = api.NONE
    _next: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def name(self) -> str:
        return self.parts[0].name

    def producer_name(self) -> str:
        return self.name

    def send(
        self,
        content: bytes,
        properties: dict[str, str] | None = None,
        partition_key: str | None = None,
        event_timestamp: int | None = None,
        deliver_at: int | None = None,
        *,
        txn: WireTransaction | None = None,
    ) -> WireMessageId:
        """Send one message and wait for its receipt; its id.  ``deliver_at``: Unix milliseconds."""
        metadata = api.MessageMetadata(producer_name="", sequence_id=0, publish_time=int(time.time() * 1000))
        if partition_key is not None:
            metadata.partition_key = partition_key
        if deliver_at is not None:
            metadata.deliver_at_time = deliver_at
        if event_timestamp is not None:
            metadata.event_time = event_timestamp
        for k, v in (properties or {}).items():
            metadata.properties.add(key=k, value=v)
        payload = content
        if self.compression != api.NONE:
            metadata.compression = self.compression  # type: ignore[assignment]
            metadata.uncompressed_size = len(content)
            payload = compress(self.compression, content)
        if partition_key is not None:
            part = self.parts[zlib.crc32(partition_key.encode()) % len(self.parts)]
        else:
            part = self.parts[next(self._next) % len(self.parts)]
        return part.send(metadata, payload, txn)


@dataclass
class _PartitionConsumer:
    connection: Connection
    topic: str
    consumer_id: int
    partition: int

    def flow(self, permits: int) -> None:
        self.connection.send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=self.consumer_id, messagePermits=permits)))

    @property
    def queue(self) -> collections.deque[Frame]:
        return self.connection.queues.setdefault(self.consumer_id, collections.deque())

    @property
    def closed(self) -> bool:
        """Whether the broker sent this consumer away (CLOSE_CONSUMER) or closed its connection."""
        return self.connection.closed_by_broker or self.consumer_id in self.connection.closed_consumers


@dataclass
class WireConsumer:
    """A consumer of a topic (of each partition, for a partitioned one)."""

    client: WireClient
    topic: str
    subscription: str
    parts: list[_PartitionConsumer]
    ready: collections.deque[tuple[_PartitionConsumer, WireMessage]] = field(default_factory=collections.deque)

    def receive(self, timeout_millis: int | None = None) -> WireMessage | None:
        """The next message; None when none arrives in ``timeout_millis`` (None: wait for one)."""
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        # What has arrived first, a CLOSE_CONSUMER among it: a copy already queued here must not be
        # handed out once the broker has taken it back.
        for part in self.parts:
            while not part.connection.closed_by_broker and part.connection.poll(read=True):
                pass  # all the socket holds: the CLOSE_CONSUMER may follow many messages
        self._unpack()
        while not self.ready:
            for part in self.parts:
                part.connection.poll(read=False)  # frames read while waiting for another answer
            self._unpack()
            if self.ready:
                break
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if all(part.closed for part in self.parts):
                return None
            socks = [part.connection.sock for part in self.parts if not part.connection.closed_by_broker]
            readable, _, _ = select.select(socks, [], [], 1.0 if left is None else min(left, 1.0))
            for part in self.parts:
                if part.connection.sock in readable:
                    part.connection.poll(read=True)
        part, message = self.ready.popleft()
        # One permit back per message taken, as the official client's receiver queue does in bulk.
        part.flow(1)
        return message

    @property
    def closed_by_broker(self) -> bool:
        """Whether the broker sent away one of this consumer's partition consumers: it must subscribe
        again (a Pulsar client reconnects it), and nothing more arrives for it meanwhile."""
        return any(part.closed for part in self.parts)

    def _unpack(self) -> None:
        """Split the MESSAGE frames that arrived into messages (a batch's, decompressed, by its
        ``ack_set``: only the indexes still to deliver); the messages of a partition consumer the
        broker sent away are dropped, unpacked or not (CLOSE_CONSUMER: they went back to the
        subscription, and another consumer may acknowledge them)."""
        if any(part.consumer_id in part.connection.closed_consumers for part in self.parts):
            self.ready = collections.deque(
                (part, message)
                for part, message in self.ready
                if part.consumer_id not in part.connection.closed_consumers
            )
        for part in self.parts:
            while part.queue:
                frame = part.queue.popleft()
                for message in _messages(frame, part.topic, part.partition):
                    self.ready.append((part, message))

    def _part(self, message: WireMessage) -> _PartitionConsumer:
        for part in self.parts:
            if part.consumer_id == message.consumer_id:
                return part
        raise ValueError(f"message {message.id} is not of this consumer")

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask for every unacknowledged message again (REDELIVER_UNACKNOWLEDGED_MESSAGES; never
        answered).  Messages already received here are dropped, as the broker sends them again."""
        self._unpack()
        self.ready.clear()
        for part in self.parts:
            command = api.CommandRedeliverUnacknowledgedMessages(consumer_id=part.consumer_id)
            part.connection.send(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=command))

    def flow(self, permits: int) -> None:
        """Grant the broker ``permits`` more messages on each partition (FLOW; never answered)."""
        for part in self.parts:
            part.flow(permits)

    def acknowledge(self, message: WireMessage, *, txn: WireTransaction | None = None, receipt: bool = True) -> None:
        """Acknowledge ``message``'s entry and wait for the broker's ACK_RESPONSE (errors raise);
        with ``receipt=False`` the ACK carries no request id and nothing is awaited, as the
        official clients' default acks."""
        self._ack(message, txn, cumulative=False, receipt=receipt)

    def acknowledge_cumulative(
        self, message: WireMessage, *, txn: WireTransaction | None = None, receipt: bool = True
    ) -> None:
        """Acknowledge every message up to ``message``'s entry (on its partition)."""
        self._ack(message, txn, cumulative=True, receipt=receipt)

    def _ack(self, message: WireMessage, txn: WireTransaction | None, *, cumulative: bool, receipt: bool) -> None:
        part = self._part(message)
        if txn is not None:
            txn.use_subscription(part.topic, self.subscription)
        mid = api.MessageIdData(
            ledgerId=message.id.ledger & ((1 << 64) - 1), entryId=message.id.entry & ((1 << 64) - 1)
        )
        ack = api.CommandAck(
            consumer_id=part.consumer_id,
            ack_type=api.CommandAck.Cumulative if cumulative else api.CommandAck.Individual,
            message_id=[mid],
        )
        if txn is not None:
            ack.txnid_most_bits, ack.txnid_least_bits = txn.txn_id.most_sig_bits, txn.txn_id.least_sig_bits
        if receipt:
            ack.request_id = next(self.client.ids)
            part.connection.request(T(type=T.ACK, ack=ack), T.ACK_RESPONSE)
        else:
            part.connection.send(T(type=T.ACK, ack=ack))


def _messages(frame: Frame, topic: str, partition: int) -> list[WireMessage]:
    cmd = frame.command.message
    message = frame.message
    assert message is not None
    mid = cmd.message_id
    ledger, entry = _signed(mid.ledgerId), _signed(mid.entryId)
    if not message.is_batch:
        single = WireMessageId(ledger, entry, partition)
        payload = message_payload(message)
        return [WireMessage(cmd.consumer_id, single, message.metadata, payload, cmd.redelivery_count, topic)]
    words = list(cmd.ack_set)
    out = []
    for index, one in enumerate(decode_message_batch(message)):
        if words and not (index // 64 < len(words) and (words[index // 64] >> (index % 64)) & 1):
            continue
        out.append(
            WireMessage(
                cmd.consumer_id,
                WireMessageId(ledger, entry, partition, index),
                message.metadata,
                one.payload,
                cmd.redelivery_count,
                topic,
                one.metadata,
            )
        )
    return out
