"""Pulsar's admin REST API on ``txnmodel serve``: paths, status codes and JSON field names as
Pulsar documents them, answered from the broker's machines, and a socket that bad requests, huge
bodies and slow clients cannot hang or stop (the broker keeps serving its clients throughout).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from engine.serve.admin import MAX_BODY, MAX_CONNECTIONS
from runners.serve import ServeHandle, finish, start
from tests.engine.serve.conftest import CONFIG, drain, new_client, unique
from txnclient.client import WireClient

NS = "/admin/v2/persistent/public/default"


@pytest.fixture(scope="module")
def handle() -> Iterator[ServeHandle]:
    h = start(config=CONFIG, admin_port=0)
    try:
        yield h
    finally:
        h.stop()
        finish(h)


def call(handle: ServeHandle, method: str, path: str, body: Any = None, *, raw: bytes | None = None) -> tuple[int, Any]:
    """(status, JSON body or text) of one admin request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(handle.admin_url + path, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            status, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read().decode()
    if not text:
        return status, None
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


def test_tenants_namespaces_and_clusters_are_the_defaults(handle: ServeHandle) -> None:
    assert call(handle, "GET", "/admin/v2/clusters") == (200, ["standalone"])
    status, tenants = call(handle, "GET", "/admin/v2/tenants")
    assert status == 200 and {"public", "pulsar"} <= set(tenants)
    assert call(handle, "GET", "/admin/v2/tenants/public") == (
        200,
        {"adminRoles": [], "allowedClusters": ["standalone"]},
    )
    assert call(handle, "GET", "/admin/v2/tenants/nobody")[0] == 404
    assert "public/default" in call(handle, "GET", "/admin/v2/namespaces/public")[1]
    assert call(handle, "GET", "/admin/v2/brokers/health") == (200, "ok")


def test_create_list_and_delete_topics(handle: ServeHandle) -> None:
    plain, parted = unique(), unique()
    assert call(handle, "PUT", f"{NS}/{plain}") == (204, None)
    assert call(handle, "PUT", f"{NS}/{plain}")[0] == 409
    assert call(handle, "PUT", f"{NS}/{parted}/partitions", 3) == (204, None)
    status, body = call(handle, "PUT", f"{NS}/{parted}/partitions", 3)
    assert status == 409 and "reason" in body
    assert call(handle, "PUT", f"{NS}/{unique()}/partitions", 0)[0] == 406
    assert call(handle, "GET", f"{NS}/{parted}/partitions") == (200, {"partitions": 3, "deleted": False})
    assert call(handle, "GET", f"{NS}/{plain}/partitions")[1]["partitions"] == 0
    listed = call(handle, "GET", NS)[1]
    assert f"persistent://public/default/{plain}" in listed
    assert {f"persistent://public/default/{parted}-partition-{i}" for i in range(3)} <= set(listed)
    assert f"persistent://public/default/{parted}" in call(handle, "GET", f"{NS}/partitioned")[1]
    assert call(handle, "DELETE", f"{NS}/{parted}")[0] == 409  # partitioned: DELETE .../partitions
    assert call(handle, "DELETE", f"{NS}/{parted}/partitions") == (204, None)
    assert call(handle, "DELETE", f"{NS}/{plain}") == (204, None)
    assert call(handle, "DELETE", f"{NS}/{plain}")[0] == 404
    listed = call(handle, "GET", NS)[1]
    assert not any(plain in name or parted in name for name in listed)


def test_the_official_client_uses_a_partitioned_topic_created_here(handle: ServeHandle) -> None:
    topic = unique()
    assert call(handle, "PUT", f"{NS}/{topic}/partitions", 2)[0] == 204
    client = new_client(handle.url)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(
            topic, message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution
        )
        for i in range(10):
            producer.send(f"m{i}".encode())
        assert sorted(m.data() for m in drain(consumer)) == sorted(f"m{i}".encode() for i in range(10))
        status, stats = call(handle, "GET", f"{NS}/{topic}/partitioned-stats")
        assert status == 200 and stats["metadata"] == {"partitions": 2}
        assert stats["msgInCounter"] == 10 and stats["subscriptions"]["sub"]["msgBacklog"] == 0
        assert len(stats["publishers"]) == 2 and len(stats["partitions"]) == 2
        assert call(handle, "DELETE", f"{NS}/{topic}/partitions")[0] == 412  # producers and consumers
        assert call(handle, "DELETE", f"{NS}/{topic}/partitions?force=true")[0] == 204
    finally:
        client.close()


def test_stats_and_internal_stats_follow_the_ledger_and_the_cursor(handle: ServeHandle) -> None:
    topic = unique()
    client = new_client(handle.url)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, producer_name="writer")
        for i in range(5):
            producer.send(f"m{i}".encode())
        received = [consumer.receive(timeout_millis=3000) for _ in range(5)]
        consumer.acknowledge(received[0])
        consumer.acknowledge(received[2])
        time.sleep(0.3)  # the client groups acks for 100 ms
        status, stats = call(handle, "GET", f"{NS}/{topic}/stats")
        assert status == 200
        assert stats["msgInCounter"] == 5 and stats["storageSize"] > 0
        assert [p["producerName"] for p in stats["publishers"]] == ["writer"]
        sub = stats["subscriptions"]["sub"]
        assert sub["msgBacklog"] == 3 and sub["type"] == "Shared" and sub["isDurable"] is True
        assert sub["unackedMessages"] == 3 and len(sub["consumers"]) == 1
        status, internal = call(handle, "GET", f"{NS}/{topic}/internalStats")
        assert status == 200 and internal["numberOfEntries"] == 5
        assert internal["ledgers"][0]["entries"] == 5 and internal["ledgers"][0]["size"] == internal["totalSize"]
        cursor = internal["cursors"]["sub"]
        first = received[0].message_id()
        assert cursor["markDeletePosition"] == f"{first.ledger_id()}:{first.entry_id()}"
        assert cursor["individuallyDeletedMessages"].count("..") == 1  # the third message
        assert call(handle, "GET", f"{NS}/{unique()}/stats")[0] == 404
    finally:
        client.close()


