"""``txnmodel conform`` end to end: the served reference, usage errors, failing implementations."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from reference.sessions import run_vector
from tests.conform.conftest import PYTHON, ROOT, TXNMODEL, python_child, serve_reference

LIMIT = 600  # seconds: no test here may wait longer than this for a child


def conform(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [TXNMODEL, "conform", *args], capture_output=True, text=True, timeout=LIMIT, cwd=ROOT, check=False
    )


def test_the_served_reference_conforms(out: Path) -> None:
    done = conform(
        "--machine", "coordinator", "--impl", serve_reference("coordinator"), "--examples", "10", "--json",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass"
    assert report["vectors"]["failed"] == 0 and report["vectors"]["passed"] >= 27
    assert report["properties"]["examples"] >= 10
    assert report["counterexample"] is None
    assert not (out / "coordinator").exists()


def test_the_reference_speaks_the_protocol_on_stdio() -> None:
    requests = [
        {"op": "hello", "protocol": 1, "machine": "client"},
        {"op": "init", "config": {}, "init": {"txn_id": [1, 3]}},
        {"op": "step", "command": "send", "args": {"topic": "t"}},
        "not json",
        {"op": "observe", "observer": "produced_topics", "args": {}},
        {"op": "close"},
        {"op": "never read"},
    ]
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in requests) + "\n"
    done = subprocess.run(
        [TXNMODEL, "conform", "--serve-reference", "client"], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(answers) == 6
    assert answers[0]["ok"]["machine"] == "client" and answers[0]["ok"]["crash"] is False
    assert answers[2]["effects"] == [{"@type": "SendAddPartitionToTxn", "txn_id": [1, 3], "topic": "t"}]
    assert "request line 4 is not JSON" in answers[3]["fail"]
    assert answers[4] == {"ok": ["t"]}


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--machine", "coordinator"], "usage: --machine NAME --impl COMMAND"),
        (["--machine", "coordinator", "--impl", ""], "--impl: the command is empty"),
        (["--machine", "coordinator", "--impl", "'unbalanced"], "cannot split"),
        (["--machine", "coordinator", "--impl", "/nonexistent/tc --flag"], "cannot start '/nonexistent/tc'"),
        (["--machine", "kafka", "--impl", "x"], "invalid choice: 'kafka'"),
        (["--machine", "coordinator", "--impl", "x", "--examples", "0"], "expected a whole number from 1"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args: list[str], fragment: str) -> None:
    done = conform(*args)
    assert done.returncode == 2
    assert fragment in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_vector_file_is_bad_input(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"id": "x", "machine": "coordinator", "description": "d", "steps": [{"command": "teleport"}]}')
    done = conform("--machine", "coordinator", "--impl", serve_reference("coordinator"), "--vectors", str(bad))
    assert done.returncode == 2
    assert "has no command 'teleport'" in done.stderr and str(bad) in done.stderr


def test_a_hanging_implementation_is_reported_with_the_step_it_hung_at(out: Path) -> None:
    """It answers hello and init, then never again: killed after the step limit, exit 1."""
    code = (
        "import sys, json, time\n"
        "for line in sys.stdin:\n"
        "    op = json.loads(line)['op']\n"
        "    if op == 'hello':\n"
        "        print(json.dumps({'ok': {'protocol': 1, 'machine': 'client'}}), flush=True)\n"
        "    elif op == 'init':\n"
        "        print(json.dumps({'ok': None}), flush=True)\n"
        "    else:\n"
        "        time.sleep(600)\n"
    )
    done = conform("--machine", "client", "--impl", python_child(code), "--step-timeout", "1", "--out", str(out))
    assert done.returncode == 1
    assert "did not answer within 1 s" in done.stdout
    assert '"op":"step"' in done.stdout
    assert "implementation-failed" in done.stdout


def test_output_that_is_not_the_protocol_fails_naming_the_line(out: Path) -> None:
    done = conform("--machine", "client", "--impl", python_child("print('Starting my broker...')"), "--out", str(out))
    assert done.returncode == 1
    assert "line 1 of the implementation's output" in done.stdout and "Starting my broker" in done.stdout


def test_a_wrong_handshake_fails(out: Path) -> None:
    code = "import json; input(); print(json.dumps({'ok': {'protocol': 1, 'machine': 'buffer'}}))"
    done = conform("--machine", "client", "--impl", python_child(code), "--out", str(out))
    assert done.returncode == 1
    assert "for machine 'buffer', not 'client'" in done.stdout


def test_a_python_adapter_with_a_planted_bug_is_caught_and_shrunk(out: Path, tmp_path: Path) -> None:
    """The docs' Python example with one bug: an abort's END_TXN is sent as a commit."""
    source = (ROOT / "examples" / "python").resolve()
    for name in ("client_adapter.py", "client_txn.py"):
        text = (source / name).read_text()
        if name == "client_txn.py":
            planted = text.replace(
                '"ABORTING", "ABORT", True', '"ABORTING", "COMMIT", True'
            )  # a commit turned abort still says COMMIT
            assert planted != text
            text = planted
        (tmp_path / name).write_text(text)
    done = conform(
        "--machine", "client", "--impl", f"{PYTHON} {tmp_path / 'client_adapter.py'}", "--json", "--out", str(out)
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["counterexample"]["steps"] <= 6
    vector = out / "client" / "vector.json"
    assert {p.name for p in (out / "client").iterdir()} == {"vector.json", "trace.json", "trace.html"}
    data = json.loads(vector.read_text())
    assert run_vector(vector, data).passed  # the reference passes its own answers
    again = subprocess.run(
        [TXNMODEL, "vectors", "run", str(vector)], capture_output=True, text=True, timeout=LIMIT, check=False
    )
    assert again.returncode == 0
    # the regression vector fails the buggy implementation in the vectors phase
    rerun = conform(
        "--machine", "client", "--impl", f"{PYTHON} {tmp_path / 'client_adapter.py'}", "--vectors", str(vector),
        "--examples", "1", "--json", "--out", str(tmp_path / "again"),
    )  # fmt: skip
    assert json.loads(rerun.stdout)["vectors"]["failed"] == 1
