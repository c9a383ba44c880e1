"""The simulated disk: a :class:`~engine.storage.disk.FileSystem` kept in memory, which power cuts can tear.

:class:`SimDisk` is a deterministic in-memory file system that remembers, per file and per
directory, what was made durable and what was not, and so can say what a **power cut** may
leave.  It also injects disk faults.  Same seed, same calls: same bytes.  It passes the same
contract tests as the real file system (``tests/engine/storage/test_disk_contract.py``).

What a power cut may leave (file data since its last sync lost, torn at sector granularity or
reordered; sizes as a prefix of their changes; directory entries since the directory's last sync
any subset of them, in order) is the model of :mod:`engine.simulated.power_cut`, which
:meth:`SimDisk.power_cut` samples and :meth:`SimDisk.crash_images` enumerates; the files and
directories it applies to are :mod:`engine.simulated.disk_tree`'s.

Faults (:class:`DiskFaults`, drawn from the disk's own seeded random source, so the simulation's
random choices do not depend on the disk): EIO on read, write and sync (a failed sync leaves the
writes unsynced), ENOSPC past a capacity, and a corrupted sector (a latent media error that the
format's CRCs must catch).  Tests name a call to fail with :meth:`SimDisk.fail_next`.
"""

from __future__ import annotations

import errno
import os
import posixpath
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from engine.simulated.disk_tree import Directory, Inode, Node, copy_tree
from engine.simulated.power_cut import (
    CRASH_DATA_VARIANTS,
    FileImage,
    KeepDirOp,
    PowerCut,
    RandomCut,
    crash_variants,
    partial_image,
    rebuild,
)
from engine.storage.disk import LedgerLocked

__all__ = ["CRASH_DATA_VARIANTS", "SECTOR", "DiskFaults", "PowerCut", "SimDisk"]

SECTOR: Final = 512


@dataclass
class DiskFaults:
    """Probabilities of injected disk faults, per call (drawn from the disk's own random source).

    ``capacity`` bounds the bytes all files may hold (ENOSPC past it); ``corrupt_sector`` is the
    chance that a power cut also damages one random durable sector of one random file (a latent
    media error: the bytes read back differ from those written, which only a CRC can tell)."""

    read_eio: float = 0.0
    write_eio: float = 0.0
    sync_eio: float = 0.0
    capacity: int | None = None
    corrupt_sector: float = 0.0


def _enoent(path: str) -> FileNotFoundError:
    return FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)


def _error(code: int, path: str = "", what: str = "") -> OSError:
    message = os.strerror(code) + (f" (injected: {what})" if what else "")
    return OSError(code, message, path) if path else OSError(code, message)


@dataclass
class _Rule:
    call: str
    predicate: Callable[[str], bool]
    code: int
    count: int


