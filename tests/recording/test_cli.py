"""``txnmodel record`` on the command line: the run folders, files and run metadata it writes (with the
command that records the run again), fresh topics per run, and bad options or an unusable broker as
exit code 2, in one line, before anything is recorded."""

from __future__ import annotations

import re
import shlex
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
    # a folder per run, as Jepsen's store: OUT/<workload>/<timestamp>/, and the latest links
    files = sorted(Path(out).rglob("*.parquet"))
    assert len(files) == 2
    first = next(f for f in files if f.name.startswith("produce-consume-seed7-"))
    assert first.parent.parent == Path(out) / "produce-consume" and first.parent.name.endswith("Z")
    assert (Path(out) / "produce-consume" / "latest").resolve() == first.parent.resolve()
    assert (Path(out) / "latest").resolve().parent.name == "multi"  # the newest run
    metadata = read_metadata(first)
    assert metadata is not None
    ((history, run),) = metadata["runs"].items()
    assert history == first.stem and run["workload"] == "produce-consume" and run["seed"] == 7
    assert run["url"] == url and run["server_version"].startswith("txnmodel-serve")
    assert run["client_versions"]["pulsar-client"] == "3.13.0" and run["client_versions"]["wire-client"]
    assert run["bounds"]["liveness"] and run["transactions"] is False
    assert run["complete"] is True and run["stopped"] is None
    assert run["checks"] == [
        "garbage-read",
        "inconsistent-position",
        "lost-message",
        "realtime-order",
        "out-of-order-delivery",
    ]
    assert run["options"]["ops"] == 20 and run["options"]["clients"] == 4 and run["options"]["longest_delay_ms"] == 3000
    # the command that records it again: the same workload, seed, budget and options, into the same store
    command = shlex.split(run["command"])
    assert command[:2] == ["txnmodel", "record"]
    for flag, value in [
        ("--url", url),
        ("--workload", "produce-consume"),
        ("--seed", "7"),
        ("--ops", "20"),
        ("--out", out),
    ]:
        assert command[command.index(flag) + 1] == value
    assert "--jsonl" in command and command[command.index("--operation-timeout") + 1] == "3"
    assert all(t.startswith("persistent://public/default/txnmodel-produce-consume-") for t in run["topics"])
    assert run["cleanup"]["unsubscribed"] == run["cleanup"]["of"] == 4  # one subscription of each type
    assert "no --admin-url" in run["cleanup"]["note"]
    # the JSON Lines copy holds the same operations and carries the same metadata beside it
    assert read_jsonl(first.with_suffix(".jsonl")) == read_parquet(first)
    assert read_metadata(first.with_suffix(".jsonl")) == metadata
    # fresh topics per run: the two runs share no topic
    other = read_metadata(next(f for f in files if f != first))
    assert other is not None
    (other_run,) = other["runs"].values()
    assert not set(other_run["topics"]) & set(run["topics"]) and len(other_run["topics"]) == 3
    assert "--seconds" in shlex.split(other_run["command"]) and "--partitions" in shlex.split(other_run["command"])
    assert main(["verify", out, "--local", "--no-progress", "--out", tempfile.mkdtemp()]) == 0
    assert main(["verify", str(Path(out) / "latest"), "--local", "--no-progress", "--out", tempfile.mkdtemp()]) == 0
    assert main(["verify", out, "--local", "--no-progress", "--format", "jsonl", "--out", tempfile.mkdtemp()]) == 0
    # and on Spark, as on a cluster (--master passed unchanged): the same verdicts
    spark_out = tempfile.mkdtemp()
    assert main(["verify", out, "--master", "local[2]", "--no-progress", "--out", spark_out]) == 0
    printed = capsys.readouterr().out
    # produce-consume has no transaction: its transactional checker had nothing to judge (skipped)
    assert re.search(r"^transactional\s+1\s+1\s", printed, re.M), printed
    assert "nothing to judge in any history (not a pass)" in printed


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
        err = capsys.readouterr().err
        assert "refused TC_CLIENT_CONNECT" in err and "transactionCoordinatorEnabled" not in err
    assert list(Path(out).iterdir()) == []  # nothing was recorded


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("pulsar://127.0.0.1:99999", "expected a number from 1 to 65535"),
        ("pulsar://127.0.0.1:0", "expected a number from 1 to 65535"),
        ("pulsar://127.0.0.1:-1", "expected a number from 1 to 65535"),
        ("pulsar://127.0.0.1:66a", "expected a number from 1 to 65535"),
        ("pulsar://127.0.0.1", "the port is required"),
        ("pulsar://:6650", "no host"),
        ("pulsar://127.0.0.1:6650/ns", "nothing after the port"),
        ("pulsar://h1:6650,h2:6650", "one broker"),
        ("pulsar+ssl://127.0.0.1:6651", "does not speak TLS"),
        ("pulsar://[::1:6650", "IPv6"),
    ],
)
def test_bad_urls_are_refused_in_one_line(url: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tempfile.mkdtemp(prefix="record-cli-")
    assert main(_args(url, out, "--workload", "produce-consume")) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert list(Path(out).iterdir()) == []


def test_a_run_folder_is_never_reused_without_overwrite(tmp_path: Path) -> None:
    from recording.store import run_folder
    from spec.errors import InputError

    first = run_folder(tmp_path, "nack", 1_700_000_000_123, overwrite=False)
    assert first == tmp_path / "nack" / "20231114T221320.123Z"
    (first / "nack-seed0-x.parquet").write_bytes(b"kept")
    (first / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="--overwrite"):
        run_folder(tmp_path, "nack", 1_700_000_000_123, overwrite=False)
    assert (first / "nack-seed0-x.parquet").read_bytes() == b"kept"
    assert run_folder(tmp_path, "nack", 1_700_000_000_123, overwrite=True) == first
    assert not (first / "nack-seed0-x.parquet").exists() and (first / "notes.txt").read_text() == "mine"
