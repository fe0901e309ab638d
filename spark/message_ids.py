"""Message-id columns in bulk: the ``__messageId`` bytes and ``__messageIdString`` text of
every row of a record batch at once, without a Python object per row.

Owns: ``message_id_columns``: ``MessageIdData`` bytes as ``MessageId.serialize()`` writes
them (ledgerId (1), entryId (2), partition (3), then batch_index (4) for a batch member) and
``ledger:entry:batch`` text (batch -1 for a message that is a whole entry). A row's id is
its entry's part (made once per entry: ``message_id_bytes`` of the entry, ``ledger:entry:``)
followed by its batch index's part, from a table of every index's bytes and text
(``_MemberParts``, grown to the largest index met): a batch entry's rows are one
``bytes.join`` of its members' parts (in C), instead of varints and decimal text computed
per row.

``message_id_bytes``: the ids of rows given one by one (their varints made with numpy, the
rows' bytes picked out of one matrix): the entries' part above, and a reference for tests.
Rows that are whole entries of one ledger (an unbatched run) have their text made the same
way (``_decimals``: the entry ids' digits in one matrix, between a constant ``ledger:`` and
``:-1``), not by Arrow's per-value number formatting and joining.

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
_POWERS_OF_TEN = np.array([10**k for k in range(1, 19)], dtype=np.int64)
"""A non-negative value below ``_POWERS_OF_TEN[k]`` takes ``k + 1`` decimal digits."""
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
    return _packed(parts, pa.binary())


def _decimals(values: Any) -> tuple[Any, Any]:
    """(digits, lengths) of the decimal text of ``values`` (non-negative int64), as
    ``_varints`` gives its columns but right-aligned: row i's text is the last
    ``lengths[i]`` bytes of ``digits[i]`` (``_packed`` takes them with ``right=True``)."""
    v = np.asarray(values, dtype=np.int64)
    lengths = np.searchsorted(_POWERS_OF_TEN, v, side="right").astype(np.int64) + 1
    width = int(lengths.max()) if len(v) else 1
    out = np.empty((len(v), width), dtype=np.uint8)
    q = v.astype(np.uint32) if width <= 9 else v.copy()
    for k in range(width - 1, -1, -1):
        q, digit = np.divmod(q, 10)
        out[:, k] = digit
    out += ord("0")
    return out, lengths


def _packed(parts: list[tuple[Any, Any]], kind: Any, right: frozenset[int] = frozenset()) -> Any:
    """Rows made of ``parts`` side by side, each ``(matrix, lengths)``: row i takes the first
    ``lengths[i]`` bytes of each part's row (the last, for the parts numbered in ``right``),
    as one Arrow array of ``kind``; one matrix, one mask, one copy."""
    n = len(parts[0][1])
    matrix = np.hstack([m for m, _ in parts])
    lengths = sum(lens for _, lens in parts)
    if lengths.min() == matrix.shape[1]:  # every row fills the matrix: no mask
        data = matrix.tobytes()
    else:
        keep = np.empty(matrix.shape, dtype=np.bool_)
        at = 0
        for p, (m, lens) in enumerate(parts):
            width = m.shape[1]
            if lens.min() == width:
                keep[:, at : at + width] = True
            elif p in right:
                np.greater_equal(
                    np.arange(width), (width - lens)[:, None], out=keep[:, at : at + width]
                )
            else:
                np.less(np.arange(width), lens[:, None], out=keep[:, at : at + width])
            at += width
        data = matrix[keep].tobytes()
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(
        kind, n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


class _MemberParts:
    """Every batch index's part of an id, up to the largest met: index ``i``'s ``0x20
    varint(i)`` and ``str(i)``, as ``bytes`` (joined in C) and their lengths (numpy)."""

    def __init__(self) -> None:
        self.size = 0
        self.binary: list[bytes] = []
        self.binary_len: Any = None
        self.text: list[bytes] = []
        self.text_len: Any = None

    def upto(self, largest: int) -> _MemberParts:
        if largest >= self.size:
            size = max(1024, 1 << int(largest).bit_length())
            self.binary = [b"\x20" + encode_varint(i) for i in range(size)]
            self.text = [b"%d" % i for i in range(size)]
            self.binary_len = np.fromiter(map(len, self.binary), dtype=np.int64, count=size)
            self.text_len = np.fromiter(map(len, self.text), dtype=np.int64, count=size)
            self.size = size
        return self


_MEMBERS = _MemberParts()


def message_id_columns(
    ledgers: Any, entries: Any, counts: Any, firsts: Any, partition: int
) -> tuple[Any, Any]:
    """The ``__messageId`` bytes and ``__messageIdString`` text of every row, given per
    entry: ``ledgers``, ``entries``, ``counts`` (rows) and ``firsts`` (the batch index of its
    first row, its members consecutive; -1: the entry is one whole message).

    A batch entry's rows are its part followed by each member's (``prefix + prefix.join(
    members)`` is all of them, joined in C); entries that are whole messages are made per
    row in numpy and Arrow (an unbatched run)."""
    ledgers = np.asarray(ledgers, dtype=np.int64)
    entries = np.asarray(entries, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.int64)
    firsts = np.asarray(firsts, dtype=np.int64)
    n = int(counts.sum())
    if n == 0:
        return pa.array([], pa.binary()), pa.array([], pa.string())
    whole = firsts < 0
    if whole.all():  # an entry a row
        whole_ids = message_id_bytes(ledgers, entries, firsts, partition)
        if ledgers.min() == ledgers.max() >= 0 and entries.min() >= 0:  # one ledger
            text = _packed(
                [
                    _constant(b"%d:" % ledgers[0], n),
                    _decimals(entries),
                    _constant(b":-1", n),
                ],
                pa.string(),
                right=frozenset({1}),
            )
            return whole_ids, text
        text_parts = (
            pc.cast(pa.array(ledgers), pa.string()),
            pc.cast(pa.array(entries), pa.string()),
        )
        return whole_ids, pc.binary_join_element_wise(*text_parts, pa.scalar("-1"), ":")
    largest = int((firsts + counts).max()) - 1
    if largest >= MEMBER_TABLE_MAX or len(counts) * 8 > n:  # huge or small batches: per row
        of_row = np.repeat(np.arange(len(counts)), counts)
        start = np.zeros(len(counts), dtype=np.int64)
        np.cumsum(counts[:-1], out=start[1:])
        batches = np.arange(n, dtype=np.int64) - (start - firsts)[of_row]
        batches[whole[of_row]] = -1
        rows_ledgers, rows_entries = ledgers[of_row], entries[of_row]
        return message_id_bytes(rows_ledgers, rows_entries, batches, partition), (
            pc.binary_join_element_wise(
                *(pc.cast(pa.array(c), pa.string()) for c in (rows_ledgers, rows_entries, batches)),
                ":",
            )
        )
    members = _MEMBERS.upto(largest)
    id_heads = message_id_bytes(ledgers, entries, np.full(len(entries), -1), partition)
    ids: list[bytes] = []
    texts: list[bytes] = []
    id_lens: list[Any] = []
    text_lens: list[Any] = []
    for head, ledger, entry, first, count in zip(
        id_heads.to_pylist(),
        ledgers.tolist(),
        entries.tolist(),
        firsts.tolist(),
        counts.tolist(),
        strict=True,
    ):
        text_head = b"%d:%d:" % (ledger, entry)
        if first < 0:
            ids.append(head)
            texts.append(text_head + b"-1")
            id_lens.append(np.array([len(head)], dtype=np.int64))
            text_lens.append(np.array([len(text_head) + 2], dtype=np.int64))
            continue
        these = slice(first, first + count)
        ids.append(head + head.join(members.binary[these]))
        texts.append(text_head + text_head.join(members.text[these]))
        id_lens.append(members.binary_len[these] + len(head))
        text_lens.append(members.text_len[these] + len(text_head))
    return _joined(ids, id_lens, pa.binary()), _joined(texts, text_lens, pa.string())


def _joined(datas: list[bytes], lengths: list[Any], kind: Any) -> Any:
    """Rows whose bytes are ``datas`` joined, of ``lengths``, as one Arrow array."""
    lens = np.concatenate(lengths)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    data = b"".join(datas)
    if len(data) >= 1 << 31:
        large = pa.large_binary() if kind == pa.binary() else pa.large_string()
        arr = pa.Array.from_buffers(
            large, len(lens), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        return arr.cast(kind)
    return pa.Array.from_buffers(
        kind, len(lens), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


__all__ = ["MEMBER_TABLE_MAX", "message_id_bytes", "message_id_columns"]
