"""The data object of an offloaded ledger: a sequence of blocks (Pulsar's jcloud layout).

Layout (big-endian), one block after the other, no gap::

    block header, 128 bytes
      0  u32  magic 0xFBDBABCB
      4  i64  header length (128)
     12  i64  block length: header + records, in bytes
     20  i64  id of the block's first entry
     28  zeros up to 128
    records, back to back, entry ids consecutive
      0  i32  size of the entry bytes that follow
      4  i64  entry id
     12  entry bytes: u32 crc32c, then the entry as stored on the bookies
         (i64 cumulative ledger length, then the payload); the checksum is the one the writer
         computed over those stored bytes, verified with ``unframe`` on every read

Where Pulsar differs: its entry bytes are the bare BookKeeper payload (no checksum), every
block is padded with 0xFEDCDEAD to a fixed size, and a block is one multipart part. Ours
carries the checksum, is exactly as long as its records (the header says so), and is the unit
a reader fetches (``readBufferSizeInBytes``), several blocks per part. A block holds at least
one record, so an entry larger than the block size gets a block of its own.

Owns: encoding (``BlockBuilder``) and decoding (``parse_block``, ``parse_header``) of blocks.
Pure: no I/O. Must not know: object stores, managed ledgers, topics.
Invariants: a parsed block's entries are exactly ``first_entry_id`` .. ``first_entry_id + n - 1``,
each checksum-verified; any other byte sequence raises ``OffloadCorrupt``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from magnetar.bookie.api import Entry
from magnetar.broker.bookkeeper.entry import LedgerEntry, frame, unframe
from magnetar.broker.bookkeeper.errors import EntryCorrupt
from magnetar.broker.offload.errors import OffloadCorrupt

BLOCK_MAGIC = 0xFBDBABCB
HEADER_BYTES = 128
_HEADER = struct.Struct(">Iqqq")
_RECORD_HEAD = struct.Struct(">iq")
RECORD_HEAD_BYTES = _RECORD_HEAD.size  # 12, as Pulsar's ENTRY_HEADER_SIZE
_CRC = struct.Struct(">I")
CHECKSUM_BYTES = _CRC.size
_FRAME_HEADER_BYTES = 8  # the stored frame's cumulative length (see ``frame``)
_PADDING = bytes(HEADER_BYTES - _HEADER.size)
_crc32c = crc32c.crc32c


@dataclass(frozen=True, slots=True)
class BlockHeader:
    block_bytes: int
    first_entry_id: int


def record_bytes(payload_bytes: int) -> int:
    """Bytes one entry of ``payload_bytes`` takes in a block."""
    return RECORD_HEAD_BYTES + CHECKSUM_BYTES + _FRAME_HEADER_BYTES + payload_bytes


def encode_header(block_bytes: int, first_entry_id: int) -> bytes:
    return _HEADER.pack(BLOCK_MAGIC, HEADER_BYTES, block_bytes, first_entry_id) + _PADDING


def parse_header(data: bytes | memoryview) -> BlockHeader:
    if len(data) < HEADER_BYTES:
        raise OffloadCorrupt(f"block header cut short: {len(data)} of {HEADER_BYTES} bytes")
    magic, header_bytes, block_bytes, first = _HEADER.unpack_from(data)
    if magic != BLOCK_MAGIC:
        raise OffloadCorrupt(f"block magic {magic:#x}, expected {BLOCK_MAGIC:#x}")
    if header_bytes != HEADER_BYTES or block_bytes < HEADER_BYTES or first < 0:
        raise OffloadCorrupt(
            f"block header: header length {header_bytes}, block length {block_bytes}, "
            f"first entry {first}"
        )
    return BlockHeader(block_bytes, first)


class BlockBuilder:
    """Entries of one block, appended in id order until the block is full.

    ``add`` returns False (and keeps nothing) when the entry would take the block past
    ``target_bytes``, unless the block is still empty: a block always takes its first entry.
    """

    __slots__ = ("_next_id", "_parts", "_size", "checksums", "first_entry_id", "target_bytes")

    def __init__(self, first_entry_id: int, target_bytes: int) -> None:
        if target_bytes <= HEADER_BYTES:
            raise ValueError(
                f"block size {target_bytes} must exceed the {HEADER_BYTES}-byte header"
            )
        self.first_entry_id = first_entry_id
        self.target_bytes = target_bytes
        self._next_id = first_entry_id
        self._parts: list[bytes] = []
        self._size = HEADER_BYTES
        self.checksums: list[int] = []

    @property
    def entry_count(self) -> int:
        return self._next_id - self.first_entry_id

    @property
    def size(self) -> int:
        return self._size

    def add(self, entry: LedgerEntry) -> bool:
        if entry.entry_id != self._next_id:
            raise ValueError(f"entry {entry.entry_id} added where {self._next_id} was due")
        need = record_bytes(len(entry.payload))
        if self._parts and self._size + need > self.target_bytes:
            return False
        stored = frame(entry.cumulative_length, entry.payload)
        checksum = _crc32c(stored)
        self._parts.append(
            _RECORD_HEAD.pack(CHECKSUM_BYTES + len(stored), entry.entry_id)
            + _CRC.pack(checksum)
            + stored
        )
        self.checksums.append(checksum)
        self._size += need
        self._next_id += 1
        return True

    def build(self) -> bytes:
        if not self._parts:
            raise ValueError("an empty block is never written")
        return b"".join([encode_header(self._size, self.first_entry_id), *self._parts])


@dataclass(frozen=True, slots=True)
class ParsedBlock:
    first_entry_id: int
    entries: list[LedgerEntry]
    checksums: list[int]
    block_bytes: int

    @property
    def last_entry_id(self) -> int:
        return self.first_entry_id + len(self.entries) - 1


def parse_block(data: bytes | memoryview, ledger_id: int, expected_first: int) -> ParsedBlock:
    """Decode one whole block and verify every entry's checksum (``unframe``)."""
    view = memoryview(data)
    header = parse_header(view)
    if header.block_bytes != len(view):
        raise OffloadCorrupt(f"block says {header.block_bytes} bytes, {len(view)} were read")
    if header.first_entry_id != expected_first:
        raise OffloadCorrupt(
            f"block starts at entry {header.first_entry_id}, the index says {expected_first}"
        )
    entries: list[LedgerEntry] = []
    checksums: list[int] = []
    pos = HEADER_BYTES
    end = len(view)
    next_id = expected_first
    while pos < end:
        if end - pos < RECORD_HEAD_BYTES:
            raise OffloadCorrupt(f"record header cut short at block offset {pos}")
        size, entry_id = _RECORD_HEAD.unpack_from(view, pos)
        body = pos + RECORD_HEAD_BYTES
        if size < CHECKSUM_BYTES + _FRAME_HEADER_BYTES or body + size > end:
            raise OffloadCorrupt(f"record of {size} bytes at block offset {pos} does not fit")
        if entry_id != next_id:
            raise OffloadCorrupt(f"entry {entry_id} found where {next_id} was due")
        (checksum,) = _CRC.unpack_from(view, body)
        stored = bytes(view[body + CHECKSUM_BYTES : body + size])
        try:
            entries.append(unframe(Entry(ledger_id, entry_id, -1, checksum, stored)))
        except EntryCorrupt as exc:
            raise OffloadCorrupt(f"ledger {ledger_id} entry {entry_id}: checksum mismatch") from exc
        checksums.append(checksum)
        pos = body + size
        next_id += 1
    if not entries:
        raise OffloadCorrupt(f"block at entry {expected_first} holds no entry")
    return ParsedBlock(expected_first, entries, checksums, len(view))


__all__ = [
    "BLOCK_MAGIC",
    "HEADER_BYTES",
    "RECORD_HEAD_BYTES",
    "BlockBuilder",
    "BlockHeader",
    "ParsedBlock",
    "encode_header",
    "parse_block",
    "parse_header",
    "record_bytes",
]
