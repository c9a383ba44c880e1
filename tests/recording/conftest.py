"""Helpers for the tests that record histories from ``txnmodel serve`` and verify them.

Every server binds 127.0.0.1 on a free port; the recorder uses short client timeouts and small
workloads so that a run takes seconds (the ack-timeout workload waits out the official client's
10 s minimum once).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from history_io.files import read_parquet
from invariants.verify import VerdictRow, VerifyOptions, check_histories
from recording import RecordOptions, RecordResult, record
from spec.config import Config
from spec.history import Operation

# Strict delayed delivery with a short tick, as tests/serve uses: "never early" to the millisecond.
TICK_MS = 20
CONFIG = Config(
    transaction_coordinator_enabled=True,
    is_delayed_delivery_deliver_at_time_strict=True,
    delayed_delivery_tick_time_millis=TICK_MS,
)
WORKLOADS = ("produce-consume", "nack", "delayed", "ctp", "multi", "ack-timeout")


@dataclass
class Checked:
    """A recorded history and what verify said of it."""

    result: RecordResult
    ops: list[Operation]
    rows: list[VerdictRow]

    @property
    def transactional(self) -> dict[str, Any]:
        (row,) = [r for r in self.rows if r.checker == "transactional"]
        found: dict[str, Any] = json.loads(row.detail)
        return found

    @property
    def anomalies(self) -> dict[str, list[dict[str, Any]]]:
        """The Elle-style anomalies (each in the row of its group: transactional or delivery), and
        the delivery oracle's violations where it ran."""
        out: dict[str, list[dict[str, Any]]] = {}
        for row in self.rows:
            if row.checker in ("transactional", "delivery") and row.detail.startswith("{"):
                for anomaly in json.loads(row.detail).get("anomalies", []):
                    out.setdefault(anomaly["name"], []).append(anomaly)
            if row.checker == "delivery" and row.detail.startswith("{"):
                for violation in json.loads(row.detail).get("violations", []):
                    out.setdefault(f"delivery:{violation['name']}", []).append(violation)
        return out

    @property
    def applicability(self) -> dict[str, dict[str, Any]]:
        """Each Elle-style check's statement of what it had to judge (each row states its own)."""
        found: dict[str, dict[str, Any]] = {}
        for row in self.rows:
            if row.checker in ("transactional", "delivery") and row.detail.startswith("{"):
                found.update(json.loads(row.detail).get("applicability", {}))
        return found

    def applies(self, check: str) -> bool:
        return bool(self.applicability[check]["applies"])

    def op(self, index: int) -> Operation:
        return self.ops[index]


def record_and_check(url: str, workload: str, *, ops: int | None = 60, **options: Any) -> Checked:
    out = tempfile.mkdtemp(prefix=f"record-{workload}-")
    settings: dict[str, Any] = {
        "clients": 3,
        "operation_timeout_s": 3,
        "send_timeout_ms": 2_000,
        "broker_tick_ms": TICK_MS,
        "broker_strict_delay": True,
        "progress": False,
        "max_drain_s": 40.0,
    }
    settings.update(options)
    result = record(RecordOptions(url=url, workload=workload, out=out, ops=ops, **settings))
    histories = read_parquet(result.path)
    (ops_read,) = histories.values()
    rows = check_histories(histories, str(result.path), VerifyOptions())
    return Checked(result, ops_read, rows)


def verdicts(rows: Sequence[VerdictRow]) -> dict[str, str]:
    return {row.checker: row.verdict for row in rows}


def passed(rows: Sequence[VerdictRow]) -> bool:
    """Every checker passed, save the transactional one in a history without transactions, which
    says it had nothing to judge (``skipped``: neither a pass nor a failure); the delivery oracle
    judges every history."""
    without_txn = {row.history for row in rows if row.checker == "transactional" and row.verdict == "skipped"}
    return all(
        row.verdict == "ok" or (row.checker == "transactional" and row.verdict == "skipped") for row in rows
    ) and all(any(r.history == h and r.checker == "delivery" and r.verdict == "ok" for r in rows) for h in without_txn)
