"""The simulated disk: a :class:`~engine.storage.disk.FileSystem` kept in memory, which power cuts can tear.

:class:`SimDisk` is a deterministic in-memory file system that remembers, per file and per
directory, what was made durable and what was not, and so can say what a **power cut** may
leave.  It also injects disk faults.  Same seed, same calls: same bytes.  It passes the same
contract tests as the real file system (``tests/engine/storage/test_disk_contract.py``).

The power-cut model (the one :meth:`SimDisk.power_cut` samples and :meth:`SimDisk.crash_images`
enumerates, so the simulator and the crash-consistency tests agree on what a crash may leave):

* **File data** survives up to its last ``sync`` (``fdatasync``).  Of the writes since, each
  ``SECTOR``-byte sector survives or not on its own (a sector write is atomic; sectors of one
  write, or of different writes, may reach the platter in any order): unsynced writes are lost,
  torn at sector granularity, or reordered.
* **File size and truncations** since the last sync persist as a prefix of the file's operations
  (a journaling file system commits metadata in order); a size that grew past the data that made
  it reads as zeros there (an extended file whose data never reached the disk).
* **Directory entries** (a create, a rename, an unlink, a new sub-directory) survive only once the
  directory is synced; before that, any subset of them may survive, applied in order.  A file
  created and synced but whose directory was not synced may be gone.
* Nothing a ``sync`` or a directory sync made durable is ever lost (unless a fault says so).

Faults (:class:`DiskFaults`, drawn from the disk's own seeded random source, so the simulation's
random choices do not depend on the disk): EIO on read, write and sync (a failed sync leaves the
writes unsynced), ENOSPC past a capacity, and a corrupted sector (a latent media error that the
format's CRCs must catch).  Tests name a call to fail with :meth:`SimDisk.fail_next`.
"""

from __future__ import annotations

import errno
import operator
import os
import posixpath
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Final

from engine.storage.disk import LedgerLocked

__all__ = ["CRASH_DATA_VARIANTS", "SECTOR", "DiskFaults", "PowerCut", "SimDisk", "partial_image"]

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


class _Inode:
    __slots__ = ("data", "durable", "pending")

    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray(data)  # what reads see now
        self.durable = bytearray(data)  # what the last sync made durable
        # Operations since the last sync, in order: ("w", offset, bytes) or ("t", length).
        self.pending: list[tuple[str, int, bytes]] = []


# A directory operation since the directory's last sync: (sequence number, op, name, new name, node).
_DirOp = tuple[int, str, str, str, "_Inode | _Dir | None"]


class _Dir:
    __slots__ = ("durable", "entries", "pending")

    def __init__(self) -> None:
        self.entries: dict[str, _Inode | _Dir] = {}
        self.durable: dict[str, _Inode | _Dir] = {}
        self.pending: list[_DirOp] = []


_Node = _Inode | _Dir


@dataclass(frozen=True)
class PowerCut:
    """What one power cut did: unsynced bytes dropped, sectors torn, directory operations lost."""

    files_changed: int = 0
    bytes_lost: int = 0
    sectors_dropped: int = 0
    directory_ops_lost: int = 0
    corrupted: tuple[str, int] | None = None  # (path, offset) of a damaged sector


