"""Framing of the Pulsar binary protocol: frame encoders and the decoder of one frame body.

Wire layout (all integers big-endian; reference §1)::

    simple command
      [totalSize u32][cmdSize u32][BaseCommand]                    totalSize = 4 + cmdSize

    payload command (SEND client->broker, MESSAGE broker->client)
      [totalSize u32][cmdSize u32][BaseCommand]
      ([0x0e02 u16][brokerEntryMetadataSize u32][BrokerEntryMetadata])   MESSAGE only, optional
      ([0x0e01 u16][crc32c u32])                                          optional
      [metadataSize u32][MessageMetadata][payload ...]

    crc32c (Castagnoli) covers metadataSize + metadata + payload (everything after the crc).

"headers and payload" below means the bytes from the 0x0e01 magic (or from metadataSize when
there is no checksum) to the end of the frame: exactly what a broker stores per entry and
replays after a fresh CommandMessage when dispatching.

Invariants: a decoded frame never exceeds ``max_frame_size``; every decoded BaseCommand and
MessageMetadata has all proto2 required fields and the sub-message matching its type; every
encoded command has them too (else ``LocalProtocolError``, nothing is produced).

Must not know: sockets, asyncio, connection state (see ``_connection``).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import crc32c as _crc32c
from google.protobuf.message import Message

from ._errors import ChecksumMismatchError, LocalProtocolError, RemoteProtocolError
from ._types import FIELD_NAME, PAYLOAD_TYPES, CommandType
from .proto import pulsar_api_pb2 as pb

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
_MAGIC_CRC32C_BYTES = b"\x0e\x01"
_MAGIC_BEM_BYTES = b"\x0e\x02"

#: Broker ``maxMessageSize`` default (5 MiB), advertised in CONNECTED.max_message_size.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: Java's frame decoder accepts maxMessageSize + this padding for the command and headers.
FRAME_PADDING = 10 * 1024
#: Largest ``totalSize`` accepted by default.
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING

_U32 = struct.Struct(">I")
_U32U32 = struct.Struct(">II")
_UINT64_MASK = (1 << 64) - 1


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC-32C (Castagnoli); pass ``value`` to continue a running checksum."""
    return int(_crc32c.crc32c(data, value))


def _missing_fields(message: Message) -> str:
    errors: list[str] = message.FindInitializationErrors()  # type: ignore[attr-defined]
    return ", ".join(errors)


_SMALL_VARINTS = [bytes([i]) for i in range(128)]
_TYPE_OF = {int(t): t for t in CommandType}
_PARTITION_NONE = b"\x18" + b"\xff" * 9 + b"\x01"  # MessageIdData.partition = -1


def encode_varint(value: int) -> bytes:
    """Protobuf varint of ``value``; negative numbers as 64-bit two's complement (10 bytes).
    Unrolled for the small values of hot paths (ids, sequence ids, lengths)."""
    if 0 <= value < 0x80:
        return _SMALL_VARINTS[value]
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


_varint = encode_varint


# ----------------------------------------------------------------------------- encoding


def serialize_command(base: pb.BaseCommand) -> bytes:
    """Serialise a BaseCommand after checking it is complete (else ``LocalProtocolError``)."""
    if not base.HasField("type"):
        raise LocalProtocolError("BaseCommand.type is not set")
    try:
        field = FIELD_NAME[CommandType(base.type)]
    except (KeyError, ValueError):
        raise LocalProtocolError(f"unknown command type {base.type}") from None
    if not base.HasField(field):  # type: ignore[arg-type]
        raise LocalProtocolError(f"{CommandType(base.type).name} without its '{field}' body")
    if not base.IsInitialized():
        missing = _missing_fields(base)
        raise LocalProtocolError(f"missing required fields: {missing}")
    return base.SerializeToString()


def encode_command(base: pb.BaseCommand) -> bytes:
    """Frame a simple command: ``[totalSize][cmdSize][BaseCommand]``."""
    cmd = serialize_command(base)
    return _U32U32.pack(4 + len(cmd), len(cmd)) + cmd


