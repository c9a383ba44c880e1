"""Everything a run writes for itself goes under one private folder made for the run, removed at exit.

The Spark runner used to write its log4j configuration under a fixed name in the temporary folder
(following a symlink planted there).  Now: Spark's log4j file, the driver JVM's temporary files and
Spark's local folder all live in the run's ``tempfile.mkdtemp`` folder (fresh name, mode 0700,
never a planted link), and nothing is left in the temporary folder after the run.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from history_io.files import write_parquet
from history_io.folders import scratch_folder
from invariants.models import random_register_history


def test_the_scratch_folder_is_private_and_one_per_process() -> None:
    log4j = scratch_folder("log4j")
    assert scratch_folder("log4j") == log4j and scratch_folder("jvm").parent == log4j.parent
    root = log4j.parent
    assert root.name.startswith("txnmodel-run-") and not root.is_symlink()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and stat.S_IMODE(log4j.stat().st_mode) == 0o700
    assert root.stat().st_uid == os.getuid()


def test_spark_verify_leaves_nothing_in_the_temporary_folder_and_follows_no_link(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    for name in ("log4j2.properties", "txnmodel-log4j2.properties", "txnmodel-packages.zip"):
        (temp / name).symlink_to(target)
    planted = sorted(p.name for p in temp.iterdir())
    history = tmp_path / "h.parquet"
    write_parquet(history, random_register_history(1, ops=20, clients=2))
    env = {**os.environ, "TMPDIR": str(temp)}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run(
        [sys.executable, "-m", "txnmodel", "verify", str(history), "--out", str(tmp_path / "v"), "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert target.read_text() == "keep me"
    assert sorted(p.name for p in temp.iterdir()) == planted  # nothing of the run's is left behind
