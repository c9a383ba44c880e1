"""Every check a ``txnmodel record`` workload names can fire at the workload's DEFAULT options.

For each workload and each check it names (``recording.workloads.CHECKS``), ``txnmodel serve`` runs
with the quirk that breaks that check (``engine.serve.quirks``: hide a message, deliver a delayed one
at once, ignore a redelivery request, ...), the workload records it with nothing but the broker's
URL and an output folder, and ``verify`` must flag that anomaly, citing operations of the history,
and no other, except where breaking the promise necessarily breaks another as seen from a client
(:data:`ALSO`, with the reason).  The broker is serve with its defaults, which are Pulsar's: a
delayed-delivery tick of 1 s, not strict, so a delayed message may come a tick early.

The planted catalogue mutants of ``test_planted.py`` do the same at other options; the clean runs
of ``test_clean.py`` show that the same workloads pass on the correct broker.
"""

from __future__ import annotations

import inspect
import tempfile
from typing import Any

import pytest

from engine.serve.quirks import QUIRKS
from history_io.files import read_parquet
from invariants.verify import VerifyOptions, check_histories
from recording import RecordOptions, record
from recording.workloads import CHECKS
from runners.serve import serve
from spec.config import Config
from tests.recording.conftest import Checked

# The quirk that breaks each check, and its rate (or, for deliver_late_ms, milliseconds).
BREAKS: dict[str, tuple[str, float]] = {
    "garbage-read": ("phantom_message", 0.2),
    "inconsistent-position": ("misplace_receipt", 0.3),
    "realtime-order": ("swap_positions", 1.0),
    "out-of-order-delivery": ("reorder_dispatch", 0.5),
    "lost-message": ("hide_message", 0.05),
    "early-delivery": ("ignore_delay", 1.0),
    # past the bound a non-strict broker gets (a tick, the receive loop, the slack: 1.6 s) even when
    # it releases the message a tick early
    "late-delivery": ("deliver_late_ms", 3_000.0),
    "lost-redelivery": ("ignore_redelivery", 1.0),
    "aborted-read": ("commit_aborts", 1.0),
    "premature-read": ("expose_open_txns", 0.5),
    "fractured-read": ("hide_txn_message", 1.0),
    # not every ack: a ctp transformer takes back what it could not acknowledge, and at 1 it would
    # never be done
    "duplicate-after-commit": ("lose_txn_acks", 0.2),
    "commit-and-abort": ("end_twice", 1.0),
}
assert {QUIRKS[quirk] for quirk, _ in BREAKS.values()} == set(BREAKS)

# Anomalies that come with a broken promise, as a client sees it, and the delivery oracle's names
# for the same facts (``invariants/client_visible.py`` judges the history from the rules pages
# alone: a message no receive ever got is its late-visibility, a message shown while its
# transaction was open its early-visibility, one delivered again after its ack committed its
# redelivered-after-ack).
ALSO: dict[str, set[str]] = {
    "lost-message": {"delivery:late-visibility"},
    # The hidden message was committed and owed to the workload's Exclusive readers, which received
    # later ones of its partition: Jepsen's Kafka taxonomy (invariants/queue/pulsar.py) names that
    # skipped, committed message too (TB-17, TB-19).
    "fractured-read": {"delivery:late-visibility", "poll-skip", "lost-write"},
    # A broker that shows a transaction's messages before its commit cannot know which transactions
    # will abort: it shows theirs too.
    "premature-read": {"aborted-read", "delivery:early-visibility"},
    "duplicate-after-commit": {"delivery:redelivered-after-ack"},
    # A message held past the run's final drain never came: late, and lost to the drain.
    "late-delivery": {"lost-message", "delivery:late-visibility"},
    # swap_positions shows each block of entries in its swapped order by holding the block's first
    # half for its second; on a loaded machine the second half may come after the hold (500 ms), and
    # the first half then goes out first: a real out-of-order dispatch of the positions shown.
    "realtime-order": {"out-of-order-delivery"},
}

CASES = [(workload, check) for workload, checks in CHECKS.items() for check in checks]


def _record_with_quirk(workload: str, quirk: str, value: float) -> Checked:
    out = tempfile.mkdtemp(prefix=f"teeth-{workload}-")
    # serve's defaults (Pulsar's broker.conf defaults, transactions on) with one quirk
    with serve(config=Config(transaction_coordinator_enabled=True), faults={quirk: value}) as url:
        result = record(RecordOptions(url=url, workload=workload, out=out, progress=False))
    histories = read_parquet(result.path)
    (ops,) = histories.values()
    return Checked(result, ops, check_histories(histories, str(result.path), VerifyOptions()))


def test_only_the_url_and_the_folder_are_given() -> None:
    """The teeth are at the defaults: the test sets no option that changes what the workload does."""
    source = inspect.getsource(_record_with_quirk)
    assert "RecordOptions(url=url, workload=workload, out=out, progress=False)" in source


@pytest.mark.parametrize(("workload", "check"), CASES, ids=[f"{w}-{c}" for w, c in CASES])
def test_each_named_check_fires_at_the_defaults(workload: str, check: str) -> None:
    quirk, value = BREAKS[check]
    checked = _record_with_quirk(workload, quirk, value)
    found = checked.anomalies
    assert check in found, (quirk, {name: len(a) for name, a in found.items()}, checked.transactional["applicability"])
    extra = set(found) - {check} - ALSO.get(check, set())
    assert not extra, {name: found[name][:2] for name in extra}
    cited: list[Any] = found[check][0]["ops"]
    assert cited and all(0 <= i < len(checked.ops) for i in cited)