def encode_headers_and_payload(
    metadata: pb.MessageMetadata | bytes, payload: bytes, *, checksum: bool = True
) -> bytes:
    """The part after a SEND command: ``[0x0e01][crc]`` (if checksum) ``[size][md][payload]``."""
    if isinstance(metadata, pb.MessageMetadata):
        if not metadata.IsInitialized():
            missing = _missing_fields(metadata)
            raise LocalProtocolError(f"MessageMetadata misses required fields: {missing}")
        metadata = metadata.SerializeToString()
    body = _U32.pack(len(metadata)) + metadata + payload
    if not checksum:
        return body
    return _MAGIC_CRC32C_BYTES + _U32.pack(crc32c(body)) + body


def encode_payload_command(base: pb.BaseCommand, headers_and_payload: bytes) -> bytes:
    """Frame a payload command whose tail (checksum, metadata, payload) is already encoded."""
    cmd = serialize_command(base)
    return (
        _U32U32.pack(4 + len(cmd) + len(headers_and_payload), len(cmd)) + cmd + headers_and_payload
    )


def encode_message_frame(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    headers_and_payload: bytes,
    *,
    partition: int = -1,
    redelivery_count: int = 0,
    ack_set: Iterable[int] = (),
    batch_index: int | None = None,
    consumer_epoch: int | None = None,
) -> bytes:
    """Encode a whole MESSAGE frame around stored entry bytes, without protobuf objects.

    Produces exactly the bytes protobuf would for ``BaseCommand{type: MESSAGE, message:
    CommandMessage{consumer_id, message_id{ledgerId, entryId, partition[, batch_index]},
    [redelivery_count if > 0], [ack_set...], [consumer_epoch]}}`` followed by
    ``headers_and_payload`` unchanged (a test checks the equivalence). Ids may be negative
    (-1 is written as 2^64-1, as the C++ client does).
    """
    msg_id = b"\x08" + _varint(ledger_id) + b"\x10" + _varint(entry_id)
    msg_id += _PARTITION_NONE if partition == -1 else b"\x18" + _varint(partition)
    if batch_index is not None:
        msg_id += b" " + _varint(batch_index)  # field 4 varint: tag 0x20
    body = b"\x08" + _varint(consumer_id) + b"\x12" + _varint(len(msg_id)) + msg_id
    if redelivery_count > 0:
        body += b"\x18" + _varint(redelivery_count)
    for word in ack_set:
        body += b" " + _varint(word)  # field 4 varint: tag 0x20
    if consumer_epoch is not None:
        body += b"(" + _varint(consumer_epoch)  # field 5 varint: tag 0x28
    cmd = b"\x08\x09J" + _varint(len(body)) + body  # type=9; field 9 bytes: tag 0x4a
    return (
        _U32U32.pack(4 + len(cmd) + len(headers_and_payload), len(cmd)) + cmd + headers_and_payload
    )


def encode_send_receipt_frame(
    producer_id: int,
    sequence_id: int,
    ledger_id: int,
    entry_id: int,
    *,
    highest_sequence_id: int | None = None,
) -> bytes:
    """Encode a whole SEND_RECEIPT frame without protobuf objects (one per SEND: hot path).

    Same bytes as ``BaseCommand{type: SEND_RECEIPT, send_receipt: {producer_id, sequence_id,
    message_id{ledgerId, entryId}[, highest_sequence_id]}}`` (a test checks the equivalence).
    """
    msg_id = b"\x08" + _varint(ledger_id) + b"\x10" + _varint(entry_id)
    body = b"\x08" + _varint(producer_id) + b"\x10" + _varint(sequence_id)
    body += b"\x1a" + _varint(len(msg_id)) + msg_id
    if highest_sequence_id is not None:
        body += b" " + _varint(highest_sequence_id)  # field 4 varint: tag 0x20
    cmd = b"\x08\x07:" + _varint(len(body)) + body  # type=7; field 7 bytes: tag 0x3a
    return _U32U32.pack(4 + len(cmd), len(cmd)) + cmd


# ----------------------------------------------------------------------------- decoding


