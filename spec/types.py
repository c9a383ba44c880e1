"""The vocabulary every machine shares: identifiers, positions, statuses and ack states.

Everything here is an immutable, hashable value with no behaviour beyond what the word itself
means in Pulsar (ordering, printing, the transition table of a status).  Rules that involve more
than one word live in the machines' rule pages (``spec/rules/*.md``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import total_ordering
from typing import Final, cast

__all__ = [
    "EARLIEST",
    "INT64_MAX",
    "INT64_MIN",
    "LATEST",
    "UINT64_MAX",
    "AckType",
    "BatchedPosition",
    "ClientTxnState",
    "LedgerInfo",
    "MessageState",
    "Position",
    "PulsarName",
    "Subscription",
    "TxnAction",
    "TxnID",
    "TxnStatus",
    "can_transition",
    "client_can_transition",
    "previous_position",
]

INT64_MIN: Final = -(1 << 63)
INT64_MAX: Final = (1 << 63) - 1
UINT64_MAX: Final = (1 << 64) - 1


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if type(value) is int and low <= value <= high:
        return value  # the common case, first: every step builds positions and ids
    # bool is an int subclass; a True txn id is always a caller's mistake.
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name}={value} is outside [{low}, {high}]")
    return value


class _KeptHash:
    """A base giving a frozen slotted dataclass one more slot, ``_hash``, outside its fields: its
    ``__init__`` stores there the hash the dataclass's own ``__hash__`` would compute, and its
    ``__hash__`` returns it (the same value, so every set and map of these values holds them in the
    same order as before).  Equality, ordering, repr and the pickled state are the fields only
    (unpickling sets the hash again).  Never :func:`reference.persistent.evolve` one: a copy made
    without ``__init__`` would have no hash."""

    __slots__ = ("_hash",)

    _hash: int


@dataclass(frozen=True, slots=True, init=False)
class TxnID(_KeptHash):
    """A transaction id: ``(most_sig_bits, least_sig_bits)``.

    Today's Pulsar puts the whole transaction-coordinator id in ``most_sig_bits`` (not the 16-bit
    prefix PIP-31 proposed) and the coordinator's per-store sequence in ``least_sig_bits``.  Both
    travel as proto ``uint64`` fields, so both are unsigned 64-bit here.
    """

    most_sig_bits: int
    least_sig_bits: int

    def __init__(self, most_sig_bits: int, least_sig_bits: int) -> None:
        # Written out, as Position's: ids are made and hashed on every step.
        _check_int("most_sig_bits", most_sig_bits, 0, UINT64_MAX)
        _check_int("least_sig_bits", least_sig_bits, 0, UINT64_MAX)
        _set_most_sig_bits(self, most_sig_bits)
        _set_least_sig_bits(self, least_sig_bits)
        _set_kept_hash(self, hash((most_sig_bits, least_sig_bits)))

    def __hash__(self) -> int:
        return self._hash

    def __setstate__(self, state: list[int]) -> None:
        # unpickling: the fields (what the dataclass's __getstate__ gives) and the kept hash
        most_sig_bits, least_sig_bits = state
        _set_most_sig_bits(self, most_sig_bits)
        _set_least_sig_bits(self, least_sig_bits)
        _set_kept_hash(self, hash((most_sig_bits, least_sig_bits)))

    @classmethod
    def of(cls, coordinator_id: int, sequence: int) -> TxnID:
        return cls(coordinator_id, sequence)

    @property
    def coordinator_id(self) -> int:
        return self.most_sig_bits

    @property
    def sequence(self) -> int:
        return self.least_sig_bits

    # The four orderings spelled out (not functools.total_ordering, whose derived ones cost two
    # calls each): ids are compared on every step.
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, TxnID):
            return NotImplemented
        return (self.most_sig_bits, self.least_sig_bits) < (other.most_sig_bits, other.least_sig_bits)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, TxnID):
            return NotImplemented
        return (self.most_sig_bits, self.least_sig_bits) <= (other.most_sig_bits, other.least_sig_bits)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, TxnID):
            return NotImplemented
        return (self.most_sig_bits, self.least_sig_bits) > (other.most_sig_bits, other.least_sig_bits)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, TxnID):
            return NotImplemented
        return (self.most_sig_bits, self.least_sig_bits) >= (other.most_sig_bits, other.least_sig_bits)

    def __str__(self) -> str:
        # Pulsar prints a TxnID as "(most,least)"; logs and vectors use the same spelling.
        return f"({self.most_sig_bits},{self.least_sig_bits})"

    @classmethod
    def parse(cls, text: str) -> TxnID:
        """Parse Pulsar's printed form ``"(most,least)"``."""
        body = text.strip()
        if not (body.startswith("(") and body.endswith(")")):
            raise ValueError(f"not a TxnID: {text!r} (expected '(most,least)')")
        parts = body[1:-1].split(",")
        if len(parts) != 2:
            raise ValueError(f"not a TxnID: {text!r} (expected two numbers)")
        try:
            return cls(int(parts[0]), int(parts[1]))
        except ValueError as exc:
            raise ValueError(f"not a TxnID: {text!r} ({exc})") from None


