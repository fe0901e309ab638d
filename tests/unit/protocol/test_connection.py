"""Connection state machine, direction rules and the typed errors of the codec."""

from __future__ import annotations

import pytest
from support.pulsar_codec import connected_pair

from magnetar.client.protocol import (
    CPP_CLIENT_HANDLED_TYPES,
    DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA,
    ChecksumMismatchError,
    Command,
    CommandType,
    Connection,
    ConnectionClosed,
    ConnectionState,
    EntryView,
    FrameTooLargeError,
    LocalProtocolError,
    MessageId,
    PayloadCommand,
    RemoteProtocolError,
    Role,
    checksum_matches,
    commands,
    encode_command,
    encode_headers_and_payload,
    encode_message_frame,
    encode_payload_command,
    encode_send_receipt_frame,
    entry_metadata,
    pb,
)

METADATA = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1)


def _send_frame(payload: bytes = b"data", sequence_id: int = 3) -> bytes:
    client, _ = connected_pair()
    return client.send_payload(commands.send(1, sequence_id), METADATA, payload)


# ------------------------------------------------------------------------------ checksum


def test_checksum_mismatch_is_a_typed_recoverable_error() -> None:
    _, broker = connected_pair()
    frame = bytearray(_send_frame())
    frame[-1] ^= 0xFF  # corrupt the payload: framing is intact
    broker.receive_data(bytes(frame) + encode_command(commands.ping()))
    with pytest.raises(ChecksumMismatchError) as info:
        broker.next_event()
    err = info.value
    assert isinstance(err, RemoteProtocolError) and err.recoverable
    assert err.expected != err.actual
    # what a broker needs to answer SEND_ERROR(ChecksumError)
    assert err.event.type is CommandType.SEND
    assert (err.event.base.send.producer_id, err.event.base.send.sequence_id) == (1, 3)
    assert err.event.metadata is None
    # the connection goes on with the next frame
    nxt = broker.next_event()
    assert isinstance(nxt, Command) and nxt.type is CommandType.PING
    assert broker.state is ConnectionState.CONNECTED


def test_corrupt_frame_in_the_wrong_direction_is_fatal() -> None:
    client, _ = connected_pair()
    frame = bytearray(_send_frame())
    frame[-1] ^= 0xFF
    client.receive_data(bytes(frame))  # a SEND arriving at a client
    with pytest.raises(RemoteProtocolError, match="cannot be sent by a broker") as info:
        client.next_event()
    assert not isinstance(info.value, ChecksumMismatchError)
    assert client.state is ConnectionState.ERROR


def test_frame_without_checksum_is_accepted() -> None:
    _, broker = connected_pair()
    tail = encode_headers_and_payload(METADATA, b"x", checksum=False)
    broker.receive_data(encode_payload_command(commands.send(1, 3), tail))
    event = broker.next_event()
    assert isinstance(event, PayloadCommand)
    assert event.checksum is None and event.payload == b"x"


def test_client_sends_checksum_only_from_protocol_6() -> None:
    client = Connection(Role.CLIENT)
    broker = Connection(Role.BROKER)
    broker.receive_data(client.send(commands.connect("c", protocol_version=5)))
    broker.next_event()
    client.receive_data(broker.send(commands.connected("b", 5)))
    client.next_event()
    frame = client.send_payload(commands.send(0, 0), METADATA, b"x")
    broker.receive_data(frame)
    event = broker.next_event()
    assert isinstance(event, PayloadCommand) and event.checksum is None


# ------------------------------------------------------------------------------ frame size


def test_oversize_frame_is_a_typed_error_before_buffering_it() -> None:
    _, broker = connected_pair(max_frame_size=1024)
    frame = _send_frame(b"x" * 2000)
    broker.receive_data(frame[:8])  # only the header: the size alone decides
    with pytest.raises(FrameTooLargeError) as info:
        broker.next_event()
    assert info.value.frame_size == len(frame) - 4
    assert info.value.max_frame_size == 1024
    assert broker.state is ConnectionState.ERROR
    with pytest.raises(FrameTooLargeError):  # sticky
        broker.next_event()


def test_default_max_frame_is_5_mib_plus_padding() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 5 * 1024 * 1024 + 10 * 1024
    _, broker = connected_pair()
    big = _send_frame(b"x" * (5 * 1024 * 1024))
    broker.receive_data(big)
    event = broker.next_event()
    assert isinstance(event, PayloadCommand) and len(event.payload) == 5 * 1024 * 1024


