"""``txnmodel prove all`` gives the same verdicts, and does the same Z3 work, on an idle machine and
beside two CPU-bound processes: budgets are resource counts (rlimit), not seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

# A busy loop that also ends on its own, so a killed test run leaves nothing spinning for long.
_BUSY = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end:\n    pass\n"


def _prove_all() -> list[dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "txnmodel", "prove", "all", "--json"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows: list[dict[str, Any]] = json.loads(done.stdout)
    return rows


def _figures(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["machine"], r["property"], r["verdict"], r["rlimit_used"], r["rlimit_total"]) for r in rows]


@pytest.mark.slow
def test_prove_all_is_the_same_idle_and_under_load() -> None:
    idle = _prove_all()
    busy = [subprocess.Popen([sys.executable, "-c", _BUSY]) for _ in range(2)]
    try:
        loaded = _prove_all()
    finally:
        for process in busy:
            process.kill()
            process.wait()
    assert len(idle) > 200
    assert {r["verdict"] for r in idle} == {"proved"}
    assert _figures(loaded) == _figures(idle)
    # Every query keeps a wide margin: the first seed's share of the budget is 10x what it needs.
    thin = [
        (r["machine"], r["property"], r["rlimit_used"]) for r in idle if r["rlimit_used"] * 10 > r["rlimit"] * 3 // 5
    ]
    assert thin == []
