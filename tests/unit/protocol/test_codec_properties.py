"""Property tests: every command type round-trips; garbage only ever gives RemoteProtocolError.

Commands are generated from the proto descriptors (required fields always set, optional ones
sometimes, nested messages to a bounded depth), so all 58 command types are covered.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.pulsar_codec import connected_pair

from magnetar.client.protocol import (
    FIELD_NAME,
    NEED_DATA,
    PAYLOAD_TYPES,
    ChecksumMismatchError,
    CommandType,
    Connection,
    ConnectionClosed,
    PayloadCommand,
    RemoteProtocolError,
    Role,
    commands,
    decode_frame_body,
    encode_command,
    encode_headers_and_payload,
    encode_message_frame,
    encode_payload_command,
    encode_send_receipt_frame,
    pb,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_INT_RANGES = {
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
}


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    t = field.type
    if t in _INT_RANGES:
        lo, hi = _INT_RANGES[t]
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, 1, -1 if lo else 1]))
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t == FieldDescriptor.TYPE_STRING:
        return st.text(max_size=20)
    if t == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=20)
    if t == FieldDescriptor.TYPE_DOUBLE:
        return st.floats(allow_nan=False)
    if t == FieldDescriptor.TYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    raise AssertionError(f"unhandled field type {t}")


@st.composite
def message_of(draw: st.DrawFn, descriptor: Descriptor, depth: int = 0) -> dict[str, Any]:
    """Keyword arguments building a complete message of ``descriptor``."""
    out: dict[str, Any] = {}
    for field in descriptor.fields:
        is_message = field.type == FieldDescriptor.TYPE_MESSAGE
        if field.is_repeated:
            if is_message and depth >= 2:
                continue
            item = message_of(field.message_type, depth + 1) if is_message else _scalar(field)
            values = draw(st.lists(item, max_size=3))
            if values:
                out[field.name] = values
            continue
        required = field.is_required
        if not required and ((depth >= 2 and is_message) or not draw(st.booleans())):
            continue
        if is_message:
            out[field.name] = draw(message_of(field.message_type, depth + 1))
        else:
            out[field.name] = draw(_scalar(field))
    return out


@st.composite
def base_commands(draw: st.DrawFn, types: list[CommandType] | None = None) -> pb.BaseCommand:
    ctype = draw(st.sampled_from(types or list(CommandType)))
    body_cls: type[Message] = type(getattr(pb.BaseCommand(), FIELD_NAME[ctype]))
    fields = draw(message_of(body_cls.DESCRIPTOR))
    return commands.make_command(ctype, body_cls(**fields))


metadata_st = message_of(pb.MessageMetadata.DESCRIPTOR).map(lambda kw: pb.MessageMetadata(**kw))
NON_PAYLOAD = [t for t in CommandType if t not in PAYLOAD_TYPES]


@SETTINGS
@given(base_commands(NON_PAYLOAD))
def test_every_simple_command_round_trips(base: pb.BaseCommand) -> None:
    frame = encode_command(base)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    event = decode_frame_body(frame[4:])
    assert event.type == base.type
    assert event.base == base
    assert event.command == getattr(base, FIELD_NAME[event.type])


@SETTINGS
@given(
    base_commands([CommandType.SEND, CommandType.MESSAGE]),
    metadata_st,
    st.binary(max_size=300),
    st.booleans(),
)
def test_payload_commands_round_trip(
    base: pb.BaseCommand, metadata: pb.MessageMetadata, payload: bytes, checksum: bool
) -> None:
    tail = encode_headers_and_payload(metadata, payload, checksum=checksum)
    event = decode_frame_body(encode_payload_command(base, tail)[4:])
    assert isinstance(event, PayloadCommand)
    assert event.base == base
    assert event.metadata == metadata
    assert event.payload == payload
    assert event.headers_and_payload == tail
    assert event.metadata_bytes == metadata.SerializeToString()


@SETTINGS
@given(
    consumer_id=st.integers(0, 2**64 - 1),
    ledger_id=st.integers(-1, 2**63 - 1),
    entry_id=st.integers(-1, 2**63 - 1),
    partition=st.integers(-(2**31), 2**31 - 1),
    redelivery_count=st.integers(0, 2**32 - 1),
    ack_set=st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4),
    batch_index=st.none() | st.integers(-(2**31), 2**31 - 1),
    consumer_epoch=st.none() | st.integers(0, 2**64 - 1),
    tail=st.binary(max_size=40),
)
def test_message_fast_path_matches_protobuf(  # noqa: PLR0917 - one argument per field
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    partition: int,
    redelivery_count: int,
    ack_set: list[int],
    batch_index: int | None,
    consumer_epoch: int | None,
    tail: bytes,
) -> None:
    msg = pb.CommandMessage(consumer_id=consumer_id, redelivery_count=redelivery_count)
    msg.message_id.ledgerId = ledger_id % 2**64
    msg.message_id.entryId = entry_id % 2**64
    msg.message_id.partition = partition
    if batch_index is not None:
        msg.message_id.batch_index = batch_index
    msg.ack_set.extend(ack_set)
    if redelivery_count == 0:
        msg.ClearField("redelivery_count")  # Java omits a zero count; so do we
    if consumer_epoch is not None:
        msg.consumer_epoch = consumer_epoch
    base = commands.make_command(CommandType.MESSAGE, msg)
    fast = encode_message_frame(
        consumer_id,
        ledger_id,
        entry_id,
        tail,
        partition=partition,
        redelivery_count=redelivery_count,
        ack_set=ack_set,
        batch_index=batch_index,
        consumer_epoch=consumer_epoch,
    )
    assert fast == encode_payload_command(base, tail)


@SETTINGS
@given(
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**64 - 1),
    st.integers(-1, 2**63 - 1),
    st.integers(-1, 2**63 - 1),
    st.none() | st.integers(0, 2**64 - 1),
)
def test_send_receipt_fast_path_matches_protobuf(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest: int | None
) -> None:
    mid = pb.MessageIdData(ledgerId=ledger_id % 2**64, entryId=entry_id % 2**64)
    base = commands.send_receipt(producer_id, sequence_id, mid, highest_sequence_id=highest)
    fast = encode_send_receipt_frame(
        producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id=highest
    )
    assert fast == encode_command(base)


@SETTINGS
@given(st.lists(base_commands(NON_PAYLOAD), min_size=1, max_size=5), st.data())
def test_stream_of_frames_split_anywhere(frames: list[pb.BaseCommand], data: st.DataObject) -> None:
    blob = b"".join(encode_command(b) for b in frames)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(blob)), max_size=6)))
    chunks = [blob[a:b] for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=True)]
    bodies: list[bytes] = []
    pos = 0
    # Decode with the stateless frame decoder driven by a hand-rolled splitter...
    while pos < len(blob):
        size = int.from_bytes(blob[pos : pos + 4], "big")
        bodies.append(blob[pos + 4 : pos + 4 + size])
        pos += 4 + size
    # ...and with a Connection fed arbitrary chunks; both must agree.
    conn = Connection(Role.BROKER, sendable_types=())
    conn._on_receive = lambda t, base: None  # type: ignore[method-assign]  # no direction rules
    seen: list[pb.BaseCommand] = []
    for chunk in chunks:
        if not chunk:
            continue  # b"" would mean EOF
        conn.receive_data(chunk)
        while (event := conn.next_event()) is not NEED_DATA:
            assert not isinstance(event, ConnectionClosed)
            seen.append(event.base)
    assert seen == frames == [decode_frame_body(b).base for b in bodies]


# ------------------------------------------------------------------------------ fuzzing


def _drain(conn: Connection, data: bytes) -> None:
    """Feed data then EOF; only typed RemoteProtocolError may escape, and it must end."""
    conn.receive_data(data)
    for _ in range(len(data) + 4):
        try:
            event = conn.next_event()
        except ChecksumMismatchError:
            continue
        except RemoteProtocolError:
            return
        if event is NEED_DATA:
            break
    conn.receive_data(b"")
    for _ in range(len(data) + 4):
        try:
            event = conn.next_event()
        except ChecksumMismatchError:
            continue
        except RemoteProtocolError:
            return
        assert event is not NEED_DATA
        if isinstance(event, ConnectionClosed):
            return
    raise AssertionError("decoder did not terminate")


def _valid_stream() -> bytes:
    client, _ = connected_pair()
    fresh = Connection(Role.CLIENT)
    parts = [
        fresh.send(commands.connect("Pulsar-CPP-v4.2.0")),
        client.send(commands.partitioned_metadata("persistent://public/default/t", 1)),
        client.send(commands.producer("persistent://public/default/t", 0, 2)),
        client.send_payload(
            commands.send(0, 0),
            pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1),
            b"payload",
        ),
        client.send(commands.flow(0, 1000)),
        client.send(commands.ping()),
    ]
    return b"".join(parts)


VALID = _valid_stream()

mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "cut", "insert", "dup"]),
        st.integers(0, len(VALID) - 1),
        st.integers(0, 255),
    ),
    min_size=1,
    max_size=4,
)


def _mutate(data: bytes, ops: list[tuple[str, int, int]]) -> bytes:
    buf = bytearray(data)
    for op, raw_pos, value in ops:
        pos = raw_pos % max(len(buf), 1)
        if op == "flip":
            buf[pos] ^= 1 << (value % 8)
        elif op == "set":
            buf[pos] = value
        elif op == "cut":
            del buf[pos : pos + value % 16 + 1]
        elif op == "insert":
            buf[pos:pos] = bytes([value])
        elif op == "dup":
            buf[pos:pos] = buf[pos : pos + value % 32]
        if not buf:
            break
    return bytes(buf)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_only_raises_remote_protocol_error(data: bytes) -> None:
    _drain(Connection(Role.BROKER), data)
    _drain(Connection(Role.CLIENT), data)


@settings(max_examples=400, deadline=None)
@given(mutations)
def test_mutated_valid_frames_only_raise_remote_protocol_error(
    ops: list[tuple[str, int, int]],
) -> None:
    _drain(Connection(Role.BROKER, max_frame_size=4096), _mutate(VALID, ops))


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=4, max_size=120))
def test_garbage_after_a_valid_prefix(data: bytes) -> None:
    _drain(Connection(Role.BROKER), VALID + data)
