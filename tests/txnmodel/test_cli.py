"""The command line: help texts, exit codes, inspect and config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spec.envelope import LogKind, encode_batch, encode_plain
from spec.pb import PulsarTransactionMetadata_pb2 as tc_pb
from spec.pb import TransactionPendingAck_pb2 as pa_pb
from txnmodel.cli import main


@pytest.mark.parametrize(
    "command",
    [[], ["vectors"], ["vectors", "run"], ["prove"], ["inspect"], ["config"], ["simulate"], ["verify"], ["run"]],
)
def test_every_command_explains_itself(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: txnmodel" in out


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["no-such-command"]) == 2
    assert main(["prove", "kafka"]) == 2
    assert "unknown machine" in capsys.readouterr().err


def _record(seq: int) -> tc_pb.TransactionMetadataEntry:
    return tc_pb.TransactionMetadataEntry(
        metadata_op=tc_pb.TransactionMetadataEntry.NEW,
        txnid_most_bits=1,
        txnid_least_bits=seq,
        timeout_ms=1000,
        start_time=5,
        max_local_txn_id=seq,
    )


def test_inspect_batched_and_plain_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batched = tmp_path / "batched.bin"
    batched.write_bytes(encode_batch([_record(0), _record(1)], LogKind.TRANSACTION_LOG))
    assert main(["inspect", str(batched), "--kind", "transaction_log", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["batched"] and report["batch_size"] == 2
    assert report["records"][1]["txnid_least_bits"] == "1" and report["records"][0]["metadata_op"] == "NEW"

    plain = tmp_path / "plain.hex"
    ack = pa_pb.PendingAckMetadataEntry(pending_ack_op=pa_pb.ACK, txnid_most_bits=0, txnid_least_bits=3)
    ack.pending_ack_metadata.add(ledgerId=4, entryId=5)
    plain.write_text(encode_plain(ack).hex())
    assert main(["inspect", str(plain), "--hex", "--kind", "pending_ack"]) == 0
    out = capsys.readouterr().out
    assert "plain entry" in out and '"ledgerId": "4"' in out


def test_inspect_guesses_the_log_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    batched = tmp_path / "batched.bin"
    batched.write_bytes(encode_batch([_record(0), _record(1)], LogKind.TRANSACTION_LOG))
    assert main(["inspect", str(batched), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["decoded"]["transaction_log"]["batch_size"] == 2


def test_inspect_damage_names_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "torn.bin"
    path.write_bytes(encode_batch([_record(0)], LogKind.TRANSACTION_LOG)[:-3])
    assert main(["inspect", str(path), "--kind", "transaction_log"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "byte offset" in err
    assert main(["inspect", str(path), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["errors"]["transaction_log"]["offset"] > 0
    assert main(["inspect", str(tmp_path / "missing.bin")]) == 2


def test_inspect_a_file_ledger_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.storage.file_ledger import FileLedger

    ledger = FileLedger(tmp_path / "log")
    first = ledger.append(encode_plain(_record(0)))
    ledger.append(encode_batch([_record(1), _record(2)], LogKind.TRANSACTION_LOG))
    ledger.close()
    assert main(["inspect", str(tmp_path / "log")]) == 0
    out = capsys.readouterr().out
    assert "ok" in out and "batched" in out
    assert main(["inspect", str(tmp_path / "log"), "--entry", f"{first.ledger_id}:{first.entry_id}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["entry"]["decoded"]["transaction_log"]["records"][0]["txnid_least_bits"] == "0"
    assert main(["inspect", str(tmp_path / "log"), "--entry", "x"]) == 2


def test_config_defaults_and_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--json"]) == 0
    defaults = json.loads(capsys.readouterr().out)
    assert defaults["transactionLogBatchedWriteMaxRecords"] == 512
    conf = tmp_path / "broker.conf"
    conf.write_text("transactionLogBatchedWriteMaxRecords=8\n")
    assert main(["config", "--broker-conf", str(conf), "--set", "transactionCoordinatorEnabled=true"]) == 0
    out = capsys.readouterr().out
    assert "transactionLogBatchedWriteMaxRecords=8" in out and "transactionCoordinatorEnabled=true" in out
    assert main(["config", "--set", "transactionLogBatchedWriteMaxRecords=-3"]) == 2
    assert "transactionLogBatchedWriteMaxRecords" in capsys.readouterr().err


def test_config_reads_broker_conf_as_java_properties(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "broker.conf"
    # ISO 8859-1 bytes, as java.util.Properties reads them: a Latin-1 role name survives
    conf.write_bytes(b"! Pulsar style\nsuperUserRoles: r\xf4le, \\\n  proxy\ntransactionLogBatchedWriteMaxRecords 8\n")
    assert main(["config", "--broker-conf", str(conf), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["superUserRoles"] == ["r\u00f4le", "proxy"] and shown["transactionLogBatchedWriteMaxRecords"] == 8
    conf.write_text("# ok\ntransactionLogBatchedWriteMaxRecords: lots\n")
    assert main(["config", "--broker-conf", str(conf)]) == 2
    err = capsys.readouterr().err
    assert f"{conf} line 2" in err and "transactionLogBatchedWriteMaxRecords" in err and "Traceback" not in err


def test_console_script_entry_point_runs() -> None:
    done = subprocess.run([sys.executable, "-m", "txnmodel", "--help"], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and "vectors" in done.stdout


def test_main_job_end_to_end_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first command, scaled down: vectors, proofs, simulation, Spark verification."""
    code = main(["run", "--histories", "1", "--ops", "8", "--seed", "3", "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0, out
    for line in (
        "conformance vectors",
        "proofs: coordinator",
        "model check: produce",
        "model check: batched-log",
        "simulate",
        "verify: transactional",
        "verify: linearizability",
        "per object: coordinator",
        "per object: buffer",
        "per object: pending_ack",
        "per object: delayed",
        "total",
    ):
        assert line in out
    assert (tmp_path / "run" / "verdicts" / "verdicts.parquet").exists()


def test_view_draws_a_trace_and_refuses_a_bad_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = {
        "format": "txnmodel-trace",
        "version": 1,
        "model": "m",
        "property": "p",
        "initial": {"coordinator": {"@type": "S", "txns": []}},
        "steps": [{"actor": "client 0", "action": "new txn", "states": {"coordinator": {"@type": "S", "txns": [1]}}}],
    }
    source = tmp_path / "trace.json"
    source.write_text(json.dumps(trace))
    assert main(["view", str(source)]) == 0
    assert f"counterexample page: {tmp_path / 'trace.html'}" in capsys.readouterr().out
    assert "new txn" in (tmp_path / "trace.html").read_text()
    trace["steps"][0]["states"] = {"nobody": {}}
    source.write_text(json.dumps(trace))
    assert main(["view", str(source), "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "$.steps[0].states.nobody" in err and "trace.json" in err and "Traceback" not in err
    source.write_text("{")
    assert main(["view", str(source)]) == 2 and "not JSON" in capsys.readouterr().err
