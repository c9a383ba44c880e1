"""The file ledger keeps a bounded number of sealed ledger files open, and reads any of them anyway."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.storage.file_ledger import FileLedger, OsFileSystem
from engine.storage.ledger import InitialPosition
from spec.config import Config
from spec.types import Position


class CountingFileSystem(OsFileSystem):
    """Counts the descriptors the ledger holds (the lock file's is separate)."""

    def __init__(self) -> None:
        self.open_fds: set[int] = set()
        self.opens = 0

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> int:
        fd = super().open(path, create=create, truncate=truncate)
        self.open_fds.add(fd)
        self.opens += 1
        return fd

    def close(self, fd: int) -> None:
        self.open_fds.discard(fd)
        super().close(fd)


def _ledger(tmp_path: Path, fs: CountingFileSystem, cap: int) -> FileLedger:
    config = Config().with_overrides({"managedLedgerMaxEntriesPerLedger": "2"})
    return FileLedger(tmp_path / "ml", config, fs=fs, max_open_sealed_files=cap)


@pytest.mark.parametrize("cap", [0, 1, 3])
def test_sealed_descriptors_stay_bounded_and_every_entry_is_readable(tmp_path: Path, cap: int) -> None:
    fs = CountingFileSystem()
    ledger = _ledger(tmp_path, fs, cap)
    written = [ledger.append(f"entry-{i}".encode()) for i in range(40)]
    assert len(ledger.ledgers()) >= 20
    # The current ledger plus at most ``cap`` sealed ones (one at least: the file being read), and
    # the journal's current segment (one per store; a lone ledger is a store of one).
    bound = max(cap, 1) + 1 + 1
    assert len(fs.open_fds) <= bound
    for _ in range(2):  # reading everything twice cycles every sealed file through the bound
        got = ledger.read(Position(ledger.ledgers()[0].ledger_id, 0), 1000)
        assert [e.position for e in got] == written
        assert [e.data for e in got] == [f"entry-{i}".encode() for i in range(40)]
        assert len(fs.open_fds) <= bound
    assert ledger.read_entry(written[0]) == b"entry-0"
    ledger.close()
    assert fs.open_fds == set()


def test_reopen_after_restart_and_deletion_closes_what_it_opened(tmp_path: Path) -> None:
    fs = CountingFileSystem()
    ledger = _ledger(tmp_path, fs, 2)
    for i in range(20):
        ledger.append(str(i).encode())
    ledger.close()
    fs2 = CountingFileSystem()
    again = _ledger(tmp_path, fs2, 2)
    assert len(fs2.open_fds) <= 4  # recovery scanned every file but keeps only the bound (+ the journal) open
    assert [e.data for e in again.read(Position(again.ledgers()[0].ledger_id, 0), 100)] == [
        str(i).encode() for i in range(20)
    ]
    cursor = again.open_cursor("c", InitialPosition.EARLIEST)
    cursor.mark_delete(again.last_confirmed())
    assert again.delete_consumed_ledgers()
    assert len(fs2.open_fds) <= 4
    again.close()
    assert fs2.open_fds == set()


def test_a_negative_bound_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_open_sealed_files"):
        FileLedger(tmp_path / "x", max_open_sealed_files=-1)
