"""The admin API's paths: Pulsar's ``/admin/v2`` (clusters, tenants, namespaces, persistent topics
and their subscriptions) and ``/admin/v3/transactions``, each to the method that answers it.

A route parses its path and body on the HTTP thread (a bad number or message id is a 400 there)
and hands the work to the server's loop thread (:class:`~engine.serve.admin.LoopCalls`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.serve.admin import AdminError, LoopCalls, Reply, Request
from engine.serve.admin_topics import CLUSTER, AdminTopics, topic_name
from engine.serve.admin_transactions import AdminTransactions
from spec.topics import TopicName
from spec.types import INT64_MAX, Position, TxnID

if TYPE_CHECKING:
    from engine.serve.server import PulsarServer

__all__ = ["routes"]

Handler = Callable[[Request, "re.Match[str]"], Reply]
_S = "([^/]+)"  # one path segment
_TOPIC = f"/admin/v2/persistent/{_S}/{_S}/{_S}"
_TXN = "/admin/v3/transactions"
_V3_TOPIC = f"(?:persistent/)?{_S}/{_S}/{_S}"  # v3 names a persistent topic with or without its domain


def _int(text: str, what: str, *, low: int = -(1 << 63), high: int = INT64_MAX) -> int:
    try:
        value = int(text)
    except ValueError:
        raise AdminError(400, f"{what} {text[:40]!r} is not an integer") from None
    if not low <= value <= high:
        raise AdminError(400, f"{what} {value} is out of range [{low}, {high}]")
    return value


def _message_id(request: Request) -> Position | str:
    """A message id from the body (Pulsar's ``MessageIdImpl`` JSON) or ``?messageId=``: a position,
    ``"latest"`` or ``"earliest"`` (Pulsar spells those (Long.MAX, Long.MAX) and (-1, -1))."""
    body = request.body
    text = request.query.get("messageId")
    if isinstance(body, dict) and "ledgerId" in body and "entryId" in body:
        ledger, entry = body["ledgerId"], body["entryId"]
        if not (isinstance(ledger, int) and isinstance(entry, int)) or isinstance(ledger, bool):
            raise AdminError(400, "ledgerId and entryId must be integers")
    elif text in (None, "latest", "earliest"):
        return text or "latest"
    elif text is not None and ":" in text:
        ledger_text, _, entry_text = text.partition(":")
        ledger, entry = _int(ledger_text, "ledger id"), _int(entry_text, "entry id")
    else:
        raise AdminError(400, f"messageId {str(text)[:40]!r}: expected latest, earliest or LEDGER:ENTRY")
    if (ledger, entry) == (INT64_MAX, INT64_MAX):
        return "latest"
    if ledger < 0 or entry < 0:
        return "earliest"
    if ledger > INT64_MAX or entry > INT64_MAX:
        raise AdminError(400, f"message id {ledger}:{entry} is out of range")
    return Position(ledger, entry)


def _txn_id(most: str, least: str) -> TxnID:
    return TxnID(_int(most, "mostSigBits", low=0), _int(least, "leastSigBits", low=0))


def routes(server: PulsarServer, calls: LoopCalls) -> list[tuple[str, re.Pattern[str], Handler]]:
    """Every admin path, in the order they are tried."""
    return AdminRoutes(server, calls).table()


class AdminRoutes:
    """Each admin path's handler: parse on the HTTP thread, answer on the loop thread."""

    def __init__(self, server: PulsarServer, calls: LoopCalls) -> None:
        self.calls = calls
        self.topics = AdminTopics(server)
        self.txns = AdminTransactions(server, self.topics)

    def table(self) -> list[tuple[str, re.Pattern[str], Handler]]:
        paths: list[tuple[str, str, Handler]] = [
            ("GET", "/admin/v2/clusters", self.clusters),
            ("GET", "/admin/v2/brokers/health", self.health),
            ("GET", "/admin/v2/tenants", self.tenants),
            ("GET", f"/admin/v2/tenants/{_S}", self.tenant),
            ("GET", f"/admin/v2/namespaces/{_S}", self.namespaces),
            ("GET", f"/admin/v2/namespaces/{_S}/{_S}/topics", self.namespace_topics),
            ("GET", f"/admin/v2/persistent/{_S}/{_S}", self.list_topics),
            ("GET", f"/admin/v2/persistent/{_S}/{_S}/partitioned", self.list_partitioned),
            ("PUT", f"{_TOPIC}/partitions", self.create_partitioned),
            ("GET", f"{_TOPIC}/partitions", self.partitions),
            ("DELETE", f"{_TOPIC}/partitions", self.delete_partitioned),
            ("GET", f"{_TOPIC}/partitioned-stats", self.partitioned_stats),
            ("GET", f"{_TOPIC}/partitioned-internalStats", self.partitioned_internal_stats),
            ("PUT", _TOPIC, self.create),
            ("DELETE", _TOPIC, self.delete),
            ("GET", f"{_TOPIC}/stats", self.stats),
            ("GET", f"{_TOPIC}/internalStats", self.internal_stats),
            ("GET", f"{_TOPIC}/subscriptions", self.subscriptions),
            ("PUT", f"{_TOPIC}/subscription/{_S}", self.create_subscription),
            ("DELETE", f"{_TOPIC}/subscription/{_S}", self.delete_subscription),
            ("POST", f"{_TOPIC}/subscription/{_S}/resetcursor/{_S}", self.reset_by_time),
            ("POST", f"{_TOPIC}/subscription/{_S}/resetcursor", self.reset_by_id),
            ("POST", f"{_TOPIC}/subscription/{_S}/skip/{_S}", self.skip),
            ("POST", f"{_TOPIC}/subscription/{_S}/skip_all", self.skip_all),
            ("GET", f"{_TXN}/coordinatorStats", self.coordinator_stats),
            ("GET", f"{_TXN}/transactionMetadata/{_S}/{_S}", self.transaction_metadata),
            ("GET", f"{_TXN}/slowTransactions/{_S}", self.slow_transactions),
            ("GET", f"{_TXN}/transactionBufferStats/{_V3_TOPIC}", self.buffer_stats),
            ("GET", f"{_TXN}/pendingAckStats/{_V3_TOPIC}/{_S}", self.pending_ack_stats),
            ("GET", f"{_TXN}/transactionInBufferStats/{_V3_TOPIC}/{_S}/{_S}", self.in_buffer),
            ("GET", f"{_TXN}/transactionInPendingAckStats/{_V3_TOPIC}/{_S}/{_S}/{_S}", self.in_pending_ack),
        ]
        return [(method, re.compile(path), handler) for method, path, handler in paths]

    def _on_loop(self, action: Callable[[], Any], status: int = 200) -> Reply:
        value = self.calls.call(action)
        return Reply(204) if status == 204 else Reply(status, value)

    @staticmethod
    def _name(match: re.Match[str], first: int = 1) -> TopicName:
        return topic_name(match[first], match[first + 1], match[first + 2])

    def clusters(self, request: Request, match: re.Match[str]) -> Reply:
        return Reply(200, [CLUSTER])

    def health(self, request: Request, match: re.Match[str]) -> Reply:
        self.calls.call(lambda: None)  # the loop answers: the broker is serving
        return Reply(200, text="ok")

    def tenants(self, request: Request, match: re.Match[str]) -> Reply:
        return self._on_loop(lambda: sorted({t for t, _ in self.topics.namespaces()}))

    def tenant(self, request: Request, match: re.Match[str]) -> Reply:
        def info() -> dict[str, Any]:
            if match[1] not in {t for t, _ in self.topics.namespaces()}:
                raise AdminError(404, "Tenant does not exist")
            return {"adminRoles": [], "allowedClusters": [CLUSTER]}

        return self._on_loop(info)

    def namespaces(self, request: Request, match: re.Match[str]) -> Reply:
        return self._on_loop(lambda: sorted(f"{t}/{n}" for t, n in self.topics.namespaces() if t == match[1]))

    def namespace_topics(self, request: Request, match: re.Match[str]) -> Reply:
        return self._on_loop(lambda: self.topics.list_topics(match[1], match[2]))

    # -- topics -----------------------------------------------------------------------------------

    def list_topics(self, request: Request, match: re.Match[str]) -> Reply:
        return self._on_loop(lambda: self.topics.list_topics(match[1], match[2]))

    def list_partitioned(self, request: Request, match: re.Match[str]) -> Reply:
        return self._on_loop(lambda: self.topics.list_partitioned(match[1], match[2]))

    def create_partitioned(self, request: Request, match: re.Match[str]) -> Reply:
        body = request.body
        if not isinstance(body, int) or isinstance(body, bool):
            raise AdminError(400, "the body must be the number of partitions")
        if not 0 < body <= 4096:
            raise AdminError(406, "Number of partitions should be more than 0 and at most 4096")
        topic = self._name(match)
        return self._on_loop(lambda: self.topics.create(topic, body), 204)

    def partitions(self, request: Request, match: re.Match[str]) -> Reply:
        topic = self._name(match)
        return self._on_loop(lambda: {"partitions": self.topics.partitions_of(topic) or 0, "deleted": False})

    def delete_partitioned(self, request: Request, match: re.Match[str]) -> Reply:
        topic, force = self._name(match), request.flag("force")
        return self._on_loop(lambda: self.topics.delete(topic, partitioned=True, force=force), 204)

    def partitioned_stats(self, request: Request, match: re.Match[str]) -> Reply:
        topic, per_partition = self._name(match), request.query.get("perPartition", "true").lower() == "true"

        def stats() -> dict[str, Any]:
            count = self.topics.partitions_of(topic)
            if not count:
                raise AdminError(404, f"Partitioned topic {topic.full} not found")
            each = {p.name: self.topics.stats(p) for p in self.topics.parts_of(topic)}
            out = _sum_stats(list(each.values()))
            out["metadata"] = {"partitions": count}
            out["partitions"] = each if per_partition else {}
            return out

        return self._on_loop(stats)

    def partitioned_internal_stats(self, request: Request, match: re.Match[str]) -> Reply:
        topic = self._name(match)

        def stats() -> dict[str, Any]:
            count = self.topics.partitions_of(topic)
            if not count:
                raise AdminError(404, f"Partitioned topic {topic.full} not found")
            parts = {p.name: self.topics.internal_stats(p) for p in self.topics.parts_of(topic)}
            return {"metadata": {"partitions": count}, "partitions": parts}

        return self._on_loop(stats)

    def create(self, request: Request, match: re.Match[str]) -> Reply:
        topic = self._name(match)
        return self._on_loop(lambda: self.topics.create(topic, 0), 204)

    def delete(self, request: Request, match: re.Match[str]) -> Reply:
        topic, force = self._name(match), request.flag("force")
        return self._on_loop(lambda: self.topics.delete(topic, partitioned=False, force=force), 204)

    def stats(self, request: Request, match: re.Match[str]) -> Reply:
        topic = self._name(match)
        return self._on_loop(lambda: self.topics.stats(self.topics.partition(topic)))

    def internal_stats(self, request: Request, match: re.Match[str]) -> Reply:
        topic = self._name(match)
        return self._on_loop(lambda: self.topics.internal_stats(self.topics.partition(topic)))

    # -- subscriptions ----------------------------------------------------------------------------

    def subscriptions(self, request: Request, match: re.Match[str]) -> Reply:
        topic = self._name(match)
        return self._on_loop(lambda: self.topics.subscriptions(topic))

    def create_subscription(self, request: Request, match: re.Match[str]) -> Reply:
        topic, start = self._name(match), _message_id(request)
        return self._on_loop(lambda: self.topics.create_subscription(topic, match[4], start), 204)

    def delete_subscription(self, request: Request, match: re.Match[str]) -> Reply:
        topic, force = self._name(match), request.flag("force")
        return self._on_loop(lambda: self.topics.delete_subscription(topic, match[4], force=force), 204)

    def reset_by_time(self, request: Request, match: re.Match[str]) -> Reply:
        topic, when = self._name(match), _int(match[5], "timestamp", low=0)
        return self._on_loop(lambda: self.topics.reset_cursor(topic, match[4], to=None, time_ms=when), 204)

    def reset_by_id(self, request: Request, match: re.Match[str]) -> Reply:
        topic, start = self._name(match), _message_id(request)
        return self._on_loop(lambda: self.topics.reset_cursor(topic, match[4], to=start, time_ms=None), 204)

    def skip(self, request: Request, match: re.Match[str]) -> Reply:
        topic, count = self._name(match), _int(match[5], "numMessages", low=0)
        return self._on_loop(lambda: self.topics.skip(topic, match[4], count), 204)

    def skip_all(self, request: Request, match: re.Match[str]) -> Reply:
        topic = self._name(match)
        return self._on_loop(lambda: self.topics.skip(topic, match[4], None), 204)

    def coordinator_stats(self, request: Request, match: re.Match[str]) -> Reply:
        text = request.query.get("coordinatorId")
        coordinator = None if text is None else _int(text, "coordinatorId", low=0)
        return self._on_loop(lambda: self.txns.coordinator_stats(coordinator))

    def transaction_metadata(self, request: Request, match: re.Match[str]) -> Reply:
        txn = _txn_id(match[1], match[2])
        return self._on_loop(lambda: self.txns.transaction_metadata(txn))

    def slow_transactions(self, request: Request, match: re.Match[str]) -> Reply:
        timeout, text = _int(match[1], "timeout", low=0), request.query.get("coordinatorId")
        coordinator = None if text is None else _int(text, "coordinatorId", low=0)
        return self._on_loop(lambda: self.txns.slow_transactions(timeout, coordinator))

    def buffer_stats(self, request: Request, match: re.Match[str]) -> Reply:
        topic, marks, segments = self._name(match), request.flag("lowWaterMarks"), request.flag("segmentStats")
        return self._on_loop(lambda: self.txns.buffer_stats(topic, low_water_marks=marks, segment_stats=segments))

    def pending_ack_stats(self, request: Request, match: re.Match[str]) -> Reply:
        topic, marks = self._name(match), request.flag("lowWaterMarks")
        return self._on_loop(lambda: self.txns.pending_ack_stats(topic, match[4], low_water_marks=marks))

    def in_buffer(self, request: Request, match: re.Match[str]) -> Reply:
        topic, txn = self._name(match), _txn_id(match[4], match[5])
        return self._on_loop(lambda: self.txns.transaction_in_buffer(topic, txn))

    def in_pending_ack(self, request: Request, match: re.Match[str]) -> Reply:
        topic, txn = self._name(match), _txn_id(match[5], match[6])
        return self._on_loop(lambda: self.txns.transaction_in_pending_ack(topic, match[4], txn))


_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter", "msgInCounter")
_SUMMED_MORE = ("bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize", "offloadedStorageSize")


def _sum_stats(each: list[dict[str, Any]]) -> dict[str, Any]:
    """A partitioned topic's stats: the partitions' counters summed, their publishers listed, their
    subscriptions' backlogs and consumers merged by name (Pulsar's ``PartitionedTopicStats``)."""
    out: dict[str, Any] = {key: sum(s[key] for s in each) for key in (*_SUMMED, *_SUMMED_MORE)}
    messages = out["msgInCounter"]
    out["averageMsgSize"] = out["bytesInCounter"] / messages if messages else 0.0
    out["msgChunkPublished"] = False
    out["publishers"] = [p for s in each for p in s["publishers"]]
    out["waitingPublishers"] = 0
    out["replication"] = {}
    out["deduplicationStatus"] = "Disabled"
    subscriptions: dict[str, dict[str, Any]] = {}
    for stats in each:
        for sub_name, sub in stats["subscriptions"].items():
            merged = subscriptions.get(sub_name)
            if merged is None:
                subscriptions[sub_name] = {**sub, "consumers": list(sub["consumers"])}
                continue
            for key in ("msgBacklog", "msgBacklogNoDelayed", "backlogSize", "msgDelayed", "unackedMessages"):
                merged[key] += sub[key]
            merged["consumers"].extend(sub["consumers"])
    out["subscriptions"] = subscriptions
    out["nonContiguousDeletedMessagesRanges"] = sum(s["nonContiguousDeletedMessagesRanges"] for s in each)
    return out
