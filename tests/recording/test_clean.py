"""Every workload recorded from ``txnmodel serve`` (memory and file ledgers) verifies clean, and the
checks that should have had something to judge did: a clean verdict is not a vacuous one."""

from __future__ import annotations

import tempfile

import pytest

from runners.serve import serve
from spec.history import OpType
from tests.recording.conftest import CONFIG, WORKLOADS, record_and_check, verdicts

# What each workload must give the checkers to judge (beyond garbage and positions).
MUST_APPLY = {
    "produce-consume": {"lost-message", "out-of-order-delivery", "realtime-order", "inconsistent-position"},
    "nack": {"lost-message", "lost-redelivery"},
    "ack-timeout": {"lost-message", "lost-redelivery"},
    "delayed": {"early-delivery", "late-delivery", "lost-message", "out-of-order-delivery"},
    "ctp": {"aborted-read", "premature-read", "fractured-read", "duplicate-after-commit", "lost-message"},
    "multi": {"aborted-read", "premature-read", "fractured-read", "lost-message", "commit-and-abort"},
}


@pytest.mark.parametrize("ledger", ["memory", "file"])
@pytest.mark.parametrize("workload", WORKLOADS)
def test_every_workload_verifies_clean(workload: str, ledger: str) -> None:
    data = tempfile.mkdtemp(prefix="record-ledger-") if ledger == "file" else None
    with serve(config=CONFIG, ledger=ledger, data=data) as url:
        checked = record_and_check(url, workload, ops=40 if workload == "ack-timeout" else 60)
    # every checker that applies to a client history (transactional, and the delivery oracle) passes;
    # the transactional one has nothing to judge (skipped, no pass) where no transaction was used
    txn_verdict = "ok" if workload in ("ctp", "multi") else "skipped"
    assert set(verdicts(checked.rows).values()) <= {"ok", txn_verdict} and "transactional" in verdicts(checked.rows), (
        checked.anomalies,
        [row.detail for row in checked.rows if row.verdict != "ok"],
    )
    missing = {check for check in MUST_APPLY[workload] if not checked.applies(check)}
    assert not missing, {c: checked.applicability[c] for c in missing}
    # every subscribe states late-visibility's slack: the recorder's own plus the run's longest send
    sends = [op for op in checked.ops if op.f == "send" and op.type is OpType.OK and op.completed_at is not None]
    longest = max(((op.completed_at or 0) - op.invoked_at for op in sends), default=0)
    assert {op.args.get("visible_slack_ms") for op in checked.ops if op.f == "subscribe"} == {500 + longest}
    run = checked.result.metadata["runs"][checked.result.history]
    assert not run["drain_timed_out"]
    assert run["transactions"] == (workload in ("ctp", "multi"))
    # the transactional checks apply exactly when transactions were used
    assert checked.applies("commit-and-abort") == (workload in ("ctp", "multi"))
