"""A seen-state set with parent pointers that spills to disk, for the model checker's big runs.

:class:`SpillingVisited` keeps the newest fingerprints in a dict and, past ``memory_states``, moves
them to a *run* on disk: two sorted ``numpy`` arrays (fingerprints, parents) written once and read
through ``numpy.memmap``.  Runs are merged when there are more than :data:`MAX_RUNS`, so a
membership test is a few binary searches into page-cached files.  A state costs 16 bytes on disk
and nothing in memory once spilled: a 10^7-state run keeps a bounded dict (``memory_states``
entries, about 100 bytes each) and the frontier.

:class:`PartitionSeen` is the same on-disk structure for one Spark partition of the seen set
(``proofs/check/spark.py``): every BFS level adds one run, written under a name that includes
the level, so a retried task rewrites the same file instead of adding twice.

This module does file I/O, which is why it lives in ``txnmodel/``; the explorer in
``proofs/check/explore.py`` only sees the ``Visited`` protocol.
"""

from __future__ import annotations

import errno
import marshal
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from spec.errors import InputError

__all__ = [
    "MAX_RUNS",
    "CorruptSpillFile",
    "PartitionSeen",
    "SpillingFrontier",
    "SpillingVisited",
    "merge_runs",
]

MAX_RUNS = 6
_DTYPE = np.dtype("<i8")
# Records a merge reads from each run at a time: k runs hold k * MERGE_CHUNK * 16 bytes in memory
# (7 runs: 7 MiB), whatever the runs' sizes.
MERGE_CHUNK = 1 << 16


class CorruptSpillFile(InputError):
    """A file this module spilled is not what it wrote: a run of the seen set truncated, not a
    ``.npy`` of two int64 rows or with its fingerprints out of order, or a frontier level cut short.
    Names the file (a disk that lost data, or another process writing into the spill directory)."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(what, where=str(path))
        self.path = path


def _open_run(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A run's (fingerprints, parents) rows, memory-mapped read-only; CorruptSpillFile if it is not one."""
    try:
        data = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        if isinstance(exc, OSError) and exc.errno == errno.ENOMEM:
            raise  # the address space ran out: not the file's fault
        size = path.stat().st_size if path.exists() else 0
        raise CorruptSpillFile(path, f"not a readable run of the seen set ({size} bytes): {exc}") from None
    if data.dtype != _DTYPE or data.ndim != 2 or data.shape[0] != 2 or np.isfortran(data):
        raise CorruptSpillFile(path, f"expected two int64 rows, found {data.dtype} of shape {data.shape}")
    return data[0], data[1]


