"""A cursor never references a ledger that trimming may delete, and a stale reference found
on load is repaired instead of failing the topic forever (issue 13: after a fuzzing run two
topics could never load again, "ledger 1180 has no metadata")."""

from __future__ import annotations

import asyncio
import json
import random

from support.waiting import wait_for

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import EARLIEST, LATEST, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer

CFG = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0,
    max_entries_per_ledger=3,
    ensemble_size=1,
    write_quorum=1,
    ack_quorum=1,
)


def _factory(server: MemoryMetadataServer, bookies: FakeBookieCluster) -> ManagedLedgerFactory:
    return ManagedLedgerFactory(server.connect(), bookies.factory, CFG, rng=random.Random(3))


async def test_a_deleted_cursor_ledger_is_repaired_on_load(
    meta_server: MemoryMetadataServer,
) -> None:
    bookies = FakeBookieCluster(meta_server, count=1)
    ml = await _factory(meta_server, bookies).open("t/ns/persistent/stale")
    cursor = await ml.open_cursor("sub", EARLIEST)
    pos = [await ml.add(b"%d" % i) for i in range(5)]
    await cursor.mark_delete(pos[1])  # the first durable write: a snapshot, md in the znode
    await cursor.delete([pos[3]])
    store = meta_server.connect()
    got = await store.get(paths.managed_cursor(ml.name, "sub"))
    assert got is not None
    cursor_ledger = json.loads(got.value)["cursor_ledger"]
    await store.delete(paths.ledger_metadata(cursor_ledger))  # the stale reference

    ml2 = await _factory(meta_server, bookies).open("t/ns/persistent/stale")  # no exception
    c2 = await ml2.open_cursor("sub", LATEST)
    assert c2.mark_delete_position == pos[1]
    # acknowledgements after the znode's mark-delete are redelivered, nothing is lost
    assert [e.position for e in await c2.read_entries(10)] == pos[2:]
    await c2.delete([pos[2]])  # and the cursor persists again, in a new ledger
    await c2.flush()
    again = await store.get(paths.managed_cursor(ml.name, "sub"))
    assert again is not None and json.loads(again.value)["cursor_ledger"] != cursor_ledger


async def test_trimming_waits_until_the_mark_delete_is_durable(
    meta_server: MemoryMetadataServer,
) -> None:
    bookies = FakeBookieCluster(meta_server, count=1)
    ml = await _factory(meta_server, bookies).open("t/ns/persistent/durable-trim")
    cursor = await ml.open_cursor("sub", EARLIEST)
    pos = [await ml.add(b"%d" % i) for i in range(7)]
    first = ml.ledgers.ids[0]
    await cursor.flush()
    for bookie in bookies.bookies.values():
        bookie.hang()  # the cursor's next write cannot complete
    acking = asyncio.ensure_future(cursor.mark_delete(pos[4]))
    await wait_for(lambda: cursor.mark_delete_position == pos[4], what="the mark-delete in memory")
    assert await ml.trimming.trim() == []  # but the stored state still references the first ledger
    assert first in ml.ledgers.ids
    for bookie in bookies.bookies.values():
        bookie.resume()
    await asyncio.wait_for(acking, 30)
    assert cursor.durable_mark_delete_position == pos[4]
    assert first in await ml.trimming.trim() or first not in ml.ledgers.ids
