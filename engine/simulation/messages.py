"""What a consumer receives and a producer's send completes with: :class:`Message`, the id of a
message in a batch entry (:class:`BatchMessageId`), and the subscription types (:class:`ConsumerType`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from spec.types import Position, PulsarName, TxnID

__all__ = ["BatchMessageId", "ConsumerType", "Message"]


class ConsumerType(PulsarName, enum.Enum):
    Exclusive = "Exclusive"
    Shared = "Shared"
    Failover = "Failover"
    KeyShared = "Key_Shared"


@dataclass(frozen=True, slots=True)
class BatchMessageId(Position):
    """The id of a message in a batch entry: the entry's position with the message's index and the
    batch size (as Pulsar's ``BatchMessageIdImpl`` extends ``MessageIdImpl``).  Ordered by position,
    then index."""

    batch_index: int = 0
    batch_size: int = 1

    @classmethod
    def of(cls, position: Position, batch_index: int, batch_size: int) -> BatchMessageId:
        return cls(position.ledger_id, position.entry_id, batch_index, batch_size)

    @property
    def position(self) -> Position:
        return Position(self.ledger_id, self.entry_id)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, BatchMessageId) and self.position == other.position:
            return self.batch_index < other.batch_index
        return Position.__lt__(self, other)


@dataclass(frozen=True)
class Message:
    """A received message (``pulsar.Message``'s accessors)."""

    partition: str
    subscription: str
    position: Position
    payload: bytes
    txn_id: TxnID | None
    deliver_at: int | None
    redelivery_count: int
    batch_index: int | None = None  # set for a message of a batch entry
    batch_size: int = 1
    key: str | None = None

    def data(self) -> bytes:
        return self.payload

    def message_id(self) -> Position:
        if self.batch_index is None:
            return self.position
        return BatchMessageId.of(self.position, self.batch_index, self.batch_size)

    def partition_key(self) -> str | None:
        return self.key

    def topic_name(self) -> str:
        return self.partition
