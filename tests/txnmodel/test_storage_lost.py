"""``simulate`` stops on a store lost for good (a full disk, corrupted ledger data): exit 2 and one
line saying why, the history recorded until then kept and marked incomplete in its run metadata,
and ``verify`` saying so (an ``unknown`` verdict of the ``run`` check) instead of passing it.

Before, the broker swallowed these as ordinary ledger errors: a run on a full disk exited 0 with
an empty history that verify passed, and under a file-size limit it died with a traceback."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from history_io.files import read_metadata, read_parquet


def _txnmodel(*argv: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def limited() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "txnmodel", *argv],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        preexec_fn=limited,
    )


def test_a_full_simulated_disk_stops_simulate_and_verify_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _txnmodel(
        "simulate", "--ledger", "file", "--disk", "sim", "--disk-capacity", "65536", "--ops", "100", "--out", str(out)
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("txnmodel simulate: ctp-file-seed0 stopped early")
    assert "No space left on device" in last and "marked incomplete" in last
    # the history recorded until then is kept, and its run metadata says why it is incomplete
    history = read_parquet(out / "ctp.parquet")["ctp-file-seed0"]
    assert len(history) > 50
    meta = read_metadata(out / "ctp.parquet")
    assert meta is not None
    run = meta["runs"]["ctp-file-seed0"]
    assert "no room to write" in run["incomplete"]
    assert run["disk_capacity"] == 65536
    # verify does not pass it: the run check is unknown (exit 1) and names why
    verdicts = tmp_path / "verdicts"
    checked = _txnmodel("verify", str(out), "--out", str(verdicts), "--json")
    assert checked.returncode == 1, checked.stderr[-2000:]
    (result,) = json.loads(checked.stdout)["histories"]
    assert result["checkers"]["run"]["verdict"] == "unknown"
    assert "incomplete: the run stopped early" in result["checkers"]["run"]["detail"]
    # the reproduce line says the capacity, so it reruns the same stopped run
    assert "--disk-capacity 65536" in (result["checkers"]["run"]["reproduce"] or "")
    # the same with the histories grouped across files
    grouped = _txnmodel("verify", str(out), "--out", str(verdicts), "--group-by-history", "--json", "--overwrite")
    assert grouped.returncode == 1, grouped.stderr[-2000:]
    (result,) = json.loads(grouped.stdout)["histories"]
    assert result["checkers"]["run"]["verdict"] == "unknown"
    # --unknown-ok is the caller's way to accept it
    assert _txnmodel("verify", str(out), "--out", str(verdicts), "--unknown-ok", "--overwrite").returncode == 0


def test_a_file_size_limit_on_the_real_disk_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """The journal hits the limit first (the run stops); the history file does not fit either,
    which is said on its own line: either way exit 2, no traceback, no half file."""
    out = tmp_path / "out"
    done = _txnmodel(
        "simulate",
        "--ledger",
        "file",
        "--ops",
        "100",
        "--data",
        str(tmp_path / "data"),
        "--out",
        str(out),
        "--quiet",
        limit=60_000,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "File too large" in done.stderr
    assert not [p for p in out.iterdir() if p.name.endswith((".parquet", ".tmp"))]


def test_disk_capacity_needs_the_simulated_disk(tmp_path: Path) -> None:
    done = _txnmodel("simulate", "--ledger", "file", "--disk-capacity", "1000", "--out", str(tmp_path / "o"))
    assert done.returncode == 2
    assert "--disk-capacity" in done.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())