class _RunReader:
    """A run read a slice at a time with plain reads (the page cache, not this process's memory:
    a merge that mapped its sources would count every page of them in its resident set)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = open(path, "rb")  # noqa: SIM115 -- closed by close(), after the merge
        try:
            version = np.lib.format.read_magic(self.file)
            read_header = (
                np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(self.file)
        except (ValueError, OSError, EOFError) as exc:
            self.file.close()
            size = path.stat().st_size
            raise CorruptSpillFile(path, f"not a readable run of the seen set ({size} bytes): {exc}") from None
        if dtype != _DTYPE or len(shape) != 2 or shape[0] != 2 or fortran:
            self.file.close()
            raise CorruptSpillFile(path, f"expected two int64 rows, found {dtype} of shape {shape}")
        self.count = int(shape[1])
        self.offset = self.file.tell()
        size = os.fstat(self.file.fileno()).st_size
        if size < self.offset + 16 * self.count:
            self.file.close()
            raise CorruptSpillFile(
                path,
                f"not a readable run of the seen set ({size} bytes): truncated, its header promises "
                f"{self.count} records ({self.offset + 16 * self.count} bytes)",
            )

    def read(self, row: int, start: int, count: int) -> np.ndarray:
        count = max(0, min(count, self.count - start))
        self.file.seek(self.offset + 8 * (row * self.count + start))
        return np.fromfile(self.file, dtype=_DTYPE, count=count)

    def close(self) -> None:
        self.file.close()


def _write_header(out: BinaryIO, count: int) -> int:
    np.lib.format.write_array_header_1_0(out, {"descr": _DTYPE.str, "fortran_order": False, "shape": (2, count)})
    return out.tell()


def merge_runs(sources: Sequence[Path], target: Path, *, chunk: int = MERGE_CHUNK) -> int:
    """Merge sorted runs into one at ``target`` (written under a temporary name, then renamed):
    a k-way merge that reads ``chunk`` records of each run at a time and writes the merged run as it
    goes, so its memory is O(k * chunk) whatever the runs' sizes.  A fingerprint in several runs
    keeps the parent of the first run that has it (the first parent recorded).  The records written.
    CorruptSpillFile names a run that is truncated, unreadable or out of order."""
    tmp = target.with_name(target.name + ".merging")
    readers: list[_RunReader] = []
    try:
        for path in sources:
            readers.append(_RunReader(path))
        written, total = _merge_into(readers, tmp, chunk)
        if written < total:
            _compact(tmp, total, written)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        for reader in readers:
            reader.close()
    return written


def _merge_into(runs: Sequence[_RunReader], tmp: Path, chunk: int) -> tuple[int, int]:
    """The merge proper: (records written, slots in ``tmp``)."""
    total = sum(run.count for run in runs)
    written = 0
    with open(tmp, "wb") as keys_out:
        header = _write_header(keys_out, total)
        keys_out.truncate(header + 16 * total)
        with open(tmp, "r+b") as parents_out:
            parents_out.seek(header + 8 * total)
            cursors = [0] * len(runs)
            previous: list[int | None] = [None] * len(runs)  # each run's last key read
            while True:
                live = [i for i, run in enumerate(runs) if cursors[i] < run.count]
                if not live:
                    break
                pieces = {}
                for i in live:
                    piece = runs[i].read(0, cursors[i], chunk)
                    # A run holds each fingerprint once, ascending (what ``write`` and a merge produce).
                    if len(piece) > 1 and not bool(np.all(piece[1:] > piece[:-1])):
                        raise CorruptSpillFile(
                            runs[i].path, f"fingerprints out of order or repeated near record {cursors[i]}"
                        )
                    last = previous[i]
                    if last is not None and last >= piece[0]:
                        raise CorruptSpillFile(
                            runs[i].path, f"fingerprints out of order or repeated at record {cursors[i]}"
                        )
                    pieces[i] = piece
                # Every record up to the smallest of the chunks' last keys can be placed now: no run
                # holds a smaller key beyond its chunk.
                bound = min(int(piece[-1]) for piece in pieces.values())
                keys_parts = []
                parents_parts = []
                for i in live:  # in run order, so a stable sort keeps the first run's record first
                    piece = pieces[i]
                    take = int(np.searchsorted(piece, bound, side="right"))
                    if take:
                        keys_parts.append(piece[:take])
                        parents_parts.append(runs[i].read(1, cursors[i], take))
                        cursors[i] += take
                        previous[i] = int(piece[take - 1])
                keys = np.concatenate(keys_parts)
                parents = np.concatenate(parents_parts)
                order = np.argsort(keys, kind="stable")
                keys = keys[order]
                parents = parents[order]
                fresh = np.ones(len(keys), dtype=bool)
                fresh[1:] = keys[1:] != keys[:-1]  # across runs; a batch ends a key's every copy
                keys_out.write(keys[fresh].tobytes())
                parents_out.write(parents[fresh].tobytes())
                written += int(fresh.sum())
    return written, total


def _compact(path: Path, total: int, count: int) -> None:
    """Rewrite a merged run of ``total`` slots that holds ``count`` records (duplicates dropped)."""
    merged = _RunReader(path)
    tmp = path.with_name(path.name + ".compact")
    try:
        with open(tmp, "wb") as out:
            _write_header(out, count)
            for row in (0, 1):
                for at in range(0, count, MERGE_CHUNK):
                    out.write(merged.read(row, at, min(MERGE_CHUNK, count - at)).tobytes())
    finally:
        merged.close()
    os.replace(tmp, path)


class _Runs:
    """Sorted (fingerprint, parent) runs in a directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.runs: list[tuple[np.ndarray, np.ndarray, Path]] = []

    def load(self, names: Sequence[str]) -> None:
        for name in names:
            path = self.directory / name
            keys, parents = _open_run(path)
            self.runs.append((keys, parents, path))

    def contains(self, fps: np.ndarray) -> np.ndarray:
        found = np.zeros(len(fps), dtype=bool)
        for keys, _parents, _path in self.runs:
            if len(keys) == 0:
                continue
            at = np.searchsorted(keys, fps)
            inside = at < len(keys)
            hit = np.zeros(len(fps), dtype=bool)
            hit[inside] = keys[at[inside]] == fps[inside]
            found |= hit
        return found

    def parent(self, fp: int) -> int | None:
        for keys, parents, _path in self.runs:
            at = int(np.searchsorted(keys, fp))
            if at < len(keys) and int(keys[at]) == fp:
                return int(parents[at])
        return None

    def write(self, name: str, fps: np.ndarray, parents: np.ndarray) -> None:
        """A new run of (at most the spill size of) fingerprints held in memory."""
        order = np.argsort(fps, kind="stable")
        path = self.directory / name
        tmp = path.with_suffix(".tmp.npy")
        with open(tmp, "wb") as out:
            _write_header(out, len(fps))
            out.write(np.asarray(fps, dtype=_DTYPE)[order].tobytes())
            out.write(np.asarray(parents, dtype=_DTYPE)[order].tobytes())
        os.replace(tmp, path)
        keys, parents_row = _open_run(path)
        self.runs.append((keys, parents_row, path))

    def merge(self, name: str) -> None:
        """All runs into one (streamed: :func:`merge_runs`)."""
        old = [path for _k, _p, path in self.runs]
        self.runs = []  # the old maps go before the merged run is mapped
        target = self.directory / name
        merge_runs(old, target)
        for path in old:
            if path != target:
                path.unlink(missing_ok=True)
        keys, parents = _open_run(target)
        self.runs.append((keys, parents, target))

    def __len__(self) -> int:
        return sum(len(k) for k, _p, _path in self.runs)


