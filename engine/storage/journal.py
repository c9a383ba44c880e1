"""The write-ahead journal of a file-ledger store: one log for every change of every ledger in it.

Every change a :class:`~engine.storage.file_ledger.FileLedger` makes -- an entry appended, a
cursor's new state, a new metadata version (roll-over, properties, deleted ledgers), a managed
ledger dropped -- is one **record** in the journal.  A change is durable once the journal is
synced past its record; the ledger files and ``METADATA`` are written behind (not synced) and
made durable only at a **checkpoint**, after which the journal's older segments are deleted.
Recovery rebuilds every ledger from its last checkpoint plus its records, in order.

**Group commit** (as BookKeeper's journal does): records are queued; a commit writes every queued
record as one **batch** at the end of the current segment and syncs it once, so concurrent
writers -- of any ledger of the store -- share one ``fdatasync``.  A batch is written only after
the previous one is synced, so at any moment at most the last batch is unsynced.

Byte layout (all integers big-endian, every checksum CRC32C), segment ``journal-<seq>.log``::

    header   magic "TMJS" | version u16 | flags u16 | seq u64 | first lsn u64 | CRC u32   (28 bytes)
    record   magic "TMJR" | length u32 | lsn u64 | batch start u64 | header CRC u32 | payload CRC u32
             payload: kind u8 | key length u16 | key (UTF-8) | body                          (32 + n)

``lsn`` numbers records across segments (+1 each); ``batch start`` is the offset where the
record's batch begins: everything before it was synced before the batch was written.  Bodies:
``ENTRY`` ledger id u64, entry id u64, the entry's bytes; ``CURSOR`` canonical JSON
``{"cursor": name, "state": state or null}``; ``META`` an encoded ``METADATA`` file; ``DROP`` empty
(the managed ledger was deleted).

Reading a segment (:func:`scan_segment`): the first record that does not check out ends the
valid records.  It is a **torn tail** -- what a power cut left of the last, unsynced batch -- when
no later intact record proves it was synced: a record whose batch starts after the bad bytes was
written only once they were synced, so the bad bytes are **damage** and
:class:`~engine.storage.file_format.LedgerCorrupted` names the segment and the offset.  (The one
case no log can tell apart: damage inside the last synced batch when no batch follows it.)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import itertools
import os
import re
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from functools import partial
from typing import Final

from engine.storage.disk import FileSystem
from engine.storage.file_format import LedgerCorrupted, crc32c

__all__ = [
    "JOURNAL_RECORD",
    "JOURNAL_SEGMENT",
    "RECORD_MAGIC",
    "SEGMENT_MAGIC",
    "Journal",
    "JournalFailed",
    "RawRecord",
    "RecordKind",
    "SegmentScan",
    "decode_record_payload",
    "encode_record",
    "encode_record_payload",
    "encode_segment_header",
    "parse_segment_file_name",
    "scan_segment",
    "segment_file_name",
]

JOURNAL_VERSION: Final = 1
SEGMENT_MAGIC: Final = b"TMJS"
RECORD_MAGIC: Final = b"TMJR"
# magic, version, flags, segment sequence number, first lsn, CRC32C of the 24 bytes before it.
JOURNAL_SEGMENT: Final = struct.Struct(">4sHHQQI")
# magic, payload length, lsn, batch start, CRC32C of the 24 bytes before it, CRC32C of the payload.
JOURNAL_RECORD: Final = struct.Struct(">4sIQQII")
_KEY: Final = struct.Struct(">BH")
_ENTRY: Final = struct.Struct(">QQ")
MAX_RECORD_BYTES: Final = 0xFFFF_FFFF

_SEGMENT_FILE = re.compile(r"^journal-(\d{20})\.log$")


class RecordKind(enum.IntEnum):
    ENTRY = 1
    CURSOR = 2
    META = 3
    DROP = 4


class JournalFailed(Exception):
    """A journal write or sync failed: nothing queued since the last good commit is durable, and
    the journal takes nothing more (its owner must recover from disk, as a bookie restarts)."""


def segment_file_name(seq: int) -> str:
    return f"journal-{seq:020d}.log"


def parse_segment_file_name(name: str) -> int | None:
    match = _SEGMENT_FILE.match(name)
    return int(match.group(1)) if match else None


def _crc(*parts: bytes) -> int:
    return crc32c(*parts)


def encode_segment_header(seq: int, first_lsn: int) -> bytes:
    head = struct.pack(">4sHHQQ", SEGMENT_MAGIC, JOURNAL_VERSION, 0, seq, first_lsn)
    return head + struct.pack(">I", _crc(head))


def encode_record_payload(kind: RecordKind, key: str, body: bytes) -> bytes:
    raw = key.encode()
    return _KEY.pack(kind, len(raw)) + raw + body


def encode_entry_body(ledger_id: int, entry_id: int, data: bytes) -> bytes:
    return _ENTRY.pack(ledger_id, entry_id) + data


def encode_record(lsn: int, batch_start: int, payload: bytes) -> bytes:
    head = struct.pack(">4sIQQ", RECORD_MAGIC, len(payload), lsn, batch_start)
    return head + struct.pack(">II", _crc(head), _crc(payload)) + payload


@dataclass(frozen=True, slots=True)
class RawRecord:
    """One intact record as read: its lsn, kind, ledger key and body, and where it is."""

    lsn: int
    kind: RecordKind
    key: str
    body: bytes
    file: str
    offset: int

    def entry(self) -> tuple[int, int, bytes]:
        """An ENTRY record's (ledger id, entry id, data)."""
        ledger_id, entry_id = _ENTRY.unpack_from(self.body)
        return ledger_id, entry_id, self.body[_ENTRY.size :]


