"""The broker's hot-path frames and entry-metadata helpers, over the protocol codec.

Owns: nothing of the wire format itself (``magnetar.client.protocol`` does): it adapts the
codec's protobuf-free encoders of ``MESSAGE`` (CommandMessage + the stored entry bytes
unchanged) and ``SEND_RECEIPT`` to the broker's positional call sites, frames other
commands, and reads ``MessageMetadata`` out of a stored entry (the SEND tail). The per-message
frames of the hot path (``message_frames``, ``send_receipt_frames``) are built here without
protobuf objects, the parts shared by a run (consumer or producer id, ledger id) encoded once;
tests check they equal the codec's bytes.
Must not know: topics, consumers, sockets.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from magnetar.client.protocol import (
    MAGIC_CRC32C,
    encode_message_frame,
    encode_varint,
    parse_entry,
    to_int64,
)
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

MAGIC_CRC32C_BYTES = MAGIC_CRC32C.to_bytes(2, "big")
_U32U32 = struct.Struct(">II")
_SMALL = [bytes((i,)) for i in range(128)]
_PARTITION_NONE = b"\x18" + b"\xff" * 9 + b"\x01"  # MessageIdData.partition = -1


varint = encode_varint
"""Protobuf varint (the codec's, unrolled for small values)."""


class BadEntry(ValueError):
    pass


def to_signed64(value: int) -> int:
    """uint64 wire value to the client's int64 (2**64-1 -> -1)."""
    return to_int64(value)


def frame(cmd: pb.BaseCommand) -> bytes:
    body = cmd.SerializeToString()
    return (len(body) + 4).to_bytes(4, "big") + len(body).to_bytes(4, "big") + body


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
    return encode_message_frame(
        consumer_id,
        ledger_id,
        entry_id,
        data,
        partition=partition,
        redelivery_count=redelivery_count,
        ack_set=ack_set or (),
    )


def message_frames(
    consumer_id: int,
    partition: int,
    messages: Iterable[tuple[object, bytes, int, list[int] | None]],
) -> list[bytes]:
    """MESSAGE frames for ``messages`` (``OutMessage``-shaped: position, data, redelivery
    count, ack set) to one consumer: the same bytes as ``message_frame`` for each (a test
    checks it), with the parts shared by every frame (consumer id, partition, the ledger id
    of a run) encoded once."""
    cid_part = b"\x08" + varint(consumer_id) + b"\x12"
    part = _PARTITION_NONE if partition == -1 else b"\x18" + varint(partition)
    pack = _U32U32.pack
    last_ledger: int | None = None
    ledger_part = b""
    out: list[bytes] = []
    append = out.append
    for pos, data, redelivery_count, ack_set in messages:
        ledger_id = pos.ledger_id  # type: ignore[attr-defined]
        if ledger_id != last_ledger:
            last_ledger = ledger_id
            ledger_part = b"\x08" + varint(ledger_id) + b"\x10"
        msg_id = ledger_part + varint(pos.entry_id) + part  # type: ignore[attr-defined]
        body = cid_part + _SMALL[len(msg_id)] + msg_id  # a MessageIdData is < 128 bytes
        if redelivery_count > 0:
            body += b"\x18" + varint(redelivery_count)
        if ack_set:
            for word in ack_set:
                body += b" " + varint(word)  # field 4 varint: tag 0x20
        n = len(body)
        # type=9; field 9 bytes: tag 0x4a
        cmd = b"\x08\x09J" + (_SMALL[n] if n < 0x80 else varint(n)) + body
        append(pack(4 + len(cmd) + len(data), len(cmd)) + cmd + data)
    return out


def send_receipt_frame(
    producer_id: int, sequence_id: int, highest_sequence_id: int, ledger_id: int, entry_id: int
) -> bytes:
    """A SEND_RECEIPT frame without protobuf objects: the bytes of ``BaseCommand{type:
    SEND_RECEIPT, send_receipt: {producer_id, sequence_id, message_id{ledgerId, entryId},
    highest_sequence_id}}`` (a test checks the equivalence)."""
    msg_id = b"\x08" + varint(ledger_id) + b"\x10" + varint(entry_id)
    body = (
        b"\x08"
        + varint(producer_id)
        + b"\x10"
        + varint(sequence_id)
        + b"\x1a"
        + _SMALL[len(msg_id)]
        + msg_id
        + b" "
        + varint(highest_sequence_id)
    )
    cmd = b"\x08\x07:" + varint(len(body)) + body  # type=7; field 7 bytes: tag 0x3a
    return _U32U32.pack(4 + len(cmd), len(cmd)) + cmd


def send_receipt_frames(receipts: Iterable[tuple[int, int, int, int, int]]) -> list[bytes]:
    """SEND_RECEIPT frames for ``(producer id, sequence id, highest sequence id, ledger id,
    entry id)`` each, as ``send_receipt_frame`` makes them; the producer id and ledger id of
    a run are encoded once."""
    pack = _U32U32.pack
    last_pid: int | None = None
    last_ledger: int | None = None
    pid_part = ledger_part = b""
    out: list[bytes] = []
    append = out.append
    for pid, seq, highest, ledger_id, entry_id in receipts:
        if pid != last_pid:
            last_pid = pid
            pid_part = b"\x08" + varint(pid) + b"\x10"
        if ledger_id != last_ledger:
            last_ledger = ledger_id
            ledger_part = b"\x08" + varint(ledger_id) + b"\x10"
        msg_id = ledger_part + varint(entry_id)
        seq_part = varint(seq)
        highest_part = seq_part if highest == seq else varint(highest)
        body = pid_part + seq_part + b"\x1a" + _SMALL[len(msg_id)] + msg_id + b" " + highest_part
        # type=7; field 7 bytes: tag 0x3a; a receipt body is < 128 bytes (ids <= 10 each)
        cmd = b"\x08\x07:" + _SMALL[len(body)] + body
        append(pack(4 + len(cmd), len(cmd)) + cmd)
    return out


def parse_metadata(data: bytes) -> pb.MessageMetadata:
    try:
        return parse_entry(data, verify_checksum=False).metadata
    except Exception as exc:
        raise BadEntry(str(exc)) from None


def num_messages(data: bytes) -> int:
    md = parse_metadata(data)
    return md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1


__all__ = [
    "MAGIC_CRC32C_BYTES",
    "BadEntry",
    "frame",
    "message_frame",
    "message_frames",
    "num_messages",
    "parse_metadata",
    "send_receipt_frame",
    "send_receipt_frames",
    "to_signed64",
    "varint",
]
