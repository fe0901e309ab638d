"""The packed entry layout of ``AddBatch.packed`` and ``ReadResponse.packed``: encoding and
parsing.

Owns: the byte layout below and the pure functions over it (``pack_entries``,
``parse_packed``, ``parse_batch_header`` for adds; ``run_spans`` for packed reads, which
verifies every entry of a read in one pass). Sans-I/O: no gRPC, no asyncio.

``AddBatch.packed`` is ``count`` entries back to back, each a 32-byte header followed by its
payload::

    offset  size  field
    0       8     ledger id          big-endian, signed (a negative id is refused per entry)
    8       8     entry id           big-endian, signed (idem)
    16      8     lac                big-endian, signed (-1 = none yet)
    24      4     crc32c(payload)    big-endian
    28      4     payload length     big-endian
    32      n     payload

For non-negative ids the header is byte for byte the journal's and the entry log's entry header
(``journal.ENTRY_HEADER``), so the bookie journals a batch of valid entries as it came off the
wire: the bytes are parsed once (one ``unpack_from`` and one crc32c per entry) and never
re-encoded. Why not protobuf per entry: building and parsing one ``AddEntry`` message per entry
cost about 10 us on each side, the largest share of an add's CPU.

Invariant: ``parse_packed`` either returns one ``PackedEntry`` per header, their payload ranges
tiling the buffer exactly, or raises ``MalformedBatch`` (a truncated header, a length past the
end, an empty buffer): a malformed batch is refused whole, never half-applied.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from crc32c import crc32c as _crc32c

from magnetar.bookie.api import EntryToAdd
from magnetar.bookie.records import UNIFORM_MIN, crc32c_rows_match, payload_rows, uniform_records

ENTRY_HEADER = struct.Struct(">qqqII")
ENTRY_HEADER_LEN = ENTRY_HEADER.size  # 32
PAYLOAD_BYTES_MAX = 0xFFFFFFFF

_pack = ENTRY_HEADER.pack
_READ_HEADER = struct.Struct(">qq8xII")
"""``ENTRY_HEADER`` without the lac (a reader of a packed read does not use it)."""


class MalformedBatch(ValueError):
    """``packed`` does not hold whole entries (the peer broke the layout)."""


class PackedEntry(NamedTuple):
    ledger_id: int
    entry_id: int
    lac: int
    crc32c: int
    payload: bytes


class BatchHeader(NamedTuple):
    """The fields of one raw ``AddBatch`` message; ``packed`` is ``data[start:end]``."""

    batch_id: int
    master_key: bytes
    recovery: bool
    packed_start: int
    packed_end: int


def _varint_at(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    shift = 0
    n = len(data)
    while True:
        if pos >= n or shift > 63:
            raise MalformedBatch(f"bad varint at offset {pos}")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def parse_batch_header(data: bytes) -> BatchHeader:
    """Read a raw ``AddBatch`` message's fields without copying ``packed``: the bookie takes
    Add messages as bytes (no protobuf parse, which would copy every payload twice: into the
    message and out of it). Protobuf rules: fields in any order, the last occurrence of a
    singular field wins, unknown fields are skipped. Raises ``MalformedBatch``."""
    batch_id = 0
    key = b""
    recovery = False
    start = end = 0
    pos = 0
    n = len(data)
    while pos < n:
        tag, pos = _varint_at(data, pos)
        field, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, pos = _varint_at(data, pos)
            if field == 1:
                batch_id = value
            elif field == 5:
                recovery = value != 0
        elif wire_type == 2:
            length, pos = _varint_at(data, pos)
            if pos + length > n:
                raise MalformedBatch(f"field {field} runs past the end of the message")
            if field == 2:
                key = data[pos : pos + length]
            elif field == 4:
                start, end = pos, pos + length
            pos += length
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        else:
            raise MalformedBatch(f"unsupported wire type {wire_type} (field {field})")
        if field == 0 or pos > n:
            raise MalformedBatch("truncated or invalid message")
    return BatchHeader(batch_id, bytes(key), recovery, start, end)


def pack_entries(ledger_id: int, entries: Sequence[EntryToAdd]) -> tuple[list[bytes], int]:
    """(parts, total bytes): header, payload, header, payload, ... of ``entries`` of one
    ledger. The parts are joined once, with the message header, when the message is built.
    Raises ``struct.error`` for an id or lac outside int64 or a payload over 4 GiB."""
    parts: list[bytes] = []
    append = parts.append
    pack = _pack
    nbytes = 0
    for e in entries:
        payload = e.payload
        n = len(payload)
        append(pack(ledger_id, e.entry_id, e.lac, e.crc32c, n))
        append(payload)
        nbytes += n
    return parts, nbytes + ENTRY_HEADER_LEN * len(entries)


def parse_packed(packed: bytes) -> list[PackedEntry]:
    """Every entry of ``packed`` (payloads copied out as ``bytes``), or ``MalformedBatch``.
    The bookie's engine walks the buffer itself (``core.Bookie.submit_packed``); this is the
    reference parser, used by storages without that fast path and by tests."""
    out: list[PackedEntry] = []
    n = len(packed)
    if n == 0:
        raise MalformedBatch("empty batch")
    pos = 0
    unpack = ENTRY_HEADER.unpack_from
    while pos < n:
        if n - pos < ENTRY_HEADER_LEN:
            raise MalformedBatch(f"truncated entry header at offset {pos}")
        lid, eid, lac, crc, length = unpack(packed, pos)
        start = pos + ENTRY_HEADER_LEN
        pos = start + length
        if pos > n:
            raise MalformedBatch(f"entry at offset {start - ENTRY_HEADER_LEN} runs past the end")
        out.append(PackedEntry(lid, eid, lac, crc, packed[start:pos]))
    return out


def run_spans(
    packed: bytes, ledger_id: int, first_entry_id: int
) -> tuple[Sequence[int], Sequence[int]]:
    """(starts, ends) of the payloads of a packed read of ``ledger_id`` from ``first_entry_id``:
    entry ``first_entry_id + i`` is ``packed[starts[i]:ends[i]]``. One pass checks the layout,
    that the entries are that ledger's, consecutive from ``first_entry_id``, and each
    payload's crc32c; anything else raises ``MalformedBatch`` saying what (a reader takes
    the entries of another replica then). Stretches of records of one length are checked in
    bulk (``records``); when the whole read is one such stretch, starts and ends are
    ``range``s (a reader's own fast path for entries of one size), else lists."""
    n = len(packed)
    if n == 0:
        raise MalformedBatch("empty packed read")
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    expect = first_entry_id
    while pos < n:
        count, length, headers = uniform_records(packed, pos, ledger_id, expect, n)
        if count:
            rows = payload_rows(packed, pos, count, length)
            if not crc32c_rows_match(rows, headers["crc"]):
                _walk(packed, pos, pos + count * (ENTRY_HEADER_LEN + length), ledger_id, expect)
            stride = ENTRY_HEADER_LEN + length
            stop = pos + count * stride
            these = range(pos + ENTRY_HEADER_LEN, stop + ENTRY_HEADER_LEN, stride)
            their_ends = range(pos + stride, stop + stride, stride)
            if pos == 0 and stop == n:
                return these, their_ends
            starts.extend(these)
            ends.extend(their_ends)
            pos = stop
            expect += count
            continue
        stop = _next_uniform(packed, pos)
        got_starts, got_ends = _walk(packed, pos, stop, ledger_id, expect)
        starts += got_starts
        ends += got_ends
        expect += len(got_starts)
        pos = got_ends[-1]
    return starts, ends


def _next_uniform(packed: bytes, pos: int) -> int:
    """Where the record-by-record walk from ``pos`` stops to try the bulk path again: after
    ``UNIFORM_MIN`` records, or at the end."""
    n = len(packed)
    for _ in range(UNIFORM_MIN):
        if pos + ENTRY_HEADER_LEN > n:
            return n
        pos += ENTRY_HEADER_LEN + _READ_HEADER.unpack_from(packed, pos)[3]
    return min(pos, n)


def _walk(
    packed: bytes, pos: int, stop: int, ledger_id: int, expect: int
) -> tuple[list[int], list[int]]:
    """The records from ``pos`` up to ``stop`` (a record boundary, or the end), one by one."""
    starts: list[int] = []
    ends: list[int] = []
    add_start = starts.append
    add_end = ends.append
    unpack = _READ_HEADER.unpack_from
    crc = _crc32c
    n = len(packed)
    try:
        while pos < stop:
            lid, eid, checksum, length = unpack(packed, pos)
            start = pos + ENTRY_HEADER_LEN
            pos = start + length
            # a bytes slice: cheaper than a memoryview's for entries of a few hundred bytes
            if eid != expect or lid != ledger_id or pos > n or crc(packed[start:pos]) != checksum:
                raise MalformedBatch(_run_error(start, (lid, eid), (ledger_id, expect)))
            expect += 1
            add_start(start)
            add_end(pos)
    except struct.error:
        raise MalformedBatch(f"truncated entry header at offset {pos}") from None
    return starts, ends


def _run_error(start: int, got: tuple[int, int], wanted: tuple[int, int]) -> str:
    if got != wanted:
        return f"entry {got[0]}:{got[1]} where {wanted[0]}:{wanted[1]} was expected"
    return f"entry {got[0]}:{got[1]} at offset {start} runs past the end or fails its checksum"


__all__ = [
    "ENTRY_HEADER",
    "ENTRY_HEADER_LEN",
    "BatchHeader",
    "MalformedBatch",
    "PackedEntry",
    "pack_entries",
    "parse_batch_header",
    "parse_packed",
    "run_spans",
]
