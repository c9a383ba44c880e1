"""Client calls as recorded operations: the official ``pulsar-client`` and the transactional wire client.

Every call the workloads make on a broker goes through here, so each becomes one operation of the
history contract (``docs/spec/history.md``), with the outcome the client actually learnt:

* ``ok`` only when the client saw the effect (a send receipt, a message, a transaction response);
* ``fail`` only when the operation certainly had no effect: the client refused it before sending
  (a full queue, a message too big), or the broker answered with an error that means "not done"
  (:data:`DEFINITE_REFUSALS`);
* ``info`` whenever a timeout, a disconnect or an error the broker may have answered after acting
  hides the result.  The official client acknowledges without a broker receipt (it groups acks and
  sends them later), so its ``ack`` and ``ack_cumulative`` end ``info`` too.

Payloads are unique per run, so every delivery names its send.  Message ids are (ledger, entry,
batch index, partition): ``position`` ``[ledger, entry]``, ``batch_index`` for a message of a batch
and ``partition`` (the client's partition index, -1 for a non-partitioned topic).
"""

from __future__ import annotations

import contextlib
import datetime
from dataclasses import dataclass, field
from typing import Any

from recording.log import Outcome, Process
from spec.history import OpType, object_id

__all__ = [
    "DEFINITE_REFUSALS",
    "OfficialConsumer",
    "OfficialProducer",
    "WireSession",
    "full_topic",
    "subscription_object",
]

# Broker errors after which a request certainly did nothing (Pulsar's ServerError names).  Anything
# else (PersistenceError, UnknownError, a timeout inside the broker...) may have been answered
# after a write that still landed: unknown.
DEFINITE_REFUSALS = frozenset(
    {
        "InvalidTxnStatus",
        "TransactionNotFound",
        "TransactionConflict",
        "NotAllowedError",
        "TransactionCoordinatorNotFound",
        "ServiceNotReady",
        "ConsumerBusy",
        "TopicNotFound",
        "InvalidTopicName",
        "AuthenticationError",
        "AuthorizationError",
        "IncompatibleSchema",
        "ConsumerAssignError",
        "SubscriptionNotFound",
        "ConsumerNotFound",
    }
)
# Official-client exceptions raised before anything was sent.
_CLIENT_REFUSALS = frozenset({"ProducerQueueIsFull", "MessageTooBig", "InvalidMessage", "MemoryBufferIsFull"})
# Official-client exception names that carry a definite broker refusal (its names, not Pulsar's).
_OFFICIAL_REFUSALS = frozenset(
    {
        "ConsumerBusy",
        "TopicNotFound",
        "InvalidTopicName",
        "NotAllowedError",
        "AuthenticationError",
        "AuthorizationError",
        "IncompatibleSchema",
        "ConsumerAssignError",
        "SubscriptionNotFound",
        "ConsumerNotFound",
        "TransactionConflict",
        "TransactionNotFound",
        "InvalidTxnStatusError",
    }
)


def full_topic(namespace: str, name: str) -> str:
    return f"persistent://{namespace}/{name}"


def subscription_object(topic: str, subscription: str) -> str:
    return object_id("subscription", f"{topic}#{subscription}")


def _name(exc: BaseException) -> str:
    return type(exc).__name__


def official_request(exc: BaseException) -> Outcome:
    """A request of the official client (subscribe, unsubscribe) that raised."""
    name = _name(exc)
    if name in _OFFICIAL_REFUSALS:
        return Outcome(OpType.FAIL, error=name)
    return Outcome(OpType.INFO, error=name)


def official_send(exc: BaseException) -> Outcome:
    """A send of the official client that raised: refused before sending, or unknown."""
    name = _name(exc)
    if name in _CLIENT_REFUSALS:
        return Outcome(OpType.FAIL)  # the client refused it: nothing was sent
    if name in _OFFICIAL_REFUSALS:
        return Outcome(OpType.FAIL, error=name)
    return Outcome(OpType.INFO, error=name)


def unknown(exc: BaseException) -> Outcome:
    return Outcome(OpType.INFO, error=_name(exc))


def _message_id(mid: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"position": [mid.ledger_id(), mid.entry_id()]}
    if mid.batch_index() >= 0:
        out["batch_index"] = mid.batch_index()
    out["partition"] = mid.partition()
    return out


