"""The socket is a boundary: a structure-aware fuzzer beside a canary, and garbage by the thousand.

* :func:`test_fuzzer_beside_a_canary`: for ``TXNMODEL_FUZZ_SECONDS`` (60 by default), the fuzzer of
  :mod:`tests.engine.serve.fuzzing` sends every command type with its fields at their edges, over
  connections it opens, breaks and abandons, while the official ``pulsar-client`` produces and
  consumes through the same server.  The server logs no internal error (a crash contained is one),
  and the canary sees no error and loses nothing whose send was acknowledged.
* :func:`test_garbage_connections_leave_memory_bounded`: 5,000 connections that each send something
  no client would, against ``txnmodel serve`` in a process of its own: its resident memory after
  them is within a few MB of what it was after the first 500.

Longer campaigns: ``benchmarks/serve_fuzz.py``.
"""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pulsar
import pytest

from runners.serve import finish, start
from tests.engine.serve.conftest import QUIET, unique
from tests.engine.serve.fuzzing import Campaign, garbage_connection

ROOT = Path(__file__).resolve().parents[3]
FUZZ_SECONDS = float(os.environ.get("TXNMODEL_FUZZ_SECONDS", "60"))
GARBAGE_CONNECTIONS = 5_000
WARM_CONNECTIONS = 500
MEMORY_SLACK_KB = 8 * 1024


class Canary:
    """The official client producing and consuming on a topic of its own, through the fuzzing."""

    def __init__(self, url: str) -> None:
        self.client = pulsar.Client(url, operation_timeout_seconds=30, logger=QUIET)
        topic = f"persistent://public/default/{unique('canary')}"
        self.consumer = self.client.subscribe(topic, "canary", consumer_type=pulsar.ConsumerType.Shared)
        self.producer = self.client.create_producer(topic, send_timeout_millis=30_000)
        self.acked: set[int] = set()
        self.received: set[int] = set()
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._produce), threading.Thread(target=self._consume)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _produce(self) -> None:
        i = 0
        while not self.stop.is_set():
            try:
                self.producer.send(f"m{i}".encode())
                self.acked.add(i)
            except Exception as exc:  # the canary must see none
                self.errors.append(f"send {i}: {exc!r}")
            i += 1
            time.sleep(0.005)

    def _consume(self) -> None:
        quiet = 0
        while quiet < 3 or not self.stop.is_set():
            try:
                message = self.consumer.receive(timeout_millis=1000)
            except pulsar.Timeout:
                quiet += 1
                continue
            except Exception as exc:
                self.errors.append(f"receive: {exc!r}")
                return
            quiet = 0
            self.received.add(int(message.data()[1:]))
            try:
                self.consumer.acknowledge(message)
            except Exception as exc:
                self.errors.append(f"acknowledge: {exc!r}")

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=120)
        self.client.close()


def test_fuzzer_beside_a_canary(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="runners.serve")
    handle = start()
    canary = Canary(handle.url)
    try:
        canary.start()
        campaign = Campaign(handle.url, seed=int(os.environ.get("TXNMODEL_FUZZ_SEED", "31")))
        began = time.monotonic()
        stats = campaign.run(FUZZ_SECONDS, stop=lambda: not handle.thread.is_alive())
        seconds = time.monotonic() - began
        canary.finish()
    finally:
        handle.stop()
        finish(handle)
    crashes = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    print(
        f"fuzzed {stats.frames} frames over {stats.connections} connections in {seconds:.0f} s "
        f"({stats.closed_by_server} closed by the server, {stats.answers} answers); "
        f"canary: {len(canary.acked)} acknowledged, {len(canary.received)} received"
    )
    assert not crashes, crashes[:5]
    assert stats.frames > 1000 and stats.connections > 100
    assert not canary.errors, canary.errors[:5]
    assert canary.acked and canary.acked <= canary.received


def _resident_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_garbage_connections_leave_memory_bounded() -> None:
    server = subprocess.Popen(
        [sys.executable, "-m", "txnmodel", "serve", "--port", "0", "--admin-port", "off"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = server.stdout.readline().split()[0]
        rng = random.Random(5)
        kinds: dict[str, int] = {}
        warm = 0
        for n in range(GARBAGE_CONNECTIONS):
            what = garbage_connection(url, rng)
            kinds[what] = kinds.get(what, 0) + 1
            if n + 1 == WARM_CONNECTIONS:
                time.sleep(0.5)
                warm = _resident_kb(server.pid)
        time.sleep(0.5)
        after = _resident_kb(server.pid)
        print(f"{GARBAGE_CONNECTIONS} garbage connections {kinds}: RSS {warm} kB after {WARM_CONNECTIONS}, {after} kB")
        assert server.poll() is None
        assert after - warm < MEMORY_SLACK_KB
    finally:
        server.terminate()
        server.wait(timeout=30)
