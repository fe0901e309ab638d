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

How the checksums of ``k`` payloads ``m_1 .. m_k`` of ``L`` bytes are verified at once: each
payload is followed by its stored checksum (little-endian) in one ``(k, L + 4)`` matrix and
one ``crc32c`` runs over it all. A CRC-32C followed by its own value leaves a constant
residue (``crc32c(m + crc32c(m).to_bytes(4, "little"))`` is the same for every ``m``), and
``crc32c(a + b) = Z^|b|(crc32c(a)) ^ crc32c(b)`` with ``Z^n`` (appending ``n`` zero bytes)
linear and invertible, so ``k`` rows that each check out give one value that depends on
``k`` and ``L`` only: the CRC of ``k`` copies of any good row (``_all_good``, cached). A
stored checksum is the one whose row gives the residue (a 4-byte CRC is a bijection), and a
corruption confined to one record changes the total exactly when that record's own check
fails (``Z`` is invertible), so the bulk check refuses what record-by-record checks refuse;
on a mismatch the caller finds the record record by record.
"""

from __future__ import annotations

import functools
import struct

import numpy as np
from crc32c import crc32c as _crc32c

HEADER_BYTES = 32
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
    one CRC over the rows each followed by its checksum (the module docstring)."""
    k, length = payloads.shape
    if k == 0:
        return True
    rows = np.empty((k, length + 4), np.uint8)
    rows[:, :length] = payloads
    rows[:, length:].view("<u4")[:, 0] = checksums
    return _crc32c(rows.data) == _all_good(k, length)


@functools.lru_cache(maxsize=256)
def _all_good(k: int, length: int) -> int:
    """The crc32c of ``k`` rows of ``length`` bytes each followed by its own crc32c."""
    zeros = bytes(length)
    return _crc32c((zeros + _crc32c(zeros).to_bytes(4, "little")) * k)


__all__ = ["UNIFORM_MIN", "crc32c_rows_match", "payload_rows", "uniform_records"]