class _BadPayload(Exception):
    pass


def decode_record_payload(payload: bytes) -> tuple[RecordKind, str, bytes]:
    """Split a payload into (kind, key, body); raises ValueError on a malformed one."""
    if len(payload) < _KEY.size:
        raise ValueError(f"record payload of {len(payload)} bytes is shorter than its kind and key length")
    kind_code, key_length = _KEY.unpack_from(payload)
    try:
        kind = RecordKind(kind_code)
    except ValueError:
        raise ValueError(f"unknown record kind {kind_code}") from None
    end = _KEY.size + key_length
    if end > len(payload):
        raise ValueError(f"key of {key_length} bytes runs past the payload")
    try:
        key = payload[_KEY.size : end].decode()
    except UnicodeDecodeError as exc:
        raise ValueError(f"key is not UTF-8: {exc.reason}") from None
    body = payload[end:]
    if kind is RecordKind.ENTRY and len(body) < _ENTRY.size:
        raise ValueError("entry record shorter than its ledger and entry ids")
    return kind, key, body


@dataclass(frozen=True, slots=True)
class SegmentScan:
    """What a scan of one segment found.  ``valid_length`` is where the last intact record ends (0
    when not even the header is intact: a creation a power cut cut short); ``torn_bytes`` follow."""

    file: str
    seq: int
    first_lsn: int
    records: tuple[RawRecord, ...]
    valid_length: int
    torn_bytes: int
    torn_reason: str | None = None

    @property
    def next_lsn(self) -> int:
        return self.records[-1].lsn + 1 if self.records else self.first_lsn


ReadAt = Callable[[int, int], bytes]


def _corrupted(message: str, *, file: str, offset: int) -> Exception:
    return LedgerCorrupted(message, file=file, offset=offset)


