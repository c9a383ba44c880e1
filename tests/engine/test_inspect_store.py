"""``txnmodel inspect`` on what a simulation writes: a store of managed ledgers, topic messages, batches."""

from __future__ import annotations

import json
from pathlib import Path

from reference.engine.client import Cluster
from reference.engine.inspect import inspect_path, render_text
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
