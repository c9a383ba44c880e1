"""The transaction buffer's strategies (``tests/buffer/test_stateful.py`` draws from these) and its driver.

The driver plays the topic's producers, the coordinator's end-of-transaction markers, the managed
ledger's roll-overs and deletions, the snapshot timer, the broker's topic loads and unloads, and
crashes: a ``crash`` and ``recover`` of the conformance protocol (the topic's ledgers and snapshot
topics survive, TB-24), a reload of the topic in the machine's own vocabulary (``reload_topic``,
then the recovery steps), and an unload that may delete the topic's snapshots.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from conformance.strategies.base import Crash, Driver, Observation, Rule, Setup
from reference import buffer as tb
from spec.types import TxnID

__all__ = [
    "CLEARS",
    "CONFIG_OVERRIDES",
    "LONG_TOPIC",
    "LONG_TOPICS",
    "LWMS",
    "RECOVERS",
    "SETTLES",
    "TXNS",
    "BufferDriver",
]

TXNS = st.builds(TxnID, st.integers(0, 1), st.integers(0, 4))
LWMS = st.integers(-1, 4)
# A 60-character topic name makes the segment capacity small with a legal segment size (TB-22).
LONG_TOPIC = "persistent://public/default/" + "t" * 32
LONG_TOPICS = st.booleans()
#: The three broker.conf settings the stateful test runs under: defaults, a snapshot every two
#: transactions, and segmented snapshots with small segments.
CONFIG_OVERRIDES = st.sampled_from(
    [
        {},
        {"transactionBufferSnapshotMaxTransactionCount": 2},
        {"transactionBufferSegmentedSnapshotEnabled": True, "transactionBufferSnapshotSegmentSize": 74},
    ]
)
#: ``settle``: an append that started the first snapshot completes it at once (runs reach Ready).
SETTLES = st.sampled_from([True, True, False])
RECOVERS = st.sampled_from([True, True, False])
CLEARS = st.sampled_from([False, False, False, True])

_RUNNING = (tb.BufferStatus.READY, tb.BufferStatus.NO_SNAPSHOT)


class BufferDriver(Driver):
    machine = "buffer"

    def setup(self, data: st.DataObject) -> Setup:
        config = data.draw(CONFIG_OVERRIDES, label="config")
        init = {"topic": LONG_TOPIC} if data.draw(LONG_TOPICS, label="long_topic") else {}
        return Setup(dict(config), init)

    def rules(self) -> list[Rule]:
        return [
            Rule("append_buffer_to_txn", self._append),
            Rule("publish_message", lambda data, state: tb.PublishMessage()),
            Rule("commit_txn", lambda data, state: tb.CommitTxn(data.draw(TXNS), data.draw(LWMS))),
            Rule("abort_txn", lambda data, state: tb.AbortTxn(data.draw(TXNS), data.draw(LWMS))),
            Rule("commit_txn", self._end_ongoing, lambda s: bool(s.ongoing)),
            Rule("roll_over_ledger", lambda data, state: tb.RollOverLedger()),
            Rule(
                "delete_ledger",
                lambda data, state: tb.DeleteLedger(state.ledgers[0].ledger_id),
                lambda s: len(s.ledgers) > 1,
            ),
            Rule("take_snapshot", lambda data, state: tb.TakeSnapshot()),
            Rule(
                "complete_first_snapshot",
                lambda data, state: tb.CompleteFirstSnapshot(),
                lambda s: s.status is tb.BufferStatus.FIRST_SNAPSHOTTING,
            ),
            Rule("start_recovery", lambda data, state: tb.StartRecovery(), lambda s: s.status is tb.BufferStatus.NONE),
            Rule(
                "complete_recovery",
                lambda data, state: tb.CompleteRecovery(),
                lambda s: s.status is tb.BufferStatus.INITIALIZING,
            ),
            Rule("crash", lambda data, state: Crash(), lambda s: s.status in _RUNNING),
            Rule("reload_topic", self._reload),
            Rule("close", self._unload, lambda s: s.status is not tb.BufferStatus.CLOSED_AND_CLEARED),
        ]

    def _append(self, data: st.DataObject, state: tb.BufferState) -> tb.AppendBufferToTxn:
        if data.draw(SETTLES, label="settle"):
            self.then(lambda s: tb.CompleteFirstSnapshot() if s.status is tb.BufferStatus.FIRST_SNAPSHOTTING else None)
        return tb.AppendBufferToTxn(data.draw(TXNS, label="txn"))

    def _end_ongoing(self, data: st.DataObject, state: tb.BufferState) -> tb.CommitTxn | tb.AbortTxn:
        """End a txn that is really ongoing, so commits and aborts are not all no-ops."""
        txn = data.draw(st.sampled_from(sorted(state.ongoing)), label="txn")
        lwm = data.draw(LWMS, label="lwm")
        return tb.CommitTxn(txn, lwm) if data.draw(st.booleans(), label="commit") else tb.AbortTxn(txn, lwm)

    def _recovery(self) -> None:
        self.then(
            lambda s: tb.StartRecovery() if s.status is tb.BufferStatus.NONE else None,
            lambda s: tb.CompleteRecovery() if s.status is tb.BufferStatus.INITIALIZING else None,
        )

    def _reload(self, data: st.DataObject, state: tb.BufferState) -> tb.ReloadTopic:
        """The topic is loaded again at any moment; with ``recover`` its recovery runs at once."""
        if data.draw(RECOVERS, label="recover"):
            self._recovery()
        return tb.ReloadTopic()

    def _unload(self, data: st.DataObject, state: tb.BufferState) -> tb.CloseTransactionBuffer:
        """Close, then delete the topic's snapshots (only after some history) or load it again."""
        if data.draw(CLEARS, label="clear") and len(state.entries) >= 6:
            self.then(lambda s: tb.ClearTransactionBufferSnapshot())
        else:
            self.then(lambda s: tb.ReloadTopic())
            self._recovery()
        return tb.CloseTransactionBuffer()

    def observations(self, state: Any) -> list[Observation]:
        plain: list[Observation] = [
            (name, {})
            for name in (
                "status",
                "max_read_position",
                "ongoing",
                "aborted",
                "dispatch",
                "last_message_id",
                "last_confirmed_entry",
                "low_water_marks",
                "snapshot",
                "snapshot_indexes",
                "snapshot_segments",
                "unsealed",
                "change_max_read_position_count",
                "ledgers",
                "recovered",
            )
        ]
        aborted: list[Observation] = [
            ("is_txn_aborted", {"txn_id": [most, least]}) for most in (0, 1) for least in range(5)
        ]
        return plain + aborted
