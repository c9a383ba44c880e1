"""Fixtures for the tests that run the official ``pulsar-client`` against ``txnmodel serve``.

Every server binds 127.0.0.1 on a free port; clients use short timeouts so that a test that fails
fails in seconds, and no test sleeps longer than the behaviour it checks needs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pulsar
import pytest

from runners.serve import serve
from spec.config import Config

# The client logs to stdout by default; only its errors are of interest in a test run.
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
# Strict delayed delivery with a short tick, so "never early" is checkable to the millisecond.
CONFIG = Config(
    transaction_coordinator_enabled=True,
    is_delayed_delivery_deliver_at_time_strict=True,
    delayed_delivery_tick_time_millis=20,
)


def new_client(url: str) -> pulsar.Client:
    return pulsar.Client(url, operation_timeout_seconds=5, connection_timeout_ms=3000, logger=QUIET)


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serve(config=CONFIG) as address:
        yield address


@pytest.fixture
def client(url: str) -> Iterator[pulsar.Client]:
    c = new_client(url)
    try:
        yield c
    finally:
        c.close()


def drain(consumer: pulsar.Consumer, *, timeout_ms: int = 300, ack: bool = True) -> list[pulsar.Message]:
    """Receive until nothing arrives for ``timeout_ms``."""
    out = []
    while True:
        try:
            message = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return out
        out.append(message)
        if ack:
            consumer.acknowledge(message)
