"""The transaction buffer's snapshots in the Avro form Pulsar reads and writes.

Pulsar keeps the transaction buffer's snapshots as messages on three compacted system topics of
the topic's namespace, with an Avro schema that ``Schema.AVRO(Class)`` derives from a Java class
(packages ``org.apache.pulsar.broker.transaction.buffer.metadata[.v2]``):

* ``__transaction_buffer_snapshot``: ``metadata.TransactionBufferSnapshot``, keyed by topic name
  (single-snapshot mode);
* ``__transaction_buffer_snapshot_segments``: ``metadata.v2.TransactionBufferSnapshotSegment``,
  keyed by ``multiple-<sequence id>-<topic>`` (segmented mode);
* ``__transaction_buffer_snapshot_indexes``: ``metadata.v2.TransactionBufferSnapshotIndexes``,
  keyed by topic name (segmented mode).

A message payload is the record in Avro's binary encoding with no container header and no
schema fingerprint (the schema version travels in the message metadata).  This module writes and
reads exactly that payload with fastavro, and converts it to and from the protobuf messages of
``spec/proto/TransactionBufferSnapshot.proto``.

How the schema is derived, and how sure we are
----------------------------------------------
Verified in Pulsar's and Avro's sources (apache/pulsar, apache/avro):

* the classes, their fields, Java types and declaration order
  (``pulsar-broker/.../transaction/buffer/metadata/{AbortTxnMetadata,TransactionBufferSnapshot}.java``,
  ``.../metadata/v2/{TxnIDData,TransactionBufferSnapshotSegment,TransactionBufferSnapshotIndex,
  TransactionBufferSnapshotIndexes,TransactionBufferSnapshotIndexesMetadata}.java``).  The
  single-mode ``TransactionBufferSnapshot`` has no ``sequenceId``;
* the system-topic clients build their producers and readers with ``Schema.AVRO(X.class)``, and
  the segment recovery decodes a raw entry payload with ``Schema.AVRO(...).decode`` after
  skipping the message metadata, so the payload is the bare Avro binary record;
* ``SchemaDefinition`` defaults ``alwaysAllowNull`` to true, and ``SchemaUtil.extractAvroSchema``
  then uses ``ReflectData.AllowNull``: a field of a primitive Java type (``long``) keeps its plain
  schema (no union, no default); every other field becomes the union ``["null", T]`` with
  default ``null``;
* ReflectData names a record after the class's simple name with the Java package as namespace;
  a collection field becomes an array schema with the property ``"java-class"`` set to the
  declared collection class (``java.util.List``), and its items are *not* made nullable;
* since Avro 1.10 (AVRO-2579) ReflectData sorts each class's fields by name
  (``Comparator.comparing(Field::getName)`` in ``ReflectData.getFields``) before building the
  record, so the Avro field order is alphabetical, not the declaration order, and that order
  decides the bytes.  Pulsar moved to Avro 1.10.2 in apache/pulsar#9898; its 3.0 and 4.0 branches
  are on 1.11.5 (apache/pulsar#24993, #25788).

Inferred, not pinned by a test in Pulsar that we could read: that no Pulsar-side customisation
(a custom ``ReflectData`` or ``@AvroSchema``/``@AvroName`` annotation) changes the derived schema
of these classes - none appears in the classes or in ``SchemaUtil``; that a payload Pulsar
reads back is always written with the current class's schema (true for the broker's own
writers; a snapshot written by an older broker with another Avro would differ only in field
order, which schema resolution handles on Pulsar's side and which this codec does not attempt).
Development versions of the segmented mode nested these classes inside
``TransactionBufferSnapshotIndexes`` (a nested class gets the enclosing class as its Avro
namespace); the codec follows the top-level classes of current Pulsar.

Reading is stricter than Pulsar's: before fastavro decodes anything, :func:`_check` walks the
bytes against the schema and raises :class:`spec.errors.TruncatedInput` or
:class:`spec.errors.BadRecord` with the byte offset of the first problem: a varint longer than
ten bytes or wider than 64 bits, a union branch other than 0 or 1, a negative length, a string
that is not UTF-8, bytes running past the end, or bytes left over after the record.  (fastavro on
its own would take a union index of -1 as the last branch and silently wrap overlong varints.)

The one lossy mapping: a ``null`` list and an empty list both become an empty repeated field,
and an empty repeated field is written as an empty array, as Pulsar's writers do (they never
write a null list).  An unset scalar is written as 0, which is what a Java ``long`` holds.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias, TypeVar

import fastavro
from google.protobuf.message import Message

from spec.errors import BadRecord, TruncatedInput
from spec.pb import TransactionBufferSnapshot_pb2 as tb_pb

__all__ = [
    "INDEXES_SCHEMA",
    "SEGMENT_SCHEMA",
    "SNAPSHOT_SCHEMA",
    "SNAPSHOT_TOPICS",
    "decode_indexes",
    "decode_segment",
    "decode_snapshot",
    "encode_indexes",
    "encode_segment",
    "encode_snapshot",
]

JsonSchema: TypeAlias = dict[str, Any]

_V1: Final = "org.apache.pulsar.broker.transaction.buffer.metadata"
_V2: Final = "org.apache.pulsar.broker.transaction.buffer.metadata.v2"


# ---------------------------------------------------------------------------------------------
# The schemas, derived the way ReflectData.AllowNull derives them.  Each class is written down
# with its fields in *declaration* order (as in the Java source); _record sorts them.

_LONG: Final = "long"  # a Java primitive `long`: never null, no default


def _nullable(schema: Any) -> list[Any]:
    return ["null", schema]


def _list_of(items: Any) -> JsonSchema:
    return {"type": "array", "items": items, "java-class": "java.util.List"}


def _record(name: str, namespace: str, declared: Sequence[tuple[str, Any]]) -> JsonSchema:
    fields: list[JsonSchema] = []
    for field_name, field_schema in sorted(declared, key=lambda item: item[0]):
        field: JsonSchema = {"name": field_name, "type": field_schema}
        if isinstance(field_schema, list):  # AllowNull made it nullable: default null
            field["default"] = None
        fields.append(field)
    return {"type": "record", "name": name, "namespace": namespace, "fields": fields}


def _abort_txn_metadata() -> JsonSchema:
    return _record(
        "AbortTxnMetadata",
        _V1,
        [("txnIdMostBits", _LONG), ("txnIdLeastBits", _LONG), ("ledgerId", _LONG), ("entryId", _LONG)],
    )


def _txn_id_data() -> JsonSchema:
    return _record("TxnIDData", _V2, [("mostSigBits", _LONG), ("leastSigBits", _LONG)])


SNAPSHOT_SCHEMA: Final[JsonSchema] = _record(
    "TransactionBufferSnapshot",
    _V1,
    [
        ("topicName", _nullable("string")),
        ("maxReadPositionLedgerId", _LONG),
        ("maxReadPositionEntryId", _LONG),
        ("aborts", _nullable(_list_of(_abort_txn_metadata()))),
    ],
)

SEGMENT_SCHEMA: Final[JsonSchema] = _record(
    "TransactionBufferSnapshotSegment",
    _V2,
    [
        ("topicName", _nullable("string")),
        ("sequenceId", _LONG),
        ("persistentPositionLedgerId", _LONG),
        ("persistentPositionEntryId", _LONG),
        ("aborts", _nullable(_list_of(_txn_id_data()))),
    ],
)

INDEXES_SCHEMA: Final[JsonSchema] = _record(
    "TransactionBufferSnapshotIndexes",
    _V2,
    [
        ("topicName", _nullable("string")),
        (
            "indexList",
            _nullable(
                _list_of(
                    _record(
                        "TransactionBufferSnapshotIndex",
                        _V2,
                        [
                            ("sequenceID", _LONG),
                            ("abortedMarkLedgerID", _LONG),
                            ("abortedMarkEntryID", _LONG),
                            ("segmentLedgerID", _LONG),
                            ("segmentEntryID", _LONG),
                        ],
                    )
                )
            ),
        ),
        (
            "snapshot",
            _nullable(
                _record(
                    "TransactionBufferSnapshotIndexesMetadata",
                    _V2,
                    [
                        ("maxReadPositionLedgerId", _LONG),
                        ("maxReadPositionEntryId", _LONG),
                        ("aborts", _nullable(_list_of(_txn_id_data()))),
                    ],
                )
            ),
        ),
    ],
)

#: The namespace system topic each record lives on (keyed by the topic's name).
SNAPSHOT_TOPICS: Final[Mapping[str, str]] = {
    "TransactionBufferSnapshot": "__transaction_buffer_snapshot",
    "TransactionBufferSnapshotSegment": "__transaction_buffer_snapshot_segments",
    "TransactionBufferSnapshotIndexes": "__transaction_buffer_snapshot_indexes",
}

_SCHEMAS: Final[dict[str, JsonSchema]] = {
    schema["name"]: schema for schema in (SNAPSHOT_SCHEMA, SEGMENT_SCHEMA, INDEXES_SCHEMA)
}
_PARSED: Final[dict[str, Any]] = {name: fastavro.parse_schema(schema) for name, schema in _SCHEMAS.items()}


# ---------------------------------------------------------------------------------------------
# Structural check with byte offsets (Avro binary encoding of the schemas above).


def _read_long(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """One zig-zag varint ``long``; the offset of any error is where the varint starts."""
    start = pos
    value = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise TruncatedInput(f"{what}: long runs past the end", offset=start)
        byte = data[pos]
        pos += 1
        if shift == 63 and byte > 1:
            raise BadRecord(f"{what}: varint does not fit in 64 bits", offset=start)
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def _check(data: bytes, schema: Any, pos: int, path: str) -> int:
    """Walk one value of ``schema`` from ``pos``; return where it ends."""
    if schema == "null":
        return pos
    if schema == "long":
        return _read_long(data, pos, path)[1]
    if schema == "string":
        length_at = pos
        length, pos = _read_long(data, pos, f"{path} length")
        if length < 0:
            raise BadRecord(f"{path}: negative string length {length}", offset=length_at)
        if pos + length > len(data):
            raise TruncatedInput(
                f"{path}: string of {length} bytes runs past the end ({len(data) - pos} left)", offset=length_at
            )
        try:
            data[pos : pos + length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRecord(f"{path}: not UTF-8 ({exc.reason})", offset=pos + exc.start) from None
        return pos + length
    if isinstance(schema, list):
        index_at = pos
        index, pos = _read_long(data, pos, f"{path} union index")
        if not 0 <= index < len(schema):
            raise BadRecord(f"{path}: union branch {index} does not exist (0..{len(schema) - 1})", offset=index_at)
        return _check(data, schema[index], pos, path)
    if schema["type"] == "record":
        for field in schema["fields"]:
            pos = _check(data, field["type"], pos, f"{path}.{field['name']}")
        return pos
    if schema["type"] == "array":
        item = 0
        while True:
            count_at = pos
            count, pos = _read_long(data, pos, f"{path} block count")
            if count == 0:
                return pos
            size: int | None = None
            if count < 0:  # a block with its byte size (legal Avro, never written by Pulsar)
                count = -count
                size_at = pos
                size, pos = _read_long(data, pos, f"{path} block size")
                if size < 0:
                    raise BadRecord(f"{path}: negative block size {size}", offset=size_at)
            block_at = pos
            for _ in range(count):
                if pos >= len(data):
                    raise TruncatedInput(f"{path}[{item}]: array item runs past the end", offset=pos)
                pos = _check(data, schema["items"], pos, f"{path}[{item}]")
                item += 1
            if size is not None and pos - block_at != size:
                raise BadRecord(
                    f"{path}: block of {count} items took {pos - block_at} bytes, its header says {size}",
                    offset=count_at,
                )
    raise AssertionError(f"schema construct not handled: {schema!r}")  # pragma: no cover


def _decode(data: bytes, name: str, where: str | None) -> dict[str, Any]:
    try:
        end = _check(data, _SCHEMAS[name], 0, name)
        if end != len(data):
            raise BadRecord(f"{name}: {len(data) - end} bytes left over after the record", offset=end)
    except (TruncatedInput, BadRecord) as exc:
        if where is None:
            raise
        raise type(exc)(str(exc).rsplit(" (at byte offset", 1)[0], offset=exc.offset, where=where) from None
    try:
        record = fastavro.schemaless_reader(io.BytesIO(data), _PARSED[name], None)
    except Exception as exc:  # the walk should have caught it; keep the error typed anyway
        raise BadRecord(f"{name}: {type(exc).__name__}: {exc}", offset=0, where=where) from None
    if not isinstance(record, dict):  # pragma: no cover - a record schema always reads as a dict
        raise BadRecord(f"{name}: decoded to {type(record).__name__}", offset=0, where=where)
    return record


def _encode(record: Mapping[str, Any], name: str) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _PARSED[name], dict(record))
    return out.getvalue()


# ---------------------------------------------------------------------------------------------
# protobuf <-> Avro datum.  Scalars are Java primitive longs: unset is 0, and decoding always
# sets them.

M = TypeVar("M", bound=Message)


def _longs(message: Message, names: Sequence[str]) -> dict[str, int]:
    return {name: int(getattr(message, name)) for name in names}


def _string(message: Message, name: str) -> str | None:
    return str(getattr(message, name)) if message.HasField(name) else None


def _list(items: Sequence[M], convert: Callable[[M], dict[str, Any]]) -> list[dict[str, Any]]:
    return [convert(item) for item in items]


def _items(datum: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    value = datum.get(name)
    return list(value) if value is not None else []


_ABORT_FIELDS: Final = ("txnIdMostBits", "txnIdLeastBits", "ledgerId", "entryId")
_TXN_ID_FIELDS: Final = ("mostSigBits", "leastSigBits")
_INDEX_FIELDS: Final = ("sequenceID", "abortedMarkLedgerID", "abortedMarkEntryID", "segmentLedgerID", "segmentEntryID")


def _txn_ids_to_datum(items: Sequence[tb_pb.TxnIDData]) -> list[dict[str, Any]]:
    return [dict(_longs(item, _TXN_ID_FIELDS)) for item in items]


def _txn_ids_from_datum(datum: Mapping[str, Any], name: str) -> list[tb_pb.TxnIDData]:
    return [tb_pb.TxnIDData(**{f: int(item[f]) for f in _TXN_ID_FIELDS}) for item in _items(datum, name)]


def encode_snapshot(snapshot: tb_pb.TransactionBufferSnapshot) -> bytes:
    """Avro payload of a ``__transaction_buffer_snapshot`` message."""
    datum: dict[str, Any] = {
        "topicName": _string(snapshot, "topicName"),
        **_longs(snapshot, ("maxReadPositionLedgerId", "maxReadPositionEntryId")),
        "aborts": _list(list(snapshot.aborts), lambda a: dict(_longs(a, _ABORT_FIELDS))),
    }
    return _encode(datum, "TransactionBufferSnapshot")


def decode_snapshot(data: bytes, *, where: str | None = None) -> tb_pb.TransactionBufferSnapshot:
    datum = _decode(data, "TransactionBufferSnapshot", where)
    snapshot = tb_pb.TransactionBufferSnapshot(
        maxReadPositionLedgerId=int(datum["maxReadPositionLedgerId"]),
        maxReadPositionEntryId=int(datum["maxReadPositionEntryId"]),
        aborts=[tb_pb.AbortTxnMetadata(**{f: int(a[f]) for f in _ABORT_FIELDS}) for a in _items(datum, "aborts")],
    )
    if datum["topicName"] is not None:
        snapshot.topicName = str(datum["topicName"])
    return snapshot


def encode_segment(segment: tb_pb.TransactionBufferSnapshotSegment) -> bytes:
    """Avro payload of a ``__transaction_buffer_snapshot_segments`` message."""
    datum: dict[str, Any] = {
        "topicName": _string(segment, "topicName"),
        **_longs(segment, ("sequenceId", "persistentPositionLedgerId", "persistentPositionEntryId")),
        "aborts": _txn_ids_to_datum(list(segment.aborts)),
    }
    return _encode(datum, "TransactionBufferSnapshotSegment")


def decode_segment(data: bytes, *, where: str | None = None) -> tb_pb.TransactionBufferSnapshotSegment:
    datum = _decode(data, "TransactionBufferSnapshotSegment", where)
    segment = tb_pb.TransactionBufferSnapshotSegment(
        sequenceId=int(datum["sequenceId"]),
        persistentPositionLedgerId=int(datum["persistentPositionLedgerId"]),
        persistentPositionEntryId=int(datum["persistentPositionEntryId"]),
        aborts=_txn_ids_from_datum(datum, "aborts"),
    )
    if datum["topicName"] is not None:
        segment.topicName = str(datum["topicName"])
    return segment


def encode_indexes(indexes: tb_pb.TransactionBufferSnapshotIndexes) -> bytes:
    """Avro payload of a ``__transaction_buffer_snapshot_indexes`` message."""
    snapshot: dict[str, Any] | None = None
    if indexes.HasField("snapshot"):
        meta = indexes.snapshot
        snapshot = {
            **_longs(meta, ("maxReadPositionLedgerId", "maxReadPositionEntryId")),
            "aborts": _txn_ids_to_datum(list(meta.aborts)),
        }
    datum: dict[str, Any] = {
        "topicName": _string(indexes, "topicName"),
        "indexList": _list(list(indexes.indexList), lambda i: dict(_longs(i, _INDEX_FIELDS))),
        "snapshot": snapshot,
    }
    return _encode(datum, "TransactionBufferSnapshotIndexes")


def decode_indexes(data: bytes, *, where: str | None = None) -> tb_pb.TransactionBufferSnapshotIndexes:
    datum = _decode(data, "TransactionBufferSnapshotIndexes", where)
    indexes = tb_pb.TransactionBufferSnapshotIndexes(
        indexList=[
            tb_pb.TransactionBufferSnapshotIndex(**{f: int(i[f]) for f in _INDEX_FIELDS})
            for i in _items(datum, "indexList")
        ]
    )
    if datum["topicName"] is not None:
        indexes.topicName = str(datum["topicName"])
    meta = datum["snapshot"]
    if meta is not None:
        indexes.snapshot.CopyFrom(
            tb_pb.TransactionBufferSnapshotIndexesMetadata(
                maxReadPositionLedgerId=int(meta["maxReadPositionLedgerId"]),
                maxReadPositionEntryId=int(meta["maxReadPositionEntryId"]),
                aborts=_txn_ids_from_datum(meta, "aborts"),
            )
        )
    return indexes
