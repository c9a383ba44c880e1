"""``pulsar.Producer`` on one partition, batching or not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.broker import BatchedMessage
from engine.scheduler import Future
from engine.simulation.messages import BatchMessageId
from engine.simulation.session import Session, position_json, txn_json
from engine.simulation.transaction import Transaction
from reference import client as ct
from spec.history import object_id
from spec.types import Position, TxnID

__all__ = ["Producer"]


class Producer:
    """``pulsar.Producer`` on one partition.

    With ``batching_enabled`` sends are collected into a batch, written as one entry
    (``num_messages_in_batch`` messages) when it holds ``batching_max_messages`` messages or
    ``batching_max_publish_delay_ms`` after its first message, whichever comes first, or on
    :meth:`flush`.  A batch carries one transaction (or none): a send of another one, or a delayed
    message (never batched, as in Pulsar's client), sends the open batch first.  A batched send
    completes with a :class:`BatchMessageId`.

    A history process has one operation open at a time, so messages from several application
    threads meet in one batch only through handles of one producer: :meth:`share` gives another
    client (process) a handle on the same batch container.
    """

    def __init__(
        self,
        client: Session,
        partition: str,
        *,
        batching_enabled: bool = False,
        batching_max_messages: int = 1000,
        batching_max_publish_delay_ms: int = 10,
    ) -> None:
        if batching_max_messages < 1 or batching_max_publish_delay_ms < 0:
            raise ValueError("batching_max_messages must be >= 1 and batching_max_publish_delay_ms >= 0")
        self.client = client
        self.partition = partition
        self.batching_enabled = batching_enabled
        self.batching_max_messages = batching_max_messages
        self.batching_max_publish_delay_ms = batching_max_publish_delay_ms
        self._container = _BatchContainer()

    def share(self, client: Session) -> Producer:
        """This producer as used by ``client``'s process: same partition, same open batch."""
        handle = Producer(
            client,
            self.partition,
            batching_enabled=self.batching_enabled,
            batching_max_messages=self.batching_max_messages,
            batching_max_publish_delay_ms=self.batching_max_publish_delay_ms,
        )
        handle._container = self._container
        return handle

    def send_async(
        self,
        content: bytes | str,
        *,
        txn: Transaction | None = None,
        deliver_at: int | None = None,
        partition_key: str | None = None,
    ) -> Future[Position]:
        text = content.decode() if isinstance(content, bytes) else content
        payload = text.encode()
        value: dict[str, Any] = {"message": text}
        if txn is not None:
            value["txn"] = txn_json(txn.txn_id)
        if deliver_at is not None:
            value["deliver_at_ms"] = deliver_at
        if partition_key is not None:
            value["partition_key"] = partition_key
        self.client.broker.partition(self.partition)  # an unknown partition is a KeyError at once
        txn_id = None if txn is None else txn.txn_id
        batched = self.batching_enabled and deliver_at is None

        def publish() -> Future[Position]:
            if batched:
                return self._add_to_batch(txn_id, BatchedMessage(payload, partition_key))
            if self.batching_enabled:
                # What was batched before goes first: a producer's messages stay in send order.
                self.flush_async()
                return self._after_previous(
                    lambda: self.client.broker.partition(self.partition).publish(
                        payload, txn_id, deliver_at, partition_key=partition_key
                    )
                )
            sent = self.client.network.call(
                lambda: self.client.broker.partition(self.partition).publish(
                    payload, txn_id, deliver_at, partition_key=partition_key
                )
            )
            return sent

        if txn is None:
            call = publish
        else:

            def call() -> Future[Position]:
                return txn.use(ct.Send(self.partition), self.partition, publish)

        return self.client.operation("send", object_id("partition", self.partition), value, call, _sent_json)

    def send(
        self,
        content: bytes | str,
        *,
        txn: Transaction | None = None,
        deliver_at: int | None = None,
        partition_key: str | None = None,
    ) -> Position:
        return self.client.wait(self.send_async(content, txn=txn, deliver_at=deliver_at, partition_key=partition_key))

    def _add_to_batch(self, txn_id: TxnID | None, message: BatchedMessage) -> Future[Position]:
        container = self._container
        if container.batch is not None and container.batch.txn_id != txn_id:
            self.flush_async()
        if container.batch is None:
            batch = container.batch = _OpenBatch(txn_id)

            def timer() -> None:
                if container.batch is batch:
                    self.flush_async()

            self.client.sim.schedule(self.batching_max_publish_delay_ms, timer)
        batch = container.batch
        slot: Future[Position] = Future()
        batch.messages.append(message)
        batch.waiters.append(slot)
        if len(batch.messages) >= self.batching_max_messages:
            self.flush_async()
        return slot

    def _after_previous(self, request: Callable[[], Future[Position]]) -> Future[Position]:
        """Send ``request`` once the producer's previous request was answered.  Pulsar keeps a
        producer's messages in order on its connection; here each request travels on its own, so
        a batching producer sends one at a time."""
        container = self._container
        previous = container.tail
        out: Future[Position] = Future()
        # The next request waits for this one's answer, or for the operation timeout: a request lost
        # on the way (or in a crash) fails on the client's side and must not hold back every later
        # send, as Pulsar's producer fails a timed-out send and goes on.
        released: Future[None] = Future()
        container.tail = released

        def release(_: Any = None) -> None:
            if not released.done:
                released.set_result(None)

        out.add_done_callback(release)

        def send(_: Future[Any]) -> None:
            def answered(w: Future[Position]) -> None:
                if w.error is not None:
                    out.set_exception(w.error)
                else:
                    out.set_result(w.result())

            self.client.network.call(request).add_done_callback(answered)
            self.client.sim.schedule(self.client.operation_timeout_ms, release)

        previous.add_done_callback(send)
        return out

    def flush_async(self) -> Future[None]:
        """Send the open batch now; completes when it is written (at once when there is none)."""
        batch, self._container.batch = self._container.batch, None
        if batch is None:
            return Future.completed(None)
        messages = tuple(batch.messages)
        written = self._after_previous(
            lambda: self.client.broker.partition(self.partition).publish(
                b"", batch.txn_id, None, partition_key=messages[0].partition_key, batch=messages
            )
        )
        done: Future[None] = Future()

        def answered(w: Future[Position]) -> None:
            for index, waiter in enumerate(batch.waiters):
                if w.error is not None:
                    waiter.set_exception(w.error)
                else:
                    position = w.result()
                    assert isinstance(position, Position)
                    waiter.set_result(BatchMessageId.of(position, index, len(messages)))
            if w.error is not None:
                done.set_exception(w.error)
            else:
                done.set_result(None)

        written.add_done_callback(answered)
        return done

    def flush(self) -> None:
        self.client.wait(self.flush_async())


@dataclass
class _BatchContainer:
    batch: _OpenBatch | None = None
    tail: Future[Any] = field(default_factory=lambda: Future.completed(None))  # the last request sent


@dataclass
class _OpenBatch:
    txn_id: TxnID | None
    messages: list[BatchedMessage] = field(default_factory=list)
    waiters: list[Future[Position]] = field(default_factory=list)


def _sent_json(sent: Position) -> dict[str, Any]:
    if isinstance(sent, BatchMessageId):
        return {
            "position": position_json(sent.position),
            "batch_index": sent.batch_index,
            "batch_size": sent.batch_size,
        }
    return {"position": position_json(sent)}
