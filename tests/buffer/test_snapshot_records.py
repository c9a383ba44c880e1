"""What a segmented snapshot's durable writes show (``invariants.buffer.snapshot_records_problem``).

A segment sealed before its unsealed list was full recovers the same aborted set, so only the
records on the snapshot topics show it (TB-22); the history check reads them off a buffer's
``recover`` row (tests/engine/broker/test_recovery_decoding.py has an engine slip caught that way).
"""

from __future__ import annotations

from invariants.buffer import snapshot_records_problem
from reference import buffer as tb
from spec.config import Config
from spec.types import Position, TxnID

TOPIC = "persistent://public/default/in-partition-0"
SEGMENTED = Config().with_overrides(
    {"transactionBufferSegmentedSnapshotEnabled": True, "transactionBufferSnapshotSegmentSize": 64}
)


def _segment(sequence_id: int, ids: int) -> tb.WriteSnapshotSegment:
    aborts = tuple(TxnID(0, sequence_id * 10 + i) for i in range(ids))
    return tb.WriteSnapshotSegment(tb.TransactionBufferSnapshotSegment(TOPIC, sequence_id, Position(3, ids), aborts))


def test_segments_are_sealed_full() -> None:
    assert tb.segment_capacity(SEGMENTED, TOPIC) == 4
    assert snapshot_records_problem(SEGMENTED, TOPIC, [_segment(0, 4), _segment(1, 5)]) is None  # 5: an upgrade
    found = snapshot_records_problem(SEGMENTED, TOPIC, [_segment(0, 4), _segment(1, 3)])
    assert found == "snapshot record 1: segment 1 sealed with 3 aborted txn ids, below the segment capacity 4 (TB-22)"


def test_single_snapshot_mode_judges_no_segment() -> None:
    # records a segmented configuration wrote stay readable after it is switched off (TB-24)
    assert snapshot_records_problem(Config(), TOPIC, [_segment(0, 1)]) is None
