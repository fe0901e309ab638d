"""Per-connection protocol state, sans I/O (h11 style): bytes in, typed events out.

Owns: the receive buffer, the handshake state machine and the direction rules of one Pulsar
connection, for either role (``Role.BROKER`` or ``Role.CLIENT``). The caller does the I/O::

    conn = Connection(Role.BROKER)
    conn.receive_data(data)            # b"" means EOF
    while (event := conn.next_event()) is not NEED_DATA:
        ...                            # Command / PayloadCommand / ConnectionClosed
    sock.write(conn.send(commands.pong()))

``next_command`` is the same frame loop without event objects, for a broker's hot path: it
returns each frame's ``BaseCommand`` (rules, direction and handshake state checked as
``next_event`` checks them) and leaves a SEND's payload section undecoded in
``headers_and_payload``; ``next_event`` is ``next_command`` plus the payload's decoding.
Frames are sliced from the bytes received (no copy while whole frames arrive in one read);
the bytes of an incomplete frame are joined once, when the frame is complete.

Wire layout: see ``_framing``. Handshake states (``ConnectionState``)::

    AWAITING_CONNECT --CONNECT (client sends / broker receives)--> CONNECTING
    CONNECTING --CONNECTED (broker sends / client receives)--> CONNECTED
    CONNECTING allows AUTH_CHALLENGE (B->C), AUTH_RESPONSE (C->B), ERROR (B->C, auth failure)
    any --EOF--> CLOSED;  any --fatal RemoteProtocolError--> ERROR (sticky)

Invariants: the buffer never holds more than one frame beyond ``max_frame_size`` worth of
undecoded data per call (the size check happens as soon as the 4-byte header is in), and
holds no byte of a frame already returned once ``NEED_DATA`` is; a command
is only emitted or accepted in a direction and state the protocol allows; a broker-role
connection only sends types in ``sendable_types`` (default: what the C++ client handles).

Must not know: sockets, asyncio, topics, brokers or clients.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal

from ._errors import (
    ChecksumMismatchError,
    FrameTooLargeError,
    LocalProtocolError,
    RemoteProtocolError,
)
from ._framing import (
    DEFAULT_MAX_FRAME_SIZE,
    Command,
    decode_command,
    decode_event,
    encode_command,
    encode_headers_and_payload,
    encode_message_frame,
    encode_message_frames,
    encode_payload_command,
    encode_send_receipt_frame,
    encode_send_receipt_frames,
)
from ._types import (
    BROKER_TO_CLIENT,
    CLIENT_TO_BROKER,
    CPP_CLIENT_HANDLED_TYPES,
    PAYLOAD_TYPES,
    CommandType,
)
from .proto import pulsar_api_pb2 as pb

_U32 = struct.Struct(">I")
_unpack_u32 = _U32.unpack_from
_HANDSHAKE_TYPES = frozenset({int(CommandType.CONNECT), int(CommandType.CONNECTED)})
_TYPE_OF = {int(t): t for t in CommandType}

#: Highest protocol version this codec speaks (TOPIC_MIGRATED, C++ client 3.5-4.2).
PROTOCOL_VERSION_MAX: Final = 20


class Role(enum.Enum):
    CLIENT = "client"
    BROKER = "broker"


class ConnectionState(enum.Enum):
    AWAITING_CONNECT = "awaiting-connect"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"
    ERROR = "error"


_STATE_CONNECTED = ConnectionState.CONNECTED


class Sentinel(enum.Enum):
    NEED_DATA = "NEED_DATA"


#: Returned by ``next_event`` when a whole frame is not buffered yet.
NEED_DATA: Final = Sentinel.NEED_DATA


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The peer closed its side cleanly (EOF on a frame boundary)."""


Event = Command | ConnectionClosed


@dataclass(frozen=True, slots=True)
class ConnectionStatistics:
    state: ConnectionState
    bytes_received: int
    bytes_sent: int
    frames_received: int
    frames_sent: int
    buffered_bytes: int


_HANDSHAKE_SEND = {
    Role.CLIENT: frozenset({CommandType.AUTH_RESPONSE}),
    Role.BROKER: frozenset({CommandType.CONNECTED, CommandType.AUTH_CHALLENGE, CommandType.ERROR}),
}


