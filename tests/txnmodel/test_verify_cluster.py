"""``txnmodel verify`` on a real standalone Spark cluster (one master, two workers on 127.0.0.1,
started from PySpark's own launcher) gives the very verdicts of local Spark and of the in-process
run, and the executors write them.  Each run is the command line in a process of its own."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from history_io.files import write_parquet
from invariants.models import random_register_history
from spec.history import OpType
from tests.invariants.synthetic import generate
from tests.txnmodel.standalone_spark import standalone_cluster

ROOT = Path(__file__).resolve().parents[2]


def _corpus(folder: Path) -> None:
    """Register histories in three files (one illegal), transactional ones (one losing a message)
    and one engine history (per-object machine models, the transactional and delivery checks)."""
    from engine.simulation.workloads import RunSpec, run

    good = {f"register-{s}": random_register_history(s, ops=80, clients=5, crash=0.1) for s in range(9)}
    names = sorted(good)
    for k in range(3):
        write_parquet(folder / f"registers-{k}.parquet", {name: good[name] for name in names[k::3]})
    broken = random_register_history(99, ops=40, clients=3, history="bad-register")
    read = next(o for o in broken if o.f == "read" and o.type is OpType.OK)
    broken = [o if o is not read else dataclasses.replace(o, result="123", _result=None) for o in broken]
    txn = {f"txn-{s}": [dataclasses.replace(o, history=f"txn-{s}") for o in generate(s)] for s in range(4)}
    lost = [dataclasses.replace(o, history="lost") for o in generate(7)]
    victim = next(o for o in lost if o.f == "receive" and o.returned is not None)
    txn["lost"] = [o for o in lost if o is not victim]
    write_parquet(folder / "mixed.parquet", {"bad-register": broken, **txn})
    engine = run(RunSpec(workload="ctp", seed=3, ops=12, faults=True)).operations
    write_parquet(folder / "engine.parquet", {engine[0].history: engine})


def _verify(folder: Path, out: Path, *where: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "txnmodel",
            "verify",
            str(folder),
            "--json",
            "--no-counterexamples",
            "--out",
            str(out),
            *where,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 1, done.stderr[-3000:]  # the two broken histories
    result: dict[str, Any] = json.loads(done.stdout)
    result["stderr"] = done.stderr
    return result


def _table(out: Path) -> list[dict[str, Any]]:
    """The verdict rows, without what depends on timing (seconds) or on where the file lay."""
    rows = pq.read_table(out / "verdicts.parquet").to_pylist()
    for row in rows:
        row.pop("seconds")
        row["file"] = Path(row["file"]).name
        if row["detail"].startswith('{"models"'):
            detail = json.loads(row["detail"])
            for figures in detail["models"].values():
                figures.pop("seconds")
            row["detail"] = json.dumps(detail, sort_keys=True)
    return sorted(rows, key=lambda row: (row["history"], row["checker"]))


@pytest.mark.slow
def test_verdicts_are_identical_in_process_on_local_spark_and_on_a_standalone_cluster(tmp_path: Path) -> None:
    folder = tmp_path / "histories"
    folder.mkdir()
    _corpus(folder)
    local = _verify(folder, tmp_path / "local", "--local")
    assert "in this process (--local)" in local["stderr"]
    spark = _verify(folder, tmp_path / "spark", "--spark", "--master", "local[2]")
    with standalone_cluster(workers=2, cores=1) as url:
        assert url.startswith("spark://127.0.0.1:")
        cluster = _verify(folder, tmp_path / "cluster", "--spark", "--master", url)
        small = _verify(folder, tmp_path / "small", "--master", url)  # too small to pay: checked here
    assert "on Spark (--spark)" in cluster["stderr"]
    assert "in this process (" in small["stderr"] and _table(tmp_path / "small") == _table(tmp_path / "local")
    expected = _table(tmp_path / "local")
    # 9 + 1 register histories (linearizability), 5 transactional ones and the engine history
    # (transactional and delivery rows; the engine one a linearizability row too)
    assert len(expected) == 10 + 5 * 2 + 3 and {r["verdict"] for r in expected} == {"ok", "illegal"}
    assert _table(tmp_path / "spark") == expected
    assert _table(tmp_path / "cluster") == expected
    assert _same_verdicts(local, spark, cluster)
    # The executors wrote the verdicts, one part per task: several parts, none by this process.
    parts = sorted(p.name for p in (tmp_path / "cluster" / "verdicts.parquet").glob("part-*.parquet"))
    assert len(parts) > 1 and all(p[5].isdigit() for p in parts), parts


def _same_verdicts(*results: dict[str, Any]) -> bool:
    """The per-history verdicts agree (the per-checker details hold timings and file paths)."""
    seen = [{h["history"]: (h["verdict"], sorted(h["checkers"])) for h in r["histories"]} for r in results]
    return all(s == seen[0] for s in seen)
