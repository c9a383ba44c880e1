"""What must hold of every coordinator state, and of every step (rules TC-1 .. TC-28).

Stated once here; the stateful tests check them after every step, ``proofs/coordinator.py``
proves their Z3 counterparts, and the bulk checker reuses them.
"""

from __future__ import annotations

from typing import Any

from invariants.base import Invariant, StepProperty
from reference.coordinator import (
    CoordinatorState,
    StoreState,
    effective_low_water_mark,
    live_record_ids,
    low_water_mark,
)
from spec.result import Err
from spec.types import TxnStatus, can_transition

__all__ = ["INVARIANTS", "STEP_PROPERTIES"]


def _ids_below_sequence(s: CoordinatorState) -> bool:
    """TC-3, TC-23: every live sequence was issued: 0 <= seq <= sequence_id."""
    return all(0 <= seq <= s.sequence_id for seq in s.txns)


def _ids_are_keys(s: CoordinatorState) -> bool:
    """TC-3: the txn stored under seq is (coordinator id, seq): no two live txns share an id."""
    return all(
        m.txn_id.most_sig_bits == s.coordinator_id and m.txn_id.least_sig_bits == seq for seq, m in s.txns.items()
    )


def _no_finished_txn_live(s: CoordinatorState) -> bool:
    """TC-9: COMMITTED and ABORTED txns are removed in the step that reaches them."""
    return all(not m.status.is_terminal for m in s.txns.values())


def _records_owned_once(s: CoordinatorState) -> bool:
    """TC-5, TC-8, TC-10: every txn has its NEW record first; no record belongs to two txns;
    every record id was assigned (below the counter)."""
    all_ids = [rid for m in s.txns.values() for rid in m.record_ids]
    return (
        all(m.record_ids for m in s.txns.values())
        and len(all_ids) == len(set(all_ids))
        and all(0 <= rid < s.next_record_id for rid in all_ids)
        and all(list(m.record_ids) == sorted(m.record_ids) for m in s.txns.values())
    )


def _lwm_below_live(s: CoordinatorState) -> bool:
    """TC-17: the low watermark is below every live sequence, and equals the effective one when
    a txn is live (so the value sent is the effective one)."""
    lwm = low_water_mark(s)
    return all(lwm < seq for seq in s.txns) and (not s.txns or lwm == effective_low_water_mark(s))


INVARIANTS: tuple[Invariant[CoordinatorState], ...] = (
    Invariant("ids_below_sequence", ("TC-3", "TC-23"), _ids_below_sequence, _ids_below_sequence.__doc__ or ""),
    Invariant("ids_are_keys", ("TC-3",), _ids_are_keys, _ids_are_keys.__doc__ or ""),
    Invariant("no_finished_txn_live", ("TC-9",), _no_finished_txn_live, _no_finished_txn_live.__doc__ or ""),
    Invariant("records_owned_once", ("TC-5", "TC-8", "TC-10"), _records_owned_once, _records_owned_once.__doc__ or ""),
    Invariant("lwm_below_live", ("TC-17",), _lwm_below_live, _lwm_below_live.__doc__ or ""),
)


def _rejected_changes_nothing(before: CoordinatorState, command: Any, result: Any, after: CoordinatorState) -> bool:
    """TC-8, TC-10 (and the machine contract): an Err leaves the state as it was."""
    return not isinstance(result, Err) or after == before


def _statuses_follow_table(before: CoordinatorState, command: Any, result: Any, after: CoordinatorState) -> bool:
    """TC-6: a txn live before and after moved along the transition table."""
    return all(can_transition(m.status, after.txns[seq].status) for seq, m in before.txns.items() if seq in after.txns)


def _removed_only_when_finished(before: CoordinatorState, command: Any, result: Any, after: CoordinatorState) -> bool:
    """TC-9, TC-22: a txn disappears only from COMMITTING (to COMMITTED) or ABORTING (to ABORTED);
    during replay a terminal UPDATE may also remove it."""
    gone = set(before.txns.keys()) - set(after.txns.keys())
    return all(before.txns[seq].status in (TxnStatus.COMMITTING, TxnStatus.ABORTING) for seq in gone)


def _sequence_monotone(before: CoordinatorState, command: Any, result: Any, after: CoordinatorState) -> bool:
    """TC-3, TC-23: the sequence never goes back, and new txns take fresh, larger ids."""
    new = set(after.txns.keys()) - set(before.txns.keys())
    if before.store_state is StoreState.INITIALIZING:
        return after.sequence_id >= before.sequence_id  # replay re-creates old ids
    return after.sequence_id >= before.sequence_id and all(seq > before.sequence_id for seq in new)


def _lwm_monotone_while_ready(before: CoordinatorState, command: Any, result: Any, after: CoordinatorState) -> bool:
    """TC-17: while the store is Ready the effective low watermark never decreases."""
    if before.store_state is not StoreState.READY or after.store_state is not StoreState.READY:
        return True
    return effective_low_water_mark(after) >= effective_low_water_mark(before)


def _records_never_reused(before: CoordinatorState, command: Any, result: Any, after: CoordinatorState) -> bool:
    """TC-28: record ids only grow, and a record id live before stays with the same txn or is deleted."""
    if after.next_record_id < before.next_record_id:
        return False
    fresh = live_record_ids(after) - live_record_ids(before)
    return all(rid >= before.next_record_id for rid in fresh)


STEP_PROPERTIES: tuple[StepProperty[CoordinatorState], ...] = (
    StepProperty("rejected_changes_nothing", ("TC-8", "TC-10"), _rejected_changes_nothing),
    StepProperty("statuses_follow_table", ("TC-6",), _statuses_follow_table),
    StepProperty("removed_only_when_finished", ("TC-9", "TC-22"), _removed_only_when_finished),
    StepProperty("sequence_monotone", ("TC-3", "TC-23"), _sequence_monotone),
    StepProperty("lwm_monotone_while_ready", ("TC-17",), _lwm_monotone_while_ready),
    StepProperty("records_never_reused", ("TC-28",), _records_never_reused),
)
