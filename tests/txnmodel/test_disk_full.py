"""A full disk (here: a file-size limit on the process, which fails writes past it with EFBIG)
stops the command with exit 2 and one line naming the file; no half-written history file is left
for a reader to take as a history, and the files written before it are kept whole."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from history_io.files import read_parquet


def _limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_history_file_that_does_not_fit_is_refused_whole(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "txnmodel", "simulate", "--ops", "30", "--out", str(out), "--jsonl", "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        preexec_fn=lambda: _limited(100_000),  # ctp.parquet is about 76 kB, ctp.jsonl several times that
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("txnmodel simulate: ") and line.endswith(": File too large") and str(out) in line
    assert line == f"txnmodel simulate: {out / 'ctp.jsonl'}: File too large"
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]  # no half file, hidden or not
    # the Parquet file written before the limit was hit is whole; the JSON Lines file is not there
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["ctp.parquet"]
    assert len(read_parquet(out / "ctp.parquet")["ctp-memory-seed0"]) > 100
