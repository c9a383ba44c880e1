"""A file ledger handle's ledger files: where each entry's frame is, what is durable, and the
descriptors it reads them through.

Each ledger of a managed ledger is one file (``ledger-<id>.log``: a header, then framed entries;
:mod:`engine.storage.file_format`).  A :class:`LedgerFile` is what the handle knows of one: every
written entry's offset and length, how many are acknowledged, whether it was written since the
last checkpoint.  :class:`LedgerFiles` is the handle's set of them: only the current ledger's
file stays open for writing; sealed ledgers (rolled over, or closed by recovery) are only read,
so at most ``max_open_sealed`` of their descriptors stay open, least recently read closed first,
and one is reopened when a read needs it.  Every read checks the frame's CRCs, so damage after
open is never returned as data.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial

from engine.storage.disk import FileSystem
from engine.storage.file_format import (
    FRAME_HEADER,
    LEDGER_HEADER,
    FrameInfo,
    LedgerCorrupted,
    LedgerRecord,
    crc32c,
    encode_ledger_header,
)
from engine.storage.file_recovery import FilePlan
from engine.storage.ledger import Entry, LedgerError, LedgerWriteFailed
from spec.types import Position

__all__ = ["Corrupted", "LedgerFile", "LedgerFiles", "best_effort"]

# The store's notice of damage found after open (it tells its owner), returning the error to raise.
Corrupted = Callable[[LedgerCorrupted], LedgerCorrupted]


def best_effort(action: Callable[[], object]) -> None:
    """Run a clean-up after a failure, or of state recovery also repairs: a second error here must
    not hide the first, and leaves nothing recovery cannot handle."""
    with contextlib.suppress(OSError):
        action()


@dataclass
class LedgerFile:
    """A ledger file this handle reads (and, for the current ledger, writes)."""

    ledger_id: int
    path: str
    fd: int | None  # None: a sealed ledger whose descriptor was given back; reopened to read
    offsets: list[int] = field(default_factory=list)  # frame start of each written entry
    lengths: list[int] = field(default_factory=list)  # payload length of each written entry
    durable_entries: int = 0  # acknowledged: in the journal, synced (or, in a deferred store, written)
    written_end: int = LEDGER_HEADER.size
    payload_bytes: int = 0
    failed: bool = False  # a write failed: no more appends, roll over
    sealed: bool = False  # rolled over: closed at written_entries
    full: bool = False  # full, but the eager roll-over failed: roll before the next append
    dirty: bool = False  # written since the last checkpoint: synced by the next one
    pending: list[tuple[int, int]] = field(default_factory=list)  # (journal ticket, entries) not yet durable

    @classmethod
    def recovered(cls, plan: FilePlan) -> LedgerFile:
        """The file as recovery left it: every frame it checked is acknowledged."""
        opened = cls(plan.ledger_id, plan.path, None)
        opened.offsets = [f.offset for f in plan.frames]
        opened.lengths = [f.length for f in plan.frames]
        opened.durable_entries = len(opened.offsets)
        opened.written_end = plan.base_length
        opened.payload_bytes = sum(opened.lengths)
        return opened

    @property
    def written_entries(self) -> int:
        return len(self.offsets)

    def end_of(self, entries: int) -> int:
        return self.offsets[entries] if entries < len(self.offsets) else self.written_end

    def wrote(self, offset: int, length: int) -> None:
        """An entry of ``length`` payload bytes was written at ``offset`` (not yet acknowledged)."""
        self.offsets.append(offset)
        self.lengths.append(length)
        self.written_end = offset + FRAME_HEADER.size + length
        self.payload_bytes += length
        self.dirty = True

    def durable_upto(self, ticket: int) -> None:
        """Journal record ``ticket`` (and every earlier one) is durable: its entries are acknowledged."""
        while self.pending and self.pending[0][0] <= ticket:
            _, entries = self.pending.pop(0)
            self.durable_entries = max(self.durable_entries, entries)

    def cut_back(self) -> int | None:
        """Forget every entry not acknowledged (a journal batch failed); returns the length the file
        must be cut back to, or None when nothing was lost.  A ledger that lost entries takes no
        append until it is rolled over (Pulsar's rule after a failed add)."""
        self.pending.clear()
        if self.written_entries <= self.durable_entries:
            return None
        end = self.end_of(self.durable_entries)
        del self.offsets[self.durable_entries :]
        del self.lengths[self.durable_entries :]
        self.written_end = end
        self.payload_bytes = sum(self.lengths)
        self.failed = True
        self.dirty = True
        return end

    def as_plan(self, record: LedgerRecord) -> FilePlan:
        """What a recovery would find in the file if it is exactly as written (checkpointed)."""
        frames = [FrameInfo(i, o, n) for i, (o, n) in enumerate(zip(self.offsets, self.lengths, strict=True))]
        extent = (self.written_entries, self.written_end)
        return FilePlan(record.ledger_id, self.path, self.written_end, extent, not record.is_open, frames)


class LedgerFiles:
    """The ledger files of one handle, by ledger id, and the descriptors it reads them through; see
    the module docstring.  Callers hold the handle's lock."""

    def __init__(self, fs: FileSystem, max_open_sealed: int) -> None:
        self._fs = fs
        # The file being read stays open during the read, so the bound is never below one.
        self._max_open_sealed = max(1, max_open_sealed)
        self._open_sealed: OrderedDict[int, None] = OrderedDict()  # least recently read first
        self._files: dict[int, LedgerFile] = {}

    def __getitem__(self, ledger_id: int) -> LedgerFile:
        return self._files[ledger_id]

    def __iter__(self) -> Iterator[LedgerFile]:
        return iter(self._files.values())

    def get(self, ledger_id: int) -> LedgerFile | None:
        return self._files.get(ledger_id)

    def ids(self) -> list[int]:
        return list(self._files)

    def add(self, opened: LedgerFile) -> None:
        self._files[opened.ledger_id] = opened

    def create(self, ledger_id: int, path: str) -> LedgerFile:
        """The next ledger's file, created and its header written behind (synced by the next
        checkpoint); LedgerWriteFailed, with nothing left behind, if the disk refuses."""
        fs = self._fs
        fd: int | None = None
        try:
            fd = fs.open(path, create=True, truncate=True)
            fs.pwrite(fd, encode_ledger_header(ledger_id), 0)
        except OSError as exc:
            if fd is not None:
                best_effort(partial(fs.close, fd))
            best_effort(partial(fs.unlink, path))
            raise LedgerWriteFailed(f"cannot create {path}: {exc}") from exc
        opened = self._files[ledger_id] = LedgerFile(ledger_id, path, fd, dirty=True)
        return opened

    def uncreate(self, ledger_id: int) -> None:
        """Undo :meth:`create` (the record naming the file could not be journaled)."""
        opened = self._files.pop(ledger_id)
        assert opened.fd is not None
        best_effort(partial(self._fs.close, opened.fd))
        best_effort(partial(self._fs.unlink, opened.path))

    def forget(self, ledger_id: int) -> LedgerFile:
        """Drop ``ledger_id`` from the set (deleted, or never durable), its descriptor closed."""
        opened = self._files.pop(ledger_id)
        self._open_sealed.pop(ledger_id, None)
        if opened.fd is not None:
            best_effort(partial(self._fs.close, opened.fd))
        return opened

    # -- descriptors of sealed ledgers ----------------------------------------------------------

    def seal(self, ledger: LedgerFile) -> None:
        """``ledger`` takes no more appends: its descriptor joins the bounded set kept for reads."""
        ledger.sealed = True
        if ledger.fd is not None:
            self._touch(ledger)

    def _touch(self, ledger: LedgerFile) -> None:
        self._open_sealed[ledger.ledger_id] = None
        self._open_sealed.move_to_end(ledger.ledger_id)
        while len(self._open_sealed) > self._max_open_sealed:
            victim_id, _ = self._open_sealed.popitem(last=False)
            victim = self._files.get(victim_id)
            if victim is not None and victim.fd is not None:
                fd, victim.fd = victim.fd, None
                best_effort(partial(self._fs.close, fd))

    def fd(self, ledger: LedgerFile) -> int:
        """The descriptor to read ``ledger`` through, reopening a sealed ledger's file if it was closed."""
        if ledger.fd is None:
            try:
                ledger.fd = self._fs.open(ledger.path)
            except OSError as exc:
                raise LedgerError(f"cannot reopen sealed ledger file {ledger.path}: {exc}") from exc
        if ledger.sealed:
            self._touch(ledger)
        return ledger.fd

    def release(self) -> None:
        """Close every descriptor (the handle is closing or was killed)."""
        for opened in self._files.values():
            if opened.fd is not None:
                best_effort(partial(self._fs.close, opened.fd))
                opened.fd = None
        self._open_sealed.clear()

    # -- reads ----------------------------------------------------------------------------------

    def read_entries(
        self, ledgers: Sequence[LedgerRecord], start: Position, max_entries: int, corrupted: Corrupted
    ) -> list[Entry]:
        """Up to ``max_entries`` acknowledged entries at or after ``start``, crossing the ``ledgers``
        (oldest first), each checked as :meth:`read` does."""
        out: list[Entry] = []
        for record in ledgers:
            if len(out) >= max_entries:
                break
            if record.ledger_id < start.ledger_id:
                continue
            ledger = self._files[record.ledger_id]
            first = max(start.entry_id, 0) if record.ledger_id == start.ledger_id else 0
            for entry_id in range(first, min(ledger.durable_entries, first + max_entries - len(out))):
                out.append(Entry(Position(record.ledger_id, entry_id), self.read(ledger, entry_id, corrupted)))
        return out

    def read(self, ledger: LedgerFile, entry_id: int, corrupted: Corrupted) -> bytes:
        """Entry ``entry_id``'s payload, its frame checked: damage found after open goes through
        ``corrupted`` (the store's owner hears of it) and is raised, never returned as data."""
        offset = ledger.offsets[entry_id]
        length = ledger.lengths[entry_id]
        try:
            frame = self._fs.pread(self.fd(ledger), FRAME_HEADER.size + length, offset)
        except OSError as exc:
            raise LedgerError(f"read of {ledger.path} failed: {exc}") from exc
        if len(frame) != FRAME_HEADER.size + length:
            raise corrupted(
                LedgerCorrupted(f"entry {entry_id} is cut short", file=ledger.path, offset=offset + len(frame))
            )
        found_length, found_id, head_crc, payload_crc = FRAME_HEADER.unpack_from(frame)
        if head_crc != crc32c(frame[:12]) or found_length != length or found_id != entry_id:
            raise corrupted(
                LedgerCorrupted(f"frame header of entry {entry_id} changed on disk", file=ledger.path, offset=offset)
            )
        payload = frame[FRAME_HEADER.size :]
        if payload_crc != crc32c(payload):
            raise corrupted(
                LedgerCorrupted(
                    f"payload CRC mismatch in entry {entry_id}", file=ledger.path, offset=offset + FRAME_HEADER.size
                )
            )
        return payload

    # -- checkpoints and failed batches ---------------------------------------------------------

    def sync_written(self) -> None:
        """Sync every file written since the last checkpoint (a checkpoint's first step)."""
        fs = self._fs
        for opened in self._files.values():
            if opened.dirty:
                fd = self.fd(opened)
                if fs.size(fd) != opened.written_end:
                    fs.truncate(fd, opened.written_end)  # a failed write's bytes after the last entry
                fs.sync(fd)

    def mark_checkpointed(self) -> None:
        for opened in self._files.values():
            opened.dirty = False

    def revert(self, listed: set[int]) -> bool:
        """A journal batch failed: files of ledgers not in ``listed`` (the durable metadata's) are
        removed, and every file forgets what is not acknowledged and is cut back to it.  Returns
        whether a file was removed (the directory changed)."""
        removed = False
        for ledger_id in [lid for lid in self._files if lid not in listed]:
            gone = self.forget(ledger_id)
            best_effort(partial(self._fs.unlink, gone.path))
            removed = True
        for opened in self._files.values():
            end = opened.cut_back()
            if end is not None and opened.fd is not None:
                best_effort(partial(self._fs.truncate, opened.fd, end))
        return removed