# ------------------------------------------------------------------------------ bad frames


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (bytes.fromhex("00000002 0000"), "no command size"),
        (bytes.fromhex("00000005 00000009 08"), "exceeds frame size"),
        (bytes.fromhex("00000006 00000002 0812"), "missing|misses|without"),  # PING, no body
        (bytes.fromhex("00000008 00000004 08129201"), "cannot parse"),  # truncated sub-message
        (bytes.fromhex("0000000a 00000005 0812920100 ff"), "stray bytes"),
        (bytes.fromhex("00000006 00000002 08ff"), "misses required|cannot parse"),
    ],
)
def test_malformed_frames_raise_remote_protocol_error(frame: bytes, match: str) -> None:
    _, broker = connected_pair()
    broker.receive_data(frame)
    with pytest.raises(RemoteProtocolError, match=match):
        broker.next_event()


def test_send_without_payload_section_is_rejected() -> None:
    _, broker = connected_pair()
    broker.receive_data(encode_payload_command(commands.send(0, 0), b""))
    with pytest.raises(RemoteProtocolError, match="no metadata size"):
        broker.next_event()


def test_eof_inside_a_frame_is_an_error_and_on_a_boundary_is_closed() -> None:
    _, broker = connected_pair()
    frame = encode_command(commands.ping())
    broker.receive_data(frame + frame[:3])
    assert isinstance(broker.next_event(), Command)
    broker.receive_data(b"")
    with pytest.raises(RemoteProtocolError, match="inside a frame"):
        broker.next_event()

    _, broker = connected_pair()
    broker.receive_data(frame)
    broker.receive_data(b"")
    assert isinstance(broker.next_event(), Command)
    assert isinstance(broker.next_event(), ConnectionClosed)
    assert broker.state is ConnectionState.CLOSED
    with pytest.raises(LocalProtocolError):
        broker.receive_data(b"more")


# ------------------------------------------------------------------------------ handshake


def test_broker_requires_connect_first() -> None:
    client, _ = connected_pair()
    broker = Connection(Role.BROKER)
    broker.receive_data(client.send(commands.flow(0, 1)))
    with pytest.raises(RemoteProtocolError, match="FLOW received in state awaiting-connect"):
        broker.next_event()


def test_broker_cannot_send_before_connect_or_twice_connected() -> None:
    broker = Connection(Role.BROKER)
    with pytest.raises(LocalProtocolError):
        broker.send(commands.connected("b", 20))
    _, broker = connected_pair()
    with pytest.raises(LocalProtocolError, match="established"):
        broker.send(commands.connected("b", 20))


def test_client_must_connect_first_and_wait_for_connected() -> None:
    client = Connection(Role.CLIENT)
    with pytest.raises(LocalProtocolError):
        client.send(commands.flow(0, 1))
    client.send(commands.connect("c"))
    with pytest.raises(LocalProtocolError):
        client.send(commands.flow(0, 1))
    assert client.state is ConnectionState.CONNECTING


def test_client_accepts_error_during_handshake() -> None:
    client = Connection(Role.CLIENT)
    broker = Connection(Role.BROKER)
    broker.receive_data(client.send(commands.connect("c")))
    broker.next_event()
    client.receive_data(broker.send(commands.error(-1, 3, "auth failed")))
    event = client.next_event()
    assert isinstance(event, Command) and event.type is CommandType.ERROR
    assert event.base.error.request_id == 2**64 - 1


def test_negotiated_versions() -> None:
    client, broker = connected_pair()
    assert broker.peer_protocol_version == 20
    assert broker.protocol_version == client.protocol_version == 20
    assert broker.connect is not None and broker.connect.client_version == "Pulsar-CPP-v4.2.0"


# ------------------------------------------------------------------------------ direction


def test_wrong_direction_is_rejected_both_ways() -> None:
    client, broker = connected_pair()
    with pytest.raises(LocalProtocolError, match="cannot send"):
        client.send(commands.success(1))
    with pytest.raises(LocalProtocolError, match="cannot send"):
        broker.send(commands.flow(0, 1))
    broker.receive_data(encode_command(commands.success(1)))
    with pytest.raises(RemoteProtocolError, match="cannot be sent by a client"):
        broker.next_event()


