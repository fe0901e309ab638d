"""The index object of an offloaded ledger: which block holds which entries, plus the ledger's
metadata (Pulsar's jcloud ``OffloadIndexBlock`` layout).

Layout (big-endian)::

     0  u32  magic 0xDE47DE47
     4  i32  index length: the whole object, in bytes
     8  i64  data object length
    16  i64  data block header length (128)
    24  i32  block count N
    28  i32  ledger metadata length M
    32  M bytes of ledger metadata
        N x (i64 first entry id of the block, i32 part number, i64 block offset in the data object)
        u32  crc32c of every byte before it

Where Pulsar differs: its ledger metadata is BookKeeper's ``LedgerMetadataFormat`` protobuf and
it has no trailing checksum. Ours is UTF-8 JSON (``LedgerSummary``: the ledger id, last entry
id, length, entry count, the managed ledger's extra metadata, the format version) and the
whole index is checksummed, so a damaged index is detected instead of misdirecting reads.
The part number is the multipart part holding the block's first byte (1-based), as Pulsar's.

Owns: ``OffloadIndex`` (encode, decode, find the block of an entry). Pure: no I/O.
Must not know: object stores, managed ledgers, topics.
Invariants: blocks are in entry order, the first starts at entry 0, each starts where the
previous ended, the last ends at the data object's length; decode checks all of it.
"""

from __future__ import annotations

import bisect
import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import crc32c

from magnetar.broker.offload.blocks import HEADER_BYTES
from magnetar.broker.offload.errors import OffloadCorrupt

INDEX_MAGIC = 0xDE47DE47
FORMAT_VERSION = 1
_HEAD = struct.Struct(">Iiqqii")
_BLOCK = struct.Struct(">qiq")
_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class BlockRef:
    """Where one block lies: its first entry, the multipart part it starts in, its bytes."""

    first_entry_id: int
    part_number: int
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    """The ledger as it was offloaded (the index's metadata section)."""

    ledger_id: int
    last_entry_id: int
    length: int
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def entry_count(self) -> int:
        return self.last_entry_id + 1

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "format": FORMAT_VERSION,
                "checksum": "crc32c",
                "ledgerId": self.ledger_id,
                "lastEntryId": self.last_entry_id,
                "length": self.length,
                "entries": self.entry_count,
                "state": "CLOSED",
                "extra": dict(self.extra),
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> LedgerSummary:
        try:
            doc = json.loads(data)
            if doc["format"] != FORMAT_VERSION:
                raise OffloadCorrupt(f"index format {doc['format']}, this reader knows 1")
            extra = doc.get("extra", {})
            if not isinstance(extra, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in extra.items()
            ):
                raise OffloadCorrupt("index metadata: extra must map strings to strings")
            return cls(int(doc["ledgerId"]), int(doc["lastEntryId"]), int(doc["length"]), extra)
        except (ValueError, KeyError, TypeError) as exc:
            raise OffloadCorrupt(f"index metadata does not parse: {exc}") from exc


