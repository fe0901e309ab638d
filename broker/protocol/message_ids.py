"""Message ids on the wire as the broker's positions, and back.

Owns: reading a ``MessageIdData`` (uint64 fields) as a ``Position`` with the codec's signed
reading (``to_int64``: the C++ client writes -1 as 2^64-1), the start of a SUBSCRIBE or the
target of a SEEK (a negative ledger means the earliest position, INT64_MAX the latest), and
the ``MessageIdData`` of an entry for a response.
Must not know: topics, cursors, connections.
"""

from __future__ import annotations

from magnetar.broker.ledger.position import EARLIEST, LATEST, Position
from magnetar.client.protocol import INT64_MAX, pb, to_int64, to_uint64


def position_of(mid: pb.MessageIdData) -> Position:
    """The position a message id names (signed, as the client meant it)."""
    return Position(to_int64(mid.ledgerId), to_int64(mid.entryId))


def start_of(mid: pb.MessageIdData) -> Position:
    """Where a SUBSCRIBE starts or a SEEK goes: EARLIEST for a negative ledger id, LATEST for
    INT64_MAX (the client's ``MessageId.latest``), else the position itself."""
    pos = position_of(mid)
    if pos.ledger_id < 0:
        return EARLIEST
    if pos.ledger_id >= INT64_MAX:
        return LATEST
    return pos


def message_id_data(
    ledger_id: int, entry_id: int, *, partition: int | None = None, batch_index: int | None = None
) -> pb.MessageIdData:
    """The ``MessageIdData`` of an entry (-1 written as 2^64-1), with the optional fields
    given."""
    data = pb.MessageIdData(ledgerId=to_uint64(ledger_id), entryId=to_uint64(entry_id))
    if partition is not None:
        data.partition = partition
    if batch_index is not None:
        data.batch_index = batch_index
    return data


__all__ = ["message_id_data", "position_of", "start_of"]
