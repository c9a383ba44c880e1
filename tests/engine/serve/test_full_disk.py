"""A full disk is a refused write, not a dead broker.

With a file ledger whose disk fills up, the official client's producer gets Pulsar's error at once
(the SEND is answered PersistenceError, and its reconnection ProducerBlockedQuotaExceededException,
on which the client fails what it had pending), the log says why, the consumer reads every stored
message, and once there is room again sends resume; nothing acknowledged is lost.  Two disks: a
real tmpfs of a few MB, mounted by the test and removed after (it needs root and a kernel that
lets it mount: skipped otherwise), and the simulated disk with a capacity, which runs everywhere.

A topic registry the data folder cannot take (a full, read-only or unwritable file system) fails
the request that would create a topic, not the server; an unusable data folder is refused at
startup with one line.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from engine.serve.server import ROOM_RESERVE, PulsarServer, ServerOptions
from engine.simulated.disk import DiskFaults, SimDisk
from spec.config import Config
from spec.errors import ServerError
from spec.pb import PulsarApi_pb2 as api
from tests.engine.serve.conftest import QUIET, unique
from tests.engine.serve.rawpeer import RawPeer
from txnmodel.cli import main

T = api.BaseCommand
MB = 1024 * 1024


@contextlib.contextmanager
def running(options: ServerOptions) -> Iterator[PulsarServer]:
    server = PulsarServer(options)
    server.start()
    thread = threading.Thread(target=server.run, name="txnmodel-serve-full-disk", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.stop()
        thread.join(timeout=30)
        server.close()


@contextlib.contextmanager
def small_tmpfs(size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` MB, removed after; skips the test where it cannot be mounted."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    where = Path(tempfile.mkdtemp(prefix="serve-full-disk-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)], check=False)
    if mounted.returncode != 0:
        where.rmdir()
        pytest.skip("this kernel or container does not let the test mount a tmpfs")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        shutil.rmtree(where, ignore_errors=True)


def _fill_and_recover(url: str, make_room: Callable[[], None], caplog: pytest.LogCaptureFixture) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=10, logger=QUIET)
    try:
        topic = unique("full")
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=20_000)
        acked: list[bytes] = []
        refused: Exception | None = None
        for i in range(20_000):
            body = f"m{i:06d}".encode() + b"x" * 2000
            try:
                producer.send(body)
            except pulsar.PulsarException as exc:
                refused = exc
                break
            acked.append(body)
        assert refused is not None, "the disk never filled"
        assert isinstance(refused, pulsar.ProducerBlockedQuotaExceededException), repr(refused)
        assert any("no room to write" in r.getMessage() for r in caplog.records)
        received = {m.data() for m in iter(lambda: _receive(consumer), None)}
        assert received == set(acked)  # every stored message is read, and nothing acknowledged is lost
        make_room()
        again = client.create_producer(topic, batching_enabled=False, send_timeout_millis=20_000)
        for i in range(5):
            again.send(f"after{i}".encode())
        later = {m.data() for m in iter(lambda: _receive(consumer), None)}
        assert {f"after{i}".encode() for i in range(5)} <= later
        assert any("room to write again" in r.getMessage() for r in caplog.records)
    finally:
        client.close()


def _receive(consumer: pulsar.Consumer) -> pulsar.Message | None:
    try:
        message = consumer.receive(timeout_millis=1500)
    except pulsar.Timeout:
        return None
    consumer.acknowledge(message)
    return message


def test_a_full_tmpfs_refuses_sends_at_once_reads_go_on_and_writes_resume(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="runners.serve")
    with small_tmpfs(8) as mount:
        filler = mount / "filler"
        filler.write_bytes(bytes(5 * MB))  # about 3 MB left, of which ROOM_RESERVE stays free
        options = ServerOptions(ledger="file", data_dir=str(mount / "data"), config=Config())
        with running(options) as server:
            _fill_and_recover(server.url, filler.unlink, caplog)


def test_a_full_simulated_disk_refuses_sends_at_once_reads_go_on_and_writes_resume(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    caplog.set_level(logging.WARNING, logger="runners.serve")
    disk = SimDisk(seed=1, faults=DiskFaults(capacity=ROOM_RESERVE + 2 * MB))
    options = ServerOptions(ledger="file", data_dir=str(tmp_path / "data"), config=Config(), disk=disk)

    def make_room() -> None:
        disk.faults.capacity = 64 * MB

    with running(options) as server:
        _fill_and_recover(server.url, make_room, caplog)


def test_a_topic_registry_the_disk_cannot_take_fails_the_request_not_the_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running(ServerOptions(ledger="file", data_dir=str(data), config=Config())) as server:
        (data / "topics.json.tmp").mkdir()  # the registry cannot be written (as on a read-only disk)
        with RawPeer(server.url) as peer:
            topic = f"persistent://public/default/{unique('unwritable')}"
            peer.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=1, request_id=7)))
            answer = peer.read_type(T.ERROR)
            assert answer.error.request_id == 7 and answer.error.error == ServerError.PersistenceError
            (data / "topics.json.tmp").rmdir()
            peer.send(T(type=T.PRODUCER, producer=api.CommandProducer(topic=topic, producer_id=1, request_id=8)))
            assert peer.read_type(T.PRODUCER_SUCCESS).producer_success.request_id == 8  # created now


def test_an_unusable_data_folder_is_refused_at_startup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "ledgers").write_text("not a folder")
    assert main(["serve", "--port", "0", "--admin-port", "off", "--ledger", "file", "--data", str(data)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("txnmodel serve:") and "unusable data folder" in err and "\n" not in err
    plain = tmp_path / "plain"
    plain.write_text("a file, not a folder")
    assert main(["serve", "--port", "0", "--admin-port", "off", "--ledger", "file", "--data", str(plain)]) == 2
    assert "\n" not in capsys.readouterr().err.strip()