def test_broker_refuses_types_the_cpp_client_drops_the_connection_for() -> None:
    _, broker = connected_pair()
    eot = commands.make_command(CommandType.REACHED_END_OF_TOPIC, consumer_id=1)
    with pytest.raises(LocalProtocolError, match="not handled"):
        broker.send(eot)
    assert CommandType.REACHED_END_OF_TOPIC not in CPP_CLIENT_HANDLED_TYPES
    # a broker serving a client known to handle it can widen the set
    wide = Connection(Role.BROKER, sendable_types=list(CommandType))
    wide.receive_data(encode_command(commands.connect("ours")))
    wide.next_event()
    wide.send(commands.connected("b", 20))
    assert wide.send(eot)


def test_payload_and_simple_send_apis_are_not_mixed_up() -> None:
    client, _ = connected_pair()
    with pytest.raises(LocalProtocolError):
        client.send(commands.send(0, 0))
    with pytest.raises(LocalProtocolError):
        client.send_payload(commands.flow(0, 1), METADATA, b"")


def test_missing_required_fields_are_local_errors_and_produce_no_bytes() -> None:
    client, _ = connected_pair()
    incomplete = pb.BaseCommand(type=pb.BaseCommand.FLOW)
    incomplete.flow.consumer_id = 1  # messagePermits missing
    with pytest.raises(LocalProtocolError, match="messagePermits"):
        client.send(incomplete)
    body_missing = pb.BaseCommand(type=pb.BaseCommand.FLOW)
    with pytest.raises(LocalProtocolError, match="without"):
        client.send(body_missing)
    with pytest.raises(LocalProtocolError, match="publish_time"):
        client.send_payload(
            commands.send(0, 0), pb.MessageMetadata(producer_name="p", sequence_id=0), b""
        )
    assert client.statistics().frames_sent == 1  # only the CONNECT


# ------------------------------------------------------------------------------ buffering


def test_buffer_is_compacted_and_statistics_count() -> None:
    client, broker = connected_pair()
    frames = b"".join(client.send(commands.flow(i, 1)) for i in range(20000))
    cut = len(frames) // 2 + 3  # leave a partial frame buffered
    broker.receive_data(frames[:cut])
    n = 0
    while broker.next_event() is not NEED_DATA:
        n += 1
    assert 0 < broker.statistics().buffered_bytes < 20
    broker.receive_data(frames[cut:])
    # the consumed half was dropped instead of growing the buffer to the whole stream
    assert len(broker._data) + sum(map(len, broker._more)) < len(frames) - cut + 20
    while broker.next_event() is not NEED_DATA:
        n += 1
    assert n == 20000
    stats = broker.statistics()
    assert stats.frames_received == 20001  # + CONNECT
    assert stats.buffered_bytes == 0
    connect = encode_command(commands.connect("Pulsar-CPP-v4.2.0"))
    assert stats.bytes_received == len(frames) + len(connect)
    assert "broker connected" in repr(broker)


def test_send_message_fast_path_requires_a_connected_broker() -> None:
    client, broker = connected_pair()
    with pytest.raises(LocalProtocolError):
        client.send_message(0, 1, 2, b"")
    with pytest.raises(LocalProtocolError):
        Connection(Role.BROKER).send_message(0, 1, 2, b"")
    tail = encode_headers_and_payload(METADATA, b"v")
    client.receive_data(broker.send_message(5, 1, 2, tail, partition=3, redelivery_count=2))
    event = client.next_event()
    assert isinstance(event, PayloadCommand)
    m = event.base.message
    assert (m.consumer_id, m.message_id.ledgerId, m.message_id.entryId) == (5, 1, 2)
    assert (m.message_id.partition, m.redelivery_count) == (3, 2)
    assert event.headers_and_payload == tail and event.payload == b"v"


def test_broker_entry_metadata_prefix_is_stripped_on_message() -> None:
    client, _ = connected_pair()
    bem = pb.BrokerEntryMetadata(broker_timestamp=123, index=9).SerializeToString()
    tail = encode_headers_and_payload(METADATA, b"v")
    prefix = b"\x0e\x02" + len(bem).to_bytes(4, "big") + bem
    message = commands.message(1, pb.MessageIdData(ledgerId=1, entryId=2))
    client.receive_data(encode_payload_command(message, prefix + tail))
    event = client.next_event()
    assert isinstance(event, PayloadCommand)
    assert event.broker_entry_metadata is not None
    assert event.broker_entry_metadata.index == 9
    assert event.headers_and_payload == tail and event.payload == b"v"


