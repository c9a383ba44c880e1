"""A subscription's pending-ack log: the records its pending-ack handle appends, where each one
landed, and the trims the handle asks for (PA-16 .. PA-20).

The log exists only once a transaction acknowledged on the subscription (PA-17): until then the
handle starts without one, and :meth:`PendingAckLog.open` creates it when the handle's store
initialises.  At a load :meth:`PendingAckLog.open` reads the live records back for the handle's
recovery.  A record being written holds back what must follow it (a seek waits for the records in
flight, :meth:`PendingAckLog.defer`).  A write or a trim that fails leaves the handle's memory
ahead of its log: the log calls ``failed``, and the subscription reloads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from engine.broker.component import BrokerHost
from engine.scheduler import Future
from engine.storage.ledger import LedgerError
from engine.storage.record_log import RecordLog, RecordPosition
from reference import batched_log as bl
from reference import pending_ack as pa
from spec.envelope import LogKind
from spec.pb import TransactionPendingAck_pb2 as pa_pb

__all__ = ["PendingAckLog"]


class PendingAckLog:
    """The pending-ack log of one subscription, over the loads and crashes of the subscription."""

    def __init__(self, host: BrokerHost, name: str, *, owner: object, failed: Callable[[], None]) -> None:
        """``owner``: the subscription (a writer step that raises is contained as its failure);
        ``failed``: what a failed write or trim calls."""
        self.host = host
        self.name = name
        self.owner = owner
        self.failed = failed
        self.log: RecordLog | None = None
        self._positions: dict[int, RecordPosition] = {}  # record id -> where the writer put it
        self._trimmed = -1
        self._writing = 0  # records being written
        self._settled: list[Callable[[], None]] = []  # what waits for them (a seek)
        self._generation = 0  # a load or a crash of the subscription voids the writes begun before it

    def exists(self) -> bool:
        """Whether the log was ever created (PA-17)."""
        return self.host.store.exists(self.name)

    def reset(self) -> None:
        """The subscription loads: what was being written, and where records landed, is forgotten."""
        self._generation += 1
        self._writing, self._settled = 0, []
        self._positions = {}
        self._trimmed = -1

    def start_lazily(self) -> None:
        """No log yet (PA-17): the handle's store creates it when it initialises."""
        self.log = None

    def open(self) -> tuple[list[tuple[int, pa.PendingAckRecord]], tuple[bl.LoggedEntry, ...]]:
        """Open (create) the log and read its live records, numbered in log order, and the durable
        entries they were decoded from."""
        log = RecordLog(
            self.host.sim,
            self.host.store.open(self.name, closes_on_write_failure=True),
            LogKind.PENDING_ACK,
            self.host.config,
            batching=self.host.batching,
            metrics=self.host.writer_metrics.get(LogKind.PENDING_ACK),
            owner=self.owner,
        )
        records = []
        self._positions = {}
        durable, replayed = log.read_back()
        for rid, (position, message) in enumerate(replayed):
            assert isinstance(message, pa_pb.PendingAckMetadataEntry)
            records.append((rid, pa.PendingAckRecord.from_pb(message)))
            self._positions[rid] = position
        self.log = log
        return records, durable

    def recovery_inputs(self, durable: Sequence[bl.LoggedEntry]) -> dict[str, object]:
        """What the ``recover`` row states of the open log (:meth:`RecordLog.recovery_inputs`)."""
        assert self.log is not None
        return self.log.recovery_inputs(durable)

    def delete_consumed_ledgers(self) -> None:
        """Retention of the log (PA-16): the ledgers no live record is in go."""
        assert self.log is not None
        self.log.ledger.delete_consumed_ledgers()

    def append(self, record_id: int, record: pa.PendingAckRecord) -> Future[None]:
        """Write record ``record_id``; the future completes once it is durable (what waits for the
        record, a cursor change, runs then)."""
        assert self.log is not None
        done: Future[None] = Future()
        generation = self._generation
        self._writing += 1

        def complete(f: Future[RecordPosition]) -> None:
            if generation != self._generation:
                return
            self._writing -= 1
            if f.error is not None:
                done.set_exception(f.error)
                self.failed()
                return
            self._positions[record_id] = f.result()
            if record_id <= self._trimmed:
                self.trim(self._trimmed)
            done.set_result(None)  # the cursor changes waiting for the record run now
            if not self._writing:
                settled, self._settled = self._settled, []
                for action in settled:
                    action()

        self.log.add(record.to_pb().SerializeToString()).add_done_callback(complete)
        return done

    def trim(self, record_id: int) -> None:
        """PA-16: the log is deleted up to ``record_id`` (what is still being written, once it lands)."""
        assert self.log is not None
        self._trimmed = max(self._trimmed, record_id)
        doomed = sorted(r for r in self._positions if r <= self._trimmed)
        try:
            self.log.delete([self._positions.pop(r) for r in doomed])
        except LedgerError:
            self.failed()  # the log's cursor could not be written: reload, as after any failed write

    def defer(self, action: Callable[[], None]) -> bool:
        """While records are being written, keep ``action`` until they are (True); else False."""
        if self._writing:
            self._settled.append(action)
            return True
        return False

    def close(self) -> None:
        """The subscription goes: the log's writer closes before the log is deleted (BW-18)."""
        if self.log is not None:
            self.log.close()

    def crash(self) -> None:
        """The broker's memory of the log goes: what was buffered or in flight is lost."""
        self._generation += 1
        self._writing, self._settled = 0, []
        if self.log is not None:
            self.log.crash()
        self.log = None
