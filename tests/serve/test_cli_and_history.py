"""``txnmodel serve`` as a process, and a session's machine history checked by ``txnmodel verify``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pulsar

from txnmodel.cli import main
from txnmodel.serve import serve

from .conftest import CONFIG, drain, new_client, unique


def test_serve_prints_its_url_and_stops_cleanly_on_sigterm() -> None:
    data = tempfile.mkdtemp(prefix="serve-cli-")
    history = tempfile.mkdtemp(prefix="serve-cli-history-")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "txnmodel",
            "serve",
            "--port",
            "0",
            "--ledger",
            "file",
            "--data",
            data,
            "--history",
            history,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("pulsar://127.0.0.1:")
        client = new_client(url)
        topic = unique()
        client.create_producer(topic).send(b"kept")
        client.close()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "history:" in err
    assert list(Path(history).glob("serve-*.parquet"))
    assert (Path(data) / "topics.json").exists()


def test_bad_options_exit_2(capsys: object) -> None:
    assert main(["serve", "--ledger", "file"]) == 2
    assert main(["serve", "--set", "maxMessageSize=-3"]) == 2


def test_a_sessions_machine_history_verifies() -> None:
    history = tempfile.mkdtemp(prefix="serve-history-")
    with serve(config=CONFIG, history=history) as url:
        client = new_client(url)
        topic = unique()
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=2)
        for i in range(20):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        consumer = client.subscribe(
            topic, "sub", consumer_type=pulsar.ConsumerType.Shared, initial_position=pulsar.InitialPosition.Earliest
        )
        assert len(drain(consumer)) == 20
        client.close()
    files = list(Path(history).glob("serve-*.parquet"))
    assert len(files) == 1
    out = tempfile.mkdtemp(prefix="serve-verdicts-")
    assert main(["verify", history, "--out", out]) == 0
