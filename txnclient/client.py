"""A small transactional Pulsar client that speaks the binary protocol itself.

The official Python client has no transaction API, so this one speaks the transaction commands
(TC_CLIENT_CONNECT, NEW_TXN, ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN, END_TXN) and SEND and
ACK with a transaction id, over the same codec as the server (:mod:`spec.frame`).  It is
synchronous and single-threaded: a request blocks until its answer arrives (or ``timeout_s``
passes: :class:`WireTimeout`, the outcome is unknown); MESSAGE frames that arrive meanwhile are
queued for their consumer.  Like Pulsar's client, a transaction registers a partition before its
first send there and a subscription before its first ack on it.

::

    with WireClient("pulsar://127.0.0.1:6650") as client:
        producer = client.create_producer("out")
        consumer = client.subscribe("in", "sub")
        txn = client.new_transaction(timeout_ms=10_000)
        message = consumer.receive()
        producer.send(b"result", txn=txn)
        consumer.acknowledge(message, txn=txn)
        txn.commit()

It knows nothing of the engine: any broker that speaks the protocol will do.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spec.errors import InputError, ServerError
from spec.frame import Frame, encode_command, encode_frame, encode_message, parse_frame
from spec.pb import PulsarApi_pb2 as api
from spec.types import TxnID

__all__ = [
    "WireClient",
    "WireConsumer",
    "WireError",
    "WireMessage",
    "WireProducer",
    "WireTimeout",
    "WireTransaction",
]

T = api.BaseCommand
CLIENT_VERSION = "txnmodel-wire-client-0.1"
PROTOCOL_VERSION = 19  # TC_CLIENT_CONNECT exists from v19


class WireError(Exception):
    """The broker refused a request with a ``ServerError`` code."""

    def __init__(self, code: int, message: str) -> None:
        self.code = ServerError(code) if code in ServerError._value2member_map_ else code
        name = self.code.name if isinstance(self.code, ServerError) else str(code)
        super().__init__(f"{name}: {message}")
        self.message = message


class WireTimeout(Exception):
    """No answer in time: the request may or may not have taken effect."""


@dataclass(frozen=True)
class WireMessage:
    """A received message: its id (ledger, entry, batch index or None), metadata and payload."""

    consumer_id: int
    ledger_id: int
    entry_id: int
    batch_index: int | None
    metadata: Any
    payload: bytes
    redelivery_count: int

    def data(self) -> bytes:
        return self.payload


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class WireClient:
    """One connection to one broker (the one the URL names: lookups are not followed)."""

    def __init__(self, url: str, *, timeout_s: float = 5.0) -> None:
        if not url.startswith("pulsar://"):
            raise ValueError(f"expected pulsar://HOST:PORT, got {url!r}")
        host, _, port = url[len("pulsar://") :].rstrip("/").rpartition(":")
        self.timeout_s = timeout_s
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buffer = bytearray()
        self._ids = itertools.count()
        self._queues: dict[int, collections.deque[WireMessage]] = {}
        self._pending: list[Frame] = []
        self._tc_connected = False
        self.closed_by_broker = False  # the broker closed the connection: every later request times out
        self.server_version = ""
        self._send(
            T(
                type=T.CONNECT,
                connect=api.CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION),
            )
        )
        connected = self._wait(lambda f: f.command.type in (T.CONNECTED, T.ERROR))
        if connected.command.type == T.ERROR:
            raise WireError(connected.command.error.error, connected.command.error.message)
        self.server_version = connected.command.connected.server_version

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    # -- frames ----------------------------------------------------------------------------------

    def _send(self, command: Any, message: bytes | None = None) -> None:
        data = encode_command(command) if message is None else encode_frame(command, message)
        self.sock.sendall(data)

    def _read_frame(self, deadline: float) -> Frame:
        while True:
            try:
                parsed = parse_frame(self._buffer)
            except InputError as exc:
                raise WireError(ServerError.UnknownError, f"the broker sent a bad frame: {exc}") from None
            if parsed is not None:
                frame, used = parsed
                del self._buffer[:used]
                return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireTimeout("no answer in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                raise WireTimeout("no answer in time") from None
            if not chunk:
                self.closed_by_broker = True
                raise WireTimeout("the broker closed the connection")
            self._buffer += chunk

    def _wait(self, match: Callable[[Frame], bool], timeout_s: float | None = None) -> Frame:
        """Read frames until one matches; messages and pings are handled on the way."""
        for i, frame in enumerate(self._pending):
            if match(frame):
                return self._pending.pop(i)
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        while True:
            frame = self._read_frame(deadline)
            kind = frame.command.type
            if kind == T.PING:
                self._send(T(type=T.PONG, pong=api.CommandPong()))
                continue
            if kind == T.MESSAGE:
                self._queue_message(frame)
                if match(frame):
                    return frame
                continue
            if match(frame):
                return frame
            self._pending.append(frame)

    def _queue_message(self, frame: Frame) -> None:
        from spec.frame import decode_batch

        cmd = frame.command.message
        message = frame.message
        assert message is not None
        queue = self._queues.setdefault(cmd.consumer_id, collections.deque())
        mid = cmd.message_id
        ledger, entry = _signed(mid.ledgerId), _signed(mid.entryId)
        if not message.is_batch:
            queue.append(
                WireMessage(
                    cmd.consumer_id, ledger, entry, None, message.metadata, message.payload, cmd.redelivery_count
                )
            )
            return
        singles = decode_batch(message.payload, message.metadata.num_messages_in_batch)
        words = list(cmd.ack_set)
        for index, single in enumerate(singles):
            if words and not (index // 64 < len(words) and (words[index // 64] >> (index % 64)) & 1):
                continue
            queue.append(
                WireMessage(
                    cmd.consumer_id, ledger, entry, index, message.metadata, single.payload, cmd.redelivery_count
                )
            )

    def _request(self, command: Any, response_type: int, field_name: str, *, message: bytes | None = None) -> Any:
        request_id = getattr(command, field_name).request_id
        self._send(command, message)

        def match(frame: Frame) -> bool:
            cmd = frame.command
            if cmd.type == T.ERROR and cmd.error.request_id == request_id:
                return True
            return bool(cmd.type == response_type and _response_field(cmd).request_id == request_id)

        frame = self._wait(match)
        cmd = frame.command
        if cmd.type == T.ERROR:
            raise WireError(cmd.error.error, cmd.error.message)
        body = _response_field(cmd)
        if "error" in body.DESCRIPTOR.fields_by_name and body.HasField("error"):
            raise WireError(body.error, body.message)
        if "error_code" in body.DESCRIPTOR.fields_by_name and body.HasField("error_code"):
            raise WireError(body.error_code, body.error_message)
        return body

    def ping(self) -> None:
        """A PING/PONG round trip: the broker has handled every frame sent before it (a connection's
        frames are handled in order), including those it never answers (FLOW, an ACK without a
        receipt, REDELIVER_UNACKNOWLEDGED_MESSAGES)."""
        self._send(T(type=T.PING, ping=api.CommandPing()))
        self._wait(lambda f: f.command.type == T.PONG)

    # -- transactions ------------------------------------------------------------------------------

    def _tc_connect(self) -> None:
        if self._tc_connected:
            return
        request = api.CommandTcClientConnectRequest(request_id=next(self._ids), tc_id=0)
        self._request(
            T(type=T.TC_CLIENT_CONNECT_REQUEST, tcClientConnectRequest=request),
            T.TC_CLIENT_CONNECT_RESPONSE,
            "tcClientConnectRequest",
        )
        self._tc_connected = True

    def new_transaction(self, timeout_ms: int = 60_000) -> WireTransaction:
        self._tc_connect()
        request = api.CommandNewTxn(request_id=next(self._ids), txn_ttl_seconds=timeout_ms, tc_id=0)
        body = self._request(T(type=T.NEW_TXN, newTxn=request), T.NEW_TXN_RESPONSE, "newTxn")
        return WireTransaction(self, TxnID(body.txnid_most_bits, body.txnid_least_bits))

    def add_partitions(self, txn: TxnID, partitions: list[str]) -> None:
        request = api.CommandAddPartitionToTxn(
            request_id=next(self._ids),
            txnid_most_bits=txn.most_sig_bits,
            txnid_least_bits=txn.least_sig_bits,
            partitions=partitions,
        )
        self._request(
            T(type=T.ADD_PARTITION_TO_TXN, addPartitionToTxn=request),
            T.ADD_PARTITION_TO_TXN_RESPONSE,
            "addPartitionToTxn",
        )

    def add_subscription(self, txn: TxnID, topic: str, subscription: str) -> None:
        request = api.CommandAddSubscriptionToTxn(
            request_id=next(self._ids),
            txnid_most_bits=txn.most_sig_bits,
            txnid_least_bits=txn.least_sig_bits,
            subscription=[api.Subscription(topic=topic, subscription=subscription)],
        )
        self._request(
            T(type=T.ADD_SUBSCRIPTION_TO_TXN, addSubscriptionToTxn=request),
            T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
            "addSubscriptionToTxn",
        )

    def end_transaction(self, txn: TxnID, *, commit: bool) -> None:
        request = api.CommandEndTxn(
            request_id=next(self._ids),
            txnid_most_bits=txn.most_sig_bits,
            txnid_least_bits=txn.least_sig_bits,
            txn_action=api.COMMIT if commit else api.ABORT,
        )
        self._request(T(type=T.END_TXN, endTxn=request), T.END_TXN_RESPONSE, "endTxn")

    # -- producers and consumers ---------------------------------------------------------------------

    def create_producer(self, topic: str) -> WireProducer:
        producer_id = next(self._ids)
        request = api.CommandProducer(topic=topic, producer_id=producer_id, request_id=next(self._ids))
        body = self._request(T(type=T.PRODUCER, producer=request), T.PRODUCER_SUCCESS, "producer")
        return WireProducer(self, topic, producer_id, body.producer_name)

    def subscribe(
        self, topic: str, subscription: str, *, sub_type: str = "Shared", earliest: bool = True, permits: int = 1000
    ) -> WireConsumer:
        consumer_id = next(self._ids)
        request = api.CommandSubscribe(
            topic=topic,
            subscription=subscription,
            subType=api.CommandSubscribe.SubType.Value(sub_type),
            consumer_id=consumer_id,
            request_id=next(self._ids),
            initialPosition=api.CommandSubscribe.Earliest if earliest else api.CommandSubscribe.Latest,
        )
        self._request(T(type=T.SUBSCRIBE, subscribe=request), T.SUCCESS, "subscribe")
        self._queues.setdefault(consumer_id, collections.deque())
        self._send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=consumer_id, messagePermits=permits)))
        return WireConsumer(self, topic, subscription, consumer_id)


def _response_field(command: Any) -> Any:
    return getattr(command, _FIELD_BY_TYPE[command.type])


_FIELD_BY_TYPE = {f.number: f.name for f in T.DESCRIPTOR.fields if f.name != "type"}


@dataclass
class WireTransaction:
    """An open transaction: it registers partitions and subscriptions on first use."""

    client: WireClient
    txn_id: TxnID
    partitions: set[str] = field(default_factory=set)
    subscriptions: set[tuple[str, str]] = field(default_factory=set)

    def _use_partition(self, topic: str) -> None:
        if topic not in self.partitions:
            self.client.add_partitions(self.txn_id, [topic])
            self.partitions.add(topic)

    def _use_subscription(self, topic: str, subscription: str) -> None:
        if (topic, subscription) not in self.subscriptions:
            self.client.add_subscription(self.txn_id, topic, subscription)
            self.subscriptions.add((topic, subscription))

    def commit(self) -> None:
        self.client.end_transaction(self.txn_id, commit=True)

    def abort(self) -> None:
        self.client.end_transaction(self.txn_id, commit=False)


@dataclass
class WireProducer:
    client: WireClient
    topic: str
    producer_id: int
    name: str
    sequence: itertools.count[int] = field(default_factory=itertools.count)

    def send(
        self,
        payload: bytes,
        *,
        txn: WireTransaction | None = None,
        key: str | None = None,
        deliver_at_ms: int | None = None,
        properties: dict[str, str] | None = None,
    ) -> tuple[int, int]:
        """Send one message; its (ledger id, entry id)."""
        if txn is not None:
            txn._use_partition(self.topic)
        sequence_id = next(self.sequence)
        metadata = api.MessageMetadata(
            producer_name=self.name, sequence_id=sequence_id, publish_time=int(time.time() * 1000)
        )
        if key is not None:
            metadata.partition_key = key
        if deliver_at_ms is not None:
            metadata.deliver_at_time = deliver_at_ms
        for k, v in (properties or {}).items():
            metadata.properties.add(key=k, value=v)
        command = api.CommandSend(producer_id=self.producer_id, sequence_id=sequence_id)
        if txn is not None:
            command.txnid_most_bits, command.txnid_least_bits = txn.txn_id.most_sig_bits, txn.txn_id.least_sig_bits
            metadata.txnid_most_bits, metadata.txnid_least_bits = command.txnid_most_bits, command.txnid_least_bits
        self.client._send(T(type=T.SEND, send=command), encode_message(metadata, payload))

        def match(frame: Frame) -> bool:
            cmd = frame.command
            if cmd.type == T.SEND_RECEIPT:
                return bool(
                    cmd.send_receipt.producer_id == self.producer_id and cmd.send_receipt.sequence_id == sequence_id
                )
            if cmd.type == T.SEND_ERROR:
                return bool(
                    cmd.send_error.producer_id == self.producer_id and cmd.send_error.sequence_id == sequence_id
                )
            return False

        frame = self.client._wait(match)
        if frame.command.type == T.SEND_ERROR:
            raise WireError(frame.command.send_error.error, frame.command.send_error.message)
        mid = frame.command.send_receipt.message_id
        return _signed(mid.ledgerId), _signed(mid.entryId)


@dataclass
class WireConsumer:
    client: WireClient
    topic: str
    subscription: str
    consumer_id: int

    def receive(self, timeout_s: float = 1.0) -> WireMessage | None:
        """The next message, or None when none arrives in ``timeout_s``."""
        queue = self.client._queues[self.consumer_id]
        if not queue:
            try:
                self.client._wait(
                    lambda f: f.command.type == T.MESSAGE and f.command.message.consumer_id == self.consumer_id,
                    timeout_s,
                )
            except WireTimeout:
                return None
        if not queue:
            return None
        message = queue.popleft()
        # One permit back per message taken, as the official client's receiver queue does in bulk.
        self.flow(1)
        return message

    def flow(self, permits: int) -> None:
        """Grant the broker ``permits`` more messages (FLOW; the broker never answers it)."""
        self.client._send(T(type=T.FLOW, flow=api.CommandFlow(consumer_id=self.consumer_id, messagePermits=permits)))

    def redeliver_unacknowledged(self) -> None:
        """Ask for every unacknowledged message again (REDELIVER_UNACKNOWLEDGED_MESSAGES; never
        answered).  Messages already queued here are dropped, as the broker sends them again."""
        self.client._queues[self.consumer_id].clear()
        command = api.CommandRedeliverUnacknowledgedMessages(consumer_id=self.consumer_id)
        self.client._send(T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES, redeliverUnacknowledgedMessages=command))

    def acknowledge(
        self,
        message: WireMessage,
        *,
        txn: WireTransaction | None = None,
        cumulative: bool = False,
        receipt: bool = True,
    ) -> None:
        """Acknowledge ``message`` and wait for the broker's ACK_RESPONSE (errors raise); with
        ``receipt=False`` the ACK carries no request id and nothing is awaited, as the official
        clients' default acks."""
        if txn is not None:
            txn._use_subscription(self.topic, self.subscription)
        mid = api.MessageIdData(
            ledgerId=message.ledger_id & ((1 << 64) - 1), entryId=message.entry_id & ((1 << 64) - 1)
        )
        ack = api.CommandAck(
            consumer_id=self.consumer_id,
            ack_type=api.CommandAck.Cumulative if cumulative else api.CommandAck.Individual,
            message_id=[mid],
        )
        if receipt:
            ack.request_id = next(self.client._ids)
        if txn is not None:
            ack.txnid_most_bits, ack.txnid_least_bits = txn.txn_id.most_sig_bits, txn.txn_id.least_sig_bits
        if receipt:
            self.client._request(T(type=T.ACK, ack=ack), T.ACK_RESPONSE, "ack")
        else:
            self.client._send(T(type=T.ACK, ack=ack))
