"""``BucketSnapshotStorage`` over the engine's managed ledgers (PIP-195, DD-17, DD-18, DD-19).

Each bucket snapshot is one managed ledger of its own, named ``<prefix>-<bucket id>``: entry 0 is
the ``SnapshotMetadata`` proto, entries 1..N the ``SnapshotSegment`` protos in time order, exactly
the layout of Pulsar's ``BookkeeperBucketSnapshotStorage`` (one BookKeeper ledger per bucket).
The bucket catalogue is kept in the subscription cursor's properties
``#pulsar.internal.delayed.bucket_<start>_<end> = <bucket id>``.

The pure tracker (``reference.delayed``) decides; this class carries out its effects
(:meth:`apply`) on real ledgers and reads them back for recovery (:meth:`load`), so a tracker
recovered from these ledgers equals one recovered from the model's own storage.  Failures are
injected per operation (:meth:`inject_failure`), each call consuming one, as Pulsar's
``MockBucketSnapshotStorage`` does.

With asynchronous creation (DD-31) the tracker first emits ``RequestCreateBucketSnapshot``; the
runner decides the outcome and steps ``CompleteBucketSnapshot``, whose effects (the
``CreateBucketSnapshot`` with its bucket id, the property, the merge sources' deletes) are what
:meth:`apply` writes.  The request itself writes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

import immutables
from pyroaring import BitMap, FrozenBitMap

from engine.storage.ledger import LedgerError, ManagedCursor, ManagedLedger, NoSuchEntry
from reference import delayed as dd
from spec.errors import BucketNotExist, BucketSnapshotPersistence, BucketSnapshotSerialization, DomainError
from spec.pb import DelayedMessageIndexBucketMetadata_pb2 as metadata_pb
from spec.pb import DelayedMessageIndexBucketSegment_pb2 as segment_pb
from spec.result import Effect
from spec.types import Position

__all__ = [
    "BucketNotFound",
    "BucketSnapshotStorage",
    "SnapshotCorrupt",
    "SnapshotStorageFailed",
    "clean_residual_snapshots",
    "decode_metadata",
    "decode_segment",
    "encode_segment",
    "segment_reads",
]

OPERATIONS = ("create", "metadata", "load", "delete", "length")


class SnapshotStorageFailed(LedgerError):
    def domain_error(self) -> DomainError:
        return BucketSnapshotPersistence(str(self))


class BucketNotFound(LedgerError):
    def domain_error(self) -> DomainError:
        return BucketNotExist(str(self))


class SnapshotCorrupt(LedgerError):
    def domain_error(self) -> DomainError:
        return BucketSnapshotSerialization(str(self))


def encode_segment(run: dd.Run) -> bytes:
    message = segment_pb.SnapshotSegment()
    for ts, ledger, entry in run.indexes():
        message.indexes.add(timestamp=ts, ledger_id=ledger, entry_id=entry)
    return message.SerializeToString()


def decode_segment(data: bytes) -> dd.Run:
    try:
        message = segment_pb.SnapshotSegment.FromString(data)
    except Exception as exc:  # protobuf raises DecodeError, a plain Exception subclass
        raise SnapshotCorrupt(f"bad SnapshotSegment: {exc}") from None
    return dd.compact_run([(i.timestamp, i.ledger_id, i.entry_id) for i in message.indexes])


def decode_metadata(data: bytes) -> tuple[dd.SegmentMeta, ...]:
    try:
        message = metadata_pb.SnapshotMetadata.FromString(data)
        out = []
        for seg in message.metadata_list:
            bitmaps = {
                ledger: FrozenBitMap(BitMap.deserialize(raw)) for ledger, raw in seg.delayed_index_bit_map.items()
            }
            out.append(dd.SegmentMeta(seg.min_schedule_timestamp, seg.max_schedule_timestamp, immutables.Map(bitmaps)))
    except Exception as exc:
        raise SnapshotCorrupt(f"bad SnapshotMetadata: {exc}") from None
    return tuple(out)


class BucketSnapshotStorage:
    """Bucket snapshots as managed ledgers, plus the cursor-property catalogue.

    ``open_ledger(name)`` creates or opens the managed ledger ``name``; ``delete_ledger(name)``
    removes it for good (missing is fine).  ``cursor`` is the subscription's cursor.
    """

    def __init__(
        self,
        open_ledger: Callable[[str], ManagedLedger],
        delete_ledger: Callable[[str], None],
        cursor: ManagedCursor,
        *,
        prefix: str = "delayed-bucket",
    ) -> None:
        self._open = open_ledger
        self._delete = delete_ledger
        self._cursor = cursor
        self._prefix = prefix
        self._ledgers: dict[int, tuple[ManagedLedger, Position]] = {}  # bucket id -> (ledger, entry 0)
        self._failures: dict[str, int] = {}

    # -- failure injection ----------------------------------------------------------------------

    def inject_failure(self, operation: str, count: int = 1) -> None:
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}; one of {OPERATIONS}")
        self._failures[operation] = self._failures.get(operation, 0) + count

    def pending_failures(self, operation: str) -> int:
        return self._failures.get(operation, 0)

    def _maybe_fail(self, operation: str) -> None:
        if self._failures.get(operation, 0) > 0:
            self._failures[operation] -= 1
            raise SnapshotStorageFailed(f"injected {operation} failure")

    # -- the BucketSnapshotStorage interface ----------------------------------------------------

    def _name(self, bucket_id: int) -> str:
        return f"{self._prefix}-{bucket_id}"

    def name_of(self, bucket_id: int) -> str:
        """The managed ledger holding bucket ``bucket_id``'s snapshot."""
        return self._name(bucket_id)

    def create_bucket_snapshot(self, bucket_id: int, snapshot: dd.Snapshot) -> int:
        """Write entry 0 (metadata) and entries 1..N (segments); a failed write deletes the ledger."""
        self._maybe_fail("create")
        name = self._name(bucket_id)
        ledger = self._open(name)
        try:
            first = ledger.append(dd.encode_metadata(snapshot.metadata, metadata_pb).SerializeToString())
            for run in snapshot.segments:
                ledger.append(encode_segment(run))
        except LedgerError:
            ledger.close()
            self._delete(name)
            raise
        self._ledgers[bucket_id] = (ledger, first)
        return bucket_id

    def _entries(self, bucket_id: int, first: int, count: int) -> list[bytes]:
        handle = self._ledgers.get(bucket_id)
        if handle is None:
            raise BucketNotFound(f"bucket snapshot {bucket_id} does not exist")
        ledger, start = handle
        # Entries are counted from entry 0, not addressed by entry id: a snapshot with more segments
        # than managedLedgerMaxEntriesPerLedger spans several ledgers of its managed ledger.
        entries = ledger.read(start, first + count)
        return [e.data for e in entries[first:]]

    def get_bucket_snapshot_metadata(self, bucket_id: int) -> tuple[dd.SegmentMeta, ...]:
        self._maybe_fail("metadata")
        data = self._entries(bucket_id, 0, 1)
        if not data:
            raise SnapshotCorrupt(f"bucket snapshot {bucket_id} has no metadata entry")
        return decode_metadata(data[0])

    def get_bucket_snapshot_segment(self, bucket_id: int, first: int, last: int) -> list[dd.Run]:
        """Segments ``first..last`` (entry ids, inclusive); ``last`` is clamped to what exists."""
        self._maybe_fail("load")
        if first < 1 or last < first:
            raise ValueError(f"bad segment range {first}..{last}")
        return [decode_segment(data) for data in self._entries(bucket_id, first, last - first + 1)]

    def get_bucket_snapshot_length(self, bucket_id: int) -> int:
        self._maybe_fail("length")
        return sum(len(data) for data in self._entries(bucket_id, 0, 1 << 30))

    def delete_bucket_snapshot(self, bucket_id: int) -> None:
        """Delete the snapshot ledger; deleting a missing one succeeds (ST4)."""
        self._maybe_fail("delete")
        handle = self._ledgers.pop(bucket_id, None)
        if handle is not None:
            handle[0].close()
        self._delete(self._name(bucket_id))

    def bucket_ids(self) -> tuple[int, ...]:
        return tuple(sorted(self._ledgers))

    # -- driving the pure tracker ---------------------------------------------------------------

    def apply(self, effects: Iterable[Effect]) -> None:
        """Carry out a step's storage effects in order (DD-18 create then property; DD-19 delete
        ledger then property)."""
        for effect in effects:
            if isinstance(effect, dd.CreateBucketSnapshot):
                self.create_bucket_snapshot(effect.bucket_id, effect.snapshot)
            elif isinstance(effect, dd.DeleteBucketSnapshot):
                self.delete_bucket_snapshot(effect.bucket_id)
            elif isinstance(effect, dd.SetCursorProperty):
                self._cursor.set_property(effect.key, effect.value)
            elif isinstance(effect, dd.RemoveCursorProperty):
                self._cursor.remove_property(effect.key)

    def load(self) -> dd.Storage:
        """Read the catalogue and every listed snapshot back as the model's :class:`Storage`,
        for ``reference.delayed.recover``.  A listed but missing ledger is simply absent."""
        properties = {k: v for k, v in self._cursor.properties.items() if k.startswith(dd.BUCKET_PROPERTY_PREFIX)}
        snapshots: dict[int, dd.Snapshot] = {}
        for key, value in properties.items():
            bucket_id = int(value)
            if bucket_id not in self._ledgers:
                continue
            start, end = (int(x) for x in key.rsplit("_", 2)[1:])
            metadata = self.get_bucket_snapshot_metadata(bucket_id)
            segments = tuple(self.get_bucket_snapshot_segment(bucket_id, 1, len(metadata))) if metadata else ()
            snapshots[bucket_id] = dd.Snapshot(
                start, end, metadata, segments, self.get_bucket_snapshot_length(bucket_id)
            )
        next_id = max([*self._ledgers, *snapshots, 0]) + 1
        return dd.Storage(immutables.Map(snapshots), immutables.Map(properties), next_id)

    def attach(self, bucket_id: int, ledger: ManagedLedger, first: Position) -> None:
        """Register an existing snapshot ledger (after a broker restart re-opens it)."""
        self._ledgers[bucket_id] = (ledger, first)

    def handles(self) -> dict[int, tuple[ManagedLedger, Position]]:
        return dict(self._ledgers)