_set_most_sig_bits = TxnID.__dict__["most_sig_bits"].__set__
_set_least_sig_bits = TxnID.__dict__["least_sig_bits"].__set__


@dataclass(frozen=True, slots=True, init=False)
class Position(_KeptHash):
    """A managed-ledger position ``(ledger_id, entry_id)``, totally ordered ledger-first.

    ``entry_id == -1`` is legal: it names "just before the first entry of this ledger", which is
    what Pulsar uses for an empty ledger's last-confirmed entry and for ``previous()`` of the very
    first entry.
    """

    ledger_id: int
    entry_id: int

    def __init__(self, ledger_id: int, entry_id: int) -> None:
        # Written out (the dataclass's would set each field through object.__setattr__, then call
        # __post_init__): every step of every machine makes positions.
        _check_int("ledger_id", ledger_id, -1, INT64_MAX)
        _check_int("entry_id", entry_id, -1, INT64_MAX)
        _set_ledger_id(self, ledger_id)
        _set_entry_id(self, entry_id)
        # positions are map and set keys on every step: hashed more often than made
        _set_kept_hash(self, hash((ledger_id, entry_id)))

    def __hash__(self) -> int:
        return self._hash

    def __setstate__(self, state: list[int]) -> None:
        # unpickling: the fields (what the dataclass's __getstate__ gives) and the kept hash
        ledger_id, entry_id = state
        _set_ledger_id(self, ledger_id)
        _set_entry_id(self, entry_id)
        _set_kept_hash(self, hash((ledger_id, entry_id)))

    # The four orderings spelled out, as for TxnID.  A BatchedPosition is not a Position: the
    # comparison is handed to it (NotImplemented), which compares as its plain position.
    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return (self.ledger_id, self.entry_id) < (other.ledger_id, other.entry_id)

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return (self.ledger_id, self.entry_id) <= (other.ledger_id, other.entry_id)

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return (self.ledger_id, self.entry_id) > (other.ledger_id, other.entry_id)

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return (self.ledger_id, self.entry_id) >= (other.ledger_id, other.entry_id)

    def next(self) -> Position:
        """The next entry id in the same ledger (Pulsar's ``getNext``)."""
        return Position(self.ledger_id, self.entry_id + 1)

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


# the slots' own setters, which a frozen dataclass's __setattr__ does not guard
_set_ledger_id = Position.__dict__["ledger_id"].__set__
_set_entry_id = Position.__dict__["entry_id"].__set__
_set_kept_hash = _KeptHash.__dict__["_hash"].__set__

# Pulsar's sentinels.  EARLIEST is (-1, -1); LATEST is (Long.MAX, Long.MAX).
EARLIEST: Final = Position(-1, -1)
LATEST: Final = Position(INT64_MAX, INT64_MAX)


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    """What ``previous_position`` needs to know of one ledger: its id and its entry count."""

    ledger_id: int
    entries: int

    def __post_init__(self) -> None:
        _check_int("ledger_id", self.ledger_id, 0, INT64_MAX)
        _check_int("entries", self.entries, 0, INT64_MAX)