def _payload(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace")


@dataclass
class OfficialProducer:
    """One official producer; several processes may send through it (their sends batch together)."""

    producer: Any
    topic: str  # full name

    @property
    def object(self) -> str:
        return object_id("partition", self.topic)

    def send(
        self,
        process: Process,
        payload: str,
        *,
        key: str | None = None,
        deliver_after_ms: int | None = None,
        deliver_at_ms: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> bool:
        """Send one message; True when the send returned ok.  ``deliver_after_ms`` is recorded as the
        deliver-at time it implies counted from the invocation: the client adds the delay to its own
        clock a little later, so the recorded time is never after the one the broker holds to."""
        value: dict[str, Any] = {"message": payload, "txn": None, "deduplicated": False}
        if key is not None:
            value["partition_key"] = key
        kwargs: dict[str, Any] = {}
        if key is not None:
            kwargs["partition_key"] = key
        if deliver_at_ms is not None:
            kwargs["deliver_at"] = deliver_at_ms
        if deliver_after_ms is not None:
            kwargs["deliver_after"] = datetime.timedelta(milliseconds=deliver_after_ms)
        value.update(extra or {})
        with process.op("send", self.object, value, official_send) as op:
            if deliver_at_ms is not None:
                value["deliver_at_ms"] = deliver_at_ms
            if deliver_after_ms is not None:
                value["deliver_at_ms"] = op.row.invoked_at + deliver_after_ms
                value["deliver_after_ms"] = deliver_after_ms
            mid = self.producer.send(payload.encode(), **kwargs)
            op.ok(_message_id(mid))
            return True
        return False


@dataclass
class OfficialConsumer:
    """One official consumer, named; every call on it is an operation on its subscription."""

    consumer: Any
    topic: str
    subscription: str
    name: str
    sub_type: str

    @property
    def object(self) -> str:
        return subscription_object(self.topic, self.subscription)

    @classmethod
    def subscribe(
        cls,
        process: Process,
        client: Any,
        topic: str,
        subscription: str,
        *,
        sub_type: str,
        name: str,
        earliest: bool = True,
        options: dict[str, Any] | None = None,
        stated: dict[str, Any] | None = None,
    ) -> OfficialConsumer | None:
        """Subscribe (recorded); None when the subscribe did not return ok.  ``options`` go to the
        client, ``stated`` into the recorded value (the bounds the recorder states)."""
        import pulsar

        kinds = {
            "Exclusive": pulsar.ConsumerType.Exclusive,
            "Shared": pulsar.ConsumerType.Shared,
            "Failover": pulsar.ConsumerType.Failover,
            "Key_Shared": pulsar.ConsumerType.KeyShared,
        }
        value = {
            "initial_position": "Earliest" if earliest else "Latest",
            "sub_type": sub_type,
            "consumer": name,
            **(stated or {}),
        }
        obj = subscription_object(topic, subscription)
        with process.op("subscribe", obj, value, official_request) as op:
            consumer = client.subscribe(
                topic,
                subscription,
                consumer_type=kinds[sub_type],
                consumer_name=name,
                initial_position=pulsar.InitialPosition.Earliest if earliest else pulsar.InitialPosition.Latest,
                **(options or {}),
            )
            op.ok()
            return cls(consumer, topic, subscription, name, sub_type)
        return None

    def connected(self) -> bool:
        try:
            return bool(self.consumer.is_connected())
        except Exception:  # a closed consumer is not connected
            return False

    def receive(self, process: Process, timeout_ms: int) -> Any:
        """One receive: the message, or None when nothing arrived within ``timeout_ms`` (an ``ok``
        with no result; its value says ``connected: false`` when the consumer knew it was
        disconnected before or after waiting, so it proves nothing about the subscription)."""
        import pulsar

        value: dict[str, Any] = {"consumer": self.name}
        before = self.connected()
        with process.op("receive", self.object, value, _receive_outcome) as op:
            try:
                message = self.consumer.receive(timeout_millis=timeout_ms)
            except pulsar.Timeout:
                if not (before and self.connected()):
                    value["connected"] = False
                op.ok(None)
                return None
            result = {
                "message": _payload(message.data()),
                **_message_id(message.message_id()),
                "redelivery_count": message.redelivery_count(),
            }
            op.ok(result)
            return message
        return None

    def _ack_value(self, message: Any) -> dict[str, Any]:
        mid = message.message_id()
        value: dict[str, Any] = {"position": [mid.ledger_id(), mid.entry_id()], "txn": None}
        if mid.batch_index() >= 0:
            value["batch_index"] = mid.batch_index()
        value["consumer"] = self.name
        value["receipt"] = False
        return value

    def acknowledge(self, process: Process, message: Any, *, cumulative: bool = False) -> None:
        """Acknowledge: ``info`` whatever the client says (it sends acks later, without a receipt)."""
        f = "ack_cumulative" if cumulative else "ack"
        with process.op(f, self.object, self._ack_value(message), unknown) as op:
            if cumulative:
                self.consumer.acknowledge_cumulative(message)
            else:
                self.consumer.acknowledge(message)
            op.info("NoReceipt")

    def negative_acknowledge(self, process: Process, message: Any, *, within_ms: int | None) -> None:
        """Give a message back: the client asks the broker to redeliver it after its negative-ack
        delay.  ``within_ms``: the stated bound on that redelivery (None: none stated)."""
        value = self._ack_value(message)
        value.pop("receipt")
        value.pop("txn")
        if within_ms is not None:
            value["redeliver_within_ms"] = within_ms
        with process.op("negative_ack", self.object, value, unknown) as op:
            self.consumer.negative_acknowledge(message)
            op.ok()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.consumer.close()

    def unsubscribe(self) -> bool:
        """Delete the subscription (cleanup; not part of the history)."""
        try:
            self.consumer.unsubscribe()
            return True
        except Exception:  # cleanup is best effort and reported as a count
            return False


def _receive_outcome(exc: BaseException) -> Outcome:
    name = _name(exc)
    if name in ("AlreadyClosed", "ConsumerNotInitialized"):
        return Outcome(OpType.FAIL)  # nothing was taken from a consumer that is gone
    return Outcome(OpType.INFO, error=name)


# -- the transactional wire client --------------------------------------------------------------------


class NotConnected(Exception):
    """The wire client could not connect: the request was never sent."""


def _wire_outcome(exc: BaseException) -> Outcome:
    from txnclient.client import WireError

    if isinstance(exc, NotConnected):
        return Outcome(OpType.FAIL)  # nothing went out
    if isinstance(exc, WireError):
        name = exc.code.name if hasattr(exc.code, "name") else str(exc.code)
        if name in DEFINITE_REFUSALS:
            return Outcome(OpType.FAIL, error=name)
        return Outcome(OpType.INFO, error=name)
    return Outcome(OpType.INFO, error=_name(exc))


@dataclass
class WireSession:
    """One thread's connection through the wire client, reconnected after an unknown outcome (the
    connection may be stuck or gone), with its producers and its consumer re-created on the new one."""

    url: str
    timeout_s: float
    client: Any = None
    producers: dict[str, Any] = field(default_factory=dict)
    consumer: Any = None
    consumer_spec: tuple[str, str, str, str] | None = None  # topic, subscription, sub type, name
    liveness: bool = True  # False: its subscribes say no liveness bound holds

    def _connect(self) -> Any:
        from txnclient.client import WireClient

        if self.client is None:
            try:
                self.client = WireClient(self.url, operation_timeout_seconds=self.timeout_s)
            except Exception as exc:  # refused, unreachable, or a bad handshake
                raise NotConnected(f"{type(exc).__name__}: {exc}") from None
            self.producers = {}
            self.consumer = None
        return self.client

    def reset(self) -> None:
        """Drop the connection (its consumer leaves: what it held is redelivered)."""
        if self.client is not None:
            self.client.close()
        self.client = None
        self.producers = {}
        self.consumer = None

    def _outcome(self, exc: BaseException) -> Outcome:
        """How a wire call that raised ended; after an unknown outcome the connection is dropped
        (a late answer must not be taken for the next request's)."""
        outcome = _wire_outcome(exc)
        if outcome.type is OpType.INFO:
            self.reset()
        return outcome

    def subscribe(
        self, process: Process, topic: str, subscription: str, sub_type: str, name: str, *, liveness: bool = True
    ) -> bool:
        self.consumer_spec = (topic, subscription, sub_type, name)
        self.liveness = liveness
        value: dict[str, Any] = {"initial_position": "Earliest", "sub_type": sub_type, "consumer": name}
        if not liveness:
            value["liveness"] = False
        with process.op("subscribe", subscription_object(topic, subscription), value, self._outcome) as op:
            client = self._connect()
            self.consumer = client.subscribe(topic, subscription, consumer_type=sub_type, initial_position="Earliest")
            op.ok()
            return True
        return False

    def ensure_consumer(self, process: Process) -> bool:
        if self.consumer is not None or self.consumer_spec is None:
            return self.consumer is not None
        topic, subscription, sub_type, name = self.consumer_spec
        return self.subscribe(process, topic, subscription, sub_type, name, liveness=self.liveness)

    def new_txn(self, process: Process, timeout_ms: int) -> Any:
        from spec.types import TxnID

        with process.op("new_txn", object_id("coordinator", 0), {"timeout_ms": timeout_ms}, self._outcome) as op:
            client = self._connect()
            txn = client.new_transaction(timeout_ms)
            tid: TxnID = txn.txn_id
            op.ok({"txn": [tid.most_sig_bits, tid.least_sig_bits]})
            return txn
        return None

    @staticmethod
    def txn_json(txn: Any) -> list[int]:
        return [txn.txn_id.most_sig_bits, txn.txn_id.least_sig_bits]

    def send(self, process: Process, txn: Any, topic: str, payload: str) -> bool:
        """A send inside ``txn`` (the partition registered with the coordinator first, recorded)."""
        tj = self.txn_json(txn) if txn is not None else None
        if txn is not None and topic not in txn.partitions:
            value = {"txn": tj, "partition": topic}
            with process.op("add_partition", object_id("coordinator", 0), value, self._outcome) as op:
                client = self._connect()
                client.add_partitions(txn.txn_id, [topic])
                txn.partitions.add(topic)
                op.ok()
            if topic not in txn.partitions:
                return False
        with process.op("send", object_id("partition", topic), {"message": payload, "txn": tj}, self._outcome) as op:
            client = self._connect()
            producer = self.producers.get(topic)
            if producer is None:
                producer = client.create_producer(topic)
                self.producers[topic] = producer
            sent = producer.send(payload.encode(), txn=txn)
            op.ok({"position": [sent.ledger_id(), sent.entry_id()]})
            return True
        return False

    def receive(self, process: Process, timeout_s: float) -> Any:
        """One receive on this session's consumer (None: nothing arrived; ``connected: false`` in the
        value when the broker had closed the connection or sent its consumer away)."""
        assert self.consumer is not None and self.consumer_spec is not None
        topic, subscription, _, name = self.consumer_spec
        value: dict[str, Any] = {"consumer": name}
        with process.op("receive", subscription_object(topic, subscription), value, self._outcome) as op:
            message = self.consumer.receive(timeout_millis=int(timeout_s * 1000))
            if message is None:
                if getattr(self.client, "closed_by_broker", False) or getattr(self.consumer, "closed_by_broker", False):
                    value["connected"] = False
                    op.ok(None)
                    self.reset()
                    return None
                op.ok(None)
                return None
            result: dict[str, Any] = {
                "message": _payload(message.payload),
                "position": [message.message_id().ledger_id(), message.message_id().entry_id()],
                "redelivery_count": message.redelivery_count(),
            }
            if message.message_id().batch_index() >= 0:
                result["batch_index"] = message.message_id().batch_index()
            op.ok(result)
            return message
        return None

    def acknowledge(self, process: Process, message: Any, txn: Any) -> bool:
        """Acknowledge ``message`` inside ``txn`` (the subscription registered first, recorded); the
        wire client waits for the broker's ACK_RESPONSE, so an ok ack took effect.  It acknowledges
        the whole entry (no batch index on the wire), and so says the recorded value."""
        assert self.consumer is not None and self.consumer_spec is not None
        topic, subscription, _, name = self.consumer_spec
        tj = self.txn_json(txn)
        key = (topic, subscription)
        if key not in txn.subscriptions:
            value = {"txn": tj, "subscription": [topic, subscription]}
            with process.op("add_subscription", object_id("coordinator", 0), value, self._outcome) as op:
                client = self._connect()
                client.add_subscription(txn.txn_id, topic, subscription)
                txn.subscriptions.add(key)
                op.ok()
            if key not in txn.subscriptions:
                return False
        consumer = self.consumer
        position = [message.message_id().ledger_id(), message.message_id().entry_id()]
        value = {"position": position, "txn": tj, "consumer": name}
        with process.op("ack", subscription_object(topic, subscription), value, self._outcome) as op:
            consumer.acknowledge(message, txn=txn)
            op.ok()
            return True
        return False

    def end(self, process: Process, txn: Any, *, commit: bool) -> bool:
        f = "commit" if commit else "abort"
        with process.op(f, object_id("coordinator", 0), {"txn": self.txn_json(txn)}, self._outcome) as op:
            client = self._connect()
            client.end_transaction(txn.txn_id, commit=commit)
            op.ok()
            return True
        return False

    def close(self) -> None:
        self.reset()
