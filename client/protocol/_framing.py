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


def encode_message_frames(
    consumer_id: int,
    partition: int,
    messages: Iterable[tuple[object, bytes, int, list[int] | None]],
) -> list[bytes]:
    """MESSAGE frames for ``messages`` (position with ``ledger_id``/``entry_id``, stored
    entry bytes, redelivery count, ack set) to one consumer: the same bytes as
    ``encode_message_frame`` for each (a test checks it), with the parts shared by every frame
    (consumer id, partition, the ledger id of a run) encoded once (the broker's dispatch hot
    path)."""
    cid_part = b"\x08" + _varint(consumer_id) + b"\x12"
    part = _PARTITION_NONE if partition == -1 else b"\x18" + _varint(partition)
    pack = _U32U32.pack
    small = _SMALL_VARINTS
    last_ledger: int | None = None
    ledger_part = b""
    out: list[bytes] = []
    append = out.append
    for pos, data, redelivery_count, ack_set in messages:
        ledger_id = pos.ledger_id  # type: ignore[attr-defined]
        if ledger_id != last_ledger:
            last_ledger = ledger_id
            ledger_part = b"\x08" + _varint(ledger_id) + b"\x10"
        msg_id = ledger_part + _varint(pos.entry_id) + part  # type: ignore[attr-defined]
        body = cid_part + small[len(msg_id)] + msg_id  # a MessageIdData is < 128 bytes
        if redelivery_count > 0:
            body += b"\x18" + _varint(redelivery_count)
        if ack_set:
            for word in ack_set:
                body += b" " + _varint(word)  # field 4 varint: tag 0x20
        n = len(body)
        # type=9; field 9 bytes: tag 0x4a
        cmd = b"\x08\x09J" + (small[n] if n < 0x80 else _varint(n)) + body
        append(pack(4 + len(cmd) + len(data), len(cmd)) + cmd + data)
    return out


def encode_send_receipt_frames(receipts: Iterable[tuple[int, int, int, int, int]]) -> list[bytes]:
    """SEND_RECEIPT frames for ``(producer id, sequence id, highest sequence id, ledger id,
    entry id)`` each, the bytes of ``encode_send_receipt_frame(..., highest_sequence_id=h)``
    (a test checks it); the producer id and ledger id of a run are encoded once."""
    pack = _U32U32.pack
    small = _SMALL_VARINTS
    last_pid: int | None = None
    last_ledger: int | None = None
    pid_part = ledger_part = b""
    out: list[bytes] = []
    append = out.append
    for pid, seq, highest, ledger_id, entry_id in receipts:
        if pid != last_pid:
            last_pid = pid
            pid_part = b"\x08" + _varint(pid) + b"\x10"
        if ledger_id != last_ledger:
            last_ledger = ledger_id
            ledger_part = b"\x08" + _varint(ledger_id) + b"\x10"
        msg_id = ledger_part + _varint(entry_id)
        seq_part = _varint(seq)
        highest_part = seq_part if highest == seq else _varint(highest)
        body = pid_part + seq_part + b"\x1a" + small[len(msg_id)] + msg_id + b" " + highest_part
        # type=7; field 7 bytes: tag 0x3a; a receipt body is < 128 bytes (ids <= 10 each)
        cmd = b"\x08\x07:" + small[len(body)] + body
        append(pack(4 + len(cmd), len(cmd)) + cmd)
    return out


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


_NO_STRINGS = frozenset(
    int(t)
    for t in (
        CommandType.SEND,
        CommandType.MESSAGE,
        CommandType.SEND_RECEIPT,
        CommandType.ACK,
        CommandType.FLOW,
        CommandType.PING,
        CommandType.PONG,
        CommandType.REDELIVER_UNACKNOWLEDGED_MESSAGES,
        CommandType.CLOSE_PRODUCER,
        CommandType.CLOSE_CONSUMER,
        CommandType.UNSUBSCRIBE,
        CommandType.SEEK,
        CommandType.GET_LAST_MESSAGE_ID,
        CommandType.CONSUMER_STATS,
    )
)
"""Frequent commands with no string field a receiver reads: their strings are not repaired."""
_SEND = int(CommandType.SEND)
_PAYLOAD_INTS = frozenset(int(t) for t in PAYLOAD_TYPES)


