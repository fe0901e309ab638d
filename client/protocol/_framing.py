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

from collections.abc import Iterable
from dataclasses import dataclass

from google.protobuf.message import Message

from ._entry import (
    CHECKSUM_HEADER_BYTES,
    MAGIC_CRC32C_BYTES,
    EntryView,
    split_entry,
)
from ._errors import ChecksumMismatchError, LocalProtocolError, RemoteProtocolError
from ._primitives import SMALL_VARINTS, U32, U32U32, crc32c, encode_varint, missing_fields
from ._types import FIELD_NAME, PAYLOAD_TYPES, CommandType
from .proto import pulsar_api_pb2 as pb

MAGIC_BROKER_ENTRY_METADATA = 0x0E02
_MAGIC_BEM_BYTES = b"\x0e\x02"

#: Broker ``maxMessageSize`` default (5 MiB), advertised in CONNECTED.max_message_size.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
#: Java's frame decoder accepts maxMessageSize + this padding for the command and headers.
FRAME_PADDING = 10 * 1024
#: Largest ``totalSize`` accepted by default.
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING

_TYPE_OF = {int(t): t for t in CommandType}
_PARTITION_NONE = b"\x18" + b"\xff" * 9 + b"\x01"  # MessageIdData.partition = -1

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
        missing = missing_fields(base)
        raise LocalProtocolError(f"missing required fields: {missing}")
    return base.SerializeToString()


def encode_command(base: pb.BaseCommand) -> bytes:
    """Frame a simple command: ``[totalSize][cmdSize][BaseCommand]``."""
    cmd = serialize_command(base)
    return U32U32.pack(4 + len(cmd), len(cmd)) + cmd


def encode_headers_and_payload(
    metadata: pb.MessageMetadata | bytes, payload: bytes, *, checksum: bool = True
) -> bytes:
    """The part after a SEND command: ``[0x0e01][crc]`` (if checksum) ``[size][md][payload]``."""
    if isinstance(metadata, pb.MessageMetadata):
        if not metadata.IsInitialized():
            missing = missing_fields(metadata)
            raise LocalProtocolError(f"MessageMetadata misses required fields: {missing}")
        metadata = metadata.SerializeToString()
    body = U32.pack(len(metadata)) + metadata + payload
    if not checksum:
        return body
    return MAGIC_CRC32C_BYTES + U32.pack(crc32c(body)) + body


def encode_payload_command(base: pb.BaseCommand, headers_and_payload: bytes) -> bytes:
    """Frame a payload command whose tail (checksum, metadata, payload) is already encoded."""
    cmd = serialize_command(base)
    return (
        U32U32.pack(4 + len(cmd) + len(headers_and_payload), len(cmd)) + cmd + headers_and_payload
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
        U32U32.pack(4 + len(cmd) + len(headers_and_payload), len(cmd)) + cmd + headers_and_payload
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
    return U32U32.pack(4 + len(cmd), len(cmd)) + cmd


def encode_simple_send_frame(
    producer_id: int, sequence_id: int, metadata: bytes, payload: bytes
) -> bytes:
    """A whole SEND frame, ``CommandSend{producer_id, sequence_id}``, checksum, ``metadata``
    (serialised) and ``payload``, without protobuf objects (a producer's hot path): the bytes
    of ``encode_payload_command(commands.send(...), encode_headers_and_payload(md, payload))``
    (a test checks the equivalence)."""
    send = b"\x08" + _varint(producer_id) + b"\x10" + _varint(sequence_id)
    cmd = b"\x08\x062" + _varint(len(send)) + send  # type=SEND(6); field 6 bytes: tag 0x32
    body = U32.pack(len(metadata)) + metadata + payload
    return b"".join(
        (
            U32U32.pack(4 + len(cmd) + CHECKSUM_HEADER_BYTES + len(body), len(cmd)),
            cmd,
            MAGIC_CRC32C_BYTES,
            U32.pack(crc32c(body)),
            body,
        )
    )


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
    pack = U32U32.pack
    small = SMALL_VARINTS
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
    pack = U32U32.pack
    small = SMALL_VARINTS
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

    @property
    def entry(self) -> EntryView:
        """The headers and payload as an ``EntryView`` (nothing parsed again)."""
        return EntryView.known(
            self.headers_and_payload,
            self.metadata_offset,
            self.payload_offset,
            self.checksum,
            self.metadata,
        )


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
        missing = missing_fields(message)
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
    (cmd_size,) = U32.unpack_from(frame, start)
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
        raise RemoteProtocolError(f"BaseCommand misses required fields: {missing_fields(base)}")
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
        (bem_size,) = U32.unpack_from(body, pos + 2)
        if bem_size > end - pos - 6:
            raise RemoteProtocolError(f"broker entry metadata size {bem_size} exceeds frame")
        bem = pb.BrokerEntryMetadata()
        _parse(bem, body[pos + 6 : pos + 6 + bem_size], "BrokerEntryMetadata")
        pos += 6 + bem_size
    tail = body[pos:]
    checksum, computed, meta_start, meta_end = split_entry(tail, ctype.name)
    if checksum is not None and computed != checksum:
        event = PayloadCommand(ctype, base, None, tail, meta_start, meta_end, checksum, bem)
        raise ChecksumMismatchError(checksum, computed or 0, event)
    metadata = pb.MessageMetadata()
    _parse(metadata, tail[meta_start:meta_end], "MessageMetadata")
    return PayloadCommand(ctype, base, metadata, tail, meta_start, meta_end, checksum, bem)