@dataclass(frozen=True, slots=True)
class Command:
    """A decoded command: ``type`` and the whole ``base`` BaseCommand.

    ``command`` is the type's own message (``CommandSend``, ``CommandLookupTopic``...); for a
    statically typed handler use the named field of ``base`` (``event.base.send``).
    """

    type: CommandType
    base: pb.BaseCommand

    @property
    def command(self) -> Message:
        body: Message = getattr(self.base, FIELD_NAME[self.type])
        return body


@dataclass(frozen=True, slots=True)
class PayloadCommand(Command):
    """SEND or MESSAGE with its payload section.

    ``headers_and_payload`` holds the frame's bytes from the 0x0e01 magic (or metadataSize if
    the peer sent no checksum) to the end, exactly as framed: store and replay them verbatim.
    ``metadata`` is the parsed MessageMetadata (``None`` only inside ``ChecksumMismatchError``).
    """

    metadata: pb.MessageMetadata | None
    headers_and_payload: bytes
    metadata_offset: int
    payload_offset: int
    checksum: int | None
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None

    @property
    def metadata_bytes(self) -> bytes:
        return self.headers_and_payload[self.metadata_offset : self.payload_offset]

    @property
    def payload(self) -> bytes:
        """The raw payload: one message or a whole batch, possibly compressed."""
        return self.headers_and_payload[self.payload_offset :]


_STRING = 9  # FieldDescriptor.TYPE_STRING
_MESSAGE = 11  # FieldDescriptor.TYPE_MESSAGE


def repair_strings(message: Message) -> int:
    """Replace invalid UTF-8 in the string fields of a parsed message (and the messages it
    holds) by U+FFFD, as Pulsar's Java codec decodes them; returns how many were repaired.

    protobuf keeps a proto2 string that is not valid UTF-8 as ``bytes``: left alone it
    reaches code that expects ``str`` (a topic name, a subscription name) and fails there.
    """
    repaired = 0
    for fd, value in message.ListFields():
        kind = fd.type
        if kind == _STRING:
            if fd.is_repeated:
                for i, item in enumerate(value):
                    if isinstance(item, bytes):
                        value[i] = item.decode("utf-8", "replace")
                        repaired += 1
            elif isinstance(value, bytes):
                setattr(message, fd.name, value.decode("utf-8", "replace"))
                repaired += 1
        elif kind == _MESSAGE:
            if fd.is_repeated:
                for item in value:
                    repaired += repair_strings(item)
            else:
                repaired += repair_strings(value)
    return repaired


def _parse(
    message: pb.BaseCommand | pb.MessageMetadata | pb.BrokerEntryMetadata, data: bytes, what: str
) -> None:
    try:
        message.ParseFromString(data)
    except Exception as exc:  # protobuf raises DecodeError and, on odd input, others
        raise RemoteProtocolError(f"cannot parse {what}: {exc}") from None
    if not message.IsInitialized():
        missing = _missing_fields(message)
        raise RemoteProtocolError(f"{what} misses required fields: {missing}")


def decode_frame_body(body: bytes) -> Command:
    """Decode one frame without its 4-byte totalSize prefix; raises ``RemoteProtocolError``."""
    if len(body) < 4:
        raise RemoteProtocolError(f"frame of {len(body)} bytes has no command size")
    (cmd_size,) = _U32.unpack_from(body, 0)
    if cmd_size > len(body) - 4:
        raise RemoteProtocolError(f"command size {cmd_size} exceeds frame size {len(body)}")
    base = pb.BaseCommand()
    _parse(base, body[4 : 4 + cmd_size], "BaseCommand")
    ctype = _TYPE_OF.get(base.type)
    if ctype is None:  # pragma: no cover - closed proto2 enum already rejects it
        raise RemoteProtocolError(f"unknown command type {base.type}")
    if not base.HasField(FIELD_NAME[ctype]):  # type: ignore[arg-type]
        raise RemoteProtocolError(f"{ctype.name} without its '{FIELD_NAME[ctype]}' body")
    rest_start = 4 + cmd_size
    if ctype not in PAYLOAD_TYPES:
        if rest_start != len(body):
            raise RemoteProtocolError(
                f"{ctype.name} followed by {len(body) - rest_start} stray bytes"
            )
        return Command(ctype, base)
    return _decode_payload(ctype, base, body, rest_start)


