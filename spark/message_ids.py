"""Message-id columns in bulk: the ``__messageId`` bytes and ``__messageIdString`` text of
every row of a record batch at once, without a Python object per row.

Owns: ``message_id_columns``: ``MessageIdData`` bytes as ``MessageId.serialize()`` writes
them (ledgerId (1), entryId (2), partition (3), then batch_index (4) for a batch member) and
``ledger:entry:batch`` text (batch -1 for a message that is a whole entry). A row's id is
its entry's part (made once per entry: ``message_id_bytes`` of the entry, ``ledger:entry:``)
followed by its batch index's part, taken from a table of every index's bytes and text
(``_MemberParts``, grown to the largest index met): per row, two Arrow ``take``s and one
join, all in C, instead of varints and decimal text computed per row.

``message_id_bytes``: the ids of rows given one by one (their varints made with numpy, the
rows' bytes picked out of one matrix): the entries' part above, and a reference for tests.

Must not know: entries' contents, storage, Spark.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from magnetar.client.protocol import encode_varint

_UINT64 = (1 << 64) - 1
_VARINT_BYTES_MAX = 10
_VARINT_LIMITS = np.array([1 << (7 * k) for k in range(1, _VARINT_BYTES_MAX)], dtype=np.uint64)
"""A value below ``_VARINT_LIMITS[k]`` takes ``k + 1`` varint bytes."""
MEMBER_TABLE_MAX = 1 << 17
"""Batch indexes up to this many have their parts in the table; a batch beyond it (a
producer's ``batchingMaxMessages`` is far below) has its members' ids made per row."""


def _varints(values: Any) -> tuple[Any, Any]:
    """(bytes, lengths) of the base-128 varints of ``values`` (uint64, one row each):
    ``bytes[i, :lengths[i]]`` is value i's varint, as protobuf writes it."""
    v = np.asarray(values).astype(np.uint64)
    lengths = np.searchsorted(_VARINT_LIMITS, v, side="right").astype(np.int64) + 1
    width = int(lengths.max()) if len(v) else 1
    out = np.empty((len(v), width), dtype=np.uint8)
    for k in range(width):
        byte = ((v >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8)
        out[:, k] = byte | ((lengths > k + 1).astype(np.uint8) << 7)
    return out, lengths


def _constant(data: bytes, n: int) -> tuple[Any, Any]:
    """``data`` on every one of ``n`` rows, as ``_varints`` gives its columns."""
    row = np.frombuffer(data, dtype=np.uint8)
    return np.broadcast_to(row, (n, len(data))), np.full(n, len(data), dtype=np.int64)


def message_id_bytes(ledgers: Any, entries: Any, batches: Any, partition: int) -> Any:
    """``MessageIdData`` bytes of every row, as one Arrow binary array: ledgerId (1),
    entryId (2), partition (3), then batch_index (4) for a batch member
    (``batches[i] >= 0``); the varints of all rows are made at once (numpy), the rows' bytes
    picked out of one matrix in row order."""
    n = len(ledgers)
    if n == 0:
        return pa.array([], pa.binary())
    ledger_bytes, ledger_len = _varints(ledgers)
    entry_bytes, entry_len = _varints(entries)
    parts = [
        _constant(b"\x08", n),
        (ledger_bytes, ledger_len),
        _constant(b"\x10", n),
        (entry_bytes, entry_len),
        _constant(b"\x18" + encode_varint(partition & _UINT64), n),
    ]
    member = np.asarray(batches) >= 0
    if member.any():
        index, index_len = _varints(np.where(member, batches, 0))
        parts.append((np.full((n, 1), 0x20, dtype=np.uint8), member.astype(np.int64)))
        parts.append((index, np.where(member, index_len, 0)))
    matrix = np.hstack([m for m, _ in parts])
    lengths = sum(lens for _, lens in parts)
    if lengths.min() == matrix.shape[1]:  # every row fills the matrix: no mask
        data = matrix.tobytes()
    else:
        keep = np.empty(matrix.shape, dtype=np.bool_)
        at = 0
        for m, lens in parts:
            width = m.shape[1]
            if lens.min() == width:
                keep[:, at : at + width] = True
            else:
                np.less(np.arange(width), lens[:, None], out=keep[:, at : at + width])
            at += width
        data = matrix[keep].tobytes()
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


class _MemberParts:
    """Every batch index's part of an id, up to the largest met: row ``i + 1`` for index
    ``i``, row 0 for a whole entry (-1)."""

    def __init__(self) -> None:
        self.size = 0
        self.binary: Any = None  # b"" | 0x20 varint(i)
        self.text: Any = None  # "-1" | str(i)

    def upto(self, largest: int) -> _MemberParts:
        if largest >= self.size:
            size = max(1024, 1 << int(largest).bit_length())
            self.binary = pa.array(
                [b"", *(b"\x20" + encode_varint(i) for i in range(size))], pa.binary()
            )
            self.text = pa.array(["-1", *map(str, range(size))], pa.string())
            self.size = size
        return self


_MEMBERS = _MemberParts()


def message_id_columns(
    ledgers: Any, entries: Any, counts: Any, batches: Any, partition: int
) -> tuple[Any, Any]:
    """The ``__messageId`` bytes and ``__messageIdString`` text of every row: ``ledgers``,
    ``entries`` and ``counts`` (rows) per entry, ``batches`` per row (-1: not a batch
    member)."""
    n = len(batches)
    ledgers = np.asarray(ledgers, dtype=np.int64)
    entries = np.asarray(entries, dtype=np.int64)
    batches = np.asarray(batches, dtype=np.int64)
    if n == 0:
        return pa.array([], pa.binary()), pa.array([], pa.string())
    largest = int(batches.max())
    if largest >= MEMBER_TABLE_MAX:
        rows_ledgers = np.repeat(ledgers, counts)
        rows_entries = np.repeat(entries, counts)
        return message_id_bytes(rows_ledgers, rows_entries, batches, partition), (
            pc.binary_join_element_wise(
                *(pc.cast(pa.array(c), pa.string()) for c in (rows_ledgers, rows_entries)),
                pc.cast(pa.array(batches), pa.string()),
                ":",
            )
        )
    ids = message_id_bytes(ledgers, entries, np.full(len(entries), -1), partition)
    text_parts = (pc.cast(pa.array(ledgers), pa.string()), pc.cast(pa.array(entries), pa.string()))
    if largest < 0:  # no batch member: an entry a row
        return ids, pc.binary_join_element_wise(*text_parts, pa.scalar("-1"), ":")
    members = _MEMBERS.upto(largest)
    texts = pc.binary_join_element_wise(*text_parts, "", ":")
    if len(entries) != n:  # batch members: their entry's part on each of its rows
        of_row = pa.array(np.repeat(np.arange(len(entries), dtype=np.int64), counts))
        ids, texts = ids.take(of_row), texts.take(of_row)
    index = pa.array(batches + 1)
    ids = pc.binary_join_element_wise(ids, members.binary.take(index), b"")
    texts = pc.binary_join_element_wise(texts, members.text.take(index), "")
    return ids, texts


__all__ = ["MEMBER_TABLE_MAX", "message_id_bytes", "message_id_columns"]
