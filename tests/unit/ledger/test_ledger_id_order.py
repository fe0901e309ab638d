"""A managed ledger's ledger ids strictly increase, whichever process creates its ledgers.

Each factory (a broker) allocates ledger ids from its own block, so without care a managed
ledger taken over by another broker gets a ledger id below its previous one; positions compare
by ledger id first, so cursors then skipped (and trimming deleted) the new entries. The
managed ledger asks for an id above its largest and refuses a ledger that is not.
"""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import pytest

from magnetar.broker.bookkeeper import WriteHandle
from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import (
    EARLIEST,
    LedgerOutOfOrder,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    ManagedLedgerFenced,
)
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer

FAST = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0,
    ensemble_size=2,
    write_quorum=2,
    ack_quorum=2,
    retention_time_ms=0,
    retention_size_bytes=0,
)


def factory(
    server: MemoryMetadataServer, bookies: FakeBookieCluster, seed: int, **cfg: Any
) -> ManagedLedgerFactory:
    config = dataclasses.replace(FAST, **cfg)
    return ManagedLedgerFactory(server.connect(), bookies.factory, config, rng=random.Random(seed))


async def test_takeovers_back_and_forth_lose_nothing(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    brokers = [factory(meta_server, fake_bookies, seed) for seed in (1, 2)]
    # Each broker holds an id block: broker 0 [0, 1000), broker 1 [1000, 2000).
    for i, f in enumerate(brokers):
        await f.open(f"t/ns/persistent/warm{i}")
    name = "t/ns/persistent/moving"
    consumed: list[bytes] = []
    published: list[bytes] = []
    for step in range(8):
        owner = brokers[(step + 1) % 2]  # broker 1 first, as in the report
        ml = await owner.open(name)
        cursor = ml.cursors.get("sub") or await ml.open_cursor("sub", EARLIEST)
        batch = [b"s%d-%d" % (step, i) for i in range(5)]
        for payload in batch:
            await ml.add(payload)
        published += batch
        assert cursor.backlog().entries == 5
        got = await cursor.read_entries(100)
        consumed += [e.payload for e in got]
        await cursor.mark_delete(got[-1].position)
        trimmed = await ml.trimming.trim()
        assert ml.ledgers.ids[-1] not in trimmed
        ml.check_invariants()
        assert ml.ledgers.ids == sorted(set(ml.ledgers.ids))
        await ml.close()  # the topic is unloaded; the other broker takes it
    assert consumed == published
    for f in brokers:
        await f.close()


async def test_publish_time_search_and_acks_span_ledgers_of_both_brokers(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """The TTL / reset-by-time search and individual acks walk the ledger list in id order."""
    brokers = [factory(meta_server, fake_bookies, s, retention_time_ms=-1) for s in (1, 2)]
    for i, f in enumerate(brokers):
        await f.open(f"t/ns/persistent/warm{i}")
    name = "t/ns/persistent/spans"
    positions = []
    for step in range(6):
        ml = await brokers[(step + 1) % 2].open(name)
        if "sub" not in ml.cursors:
            await ml.open_cursor("sub", EARLIEST)
        for i in range(4):
            positions.append(await ml.add(b"%d" % (step * 4 + i)))  # payload: "publish time"
        await ml.close()
    ml = await brokers[0].open(name)
    assert [p.ledger_id for p in positions] == sorted(p.ledger_id for p in positions)
    for t in (0, 5, 13, 23):
        assert await ml.reads.find_by_publish_time(t, int) == positions[t]
    assert await ml.reads.find_by_publish_time(24, int) is None
    cursor = ml.cursors["sub"]
    await cursor.delete(positions[1::2])  # every other entry, across all ledgers
    assert cursor.backlog().entries == 12
    await cursor.delete(positions[0::2])
    assert cursor.backlog().entries == 0
    assert cursor.mark_delete_position >= positions[-1]
    for f in brokers:
        await f.close()


async def test_open_refuses_a_ledger_not_above_the_last(
    meta_server: MemoryMetadataServer,
    fake_bookies: FakeBookieCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    low, high = (factory(meta_server, fake_bookies, s) for s in (1, 2))
    await low.open("t/ns/persistent/warm")  # low holds the block [0, 1000)
    name = "t/ns/persistent/x"
    ml = await high.open(name)  # its ledger comes from [1000, 2000)
    await ml.add(b"a")
    before = (await meta_server.connect().get(paths.managed_ledger(name))).value  # type: ignore[union-attr]
    _ignore_min_ledger_id(monkeypatch, low)  # a broken allocator: an id from the low block
    with pytest.raises(LedgerOutOfOrder, match="not above"):
        await low.open(name)
    store = meta_server.connect()
    after = await store.get(paths.managed_ledger(name))
    assert after is not None and after.value == before  # nothing appended
    assert await store.exists(paths.ledger_metadata(1)) is None  # the refused ledger is gone
    await high.close()
    await low.close()


async def test_rollover_refuses_a_ledger_not_above_the_last(
    meta_server: MemoryMetadataServer,
    fake_bookies: FakeBookieCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    low = factory(meta_server, fake_bookies, 1)
    high = factory(meta_server, fake_bookies, 2, max_entries_per_ledger=3)
    await low.open("t/ns/persistent/warm")
    name = "t/ns/persistent/y"
    ml = await high.open(name)
    ids_before = ml.ledgers.ids

    async def from_low_block(**kwargs: Any) -> WriteHandle:
        kwargs.pop("min_ledger_id", None)
        return await low.ledger_client.create_ledger(**kwargs)

    monkeypatch.setattr(high.ledger_client, "create_ledger", from_low_block)
    acked = [await ml.add(b"m%d" % i) for i in range(3)]  # the third add starts a rollover
    with pytest.raises(ManagedLedgerFenced, match="not above"):
        await ml.add(b"after")
    assert ml.ledgers.ids == ids_before
    # Another owner reads every acknowledged entry, in order.
    other = factory(meta_server, fake_bookies, 3)
    reopened = await other.open(name)
    cursor = reopened.new_non_durable_cursor(EARLIEST)
    got = await cursor.read_entries(10)
    assert [e.position for e in got] == acked
    await other.close()
    await low.close()
    await high.close()


async def test_open_refuses_a_stored_list_out_of_order(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    store = meta_server.connect()
    name = "t/ns/persistent/old"
    ledgers = [
        {"id": 1005, "entries": 1, "size": 1, "ts": 0},
        {"id": 3, "entries": 1, "size": 1, "ts": 0},
    ]
    await store.put(
        paths.managed_ledger(name), json.dumps({"ledgers": ledgers, "properties": {}}).encode()
    )
    with pytest.raises(LedgerOutOfOrder, match="not increasing"):
        await factory(meta_server, fake_bookies, 1).open(name)


def _ignore_min_ledger_id(monkeypatch: pytest.MonkeyPatch, f: ManagedLedgerFactory) -> None:
    create = f.ledger_client.create_ledger

    async def create_ignoring_min(**kwargs: Any) -> WriteHandle:
        kwargs.pop("min_ledger_id", None)
        return await create(**kwargs)

    monkeypatch.setattr(f.ledger_client, "create_ledger", create_ignoring_min)