class SpillingVisited:
    """The explorer's seen set (``proofs.check.explore.Visited``), bounded in memory."""

    def __init__(self, directory: str | os.PathLike[str] | None = None, *, memory_states: int = 1_000_000) -> None:
        self._owned = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="txnmodel-seen-"))
        self.memory_states = memory_states
        self._recent: dict[int, int] = {}
        self._runs = _Runs(self.directory)
        self._serial = 0
        self.spilled = 0

    def add_level(self, fps: Sequence[int], parents: Sequence[int]) -> list[bool]:
        array = np.fromiter(fps, dtype=_DTYPE, count=len(fps))
        on_disk = self._runs.contains(array) if self._runs.runs else np.zeros(len(fps), dtype=bool)
        out = []
        recent = self._recent
        for fp, parent, spilled in zip(fps, parents, on_disk.tolist(), strict=True):
            if spilled or fp in recent:
                out.append(False)
            else:
                recent[fp] = parent
                out.append(True)
        if len(recent) >= self.memory_states:
            self._spill()
        return out

    def _spill(self) -> None:
        fps = np.fromiter(self._recent.keys(), dtype=_DTYPE, count=len(self._recent))
        parents = np.fromiter(self._recent.values(), dtype=_DTYPE, count=len(self._recent))
        self._serial += 1
        self._runs.write(f"run-{self._serial:06d}.npy", fps, parents)
        self.spilled += len(self._recent)
        self._recent = {}
        if len(self._runs.runs) > MAX_RUNS:
            self._serial += 1
            self._runs.merge(f"run-{self._serial:06d}.npy")

    def parent(self, fp: int) -> int | None:
        found = self._recent.get(fp)
        return found if found is not None else self._runs.parent(fp)

    def __len__(self) -> int:
        return len(self._recent) + len(self._runs)

    def close(self) -> None:
        if self._owned:
            import shutil

            shutil.rmtree(self.directory, ignore_errors=True)