def scan_segment(read_at: ReadAt, size: int, *, file: str, seq: int | None = None) -> SegmentScan:
    """Check one segment record by record (see the module docstring for what is torn and what is
    damage).  Record lsns must count up by one from the header's first lsn."""
    header_size = JOURNAL_SEGMENT.size
    start = read_at(0, min(size, header_size))
    # The header is synced before any record is written: a creation a power cut cut short (a
    # prefix of the header, or zeros) holds no record.  Other short bytes are not ours.
    if size < header_size:
        if start.count(0) == len(start) or _is_header_prefix(start, seq):
            return SegmentScan(file, seq or 0, 0, (), 0, size, "incomplete segment header" if size else None)
        raise _corrupted("journal segment shorter than its header, and not a prefix of one", file=file, offset=0)
    if start.count(0) == len(start) and _all_zero(read_at, 0, size):
        return SegmentScan(file, seq or 0, 0, (), 0, size, "zero-filled segment")
    magic, version, flags, found_seq, first_lsn, crc = JOURNAL_SEGMENT.unpack(start)
    if magic != SEGMENT_MAGIC:
        raise _corrupted(f"bad magic {magic!r}, expected {SEGMENT_MAGIC!r}", file=file, offset=0)
    if version != JOURNAL_VERSION:
        raise _corrupted(
            f"unsupported journal version {version} (this reader knows {JOURNAL_VERSION})", file=file, offset=4
        )
    if crc != _crc(start[:24]):
        raise _corrupted("journal segment header CRC mismatch", file=file, offset=24)
    if flags != 0:
        raise _corrupted(f"unknown journal header flags 0x{flags:04x}", file=file, offset=6)
    if seq is not None and found_seq != seq:
        raise _corrupted(f"header names segment {found_seq}, file is segment {seq}", file=file, offset=8)
    records: list[RawRecord] = []
    offset = header_size
    batch_floor = header_size
    while offset < size:
        problem = _record_at(read_at, size, offset, file)
        if isinstance(problem, str):
            _torn_or_damage(read_at, size, offset, file, problem)
            return SegmentScan(file, found_seq, first_lsn, tuple(records), offset, size - offset, problem)
        record, end, batch_start = problem
        expected = first_lsn + len(records)
        if record.lsn != expected:
            raise _corrupted(f"record has lsn {record.lsn}, expected {expected}", file=file, offset=offset + 8)
        if not batch_floor <= batch_start <= offset:
            raise _corrupted(
                f"record's batch starts at {batch_start}, outside [{batch_floor}, {offset}]",
                file=file,
                offset=offset + 16,
            )
        batch_floor = batch_start
        records.append(record)
        offset = end
    return SegmentScan(file, found_seq, first_lsn, tuple(records), offset, 0)


def _is_header_prefix(start: bytes, seq: int | None) -> bool:
    # Without knowing first_lsn a full header cannot be rebuilt; its fixed leading bytes can.
    fixed = struct.pack(">4sHH", SEGMENT_MAGIC, JOURNAL_VERSION, 0)
    if seq is not None:
        fixed += struct.pack(">Q", seq)
    n = min(len(start), len(fixed))
    return start[:n] == fixed[:n]


def _all_zero(read_at: ReadAt, offset: int, size: int) -> bool:
    position = offset
    while position < size:
        chunk = read_at(position, min(1 << 20, size - position))
        if not chunk or chunk.count(0) != len(chunk):
            return not chunk
        position += len(chunk)
    return True


def _record_at(read_at: ReadAt, size: int, offset: int, file: str) -> tuple[RawRecord, int, int] | str:
    """The intact record at ``offset`` with its end and batch start, or why there is none."""
    if size - offset < JOURNAL_RECORD.size:
        return "incomplete record header"
    head = read_at(offset, JOURNAL_RECORD.size)
    magic, length, lsn, batch_start, head_crc, payload_crc = JOURNAL_RECORD.unpack(head)
    if magic != RECORD_MAGIC or head_crc != _crc(head[:24]):
        return "record header does not check out"
    end = offset + JOURNAL_RECORD.size + length
    if end > size:
        return "record runs past the end of the segment"
    payload = read_at(offset + JOURNAL_RECORD.size, length)
    if payload_crc != _crc(payload):
        return "record payload CRC mismatch"
    try:
        kind, key, body = decode_record_payload(payload)
    except ValueError as exc:
        # The CRC matched, so this is a writer bug or a foreign file: damage, never a tear.
        raise _corrupted(
            f"record payload is malformed: {exc}", file=file, offset=offset + JOURNAL_RECORD.size
        ) from None
    return RawRecord(lsn, kind, key, body, file, offset), end, batch_start


def _torn_or_damage(read_at: ReadAt, size: int, bad: int, file: str, reason: str) -> None:
    """Bad bytes at ``bad``: damage if an intact record after them belongs to a later batch."""
    position = bad + 1
    while position < size:
        window = read_at(position, min(1 << 20, size - position))
        found = window.find(RECORD_MAGIC)
        if found < 0:
            position += max(1, len(window) - len(RECORD_MAGIC) + 1)
            continue
        at = position + found
        later = _later_record(read_at, size, at)
        if later is not None and later > bad:
            raise _corrupted(f"{reason}, but a later batch proves these bytes were synced", file=file, offset=bad)
        position = at + 1