# The file-data variants :meth:`SimDisk.crash_images` enumerates (each applied to every file).
CRASH_DATA_VARIANTS: Final = ("synced", "all", "torn", "torn-byte", "zeros", "reordered")


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
        self._root = _Dir()
        self._fds: dict[int, tuple[_Inode, str]] = {}
        self._next_fd = 3
        self._locks: dict[str, int] = {}
        self._dir_seq = 0
        self._used = 0
        self._rules: list[_Rule] = []
        self.power_cuts = 0
        self.syncs = 0
        self.dir_syncs = 0
        self.injected: list[tuple[str, str, int]] = []  # (call, path, errno) of every injected fault

    # -- paths ------------------------------------------------------------------------------------

    @staticmethod
    def _split(path: str) -> list[str]:
        if not path.startswith("/"):
            raise ValueError(f"SimDisk paths are absolute, got {path!r}")
        return [p for p in posixpath.normpath(path).split("/") if p]

    def _lookup(self, path: str) -> _Node | None:
        node: _Node = self._root
        for part in self._split(path):
            if not isinstance(node, _Dir):
                return None
            child = node.entries.get(part)
            if child is None:
                return None
            node = child
        return node

    def _parent(self, path: str) -> tuple[_Dir, str]:
        parts = self._split(path)
        if not parts:
            raise _error(errno.EBUSY, path)
        parent = self._lookup("/" + "/".join(parts[:-1]))
        if parent is None:
            raise _enoent(path)
        if not isinstance(parent, _Dir):
            raise _error(errno.ENOTDIR, path)
        return parent, parts[-1]

    def _dir_op(self, directory: _Dir, op: str, name: str, new: str = "", node: _Node | None = None) -> None:
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
        node: _Node = self._root
        for part in self._split(path):
            if not isinstance(node, _Dir):
                raise _error(errno.ENOTDIR, path)
            child = node.entries.get(part)
            if child is None:
                self._observe("mkdir", path)
                child = _Dir()
                node.entries[part] = child
                self._dir_op(node, "link", part, node=child)
            node = child
        if not isinstance(node, _Dir):
            raise _error(errno.EEXIST, path)

    def listdir(self, path: str) -> list[str]:
        node = self._lookup(path)
        if node is None:
            raise _enoent(path)
        if not isinstance(node, _Dir):
            raise _error(errno.ENOTDIR, path)
        return sorted(node.entries)

    def exists(self, path: str) -> bool:
        return self._lookup(path) is not None

    def is_dir(self, path: str) -> bool:
        return isinstance(self._lookup(path), _Dir)

    def open(self, path: str, *, create: bool = False, truncate: bool = False) -> int:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if isinstance(node, _Dir):
            raise _error(errno.EISDIR, path)
        if node is None:
            if not create:
                raise _enoent(path)
            self._observe("create", path)
            self._maybe_fail("open", path)
            node = _Inode()
            parent.entries[name] = node
            self._dir_op(parent, "link", name, node=node)
        if truncate and node.data:
            self._observe("truncate", path)
            self._resize(node, 0)
        fd = self._next_fd
        self._next_fd += 1
        self._fds[fd] = (node, path)
        return fd

    def _inode(self, fd: int) -> tuple[_Inode, str]:
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

    def _resize(self, inode: _Inode, length: int) -> None:
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
        if not isinstance(node, _Dir):
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
        if isinstance(target, _Dir) and (target.entries or not isinstance(node, _Dir)):
            raise _error(errno.ENOTEMPTY if isinstance(node, _Dir) else errno.EISDIR, dst)
        if isinstance(node, _Dir) and isinstance(target, _Inode):
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
        if isinstance(node, _Dir):
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
        if not isinstance(node, _Dir):
            raise _error(errno.ENOTDIR, path)
        # Child by child, as shutil.rmtree does: a power cut may leave a directory half emptied.
        for child in sorted(node.entries):
            child_path = posixpath.join(path, child)
            if isinstance(node.entries[child], _Dir):
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
        if not isinstance(node, _Inode):
            raise _enoent(path)
        return bytes(node.data)

    def write_file(self, path: str, data: bytes) -> None:
        """Create or replace ``path`` with ``data``, durably (tests set up damaged files this way)."""
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if not isinstance(node, _Inode):
            node = _Inode()
            parent.entries[name] = node
            parent.durable[name] = node
        self._used += len(data) - len(node.data)
        node.data = bytearray(data)
        node.durable = bytearray(data)
        node.pending.clear()

    def walk_files(self, path: str = "/") -> Iterator[tuple[str, bytes]]:
        """Every file under ``path`` with what reads see now, in path order."""
        node = self._lookup(path)
        if isinstance(node, _Inode):
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
        if not isinstance(node, _Dir):
            raise _enoent(source)
        os.makedirs(target, exist_ok=True)
        for name in sorted(node.entries):
            child = node.entries[name]
            out = os.path.join(target, name)
            if isinstance(child, _Dir):
                self.export(posixpath.join(source, name), out)
            else:
                with open(out, "wb") as handle:
                    handle.write(child.data)

    def corrupt(self, path: str, offset: int, *, bit: int = 0) -> None:
        """Flip one bit of ``path`` at ``offset``, in what is read now and in what is durable: the
        media returns different bytes than were written."""
        node = self._lookup(path)
        if not isinstance(node, _Inode):
            raise _enoent(path)
        for buf in (node.data, node.durable):
            if offset < len(buf):
                buf[offset] ^= 1 << bit

    def unsynced(self) -> dict[str, int]:
        """Paths with writes or truncations not yet synced, and how many such operations each has."""
        out: dict[str, int] = {}

        def walk(directory: _Dir, prefix: str) -> None:
            for name, node in directory.entries.items():
                path = posixpath.join(prefix, name)
                if isinstance(node, _Dir):
                    walk(node, path)
                elif node.pending:
                    out[path] = len(node.pending)

        walk(self._root, "/")
        return out

    # -- power cuts -------------------------------------------------------------------------------

    def power_cut(self) -> PowerCut:
        """The power goes: every descriptor and lock is gone, and the disk keeps what the model
        allows, drawn from the disk's random source.  Returns what was lost."""
        self.power_cuts += 1
        rng = self.rng
        stats = {"files": 0, "bytes": 0, "sectors": 0, "dirops": 0}

        def keep_dir_op(_seq: int) -> bool:
            kept = rng.random() < 0.5
            stats["dirops"] += not kept
            return kept

        def file_image(inode: _Inode) -> bytearray:
            if not inode.pending:
                return inode.durable
            stats["files"] += 1
            prefix = rng.randint(0, len(inode.pending))

            def keep(_op: int, _sector: int) -> bool:
                kept = rng.random() < 0.5
                stats["sectors"] += not kept
                return kept

            image = self._image_of(inode, prefix, keep)
            stats["bytes"] += sum(len(d) for kind, _, d in inode.pending if kind == "w")
            return image

        self._rebuild(keep_dir_op, file_image)
        corrupted = None
        if self.faults.corrupt_sector and rng.random() < self.faults.corrupt_sector:
            files = [(p, len(d)) for p, d in self.walk_files() if d]
            if files:
                path, size = rng.choice(files)
                offset = rng.randrange(size)
                self.corrupt(path, offset, bit=rng.randrange(8))
                corrupted = (path, offset)
        return PowerCut(stats["files"], stats["bytes"], stats["sectors"], stats["dirops"], corrupted)

    def _image_of(self, inode: _Inode, prefix: int, keep: Callable[[int, int], bool]) -> bytearray:
        """The file after a power cut: the size and truncations of the first ``prefix`` pending
        operations persist; of every pending write, the sectors ``keep(op index, sector)`` says."""
        image = bytearray(inode.durable)
        size = len(image)
        sector = self.sector
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

    def _rebuild(self, keep_dir_op: Callable[[int], bool], file_image: Callable[[_Inode], bytearray]) -> None:
        """Replace the whole tree by its crash image: directories by their durable entries plus the
        pending operations ``keep_dir_op`` keeps, files by ``file_image``."""
        images: dict[int, bytearray] = {}
        seen: set[int] = set()

        def rebuild(directory: _Dir) -> None:
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
                if isinstance(child, _Dir):
                    rebuild(child)
                elif id(child) not in images:
                    images[id(child)] = file_image(child)

        rebuild(self._root)
        used = 0
        for inode in self._all_inodes():
            image = images.get(id(inode))
            if image is None:
                continue
            inode.durable = image
            inode.data = bytearray(image)
            inode.pending = []
            used += len(image)
        self._used = used
        self._fds.clear()
        self._locks.clear()

    def _all_inodes(self) -> Iterator[_Inode]:
        seen: set[int] = set()
        stack: list[_Dir] = [self._root]
        while stack:
            directory = stack.pop()
            for node in directory.entries.values():
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if isinstance(node, _Dir):
                    stack.append(node)
                else:
                    yield node

    def clone(self) -> SimDisk:
        """An independent copy of what reads see now and what is durable (no descriptors, no locks)."""
        twin = SimDisk(self.seed, sector=self.sector)
        memo: dict[int, _Node] = {}

        def copy(node: _Node) -> _Node:
            found = memo.get(id(node))
            if found is not None:
                return found
            if isinstance(node, _Inode):
                fresh = _Inode()
                fresh.data, fresh.durable, fresh.pending = (
                    bytearray(node.data),
                    bytearray(node.durable),
                    list(node.pending),
                )
                memo[id(node)] = fresh
                return fresh
            folder = _Dir()
            memo[id(node)] = folder
            folder.entries = {k: copy(v) for k, v in node.entries.items()}
            folder.durable = {k: copy(v) for k, v in node.durable.items()}
            folder.pending = [(s, op, n, w, None if x is None else copy(x)) for s, op, n, w, x in node.pending]
            return folder

        root = copy(self._root)
        assert isinstance(root, _Dir)
        twin._root = root
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
        pending_ops = sorted(seq for d in self._all_dirs() for seq, *_ in d.pending)
        dir_variants: list[tuple[str, Callable[[int], bool], tuple[str, ...]]] = [
            ("dir-synced", lambda _s: False, CRASH_DATA_VARIANTS),
            ("dir-all", lambda _s: True, CRASH_DATA_VARIANTS),
        ]
        if len(pending_ops) > 1:
            for seq in pending_ops:
                dir_variants.append((f"dir-only-{seq}", partial(operator.eq, seq), ("synced", "all")))
        for dir_name, keep_dir_op, data_variants in dir_variants:
            for data_name in data_variants:
                twin = self.clone()
                twin._rebuild(keep_dir_op, partial_image(twin, data_name))
                yield f"{dir_name}/{data_name}", twin

    def _all_dirs(self) -> Iterator[_Dir]:
        seen: set[int] = set()
        stack: list[_Dir] = [self._root]
        while stack:
            directory = stack.pop()
            if id(directory) in seen:
                continue
            seen.add(id(directory))
            yield directory
            for node in (*directory.entries.values(), *(n for *_, n in directory.pending if n is not None)):
                if isinstance(node, _Dir):
                    stack.append(node)


def partial_image(disk: SimDisk, variant: str) -> Callable[[_Inode], bytearray]:
    """The file-image function of one :data:`CRASH_DATA_VARIANTS` entry on ``disk``."""

    def image(inode: _Inode) -> bytearray:
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
                   for s in range(at // disk.sector, (at + len(data) - 1) // disk.sector + 1)]  # fmt: skip
        if variant == "zeros":
            kept: set[tuple[int, int]] = set()
        elif variant == "torn":
            kept = set(sectors[: (len(sectors) + 1) // 2])
        elif variant == "reordered":
            kept = set(sectors[-1:])
        else:  # pragma: no cover - a variant without a rule is a bug here
            raise ValueError(f"unknown crash data variant {variant!r}")
        return disk._image_of(inode, everything, lambda op, s: (op, s) in kept)

    return image