def previous_position(position: Position, ledgers: Iterable[LedgerInfo]) -> Position:
    """The position just before ``position`` in a managed ledger made of ``ledgers``.

    Pulsar's ``ManagedLedgerImpl.getPreviousPosition``: within a ledger step back one entry; at
    entry 0 step to the last entry of the nearest *earlier non-empty* ledger; if no earlier
    ledger exists return ``(ledger, -1)``; if only empty earlier ledgers exist return
    ``(first ledger, -1)``.  This crossing of ledger boundaries is what fix #22024 brought to the
    transaction buffer's maxReadPosition (it had been ``entryId - 1``).
    """
    if position.entry_id > 0:
        return Position(position.ledger_id, position.entry_id - 1)
    earlier = sorted((info for info in ledgers if info.ledger_id < position.ledger_id), key=lambda i: i.ledger_id)
    if not earlier:
        return Position(position.ledger_id, -1)
    for info in reversed(earlier):
        if info.entries > 0:
            return Position(info.ledger_id, info.entries - 1)
    return Position(earlier[0].ledger_id, -1)


@total_ordering
@dataclass(frozen=True, slots=True)
class BatchedPosition:
    """A record's place inside a batched entry (PIP-160's ``TxnBatchedPositionImpl``).

    It equals, hashes and orders like the plain ``(ledger_id, entry_id)`` (Pulsar's batched
    position is interchangeable with the plain one as a map key); ``batch_size`` and
    ``batch_index`` say which bit of the entry's ack set belongs to this record.
    """

    ledger_id: int
    entry_id: int
    batch_size: int
    batch_index: int

    def __post_init__(self) -> None:
        _check_int("ledger_id", self.ledger_id, -1, INT64_MAX)
        _check_int("entry_id", self.entry_id, -1, INT64_MAX)
        _check_int("batch_size", self.batch_size, 1, 1 << 31)
        _check_int("batch_index", self.batch_index, 0, self.batch_size - 1)

    @property
    def position(self) -> Position:
        return Position(self.ledger_id, self.entry_id)

    def _key(self) -> tuple[int, int]:
        return (self.ledger_id, self.entry_id)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BatchedPosition | Position):
            return self._key() == (other.ledger_id, other.entry_id)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(Position(self.ledger_id, self.entry_id))

    def __lt__(self, other: object) -> bool:
        if isinstance(other, BatchedPosition | Position):
            return self._key() < (other.ledger_id, other.entry_id)
        return NotImplemented

    def ack_set(self) -> tuple[int, ...] | None:
        """The cursor ack set that deletes only this record, as Java ``BitSet.toLongArray()`` words.

        ``None`` for a one-record batch: that is a whole-entry delete.  Bit i set means index i
        is still present; this record's bit is the only one cleared.
        """
        if self.batch_size == 1:
            return None
        return bits_to_words(self.ack_bits())

    def ack_bits(self) -> int:
        """:meth:`ack_set` as one int (bit i set: index i still present), for a one-record batch too."""
        return ((1 << self.batch_size) - 1) & ~(1 << self.batch_index)

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}[{self.batch_index}/{self.batch_size}]"


def bits_to_words(bits: int) -> tuple[int, ...]:
    """Java ``BitSet.toLongArray()``: little-endian 64-bit words as signed longs, trailing zeros cut."""
    words: list[int] = []
    while bits:
        word = bits & 0xFFFF_FFFF_FFFF_FFFF
        words.append(word - (1 << 64) if word >= (1 << 63) else word)
        bits >>= 64
    return tuple(words)


def words_to_bits(words: Iterable[int]) -> int:
    """Inverse of ``bits_to_words`` (accepts signed or unsigned words)."""
    bits = 0
    for i, word in enumerate(words):
        bits |= (word & 0xFFFF_FFFF_FFFF_FFFF) << (64 * i)
    return bits


@total_ordering
@dataclass(frozen=True, slots=True)
class Subscription:
    """A (topic, subscription) pair, ordered as Pulsar sorts a txn's acked subscriptions."""

    topic: str
    subscription: str

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Subscription):
            return NotImplemented
        return (self.topic, self.subscription) < (other.topic, other.subscription)

    def __str__(self) -> str:
        return f"{self.topic}/{self.subscription}"


