"""Dispatch from a cursor far behind the entry cache: every subscription type gets the
backlog in order (Key_Shared: per key) through the managed ledger's read-ahead, whose bookie
reads were pipelined (counted by the read-ahead's statistics, never by timing)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from support.dispatch import dispatched

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.dispatch.consumer import Consumer, OutMessage, SubType
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage
from magnetar.broker.topics.subscription import Subscription
from magnetar.client.protocol import entry_num_messages
from magnetar.client.protocol.proto import pulsar_api_pb2 as pb
from magnetar.zk import MemoryMetadataServer

ENTRIES = 1200
KEYS = 7


def keyed(i: int) -> bytes:
    md = pb.MessageMetadata(producer_name="p", sequence_id=i, publish_time=1)
    md.partition_key = f"k{i % KEYS}"
    raw = md.SerializeToString()
    return len(raw).to_bytes(4, "big") + raw + b"x" * 100


class Sink:
    def __init__(self) -> None:
        self.got: dict[int, list[OutMessage]] = {}

    def send_messages(self, consumer: Consumer, messages: list[OutMessage]) -> None:
        self.got.setdefault(consumer.consumer_id, []).extend(messages)

    def send_active_consumer_change(self, consumer: Consumer, is_active: bool) -> None:
        pass

    def send_close_consumer(self, consumer: Consumer) -> None:
        pass


@pytest.mark.parametrize(
    ("sub_type", "consumers"),
    [
        (SubType.EXCLUSIVE, 1),
        (SubType.FAILOVER, 1),
        (SubType.SHARED, 2),
        (SubType.KEY_SHARED, 2),
    ],
)
async def test_a_consumer_behind_the_cache_gets_its_backlog_in_order(
    sub_type: SubType, consumers: int
) -> None:
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=2)
    config = dataclasses.replace(
        ManagedLedgerConfig(ensemble_size=2, write_quorum=2, ack_quorum=2),
        entry_cache_bytes=0,  # nothing cached: every read goes to the bookies
        max_entries_per_ledger=500,
        min_ledger_rollover_time_ms=0,
        read_ahead_entries=600,
    )
    factory = ManagedLedgerFactory(server.connect(), bookies.factory, config, rng=random.Random(2))
    storage = ManagedLedgerStorage(factory)
    ledger = await storage.open("public%2Fdefault%2Fpersistent%2Fbehind")
    cursor = await ledger.open_cursor("sub", initial_earliest=True)
    for i in range(0, ENTRIES, 100):
        await ledger.add_entries([keyed(j) for j in range(i, i + 100)])
    positions = [e.position for e in await ledger.read_entries(ledger.first_position, ENTRIES)]
    assert len(positions) == ENTRIES and len({p.ledger_id for p in positions}) >= 3

    key_of = {p: i % KEYS for i, p in enumerate(positions)}
    sub = Subscription(
        "t",
        "sub",
        cursor,
        lambda e: entry_num_messages(e.data),
        slot_of=lambda e: key_of[e.position] * 1000,
    )
    sink = Sink()
    cs = [Consumer(i, f"c{i}", sub_type, sink=sink, max_unacked=0) for i in range(consumers)]
    for c in cs:
        sub.add_consumer(c)
    for _ in range(ENTRIES // 100):  # permits in steps, as FLOW commands bring them
        for c in cs:
            sub.flow(c, 100)
        await dispatched(sub)
    for c in cs:
        sub.flow(c, ENTRIES)
    await dispatched(sub)

    delivered = [m.position for msgs in sink.got.values() for m in msgs]
    assert sorted(delivered) == positions  # each entry once
    for msgs in sink.got.values():
        got = [m.position for m in msgs]
        if sub_type is SubType.KEY_SHARED:
            for k in range(KEYS):
                of_key = [p for p in got if key_of[p] == k]
                assert of_key == sorted(of_key)
        else:
            assert got == sorted(got)
    if sub_type is SubType.KEY_SHARED:  # each key on one consumer
        owners: dict[int, set[int]] = {}
        for cid, msgs in sink.got.items():
            for m in msgs:
                owners.setdefault(key_of[m.position], set()).add(cid)
        assert all(len(o) == 1 for o in owners.values()), owners
    stats = cursor.cursor.read_ahead_statistics()
    assert stats is not None and stats.max_reads_in_flight > 1, stats
    assert stats.entries_read >= ENTRIES
    await storage.close()
