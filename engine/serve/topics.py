"""Topics: the registry of known topics and their partitions, auto-creation, and lookups.

This broker owns every topic, so a LOOKUP always answers "connect here" (authoritative).  Which
topics exist, and how many partitions each has, is the server's own record (Pulsar keeps
partitioned-topic metadata in its metadata store): kept in ``DATA/topics.json`` with a file
ledger, written atomically and synced, and read back when the server starts.  A topic is created
by the admin call :meth:`TopicRegistry.create_topic` or on demand as broker.conf's
``allowAutoTopicCreation``, ``allowAutoTopicCreationType`` and ``defaultNumPartitions`` allow.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from engine.broker import Broker, Partition
from engine.recorder import RequestContext
from engine.serve.connection import Connection
from engine.serve.replies import Handler, Replies
from engine.serve.wire import RequestError, topic_name
from spec.config import Config
from spec.errors import InputError, ServerError
from spec.frame import Frame
from spec.pb import PulsarApi_pb2 as api
from spec.topics import InvalidTopicName, TopicName, parse_topic

__all__ = ["TC_ASSIGN_TOPIC", "TOPICS_FILE", "Lookup", "TopicRegistry", "read_topics"]

# The partitioned topic whose partition i names transaction coordinator i (TransactionCoordinatorID):
# clients read its partition count to learn how many coordinators there are.
TC_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
TOPICS_FILE = "topics.json"  # the topic registry (Pulsar keeps partitioned-topic metadata in ZooKeeper)
T = api.BaseCommand


def read_topics(path: Path | None) -> dict[str, int]:
    """The registry at ``path`` (None: none kept): topic full name -> partitions (0: non-partitioned)."""
    if path is None or not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text())
        topics = raw["topics"]
        if raw.get("version") != 1 or not isinstance(topics, dict):
            raise ValueError("expected {'version': 1, 'topics': {...}}")
        return {str(k): int(v) for k, v in topics.items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"unreadable topic registry: {exc}", where=str(path)) from None


class TopicRegistry:
    """The known topics (full name -> partitions, 0: non-partitioned) and the broker's partitions of them."""

    def __init__(self, broker: Broker, config: Config, path: Path | None, topics: dict[str, int]) -> None:
        self.broker = broker
        self.config = config
        self.path = path  # None: the registry is not kept (a memory ledger)
        self.topics = topics

    def load(self) -> None:
        """Load the partition of every known non-partitioned topic (the broker loads the partitioned ones)."""
        for name, n in self.topics.items():
            if n == 0:
                self._add_partition(name)

    def _write(self) -> None:
        if self.path is None:
            return
        path = self.path
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as out:
            json.dump({"version": 1, "topics": dict(sorted(self.topics.items()))}, out, indent=1)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _add_partition(self, name: str) -> Partition:
        part = Partition(self.broker, name)
        self.broker.partitions[name] = part
        if self.broker.up and not part.load():
            self.broker.restart_later(part)
        return part

    def create_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions (0: non-partitioned), as the admin API does."""
        name = parse_topic(topic)
        if name.partition is not None and partitions:
            raise InvalidTopicName(topic, "a partition cannot itself be partitioned")
        if name.full in self.topics:
            raise InvalidTopicName(topic, "already exists")
        self.topics[name.full] = partitions
        self._write()
        if partitions == 0:
            self._add_partition(name.full)
        else:
            self.broker.topics[name.full] = partitions
            for i in range(partitions):
                self._add_partition(name.partition_name(i))

    def forget_topic(self, name: str) -> None:
        """A deleted topic leaves the registry (its partitions are deleted already)."""
        if self.topics.pop(name, None) is not None:
            self._write()
        self.broker.topics.pop(name, None)

    def partitions_of(self, name: TopicName) -> int | None:
        """The partition count of a known topic (0: non-partitioned), None if unknown."""
        if name.full == TC_ASSIGN_TOPIC:
            return 1
        return self.topics.get(name.full)

    def partition_for(self, topic: str, *, create: bool) -> Partition:
        """The partition a producer or consumer names, created on demand when auto-creation allows."""
        name = parse_topic(topic)
        part = self.broker.partitions.get(name.full)
        if part is not None:
            return part
        if name.partition is not None and self.topics.get(name.base, 0) > name.partition:
            return self.broker.partitions[name.full]
        if name.full in self.topics and self.topics[name.full] > 0:
            raise RequestError(ServerError.NotAllowedError, f"{name.full} is partitioned: use its partitions")
        if not (create and self.config.allow_auto_topic_creation):
            raise RequestError(ServerError.TopicNotFound, f"Topic {name.full} does not exist")
        if name.partition is not None and name.base in self.topics:
            raise RequestError(ServerError.TopicNotFound, f"{name.base} has no partition {name.partition}")
        self.create_topic(name.full, 0)
        return self.broker.partitions[name.full]


class Lookup:
    """PARTITIONED_METADATA, LOOKUP and GET_TOPICS_OF_NAMESPACE."""

    def __init__(self, registry: TopicRegistry, replies: Replies, service_url: Callable[[], str]) -> None:
        self.registry = registry
        self.config = registry.config
        self.replies = replies
        self.service_url = service_url

    def handlers(self) -> dict[int, Handler]:
        return {
            T.PARTITIONED_METADATA: self.partitioned_metadata,
            T.LOOKUP: self.lookup,
            T.GET_TOPICS_OF_NAMESPACE: self.topics_of_namespace,
        }

    def partitioned_metadata(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.partitionMetadata
        name = topic_name(cmd.topic)
        partitions = self.registry.partitions_of(name)
        if partitions is None and name.partition is None:
            auto = self.config.allow_auto_topic_creation and cmd.metadata_auto_creation_enabled
            if auto and self.config.allow_auto_topic_creation_type == "partitioned":
                self.registry.create_topic(name.full, self.config.default_num_partitions)
                partitions = self.config.default_num_partitions
            elif not cmd.metadata_auto_creation_enabled and not self.config.allow_auto_topic_creation:
                raise RequestError(ServerError.TopicNotFound, f"Topic {name.full} does not exist")
            else:
                partitions = 0  # created as a non-partitioned topic by its first producer or consumer
        self.replies.send(
            conn,
            T(
                type=T.PARTITIONED_METADATA_RESPONSE,
                partitionMetadataResponse=api.CommandPartitionedTopicMetadataResponse(
                    request_id=cmd.request_id,
                    partitions=partitions or 0,
                    response=api.CommandPartitionedTopicMetadataResponse.Success,
                ),
            ),
        )
        self.replies.done(conn, context, True)

    def lookup(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.lookupTopic
        topic_name(cmd.topic)
        self.replies.send(
            conn,
            T(
                type=T.LOOKUP_RESPONSE,
                lookupTopicResponse=api.CommandLookupTopicResponse(
                    request_id=cmd.request_id,
                    brokerServiceUrl=self.service_url(),
                    response=api.CommandLookupTopicResponse.Connect,
                    authoritative=True,
                    proxy_through_service_url=False,
                ),
            ),
        )
        self.replies.done(conn, context, True)

    def topics_of_namespace(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.getTopicsOfNamespace
        prefix = f"persistent://{cmd.namespace}/"
        names = sorted(
            name
            for name in self.registry.broker.partitions
            if name.startswith(prefix) and not name.startswith(prefix + "__")
        )
        self.replies.send(
            conn,
            T(
                type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                getTopicsOfNamespaceResponse=api.CommandGetTopicsOfNamespaceResponse(
                    request_id=cmd.request_id, topics=names
                ),
            ),
        )
        self.replies.done(conn, context, True)
