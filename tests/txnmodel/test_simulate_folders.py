"""``txnmodel simulate``'s folders and the line that reproduces a history.

* a non-empty ``--out`` or ``--data`` is refused unless ``--overwrite``, which starts every run from
  nothing: the same seed then gives the same history, byte for byte (reusing an old ledger store
  gave another history, and a "reproduce with seed" that did not reproduce);
* a folder in use by another run is refused (an ``fcntl`` lock), before any work;
* every verdict of a simulated history carries the command that reruns it, and running that command
  gives the very same history.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from history_io.files import read_metadata, read_parquet
from history_io.folders import LOCK_NAME, exclusive_folder
from txnmodel.cli import main
from txnmodel.commands.simulate import reproduce_argv, reproduce_command

SMALL = ["--ops", "6", "--quiet"]


def _simulate(*argv: str) -> int:
    return main(["simulate", *argv, *SMALL])


def test_a_non_empty_out_or_data_is_refused_unless_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, data = tmp_path / "out", tmp_path / "data"
    assert _simulate("--seed", "3", "--ledger", "file", "--data", str(data), "--out", str(out)) == 0
    first = (out / "ctp.parquet").read_bytes()
    capsys.readouterr()
    assert _simulate("--seed", "3", "--ledger", "file", "--data", str(data), "--out", str(out)) == 2
    assert "--out" in capsys.readouterr().err and (out / "ctp.parquet").read_bytes() == first
    (out / "ctp.parquet").unlink()
    assert _simulate("--seed", "3", "--ledger", "file", "--data", str(data), "--out", str(out)) == 2
    err = capsys.readouterr().err
    assert f"--data {data}: not empty" in err
    (out / "notes.txt").write_text("mine")
    assert _simulate("--seed", "3", "--ledger", "file", "--data", str(data), "--out", str(out), "--overwrite") == 0
    assert (out / "ctp.parquet").read_bytes() == first  # the old store was removed: the same history again
    assert (out / "notes.txt").read_text() == "mine"  # what simulate did not write is left alone
    assert sorted(p.name for p in data.iterdir()) == sorted([LOCK_NAME, "ctp-seed3"])


def test_a_folder_in_use_is_refused_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with exclusive_folder(out, "--out", overwrite=False, ours=lambda _: False):
        done = subprocess.run(
            [sys.executable, "-m", "txnmodel", "simulate", "--out", str(out), *SMALL],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 2
    assert f"--out {out}: in use by another txnmodel run (pid " in done.stderr
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]  # nothing was run, nothing written


@pytest.mark.parametrize(
    "options",
    [
        ["--workload", "all", "--histories", "3", "--seed", "1", "--ledger", "file"]
        + [
            arg
            for flag in ("--fault-mix", "--batching", "--unsubscribe", "--cumulative", "--redeliver")
            for arg in (flag, "mixed")
        ],
        [
            "--workload",
            "delayed",
            "--seed",
            "2",
            "--batching",
            "on",
            "--faults",
            "off",
            "--clients",
            "3",
            "--partitions",
            "3",
            "--key-shared",
            "on",
            "--delayed-tracker",
            "bucket",
            "--duration",
            "40000",
            "--deadline",
            "900000",
        ],
    ],
)
def test_every_verdict_carries_a_command_that_reproduces_its_history(
    tmp_path: Path, options: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    assert _simulate(*options, "--out", str(out)) == 0
    assert main(["verify", str(out), "--local", "--no-progress", "--out", str(tmp_path / "verdicts")]) == 0
    verdicts = pq.read_table(tmp_path / "verdicts" / "verdicts.parquet").to_pylist()
    runs = {h: run for f in out.glob("*.parquet") for h, run in (read_metadata(f) or {"runs": {}})["runs"].items()}
    assert verdicts and {row["history"] for row in verdicts} == set(runs)
    monkeypatch.chdir(tmp_path)
    for row in verdicts:
        command = row["reproduce"]
        assert command == reproduce_command(row["history"], runs[row["history"]])
        argv = shlex.split(command)
        assert argv[:2] == ["txnmodel", "simulate"]
        if (tmp_path / argv[-1]).exists():
            continue  # another checker's row of the same history
        assert main([*argv[1:], "--quiet"]) == 0
        (again,) = [read_parquet(f) for f in (tmp_path / argv[-1]).glob("*.parquet")]
        original = next(
            h for f in out.glob("*.parquet") for name, h in read_parquet(f).items() if name == row["history"]
        )
        assert again == {row["history"]: original}


def test_a_run_the_command_line_cannot_say_gets_no_command() -> None:
    from engine.simulation.workloads import RunSpec

    run = RunSpec(workload="ctp", seed=1, ops=5).to_json()
    assert reproduce_argv(run) is not None
    assert reproduce_argv({**run, "fault_rates": {**run["fault_rates"], "drop_request": 0.5}}) is None  # other rates
    assert reproduce_argv({**run, "config": {"transactionBufferSnapshotSegmentSize": 1}}) is None
    assert reproduce_argv({k: v for k, v in run.items() if k != "clients"}) is None