class Connection:
    """The protocol state of one connection; see the module docstring."""

    def __init__(
        self,
        role: Role,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        sendable_types: Iterable[CommandType] | None = None,
    ) -> None:
        self.role = role
        self.max_frame_size = max_frame_size
        self.state = ConnectionState.AWAITING_CONNECT
        self._own = CLIENT_TO_BROKER if role is Role.CLIENT else BROKER_TO_CLIENT
        self._peer = BROKER_TO_CLIENT if role is Role.CLIENT else CLIENT_TO_BROKER
        if sendable_types is None:
            sendable_types = CPP_CLIENT_HANDLED_TYPES if role is Role.BROKER else self._own
        self._sendable = frozenset(sendable_types) & self._own
        self._served = frozenset(int(t) for t in self._peer) - _HANDSHAKE_TYPES
        """What the peer may send once CONNECTED (as ints: checked per frame)."""
        #: CONNECT received (broker) or sent (client); CONNECTED likewise.
        self.connect: pb.CommandConnect | None = None
        self.connected: pb.CommandConnected | None = None
        #: The payload section (bytes after the command) of the frame ``next_command`` last
        #: returned: a SEND's or MESSAGE's headers and payload, undecoded; ``b""`` for others.
        self.headers_and_payload = b""
        self._data = b""  # received bytes; those before _pos are decoded
        self._pos = 0
        self._more: list[bytes] = []  # received after _data while a frame was incomplete
        self._more_bytes = 0
        self._eof = False
        self._error: RemoteProtocolError | None = None
        self._bytes_received = 0
        self._bytes_sent = 0
        self._frames_received = 0
        self._frames_sent = 0

    def __repr__(self) -> str:
        return (
            f"<Connection {self.role.value} {self.state.value} "
            f"v{self.protocol_version} buffered={self.buffered_bytes}>"
        )

    # ------------------------------------------------------------------ negotiated facts

    @property
    def protocol_version(self) -> int:
        """The negotiated version: CONNECTED.protocol_version once known, else 0."""
        if self.connected is not None:
            return self.connected.protocol_version
        return 0

    @property
    def peer_protocol_version(self) -> int:
        """The version the client announced in CONNECT (0 before)."""
        return self.connect.protocol_version if self.connect is not None else 0

    def statistics(self) -> ConnectionStatistics:
        return ConnectionStatistics(
            self.state,
            self._bytes_received,
            self._bytes_sent,
            self._frames_received,
            self._frames_sent,
            self.buffered_bytes,
        )

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not decoded yet (part of a frame, after ``NEED_DATA``)."""
        return len(self._data) - self._pos + self._more_bytes

    # ------------------------------------------------------------------ receiving

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes read from the socket; ``b""`` means the peer closed (EOF)."""
        if not data:
            self._eof = True  # repeated EOFs are harmless
            return
        if self._eof:
            raise LocalProtocolError("receive_data after EOF")
        self._bytes_received += len(data)
        chunk = data if type(data) is bytes else bytes(data)
        if self._pos == len(self._data) and not self._more:
            self._data = chunk
            self._pos = 0
        else:
            self._more.append(chunk)
            self._more_bytes += len(chunk)

    def next_event(self) -> Event | Literal[Sentinel.NEED_DATA]:
        """Decode the next frame, or return ``NEED_DATA``.

        Raises ``RemoteProtocolError`` when the peer broke the protocol; the connection then
        stays in ERROR and raises the same error again. ``ChecksumMismatchError`` is the
        exception: only that frame is lost and decoding may continue.
        """
        base = self.next_command()
        if base is NEED_DATA or isinstance(base, ConnectionClosed):
            return base
        try:
            return decode_event(base, self.headers_and_payload)
        except ChecksumMismatchError:
            raise
        except RemoteProtocolError as exc:
            self._error = exc
            self.state = ConnectionState.ERROR
            raise

    def next_command(self) -> pb.BaseCommand | ConnectionClosed | Literal[Sentinel.NEED_DATA]:
        """The next frame's ``BaseCommand`` (its payload section, undecoded, in
        ``headers_and_payload``), ``ConnectionClosed`` at EOF, or ``NEED_DATA``.

        The checks and errors of ``next_event`` except those of the payload section, which
        the caller does (``checksum_matches``, ``entry_metadata``): a broker's hot path.
        """
        if self._error is not None:
            raise self._error
        data, pos = self._data, self._pos
        n = len(data)
        try:
            if n - pos >= 4:
                (total,) = _unpack_u32(data, pos)
                end = pos + 4 + total
                if end <= n and 4 <= total <= self.max_frame_size:  # a whole frame is here
                    base, payload_at = decode_command(data, pos + 4, end)
                    self.headers_and_payload = data[payload_at:end]
                    if end == n:
                        self._data = b""
                        self._pos = 0
                    else:
                        self._pos = end
                    self._frames_received += 1
                    kind = base.type
                    if self.state is not _STATE_CONNECTED or kind not in self._served:
                        self._on_receive(_TYPE_OF[kind], base)
                    return base
            return self._next_command_joined()
        except RemoteProtocolError as exc:
            self._error = exc
            self.state = ConnectionState.ERROR
            raise

    def _next_command_joined(
        self,
    ) -> pb.BaseCommand | ConnectionClosed | Literal[Sentinel.NEED_DATA]:
        """``next_command`` when the next frame is not whole in ``_data``: its size checked
        as soon as its header is in, its bytes joined once all are."""
        if len(self._data) - self._pos < 4 and not self._join(4):
            return self._incomplete(0)
        (total,) = _U32.unpack_from(self._data, self._pos)
        if total > self.max_frame_size:
            raise FrameTooLargeError(total, self.max_frame_size)
        if total < 4:
            raise RemoteProtocolError(f"frame of {total} bytes has no command size")
        if not self._join(4 + total):
            return self._incomplete(4 + total)
        return self.next_command()

    def _join(self, wanted: int) -> bool:
        """Make the next ``wanted`` bytes one contiguous ``_data`` if they were all received
        (the bytes of an incomplete frame are joined once); False when some are missing."""
        have = len(self._data) - self._pos
        if have >= wanted:
            return True
        if have + self._more_bytes < wanted:
            return False
        with memoryview(self._data) as rest:
            self._data = b"".join([rest[self._pos :], *self._more])
        self._pos = 0
        self._more.clear()
        self._more_bytes = 0
        return True

    def _incomplete(self, frame_bytes: int) -> ConnectionClosed | Literal[Sentinel.NEED_DATA]:
        """No whole frame is buffered (``frame_bytes``: its size when known): ``NEED_DATA``
        (decoded bytes dropped), or at EOF ``ConnectionClosed`` or a truncation error."""
        available = self.buffered_bytes
        if not self._eof:
            if self._pos:
                self._data = self._data[self._pos :]
                self._pos = 0
            return NEED_DATA
        if available == 0:
            self.state = ConnectionState.CLOSED
            return ConnectionClosed()
        if frame_bytes:
            raise RemoteProtocolError(
                f"peer closed the connection inside a frame ({available} of {frame_bytes} bytes)"
            )
        raise RemoteProtocolError(f"peer closed the connection inside a frame ({available} bytes)")

    def _on_receive(self, t: CommandType, base: pb.BaseCommand) -> None:
        if t not in self._peer:
            raise RemoteProtocolError(f"{t.name} cannot be sent by a {self._peer_name}")
        state = self.state
        if state is ConnectionState.CONNECTED:
            if t is CommandType.CONNECT or t is CommandType.CONNECTED:
                raise RemoteProtocolError(f"{t.name} on an established connection")
            return
        if self.role is Role.BROKER:
            if state is ConnectionState.AWAITING_CONNECT and t is CommandType.CONNECT:
                self.connect = base.connect
                self.state = ConnectionState.CONNECTING
                return
            if state is ConnectionState.CONNECTING and t is CommandType.AUTH_RESPONSE:
                return
        elif state is ConnectionState.CONNECTING:
            if t is CommandType.CONNECTED:
                self.connected = base.connected
                self.state = ConnectionState.CONNECTED
                return
            if t in (CommandType.AUTH_CHALLENGE, CommandType.ERROR):
                return
        raise RemoteProtocolError(f"{t.name} received in state {state.value}")

    @property
    def _peer_name(self) -> str:
        return "broker" if self.role is Role.CLIENT else "client"

    # ------------------------------------------------------------------ sending

    def _check_send(self, t: CommandType) -> None:
        if t not in self._own:
            raise LocalProtocolError(f"a {self.role.value} cannot send {t.name}")
        if t not in self._sendable:
            raise LocalProtocolError(f"{t.name} is not handled by the peer (sendable_types)")
        state = self.state
        if state is ConnectionState.CONNECTED:
            if t is CommandType.CONNECT or t is CommandType.CONNECTED:
                raise LocalProtocolError(f"{t.name} on an established connection")
            return
        if state in (ConnectionState.CLOSED, ConnectionState.ERROR):
            # Sending after EOF/error is allowed (e.g. a final ERROR); the caller decides.
            return
        if self.role is Role.CLIENT:
            if state is ConnectionState.AWAITING_CONNECT and t is CommandType.CONNECT:
                return
            if state is ConnectionState.CONNECTING and t in _HANDSHAKE_SEND[Role.CLIENT]:
                return
        elif state is ConnectionState.CONNECTING and t in _HANDSHAKE_SEND[Role.BROKER]:
            return
        raise LocalProtocolError(f"cannot send {t.name} in state {state.value}")

    def _after_send(self, base: pb.BaseCommand, t: CommandType, frame: bytes) -> bytes:
        if t is CommandType.CONNECT:
            self.connect = base.connect
            self.state = ConnectionState.CONNECTING
        elif t is CommandType.CONNECTED:
            self.connected = base.connected
            self.state = ConnectionState.CONNECTED
        self._frames_sent += 1
        self._bytes_sent += len(frame)
        return frame

    def send(self, base: pb.BaseCommand) -> bytes:
        """Bytes of one simple (payload-less) command; checks direction, state, required fields."""
        t = CommandType(base.type)
        if t in PAYLOAD_TYPES:
            raise LocalProtocolError(f"{t.name} needs a payload: use send_payload/send_message")
        self._check_send(t)
        return self._after_send(base, t, encode_command(base))

    def send_payload(
        self,
        base: pb.BaseCommand,
        metadata: pb.MessageMetadata | bytes,
        payload: bytes,
        *,
        checksum: bool | None = None,
    ) -> bytes:
        """Bytes of a SEND (client) or MESSAGE (broker) built from metadata and payload.

        The CRC32C section is included when the negotiated protocol version is >= 6 (the C++
        client's rule), unless ``checksum`` says otherwise.
        """
        t = CommandType(base.type)
        if t not in PAYLOAD_TYPES:
            raise LocalProtocolError(f"{t.name} carries no payload: use send()")
        self._check_send(t)
        if checksum is None:
            checksum = self.protocol_version >= 6
        tail = encode_headers_and_payload(metadata, payload, checksum=checksum)
        return self._after_send(base, t, encode_payload_command(base, tail))

    def send_message(
        self,
        consumer_id: int,
        ledger_id: int,
        entry_id: int,
        headers_and_payload: bytes,
        *,
        partition: int = -1,
        redelivery_count: int = 0,
        ack_set: Iterable[int] = (),
    ) -> bytes:
        """Broker fast path: a MESSAGE frame around stored entry bytes (no protobuf objects)."""
        if self.state is not ConnectionState.CONNECTED or self.role is not Role.BROKER:
            self._check_send(CommandType.MESSAGE)
        frame = encode_message_frame(
            consumer_id,
            ledger_id,
            entry_id,
            headers_and_payload,
            partition=partition,
            redelivery_count=redelivery_count,
            ack_set=ack_set,
        )
        self._frames_sent += 1
        self._bytes_sent += len(frame)
        return frame

    def send_receipt(
        self,
        producer_id: int,
        sequence_id: int,
        ledger_id: int,
        entry_id: int,
        *,
        highest_sequence_id: int | None = None,
    ) -> bytes:
        """Broker fast path: a SEND_RECEIPT frame (no protobuf objects)."""
        if self.state is not ConnectionState.CONNECTED or self.role is not Role.BROKER:
            self._check_send(CommandType.SEND_RECEIPT)
        frame = encode_send_receipt_frame(
            producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id=highest_sequence_id
        )
        self._frames_sent += 1
        self._bytes_sent += len(frame)
        return frame

    def send_receipts(self, receipts: Iterable[tuple[int, int, int, int, int]]) -> bytes:
        """Broker fast path: the SEND_RECEIPT frames of ``encode_send_receipt_frames`` (producer
        id, sequence id, highest sequence id, ledger id, entry id each), joined."""
        if self.state is not ConnectionState.CONNECTED or self.role is not Role.BROKER:
            self._check_send(CommandType.SEND_RECEIPT)
        frames = encode_send_receipt_frames(receipts)
        data = b"".join(frames)
        self._frames_sent += len(frames)
        self._bytes_sent += len(data)
        return data

    def send_messages(
        self,
        consumer_id: int,
        partition: int,
        messages: Iterable[tuple[object, bytes, int, list[int] | None]],
    ) -> list[bytes]:
        """Broker fast path (dispatch): the MESSAGE frames of ``encode_message_frames`` for one
        consumer, one per message (the caller joins them with its other output)."""
        if self.state is not ConnectionState.CONNECTED or self.role is not Role.BROKER:
            self._check_send(CommandType.MESSAGE)
        frames = encode_message_frames(consumer_id, partition, messages)
        self._frames_sent += len(frames)
        self._bytes_sent += sum(map(len, frames))
        return frames