def segment_reads(
    command: dd.Command, old: dd.Tracker, new: dd.Tracker, merged: bool
) -> Iterator[tuple[int, int, bool]]:
    """(bucket id, segment entry, is a "load") of each snapshot segment the step read:

    * a bucket kept its snapshot and its current segment moved forward: each new segment was
      loaded into the shared queue (a "load");
    * a bucket left with its snapshot still in the model's storage: if the step merged and a
      new bucket encloses its range, it was a merge source whose remaining segments the merge
      read (Pulsar reads them for the merge, not as "load" operations); if the step delivered
      messages, its remaining segments were loaded and consumed, and the bucket deleted when no
      segment was left.  (A bucket leaving by trim or clear was not read.)
    """
    if not isinstance(old, dd.BucketTracker) or not isinstance(new, dd.BucketTracker):
        return
    now = {b.bucket_id: b for b in new.buckets if b.bucket_id >= 0}
    ranges = {(b.start_ledger_id, b.end_ledger_id) for b in old.buckets}
    fresh = [b for b in new.buckets if (b.start_ledger_id, b.end_ledger_id) not in ranges]
    for b in old.buckets:
        if b.bucket_id < 0:
            continue
        kept = now.get(b.bucket_id)
        if kept is not None:
            for entry in range(b.current_segment + 1, kept.current_segment + 1):
                yield b.bucket_id, entry, True
            continue
        if b.bucket_id not in old.storage.snapshots:
            continue  # lost behind the tracker's back: nothing was read
        source = merged and any(
            n.start_ledger_id <= b.start_ledger_id and b.end_ledger_id <= n.end_ledger_id for n in fresh
        )
        if source or isinstance(command, dd.GetScheduledMessages):
            for entry in range(b.current_segment + 1, b.last_segment + 1):
                yield b.bucket_id, entry, not source


def clean_residual_snapshots(storage: BucketSnapshotStorage, cursor: ManagedCursor) -> tuple[int, ...]:
    """Unsubscribe without a live tracker: for each bucket property, remove it, then delete its
    ledger (Pulsar's ``cleanResidualSnapshots``, CP4).  Returns the deleted bucket ids."""
    deleted: list[int] = []
    for key, value in sorted(cursor.properties.items()):
        if not key.startswith(dd.BUCKET_PROPERTY_PREFIX):
            continue
        cursor.remove_property(key)
        with contextlib.suppress(NoSuchEntry):
            storage.delete_bucket_snapshot(int(value))
        deleted.append(int(value))
    return tuple(deleted)
