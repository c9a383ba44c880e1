"""What a power cut may leave of the simulated disk's tree: the model, sampled or enumerated.

The model (the one :meth:`~engine.simulated.disk.SimDisk.power_cut` samples with
:class:`RandomCut` and :meth:`~engine.simulated.disk.SimDisk.crash_images` enumerates with
:func:`crash_variants` and :func:`partial_image`, so the simulator and the crash-consistency tests
agree on what a crash may leave):

* **File data** survives up to its last ``sync`` (``fdatasync``).  Of the writes since, each
  sector (``SECTOR`` bytes) survives or not on its own (a sector write is atomic; sectors of one
  write, or of different writes, may reach the platter in any order): unsynced writes are lost,
  torn at sector granularity, or reordered.
* **File size and truncations** since the last sync persist as a prefix of the file's operations
  (a journaling file system commits metadata in order); a size that grew past the data that made
  it reads as zeros there (an extended file whose data never reached the disk).
* **Directory entries** (a create, a rename, an unlink, a new sub-directory) survive only once the
  directory is synced; before that, any subset of them may survive, applied in order.  A file
  created and synced but whose directory was not synced may be gone.
* Nothing a ``sync`` or a directory sync made durable is ever lost (unless a fault says so).
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from engine.simulated.disk_tree import Directory, Inode, all_dirs, all_inodes

__all__ = [
    "CRASH_DATA_VARIANTS",
    "PowerCut",
    "RandomCut",
    "crash_variants",
    "image_after_cut",
    "partial_image",
    "rebuild",
]

# The file-data variants :meth:`SimDisk.crash_images` enumerates (each applied to every file).
CRASH_DATA_VARIANTS: Final = ("synced", "all", "torn", "torn-byte", "zeros", "reordered")

# Which pending directory operations (by sequence number) a crash image keeps.
KeepDirOp = Callable[[int], bool]
# What a crash image makes of one file.
FileImage = Callable[[Inode], bytearray]


@dataclass(frozen=True)
class PowerCut:
    """What one power cut did: unsynced bytes dropped, sectors torn, directory operations lost."""

    files_changed: int = 0
    bytes_lost: int = 0
    sectors_dropped: int = 0
    directory_ops_lost: int = 0
    corrupted: tuple[str, int] | None = None  # (path, offset) of a damaged sector


def image_after_cut(inode: Inode, prefix: int, keep: Callable[[int, int], bool], sector: int) -> bytearray:
    """The file after a power cut: the size and truncations of the first ``prefix`` pending
    operations persist; of every pending write, the sectors ``keep(op index, sector)`` says."""
    image = bytearray(inode.durable)
    size = len(image)
    for index, (kind, at, data) in enumerate(inode.pending):
        if kind == "t":
            if index < prefix:
                if at < len(image):
                    del image[at:]
                size = at
            continue
        end = at + len(data)
        if index < prefix:
            size = max(size, end)
        first = at // sector
        for s in range(first, (end - 1) // sector + 1 if data else first):
            if not keep(index, s):
                continue
            lo, hi = max(at, s * sector), min(end, (s + 1) * sector)
            if len(image) < hi:
                image.extend(bytes(hi - len(image)))
            image[lo:hi] = data[lo - at : hi - at]
    if len(image) > size:
        del image[size:]
    else:
        image.extend(bytes(size - len(image)))
    return image


def rebuild(root: Directory, keep_dir_op: KeepDirOp, file_image: FileImage) -> int:
    """Replace the whole tree by its crash image: directories by their durable entries plus the
    pending operations ``keep_dir_op`` keeps, files by ``file_image``.  Returns the bytes the
    files now hold."""
    images: dict[int, bytearray] = {}
    seen: set[int] = set()

    def visit(directory: Directory) -> None:
        if id(directory) in seen:
            return
        seen.add(id(directory))
        entries = dict(directory.durable)
        for seq, op, name, new, node in directory.pending:
            if not keep_dir_op(seq):
                continue
            if op == "link":
                assert node is not None
                entries[name] = node
            elif op == "unlink":
                entries.pop(name, None)
            else:
                assert node is not None
                entries.pop(name, None)
                entries[new] = node
        directory.entries = entries
        directory.durable = dict(entries)
        directory.pending = []
        for child in entries.values():
            if isinstance(child, Directory):
                visit(child)
            elif id(child) not in images:
                images[id(child)] = file_image(child)

    visit(root)
    used = 0
    for inode in all_inodes(root):
        image = images.get(id(inode))
        if image is None:
            continue
        inode.durable = image
        inode.data = bytearray(image)
        inode.pending = []
        used += len(image)
    return used


class RandomCut:
    """One sampled power cut: every choice the model leaves open is drawn from ``rng`` (a pending
    directory operation kept or not, how much of a file's size and truncations persisted, each
    unsynced sector kept or not), and what was lost is counted."""

    def __init__(self, rng: random.Random, sector: int) -> None:
        self.rng = rng
        self.sector = sector
        self.files = 0
        self.bytes = 0
        self.sectors = 0
        self.dirops = 0

    def keep_dir_op(self, _seq: int) -> bool:
        kept = self.rng.random() < 0.5
        self.dirops += not kept
        return kept

    def file_image(self, inode: Inode) -> bytearray:
        if not inode.pending:
            return inode.durable
        self.files += 1
        prefix = self.rng.randint(0, len(inode.pending))
        image = image_after_cut(inode, prefix, self._keep_sector, self.sector)
        self.bytes += sum(len(d) for kind, _, d in inode.pending if kind == "w")
        return image

    def _keep_sector(self, _op: int, _sector: int) -> bool:
        kept = self.rng.random() < 0.5
        self.sectors += not kept
        return kept

    def report(self, corrupted: tuple[str, int] | None) -> PowerCut:
        return PowerCut(self.files, self.bytes, self.sectors, self.dirops, corrupted)


def crash_variants(root: Directory) -> list[tuple[str, KeepDirOp, tuple[str, ...]]]:
    """The directory variants of :meth:`SimDisk.crash_images` for the tree under ``root``, each
    with the file-data variants it is combined with: the directories as last synced or with every
    pending operation (with every data variant), and, when several directory operations are
    pending, each of them alone (with synced and with all file data)."""
    pending_ops = sorted(seq for d in all_dirs(root) for seq, *_ in d.pending)
    variants: list[tuple[str, KeepDirOp, tuple[str, ...]]] = [
        ("dir-synced", lambda _s: False, CRASH_DATA_VARIANTS),
        ("dir-all", lambda _s: True, CRASH_DATA_VARIANTS),
    ]
    if len(pending_ops) > 1:
        for seq in pending_ops:
            variants.append((f"dir-only-{seq}", partial(operator.eq, seq), ("synced", "all")))
    return variants


def partial_image(variant: str, sector: int) -> FileImage:
    """The file-image function of one :data:`CRASH_DATA_VARIANTS` entry, on a disk of ``sector``-byte sectors."""

    def image(inode: Inode) -> bytearray:
        if not inode.pending:
            return inode.durable
        everything = len(inode.pending)
        if variant == "synced":
            return bytearray(inode.durable)
        if variant == "all":
            return bytearray(inode.data)
        if variant == "torn-byte":
            current, durable = inode.data, inode.durable
            if len(current) > len(durable) and current.startswith(durable):
                unsynced = len(current) - len(durable)
                return bytearray(current[: len(durable) + max(1, unsynced // 2)])
            return bytearray(durable)
        sectors = [(i, s) for i, (kind, at, data) in enumerate(inode.pending) if kind == "w" and data
                   for s in range(at // sector, (at + len(data) - 1) // sector + 1)]  # fmt: skip
        if variant == "zeros":
            kept: set[tuple[int, int]] = set()
        elif variant == "torn":
            kept = set(sectors[: (len(sectors) + 1) // 2])
        elif variant == "reordered":
            kept = set(sectors[-1:])
        else:  # pragma: no cover - a variant without a rule is a bug here
            raise ValueError(f"unknown crash data variant {variant!r}")
        return image_after_cut(inode, everything, lambda op, s: (op, s) in kept, sector)

    return image