def _decode_payload(
    ctype: CommandType, base: pb.BaseCommand, body: bytes, pos: int
) -> PayloadCommand:
    end = len(body)
    bem: pb.BrokerEntryMetadata | None = None
    if ctype is CommandType.MESSAGE and body[pos : pos + 2] == _MAGIC_BEM_BYTES:
        if end - pos < 6:
            raise RemoteProtocolError("truncated broker entry metadata header")
        (bem_size,) = _U32.unpack_from(body, pos + 2)
        if bem_size > end - pos - 6:
            raise RemoteProtocolError(f"broker entry metadata size {bem_size} exceeds frame")
        bem = pb.BrokerEntryMetadata()
        _parse(bem, body[pos + 6 : pos + 6 + bem_size], "BrokerEntryMetadata")
        pos += 6 + bem_size
    tail = body[pos:]
    checksum, computed, meta_start, meta_end = _split_tail(tail, ctype.name)
    if checksum is not None and computed != checksum:
        event = PayloadCommand(ctype, base, None, tail, meta_start, meta_end, checksum, bem)
        raise ChecksumMismatchError(checksum, computed or 0, event)
    metadata = pb.MessageMetadata()
    _parse(metadata, tail[meta_start:meta_end], "MessageMetadata")
    return PayloadCommand(ctype, base, metadata, tail, meta_start, meta_end, checksum, bem)


def _split_tail(
    tail: bytes, what: str, *, compute: bool = True
) -> tuple[int | None, int | None, int, int]:
    """(checksum, computed crc, metadata start, metadata end) of headers-and-payload bytes;
    the crc is computed only with ``compute``."""
    checksum: int | None = None
    computed: int | None = None
    meta_size_at = 0
    if tail[:2] == _MAGIC_CRC32C_BYTES:
        if len(tail) < 6:
            raise RemoteProtocolError("truncated checksum")
        (checksum,) = _U32.unpack_from(tail, 2)
        meta_size_at = 6
    if len(tail) - meta_size_at < 4:
        raise RemoteProtocolError(f"{what} frame has no metadata size")
    (meta_size,) = _U32.unpack_from(tail, meta_size_at)
    meta_start = meta_size_at + 4
    meta_end = meta_start + meta_size
    if meta_end > len(tail):
        raise RemoteProtocolError(f"metadata size {meta_size} exceeds frame")
    if checksum is not None and compute:
        computed = crc32c(memoryview(tail)[meta_size_at:])
    return checksum, computed, meta_start, meta_end


@dataclass(frozen=True, slots=True)
class StoredEntry:
    """Headers-and-payload bytes of an entry (as stored by the broker), parsed."""

    metadata: pb.MessageMetadata
    headers_and_payload: bytes
    metadata_offset: int
    payload_offset: int
    checksum: int | None

    @property
    def payload(self) -> bytes:
        return self.headers_and_payload[self.payload_offset :]

    @property
    def num_messages(self) -> int:
        """Messages in the entry: what it costs in permits (1 unless it is a batch)."""
        md = self.metadata
        return md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1


def parse_entry(headers_and_payload: bytes, *, verify_checksum: bool = True) -> StoredEntry:
    """Parse stored entry bytes (the tail of a SEND) without any command around them.

    Raises ``RemoteProtocolError`` when the bytes are malformed or (with ``verify_checksum``)
    the CRC32C does not match.
    """
    data = bytes(headers_and_payload)
    checksum, computed, meta_start, meta_end = _split_tail(
        data, "entry", compute=verify_checksum
    )
    if verify_checksum and checksum is not None and computed != checksum:
        raise RemoteProtocolError(
            f"entry checksum mismatch: stored {checksum:#010x}, computed {computed or 0:#010x}"
        )
    metadata = pb.MessageMetadata()
    _parse(metadata, data[meta_start:meta_end], "MessageMetadata")
    return StoredEntry(metadata, data, meta_start, meta_end, checksum)
