"""Message ids: (ledger, entry, partition, batch index), their order and wire conversions.

Owns: ``MessageId`` (frozen, ordered), the signed<->unsigned conversion of uint64 proto fields
(the C++ client writes -1 as 2^64-1), and the ``MessageIdData`` conversions.

Order: by (ledger_id, entry_id, partition, batch_index), all signed. ``EARLIEST`` = (-1, -1)
sorts before every real id and ``LATEST`` = (INT64_MAX, INT64_MAX) after; a non-batched id
(batch_index -1) sorts before the messages of the same entry's batch.

Must not know: topics, cursors, sockets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .proto import pulsar_api_pb2 as pb

INT64_MAX = (1 << 63) - 1
_UINT64_MASK = (1 << 64) - 1


def to_uint64(value: int) -> int:
    """A signed int64 as the uint64 protobuf field carries it (-1 → 2^64-1)."""
    if not -(1 << 63) <= value <= _UINT64_MASK:
        raise ValueError(f"{value} does not fit in 64 bits")
    return value & _UINT64_MASK


def to_int64(value: int) -> int:
    """A uint64 protobuf field read as the signed int64 the C++ client meant (2^64-1 → -1)."""
    value &= _UINT64_MASK
    return value - (1 << 64) if value > INT64_MAX else value


@dataclass(frozen=True, slots=True, order=True)
class MessageId:
    """Position of a message: entry (ledger_id, entry_id), partition and index inside a batch."""

    ledger_id: int
    entry_id: int
    partition: int = -1
    batch_index: int = -1

    EARLIEST: ClassVar[MessageId]
    LATEST: ClassVar[MessageId]

    @property
    def entry(self) -> tuple[int, int]:
        """(ledger_id, entry_id): what acks and cursors deal in."""
        return (self.ledger_id, self.entry_id)

    def to_proto(
        self, *, with_partition: bool = True, with_batch_index: bool = True
    ) -> pb.MessageIdData:
        data = pb.MessageIdData(
            ledgerId=to_uint64(self.ledger_id), entryId=to_uint64(self.entry_id)
        )
        if with_partition:
            data.partition = self.partition
        if with_batch_index and self.batch_index >= 0:
            data.batch_index = self.batch_index
        return data

    @classmethod
    def from_proto(cls, data: pb.MessageIdData) -> MessageId:
        return cls(
            to_int64(data.ledgerId), to_int64(data.entryId), data.partition, data.batch_index
        )

    def serialize(self) -> bytes:
        """Bytes of a MessageIdData (what Pulsar's ``MessageId.toByteArray`` produces)."""
        return self.to_proto().SerializeToString()

    @classmethod
    def deserialize(cls, data: bytes) -> MessageId:
        msg = pb.MessageIdData()
        try:
            msg.ParseFromString(data)
        except Exception as exc:
            raise ValueError(f"not a serialized MessageIdData: {exc}") from None
        if not msg.IsInitialized():
            raise ValueError("serialized MessageIdData misses ledgerId or entryId")
        return cls.from_proto(msg)

    def __str__(self) -> str:
        return f"({self.ledger_id},{self.entry_id},{self.partition},{self.batch_index})"


MessageId.EARLIEST = MessageId(-1, -1)
MessageId.LATEST = MessageId(INT64_MAX, INT64_MAX)