def test_subscriptions_create_reset_skip_and_delete(handle: ServeHandle) -> None:
    topic = unique()
    client = new_client(handle.url)
    try:
        producer = client.create_producer(topic)
        ids = [producer.send(f"m{i}".encode()) for i in range(6)]
        assert call(handle, "PUT", f"{NS}/{topic}/subscription/early?messageId=earliest") == (204, None)
        assert call(handle, "PUT", f"{NS}/{topic}/subscription/early")[0] == 409
        assert call(handle, "PUT", f"{NS}/{topic}/subscription/late") == (204, None)
        assert call(handle, "GET", f"{NS}/{topic}/subscriptions") == (200, ["early", "late"])
        stats = call(handle, "GET", f"{NS}/{topic}/stats")[1]["subscriptions"]
        assert stats["early"]["msgBacklog"] == 6 and stats["late"]["msgBacklog"] == 0
        # A subscription created here takes its type from its first consumer, as in Pulsar.
        consumer = client.subscribe(topic, "early", consumer_type=pulsar.ConsumerType.Shared)
        assert consumer.receive(timeout_millis=3000).data() == b"m0"
        assert call(handle, "POST", f"{NS}/{topic}/subscription/early/skip/2") == (204, None)
        assert call(handle, "GET", f"{NS}/{topic}/stats")[1]["subscriptions"]["early"]["msgBacklog"] == 4
        third = ids[3]
        body = {"ledgerId": third.ledger_id(), "entryId": third.entry_id(), "partitionIndex": -1}
        assert call(handle, "POST", f"{NS}/{topic}/subscription/early/resetcursor", body) == (204, None)
        consumer = client.subscribe(topic, "early", consumer_type=pulsar.ConsumerType.Shared)
        assert [m.data() for m in drain(consumer)] == [b"m3", b"m4", b"m5"]
        assert call(handle, "DELETE", f"{NS}/{topic}/subscription/early")[0] == 412  # a consumer is connected
        assert call(handle, "DELETE", f"{NS}/{topic}/subscription/early?force=true") == (204, None)
        assert call(handle, "DELETE", f"{NS}/{topic}/subscription/late") == (204, None)
        assert call(handle, "GET", f"{NS}/{topic}/subscriptions") == (200, [])
        assert call(handle, "DELETE", f"{NS}/{topic}/subscription/late")[0] == 404
    finally:
        client.close()


