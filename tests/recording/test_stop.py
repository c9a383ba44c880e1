"""Nothing recorded is thrown away: Ctrl-C, SIGTERM or a broker that dies during ``txnmodel record``
write the history so far, the calls in flight as unknown outcomes (info), and that history verifies
(it is a history of a correct broker, cut short).  No phase cut short says "done".  And a broker
that answers CONNECT but never TC_CLIENT_CONNECT fails a transactional workload within seconds,
naming the command, with advice for Apache Pulsar only when the broker says it is Pulsar."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from history_io.files import read_metadata, read_parquet
from invariants.verify import VerifyOptions, check_histories
from recording import RecordOptions, record
from recording.log import STOPPED
from runners.serve import finish, serve, start
from spec.frame import encode_command, parse_frame
from spec.history import OpType
from spec.pb import PulsarApi_pb2 as api
from tests.recording.conftest import passed

ROOT = Path(__file__).resolve().parents[2]


def _verifies(path: Path) -> None:
    histories = read_parquet(path)
    rows = check_histories(histories, str(path), VerifyOptions())
    assert passed(rows), [row.detail[:500] for row in rows if row.verdict != "ok"]


@contextmanager
def _ctrl_c_as_at_a_terminal() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in this process, and a child starts with it at its default, as
    at a terminal.  A suite started in the background by a non-interactive shell inherits Ctrl-C
    ignored (POSIX), and a child started from it ignores it too; a library may have left its own
    handler (PySpark's SparkContext installs one and keeps it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _stopped_run(path: Path) -> dict[str, object]:
    metadata = read_metadata(path)
    assert metadata is not None
    (run,) = metadata["runs"].values()
    assert run["complete"] is False and run["stopped"]["reason"]
    return dict(run)


@pytest.mark.parametrize(("sig", "code", "reason"), [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_keeps_what_was_recorded(sig: int, code: int, reason: str) -> None:
    out = tempfile.mkdtemp(prefix="record-stop-")
    with serve() as url:
        command = [sys.executable, "-m", "txnmodel", "record", "--url", url, "--workload", "nack"]
        command += ["--seconds", "60", "--out", out]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with _ctrl_c_as_at_a_terminal():  # the child starts with Ctrl-C at its default
            proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            time.sleep(5)  # the writers are running
            proc.send_signal(sig)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == code, stderr
    assert f"record nack stopped ({'interrupted (Ctrl-C)' if sig == signal.SIGINT else 'stopped by SIGTERM'})" in stderr
    assert "record nack done" not in stderr and "write done" in stderr, stderr
    (path,) = Path(out).rglob("*.parquet")
    assert f"history: {path}" in stdout and (Path(out) / "latest").resolve() == path.parent.resolve()
    run = _stopped_run(path)
    assert reason in str(run["stopped"]) and run["cleanup"]["skipped"]  # type: ignore[index]
    (ops,) = read_parquet(path).values()
    assert len(ops) > 100 and all(op.type is not OpType.INVOKE for op in ops)
    assert all(op.type is OpType.INFO for op in ops if op.error == STOPPED)
    _verifies(path)


def test_a_signal_the_official_client_turns_into_its_own_error_still_stops_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found in CI: Ctrl-C five seconds into a run still subscribing its consumers, and the run went
    on for its whole 60 s.  The official client checks for signals while it waits in a blocking call
    and raises its own ``pulsar.Interrupted`` (an ``Exception``) instead of the KeyboardInterrupt,
    which the recorder took for a failed subscribe and retried.  Here the signal comes inside the
    first subscribe, as it did there, and the client answers as it does."""
    import pulsar

    real = pulsar.Client.subscribe
    calls: list[int] = []

    def subscribe(self: pulsar.Client, *args: object, **kwargs: object) -> object:
        if not calls:
            calls.append(1)
            try:
                signal.raise_signal(signal.SIGINT)  # the handler runs inside the client's call
            except KeyboardInterrupt:
                raise pulsar.Interrupted("Interrupted") from None
        return real(self, *args, **kwargs)

    monkeypatch.setattr(pulsar.Client, "subscribe", subscribe)
    assert threading.current_thread() is threading.main_thread()  # where signal handlers run
    out = tempfile.mkdtemp(prefix="record-interrupted-")
    with serve() as url, _ctrl_c_as_at_a_terminal():
        started = time.monotonic()
        result = record(RecordOptions(url=url, workload="nack", out=out, seconds=30, progress=False))
        took = time.monotonic() - started
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    assert calls and result.stopped == "interrupted (Ctrl-C)", result.stopped
    assert took < 20, took  # stopped at once, not after its 30 s
    _stopped_run(result.path)


def test_a_broker_that_dies_during_the_run() -> None:
    out = tempfile.mkdtemp(prefix="record-gone-")
    handle = start()

    def die() -> None:
        time.sleep(3)
        handle.stop()
        finish(handle)  # the listener closes: every connection is refused from now on

    killer = threading.Thread(target=die, daemon=True)
    killer.start()
    started = time.monotonic()
    result = record(
        RecordOptions(url=handle.url, workload="produce-consume", out=out, seconds=60, broker_gone_s=2, progress=False)
    )
    took = time.monotonic() - started
    killer.join()
    assert result.broker_gone and result.stopped and "unreachable since" in result.stopped
    assert took < 30, took
    run = _stopped_run(result.path)
    assert run["operations"] == result.operations and result.operations > 100
    assert result.unknown > 0
    _verifies(result.path)


@contextmanager
def _broker_without_transactions(server_version: str) -> Iterator[str]:
    """A broker on loopback that answers CONNECT and nothing else (TC_CLIENT_CONNECT never)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        buffer = bytearray()
        conn.settimeout(0.2)
        while not stop.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            buffer += data
            while (parsed := parse_frame(buffer)) is not None:
                frame, used = parsed
                del buffer[:used]
                if frame.command.type == api.BaseCommand.CONNECT:
                    connected = api.CommandConnected(server_version=server_version, protocol_version=21)
                    conn.sendall(encode_command(api.BaseCommand(type=api.BaseCommand.CONNECTED, connected=connected)))

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"pulsar://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


@pytest.mark.parametrize("version", ["another-broker-1.0", "Pulsar Server4.0.0"])
def test_a_broker_that_never_answers_tc_client_connect(version: str, capsys: pytest.CaptureFixture[str]) -> None:
    from txnmodel.cli import main

    out = tempfile.mkdtemp(prefix="record-no-tc-")
    with _broker_without_transactions(version) as url:
        started = time.monotonic()
        code = main(["record", "--url", url, "--workload", "ctp", "--out", out, "--operation-timeout", "2"])
        took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2 and took < 10, (code, took, err)
    assert "did not answer TC_CLIENT_CONNECT" in err and version in err and len(err.strip().splitlines()) == 1
    assert ("transactionCoordinatorEnabled" in err) == version.startswith("Pulsar"), err
    assert list(Path(out).iterdir()) == []
