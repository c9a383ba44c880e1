"""Where a simulated broker's managed ledgers live: in memory or in files, optionally faulty.

A :class:`LedgerStore` opens managed ledgers by name.  Opening a name again (after a crash) gives
a new owner's handle on the same durable data: for the memory store the same storage, for the
file store the same directory, reopened and recovered.  What the previous owner had acknowledged
is there; nothing else is.  With ``faults`` each handle is wrapped in
:class:`~reference.engine.fault.FaultyLedger` and its appends (and reads) fail with the given
probability, drawn from the simulation's random source.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from spec.config import Config

from .fault import FaultyLedger, InjectedFault, Op
from .file_ledger import FileLedger
from .ledger import ManagedLedger
from .memory_ledger import MemoryLedger, MemoryLedgerStorage

__all__ = ["LedgerFaults", "LedgerStore"]


@dataclass
class LedgerFaults:
    """Probabilities of injected ledger failures (a failed append did not happen)."""

    append: float = 0.0
    read: float = 0.0


def _file_name(name: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")[:80]
    return f"{safe}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


class LedgerStore:
    """Opens managed ledgers by name on one backend (``memory`` or ``file``)."""

    def __init__(
        self,
        kind: str,
        config: Config,
        *,
        directory: str | os.PathLike[str] | None = None,
        rng: random.Random | None = None,
        faults: LedgerFaults | None = None,
    ) -> None:
        if kind not in ("memory", "file"):
            raise ValueError(f"ledger kind must be memory or file, not {kind!r}")
        if kind == "file" and directory is None:
            raise ValueError("a file ledger store needs a directory")
        self.kind = kind
        self.config = config
        self.directory = Path(directory) if directory is not None else None
        self.rng = rng
        self.faults = faults or LedgerFaults()
        self._memory: dict[str, MemoryLedgerStorage] = {}
        self._open: dict[str, ManagedLedger] = {}
        self._faulty: list[FaultyLedger] = []
        self._enabled = True
        # Told of each fault injected on any handle this store opened, so a run's fault schedule lists them.
        self.on_fault: Callable[[InjectedFault], None] | None = None

    def open(self, name: str) -> ManagedLedger:
        """A new owner's handle on ``name`` (created empty if it never existed)."""
        old = self._open.pop(name, None)
        if old is not None:
            old.close()
        ledger: ManagedLedger
        if self.kind == "memory":
            storage = self._memory.get(name)
            if storage is None:
                memory = MemoryLedger(name, self.config)
                self._memory[name] = memory.storage
                ledger = memory
            else:
                ledger = MemoryLedger(storage=storage)
        else:
            assert self.directory is not None
            ledger = FileLedger(self.directory / _file_name(name), self.config, name=name)
        self._open[name] = ledger
        if self.faults.append or self.faults.read:
            if self.rng is None:
                raise ValueError("injected ledger faults need the simulation's random source")
            faulty = FaultyLedger(ledger, rng=self.rng, on_inject=self._injected)
            if self.faults.append:
                faulty.fail_randomly(self.faults.append, ops={Op.APPEND})
            if self.faults.read:
                faulty.fail_randomly(self.faults.read, ops={Op.READ})
            self._faulty.append(faulty)
            return faulty
        return ledger

    def _injected(self, fault: InjectedFault) -> None:
        if self.on_fault is not None:
            self.on_fault(fault)

    def exists(self, name: str) -> bool:
        """Whether a managed ledger ``name`` was ever created (Pulsar's ledger-exists check)."""
        if self.kind == "memory":
            return name in self._memory
        assert self.directory is not None
        return (self.directory / _file_name(name)).exists()

    def delete(self, name: str) -> None:
        """Delete the managed ledger ``name`` for good (missing is fine), as a BookKeeper client
        deletes a bucket snapshot's ledger.  On files the directory is first renamed out of the
        way (one atomic step, then the parent is synced), so a crash mid-way leaves either the whole
        ledger or a tombstone no ``open`` will ever read, never a half-deleted ledger."""
        handle = self._open.pop(name, None)
        if handle is not None:
            handle.close()
        if self.kind == "memory":
            self._memory.pop(name, None)
            return
        assert self.directory is not None
        path = self.directory / _file_name(name)
        if not path.exists():
            return
        tombstone = path.with_name(path.name + ".deleted")
        shutil.rmtree(tombstone, ignore_errors=True)
        os.rename(path, tombstone)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        shutil.rmtree(tombstone, ignore_errors=True)

    def set_faults(self, enabled: bool) -> None:
        """Suspend or resume injected faults (a run heals before its final checks)."""
        for faulty in self._faulty:
            if not enabled:
                faulty.clear()
        if enabled and not self._enabled:
            raise ValueError("faults cannot be re-enabled on open handles; open the ledgers again")
        self._enabled = enabled
        if not enabled:
            self.faults = LedgerFaults()

    def close_all(self) -> None:
        """A crash: every handle goes away (the file ledger syncs nothing more than it had)."""
        for ledger in self._open.values():
            ledger.close()
        self._open.clear()
        self._faulty.clear()
