"""``txnmodel record`` on the command line: the files and run metadata it writes, fresh topics per
run, and bad options or an unusable broker as exit code 2 before anything is recorded."""

from __future__ import annotations

import socket
import tempfile
from pathlib import Path

import pytest

from history_io.files import read_jsonl, read_metadata, read_parquet
from runners.serve import serve
from tests.recording.conftest import CONFIG
from txnmodel.cli import main


def _args(url: str, out: str, *extra: str) -> list[str]:
    return ["record", "--url", url, "--out", out, "--no-progress", "--operation-timeout", "3", *extra]


def test_record_then_verify(capsys: pytest.CaptureFixture[str]) -> None:
    out = tempfile.mkdtemp(prefix="record-cli-")
    with serve(config=CONFIG) as url:
        assert main(_args(url, out, "--workload", "produce-consume", "--ops", "20", "--jsonl", "--seed", "7")) == 0
        assert main(_args(url, out, "--workload", "multi", "--seconds", "1", "--partitions", "3")) == 0
    printed = capsys.readouterr().out
    assert "history: " in printed and "check it: txnmodel verify" in printed
    files = sorted(Path(out).glob("*.parquet"))
    assert len(files) == 2
    first = next(f for f in files if f.name.startswith("produce-consume-seed7-"))
    metadata = read_metadata(first)
    assert metadata is not None
    ((history, run),) = metadata["runs"].items()
    assert history == first.stem and run["workload"] == "produce-consume" and run["seed"] == 7
    assert run["url"] == url and run["server_version"].startswith("txnmodel-serve")
    assert run["client_versions"]["pulsar-client"] == "3.13.0" and run["client_versions"]["wire-client"]
    assert run["bounds"]["liveness"] and run["transactions"] is False
    assert all(t.startswith("persistent://public/default/txnmodel-produce-consume-") for t in run["topics"])
    assert run["cleanup"]["unsubscribed"] == run["cleanup"]["of"] == 4  # one subscription of each type
    assert "no --admin-url" in run["cleanup"]["note"]
    # the JSON Lines copy holds the same operations and carries the same metadata beside it
    assert read_jsonl(Path(out) / f"{history}.jsonl") == read_parquet(first)
    assert read_metadata(Path(out) / f"{history}.jsonl") == metadata
    # fresh topics per run: the two runs share no topic
    other = read_metadata(next(f for f in files if f != first))
    assert other is not None
    (other_run,) = other["runs"].values()
    assert not set(other_run["topics"]) & set(run["topics"]) and len(other_run["topics"]) == 3
    assert main(["verify", out, "--local", "--no-progress", "--out", tempfile.mkdtemp()]) == 0
    assert main(["verify", out, "--local", "--no-progress", "--format", "jsonl", "--out", tempfile.mkdtemp()]) == 0
    # and on Spark, as on a cluster (--master passed unchanged): the same verdicts
    spark_out = tempfile.mkdtemp()
    assert main(["verify", out, "--master", "local[2]", "--no-progress", "--out", spark_out]) == 0
    printed = capsys.readouterr().out
    assert "transactional         2" in printed and "nothing to judge in any history (not a pass)" in printed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_bad_options_and_unusable_brokers_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    out = tempfile.mkdtemp(prefix="record-cli-")
    nowhere = f"pulsar://127.0.0.1:{_free_port()}"
    assert main(_args(nowhere, out, "--workload", "nope")) == 2
    assert main(_args(nowhere, out, "--workload", "ctp", "--ops", "5", "--seconds", "1")) == 2
    assert main(_args("http://127.0.0.1:8080", out, "--workload", "produce-consume")) == 2
    assert "pulsar://HOST:PORT" in capsys.readouterr().err
    assert main(_args(nowhere, out, "--workload", "ctp", "--no-txn")) == 2
    assert "needs transactions" in capsys.readouterr().err
    assert main(_args(nowhere, out, "--workload", "produce-consume")) == 2
    assert "cannot connect" in capsys.readouterr().err
    no_txn = CONFIG.with_overrides({"transactionCoordinatorEnabled": False})
    with serve(config=no_txn) as url:
        assert main(_args(url, out, "--workload", "multi")) == 2
        assert "refused transactions" in capsys.readouterr().err
    assert list(Path(out).iterdir()) == []  # nothing was recorded