def decode_command(frame: bytes, start: int, end: int) -> tuple[pb.BaseCommand, int]:
    """Decode the command of the frame ``frame[start:end]`` (after its 4-byte total size):
    the one place a command's rules are checked, by the client and the broker alike.

    Returns the ``BaseCommand`` and where its payload starts (``end`` when it has none).
    Raises ``RemoteProtocolError`` for a command size outside the frame, a command that does
    not parse, misses required fields or its body, or bytes after a command that carries no
    payload. Invalid UTF-8 in string fields becomes U+FFFD, as Pulsar's Java codec decodes
    it (``repair_strings``), except in the frequent commands that carry no string read.
    SEND, the hot path, has its required fields checked directly.
    """
    if end - start < 4:
        raise RemoteProtocolError(f"frame of {end - start} bytes has no command size")
    (cmd_size,) = _U32.unpack_from(frame, start)
    cmd_end = start + 4 + cmd_size
    if cmd_size == 0 or cmd_end > end:
        raise RemoteProtocolError(f"command size {cmd_size} exceeds frame size {end - start}")
    base = pb.BaseCommand()
    try:
        base.ParseFromString(frame[start + 4 : cmd_end])
    except Exception as exc:  # protobuf raises DecodeError and, on odd input, others
        raise RemoteProtocolError(f"cannot parse BaseCommand: {exc}") from None
    kind = base.type
    if kind == _SEND:
        send = base.send
        if not (
            send.HasField("producer_id")
            and send.HasField("sequence_id")
            and (not send.HasField("message_id") or send.message_id.IsInitialized())
        ):
            raise RemoteProtocolError("SEND misses required fields")
        return base, cmd_end
    if not base.IsInitialized():
        raise RemoteProtocolError(f"BaseCommand misses required fields: {_missing_fields(base)}")
    ctype = _TYPE_OF.get(kind)
    if ctype is None:  # pragma: no cover - closed proto2 enum already rejects it
        raise RemoteProtocolError(f"unknown command type {kind}")
    if not base.HasField(FIELD_NAME[ctype]):  # type: ignore[arg-type]
        raise RemoteProtocolError(f"{ctype.name} without its '{FIELD_NAME[ctype]}' body")
    if kind not in _PAYLOAD_INTS and cmd_end != end:
        raise RemoteProtocolError(f"{ctype.name} followed by {end - cmd_end} stray bytes")
    if kind not in _NO_STRINGS:
        repair_strings(base)
    return base, cmd_end


def decode_event(base: pb.BaseCommand, headers_and_payload: bytes) -> Command:
    """The event of a command ``decode_command`` returned: a ``Command``, or for SEND and
    MESSAGE a ``PayloadCommand`` whose payload section (``headers_and_payload``: the bytes
    after the command) is decoded. Raises ``RemoteProtocolError``, or
    ``ChecksumMismatchError`` (carrying the event) when the checksum does not match."""
    ctype = _TYPE_OF[base.type]
    if ctype not in PAYLOAD_TYPES:
        return Command(ctype, base)
    return _decode_payload(ctype, base, headers_and_payload, 0)


def decode_frame_body(body: bytes) -> Command:
    """Decode one frame without its 4-byte totalSize prefix; raises ``RemoteProtocolError``."""
    base, rest_start = decode_command(body, 0, len(body))
    return decode_event(base, body[rest_start:])


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


def _checksum_header(tail: bytes, what: str) -> tuple[int | None, int]:
    """(checksum or None, offset of the metadata size) of headers-and-payload bytes; raises
    ``RemoteProtocolError`` when they are too short for the headers they announce."""
    checksum: int | None = None
    meta_size_at = 0
    if tail[:2] == _MAGIC_CRC32C_BYTES:
        if len(tail) < 6:
            raise RemoteProtocolError("truncated checksum")
        (checksum,) = _U32.unpack_from(tail, 2)
        meta_size_at = 6
    if len(tail) - meta_size_at < 4:
        raise RemoteProtocolError(f"{what} frame has no metadata size")
    return checksum, meta_size_at


def _crc_after(tail: bytes, at: int) -> int:
    """The CRC32C a checksum section covers: everything after it (metadata size onwards)."""
    return crc32c(memoryview(tail)[at:])


