"""Fast encoders for the broker's hot-path frames, and entry-metadata helpers.

Owns: hand-rolled protobuf encoding of ``MESSAGE`` (CommandMessage + the stored entry bytes
unchanged) and ``SEND_RECEIPT`` frames, the generic ``frame(BaseCommand)`` helper, and
reading ``MessageMetadata`` out of a stored entry (the bytes that followed the SEND command:
optional magic 0x0e01 + CRC32-C, metadata size, metadata, payload). Byte layouts are those
of ``client/protocol`` (pulsar-protocol.md §1.3); the encoders exist because these two frames
are written once per entry/receipt and must not build protobuf objects.
Must not know: topics, consumers, sockets.
"""

from __future__ import annotations

import struct

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

MAGIC_CRC32C = b"\x0e\x01"
_U32 = struct.Struct(">I")
_U64_MASK = (1 << 64) - 1


_SMALL = [bytes((v,)) if v < 0x80 else bytes(((v & 0x7F) | 0x80, v >> 7)) for v in range(16384)]


def varint(value: int) -> bytes:
    if 0 <= value < 16384:
        return _SMALL[value]
    value &= _U64_MASK
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def to_signed64(value: int) -> int:
    """uint64 wire value to the client's int64 (2**64-1 -> -1)."""
    return value - (1 << 64) if value >= (1 << 63) else value


def _message_id(ledger_id: int, entry_id: int, partition: int | None) -> bytes:
    body = b"\x08" + varint(ledger_id) + b"\x10" + varint(entry_id)
    if partition is not None:
        body += b"\x18" + varint(partition)
    return body


def frame(cmd: pb.BaseCommand) -> bytes:
    body = cmd.SerializeToString()
    return _U32.pack(len(body) + 4) + _U32.pack(len(body)) + body


def message_frame(  # noqa: PLR0917 - hot path, positional on purpose
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    data: bytes,
    redelivery_count: int = 0,
    ack_set: list[int] | None = None,
) -> bytes:
    """A MESSAGE frame carrying stored entry bytes ``data`` unchanged."""
    mid = _message_id(ledger_id, entry_id, partition)
    inner = b"\x08" + varint(consumer_id) + b"\x12" + varint(len(mid)) + mid
    if redelivery_count > 0:
        inner += b"\x18" + varint(redelivery_count)
    if ack_set:
        for word in ack_set:
            inner += b"\x20" + varint(word)
    cmd = b"\x08\x09\x4a" + varint(len(inner)) + inner
    return _U32.pack(4 + len(cmd) + len(data)) + _U32.pack(len(cmd)) + cmd + data


def send_receipt_frame(
    producer_id: int, sequence_id: int, highest_sequence_id: int, ledger_id: int, entry_id: int
) -> bytes:
    mid = _message_id(ledger_id, entry_id, None)
    inner = (
        b"\x08"
        + varint(producer_id)
        + b"\x10"
        + varint(sequence_id)
        + b"\x1a"
        + varint(len(mid))
        + mid
        + b"\x20"
        + varint(highest_sequence_id)
    )
    cmd = b"\x08\x07\x3a" + varint(len(inner)) + inner
    return _U32.pack(4 + len(cmd)) + _U32.pack(len(cmd)) + cmd


class BadEntry(ValueError):
    pass


def metadata_bytes(data: bytes | memoryview) -> bytes:
    """The serialized MessageMetadata of a stored entry (SEND tail)."""
    off = 6 if bytes(data[:2]) == MAGIC_CRC32C else 0
    if len(data) < off + 4:
        raise BadEntry("entry too short")
    (size,) = _U32.unpack_from(data, off)
    if size > len(data) - off - 4:
        raise BadEntry("metadata size exceeds entry")
    return bytes(data[off + 4 : off + 4 + size])


def parse_metadata(data: bytes | memoryview) -> pb.MessageMetadata:
    md = pb.MessageMetadata()
    md.ParseFromString(metadata_bytes(data))
    return md


def num_messages(data: bytes) -> int:
    md = parse_metadata(data)
    return md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1


__all__ = [
    "MAGIC_CRC32C",
    "BadEntry",
    "frame",
    "message_frame",
    "metadata_bytes",
    "num_messages",
    "parse_metadata",
    "send_receipt_frame",
    "to_signed64",
    "varint",
]
