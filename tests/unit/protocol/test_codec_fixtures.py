"""One table of (command, exact bytes) drives both the encoder and the decoder.

The bytes were assembled by hand from the protobuf encoding rules (tags, varints, lengths) and
the framing in reference/pulsar-protocol.md §1; PING/PONG are the reference's worked example
(§1.6). Each frame is decoded whole, one byte at a time, and followed by the start of the
next frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from support.pulsar_codec import connected_pair

from magnetar.client.protocol import (
    NEED_DATA,
    Command,
    CommandType,
    Connection,
    ConnectionState,
    MessageId,
    PayloadCommand,
    Role,
    ServerError,
    commands,
    crc32c,
    encode_command,
    pb,
)

C2B = "client->broker"
B2C = "broker->client"

# MessageMetadata{producer_name="p", sequence_id=0, publish_time=1} and payload "hi"
METADATA = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
META_TAIL = bytes.fromhex("000000070a017010001801") + b"hi"
CRC_TAIL = b"\x0e\x01" + crc32c(META_TAIL).to_bytes(4, "big") + META_TAIL


@dataclass(frozen=True)
class Fixture:
    name: str
    direction: str
    command: pb.BaseCommand
    frame: bytes
    metadata: pb.MessageMetadata | None = None
    payload: bytes = b""
    checksum: bool = False


def h(text: str) -> bytes:
    return bytes.fromhex(text.replace(" ", ""))


FIXTURES = [
    Fixture("ping", B2C, commands.ping(), h("00000009 00000005 0812 9201 00")),
    Fixture("pong", C2B, commands.pong(), h("00000009 00000005 0813 9a01 00")),
    Fixture(
        "success",
        B2C,
        commands.success(7),
        h("0000000a 00000006 080d 6a02 0807"),
    ),
    Fixture(
        "error",
        B2C,
        commands.error(1, ServerError.ConsumerBusy, "busy"),
        h("00000012 0000000e 080e 720a 0801 1005 1a04 62757379"),
    ),
    Fixture(
        "flow",
        C2B,
        commands.flow(0, 1000),
        h("0000000d 00000009 080b 5a05 0800 10e807"),
    ),
    Fixture(
        "partitioned_metadata_response",
        B2C,
        commands.partitioned_metadata_response(3, 0),
        # partitions=0, request_id=3, response=Success: all explicitly present
        h("0000000f 0000000b 0816 b201 06 0800 1003 1800"),
    ),
    Fixture(
        "lookup_response",
        B2C,
        commands.lookup_response(2, "pulsar://h:1"),
        h("0000001f 0000001b 0818 c201 160a0c" + b"pulsar://h:1".hex() + "1801 2002 2801 4000"),
    ),
    Fixture(
        "producer_success",
        B2C,
        commands.producer_success(1, "p"),
        # last_sequence_id = -1 is a 10-byte varint
        h("00000019 00000015 0811 8a01 10 0801 120170 18ffffffffffffffffff01"),
    ),
    Fixture(
        "send_receipt",
        B2C,
        commands.send_receipt(0, 5, MessageId(7, 9, partition=3)),
        # only ledgerId + entryId in the receipt, like Java
        h("00000012 0000000e 0807 3a0a 0800 1005 1a04 0807 1009"),
    ),
    Fixture(
        "send_error",
        B2C,
        commands.send_error(1, 2, ServerError.ChecksumError, "x"),
        h("00000011 0000000d 0808 4209 0801 1002 1809 220178"),
    ),
    Fixture(
        "ack_response_with_error",
        B2C,
        commands.ack_response(3, 4, error=ServerError.ConsumerNotFound, message="nf"),
        # consumer_id, error, message, request_id (field 6); BaseCommand field 38: tag b202
        h("00000013 0000000f 0826 b202 0a 0803 200d 2a02" + b"nf".hex() + "3004"),
    ),
    Fixture(
        "active_consumer_change",
        B2C,
        commands.active_consumer_change(5, True),
        h("0000000d 00000009 081f fa01 04 0805 1001"),
    ),
    Fixture(
        "get_topics_of_namespace_response",
        B2C,
        commands.get_topics_of_namespace_response(6, ["a"], filtered=False, changed=True),
        h("00000012 0000000e 0821 8a02 09 0806 120161 1800 2801"),
    ),
    Fixture(
        "lookup_error",
        B2C,
        commands.lookup_error(2, ServerError.ServiceNotReady, "no"),
        # response=Failed (2), request_id, error, message
        h("00000013 0000000f 0818 c201 0a 1802 2002 3006 3a02" + b"no".hex()),
    ),
    Fixture(
        "consumer_stats_error",
        B2C,
        commands.consumer_stats_error(7, ServerError.ConsumerNotFound, "nf"),
        h("00000011 0000000d 081a d201 08 0807 100d 1a02" + b"nf".hex()),
    ),
    Fixture(
        "close_consumer_from_broker",
        B2C,
        commands.close_consumer(4),
        # request_id -1 travels as 2^64-1
        h("00000016 00000012 0810 8201 0d 0804 10ffffffffffffffffff01"),
    ),
    Fixture(
        "ack",
        C2B,
        commands.ack(1, [(7, 2)]),
        h("00000012 0000000e 080a 520a 0801 1000 1a04 0807 1002"),
    ),
    Fixture(
        "send_without_checksum",
        C2B,
        commands.send(0, 0),
        h("00000019 00000008 0806 3204 0800 1000") + META_TAIL,
        METADATA,
        b"hi",
    ),
    Fixture(
        "send_with_checksum",
        C2B,
        commands.send(0, 0),
        h("0000001f 00000008 0806 3204 0800 1000") + CRC_TAIL,
        METADATA,
        b"hi",
        checksum=True,
    ),
    Fixture(
        "message",
        B2C,
        commands.message(1, MessageId(7, 0)),
        # message_id{ledgerId 7, entryId 0, partition -1}
        h("0000002e 00000017 0809 4a13 0801 120f 0807 1000 18ffffffffffffffffff01") + CRC_TAIL,
        METADATA,
        b"hi",
        checksum=True,
    ),
]

# Sent only to clients other than the C++ client core (outside CPP_CLIENT_HANDLED_TYPES)
WIDE_FIXTURES = [
    Fixture(
        "reached_end_of_topic",
        B2C,
        commands.reached_end_of_topic(3),
        h("0000000b 00000007 081b da01 02 0803"),
    ),
    Fixture(
        "get_or_create_schema_response",
        B2C,
        commands.get_or_create_schema_response(4, b"\x00\x01"),
        # request_id, schema_version (field 4); BaseCommand field 40: tag c202
        h("0000000f 0000000b 0828 c202 06 0804 2202 0001"),
    ),
]

HANDSHAKE_FIXTURES = [
    Fixture(
        "connect_as_cpp_4_2_0",
        C2B,
        commands.connect("Pulsar-CPP-v4.2.0"),
        h(
            "00000029 00000025 0802 1221"
            "0a11" + b"Pulsar-CPP-v4.2.0".hex() + "2014 2a04" + b"none".hex() + "5204 0801 1001"
        ),
    ),
    Fixture(
        "connected",
        B2C,
        commands.connected("S", 20),
        # server_version "S", protocol_version 20, max_message_size 5 MiB
        h("00000012 0000000e 0803 1a0a 0a0153 1014 188080c002"),
    ),
]

NEXT_FRAME_START = h("00000009 0000")  # the start of another frame: must stay buffered


def _sides(direction: str) -> tuple[Connection, Connection]:
    client, broker = connected_pair()
    return (client, broker) if direction == C2B else (broker, client)


def _encode(sender: Connection, fx: Fixture) -> bytes:
    ctype = CommandType(fx.command.type)
    if ctype is CommandType.MESSAGE:
        mid = fx.command.message.message_id
        return sender.send_message(
            fx.command.message.consumer_id, mid.ledgerId, mid.entryId, CRC_TAIL
        )
    if ctype is CommandType.SEND_RECEIPT:
        r = fx.command.send_receipt
        fast = sender.send_receipt(
            r.producer_id, r.sequence_id, r.message_id.ledgerId, r.message_id.entryId
        )
        assert fast == sender.send(fx.command)
        return fast
    if fx.metadata is not None:
        return sender.send_payload(fx.command, fx.metadata, fx.payload, checksum=fx.checksum)
    return sender.send(fx.command)


def _check_event(event: object, fx: Fixture) -> None:
    assert isinstance(event, Command)
    assert event.type == CommandType(fx.command.type)
    assert event.base == fx.command
    if fx.metadata is None:
        assert not isinstance(event, PayloadCommand)
        return
    assert isinstance(event, PayloadCommand)
    assert event.metadata == fx.metadata
    assert event.payload == fx.payload
    assert (event.checksum is not None) == fx.checksum
    tail = fx.frame[8 + len(fx.command.SerializeToString()) :]
    assert event.headers_and_payload == tail


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda f: f.name)
def test_encoder_produces_the_fixture_bytes(fx: Fixture) -> None:
    sender, _ = _sides(fx.direction)
    assert _encode(sender, fx) == fx.frame


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda f: f.name)
def test_decoder_whole_frame(fx: Fixture) -> None:
    _, receiver = _sides(fx.direction)
    receiver.receive_data(fx.frame)
    _check_event(receiver.next_event(), fx)
    assert receiver.next_event() is NEED_DATA


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda f: f.name)
def test_decoder_byte_by_byte(fx: Fixture) -> None:
    _, receiver = _sides(fx.direction)
    for i, byte in enumerate(fx.frame):
        assert receiver.next_event() is NEED_DATA, f"event before byte {i}"
        receiver.receive_data(bytes([byte]))
    _check_event(receiver.next_event(), fx)
    assert receiver.next_event() is NEED_DATA


@pytest.mark.parametrize("fx", FIXTURES, ids=lambda f: f.name)
def test_decoder_with_trailing_bytes(fx: Fixture) -> None:
    _, receiver = _sides(fx.direction)
    receiver.receive_data(fx.frame + NEXT_FRAME_START)
    _check_event(receiver.next_event(), fx)
    assert receiver.next_event() is NEED_DATA
    assert receiver.statistics().buffered_bytes == len(NEXT_FRAME_START)
    receiver.receive_data(h("0005 0812 9201 00") if fx.direction == B2C else h("0005 0813 9a01 00"))
    follow = receiver.next_event()
    assert isinstance(follow, Command)
    assert follow.type in (CommandType.PING, CommandType.PONG)


def test_handshake_fixtures_both_ways() -> None:
    connect, connected = HANDSHAKE_FIXTURES
    client, broker = Connection(Role.CLIENT), Connection(Role.BROKER)
    assert client.send(connect.command) == connect.frame
    assert client.state is ConnectionState.CONNECTING
    for byte in connect.frame:
        broker.receive_data(bytes([byte]))
    _check_event(broker.next_event(), connect)
    assert broker.state is ConnectionState.CONNECTING
    assert broker.peer_protocol_version == 20
    assert broker.send(connected.command) == connected.frame
    assert broker.state is ConnectionState.CONNECTED
    client.receive_data(connected.frame + NEXT_FRAME_START)
    _check_event(client.next_event(), connected)
    assert client.state is ConnectionState.CONNECTED
    assert client.protocol_version == broker.protocol_version == 20
    assert client.next_event() is NEED_DATA


def test_message_fast_path_equals_protobuf_encoding() -> None:
    fx = next(f for f in FIXTURES if f.name == "message")
    from magnetar.client.protocol import encode_payload_command

    assert encode_payload_command(fx.command, CRC_TAIL) == fx.frame


@pytest.mark.parametrize("fx", WIDE_FIXTURES, ids=lambda f: f.name)
def test_commands_outside_the_cpp_set_need_a_wider_broker(fx: Fixture) -> None:
    client, _ = connected_pair()
    wide = Connection(Role.BROKER, sendable_types=list(CommandType))
    wide.receive_data(encode_command(commands.connect("Pulsar-Java-v4.0.0")))
    wide.next_event()
    wide.send(commands.connected("b", 20))
    assert wide.send(fx.command) == fx.frame
    client.receive_data(fx.frame)
    _check_event(client.next_event(), fx)
    assert client.next_event() is NEED_DATA
