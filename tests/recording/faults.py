"""Recording from ``txnmodel serve`` with faults injected (shared by the faults test and the sweep
over many seeds that the report of the issue quotes)."""

from __future__ import annotations

import random
import threading
from typing import Any

from runners.serve import ServeHandle, finish, start
from tests.recording.conftest import CONFIG, Checked, record_and_check

# Serve's fault kinds and rates ("on"), less two that no broker a client can rely on produces:
# * a dropped request frame: a dropped FLOW leaves a consumer without permits for good (until it
#   reconnects), which no TCP connection can do (it loses a frame only by losing the connection),
#   and the final drain would then see a subscription the broker starved rather than one it emptied;
# * a short transaction timeout: the coordinator aborts a transaction long before the timeout its
#   client asked for, which a client's view cannot tell from a broker breaking TC-18 (the delivery
#   oracle rightly takes the transaction as certainly open until then, and reports what came past
#   its entries as early-visibility).
FAULTS = "on,drop_request=0,short_txn_timeout=0"
# A nemesis besides the random faults: a component fault every 200-600 ms while the writers run
# (a run lasts seconds; serve's own schedule draws one every 1-4 s).
NEMESIS = ("broker_crash", "coordinator_crash", "topic_unload", "connection_drop")


# How long the nemesis waits for the workload's clients to open before its first fault.
SETUP_S = 1.5


class Nemesis:
    """Injects component faults on a seeded schedule until stopped; then heals the broker."""

    def __init__(self, handle: ServeHandle, seed: int) -> None:
        self.handle = handle
        self.rng = random.Random(seed)
        self.stopped = threading.Event()
        self.injected: list[str] = []
        self.thread = threading.Thread(target=self._run, name="nemesis", daemon=True)

    def _run(self) -> None:
        # As Jepsen's nemesis starts once its clients are open: a fault before the workload's producers
        # and consumers exist can keep a short run from sending anything, which proves nothing.
        if self.stopped.wait(SETUP_S):
            return
        while not self.stopped.wait(self.rng.uniform(0.2, 0.6)):
            kind = self.rng.choice(NEMESIS)
            if self.handle.inject(kind):
                self.injected.append(kind)

    def heal(self) -> None:
        self.stopped.set()
        self.thread.join()
        self.handle.heal()


def record_with_faults(
    workload: str,
    seed: int,
    *,
    seconds: float = 3.0 + SETUP_S,  # three seconds of faults after setup
    ledger: str = "memory",
    data: Any = None,
    liveness: bool = False,
) -> tuple[Checked, list[str]]:
    """Record ``workload`` for ``seconds`` under faults; the verdicts and the faults the nemesis injected."""
    handle = start(config=CONFIG, seed=seed, faults=FAULTS, ledger=ledger, data=data)
    nemesis = Nemesis(handle, seed)
    nemesis.thread.start()
    try:
        checked = record_and_check(
            handle.url,
            workload,
            ops=None,
            seconds=seconds,
            seed=seed,
            liveness=liveness,  # no liveness bound holds while a broker crashes
            txn_timeout_ms=3_000,
            before_drain=nemesis.heal,  # faults stop before the final drain, as a nemesis before final reads
            max_drain_s=60.0,
        )
    finally:
        nemesis.stopped.set()
        handle.stop()
        finish(handle)
    return checked, nemesis.injected
