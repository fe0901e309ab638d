"""Byte encodings of the delayed-delivery index: sealed chunks and the snapshot.

Owns: ``encode_chunk`` / ``decode_chunk`` and ``Snapshot`` (``to_bytes`` / ``from_bytes``).
Every stored record starts with one type byte so a reader can tell them apart in the index
ledger: ``C`` (a chunk) or ``S`` (a snapshot).

Chunk layout (little-endian)::

    b"C" | u8 version=1 | u32 count | i64 base_at_ms | zlib(
        i64[count] at deltas (first from base_at_ms, then from the previous record)
        i64[count] ledger ids
        i64[count] entry ids )

Records of a chunk are sorted by (deliver_at_ms, ledger_id, entry_id); deltas are >= 0 and
mostly tiny, so zlib shrinks a chunk of 4,096 records from 96 KiB to a few KiB.
Snapshot: ``b"S" + JSON`` (a few hundred bytes per run): which runs exist, their chunks'
positions and time ranges, the highest position covered by sealed runs, and when it was
written. Must not know: storage, clocks, dispatch.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from array import array
from dataclasses import dataclass, field

from magnetar.broker.ledger.position import Position

CHUNK = b"C"
SNAPSHOT = b"S"
_HEADER = struct.Struct("<BIq")
_VERSION = 1


class CorruptIndexRecord(ValueError):
    """A stored index record does not decode (never guessed around: the index fails)."""


def _to_le(a: array[int]) -> bytes:
    if sys.byteorder != "little":  # pragma: no cover - every supported platform is little
        a = array("q", a)
        a.byteswap()
    return a.tobytes()


def _from_le(data: bytes) -> array[int]:
    a = array("q")
    a.frombytes(data)
    if sys.byteorder != "little":  # pragma: no cover
        a.byteswap()
    return a


def encode_chunk(at_ms: array[int], ledger_ids: array[int], entry_ids: array[int]) -> bytes:
    """Encode sorted records (three parallel arrays)."""
    n = len(at_ms)
    assert len(ledger_ids) == n == len(entry_ids)
    base = at_ms[0] if n else 0
    deltas = array("q", bytes(8 * n))
    prev = base
    for i in range(n):
        at = at_ms[i]
        assert at >= prev, "chunk records must be sorted by deliver_at"
        deltas[i] = at - prev
        prev = at
    body = zlib.compress(_to_le(deltas) + _to_le(ledger_ids) + _to_le(entry_ids), 1)
    return CHUNK + _HEADER.pack(_VERSION, n, base) + body


def decode_chunk(data: bytes) -> tuple[array[int], array[int], array[int]]:
    """The three arrays (deliver_at_ms, ledger ids, entry ids) of an encoded chunk."""
    if data[:1] != CHUNK or len(data) < 1 + _HEADER.size:
        raise CorruptIndexRecord("not a delayed-index chunk")
    version, n, base = _HEADER.unpack_from(data, 1)
    if version != _VERSION:
        raise CorruptIndexRecord(f"unknown chunk version {version}")
    try:
        body = zlib.decompress(data[1 + _HEADER.size :])
    except zlib.error as exc:
        raise CorruptIndexRecord(f"chunk body: {exc}") from None
    if len(body) != 24 * n:
        raise CorruptIndexRecord(f"chunk body is {len(body)} bytes for {n} records")
    at = _from_le(body[: 8 * n])
    acc = base
    for i in range(n):
        acc += at[i]
        at[i] = acc
    return at, _from_le(body[8 * n : 16 * n]), _from_le(body[16 * n :])


@dataclass(frozen=True, slots=True)
class ChunkRef:
    """Where a sealed chunk is stored and what it covers."""

    position: Position
    first_at_ms: int
    last_at_ms: int
    count: int


@dataclass(frozen=True, slots=True)
class RunRef:
    """A sealed run: records sorted by due time, split into chunks contiguous in time."""

    run_id: int
    chunks: tuple[ChunkRef, ...]

    @property
    def count(self) -> int:
        return sum(c.count for c in self.chunks)

    @property
    def last_at_ms(self) -> int:
        return self.chunks[-1].last_at_ms if self.chunks else 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    written_at_ms: int
    scanned_through: Position | None
    """Every entry at or before this position whose deliver_at was in the future when it was
    added is in one of ``runs`` (or was delivered and its run dropped once all were due)."""
    runs: tuple[RunRef, ...] = field(default=())
    next_run_id: int = 0

    def to_bytes(self) -> bytes:
        doc = {
            "v": 1,
            "written_at": self.written_at_ms,
            "scanned_through": str(self.scanned_through) if self.scanned_through else None,
            "next_run": self.next_run_id,
            "runs": [
                {
                    "id": r.run_id,
                    "chunks": [
                        [
                            c.position.ledger_id,
                            c.position.entry_id,
                            c.first_at_ms,
                            c.last_at_ms,
                            c.count,
                        ]
                        for c in r.chunks
                    ],
                }
                for r in self.runs
            ],
        }
        return SNAPSHOT + json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Snapshot:
        if data[:1] != SNAPSHOT:
            raise CorruptIndexRecord("not a delayed-index snapshot")
        try:
            doc = json.loads(data[1:])
            st = doc["scanned_through"]
            runs = tuple(
                RunRef(
                    int(r["id"]),
                    tuple(
                        ChunkRef(Position(int(c[0]), int(c[1])), int(c[2]), int(c[3]), int(c[4]))
                        for c in r["chunks"]
                    ),
                )
                for r in doc["runs"]
            )
            return cls(
                int(doc["written_at"]),
                Position.parse(st) if st else None,
                runs,
                int(doc.get("next_run", 0)),
            )
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise CorruptIndexRecord(f"snapshot: {exc!r}") from None


__all__ = [
    "CHUNK",
    "SNAPSHOT",
    "ChunkRef",
    "CorruptIndexRecord",
    "RunRef",
    "Snapshot",
    "decode_chunk",
    "encode_chunk",
]
