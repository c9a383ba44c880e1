"""``txnmodel inspect`` on what a simulation writes: a store of managed ledgers, topic messages, batches."""

from __future__ import annotations

import json
from pathlib import Path

from engine.simulation.client import Cluster
from engine.storage.inspect import inspect_path, render_text
from txnmodel.cli import main


def _store(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    cluster = Cluster.start(seed=1, topics={"in": 1}, ledger="file", data_dir=str(data))
    client = cluster.client()
    producer = client.create_producer("in", batching_enabled=True, batching_max_messages=3)
    sends = [producer.share(cluster.client()).send_async(f"b{i}", partition_key="k") for i in range(3)]
    cluster.sim.run_until(lambda: all(s.done for s in sends))
    txn = client.new_transaction(60_000)
    client.create_producer("in").send("t", txn=txn, deliver_at=5)
    txn.commit()
    cluster.close()
    return data


def test_a_store_lists_every_managed_ledger_and_decodes_topic_entries(tmp_path: Path) -> None:
    data = _store(tmp_path)
    report = inspect_path(data)
    assert report["kind"] == "store" and report["ok"]
    names = [one["metadata"]["name"] for one in report["managed_ledgers"]]
    assert "persistent://public/default/in-partition-0" in names and "__transaction_log_0" in names
    topic = next(
        one
        for one in report["managed_ledgers"]
        if one["metadata"]["name"] == "persistent://public/default/in-partition-0"
    )
    messages = [e["entry"]["message"] for e in topic["ledgers"][0]["entries"]]
    assert [m["payload"] for m in messages[0]["batch"]] == ["b0", "b1", "b2"]
    assert {m["key"] for m in messages[0]["batch"]} == {"k"}
    assert messages[1]["txn"] == [0, 0] and messages[1]["payload"] == "t" and messages[1]["deliver_at"] == 5
    assert messages[2]["marker"] == "TXN_COMMIT" and messages[2]["txn"] == [0, 0]
    text = render_text(report)
    assert "ledger store, " in text and "batch of 3, key 'k'" in text and "marker TXN_COMMIT, txn (0,0)" in text


def test_the_cli_reads_a_store_and_one_topic_entry(tmp_path: Path, capsys: object) -> None:
    data = _store(tmp_path)
    assert main(["inspect", str(data)]) == 0
    topic = next(p for p in data.iterdir() if p.name.startswith("persistent_public_default_in-partition-0"))
    assert main(["inspect", str(topic), "--entry", "0:1", "--json"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    report = json.loads(out[out.index("{\n") :])
    assert report["entry"]["message"]["payload"] == "t"


def test_a_crashed_store_shows_its_journal_and_what_recovery_would_refuse(tmp_path: Path) -> None:
    data = tmp_path / "data"
    cluster = Cluster.start(seed=1, topics={"in": 1}, ledger="file", data_dir=str(data), disk="sim")
    client = cluster.client()
    producer = client.create_producer("in")
    for i in range(3):
        producer.send(f"m{i}")
    store = cluster.broker.store
    cluster.broker.crash()  # a power cut: the journal holds every change since the ledgers' creation
    disk = store.disk
    assert hasattr(disk, "export")
    disk.export(str(store.directory), data)  # type: ignore[attr-defined]
    report = inspect_path(data)
    assert report["kind"] == "store" and report["ok"], report
    records = [r for segment in report["journal"] for r in segment["records"]]
    assert any(r["kind"] == "ENTRY" for r in records) and any(r["kind"] == "META" for r in records)
    topic = next(one for one in report["managed_ledgers"] if one["key"].startswith("persistent_public_default_in"))
    assert topic["replays"] > 0  # recovery would replay the journal into this ledger
    text = render_text(report)
    assert "journal segment" in text and "lsn" in text
    # One ledger directory on its own finds its records in the store's journal.
    assert inspect_path(topic["directory"])["replays"] == topic["replays"]
    # A damaged record before the last batch: recovery would refuse the store, and so does inspect.
    (segment,) = sorted(data.glob("journal-*.log"))
    blob = bytearray(segment.read_bytes())
    first_record = 28
    blob[first_record + 40] ^= 0x01
    segment.write_bytes(bytes(blob))
    damaged = inspect_path(data)
    assert not damaged["ok"] and damaged["journal_error"]["offset"] == first_record
    assert main(["inspect", str(data)]) == 2  # damaged input