def checksum_matches(headers_and_payload: bytes) -> bool:
    """True when SEND headers-and-payload bytes carry no checksum or one that matches their
    content (the broker answers a mismatch with SEND_ERROR before anything is stored);
    raises ``RemoteProtocolError`` when they are too short for their headers. The metadata
    itself is not looked at (see ``entry_metadata``). Per SEND: ``_checksum_header``'s
    checks written out."""
    tail = headers_and_payload
    if tail[:2] != _MAGIC_CRC32C_BYTES:
        if len(tail) < 4:
            raise RemoteProtocolError("SEND frame has no metadata size")
        return True
    if len(tail) < 10:
        raise RemoteProtocolError(
            "truncated checksum" if len(tail) < 6 else "SEND frame has no metadata size"
        )
    (checksum,) = _U32.unpack_from(tail, 2)
    return bool(_crc32c.crc32c(memoryview(tail)[6:]) == checksum)


def _split_tail(
    tail: bytes, what: str, *, compute: bool = True
) -> tuple[int | None, int | None, int, int]:
    """(checksum, computed crc, metadata start, metadata end) of headers-and-payload bytes;
    the crc is computed only with ``compute``."""
    checksum, meta_size_at = _checksum_header(tail, what)
    (meta_size,) = _U32.unpack_from(tail, meta_size_at)
    meta_start = meta_size_at + 4
    meta_end = meta_start + meta_size
    if meta_end > len(tail):
        raise RemoteProtocolError(f"metadata size {meta_size} exceeds frame")
    computed: int | None = None
    if checksum is not None and compute:
        computed = _crc_after(tail, meta_size_at)
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
    checksum, computed, meta_start, meta_end = _split_tail(data, "entry", compute=verify_checksum)
    if verify_checksum and checksum is not None and computed != checksum:
        raise RemoteProtocolError(
            f"entry checksum mismatch: stored {checksum:#010x}, computed {computed or 0:#010x}"
        )
    metadata = pb.MessageMetadata()
    _parse(metadata, data[meta_start:meta_end], "MessageMetadata")
    return StoredEntry(metadata, data, meta_start, meta_end, checksum)


def entry_metadata(headers_and_payload: bytes) -> tuple[pb.MessageMetadata, int]:
    """The ``MessageMetadata`` of stored entry bytes and the offset where the payload starts
    (checksum not verified). The broker's per-SEND path: ``parse_entry``'s checks and errors
    without its ``StoredEntry`` (or the checksum's work). Raises ``RemoteProtocolError`` for
    bytes that are not an entry."""
    data = headers_and_payload
    if type(data) is not bytes:
        data = bytes(data)
    n = len(data)
    at = 0
    if data[:2] == _MAGIC_CRC32C_BYTES:
        if n < 6:
            raise RemoteProtocolError("truncated checksum")
        at = 6
    if n - at < 4:
        raise RemoteProtocolError("entry frame has no metadata size")
    (meta_size,) = _U32.unpack_from(data, at)
    start = at + 4
    end = start + meta_size
    if end > n:
        raise RemoteProtocolError(f"metadata size {meta_size} exceeds frame")
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(data[start:end])
    except Exception as exc:  # protobuf raises DecodeError and, on odd input, others
        raise RemoteProtocolError(f"cannot parse MessageMetadata: {exc}") from None
    if not metadata.IsInitialized():
        missing = _missing_fields(metadata)
        raise RemoteProtocolError(f"MessageMetadata misses required fields: {missing}")
    return metadata, end


def parse_entry_metadata(headers_and_payload: bytes) -> pb.MessageMetadata:
    """The ``MessageMetadata`` of stored entry bytes (checksum not verified: the broker checked
    it on publish). Raises ``RemoteProtocolError`` for bytes that are not an entry."""
    try:
        return entry_metadata(headers_and_payload)[0]
    except RemoteProtocolError:
        raise
    except Exception as exc:
        raise RemoteProtocolError(f"malformed entry: {exc}") from None


def entry_num_messages(headers_and_payload: bytes) -> int:
    """Messages in stored entry bytes: 1, or the batch's size (what it costs in permits)."""
    md = parse_entry_metadata(headers_and_payload)
    return md.num_messages_in_batch if md.HasField("num_messages_in_batch") else 1


MAGIC_CRC32C_BYTES = _MAGIC_CRC32C_BYTES
"""The two bytes that start a checksummed SEND tail / stored entry."""