class SpillingFrontier:
    """One BFS level's states (``proofs.check.explore.Frontier``) with at most ``memory_states`` of
    them in memory: the rest go, in discovery order, to a file of ``marshal`` chunks (a composed
    state is a tuple of ints and tuples, which ``marshal`` writes and reads exactly).  Reading the
    level back holds one chunk at a time; ``discard`` deletes the file."""

    def __init__(self, directory: str | os.PathLike[str], *, memory_states: int = 100_000) -> None:
        self.memory_states = memory_states
        fd, name = tempfile.mkstemp(prefix="level-", suffix=".marshal", dir=directory)
        os.close(fd)
        self.path: Path | None = Path(name)
        self._file: Any = None
        self._tail: list[tuple[int, tuple[Any, ...]]] = []
        self._count = 0
        self.spilled = 0

    def append(self, fp: int, state: tuple[Any, ...]) -> None:
        self._tail.append((fp, state))
        self._count += 1
        if len(self._tail) >= self.memory_states:
            self._flush()

    def _flush(self) -> None:
        if self._file is None:
            assert self.path is not None, "the level was discarded"
            self._file = open(self.path, "ab")  # noqa: SIM115 -- kept open while the level grows
        marshal.dump(self._tail, self._file)
        self._file.flush()  # the chunk is on its way to disk, not in this process
        self.spilled += len(self._tail)
        self._tail = []

    def __iter__(self) -> Iterator[tuple[int, tuple[Any, ...]]]:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self.spilled and self.path is not None:
            with open(self.path, "rb") as chunks:
                for k in range(self.spilled // self.memory_states):
                    try:
                        chunk = marshal.load(chunks)
                    except (EOFError, ValueError, TypeError) as exc:
                        raise CorruptSpillFile(
                            self.path,
                            f"frontier level cut short at chunk {k} of {self.spilled // self.memory_states}: {exc}",
                        ) from None
                    yield from chunk
        yield from self._tail

    def __len__(self) -> int:
        return self._count

    def discard(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._tail = []
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None


class PartitionSeen:
    """One Spark partition's seen fingerprints: one run per BFS level under ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], partition: int) -> None:
        self.runs = _Runs(Path(directory) / f"part-{partition:05d}")

    def open(self, before_level: int) -> PartitionSeen:
        """Load the runs of the levels before ``before_level`` (a retried task ignores its own)."""
        names = []
        for path in sorted(self.runs.directory.glob("level-*.npy")):
            level = int(path.stem.split("-")[1])
            if level < before_level:
                names.append(path.name)
        self.runs.load(names)
        return self

    def new(self, fps: np.ndarray) -> np.ndarray:
        return ~self.runs.contains(fps) if self.runs.runs else np.ones(len(fps), dtype=bool)

    def record(self, level: int, fps: np.ndarray, parents: np.ndarray) -> None:
        self.runs.write(f"level-{level:06d}.npy", fps, parents)

    def parent(self, fp: int) -> int | None:
        return self.runs.parent(fp)


def parent_in(directory: str | os.PathLike[str], partitions: int, fp: int) -> int | None:
    """A state's parent from the seen set of a Spark run (its partition is ``fp % partitions``)."""
    seen = PartitionSeen(directory, fp % partitions).open(1 << 40)
    return seen.parent(fp)
