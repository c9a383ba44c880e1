"""A seen-state set with parent pointers that spills to disk, for the model checker's big runs.

:class:`SpillingVisited` keeps the newest fingerprints in a dict and, past ``memory_states``, moves
them to a *run* on disk: two sorted ``numpy`` arrays (fingerprints, parents) written once and read
through ``numpy.memmap``.  Runs are merged when there are more than :data:`MAX_RUNS`, so a
membership test is a few binary searches into page-cached files.  A state costs 16 bytes on disk
and nothing in memory once spilled: a 10^7-state run keeps a bounded dict (``memory_states``
entries, about 100 bytes each) and the frontier.

:class:`PartitionSeen` is the same on-disk structure for one Spark partition of the seen set
(``txnmodel/check_spark.py``): every BFS level adds one run, written under a name that includes
the level, so a retried task rewrites the same file instead of adding twice.

This module does file I/O, which is why it lives in ``txnmodel/``; the explorer in
``proofs/check/explore.py`` only sees the ``Visited`` protocol.
"""

from __future__ import annotations

import marshal
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["MAX_RUNS", "PartitionSeen", "SpillingFrontier", "SpillingVisited"]

MAX_RUNS = 6
_DTYPE = np.int64


class _Runs:
    """Sorted (fingerprint, parent) runs in a directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.runs: list[tuple[np.ndarray, np.ndarray, Path]] = []

    def load(self, names: Sequence[str]) -> None:
        for name in names:
            path = self.directory / name
            data = np.load(path, mmap_mode="r")
            self.runs.append((data[0], data[1], path))

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
        order = np.argsort(fps, kind="stable")
        path = self.directory / name
        tmp = path.with_suffix(".tmp.npy")
        np.save(tmp, np.stack([fps[order], parents[order]]))
        os.replace(tmp, path)
        data = np.load(path, mmap_mode="r")
        self.runs.append((data[0], data[1], path))

    def merge(self, name: str) -> None:
        keys = np.concatenate([k for k, _p, _path in self.runs])
        parents = np.concatenate([p for _k, p, _path in self.runs])
        old = [path for _k, _p, path in self.runs]
        self.runs = []
        self.write(name, keys, parents)
        for path in old:
            if path.name != name:
                path.unlink(missing_ok=True)

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
                for _ in range(self.spilled // self.memory_states):
                    yield from marshal.load(chunks)
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
