"""Schemas: a per-topic list of schema versions, in memory only; any schema is accepted and versioned.

No machine decides about schemas (the model has none), so the server keeps them itself, enough for
a client that sends one with PRODUCER or asks GET_SCHEMA / GET_OR_CREATE_SCHEMA.
"""

from __future__ import annotations

from typing import Any

from engine.recorder import RequestContext
from engine.serve.connection import Connection
from engine.serve.replies import Handler, Replies
from engine.serve.wire import RequestError, topic_name
from spec.errors import ServerError
from spec.frame import Frame
from spec.pb import PulsarApi_pb2 as api
from spec.topics import parse_topic

__all__ = ["Schemas"]

T = api.BaseCommand


class Schemas:
    """Topic (its base name: every partition shares them) -> its schema versions; GET_SCHEMA and
    GET_OR_CREATE_SCHEMA."""

    def __init__(self, replies: Replies) -> None:
        self.replies = replies
        self.versions: dict[str, list[Any]] = {}

    def handlers(self) -> dict[int, Handler]:
        return {T.GET_SCHEMA: self.get_schema, T.GET_OR_CREATE_SCHEMA: self.get_or_create_schema}

    def version(self, topic: str, schema: Any) -> bytes:
        """The version of ``schema`` on ``topic`` (8 bytes, big-endian), added if it is new."""
        versions = self.versions.setdefault(parse_topic(topic).base, [])
        for number, known in enumerate(versions):
            if known == schema:
                return number.to_bytes(8, "big")
        versions.append(schema)
        return (len(versions) - 1).to_bytes(8, "big")

    def get_schema(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.getSchema
        versions = self.versions.get(topic_name(cmd.topic).base, [])
        number = len(versions) - 1
        if cmd.HasField("schema_version"):
            if len(cmd.schema_version) != 8:  # a Java long, as every version this broker hands out
                raise RequestError(ServerError.NotAllowedError, "a schema version is 8 bytes (a long)")
            number = int.from_bytes(cmd.schema_version, "big")
        if not 0 <= number < len(versions):
            raise RequestError(ServerError.TopicNotFound, f"no schema of {cmd.topic} at version {number}")
        self.replies.send(
            conn,
            T(
                type=T.GET_SCHEMA_RESPONSE,
                getSchemaResponse=api.CommandGetSchemaResponse(
                    request_id=cmd.request_id, schema=versions[number], schema_version=number.to_bytes(8, "big")
                ),
            ),
        )
        self.replies.done(conn, context, True)

    def get_or_create_schema(self, conn: Connection, frame: Frame, context: RequestContext | None) -> None:
        cmd = frame.command.getOrCreateSchema
        version = self.version(topic_name(cmd.topic).full, cmd.schema)
        self.replies.send(
            conn,
            T(
                type=T.GET_OR_CREATE_SCHEMA_RESPONSE,
                getOrCreateSchemaResponse=api.CommandGetOrCreateSchemaResponse(
                    request_id=cmd.request_id, schema_version=version
                ),
            ),
        )
        self.replies.done(conn, context, True)