@dataclass
class SimDisk:
    """A deterministic in-memory file system with the power-cut model of the module docstring.

    ``seed`` seeds the disk's own random source (power cuts, faults), so the simulation's random
    choices never depend on which disk it runs on.  ``faults`` are drawn per call.  ``on_call``
    (tests) is told of every mutating call *before* it happens, with the call's name and path:
    the moment a power cut would leave :meth:`crash_images`."""

    seed: int | str = 0
    faults: DiskFaults = field(default_factory=DiskFaults)
    sector: int = SECTOR
    on_call: Callable[[str, str], None] | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(f"disk:{self.seed}")
        self._root = Directory()
        self._fds: dict[int, tuple[Inode, str]] = {}
        self._next_fd = 3
        self._locks: dict[str, int] = {}
        self._dir_seq = 0
        self._used = 0
        self._rules: list[_Rule] = []
        self.power_cuts = 0
        self.syncs = 0
        self.dir_syncs = 0
        self.injected: list[tuple[str, str, int]] = []  # (call, path, errno) of every injected fault

    def free_bytes(self, path: str) -> int | None:
        """The bytes still free under the capacity (None: no capacity, never full)."""
        capacity = self.faults.capacity
        return None if capacity is None else max(0, capacity - self._used)

    # -- paths ------------------------------------------------------------------------------------

    @staticmethod
    def _split(path: str) -> list[str]:
        if not path.startswith("/"):
            raise ValueError(f"SimDisk paths are absolute, got {path!r}")
        return [p for p in posixpath.normpath(path).split("/") if p]

    def _lookup(self, path: str) -> Node | None:
        node: Node = self._root
        for part in self._split(path):
            if not isinstance(node, Directory):
                return None
            child = node.entries.get(part)
            if child is None:
                return None
            node = child
        return node

    def _parent(self, path: str) -> tuple[Directory, str]:
        parts = self._split(path)
        if not parts:
            raise _error(errno.EBUSY, path)
        parent = self._lookup("/" + "/".join(parts[:-1]))
        if parent is None:
            raise _enoent(path)
        if not isinstance(parent, Directory):
            raise _error(errno.ENOTDIR, path)
        return parent, parts[-1]

    def _dir_op(self, directory: Directory, op: str, name: str, new: str = "", node: Node | None = None) -> None:
        self._dir_seq += 1
        directory.pending.append((self._dir_seq, op, name, new, node))

    # -- faults -----------------------------------------------------------------------------------

    def fail_next(
        self, call: str, *, path: Callable[[str], bool] | str | None = None, code: int = errno.EIO, count: int = 1
    ) -> None:
        """Fail the next ``count`` calls named ``call`` (``pread``, ``pwrite``, ``sync``,
        ``sync_dir``, ``open``, ``rename``, ``unlink``, ``truncate``) whose path matches ``path``
        (a predicate, a substring, or any) with ``code`` (EIO by default, or ENOSPC ...)."""
        if path is None:
            predicate: Callable[[str], bool] = lambda _p: True  # noqa: E731
        elif isinstance(path, str):
            needle = path
            predicate = lambda p: needle in p  # noqa: E731
        else:
            predicate = path
        self._rules.append(_Rule(call, predicate, code, count))

    def clear_faults(self) -> None:
        self._rules.clear()
        self.faults = DiskFaults()

    def _maybe_fail(self, call: str, path: str, chance: float = 0.0) -> None:
        for rule in self._rules:
            if rule.call == call and rule.count > 0 and rule.predicate(path):
                rule.count -= 1
                if rule.count == 0:
                    self._rules.remove(rule)
                self.injected.append((call, path, rule.code))
                raise _error(rule.code, path, call)
        if chance and self.rng.random() < chance:
            self.injected.append((call, path, errno.EIO))
            raise _error(errno.EIO, path, call)

    def _observe(self, call: str, path: str) -> None:
        if self.on_call is not None:
            self.on_call(call, path)

    # -- the FileSystem calls ---------------------------------------------------------------------

    def makedirs(self, path: str) -> None:
        node: Node = self._root
        for part in self._split(path):
            if not isinstance(node, Directory):
                raise _error(errno.ENOTDIR, path)
            child = node.entries.get(part)
            if child is None:
                self._observe("mkdir", path)
                child = Directory()
                node.entries[part] = child
                self._dir_op(node, "link", part, node=child)
            node = child
        if not isinstance(node, Directory):
            raise _error(errno.EEXIST, path)

    def listdir(self, path: str) -> list[str]:
        node = self._lookup(path)
        if node is None:
            raise _enoent(path)
        if not isinstance(node, Directory):
            raise _error(errno.ENOTDIR, path)
        return sorted(node.entries)

    def exists(self, path: str) -> bool:
        return self._lookup(path) is not None

    def is_dir(self, path: str) -> bool:
        return isinstance(self._lookup(path), Directory)

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> int:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if isinstance(node, Directory):
            raise _error(errno.EISDIR, path)
        if node is None:
            if not create:
                raise _enoent(path)
            self._observe("create", path)
            self._maybe_fail("open", path)
            node = Inode()
            parent.entries[name] = node
            self._dir_op(parent, "link", name, node=node)
        if truncate and node.data:
            self._observe("truncate", path)
            self._resize(node, 0)
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = (node, path)
        return fd

    def _inode(self, fd: int) -> tuple[Inode, str]:
        found = self._fds.get(fd)
        if found is None:
            raise _error(errno.EBADF)
        return found

    def path_of(self, fd: int) -> str:
        """The path ``fd`` was opened with (tests)."""
        return self._inode(fd)[1]

    def close(self, fd: int) -> None:
        self._inode(fd)
        del self._fds[fd]

    def size(self, fd: int) -> int:
        return len(self._inode(fd)[0].data)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        inode, path = self._inode(fd)
        self._maybe_fail("pread", path, self.faults.read_eio)
        return bytes(inode.data[offset : offset + size])

    def pwrite(self, fd: int, data: bytes, offset: int) -> None:
        inode, path = self._inode(fd)
        self._observe("pwrite", path)
        self._maybe_fail("pwrite", path, self.faults.write_eio)
        end = offset + len(data)
        grow = max(0, end - len(inode.data))
        if grow and self.faults.capacity is not None and self._used + grow > self.faults.capacity:
            self.injected.append(("pwrite", path, errno.ENOSPC))
            raise _error(errno.ENOSPC, path)
        self._used += grow
        buf = inode.data
        if offset == len(buf):
            buf += data
        else:
            if offset > len(buf):
                buf.extend(bytes(offset - len(buf)))
            buf[offset:end] = data
        inode.pending.append(("w", offset, bytes(data)))

    def truncate(self, fd: int, length: int) -> None:
        inode, path = self._inode(fd)
        self._observe("truncate", path)
        self._maybe_fail("truncate", path)
        self._resize(inode, length)

    def _resize(self, inode: Inode, length: int) -> None:
        current = len(inode.data)
        if length < current:
            del inode.data[length:]
        else:
            inode.data.extend(bytes(length - current))
        self._used += length - current
        inode.pending.append(("t", length, b""))

    def sync(self, fd: int) -> None:
        inode, path = self._inode(fd)
        self._observe("sync", path)
        # A failed sync leaves the writes unsynced: a later power cut may still drop them.
        self._maybe_fail("sync", path, self.faults.sync_eio)
        self.syncs += 1
        durable = inode.durable
        for kind, at, data in inode.pending:
            if kind == "t":
                if at < len(durable):
                    del durable[at:]
                else:
                    durable.extend(bytes(at - len(durable)))
            elif at == len(durable):
                durable += data
            else:
                if at > len(durable):
                    durable.extend(bytes(at - len(durable)))
                durable[at : at + len(data)] = data
        inode.pending.clear()

    def sync_dir(self, path: str) -> None:
        node = self._lookup(path)
        if node is None:
            raise _enoent(path)
        if not isinstance(node, Directory):
            raise _error(errno.ENOTDIR, path)
        self._observe("sync_dir", path)
        self._maybe_fail("sync_dir", path, self.faults.sync_eio)
        self.dir_syncs += 1
        node.durable = dict(node.entries)
        node.pending.clear()

    def rename(self, src: str, dst: str) -> None:
        src_parent, src_name = self._parent(src)
        dst_parent, dst_name = self._parent(dst)
        node = src_parent.entries.get(src_name)
        if node is None:
            raise _enoent(src)
        target = dst_parent.entries.get(dst_name)
        if isinstance(target, Directory) and (target.entries or not isinstance(node, Directory)):
            raise _error(errno.ENOTEMPTY if isinstance(node, Directory) else errno.EISDIR, dst)
        if isinstance(node, Directory) and isinstance(target, Inode):
            raise _error(errno.ENOTDIR, dst)
        self._observe("rename", src)
        self._maybe_fail("rename", src)
        del src_parent.entries[src_name]
        dst_parent.entries[dst_name] = node
        if src_parent is dst_parent:
            self._dir_op(src_parent, "rename", src_name, dst_name, node)
        else:
            self._dir_op(src_parent, "unlink", src_name)
            self._dir_op(dst_parent, "link", dst_name, node=node)

    def unlink(self, path: str) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise _enoent(path)
        if isinstance(node, Directory):
            raise _error(errno.EISDIR, path)
        self._observe("unlink", path)
        self._maybe_fail("unlink", path)
        del parent.entries[name]
        self._dir_op(parent, "unlink", name)

    def rmtree(self, path: str) -> None:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            raise _enoent(path)
        if not isinstance(node, Directory):
            raise _error(errno.ENOTDIR, path)
        # Child by child, as shutil.rmtree does: a power cut may leave a directory half emptied.
        for child in sorted(node.entries):
            child_path = posixpath.join(path, child)
            if isinstance(node.entries[child], Directory):
                self.rmtree(child_path)
            else:
                self.unlink(child_path)
        self._observe("rmdir", path)
        del parent.entries[name]
        self._dir_op(parent, "unlink", name)

    def lock(self, path: str) -> int:
        fd = self.open(path, create=True)
        key = posixpath.normpath(path)
        if key in self._locks:
            self.close(fd)
            raise LedgerLocked(f"{path} is locked by another handle")
        self._locks[key] = fd
        return fd

    def unlock(self, fd: int) -> None:
        for key, owner in list(self._locks.items()):
            if owner == fd:
                del self._locks[key]
        self.close(fd)

    # -- inspection helpers (tests, and writing a simulated store out) ---------------------------

    def read_file(self, path: str) -> bytes:
        node = self._lookup(path)
        if not isinstance(node, Inode):
            raise _enoent(path)
        return bytes(node.data)

    def write_file(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` with ``data``, durably (tests set up damaged files this way)."""
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if not isinstance(node, Inode):
            node = Inode()
            parent.entries[name] = node
            parent.durable[name] = node
        self._used += len(data) - len(node.data)
        node.data = bytearray(data)
        node.durable = bytearray(data)
        node.pending.clear()

    def walk_files(self, path: str = "/") -> Iterator[tuple[str, bytes]]:
        """Every file under ``path`` with what reads see now, in path order."""
        node = self._lookup(path)
        if isinstance(node, Inode):
            yield path, bytes(node.data)
            return
        if node is None:
            return
        for name in sorted(node.entries):
            yield from self.walk_files(posixpath.join(path, name))

    def export(self, source: str, target: str | os.PathLike[str]) -> None:
        """Write the tree under ``source`` into the real directory ``target`` (what reads see now),
        so a simulated store can be inspected with the real tools."""
        node = self._lookup(source)
        if not isinstance(node, Directory):
            raise _enoent(source)
        os.makedirs(target, exist_ok=True)
        for name in sorted(node.entries):
            child = node.entries[name]
            out = os.path.join(target, name)
            if isinstance(child, Directory):
                self.export(posixpath.join(source, name), out)
            else:
                with open(out, "wb") as handle:
                    handle.write(child.data)

    def corrupt(self, path: str, offset: int, *, bit: int = 0) -> None:
        """Flip one bit of ``path`` at ``offset``, in what is read now and in what is durable: the
        media returns different bytes than were written."""
        node = self._lookup(path)
        if not isinstance(node, Inode):
            raise _enoent(path)
        for buf in (node.data, node.durable):
            if offset < len(buf):
                buf[offset] ^= 1 << bit

    def unsynced(self) -> dict[str, int]:
        """Paths with writes or truncations not yet synced, and how many such operations each has."""
        out: dict[str, int] = {}

        def walk(directory: Directory, prefix: str) -> None:
            for name, node in directory.entries.items():
                path = posixpath.join(prefix, name)
                if isinstance(node, Directory):
                    walk(node, path)
                elif node.pending:
                    out[path] = len(node.pending)

        walk(self._root, "/")
        return out

    # -- power cuts (the model is engine.simulated.power_cut's) ----------------------------------

    def power_cut(self) -> PowerCut:
        """The power goes: every descriptor and lock is gone, and the disk keeps what the model
        allows, drawn from the disk's random source.  Returns what was lost."""
        self.power_cuts += 1
        rng = self.rng
        cut = RandomCut(rng, self.sector)
        self._cut_power(cut.keep_dir_op, cut.file_image)
        corrupted = None
        if self.faults.corrupt_sector and rng.random() < self.faults.corrupt_sector:
            files = [(p, len(d)) for p, d in self.walk_files() if d]
            if files:
                path, size = rng.choice(files)
                offset = rng.randrange(size)
                self.corrupt(path, offset, bit=rng.randrange(8))
                corrupted = (path, offset)
        return cut.report(corrupted)

    def _cut_power(self, keep_dir_op: KeepDirOp, file_image: FileImage) -> None:
        """Replace the tree by its crash image (see :func:`~engine.simulated.power_cut.rebuild`);
        descriptors and locks are gone."""
        self._used = rebuild(self._root, keep_dir_op, file_image)
        self._fds.clear()
        self._locks.clear()

    def clone(self) -> SimDisk:
        """An independent copy of what reads see now and what is durable (no descriptors, no locks)."""
        twin = SimDisk(self.seed, sector=self.sector)
        twin._root = copy_tree(self._root)
        twin._dir_seq = self._dir_seq
        twin._used = self._used
        return twin

    def crash_images(self) -> Iterator[tuple[str, SimDisk]]:
        """Representative power cuts *now*, each as a new disk (this one is unchanged): the
        directories as last synced or with every pending operation, each combined with every
        file-data variant of :data:`CRASH_DATA_VARIANTS`; and, when several directory operations
        are pending, each of them alone (with synced and with all file data).

        The data variants, applied to every file: ``synced`` (only what was synced), ``all``
        (everything written), ``torn`` (every size change, and the first half of the unsynced
        sectors in write order), ``torn-byte`` (a pure append cut in its middle byte: a size that
        persisted inside a write), ``zeros`` (every size change, no unsynced sector: the extension
        reads as zeros) and ``reordered`` (every size change, only the last unsynced sector)."""
        for dir_name, keep_dir_op, data_variants in crash_variants(self._root):
            for data_name in data_variants:
                twin = self.clone()
                twin._cut_power(keep_dir_op, partial_image(data_name, twin.sector))
                yield f"{dir_name}/{data_name}", twin
