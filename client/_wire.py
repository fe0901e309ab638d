"""Hand encoders for the client's hot path: the SEND frame of one plain message.

Owns ``encode_simple_send_frame``, which writes exactly the bytes that
``encode_payload_command(commands.send(...), encode_headers_and_payload(md, payload))`` produces
for ``md = MessageMetadata{producer_name, sequence_id, publish_time}`` (no other field set),
without building protobuf objects (a unit test checks the equivalence byte for byte).
Callers use it only for messages with no properties, keys, event time, delivery time,
replication list, compression or schema version; anything else goes through protobuf.
Must not know producers, connections or sockets.
"""

from __future__ import annotations

import struct

from magnetar.client.protocol import crc32c
from magnetar.client.protocol import encode_varint as _varint

_U32 = struct.Struct(">I")
_U32U32 = struct.Struct(">II")
_MAGIC_CRC32C = b"\x0e\x01"


def encode_simple_metadata(producer_name: bytes, sequence_id: int, publish_time: int) -> bytes:
    """``MessageMetadata{producer_name, sequence_id, publish_time}`` serialised (UTF-8 name)."""
    return b"".join(
        (
            b"\x0a",
            _varint(len(producer_name)),
            producer_name,
            b"\x10",
            _varint(sequence_id),
            b"\x18",
            _varint(publish_time),
        )
    )


def encode_simple_send_frame(
    producer_id: int, sequence_id: int, metadata: bytes, payload: bytes
) -> bytes:
    """A whole SEND frame: ``CommandSend{producer_id, sequence_id}``, crc, metadata, payload."""
    send = b"\x08" + _varint(producer_id) + b"\x10" + _varint(sequence_id)
    cmd = b"\x08\x062" + _varint(len(send)) + send  # type=SEND(6); field 6 bytes: tag 0x32
    body = _U32.pack(len(metadata)) + metadata + payload
    tail_len = 6 + len(body)
    return b"".join(
        (
            _U32U32.pack(4 + len(cmd) + tail_len, len(cmd)),
            cmd,
            _MAGIC_CRC32C,
            _U32.pack(crc32c(body)),
            body,
        )
    )


class SimpleSendEncoder:
    """The same encoders with per-producer constants and the last publish time cached.

    Bound to one producer id and name (rebuild it when the broker assigns another name).
    """

    __slots__ = ("_md_prefix", "_producer_id", "_time", "_time_bytes")

    def __init__(self, producer_id: int, producer_name: bytes) -> None:
        self._producer_id = producer_id
        self._md_prefix = b"\x0a" + _varint(len(producer_name)) + producer_name + b"\x10"
        self._time = 0
        self._time_bytes = b"\x18\x00"

    def metadata(self, sequence_id: int, publish_time: int) -> bytes:
        if publish_time != self._time:  # publish times repeat within a millisecond
            self._time = publish_time
            self._time_bytes = b"\x18" + _varint(publish_time)
        return self._md_prefix + _varint(sequence_id) + self._time_bytes

    def frame(self, sequence_id: int, metadata: bytes, payload: bytes) -> bytes:
        return encode_simple_send_frame(self._producer_id, sequence_id, metadata, payload)


__all__ = ["SimpleSendEncoder", "encode_simple_metadata", "encode_simple_send_frame"]