def test_entry_view_parse_reads_stored_send_tails() -> None:
    _, broker = connected_pair()
    broker.receive_data(_send_frame(b"stored"))
    event = broker.next_event()
    assert isinstance(event, PayloadCommand)
    entry = EntryView.parse(event.headers_and_payload)
    assert entry.metadata == event.metadata and entry.payload == b"stored"
    assert entry.num_messages == 1 and entry.checksum == event.checksum
    view = event.entry  # the frame decoder's split, nothing parsed again
    assert view.metadata is event.metadata and view.payload == b"stored"
    assert (view.metadata_offset, view.payload_offset) == (
        entry.metadata_offset,
        entry.payload_offset,
    )
    batch_md = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0)
    batch_md.num_messages_in_batch = 5
    assert EntryView.parse(encode_headers_and_payload(batch_md, b"")).num_messages == 5
    corrupt = bytearray(event.headers_and_payload)
    corrupt[-1] ^= 1
    with pytest.raises(RemoteProtocolError, match="checksum"):
        EntryView.parse(bytes(corrupt))
    assert EntryView.parse(bytes(corrupt), verify_checksum=False).payload != b"stored"
    assert not EntryView(bytes(corrupt)).checksum_ok and entry.checksum_ok
    with pytest.raises(RemoteProtocolError):
        EntryView.parse(b"\x00\x00")


def test_entry_metadata_agrees_with_entry_view_and_refuses_what_it_refuses() -> None:
    """The broker's per-SEND parse (``entry_metadata``) gives ``EntryView.parse``'s metadata
    and payload offset, and refuses the same malformed bytes with the same messages."""
    md = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1)
    md.num_messages_in_batch = 3
    for checksum in (True, False):
        tail = encode_headers_and_payload(md, b"payload", checksum=checksum)
        got, payload_at = entry_metadata(tail)
        entry = EntryView.parse(tail)
        assert got == entry.metadata and payload_at == entry.payload_offset
        assert tail[payload_at:] == b"payload"
        assert entry_metadata(memoryview(tail))[0] == got
    missing = pb.MessageMetadata(producer_name="p", sequence_id=7)  # no publish_time
    raw = missing.SerializePartialToString()
    bad = [
        b"\x0e\x01\x00",  # truncated checksum
        b"\x00\x00",  # no metadata size
        b"\x00\x00\x00\x09abc",  # metadata size beyond the bytes
        b"\x00\x00\x00\x03\xff\xff\xff",  # not a MessageMetadata
        len(raw).to_bytes(4, "big") + raw,  # required field missing
    ]
    for data in bad:
        with pytest.raises(RemoteProtocolError) as theirs:
            EntryView.parse(data, verify_checksum=False)
        with pytest.raises(RemoteProtocolError) as ours:
            entry_metadata(data)
        assert str(ours.value) == str(theirs.value)


# ------------------------------------------------------------------------------ next_command


def test_next_command_leaves_the_payload_section_to_the_caller() -> None:
    """The broker's hot path: the BaseCommand, and a SEND's tail as framed, undecoded (its
    metadata and checksum are the caller's: ``entry_metadata``, ``checksum_matches``)."""
    _, broker = connected_pair()
    good = _send_frame(b"v", sequence_id=4)
    bad_metadata = encode_payload_command(commands.send(1, 5), b"\x00\x00\x00\x03\xff\xff\xff")
    corrupt = bytearray(_send_frame(b"w", sequence_id=6))
    corrupt[-1] ^= 0xFF
    broker.receive_data(good + bad_metadata + bytes(corrupt) + encode_command(commands.ping()))
    first = broker.next_command()
    assert isinstance(first, pb.BaseCommand) and first.send.sequence_id == 4
    tail = broker.headers_and_payload
    assert checksum_matches(tail) and entry_metadata(tail)[0] == METADATA
    assert tail == good[len(good) - len(tail) :]
    second = broker.next_command()
    assert isinstance(second, pb.BaseCommand) and second.send.sequence_id == 5
    assert checksum_matches(broker.headers_and_payload)  # no checksum section
    with pytest.raises(RemoteProtocolError):
        entry_metadata(broker.headers_and_payload)
    third = broker.next_command()
    assert isinstance(third, pb.BaseCommand) and third.send.sequence_id == 6
    assert not checksum_matches(broker.headers_and_payload)
    ping = broker.next_command()
    assert isinstance(ping, pb.BaseCommand) and ping.type == pb.BaseCommand.PING
    assert broker.headers_and_payload == b""
    assert broker.next_command() is NEED_DATA
    assert broker.statistics().frames_received == 5  # + CONNECT


