"""Primitives every codec module shares: protobuf varints, CRC-32C, required-field reports.

Owns: ``encode_varint`` (unrolled for the small values of hot paths), ``crc32c`` (Castagnoli,
as Pulsar checksums frames and entries), ``missing_fields`` (what a proto2 message lacks).
A leaf of the codec: imports nothing else of it, so the framing, entry and batch modules can
all use it without importing each other.
Must not know: frames, entries, commands, I/O.
"""

from __future__ import annotations

import struct

import crc32c as _crc32c
from google.protobuf.message import Message

U32 = struct.Struct(">I")
U32U32 = struct.Struct(">II")
_UINT64_MASK = (1 << 64) - 1

SMALL_VARINTS = [bytes([i]) for i in range(128)]
"""``encode_varint(i)`` for ``0 <= i < 128``: one byte, precomputed."""


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C (Castagnoli); pass ``value`` to continue a running checksum."""
    return int(_crc32c.crc32c(data, value))


def missing_fields(message: Message) -> str:
    """The required fields ``message`` lacks, comma-separated (empty when complete)."""
    errors: list[str] = message.FindInitializationErrors()  # type: ignore[attr-defined]
    return ", ".join(errors)


def encode_varint(value: int) -> bytes:
    """Protobuf varint of ``value``; negative numbers as 64-bit two's complement (10 bytes).
    Unrolled for the small values of hot paths (ids, sequence ids, lengths)."""
    if 0 <= value < 0x80:
        return SMALL_VARINTS[value]
    if 0 < value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if 0 < value < 0x200000:
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    value &= _UINT64_MASK
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


__all__ = ["SMALL_VARINTS", "U32", "U32U32", "crc32c", "encode_varint", "missing_fields"]