@dataclass(frozen=True, slots=True)
class OffloadIndex:
    ledger: LedgerSummary
    data_object_bytes: int
    blocks: tuple[BlockRef, ...]
    _firsts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_firsts", tuple(b.first_entry_id for b in self.blocks))

    @property
    def ledger_id(self) -> int:
        return self.ledger.ledger_id

    @property
    def last_entry_id(self) -> int:
        return self.ledger.last_entry_id

    def block_of(self, entry_id: int) -> int:
        """Position in ``blocks`` of the block holding ``entry_id`` (0 <= id <= last)."""
        if not 0 <= entry_id <= self.ledger.last_entry_id:
            raise IndexError(f"entry {entry_id} outside 0..{self.ledger.last_entry_id}")
        return bisect.bisect_right(self._firsts, entry_id) - 1

    def last_entry_of(self, block: int) -> int:
        if block + 1 < len(self.blocks):
            return self.blocks[block + 1].first_entry_id - 1
        return self.ledger.last_entry_id

    def encode(self) -> bytes:
        meta = self.ledger.to_json()
        length = _HEAD.size + len(meta) + _BLOCK.size * len(self.blocks) + _CRC.size
        out = bytearray(
            _HEAD.pack(
                INDEX_MAGIC,
                length,
                self.data_object_bytes,
                HEADER_BYTES,
                len(self.blocks),
                len(meta),
            )
        )
        out += meta
        for b in self.blocks:
            out += _BLOCK.pack(b.first_entry_id, b.part_number, b.offset)
        out += _CRC.pack(crc32c.crc32c(out))
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> OffloadIndex:
        if len(data) < _HEAD.size + _CRC.size:
            raise OffloadCorrupt(f"index of {len(data)} bytes is too short")
        (stored_crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
        if crc32c.crc32c(data[: -_CRC.size]) != stored_crc:
            raise OffloadCorrupt("index checksum mismatch")
        magic, length, data_bytes, header_bytes, count, meta_len = _HEAD.unpack_from(data)
        if magic != INDEX_MAGIC:
            raise OffloadCorrupt(f"index magic {magic:#x}, expected {INDEX_MAGIC:#x}")
        if length != len(data) or header_bytes != HEADER_BYTES or count < 0 or meta_len < 0:
            raise OffloadCorrupt(
                f"index header: length {length} of {len(data)}, header {header_bytes}, "
                f"{count} blocks, {meta_len} metadata bytes"
            )
        if _HEAD.size + meta_len + count * _BLOCK.size + _CRC.size != len(data):
            raise OffloadCorrupt("index length does not match its block count")
        ledger = LedgerSummary.from_json(data[_HEAD.size : _HEAD.size + meta_len])
        pos = _HEAD.size + meta_len
        starts = []
        for _ in range(count):
            starts.append(_BLOCK.unpack_from(data, pos))
            pos += _BLOCK.size
        blocks = tuple(
            BlockRef(
                first, part, offset, (starts[i + 1][2] if i + 1 < count else data_bytes) - offset
            )
            for i, (first, part, offset) in enumerate(starts)
        )
        index = cls(ledger, data_bytes, blocks)
        index.check_invariants()
        return index

    def check_invariants(self) -> None:
        """Raises ``OffloadCorrupt`` unless the blocks tile the data object and the ledger."""
        ledger = self.ledger
        if ledger.last_entry_id < -1 or ledger.length < 0:
            raise OffloadCorrupt(f"index metadata: last entry {ledger.last_entry_id}")
        if not self.blocks:
            if ledger.last_entry_id != -1 or self.data_object_bytes != 0:
                raise OffloadCorrupt("index has no block but the ledger has entries")
            return
        offset = 0
        previous_first = -1
        for b in self.blocks:
            if b.offset != offset or b.length <= HEADER_BYTES or b.part_number < 1:
                raise OffloadCorrupt(f"index block at {b.offset} (expected {offset}), {b.length} B")
            if b.first_entry_id <= previous_first:
                raise OffloadCorrupt(f"index blocks out of order at entry {b.first_entry_id}")
            previous_first = b.first_entry_id
            offset += b.length
        if self.blocks[0].first_entry_id != 0 or offset != self.data_object_bytes:
            raise OffloadCorrupt("index blocks do not cover the data object from entry 0")
        if previous_first > ledger.last_entry_id:
            raise OffloadCorrupt("index block starts past the ledger's last entry")


def build_index(
    ledger: LedgerSummary,
    starts: Sequence[tuple[int, int]],
    data_object_bytes: int,
    part_bytes: int,
) -> OffloadIndex:
    """The index of blocks starting at (first entry id, offset) pairs, in order."""
    blocks = tuple(
        BlockRef(
            first,
            offset // part_bytes + 1,
            offset,
            (starts[i + 1][1] if i + 1 < len(starts) else data_object_bytes) - offset,
        )
        for i, (first, offset) in enumerate(starts)
    )
    index = OffloadIndex(ledger, data_object_bytes, blocks)
    index.check_invariants()
    return index


__all__ = [
    "FORMAT_VERSION",
    "INDEX_MAGIC",
    "BlockRef",
    "LedgerSummary",
    "OffloadIndex",
    "build_index",
]