def test_next_command_checks_direction_state_and_size_as_next_event() -> None:
    broker = Connection(Role.BROKER)
    broker.receive_data(encode_command(commands.flow(0, 1)))
    with pytest.raises(RemoteProtocolError, match="FLOW received in state awaiting-connect"):
        broker.next_command()
    with pytest.raises(RemoteProtocolError):  # sticky
        broker.next_command()
    _, broker = connected_pair()
    broker.receive_data(encode_command(commands.success(1)))
    with pytest.raises(RemoteProtocolError, match="cannot be sent by a client"):
        broker.next_command()
    _, broker = connected_pair()
    broker.receive_data(encode_command(commands.connect("again")))
    with pytest.raises(RemoteProtocolError, match="established"):
        broker.next_command()
    _, broker = connected_pair(max_frame_size=64)
    broker.receive_data(b"\x00\x00\x01\x00")
    with pytest.raises(FrameTooLargeError):
        broker.next_command()


def test_a_frame_too_small_for_a_command_size_is_refused_from_its_header() -> None:
    _, broker = connected_pair()
    broker.receive_data(b"\x00\x00\x00\x02")  # the 2 bytes it announces never come
    with pytest.raises(RemoteProtocolError, match="no command size"):
        broker.next_event()


def test_checksum_matches_refuses_headers_it_cannot_read() -> None:
    tail = encode_headers_and_payload(METADATA, b"x")
    assert checksum_matches(tail)
    assert checksum_matches(encode_headers_and_payload(METADATA, b"x", checksum=False))
    assert not checksum_matches(tail[:-1] + b"y")
    for short in (b"\x0e\x01\x00", b"\x0e\x01\x00\x00\x00\x00\x00", b"\x00\x00"):
        with pytest.raises(RemoteProtocolError):
            checksum_matches(short)


def test_a_large_frame_in_small_reads_is_joined_once() -> None:
    """The reads of an incomplete frame are kept apart and joined when it is complete (not
    re-joined on every read: quadratic for a 5 MiB frame in 64 KiB reads)."""
    _, broker = connected_pair()
    frame = _send_frame(b"x" * 200_000)
    chunks = [frame[i : i + 1000] for i in range(0, len(frame), 1000)]
    for chunk in chunks[:-1]:
        broker.receive_data(chunk)
        assert broker.next_command() is NEED_DATA
        assert len(broker._data) <= 1000
    assert broker.buffered_bytes == len(frame) - len(chunks[-1])
    broker.receive_data(chunks[-1])
    event = broker.next_event()
    assert isinstance(event, PayloadCommand) and event.payload == b"x" * 200_000
    assert broker.buffered_bytes == 0


def test_batch_fast_paths_equal_the_single_frame_ones() -> None:
    client, broker = connected_pair()
    receipts = [(1, 5, 5, 7, 0), (1, 6, 8, 7, 1), (2, 0, 0, 8, 0), (2, 1, 1, 2**64 - 1, 2**64 - 1)]
    frames = broker.send_receipts(receipts)
    assert frames == b"".join(
        encode_send_receipt_frame(p, s, lg, e, highest_sequence_id=h) for p, s, h, lg, e in receipts
    )
    tail = encode_headers_and_payload(METADATA, b"v")
    messages = [(MessageId(7, 0), tail, 0, None), (MessageId(7, 1), tail, 2, [3])]
    out = broker.send_messages(4, 1, messages)
    assert out == [
        encode_message_frame(4, 7, 0, tail, partition=1),
        encode_message_frame(4, 7, 1, tail, partition=1, redelivery_count=2, ack_set=[3]),
    ]
    stats = broker.statistics()
    assert stats.frames_sent == 1 + 4 + 2  # + CONNECTED
    assert stats.bytes_sent == len(encode_command(commands.connected("Magnetar", 20))) + len(
        frames
    ) + sum(map(len, out))
    with pytest.raises(LocalProtocolError):
        client.send_receipts(receipts)
    with pytest.raises(LocalProtocolError):
        Connection(Role.BROKER).send_messages(4, 1, messages)
