"""Recording from ``txnmodel serve`` with faults injected (shared by the faults test and the report
script that runs many seeds)."""

from __future__ import annotations

from typing import Any

from txnmodel.serve import finish, start

from .conftest import CONFIG, Checked, record_and_check

# Serve's fault kinds and rates ("on"), less one: a dropped request frame.  A dropped FLOW leaves a
# consumer without permits for good (until it reconnects), which no TCP connection can do (it
# loses a frame only by losing the connection), and the final drain would then see a subscription
# the broker starved rather than one it emptied.
FAULTS = "on,drop_request=0"


def record_with_faults(workload: str, seed: int, *, ops: int = 60, ledger: str = "memory", data: Any = None) -> Checked:
    handle = start(config=CONFIG, seed=seed, faults=FAULTS, ledger=ledger, data=data)
    try:
        return record_and_check(
            handle.url,
            workload,
            ops=ops,
            seed=seed,
            liveness=False,  # no liveness bound holds while a broker crashes
            txn_timeout_ms=3_000,
            before_drain=handle.heal,  # faults stop before the final drain, as a nemesis before final reads
            max_drain_s=60.0,
        )
    finally:
        handle.stop()
        finish(handle)
