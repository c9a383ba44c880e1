"""The shared vocabulary: ids, positions, previous(), batched positions, status tables."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spec.types import (
    EARLIEST,
    LATEST,
    TXN_STATUS_TRANSITIONS,
    BatchedPosition,
    ClientTxnState,
    LedgerInfo,
    Position,
    Subscription,
    TxnID,
    TxnStatus,
    bits_to_words,
    can_transition,
    client_can_transition,
    previous_position,
    words_to_bits,
)

positions = st.builds(Position, st.integers(0, 50), st.integers(-1, 50))


def test_txn_id_layout_and_printing() -> None:
    txn = TxnID.of(coordinator_id=3, sequence=17)
    assert (txn.most_sig_bits, txn.least_sig_bits) == (3, 17)
    assert txn.coordinator_id == 3 and txn.sequence == 17
    assert str(txn) == "(3,17)"
    assert TxnID.parse("(3,17)") == txn
    assert TxnID.parse(" (3, 17) ") == txn


@pytest.mark.parametrize("text", ["3,17", "(3)", "(a,b)", "(1,2,3)", ""])
def test_txn_id_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a TxnID"):
        TxnID.parse(text)


@pytest.mark.parametrize("most,least", [(-1, 0), (0, -1), (1 << 64, 0), (True, 0)])
def test_txn_id_rejects_out_of_range(most: int, least: int) -> None:
    with pytest.raises((ValueError, TypeError)):
        TxnID(most, least)


@given(st.lists(positions, min_size=2, max_size=6))
def test_position_total_order_is_ledger_first(items: list[Position]) -> None:
    assert sorted(items) == sorted(items, key=lambda p: (p.ledger_id, p.entry_id))


@given(st.integers(0, 2**64 - 1), st.integers(-1, 2**63 - 1), st.integers(0, 5))
def test_ids_and_positions_keep_the_hash_of_their_fields(a: int, b: int, protocol: int) -> None:
    """The hash kept beside the fields is the one the fields give (so sets and maps of ids and
    positions hold them in the same order as a dataclass's own hash would), and it survives
    pickling, copying and replace; equality and the pickled state are the fields alone."""
    values: list[TxnID | Position] = [TxnID(a, max(b, 0))]
    if a < 2**63:
        values.append(Position(a, b))
    for value in values:
        fields = dataclasses.astuple(value)
        assert hash(value) == hash(fields)
        for other in (
            pickle.loads(pickle.dumps(value, protocol)),
            copy.copy(value),
            copy.deepcopy(value),
            dataclasses.replace(value),
            type(value)(*fields),
        ):
            assert other == value and hash(other) == hash(value) and type(other) is type(value)
        assert value.__getstate__() == list(fields)  # type: ignore[attr-defined]


def test_position_sentinels() -> None:
    assert EARLIEST < Position(0, 0) < LATEST
    assert Position(1, 5).next() == Position(1, 6)


def test_previous_within_ledger() -> None:
    assert previous_position(Position(7, 3), [LedgerInfo(7, 10)]) == Position(7, 2)


def test_previous_crosses_to_last_entry_of_earlier_ledger() -> None:
    ledgers = [LedgerInfo(3, 4), LedgerInfo(5, 2)]
    assert previous_position(Position(5, 0), ledgers) == Position(3, 3)


def test_previous_skips_empty_earlier_ledgers() -> None:
    ledgers = [LedgerInfo(2, 6), LedgerInfo(3, 0), LedgerInfo(4, 0), LedgerInfo(5, 1)]
    assert previous_position(Position(5, 0), ledgers) == Position(2, 5)


def test_previous_without_earlier_ledger_is_minus_one() -> None:
    assert previous_position(Position(5, 0), [LedgerInfo(5, 3)]) == Position(5, -1)


def test_previous_with_only_empty_earlier_ledgers_is_first_ledger_minus_one() -> None:
    ledgers = [LedgerInfo(2, 0), LedgerInfo(3, 0), LedgerInfo(5, 1)]
    assert previous_position(Position(5, 0), ledgers) == Position(2, -1)


@given(
    st.lists(st.integers(0, 4), min_size=1, max_size=6),
    st.data(),
)
def test_previous_is_the_greatest_existing_position_below(counts: list[int], data: st.DataObject) -> None:
    ledgers = [LedgerInfo(i + 1, c) for i, c in enumerate(counts)]
    existing = [Position(info.ledger_id, e) for info in ledgers for e in range(info.entries)]
    if not existing:
        return
    target = data.draw(st.sampled_from(existing))
    below = [p for p in existing if p < target]
    result = previous_position(target, ledgers)
    if below:
        assert result == max(below)
    else:
        assert result.entry_id == -1 and result < target


def test_batched_position_equals_plain_position_both_ways() -> None:
    batched, plain = BatchedPosition(1, 1, 2, 0), Position(1, 1)
    assert batched == plain and plain == batched
    assert hash(batched) == hash(plain)
    assert {plain: "x"}[batched] == "x" and {batched: "y"}[plain] == "y"
    assert not batched < plain and not plain < batched
    assert batched.position == plain


@pytest.mark.parametrize("size,index", [(10, 5), (64, 0), (64, 63), (230, 120), (256, 255)])
def test_batched_position_ack_set_clears_only_its_bit(size: int, index: int) -> None:
    words = BatchedPosition(1, 1, size, index).ack_set()
    assert words is not None
    bits = words_to_bits(words)
    assert bits == ((1 << size) - 1) & ~(1 << index)


def test_one_record_batch_deletes_the_whole_entry() -> None:
    assert BatchedPosition(1, 1, 1, 0).ack_set() is None


@given(st.integers(0, (1 << 300) - 1))
def test_bitset_words_round_trip(bits: int) -> None:
    words = bits_to_words(bits)
    assert words_to_bits(words) == bits
    assert all(-(1 << 63) <= w < (1 << 63) for w in words)
    assert not words or words[-1] != 0


def test_batched_position_rejects_index_outside_batch() -> None:
    with pytest.raises(ValueError):
        BatchedPosition(1, 1, 3, 3)


def test_subscription_order_is_topic_then_name() -> None:
    subs = [Subscription("t2", "a"), Subscription("t1", "b"), Subscription("t1", "a")]
    assert sorted(subs) == [Subscription("t1", "a"), Subscription("t1", "b"), Subscription("t2", "a")]


# TxnStatusTest.testTxnStatusTransition enumerates exactly these allowed pairs.
ALLOWED = {
    ("OPEN", "OPEN"), ("OPEN", "COMMITTING"), ("OPEN", "ABORTING"),
    ("COMMITTING", "COMMITTING"), ("COMMITTING", "COMMITTED"),
    ("COMMITTED", "COMMITTED"),
    ("ABORTING", "ABORTING"), ("ABORTING", "ABORTED"),
    ("ABORTED", "ABORTED"),
}  # fmt: skip


def test_txn_status_table_is_pulsars() -> None:
    for current, new in itertools.product(TxnStatus, TxnStatus):
        assert can_transition(current, new) == ((current.name, new.name) in ALLOWED), (current, new)
    assert [s.value for s in TxnStatus] == [0, 1, 2, 3, 4]
    assert set(TXN_STATUS_TRANSITIONS) == set(TxnStatus)


def test_terminal_statuses() -> None:
    assert {s for s in TxnStatus if s.is_terminal} == {TxnStatus.COMMITTED, TxnStatus.ABORTED}


def test_client_terminal_states_are_absorbing() -> None:
    for state in (ClientTxnState.COMMITTED, ClientTxnState.ABORTED, ClientTxnState.ERROR, ClientTxnState.TIME_OUT):
        assert not any(client_can_transition(state, other) for other in ClientTxnState)
    assert client_can_transition(ClientTxnState.OPEN, ClientTxnState.TIME_OUT)


def test_enums_print_as_pulsars_names() -> None:
    """What a person reads: Pulsar's spelling, not IntEnum's number nor ``Class.MEMBER``."""
    from engine.simulation.client import ConsumerType
    from engine.storage.ledger import InitialPosition
    from reference import batched_log, buffer, coordinator, pending_ack
    from spec.envelope import LogKind
    from spec.errors import ServerError
    from spec.types import AckType, ClientTxnState, MessageState, PulsarName, TxnAction

    assert str(TxnStatus.COMMITTING) == "COMMITTING" and f"{TxnStatus.ABORTED}" == "ABORTED"
    assert f"[{TxnStatus.OPEN:>6}]" == "[  OPEN]"
    assert (str(TxnAction.ABORT), str(AckType.CUMULATIVE)) == ("ABORT", "CUMULATIVE")
    assert str(ServerError.TransactionConflict) == "TransactionConflict"
    assert str(pending_ack.PendingAckOp.COMMIT) == "COMMIT" and str(coordinator.TxnMetadataOp.UPDATE) == "UPDATE"
    # string-valued enums carry Pulsar's own spelling as their value
    assert str(pending_ack.HandleState.READY) == "Ready" and str(buffer.BufferStatus.NO_SNAPSHOT) == "NoSnapshot"
    assert str(coordinator.StoreState.CLOSE) == "Close" and str(pending_ack.SubType.Key_Shared) == "Key_Shared"
    # the numbers and comparisons stay: only the text changes
    assert int(TxnStatus.COMMITTING) == 1 and TxnStatus.COMMITTING == 1
    assert repr(TxnStatus.OPEN) == "<TxnStatus.OPEN: 0>"
    for kind in (
        TxnStatus,
        TxnAction,
        AckType,
        ClientTxnState,
        MessageState,
        ServerError,
        LogKind,
        ConsumerType,
        InitialPosition,
        pending_ack.PendingAckOp,
        pending_ack.HandleState,
        pending_ack.SubType,
        pending_ack.PositionInPendingAck,
        coordinator.StoreState,
        coordinator.TxnMetadataOp,
        buffer.BufferStatus,
        buffer.EntryKind,
        batched_log.WriterStatus,
        batched_log.FlushTrigger,
    ):
        assert issubclass(kind, PulsarName), kind
        for member in kind:
            assert str(member) == (member.value if isinstance(member.value, str) else member.name)


def test_txn_status_of_the_coordinator_prints_its_name() -> None:
    from reference import coordinator as tc
    from spec.config import Config

    state = tc.initial(Config(transaction_coordinator_enabled=True))
    state, created = tc.step(state, tc.NewTxn(timeout_ms=60_000, now_ms=0))
    assert created.ok
    state, updated = tc.step(state, tc.UpdateTxnStatus(created.value, TxnStatus.COMMITTING, TxnStatus.OPEN, 1))
    assert updated.ok
    assert str(tc.txn_status(state, created.value)) == "COMMITTING"
