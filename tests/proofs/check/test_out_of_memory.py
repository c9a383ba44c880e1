"""``txnmodel check`` out of memory: a typed one-line message (what ran out, how far the run got,
what to do) and exit 2, never an internal error; the same under a real address-space limit."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from proofs.check.explore import MemoryVisited
from proofs.check.fpset import SpillingVisited
from txnmodel.cli import main
from txnmodel.commands import check

ROOT = Path(__file__).resolve().parents[3]


def _failing_after(calls: int, error: BaseException, original: object) -> object:
    """``original`` (a method) that raises ``error`` from its ``calls``-th call on."""
    count = [0]

    def method(self: object, *args: object) -> object:
        count[0] += 1
        if count[0] >= calls:
            raise error
        return original(self, *args)  # type: ignore[operator]

    return method


def test_a_spilled_run_out_of_memory_says_so_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The allocation numpy refuses when a run is written (the 3rd spill).
    monkeypatch.setattr(
        SpillingVisited, "_spill", _failing_after(3, MemoryError("Unable to allocate 381. MiB"), SpillingVisited._spill)
    )
    made: list[SpillingVisited] = []
    original_init = SpillingVisited.__init__

    def init(self: SpillingVisited, *args: object, **kwargs: object) -> None:
        original_init(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(SpillingVisited, "__init__", init)
    code = main(["check", "--model", "ctp", "--no-liveness", "--spill", "40", "--json", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 2
    line = captured.err.strip().splitlines()[-1]
    assert line.startswith("txnmodel check: out of memory exploring model ctp after ")
    assert "Unable to allocate 381. MiB" in line and "no verdict" in line and "try --spill 10" in line
    assert "internal error" not in captured.err and "Traceback" not in captured.err
    report = json.loads(captured.out)
    assert report["error"] == "out-of-memory" and report["exit"] == 2 and report["model"] == "ctp"
    (seen,) = made
    assert report["states"] >= 80  # two runs of 40 were spilled before the third failed
    assert not seen.directory.exists()  # the spill directory is removed


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (MemoryError(), "MemoryError"),
        (OSError(errno.ENOMEM, "Cannot allocate memory"), "a memory map was refused (Cannot allocate memory)"),
    ],
)
def test_an_in_memory_run_out_of_memory_advises_spilling(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    said: str,
) -> None:
    monkeypatch.setattr(MemoryVisited, "add_level", _failing_after(30, error, MemoryVisited.add_level))
    code = main(["check", "--model", "ctp", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "internal error" not in err
    assert "out of memory exploring model ctp after " in err and said in err
    assert "add --no-liveness --spill 250000" in err  # liveness was on: its graph is in memory too


def test_other_os_errors_are_not_called_out_of_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    full = OSError(errno.ENOSPC, "No space left on device", "/tmp/txnmodel-seen-x/run-000003.npy")
    monkeypatch.setattr(SpillingVisited, "_spill", _failing_after(2, full, SpillingVisited._spill))
    code = main(["check", "--model", "ctp", "--no-liveness", "--spill", "40", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "out of memory" not in err and "internal error" not in err
    assert "run-000003.npy" in err


def test_a_run_under_a_real_address_space_limit_ends_with_the_typed_message(tmp_path: Path) -> None:
    """The child imports what the run needs, then limits its address space to 40 MiB over what it
    has mapped: the in-memory seen set of a 1.3M-state model cannot fit."""
    script = textwrap.dedent(
        """
        import resource, sys
        import numpy
        import proofs.check.explore, proofs.check.model, proofs.check.models, proofs.check.fpset
        from txnmodel.cli import main
        with open("/proc/self/status") as status:
            mapped = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
        limit = mapped + 40 * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        sys.exit(main(sys.argv[1:]))
        """
    )
    argv = ["check", "--model", "end-path", "--bound", "partitions=2", "--bound", "loss=1", "--bound", "duplicate=1"]
    argv += ["--no-liveness", "--no-progress", "--out", str(tmp_path)]
    child = subprocess.run(
        [sys.executable, "-c", script, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=900,  # a guard, not a measurement: the child needs a few CPU seconds
    )
    assert child.returncode == 2, child.stderr
    assert "txnmodel check: out of memory exploring model end-path after " in child.stderr
    assert "add --spill 250000" in child.stderr and "internal error" not in child.stderr


def test_the_message_names_what_to_do() -> None:
    spilled = check.CheckOutOfMemory(
        "end-path", states=12_345_678, depth=35, frontier=4_000, spill=250_000, liveness=False, detail="MemoryError"
    )
    assert "after 12,345,678 distinct states" in str(spilled) and "try --spill 62500" in str(spilled)
