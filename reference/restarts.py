"""Crash and recovery of one machine driven step by step: what it made durable, and what it restarts as.

A vector's ``crash`` and ``recover`` steps, and the conformance harness's crash rule, need the
reference's answer to "the process died here; load it again".  Each machine's recovery is already a
pure function of its durable inputs (TC-21 .. TC-25, TB-24, PA-18 .. PA-20, BW-25, DD-24); what a
runner must add is the bookkeeping of those inputs, which the machine hands out as effects.  A
:class:`Durable` value is that bookkeeping for one machine instance: :meth:`Durable.noted` folds in
one step (its command and result), :meth:`Durable.recovered` rebuilds the machine from the state it
crashed in (for what the state models of the storage, like the buffer's ledgers) and what was noted.

* **coordinator**: the transaction log's live records (``AppendRecord``/``DeleteRecords`` effects,
  and the records a replay was fed), and the ``max_local_txn_id`` of the last record written: the
  sequence-id interceptor's value (TC-23).  Recovery is :func:`reference.coordinator.recover`;
  its effects (the re-drives of TC-24) are the recovery's answer.
* **pending_ack**: the pending-ack log (``AppendPendingAckRecord`` above the last
  ``TrimPendingAckLog``) replayed over the cursor as the state holds it (PA-18 .. PA-20).
* **buffer**: the topic's ledgers and snapshot topics are in the state; recovery is
  :func:`reference.buffer.restart` then ``StartRecovery`` and ``CompleteRecovery`` (TB-2, TB-24).
* **batched_log**: the entries the ledger confirmed (an ``AsyncAddEntry``'s data at the position
  its ``AddEntryComplete`` named) and the cursor's deletes; the writer reopens over them at
  ``now_ms`` with the batching switch it had (BW-22, BW-25).
* **delayed**: the tracker's storage is in the state; recovery is its own ``Restart(now_ms)`` (DD-24).
* **client**: a transaction object in the client's memory has nothing durable, so it has no crash.

Pure: values in, values out, no I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import immutables

from spec.config import Config
from spec.result import Effect, Err, Ok
from spec.types import Position, words_to_bits

__all__ = [
    "Durable",
    "NoCrash",
    "NowArgs",
    "RecoverArgs",
    "durable_for",
    "recover_args_type",
]

Result = Ok[Any] | Err


class NoCrash(ValueError):
    """The machine has no durable state, so a crash of it is not defined (the client)."""


@dataclass(frozen=True, slots=True)
class RecoverArgs:
    """The arguments of a recovery that needs none: it reads only what the machine made durable."""


@dataclass(frozen=True, slots=True)
class NowArgs:
    """The time the machine is loaded again at (the batched log's reopened writer arms its timer
    from it, BW-25; the delayed tracker's restart reads its snapshots at it, DD-24)."""

    now_ms: int


class Durable(ABC):
    """What one machine instance has made durable so far; an immutable value."""

    args: ClassVar[type] = RecoverArgs

    @abstractmethod
    def noted(self, command: object, result: Result) -> Durable:
        """This value with one more step taken: ``command`` answered ``result``."""

    @abstractmethod
    def recovered(self, config: Config, crashed: Any, args: Any) -> tuple[Durable, Any, Result]:
        """The machine loaded again after crashing in state ``crashed``: the durable value from then
        on, the recovered state, and the recovery's answer (its effects are what the load asked for)."""


# --- coordinator ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CoordinatorLog(Durable):
    records: immutables.Map[int, Any] = field(default_factory=immutables.Map)
    max_local_txn_id: int = -1

    def noted(self, command: object, result: Result) -> Durable:
        from reference import coordinator as tc

        records, last = self.records, self.max_local_txn_id
        if isinstance(command, tc.InitStore):
            last = max(last, command.max_local_txn_id)
        elif isinstance(command, tc.HandleMetadataEntry):
            # a replayed record came from the log: it is durable until a delete says otherwise
            records = records.set(command.record_id, command.record)
            if command.record.max_local_txn_id is not None:
                last = max(last, command.record.max_local_txn_id)
        for effect in result.effects:
            if isinstance(effect, tc.AppendRecord):
                records = records.set(effect.record_id, effect.record)
                if effect.record.max_local_txn_id is not None:
                    last = effect.record.max_local_txn_id
            elif isinstance(effect, tc.DeleteRecords):
                for record_id in effect.record_ids:
                    if record_id in records:
                        records = records.delete(record_id)
        return _CoordinatorLog(records, last)

    def recovered(self, config: Config, crashed: Any, args: Any) -> tuple[Durable, Any, Result]:
        from reference import coordinator as tc

        state, effects = tc.recover(config, crashed.coordinator_id, sorted(self.records.items()), self.max_local_txn_id)
        # the recovery's own deletes (orphans, TC-21) are carried out like any step's
        after = self.noted(None, Ok(None, effects))
        return after, state, Ok(None, effects)


# --- pending ack ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PendingAckLog(Durable):
    appended: immutables.Map[int, Any] = field(default_factory=immutables.Map)
    trimmed: int = -1

    def noted(self, command: object, result: Result) -> Durable:
        from reference import pending_ack as pa

        appended, trimmed = self.appended, self.trimmed
        if isinstance(command, pa.ReloadSubscription) and result.ok:
            # the reload named the log above its mark-delete: that is the log from now on
            appended = immutables.Map({r.record_id: r.record for r in command.records})
            trimmed = -1
        for effect in result.effects:
            if isinstance(effect, pa.AppendPendingAckRecord):
                appended = appended.set(effect.record_id, effect.record)
            elif isinstance(effect, pa.TrimPendingAckLog):
                trimmed = max(trimmed, effect.record_id)
        return _PendingAckLog(appended, trimmed)

    def recovered(self, config: Config, crashed: Any, args: Any) -> tuple[Durable, Any, Result]:
        from reference import pending_ack as pa

        records = [(i, r) for i, r in sorted(self.appended.items()) if i > self.trimmed]
        state = pa.recover(
            config,
            records,
            cursor=crashed.cursor,
            sub_type=crashed.sub_type,
            log_mark_delete=crashed.log_mark_delete,
            next_record_id=crashed.next_record_id,
        )
        return self, state, Ok(None)


# --- transaction buffer -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _BufferTopic(Durable):
    def noted(self, command: object, result: Result) -> Durable:
        return self

    def recovered(self, config: Config, crashed: Any, args: Any) -> tuple[Durable, Any, Result]:
        from reference import buffer as tb

        state = tb.restart(crashed)
        effects: list[Effect] = []
        for command in (tb.StartRecovery(), tb.CompleteRecovery()):
            state, result = tb.step(state, command)
            effects.extend(result.effects)
            if isinstance(result, Err):
                return self, state, Err(result.error, tuple(effects))
        return self, state, Ok(None, tuple(effects))


# --- batched log ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _BatchedLedger(Durable):
    args: ClassVar[type] = NowArgs
    writing: immutables.Map[int, bytes] = field(default_factory=immutables.Map)  # write id -> data
    entries: tuple[tuple[Position, bytes], ...] = ()  # what the ledger confirmed, in order
    ack_bits: immutables.Map[Position, int] = field(default_factory=immutables.Map)
    deleted: frozenset[Position] = frozenset()

    def noted(self, command: object, result: Result) -> Durable:
        from reference import batched_log as bl

        writing, entries, ack_bits, deleted = self.writing, self.entries, self.ack_bits, self.deleted
        if isinstance(command, bl.AddEntryComplete) and result.ok and command.write_id in writing:
            entries = (*entries, (command.position, writing[command.write_id]))
        if isinstance(command, bl.AddEntryComplete | bl.AddEntryFailed) and command.write_id in writing:
            writing = writing.delete(command.write_id)
        for effect in result.effects:
            if isinstance(effect, bl.AsyncAddEntry):
                writing = writing.set(effect.write_id, effect.data)
            elif isinstance(effect, bl.CursorDelete):
                for item in effect.entries:
                    if item.ack_set is None:
                        deleted = deleted | {item.position}
                        continue
                    bits = ack_bits.get(item.position, words_to_bits(item.ack_set)) & words_to_bits(item.ack_set)
                    if bits == 0:
                        deleted = deleted | {item.position}
                    ack_bits = ack_bits.set(item.position, bits)
        return _BatchedLedger(writing, entries, ack_bits, deleted)

    def logged(self) -> list[Any]:
        from reference import batched_log as bl

        out = []
        for position, data in self.entries:
            bits = self.ack_bits.get(position)
            words = None
            if bits is not None:
                count = max(1, (bits.bit_length() + 63) // 64)
                words = tuple((bits >> (64 * i)) & 0xFFFF_FFFF_FFFF_FFFF for i in range(count))
            out.append(bl.LoggedEntry(position, data, words, position in self.deleted))
        return out

    def recovered(self, config: Config, crashed: Any, args: Any) -> tuple[Durable, Any, Result]:
        from reference import batched_log as bl

        # the reopened writer keeps the batching switch the crashed one had (BW-22)
        state = bl.recover_for(crashed.config, self.logged(), args.now_ms)
        # writes in flight never complete: their ids mean nothing to the new writer
        after = _BatchedLedger(immutables.Map(), self.entries, self.ack_bits, self.deleted)
        return after, state, Ok(None)


# --- delayed-delivery tracker -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _DelayedStorage(Durable):
    args: ClassVar[type] = NowArgs

    def noted(self, command: object, result: Result) -> Durable:
        return self

    def recovered(self, config: Config, crashed: Any, args: Any) -> tuple[Durable, Any, Result]:
        from reference import delayed as d

        state, result = d.step(crashed, d.Restart(args.now_ms))
        return self, state, result


_DURABLE: dict[str, Callable[[], Durable]] = {
    "coordinator": _CoordinatorLog,
    "pending_ack": _PendingAckLog,
    "buffer": _BufferTopic,
    "batched_log": _BatchedLedger,
    "delayed": _DelayedStorage,
}


def durable_for(machine: str) -> Durable:
    """A fresh machine instance's durable value (nothing written yet); :class:`NoCrash` for a
    machine without durable state."""
    make = _DURABLE.get(machine)
    if make is None:
        raise NoCrash(f"{machine} has no durable state, so it has no crash and no recover")
    return make()


def recover_args_type(machine: str) -> type:
    """The dataclass a ``recover`` step's ``args`` decode to (:class:`RecoverArgs`: none)."""
    return durable_for(machine).args
