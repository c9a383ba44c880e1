"""``txnmodel serve`` as a process, and a session's machine history checked by ``txnmodel verify``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pulsar

from tests.engine.serve.conftest import CONFIG, drain, new_client, unique
from txnmodel.cli import main


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
            "--admin-port",
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
        url, admin = process.stdout.readline().split()
        assert url.startswith("pulsar://127.0.0.1:") and admin.startswith("http://127.0.0.1:")
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


def test_a_sessions_machine_history_verifies_even_under_faults() -> None:
    """Every machine step of a session with failed ledger writes, a topic unload and a broker crash
    is recorded; ``txnmodel verify`` finds each machine object linearizable."""
    from runners.serve import finish, start

    history = tempfile.mkdtemp(prefix="serve-history-")
    handle = start(config=CONFIG, history=history, seed=11, faults="ledger_append=0.05")
    try:
        client = new_client(handle.url)
        topic = unique()
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=2)
        consumer = client.subscribe(
            topic, "sub", consumer_type=pulsar.ConsumerType.Shared, initial_position=pulsar.InitialPosition.Earliest
        )
        for round_, kind in enumerate(("topic_unload", "broker_crash")):
            for i in range(20):
                producer.send_async(f"m{round_}-{i}".encode(), None)
            producer.flush()
            drain(consumer)
            handle.inject(kind)
        handle.heal()
        drain(consumer, timeout_ms=1000)
        client.close()
    finally:
        handle.stop()
        finish(handle)
    files = list(Path(history).glob("serve-*.parquet"))
    assert len(files) == 1
    out = tempfile.mkdtemp(prefix="serve-verdicts-")
    assert main(["verify", history, "--out", out]) == 0


def test_a_store_in_the_earlier_entry_format_is_refused_by_name(capsys: object) -> None:
    """Topic entries are Pulsar's bytes now; a file-ledger store written before (txnmodel's
    ``[size][metadata][payload]``) is refused with a typed error naming that format, exit 2."""
    import json

    from engine.ledger_store import LedgerStore
    from spec.config import Config
    from spec.pb import PulsarApi_pb2 as api

    data = Path(tempfile.mkdtemp(prefix="serve-old-format-"))
    name = "persistent://public/default/old"
    store = LedgerStore("file", Config(), directory=data / "ledgers")
    meta = api.MessageMetadata(producer_name="txnmodel", sequence_id=0, publish_time=1).SerializeToString()
    store.open(name).append(len(meta).to_bytes(4, "big") + meta + b"payload")
    store.close_all()
    (data / "topics.json").write_text(json.dumps({"version": 1, "topics": {name: 0}}))
    assert main(["serve", "--port", "0", "--ledger", "file", "--data", str(data)]) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "earlier topic-entry format" in err and "no longer read" in err
