"""``pulsar.Transaction``: the client-side state machine :mod:`reference.client` and the requests its
effects ask for (ADD_PARTITION_TO_TXN / ADD_SUBSCRIPTION_TO_TXN before the first use of a partition
or a subscription, END_TXN once every operation of the txn is answered); the user's commit or abort
completes with the machine's verdict (TC-29 .. TC-36).
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from engine.broker import BrokerError
from engine.broker.component import ComponentFailure
from engine.scheduler import Future
from engine.simulation.session import ClientLibraryError, OperationFailed, Session, txn_json
from reference import client as ct
from spec.errors import error_by_name
from spec.history import object_id
from spec.result import Err
from spec.types import ClientTxnState, Subscription, TxnAction, TxnID

__all__ = ["Transaction"]

T = TypeVar("T")


class Transaction:
    """``pulsar.Transaction``: the client-side state machine :mod:`reference.client` plus its requests."""

    def __init__(self, client: Session, txn_id: TxnID, timeout_ms: int) -> None:
        self.client = client
        self.txn_id = txn_id
        self.state = self._library(lambda: ct.initial(client.broker.config, txn_id, timeout_ms))
        self._registered: dict[str, Future[None]] = {}
        self._end: Future[None] | None = None
        client.sim.schedule(timeout_ms, self._timeout_fired)

    def _timeout_fired(self) -> None:
        try:
            self._step(ct.TimeoutFired())
        except ClientLibraryError as exc:
            self._fail_end(exc)

    def _fail_end(self, exc: ClientLibraryError) -> None:
        """The library raised in a callback (a timer, an answer): the commit or abort it was
        completing, if any, fails with that exception; otherwise only the run's failures list it."""
        if self._end is not None:
            end, self._end = self._end, None
            end.set_exception(exc)

    @property
    def txn_state(self) -> ClientTxnState:
        return self.state.state

    def _library(self, call: Callable[[], T]) -> T:
        """``call`` (the client machine's) as the library's own code: what it raises is a bug in the
        client library, so the caller's operation fails with it, the run goes on, and the run lists
        it as it lists a broker component that raised (loud: exit 1)."""
        try:
            return call()
        except Exception as exc:
            where = ""
            for frame, line in traceback.walk_tb(exc.__traceback__):
                where = f"{os.path.basename(frame.f_code.co_filename)}:{line} in {frame.f_code.co_qualname}"
            failure = ComponentFailure(
                self.client.sim.now, f"client:{self.client.process}", f"{type(exc).__name__}: {exc}", where
            )
            self.client.broker.failures.append(failure)
            raise ClientLibraryError(exc) from exc

    def _step(self, command: Any) -> ct.Result:
        self.state, result = self._library(lambda: ct.step(self.state, command))
        for effect in result.effects:
            if isinstance(effect, ct.SendAddPartitionToTxn):
                self._registered[effect.topic] = self._add_partition(effect.topic)
            elif isinstance(effect, ct.SendAddSubscriptionToTxn):
                key = f"{effect.subscription.topic}#{effect.subscription.subscription}"
                self._registered[key] = self._add_subscription(effect.subscription)
            elif isinstance(effect, ct.SendEndTxn):
                self._send_end(effect.action)
            elif isinstance(effect, ct.CompleteEnd) and self._end is not None:
                end, self._end = self._end, None
                if effect.error is None:
                    end.set_result(None)
                else:
                    end.set_exception(OperationFailed(error_by_name(effect.error)(effect.error)))
        return result

    def _add_partition(self, partition: str) -> Future[None]:
        coordinator = self.client.broker.coordinator
        return self.client.network.call(lambda: coordinator.add_partition(self.txn_id, partition), idempotent=True)

    def _add_subscription(self, subscription: Subscription) -> Future[None]:
        coordinator = self.client.broker.coordinator
        return self.client.network.call(
            lambda: coordinator.add_subscription(self.txn_id, subscription), idempotent=True
        )

    def _send_end(self, action: TxnAction) -> None:
        coordinator = self.client.broker.coordinator
        # END_TXN is not idempotent in today's Pulsar (a retry after COMMITTED gets TransactionNotFound,
        # #19629), and the client does not resend it on its own: never duplicated.
        answer = self.client.network.call(lambda: coordinator.end_txn(self.txn_id, action))

        def answered(done: Future[None]) -> None:
            error = None if done.error is None else _name(done.error)
            try:
                self._step(ct.EndTxnResponse(error))
            except ClientLibraryError as exc:
                self._fail_end(exc)

        answer.add_done_callback(answered)

    def _registration(self, key: str) -> Future[None]:
        return self._registered.get(key) or Future.completed(None)

    def use(self, command: ct.Send | ct.Ack, key: str, then: Callable[[], Future[T]]) -> Future[T]:
        """Register the partition/subscription (first use), then run the operation (TC-30, TC-31)."""
        out: Future[T] = Future()
        result = self._step(command)
        if not result.ok:
            assert isinstance(result, Err)
            out.set_exception(OperationFailed(result.error))
            return out

        def registered(done: Future[None]) -> None:
            if done.error is not None:
                try:
                    self._step(ct.OpCompleted(failed=True))
                except ClientLibraryError as exc:
                    out.set_exception(exc)
                    return
                out.set_exception(done.error)
                return

            def finished(op: Future[T]) -> None:
                try:
                    self._step(ct.OpCompleted(failed=op.error is not None))
                except ClientLibraryError as exc:
                    out.set_exception(exc)
                    return
                if op.error is not None:
                    out.set_exception(op.error)
                else:
                    out.set_result(op.result())

            then().add_done_callback(finished)

        self._registration(key).add_done_callback(registered)
        return out

    def _end_async(self, f: str, command: ct.Commit | ct.Abort) -> Future[None]:
        obj = object_id("coordinator", self.txn_id.most_sig_bits)

        def call() -> Future[None]:
            end: Future[None] = Future()
            self._end = end
            try:
                result = self._step(command)
            except ClientLibraryError:
                self._end = None
                raise
            if not result.ok and self._end is end:
                assert isinstance(result, Err)
                self._end = None
                end.set_exception(OperationFailed(result.error))
            return end

        return self.client.operation(f, obj, {"txn": txn_json(self.txn_id)}, call)

    def commit_async(self) -> Future[None]:
        return self._end_async("commit", ct.Commit())

    def abort_async(self) -> Future[None]:
        return self._end_async("abort", ct.Abort())

    def commit(self) -> None:
        self.client.wait(self.commit_async())

    def abort(self) -> None:
        self.client.wait(self.abort_async())


def _name(error: BaseException) -> str:
    if isinstance(error, BrokerError | OperationFailed):
        return error.error.name
    return "RequestTimeout"
