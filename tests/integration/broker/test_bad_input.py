"""Bad input over real sockets: each case gets Pulsar's error or a closed connection, the
broker keeps running and other connections keep working."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import crc32c
import pytest
from support.broker import InProcessBroker
from support.raw_client import RawClient, T

from magnetar.client.protocol.proto import pulsar_api_pb2 as pb


@pytest.fixture(scope="module")
def broker() -> Iterator[InProcessBroker]:
    b = InProcessBroker(allow_auto_topic_creation=False).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def healthy(broker: InProcessBroker) -> Iterator[RawClient]:
    c = RawClient(broker.port)
    c.connect()
    try:
        yield c
    finally:
        c.close()


def test_handshake_advertises_version_and_max_message_size(broker: InProcessBroker) -> None:
    c = RawClient(broker.port)
    got = c.connect()
    assert got.connected.server_version
    assert got.connected.protocol_version == 20
    assert got.connected.max_message_size == 5 * 1024 * 1024
    c.ping_pong()
    c.close()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff" * 64,  # absurd frame size
        struct.pack(">II", 12, 8) + b"\x99" * 8,  # not a protobuf BaseCommand
        struct.pack(">II", 8, 100) + b"\x00" * 4,  # command size beyond the frame
        struct.pack(">I", 2) + b"\x00\x00",  # frame smaller than its command size field
    ],
    ids=["huge-size", "bad-protobuf", "cmd-size-overflow", "tiny-frame"],
)
def test_garbage_closes_only_that_connection(
    broker: InProcessBroker, healthy: RawClient, garbage: bytes
) -> None:
    bad = RawClient(broker.port)
    bad.connect()
    bad.send_raw(garbage)
    assert bad.is_closed()
    healthy.ping_pong()


def test_command_before_connect_closes(broker: InProcessBroker, healthy: RawClient) -> None:
    bad = RawClient(broker.port)
    bad.send(T(type=T.PING, ping=pb.CommandPing()))
    assert bad.is_closed()
    healthy.ping_pong()


def test_oversize_frame_closes(broker: InProcessBroker, healthy: RawClient) -> None:
    bad = RawClient(broker.port)
    bad.connect()
    bad.send_raw(struct.pack(">I", 5 * 1024 * 1024 + 10 * 1024 + 1))
    assert bad.is_closed()
    healthy.ping_pong()


def test_unsupported_and_unknown_commands_close(
    broker: InProcessBroker, healthy: RawClient
) -> None:
    bad = RawClient(broker.port)
    bad.connect()
    bad.send(T(type=T.NEW_TXN, newTxn=pb.CommandNewTxn(request_id=1)))
    assert bad.is_closed()
    unknown = RawClient(broker.port)
    unknown.connect()
    unknown.send_raw(struct.pack(">II", 7, 3) + b"\x08\xe7\x07")  # type 999
    assert unknown.is_closed()
    healthy.ping_pong()


@pytest.mark.parametrize(
    "name",
    ["persistent://public", "bogus://public/default/t", "persistent://pub lic/default/t", ""],
)
def test_bad_topic_names(healthy: RawClient, name: str) -> None:
    healthy.send(T(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic=name, request_id=7)))
    got = healthy.recv()
    assert got.type == T.LOOKUP_RESPONSE
    assert got.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
    assert got.lookupTopicResponse.error == pb.InvalidTopicName
    healthy.send(
        T(type=T.PRODUCER, producer=pb.CommandProducer(topic=name, producer_id=1, request_id=8))
    )
    got = healthy.recv()
    assert got.type == T.ERROR and got.error.error == pb.InvalidTopicName
    assert got.error.request_id == 8


def test_missing_topic_without_auto_creation(healthy: RawClient) -> None:
    healthy.send(
        T(
            type=T.SUBSCRIBE,
            subscribe=pb.CommandSubscribe(
                topic="persistent://public/default/nope",
                subscription="s",
                subType=pb.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=3,
            ),
        )
    )
    got = healthy.recv()
    assert got.type == T.ERROR
    assert got.error.error == pb.TopicNotFound and got.error.request_id == 3
    healthy.send(
        T(
            type=T.LOOKUP,
            lookupTopic=pb.CommandLookupTopic(topic="persistent://nobody/none/t", request_id=4),
        )
    )
    got = healthy.recv()
    assert got.lookupTopicResponse.response == pb.CommandLookupTopicResponse.Failed
    assert got.lookupTopicResponse.error == pb.TopicNotFound


def test_bad_checksum_gets_send_error_and_connection_survives(broker: InProcessBroker) -> None:
    assert broker.service is not None
    service = broker.service
    broker.call(lambda: service.create_topic("persistent://public/default/ck"))
    c = RawClient(broker.port)
    c.connect()
    c.send(
        T(
            type=T.PRODUCER,
            producer=pb.CommandProducer(
                topic="persistent://public/default/ck", producer_id=0, request_id=1
            ),
        )
    )
    assert c.recv().type == T.PRODUCER_SUCCESS
    md = pb.MessageMetadata(producer_name="x", sequence_id=0, publish_time=1).SerializeToString()
    body = struct.pack(">I", len(md)) + md + b"payload"
    good = b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(body)) + body
    bad = b"\x0e\x01" + struct.pack(">I", crc32c.crc32c(body) ^ 1) + body
    send = T(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=0))
    c.send(send, bad)
    got = c.recv()
    assert got.type == T.SEND_ERROR and got.send_error.error == pb.ChecksumError
    c.send(send, good)
    got = c.recv()
    assert got.type == T.SEND_RECEIPT and got.send_receipt.sequence_id == 0
    c.close()
