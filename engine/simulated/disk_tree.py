"""The simulated disk's tree: files and directories that each keep what reads see now, what the last
sync made durable, and the operations in between (what a power cut may keep or lose).

:class:`~engine.simulated.disk.SimDisk` performs the file-system calls on it;
:mod:`engine.simulated.power_cut` turns it into what a power cut leaves.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["DirOp", "Directory", "Inode", "Node", "all_dirs", "all_inodes", "copy_tree"]


class Inode:
    """A file: its bytes now, its bytes as last synced, and the writes and truncations since."""

    __slots__ = ("data", "durable", "pending")

    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray(data)  # what reads see now
        self.durable = bytearray(data)  # what the last sync made durable
        # Operations since the last sync, in order: ("w", offset, bytes) or ("t", length).
        self.pending: list[tuple[str, int, bytes]] = []


# A directory operation since the directory's last sync: (sequence number, op, name, new name, node).
DirOp = tuple[int, str, str, str, "Inode | Directory | None"]


class Directory:
    """A directory: its entries now, its entries as last synced, and the operations since."""

    __slots__ = ("durable", "entries", "pending")

    def __init__(self) -> None:
        self.entries: dict[str, Inode | Directory] = {}
        self.durable: dict[str, Inode | Directory] = {}
        self.pending: list[DirOp] = []


Node = Inode | Directory


def all_inodes(root: Directory) -> Iterator[Inode]:
    """Every file reachable from ``root`` now, each once."""
    seen: set[int] = set()
    stack: list[Directory] = [root]
    while stack:
        directory = stack.pop()
        for node in directory.entries.values():
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, Directory):
                stack.append(node)
            else:
                yield node


def all_dirs(root: Directory) -> Iterator[Directory]:
    """Every directory reachable from ``root`` now or through a pending operation, each once."""
    seen: set[int] = set()
    stack: list[Directory] = [root]
    while stack:
        directory = stack.pop()
        if id(directory) in seen:
            continue
        seen.add(id(directory))
        yield directory
        for node in (*directory.entries.values(), *(n for *_, n in directory.pending if n is not None)):
            if isinstance(node, Directory):
                stack.append(node)


def copy_tree(root: Directory) -> Directory:
    """An independent copy of the tree under ``root``: what reads see now, what is durable, and
    the pending operations (a node reached twice is copied once)."""
    memo: dict[int, Node] = {}

    def copy(node: Node) -> Node:
        found = memo.get(id(node))
        if found is not None:
            return found
        if isinstance(node, Inode):
            fresh = Inode()
            fresh.data, fresh.durable, fresh.pending = (
                bytearray(node.data),
                bytearray(node.durable),
                list(node.pending),
            )
            memo[id(node)] = fresh
            return fresh
        folder = Directory()
        memo[id(node)] = folder
        folder.entries = {k: copy(v) for k, v in node.entries.items()}
        folder.durable = {k: copy(v) for k, v in node.durable.items()}
        folder.pending = [(s, op, n, w, None if x is None else copy(x)) for s, op, n, w, x in node.pending]
        return folder

    copied = copy(root)
    assert isinstance(copied, Directory)
    return copied
