"""Output back-pressure: while the transport's buffer is above its high-water mark the
connection's consumers get nothing new; when it drains, dispatch resumes."""

from __future__ import annotations

import struct

from support.dispatch import dispatched
from support.fake_transport import CONNECT, FakeTransport, frame
from support.waiting import wait_for

from magnetar.broker.config import BrokerConfig
from magnetar.broker.protocol.connection import ServerConnection
from magnetar.broker.runtime import BrokerServiceRunner
from magnetar.broker.service import BrokerService
from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.client.protocol import encode_headers_and_payload
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.zk.memory import MemoryMetadataServer

T = pb.BaseCommand
TOPIC = "persistent://public/default/bp"


def send_frame(seq: int) -> bytes:
    tail = encode_headers_and_payload(
        pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1), b"x"
    )
    body = T(type=T.SEND, send=pb.CommandSend(producer_id=0, sequence_id=seq)).SerializeToString()
    return struct.pack(">II", 4 + len(body) + len(tail), len(body)) + body + tail


def count(data: bytes, kind: int) -> int:
    """How many commands of type ``kind`` the broker wrote."""
    n, off = 0, 0
    while off < len(data):
        (total, size) = struct.unpack_from(">II", data, off)
        cmd = T()
        cmd.ParseFromString(data[off + 8 : off + 8 + size])
        n += cmd.type == kind
        off += 4 + total
    return n


def messages(data: bytes) -> int:
    return count(data, T.MESSAGE)


async def test_paused_transport_stops_dispatch_until_it_drains() -> None:
    service = BrokerService(
        BrokerConfig(broker_service_port=0, keep_alive_interval_seconds=0),
        MemoryMetadataServer().connect(),
        MemoryStorageFactory(),
    )
    runner = BrokerServiceRunner(service)
    await runner.start()
    try:
        cnx = ServerConnection(service)
        transport = FakeTransport()
        cnx.connection_made(transport)  # type: ignore[arg-type]
        cnx.data_received(CONNECT)
        cnx.data_received(
            frame(
                T(
                    type=T.PRODUCER,
                    producer=pb.CommandProducer(topic=TOPIC, producer_id=0, request_id=1),
                )
            )
        )
        cnx.data_received(
            frame(
                T(
                    type=T.SUBSCRIBE,
                    subscribe=pb.CommandSubscribe(
                        topic=TOPIC,
                        subscription="s",
                        subType=pb.CommandSubscribe.Exclusive,
                        consumer_id=0,
                        request_id=2,
                    ),
                )
            )
        )
        written = lambda kind: count(bytes(transport.written), kind)  # noqa: E731
        await wait_for(lambda: written(T.SUCCESS) == 1, what="the subscription")
        session = cnx.consumers.get(0)
        assert session is not None
        sub = session.subscription
        cnx.data_received(
            frame(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=0, messagePermits=100)))
        )
        cnx.data_received(send_frame(0))
        await wait_for(lambda: messages(bytes(transport.written)) == 1, what="the first message")
        cnx.pause_writing()
        cnx.data_received(send_frame(1) + send_frame(2))
        # barrier: both sends stored (their receipts written) and dispatch idle since
        await wait_for(lambda: written(T.SEND_RECEIPT) == 3, what="three receipts")
        await dispatched(sub)
        assert messages(bytes(transport.written)) == 1  # held back while paused
        cnx.resume_writing()
        await wait_for(lambda: messages(bytes(transport.written)) == 3, what="the held messages")
    finally:
        await runner.close()
