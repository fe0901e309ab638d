"""Runs of equal-length entry records, checked in bulk: the packed layout's fast path.

Owns: finding, from a position of a buffer of records in the entry header layout
(``wire.ENTRY_HEADER``: ledger id, entry id, lac, crc32c, length, then the payload), how many
consecutive records share one payload length and are one ledger's consecutive entries
(``uniform_records``), and verifying all their crc32c at once (``crc32c_rows_match``).
Most topics' entries are of one size for long stretches (a producer's messages of one
schema, a sink's rows), and walking those records one by one in Python was most of a packed
read's cost on both sides (the bookie's ``read_run``, the reader's ``run_spans``). Equal
lengths make the records the rows of a 2-D array: numpy checks each header column whole.

Must not know: where the buffer came from (a log file, a gRPC response) or what the payloads
hold. Sans-I/O.

How the checksums of ``k`` payloads ``m_1 .. m_k`` of ``L`` bytes are verified at once:
CRC-32C is affine, so with ``R(s, m)`` the CRC register after ``m`` from state ``s``,
``R(0, m_1 .. m_k) = XOR_i Z^((k - i) L)(R(0, m_i))`` where ``Z^n`` (appending ``n`` zero
bytes) is linear and invertible, and ``R(0, m_i) = crc32c(m_i) ^ crc32c(bytes(L))``. The
left side is one ``crc32c`` call over the payloads copied together; the right side folds the
stored checksums pairwise in ``log2 k`` numpy steps, each applying a ``Z`` as four 256-entry
tables. A corruption confined to one record changes the two sides differently exactly when
it changes that record's own crc32c (``Z`` is invertible), so the bulk check refuses what
record-by-record checks refuse; on a mismatch the caller finds the record record by record.
"""

from __future__ import annotations

import functools
import struct

import numpy as np
from crc32c import crc32c as _crc32c

HEADER_BYTES = 32
_MASK = 0xFFFFFFFF
_HEADER_ROW = np.dtype(
    [("ledger", ">i8"), ("entry", ">i8"), ("lac", ">i8"), ("crc", ">u4"), ("length", ">u4")]
)
_LENGTH = struct.Struct(">I")
UNIFORM_MIN = 4
"""Fewer records than this of one length are walked one by one (numpy costs a few µs a
call, a record in Python about half a µs)."""


def uniform_records(
    buf: bytes | memoryview,
    pos: int,
    ledger_id: int,
    first_entry_id: int,
    limit: int,
) -> tuple[int, int, np.ndarray]:
    """``(count, length, headers)``: the records from ``pos`` that are, for at most ``limit``
    of them, ``ledger_id``'s entries ``first_entry_id``, ``first_entry_id + 1``, ... whose
    payloads are all as long as the first's, lying whole in ``buf``; ``headers`` is their
    header columns (a structured view, ``crc`` among them). ``count`` is 0 when fewer than
    ``UNIFORM_MIN`` such records start at ``pos``: the caller walks them one by one."""
    n = len(buf)
    if n - pos < HEADER_BYTES:
        return 0, 0, _EMPTY
    (length,) = _LENGTH.unpack_from(buf, pos + 28)
    stride = HEADER_BYTES + length
    rows = min((n - pos) // stride, limit)
    if rows < UNIFORM_MIN or any(
        _LENGTH.unpack_from(buf, pos + j * stride + 28)[0] != length for j in range(1, UNIFORM_MIN)
    ):
        return 0, 0, _EMPTY
    table = np.ndarray((rows,), _record_dtype(length), buf, pos)["header"]
    count, chunk = 0, _CHUNK
    while count < rows:  # chunks that double: the work is bounded by the run found
        top = min(rows, count + chunk)
        part = table[count:top]
        good = (
            (part["length"] == length)
            & (part["ledger"] == ledger_id)
            & (part["entry"] == np.arange(first_entry_id + count, first_entry_id + top))
        )
        if not good.all():
            count += int(good.argmin())
            break
        count = top
        chunk *= 2
    if count < UNIFORM_MIN:
        return 0, 0, _EMPTY
    return count, length, table[:count]


_CHUNK = 64
_EMPTY = np.zeros(0, _HEADER_ROW)


@functools.lru_cache(maxsize=256)
def _record_dtype(length: int) -> np.dtype:
    return np.dtype([("header", _HEADER_ROW), ("payload", np.uint8, (length,))])


def payload_rows(buf: bytes | memoryview, pos: int, count: int, length: int) -> np.ndarray:
    """The ``count`` payloads of ``length`` bytes of the records from ``pos``, as a
    ``(count, length)`` uint8 view of ``buf`` (not copied)."""
    return np.ndarray((count,), _record_dtype(length), buf, pos)["payload"]


def crc32c_rows_match(payloads: np.ndarray, checksums: np.ndarray) -> bool:
    """Whether every row of ``payloads`` (``(k, L)`` uint8) has the crc32c ``checksums[i]``:
    one CRC over the rows and a fold of the stored values (the module docstring)."""
    k, length = payloads.shape
    if k == 0:
        return True
    together = np.ascontiguousarray(payloads)
    register = ~_crc32c(together.data, _MASK) & _MASK  # R(0, m_1 .. m_k)
    folded = checksums.astype(np.uint32) ^ np.uint32(_crc32c(bytes(length)))
    size = 1 << (k - 1).bit_length()
    if size != k:  # leading zero registers change nothing
        folded = np.concatenate((np.zeros(size - k, np.uint32), folded))
    for tables in _shifts(length, size.bit_length() - 1):
        folded = _apply(tables, folded[0::2]) ^ folded[1::2]
    return int(folded[0]) == register


@functools.lru_cache(maxsize=64)
def _shifts(length: int, levels: int) -> tuple[np.ndarray, ...]:
    """The tables of ``Z^(length * 2**j)`` for ``j`` below ``levels``."""
    images = np.array([~_crc32c(bytes(length), ~(1 << j) & _MASK) & _MASK for j in range(32)])
    images = images.astype(np.uint32)
    out = []
    for _ in range(levels):
        tables = _tables(images)
        out.append(tables)
        images = _apply(tables, images)  # Z^(2n) = Z^n after Z^n
    return tuple(out)


def _tables(images: np.ndarray) -> np.ndarray:
    """The linear map whose image of bit ``j`` is ``images[j]``, as four byte tables."""
    tables = np.zeros((4, 256), np.uint32)
    for p in range(4):
        row = tables[p]
        for j in range(8):
            row[1 << j : 2 << j] = row[: 1 << j] ^ images[8 * p + j]
    return tables


def _apply(tables: np.ndarray, v: np.ndarray) -> np.ndarray:
    return (
        tables[0][v & 0xFF]
        ^ tables[1][(v >> 8) & 0xFF]
        ^ tables[2][(v >> 16) & 0xFF]
        ^ tables[3][v >> 24]
    )


__all__ = ["UNIFORM_MIN", "crc32c_rows_match", "payload_rows", "uniform_records"]
