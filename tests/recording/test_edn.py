"""``txnmodel record --format edn``: the recording also written in the shape of Jepsen's Kafka workload,
read back as that workload, its messages and offsets those of the Parquet history."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from history_io.edn import parse_edn
from history_io.files import read_parquet
from invariants.queue import check_kafka
from runners.serve import serve
from tests.recording.conftest import CONFIG
from txnmodel.cli import main


@pytest.mark.parametrize("workload", ["produce-consume", "ctp"])
def test_record_writes_the_kafka_workload_too(workload: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tempfile.mkdtemp(prefix="record-edn-")
    args = ["record", "--workload", workload, "--out", out, "--ops", "12", "--no-progress", "--format", "edn"]
    with serve(config=CONFIG) as url:
        assert main([*args, "--url", url, "--operation-timeout", "3"]) == 0
    assert "Jepsen's Kafka workload, EDN" in capsys.readouterr().out
    (edn,) = Path(out).glob("*.edn")
    ((_, ops),) = read_parquet(edn.with_suffix(".parquet")).items()
    back = parse_edn(edn.read_text(), history="k")
    sent = sorted(o.args["message"].strip('"') for o in ops if o.f == "send")
    assert sorted(o.args["message"].strip('"') for o in back if o.f == "send") == sent
    found = check_kafka(back).findings.counts
    # what a message is, where it lies and whose it is mean the same for Kafka and for Pulsar
    assert not {"garbage-read", "G1a", "inconsistent-offsets", "duplicate", "precommitted-read", "G1c"} & set(found)
    verdicts = tempfile.mkdtemp()
    assert main(["verify", str(edn), "--format", "edn", "--local", "--no-progress", "--out", verdicts]) in (0, 1)
