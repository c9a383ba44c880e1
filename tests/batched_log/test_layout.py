"""What the thresholds leave in a durable log (``invariants.batched_log``'s layout predicates).

Each rule of adding records is shown passing at its boundary and failing one past it; the
history check reads the same predicate off a ``recover`` row's entries
(tests/engine/broker/test_recovery_decoding.py has a writer slip caught that way).
"""

from __future__ import annotations

import pytest

from invariants.batched_log import batch_layout_problem, entry_layout_problem, log_layout_problem
from reference import batched_log as bl
from spec.config import Config
from spec.envelope import LogKind, encode_batch, encode_plain
from spec.pb import PulsarTransactionMetadata_pb2 as pb
from spec.types import Position

ON = bl.WriterConfig(LogKind.TRANSACTION_LOG, enabled=True, max_records=3, max_size=100, max_delay_ms=1)
OFF = bl.WriterConfig(LogKind.TRANSACTION_LOG, enabled=False, max_records=3, max_size=100, max_delay_ms=1)


@pytest.mark.parametrize(
    "sizes,rule",
    [
        ((10, 10, 10), None),  # maxRecords exactly
        ((10, 10, 10, 10), "BW-9"),
        ((99,), None),  # just below maxSize
        ((100,), "BW-8"),  # a large record is written alone
        ((60, 39, 90), None),  # 99 bytes before the last: not yet flushed
        ((60, 40, 1), "BW-10"),  # 100 bytes before the last: it should have been flushed then
    ],
)
def test_a_batch_against_the_thresholds(sizes: tuple[int, ...], rule: str | None) -> None:
    problem = batch_layout_problem(ON, sizes)
    assert (problem is None) if rule is None else (problem is not None and f"({rule})" in problem)


def test_plain_entries_against_the_switch() -> None:
    assert entry_layout_problem(ON, False, (100,)) is None
    assert "(BW-8)" in (entry_layout_problem(ON, False, (99,)) or "")
    assert entry_layout_problem(OFF, False, (5,)) is None
    assert "(BW-5)" in (entry_layout_problem(OFF, True, (5, 5)) or "")
    never = bl.WriterConfig(LogKind.TRANSACTION_LOG, enabled=True, max_records=1, max_size=100, max_delay_ms=1)
    assert "(BW-5)" in (entry_layout_problem(never, True, (5,)) or "")  # not effective (BW-2)
    assert "(BW-2)" in (batch_layout_problem(never, (5,)) or "")


def _record(txn: int) -> pb.TransactionMetadataEntry:
    return pb.TransactionMetadataEntry(
        metadata_op=pb.TransactionMetadataEntry.NEW, txnid_most_bits=0, txnid_least_bits=txn, timeout_ms=1000
    )


def test_a_durable_log_is_read_batch_by_batch_and_plain_entries_are_left_alone() -> None:
    config = Config().with_overrides({"transactionLogBatchedWriteMaxRecords": 2})
    cfg = bl.writer_config(config, LogKind.TRANSACTION_LOG)
    fine = [
        bl.LoggedEntry(Position(3, 0), encode_batch([_record(1), _record(2)], LogKind.TRANSACTION_LOG)),
        # plain: whether the switch was on when it was written is not in the log (BW-22)
        bl.LoggedEntry(Position(3, 1), encode_plain(_record(3))),
    ]
    assert log_layout_problem(cfg, fine) is None
    three = encode_batch([_record(4), _record(5), _record(6)], LogKind.TRANSACTION_LOG)
    found = log_layout_problem(cfg, [*fine, bl.LoggedEntry(Position(3, 2), three, deleted=True)])
    assert found == "entry 3:2: a batch of 3 records, more than maxRecords 2 (BW-9)"


def test_with_the_switch_known_plain_entries_are_judged_too() -> None:
    config = Config().with_overrides({"transactionLogBatchedWriteMaxRecords": 2})
    on = bl.writer_config(config, LogKind.TRANSACTION_LOG, enabled=True)
    off = bl.writer_config(config, LogKind.TRANSACTION_LOG, enabled=False)
    plain = [bl.LoggedEntry(Position(3, 0), encode_plain(_record(1)))]
    batch = [bl.LoggedEntry(Position(3, 1), encode_batch([_record(2)], LogKind.TRANSACTION_LOG))]
    assert log_layout_problem(on, plain) is None  # the switch unknown: a plain entry says nothing
    assert "(BW-8)" in (log_layout_problem(on, plain, switch_known=True) or "")
    assert log_layout_problem(off, plain, switch_known=True) is None
    assert log_layout_problem(off, batch) is None  # a batch of one within the thresholds
    assert "(BW-5)" in (log_layout_problem(off, batch, switch_known=True) or "")