def _later_record(read_at: ReadAt, size: int, offset: int) -> int | None:
    """The batch start of an intact record at ``offset`` (header and payload check out), if any."""
    if size - offset < JOURNAL_RECORD.size:
        return None
    head = read_at(offset, JOURNAL_RECORD.size)
    magic, length, _lsn, batch_start, head_crc, payload_crc = JOURNAL_RECORD.unpack(head)
    if magic != RECORD_MAGIC or head_crc != _crc(head[:24]):
        return None
    end = offset + JOURNAL_RECORD.size + length
    if end > size or payload_crc != _crc(read_at(offset + JOURNAL_RECORD.size, length)):
        return None
    return int(batch_start)


# ---------------------------------------------------------------------------------------------
# The live journal.


@dataclass(frozen=True, slots=True)
class _Batch:
    """A sealed batch: its bytes, where they go, and the tickets and lsns they hold."""

    fd: int
    first_lsn: int
    start: int
    blob: bytes
    first_ticket: int
    last_ticket: int
    records: int


class Journal:
    """The appending end of a store's journal: queue records, commit them in batches.

    ``directory`` holds the segments.  :meth:`start` begins a new segment (its header synced and
    the directory synced before any record goes in).  :meth:`append` queues a record and returns
    its **ticket** (records get their lsn when their batch is written, so a failed batch leaves no
    gap); :meth:`commit` writes everything queued as one batch and syncs it; :meth:`wait` is the
    threaded form, where the first waiter to find no commit running commits for everyone queued
    (the others wait for it).

    When a batch fails, everything queued until then fails with it.  If the segment can be cut
    back to where the batch began (and that synced), the journal is only *suspended*: its owner
    undoes what those records did in memory and calls :meth:`resume`.  Otherwise -- or with
    ``recoverable=False`` -- it has **failed** and raises :class:`JournalFailed` for good."""

    def __init__(self, fs: FileSystem, directory: str) -> None:
        self.fs = fs
        self.directory = directory
        self.lock = threading.Lock()
        self._cond = threading.Condition(self.lock)
        self._queue: list[tuple[int, bytes]] = []  # (ticket, payload) waiting for the next batch
        self._queued_bytes = 0
        self.fd: int | None = None
        self.seq = 0
        self.end = 0  # where the next batch goes
        self.durable_lsn = -1  # every record up to this lsn is synced
        self._next_ticket = 0
        self.durable_ticket = -1  # every ticket up to this one is durable, unless it failed
        self._failed: list[tuple[int, int]] = []  # ticket ranges whose batch failed
        self.segment_records = 0
        self._committing = False
        self.suspended: BaseException | None = None
        self.failed: BaseException | None = None
        self.commits = 0  # batches written and synced
        self.records_committed = 0
        # How long the latest batches' write and sync took (seconds): what the disk costs a commit.
        self.sync_seconds: deque[float] = deque(maxlen=16)

    @property
    def path(self) -> str:
        return os.path.join(self.directory, segment_file_name(self.seq))

    @property
    def next_lsn(self) -> int:
        """The lsn the next record written will get."""
        return self.durable_lsn + 1

    def start(self, seq: int, first_lsn: int) -> None:
        """Begin segment ``seq`` whose first record will have ``first_lsn``; the previous segment's
        descriptor is closed.  Nothing may be queued.  Raises OSError on failure."""
        assert not self._queue, "a new segment starts only after a commit"
        fs = self.fs
        path = os.path.join(self.directory, segment_file_name(seq))
        fd = fs.open(path, create=True, truncate=True)
        try:
            fs.pwrite(fd, encode_segment_header(seq, first_lsn), 0)
            started = time.perf_counter()
            fs.sync(fd)
            self.sync_seconds.append(time.perf_counter() - started)
            fs.sync_dir(self.directory)
        except OSError:
            fs.close(fd)
            raise
        old, self.fd = self.fd, fd
        if old is not None:
            with contextlib.suppress(OSError):
                fs.close(old)
        self.seq = seq
        self.end = JOURNAL_SEGMENT.size
        self.durable_lsn = first_lsn - 1
        self.segment_records = 0

    @property
    def pending(self) -> bool:
        """Records are queued (not yet written and synced)."""
        return bool(self._queue)

    @property
    def queued(self) -> int:
        """How many records wait for the next batch."""
        return len(self._queue)

    @property
    def segment_bytes(self) -> int:
        return self.end + self._queued_bytes

    def _check(self) -> None:
        if self.failed is not None:
            raise JournalFailed(f"the journal {self.path} failed: {self.failed}")
        if self.suspended is not None:
            raise JournalFailed(f"the journal {self.path} is recovering from a failed write: {self.suspended}")

    def append(self, kind: RecordKind, key: str, body: bytes) -> int:
        """Queue one record; returns its ticket.  Callers serialise appends (the store's lock)."""
        payload = encode_record_payload(kind, key, body)
        if len(payload) > MAX_RECORD_BYTES:
            raise ValueError(f"a journal record holds at most {MAX_RECORD_BYTES} bytes, got {len(payload)}")
        with self.lock:
            self._check()
            ticket = self._next_ticket
            self._next_ticket += 1
            self._queue.append((ticket, payload))
            self._queued_bytes += JOURNAL_RECORD.size + len(payload)
            return ticket

    def commit(self, *, recoverable: bool = True) -> None:
        """Write every queued record as one batch and sync it (nothing to do when none is queued)."""
        with self.lock:
            while self._committing:
                self._cond.wait()
            self._commit_locked(recoverable)

    def wait(self, ticket: int) -> None:
        """Return once record ``ticket`` is durable, committing for everyone queued when no commit is
        running (group commit); raises :class:`JournalFailed` when the batch holding it failed."""
        with self.lock:
            while True:
                if any(lo <= ticket <= hi for lo, hi in self._failed):
                    raise JournalFailed(
                        f"journal record {ticket} was not made durable: {self.suspended or self.failed}"
                    )
                if ticket <= self.durable_ticket:
                    return
                if self.failed is not None:
                    raise JournalFailed(f"journal record {ticket} was not made durable: {self.failed}")
                if self._committing:
                    self._cond.wait()
                    continue
                self._commit_locked(True)

    def commit_in_background(
        self, executor: Executor | None, *, recoverable: bool = True
    ) -> concurrent.futures.Future[None] | None:
        """Seal everything queued as one batch now and write and sync it on ``executor``'s thread
        (inline when None), so the caller's work overlaps the sync (``fdatasync`` releases the
        GIL).  Returns None when nothing is queued, else a future that is done once the batch is
        durable, or holds the :class:`JournalFailed` that failed it.  Until then every other
        commit waits for it, so batches are still written one after another."""
        with self.lock:
            while self._committing:
                self._cond.wait()
            self._check()
            batch = self._seal_locked()
        if batch is None:
            return None

        def write() -> None:
            try:
                error, cut = self._write(batch, recoverable)
            except BaseException:
                with self.lock:
                    self._committing = False
                    self._cond.notify_all()
                raise
            with self.lock:
                self._finish_locked(batch, error, cut)

        if executor is None:
            done: concurrent.futures.Future[None] = concurrent.futures.Future()
            try:
                write()
            except JournalFailed as exc:
                done.set_exception(exc)
            else:
                done.set_result(None)
            return done
        return executor.submit(write)

    def _commit_locked(self, recoverable: bool) -> None:
        self._check()
        batch = self._seal_locked()
        if batch is None:
            return
        self.lock.release()
        try:
            error, cut = self._write(batch, recoverable)
        except BaseException:
            self.lock.acquire()
            self._committing = False
            self._cond.notify_all()
            raise
        self.lock.acquire()
        self._finish_locked(batch, error, cut)

    def _seal_locked(self) -> _Batch | None:
        """Take everything queued as the next batch (encoded, not yet written); marks a commit running."""
        if not self._queue:
            return None
        assert self.fd is not None, "the journal was not started"
        batch, self._queue = self._queue, []
        self._queued_bytes = 0
        first = self.durable_lsn + 1
        start = self.end
        blob = b"".join(encode_record(first + i, start, payload) for i, (_, payload) in enumerate(batch))
        self._committing = True
        return _Batch(self.fd, first, start, blob, batch[0][0], batch[-1][0], len(batch))

    def _write(self, batch: _Batch, recoverable: bool) -> tuple[OSError | None, bool]:
        """Write and sync one sealed batch (without the lock); returns the error and whether the
        batch could be cut off again after one."""
        fs = self.fs
        started = time.perf_counter()
        try:
            fs.pwrite(batch.fd, batch.blob, batch.start)
            fs.sync(batch.fd)
        except OSError as exc:
            if recoverable:
                # Cut the batch off so it cannot come back after a crash as records whose writers
                # saw them fail; only if that cut is synced may the journal go on.
                try:
                    fs.truncate(batch.fd, batch.start)
                    fs.sync(batch.fd)
                except OSError:
                    return exc, False
                return exc, True
            return exc, False
        self.sync_seconds.append(time.perf_counter() - started)
        return None, False

    def _finish_locked(self, batch: _Batch, error: OSError | None, cut: bool) -> None:
        self._committing = False
        self._cond.notify_all()
        if error is not None:
            # Everything queued meanwhile was built on what failed: it fails too.
            last = self._next_ticket - 1
            self._failed.append((batch.first_ticket, last))
            self._queue.clear()
            self._queued_bytes = 0
            if cut:
                self.suspended = error
            else:
                self.failed = error
            raise JournalFailed(f"journal commit to {self.path} failed: {error}") from error
        self.end = batch.start + len(batch.blob)
        self.durable_lsn = batch.first_lsn + batch.records - 1
        self.durable_ticket = batch.last_ticket
        self.segment_records += batch.records
        self.commits += 1
        self.records_committed += batch.records

    def resume(self) -> None:
        """Take records again after a recoverable failure (the owner undid what failed)."""
        with self.lock:
            self.suspended = None
            self._cond.notify_all()

    def fail(self, error: BaseException) -> None:
        """Mark the journal failed (its owner lost something it cannot write): nothing more commits."""
        with self.lock:
            if self.failed is None:
                self.failed = error
            if self._queue:
                self._failed.append((self._queue[0][0], self._next_ticket - 1))
            self._queue.clear()
            self._queued_bytes = 0
            self._cond.notify_all()

    def close(self) -> None:
        """Drop the descriptor and anything queued (a crash, or after a final checkpoint)."""
        self.fail(JournalFailed("the journal is closed"))
        with self.lock:
            fd, self.fd = self.fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                self.fs.close(fd)