def test_transaction_endpoints_answer_from_the_machines(handle: ServeHandle) -> None:
    topic = f"persistent://public/default/{unique()}"
    local = topic.rsplit("/", 1)[1]
    with WireClient(handle.url) as wire:
        producer = wire.create_producer(topic)
        consumer = wire.subscribe(topic, "sub", initial_position="Earliest")  # Exclusive: cumulative acks count
        producer.send(b"before")
        message = consumer.receive(timeout_millis=3000)
        assert message is not None
        txn = wire.new_transaction(timeout_ms=60_000)
        producer.send(b"inside", txn=txn)
        consumer.acknowledge_cumulative(message, txn=txn)
        most, least = txn.txn_id.most_sig_bits, txn.txn_id.least_sig_bits

        status, stats = call(handle, "GET", "/admin/v3/transactions/coordinatorStats")
        assert status == 200 and stats["0"]["state"] == "Ready" and stats["0"]["ongoingTxnSize"] >= 1
        one = call(handle, "GET", "/admin/v3/transactions/coordinatorStats?coordinatorId=0")[1]
        assert one["lowWaterMark"] < least <= one["leastSigBits"]
        status, meta = call(handle, "GET", f"/admin/v3/transactions/transactionMetadata/{most}/{least}")
        assert status == 200 and meta["txnId"] == f"({most},{least})" and meta["status"] == "OPEN"
        assert meta["timeoutAt"] == 60_000 and meta["openTimestamp"] > 0
        produced = meta["producedPartitions"][topic]
        assert produced["aborted"] is False and produced["startPosition"] is not None
        assert meta["ackedPartitions"][topic]["sub"]["cumulativeAckPosition"] is not None
        buffer = call(handle, "GET", f"/admin/v3/transactions/transactionBufferStats/public/default/{local}")[1]
        assert buffer["state"] == "Ready" and buffer["ongoingTxnSize"] == 1
        assert buffer["maxReadPosition"] < produced["startPosition"] or ":" in buffer["maxReadPosition"]
        with_marks = (
            f"/admin/v3/transactions/transactionBufferStats/persistent/public/default/{local}?lowWaterMarks=true"
        )
        assert "lowWaterMarks" in call(handle, "GET", with_marks)[1]
        pending = call(handle, "GET", f"/admin/v3/transactions/pendingAckStats/public/default/{local}/sub")[1]
        assert pending == {"state": "Ready", "ongoingTxnSize": 1}
        slow = call(handle, "GET", "/admin/v3/transactions/slowTransactions/0")[1]
        assert f"({most},{least})" in slow
        assert call(handle, "GET", "/admin/v3/transactions/slowTransactions/3600000")[1] == {}
        in_buffer = f"/admin/v3/transactions/transactionInBufferStats/public/default/{local}/{most}/{least}"
        assert call(handle, "GET", in_buffer)[1] == produced

        txn.abort()
        assert call(handle, "GET", f"/admin/v3/transactions/transactionMetadata/{most}/{least}")[0] == 404
        buffer = call(handle, "GET", f"/admin/v3/transactions/transactionBufferStats/public/default/{local}")[1]
        assert buffer["ongoingTxnSize"] == 0
        assert call(handle, "GET", in_buffer)[1]["aborted"] is True


def test_transactions_off_is_503_with_pulsars_reason() -> None:
    from spec.config import Config

    h = start(config=Config(transaction_coordinator_enabled=False), admin_port=0)
    try:
        status, body = call(h, "GET", "/admin/v3/transactions/coordinatorStats")
        assert status == 503 and "transactionCoordinatorEnabled=true" in body["reason"]
    finally:
        h.stop()
        finish(h)


def test_bad_requests_are_answered_and_the_broker_keeps_serving(handle: ServeHandle) -> None:
    topic = unique()
    assert call(handle, "GET", "/admin/v2/nothing/here")[0] == 404
    assert call(handle, "POST", "/admin/v2/clusters")[0] == 405
    assert call(handle, "PUT", f"{NS}/{topic}/partitions", raw=b"{not json")[0] == 400
    assert call(handle, "PUT", f"{NS}/{topic}/partitions", "three")[0] == 400
    assert call(handle, "PUT", f"{NS}/{'x' * 2000}")[0] == 412
    assert call(handle, "GET", "/admin/v3/transactions/transactionMetadata/0/notanumber")[0] == 400
    assert call(handle, "GET", "/admin/v3/transactions/transactionMetadata/0/99999999")[0] == 404
    assert call(handle, "PUT", f"{NS}/{topic}/partitions", raw=b"[" * 100_000)[0] == 400  # nested too deep
    # A huge announced body is refused unread.
    host, port = handle.admin_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(f"PUT {NS}/{topic}/partitions HTTP/1.0\r\nContent-Length: {MAX_BODY + 1}\r\n\r\n".encode())
        assert b" 413 " in sock.recv(4096).split(b"\r\n")[0] + b" "
    # Slow clients hold at most their connection: past the cap a connection gets 503 at once,
    # and the broker's own clients go on meanwhile.
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(MAX_CONNECTIONS + 2)]
    try:
        time.sleep(0.2)
        client = new_client(handle.url)
        try:
            producer = client.create_producer(topic)
            producer.send(b"still served")
        finally:
            client.close()
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(b"GET /admin/v2/clusters HTTP/1.0\r\n\r\n")
            assert b" 503 " in sock.recv(4096)
    finally:
        for sock in idle:
            sock.close()
    time.sleep(0.2)
    assert call(handle, "GET", "/admin/v2/clusters") == (200, ["standalone"])


def test_record_cleans_up_its_topics_through_the_admin_api(handle: ServeHandle, tmp_path: Any) -> None:
    from recording import RecordOptions, record

    result = record(
        RecordOptions(
            url=handle.url,
            workload="produce-consume",
            out=str(tmp_path),
            ops=20,
            clients=2,
            operation_timeout_s=3,
            send_timeout_ms=2_000,
            progress=False,
            admin_url=handle.admin_url,
        )
    )
    (run,) = result.metadata["runs"].values()
    cleanup = run["cleanup"]
    assert "problems" not in cleanup and cleanup["topics_deleted"] >= 1
    listed = call(handle, "GET", NS)[1]
    assert not any(result.history.rsplit("-", 1)[-1] in name for name in listed)


def test_a_failed_admin_call_of_record_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    from recording import _delete_topics

    deleted, problems = _delete_topics("http://127.0.0.1:9", ["persistent://public/default/gone"])
    assert deleted == 0 and problems
    assert "DELETE http://127.0.0.1:9/admin/v2/persistent/public/default/gone" in capsys.readouterr().err
