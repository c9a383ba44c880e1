"""``txnmodel check`` on the command line: bounds printed, exit codes, JSON, counterexample files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proofs.check.trace_format import Trace
from tests.known_bugs.catalogue import MUTANTS, applied
from txnmodel.cli import main


def test_a_model_passes_and_prints_its_bounds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "--model", "pending-ack", "--bound", "input=1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0
    assert "bounds: clients=2, messages=1, input=1, txns=1" in out
    assert "OK:" in out and "liveness checked" in out


def test_json_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "--model", "delayed", "--json", "--no-liveness", "--out", str(tmp_path)])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["exit"] == 0
    (run,) = summary["models"]
    assert run["model"] == "delayed" and run["verdict"] == "ok"
    assert run["bounds"]["delay"] == 2 and run["states"] > 0 and run["liveness_checked"] is False


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "no-such-model"],
        ["--model", "produce", "--bound", "clients"],
        ["--model", "produce", "--bound", "clients=x"],
        ["--model", "produce", "--bound", "nonsense=1"],
        ["--model", "produce", "--bound", "clients=99"],
        ["--model", "produce", "--quirk", "no-such-quirk"],
        ["--master", "local[1]", "--local"],
        ["--model", "produce", "--spill", "100"],  # the liveness graph is not bounded: --no-liveness
    ],
)
def test_bad_usage_exits_2(argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(main(["check", *argv, "--out", str(tmp_path)]))
    assert exited.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_a_spilled_run_counts_what_the_in_memory_run_counts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = []
    for spill in ([], ["--spill", "50"]):
        code = main(["check", "--model", "ctp", "--no-liveness", "--json", *spill, "--out", str(tmp_path)])
        assert code == 0
        (run,) = json.loads(capsys.readouterr().out)["models"]
        runs.append((run["verdict"], run["states"], run["transitions"], run["depth"]))
    assert runs[0] == runs[1] and runs[0][0] == "ok"


def test_a_violation_exits_1_and_writes_its_counterexample(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mutant = next(m for m in MUTANTS if m.name == "abort-not-recorded")
    with applied(mutant):
        code = main(["check", "--model", "produce", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "safety violation: read-committed" in out
    folder = tmp_path / "produce" / "read-committed"
    assert (folder / "trace.txt").read_text().startswith("safety violation: read-committed")
    # The viewer's trace shape, which its loader accepts and `txnmodel view` draws.
    trace = Trace.from_json(json.loads((folder / "trace.json").read_text()))
    assert trace.kind == "safety" and trace.property_name == "read-committed" and trace.loop_from is None
    assert any(name.startswith("partition:") for name in trace.components)
    assert "<svg" in (folder / "trace.html").read_text()
    # The history `txnmodel verify` reads, and a vector of the one buffer involved.
    assert (
        main(["verify", str(folder), "--format", "jsonl", "--local", "--no-progress", "--out", str(tmp_path / "v")])
        == 0
    )
    vector = json.loads((folder / "vector.json").read_text())
    assert vector["machine"] == "buffer" and vector["steps"]


def test_a_liveness_trace_is_a_lasso_in_the_viewer_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mutant = next(m for m in MUTANTS if m.name == "timeouts-never-fire")
    with applied(mutant):
        code = main(["check", "--model", "pending-ack", "--out", str(tmp_path)])
    assert code == 1
    assert "liveness violation: txns-end" in capsys.readouterr().out
    trace = Trace.from_json(json.loads((tmp_path / "pending-ack" / "txns-end" / "trace.json").read_text()))
    assert trace.kind == "liveness" and trace.loop_from is not None
    assert 0 <= trace.loop_from < len(trace.steps)
    assert (
        main(["view", str(tmp_path / "pending-ack" / "txns-end" / "trace.json"), "--out", str(tmp_path / "p.html")])
        == 0
    )


def test_the_main_jobs_model_checking_phase(tmp_path: Path) -> None:
    import argparse

    from proofs.check.models import DEFAULT_MODELS
    from runners.main_job import Pipeline
    from txnmodel.commands.run import _MainJob
    from views.progress import Reporter

    def model_check() -> tuple[int, list[tuple[str, str, str, str]]]:
        # the phase runs in the main job's own process: no worker is needed
        pipeline = Pipeline(1)
        try:
            job = _MainJob(argparse.Namespace(), Reporter(enabled=False), pipeline, tmp_path)
            with job.phases:
                job.model_check()
        finally:
            pipeline.close()
        return job.worst, job.summary["check"]

    worst, summary = model_check()
    assert worst == 0
    assert [row[0] for row in summary] == [f"model check: {name}" for name in DEFAULT_MODELS]
    assert all(row[1].startswith("ok, ") for row in summary)
    mutant = next(m for m in MUTANTS if m.name == "recovery-keeps-snapshot-mrp")
    with applied(mutant):
        worst, summary = model_check()
    assert worst == 1
    assert summary[0][1].startswith("violated")
    tmp_path = tmp_path / "check"
    assert (tmp_path / "produce" / "buffer-recovers-live" / "trace.json").exists()
