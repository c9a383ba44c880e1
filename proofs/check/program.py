"""What a composed model is made of: its topology, the client programs and the fault budget.

A :class:`ModelSpec` is plain data.  The named models (:mod:`proofs.check.models`) build one from
the bounds a user gives (``--bound K=V``); :class:`proofs.check.model.Model` turns it into a
transition system over the reference machines.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from spec.config import Config

__all__ = ["Faults", "ModelSpec", "Op", "SubSpec", "Symmetry", "TxnScript"]


@dataclass(frozen=True)
class Op:
    """One operation of a transaction script.

    * ``send``: produce one message to partition ``target`` in the transaction (first use of the
      partition registers it with the coordinator: ADD_PARTITION_TO_TXN, TC-30);
    * ``consume``: receive one message from subscription ``target`` and acknowledge it in the
      transaction (ADD_SUBSCRIPTION_TO_TXN first), individually or ``cumulative``.
    ``deliver_at`` (abstract milliseconds) makes a send a delayed message.
    """

    kind: str
    target: int
    deliver_at: int = -1
    cumulative: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("send", "consume"):
            raise ValueError(f"unknown op kind {self.kind!r} (send, consume)")


@dataclass(frozen=True)
class TxnScript:
    """One transaction of a client: its operations, then one of ``ends`` (commit, abort)."""

    ops: tuple[Op, ...]
    ends: tuple[str, ...] = ("commit",)

    def __post_init__(self) -> None:
        if not self.ends or any(e not in ("commit", "abort") for e in self.ends):
            raise ValueError(f"ends must be a non-empty subset of commit, abort: {self.ends!r}")


@dataclass(frozen=True)
class SubSpec:
    """A subscription on partition ``partition``.  ``reader``: a non-transactional consumer reads
    and individually acknowledges everything it is handed (it is what lets retention free ledgers,
    and what observes visibility).  ``delayed``: the dispatcher has a delayed-delivery tracker."""

    partition: int
    sub_type: str = "Exclusive"
    reader: bool = False
    delayed: bool = False
    name: str = "sub"


@dataclass(frozen=True)
class Faults:
    """The environment's budget; each is a bound on how often it may act in one run."""

    loss: int = 0  # requests or responses lost (an END_TXN_ON_* loss is the TB client's timeout)
    duplicate: int = 0  # duplicated requests (kinds in ``duplicable``)
    crash_coordinator: int = 0  # coordinator crashes (memory lost, reload from the log)
    crash_partition: int = 0  # topic crashes/unloads (buffer and its subscriptions reload)
    rollover: int = 0  # ledger roll-overs per run
    retention: int = 0  # consumed ledgers deleted per run
    timeouts: bool = False  # the coordinator's timeout tracker and the clients' timers may fire
    duplicable: tuple[str, ...] = ("add_partition", "add_subscription")


@dataclass(frozen=True)
class Symmetry:
    """One automorphism of the model: client ``c`` plays the part of ``clients[c]``, partition
    ``p`` of ``partitions[p]``, subscription ``s`` of ``subscriptions[s]``."""

    clients: tuple[int, ...]
    partitions: tuple[int, ...]
    subscriptions: tuple[int, ...]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    description: str
    partitions: int
    programs: tuple[tuple[TxnScript, ...], ...]  # per client, its transactions in order
    subscriptions: tuple[SubSpec, ...] = ()
    preload: tuple[int, ...] = ()  # normal messages published on each partition before the run
    publishes: tuple[int, ...] = ()  # normal messages a plain producer publishes on each partition during the run
    faults: Faults = Faults()
    config: Config = field(default_factory=Config)
    pipelined: bool = False  # a client issues its next operation before the last one is answered
    txn_timeout_ms: int = 10_000
    clock_limit: int = 0  # abstract time the clock may reach (delayed delivery); 0: no clock
    tracker: str = "in_memory"  # the delayed-delivery tracker kind
    batched_log: bool = False  # the coordinator's log goes through PIP-160's batched writer
    bounds: Mapping[str, Any] = field(default_factory=dict)  # as given and defaulted, for printing

    def __post_init__(self) -> None:
        if len(self.preload) not in (0, self.partitions):
            raise ValueError("preload needs one count per partition")
        if len(self.publishes) not in (0, self.partitions):
            raise ValueError("publishes needs one count per partition")
        for program in self.programs:
            for script in program:
                for op in script.ops:
                    limit = self.partitions if op.kind == "send" else len(self.subscriptions)
                    if not 0 <= op.target < limit:
                        raise ValueError(f"{op} names a {op.kind} target that does not exist")
        for sub in self.subscriptions:
            if not 0 <= sub.partition < self.partitions:
                raise ValueError(f"{sub} is on a partition that does not exist")

    @property
    def clients(self) -> int:
        return len(self.programs)

    def symmetries(self) -> tuple[Symmetry, ...]:
        """Every joint permutation of clients, partitions and subscriptions that maps the model onto
        itself: each client's program onto its image's (op by op), each subscription onto one with
        the same settings, the preload onto itself.  The identity comes first."""
        found: list[Symmetry] = []
        subs = self.subscriptions
        for pc in itertools.permutations(range(self.clients)):
            for pp in itertools.permutations(range(self.partitions)):
                ps = self._sub_image(pp)
                if ps is None:
                    continue
                if self.preload and any(self.preload[p] != self.preload[pp[p]] for p in range(self.partitions)):
                    continue
                if self.publishes and any(self.publishes[p] != self.publishes[pp[p]] for p in range(self.partitions)):
                    continue
                if all(
                    self.programs[pc[c]] == self._mapped(self.programs[c], pp, ps) for c in range(self.clients)
                ) and all(subs[ps[s]] == _moved(subs[s], pp) for s in range(len(subs))):
                    found.append(Symmetry(pc, pp, ps))
        found.sort(key=lambda g: g != Symmetry(*(tuple(range(n)) for n in self._sizes())))
        return tuple(found)

    def _sizes(self) -> tuple[int, int, int]:
        return self.clients, self.partitions, len(self.subscriptions)

    def _sub_image(self, pp: tuple[int, ...]) -> tuple[int, ...] | None:
        """Map each subscription to the one with its settings on the image partition."""
        out = []
        for sub in self.subscriptions:
            want = _moved(sub, pp)
            matches = [j for j, other in enumerate(self.subscriptions) if other == want]
            if len(matches) != 1:
                return None
            out.append(matches[0])
        return tuple(out) if len(set(out)) == len(out) else None

    @staticmethod
    def _mapped(program: tuple[TxnScript, ...], pp: tuple[int, ...], ps: tuple[int, ...]) -> tuple[TxnScript, ...]:
        return tuple(
            TxnScript(
                tuple(
                    Op(op.kind, pp[op.target] if op.kind == "send" else ps[op.target], op.deliver_at, op.cumulative)
                    for op in script.ops
                ),
                script.ends,
            )
            for script in program
        )


def _moved(sub: SubSpec, pp: tuple[int, ...]) -> SubSpec:
    return SubSpec(pp[sub.partition], sub.sub_type, sub.reader, sub.delayed, sub.name)