def read_segments(fs: FileSystem, directory: str, names: Iterable[str]) -> list[SegmentScan]:
    """Scan every segment among ``names`` (file names in ``directory``), in sequence order, and
    check that lsns continue from one segment to the next."""
    scans: list[SegmentScan] = []
    for seq, name in sorted((s, n) for n in names if (s := parse_segment_file_name(n)) is not None):
        path = os.path.join(directory, name)
        fd = fs.open(path)
        try:
            scan = scan_segment(partial(_pread, fs, fd), fs.size(fd), file=path, seq=seq)
        finally:
            fs.close(fd)
        scans.append(scan)
    live = [s for s in scans if s.valid_length]  # a header cut short holds nothing
    for before, after in itertools.pairwise(live):
        if after.first_lsn != before.next_lsn:
            raise _corrupted(
                f"segment {before.seq} ends at lsn {before.next_lsn - 1} but segment {after.seq} starts at "
                f"lsn {after.first_lsn}: records are missing",
                file=before.file,
                offset=before.valid_length,
            )
    return scans


def _pread(fs: FileSystem, fd: int, offset: int, size: int) -> bytes:
    return fs.pread(fd, size, offset)


def group_by_key(scans: Sequence[SegmentScan]) -> dict[str, list[RawRecord]]:
    """Every record, by ledger key, in lsn order; a DROP record discards the key's earlier ones
    and stays as the key's first record (the directory must be gone)."""
    out: dict[str, list[RawRecord]] = {}
    for scan in scans:
        for record in scan.records:
            if record.kind is RecordKind.DROP:
                out[record.key] = [record]
            else:
                out.setdefault(record.key, []).append(record)
    return out
