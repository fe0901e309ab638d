"""The broker's hot-path frames and entry-metadata helpers, over the protocol codec.

Owns: nothing of the wire format itself (``magnetar.client.protocol`` does): it adapts the
codec's protobuf-free encoders of ``MESSAGE`` (CommandMessage + the stored entry bytes
unchanged) and ``SEND_RECEIPT`` to the broker's positional call sites, frames other
commands, and reads ``MessageMetadata`` out of a stored entry (the SEND tail).
Must not know: topics, consumers, sockets.
"""

from __future__ import annotations

from magnetar.client.protocol import (
    MAGIC_CRC32C,
    encode_message_frame,
    encode_send_receipt_frame,
    parse_entry,
    to_int64,
)
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb

MAGIC_CRC32C_BYTES = MAGIC_CRC32C.to_bytes(2, "big")


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


def send_receipt_frame(
    producer_id: int, sequence_id: int, highest_sequence_id: int, ledger_id: int, entry_id: int
) -> bytes:
    return encode_send_receipt_frame(
        producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id=highest_sequence_id
    )


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
    "num_messages",
    "parse_metadata",
    "send_receipt_frame",
    "to_signed64",
]