class PulsarName:
    """Mixin for the domain's enums: ``str()`` and f-strings give Pulsar's spelling of a value, not
    a number (``IntEnum``'s default) nor ``Class.MEMBER`` (``Enum``'s).

    Pulsar's spelling is the member's value when that is a string (``HandleState.READY`` is
    ``Ready``, as ``PendingAckHandleState`` spells it) and its name otherwise (``TxnStatus.COMMITTING``
    is ``COMMITTING``, the proto enum's name).  ``repr`` stays Python's, and ``int()``, comparisons
    and the wire encodings are unchanged: only what a person reads is.
    """

    def __str__(self) -> str:
        member = cast(enum.Enum, self)
        return member.value if isinstance(member.value, str) else member.name

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class TxnStatus(PulsarName, enum.IntEnum):
    """The coordinator's transaction status; values equal the proto enum ``TxnStatus``.

    Pulsar's server has no TIME_OUT status: a timed-out transaction is aborted through
    ABORTING/ABORTED with ``isTimeout``.  TIME_OUT exists only on the client
    (:class:`ClientTxnState`).
    """

    OPEN = 0
    COMMITTING = 1
    COMMITTED = 2
    ABORTING = 3
    ABORTED = 4

    @property
    def is_terminal(self) -> bool:
        return self in (TxnStatus.COMMITTED, TxnStatus.ABORTED)


_O, _CG, _CD, _AG, _AD = (
    TxnStatus.OPEN,
    TxnStatus.COMMITTING,
    TxnStatus.COMMITTED,
    TxnStatus.ABORTING,
    TxnStatus.ABORTED,
)

# TransactionUtil.canTransitionTo, exactly as TxnStatusTest enumerates it.  Self-loops are
# allowed for every status; OPEN may not jump straight to a terminal status.
TXN_STATUS_TRANSITIONS: Final[Mapping[TxnStatus, frozenset[TxnStatus]]] = {
    _O: frozenset({_O, _CG, _AG}),
    _CG: frozenset({_CG, _CD}),
    _CD: frozenset({_CD}),
    _AG: frozenset({_AG, _AD}),
    _AD: frozenset({_AD}),
}


def can_transition(current: TxnStatus, new: TxnStatus) -> bool:
    """Pulsar's ``TransactionUtil.canTransitionTo(current, new)``."""
    return new in TXN_STATUS_TRANSITIONS[current]


class ClientTxnState(PulsarName, enum.Enum):
    """The client's ``Transaction.State`` (TransactionImpl), a machine of its own."""

    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    ABORTING = "ABORTING"
    COMMITTED = "COMMITTED"
    ABORTED = "ABORTED"
    ERROR = "ERROR"
    TIME_OUT = "TIME_OUT"


_C = ClientTxnState
CLIENT_TXN_TRANSITIONS: Final[Mapping[ClientTxnState, frozenset[ClientTxnState]]] = {
    # commit() is accepted from OPEN or COMMITTING; abort() from OPEN or ABORTING; the client
    # timer moves OPEN to TIME_OUT; an end that the TC rejects ends in ERROR.  A commit whose
    # in-flight operations failed is turned into an abort, so COMMITTING may reach ABORTED.
    _C.OPEN: frozenset({_C.COMMITTING, _C.ABORTING, _C.TIME_OUT, _C.ERROR}),
    _C.COMMITTING: frozenset({_C.COMMITTING, _C.COMMITTED, _C.ABORTING, _C.ABORTED, _C.ERROR}),
    _C.ABORTING: frozenset({_C.ABORTING, _C.ABORTED, _C.ERROR}),
    _C.COMMITTED: frozenset(),
    _C.ABORTED: frozenset(),
    _C.ERROR: frozenset(),
    _C.TIME_OUT: frozenset(),
}


def client_can_transition(current: ClientTxnState, new: ClientTxnState) -> bool:
    return new in CLIENT_TXN_TRANSITIONS[current]


class TxnAction(PulsarName, enum.IntEnum):
    """``TxnAction`` of PulsarApi.proto."""

    COMMIT = 0
    ABORT = 1


class AckType(PulsarName, enum.IntEnum):
    """``CommandAck.AckType`` of PulsarApi.proto."""

    INDIVIDUAL = 0
    CUMULATIVE = 1


class MessageState(PulsarName, enum.Enum):
    """PIP-31's per-subscription message states.

    PENDING: delivered or deliverable, not acknowledged.  PENDING_ACK: acknowledged inside an
    open transaction (locked against other transactions).  DELETED: acknowledged for good.
    Today's Pulsar realises PENDING_ACK in the pending-ack handle's maps and DELETED as the
    cursor's mark-delete position, individually deleted ranges and batch ack sets.
    """

    PENDING = "PENDING"
    PENDING_ACK = "PENDING_ACK"
    DELETED = "DELETED"
