"""The codec against the official ``pulsar-client`` (C++ 4.2.0 inside, protocol v20).

A tiny asyncio server built only on ``magnetar.client.protocol`` answers the handshake,
PARTITIONED_METADATA, LOOKUP, PRODUCER, SEND (+ batches), SUBSCRIBE, FLOW (dispatching the
stored SEND bytes back as MESSAGE frames) and the closes. If the codec got a byte wrong, the
C++ client drops the connection and these calls time out or fail.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pulsar
import pytest

from magnetar.client.protocol import (
    NEED_DATA,
    PROTOCOL_VERSION_MAX,
    Command,
    CommandType,
    Connection,
    ConnectionClosed,
    MessageId,
    PayloadCommand,
    RemoteProtocolError,
    Role,
    commands,
    is_batch,
    parse_batch,
)

TOPIC = "persistent://public/default/codec-smoke"


@dataclass
class Entry:
    ledger_id: int
    entry_id: int
    headers_and_payload: bytes


@dataclass
class TinyBroker:
    """One topic, entries kept as the client framed them; enough for produce and consume."""

    port: int = 0
    received: list[CommandType] = field(default_factory=list)
    sends: list[PayloadCommand] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    connect_versions: list[int] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(Role.BROKER)
        permits: dict[int, int] = {}
        cursor: dict[int, int] = {}
        try:
            while True:
                data = await reader.read(65536)
                conn.receive_data(data)
                while True:
                    event = conn.next_event()
                    if event is NEED_DATA:
                        break
                    if isinstance(event, ConnectionClosed):
                        return
                    out = self.on_command(conn, event, permits, cursor)
                    if out:
                        writer.write(out)
                await writer.drain()
        except RemoteProtocolError as exc:  # pragma: no cover - would fail the test below
            self.errors.append(exc)
        except ConnectionError:
            pass
        finally:
            writer.close()

    def on_command(
        self, conn: Connection, event: Command, permits: dict[int, int], cursor: dict[int, int]
    ) -> bytes:
        t, base = event.type, event.base
        self.received.append(t)
        if t is CommandType.CONNECT:
            self.connect_versions.append(base.connect.protocol_version)
            version = min(base.connect.protocol_version, PROTOCOL_VERSION_MAX)
            return conn.send(commands.connected("Magnetar codec test", version))
        if t is CommandType.PING:
            return conn.send(commands.pong())
        if t is CommandType.PARTITIONED_METADATA:
            request_id = base.partitionMetadata.request_id
            return conn.send(commands.partitioned_metadata_response(request_id, 0))
        if t is CommandType.LOOKUP:
            url = f"pulsar://127.0.0.1:{self.port}"
            return conn.send(commands.lookup_response(base.lookupTopic.request_id, url))
        if t is CommandType.PRODUCER:
            p = base.producer
            name = f"codec-producer-{p.producer_id}"
            return conn.send(commands.producer_success(p.request_id, name))
        if t is CommandType.SEND:
            assert isinstance(event, PayloadCommand)
            self.sends.append(event)
            entry = Entry(7, len(self.entries), event.headers_and_payload)
            self.entries.append(entry)
            s = base.send
            receipt = commands.send_receipt(
                s.producer_id, s.sequence_id, MessageId(entry.ledger_id, entry.entry_id)
            )
            return conn.send(receipt)
        if t is CommandType.SUBSCRIBE:
            permits[base.subscribe.consumer_id] = 0
            cursor[base.subscribe.consumer_id] = 0
            return conn.send(commands.success(base.subscribe.request_id))
        if t is CommandType.FLOW:
            cid = base.flow.consumer_id
            permits[cid] += base.flow.messagePermits
            out = b""
            while permits[cid] > 0 and cursor[cid] < len(self.entries):
                e = self.entries[cursor[cid]]
                out += conn.send_message(cid, e.ledger_id, e.entry_id, e.headers_and_payload)
                cursor[cid] += 1
                permits[cid] -= 1
            return out
        if t is CommandType.CLOSE_PRODUCER:
            return conn.send(commands.success(base.close_producer.request_id))
        if t is CommandType.CLOSE_CONSUMER:
            return conn.send(commands.success(base.close_consumer.request_id))
        return b""  # ACK and others need no answer here


@contextlib.asynccontextmanager
async def tiny_broker() -> AsyncIterator[TinyBroker]:
    broker = TinyBroker()
    server = await asyncio.start_server(broker.handle, "127.0.0.1", 0)
    broker.port = server.sockets[0].getsockname()[1]
    try:
        yield broker
    finally:
        server.close()
        await server.wait_closed()
    assert broker.errors == []


def _client(port: int) -> pulsar.Client:
    return pulsar.Client(
        f"pulsar://127.0.0.1:{port}",
        operation_timeout_seconds=10,
        connection_timeout_ms=5000,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _produce_one(port: int) -> pulsar.MessageId:
    client = _client(port)
    try:
        producer = client.create_producer(TOPIC)
        msg_id = producer.send(b"hello", properties={"a": "b"})
        producer.close()
        return msg_id
    finally:
        client.close()


def _produce_batch(port: int, n: int) -> None:
    client = _client(port)
    try:
        producer = client.create_producer(
            TOPIC,
            batching_enabled=True,
            batching_max_messages=n,
            batching_max_publish_delay_ms=5000,
        )
        done: list[pulsar.Result] = []
        for i in range(n):
            producer.send_async(
                f"m{i}".encode(),
                lambda res, _mid: done.append(res),
                properties={"i": str(i)},
                partition_key=f"k{i}",
            )
        producer.flush()
        assert done == [pulsar.Result.Ok] * n
        producer.close()
    finally:
        client.close()


def _consume(port: int, n: int) -> list[pulsar.Message]:
    client = _client(port)
    try:
        consumer = client.subscribe(TOPIC, "codec-sub")
        msgs = [consumer.receive(timeout_millis=10000) for _ in range(n)]
        for m in msgs:
            consumer.acknowledge(m)
        consumer.close()
        return msgs
    finally:
        client.close()


@pytest.mark.timeout(60)
async def test_official_client_produces_through_our_codec() -> None:
    async with tiny_broker() as broker:
        msg_id = await asyncio.to_thread(_produce_one, broker.port)

    assert broker.connect_versions and broker.connect_versions[0] == 20
    assert broker.received[:4] == [
        CommandType.CONNECT,
        CommandType.PARTITIONED_METADATA,
        CommandType.LOOKUP,
        CommandType.PRODUCER,
    ]
    assert CommandType.CLOSE_PRODUCER in broker.received
    assert len(broker.sends) == 1
    send = broker.sends[0]
    assert send.checksum is not None  # protocol >= 6 negotiated: the client adds CRC32C
    assert send.payload == b"hello"
    assert send.metadata is not None
    assert {kv.key: kv.value for kv in send.metadata.properties} == {"a": "b"}
    assert send.metadata.producer_name == "codec-producer-0"
    assert not is_batch(send.metadata)
    assert (msg_id.ledger_id(), msg_id.entry_id()) == (7, 0)


@pytest.mark.timeout(60)
async def test_official_client_batches_and_consumes_through_our_codec() -> None:
    n = 3
    async with tiny_broker() as broker:
        await asyncio.to_thread(_produce_batch, broker.port, n)
        msgs = await asyncio.to_thread(_consume, broker.port, n)

    assert len(broker.sends) == 1
    send = broker.sends[0]
    assert send.metadata is not None and is_batch(send.metadata)
    assert send.metadata.num_messages_in_batch == n
    assert send.base.send.num_messages == n
    singles = parse_batch(send.payload, send.metadata.num_messages_in_batch)
    assert [s.payload for s in singles] == [b"m0", b"m1", b"m2"]
    assert [{kv.key: kv.value for kv in s.metadata.properties} for s in singles] == [
        {"i": "0"},
        {"i": "1"},
        {"i": "2"},
    ]
    assert [s.metadata.partition_key for s in singles] == ["k0", "k1", "k2"]

    # The stored SEND bytes went back out in MESSAGE frames and the C++ consumer split them.
    assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.properties() for m in msgs] == [{"i": "0"}, {"i": "1"}, {"i": "2"}]
    assert [m.partition_key() for m in msgs] == ["k0", "k1", "k2"]
    assert [(m.message_id().entry_id(), m.message_id().batch_index()) for m in msgs] == [
        (0, 0),
        (0, 1),
        (0, 2),
    ]
    assert CommandType.FLOW in broker.received
    assert CommandType.CLOSE_CONSUMER in broker.received
