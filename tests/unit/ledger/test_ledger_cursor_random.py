"""Seeded random cursor operations, then a crash (no close) and a reopen by a new owner: the
recovered ack state equals the state before the crash, whatever mix of individual acks,
mark-deletes, batch-index acks, redeliveries and snapshots happened."""

from __future__ import annotations

import asyncio
import random

import pytest

from magnetar.broker.bookkeeper import LedgerError
from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.zk.memory import MemoryMetadataServer

CFG = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0,
    max_entries_per_ledger=37,
    retention_time_ms=-1,
    retention_size_bytes=-1,
    cursor_snapshot_min_bytes=300,
    cursor_max_entries_per_ledger=9,
)


@pytest.mark.parametrize("seed", range(8))
async def test_random_cursor_ops_survive_crash(seed: int) -> None:
    rng = random.Random(seed)
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=3)
    f1 = ManagedLedgerFactory(server.connect(), bookies.factory, CFG, rng=random.Random(seed))
    ml = await f1.open("t/ns/persistent/rand")
    cursor = await ml.open_cursor("sub", EARLIEST)
    positions = list(await asyncio.gather(*(ml.add_nowait(b"%d" % i) for i in range(300))))
    for _ in range(rng.randint(20, 60)):
        op = rng.random()
        if op < 0.5:
            await cursor.delete(rng.sample(positions, rng.randint(1, 20)))
        elif op < 0.6:
            await cursor.mark_delete(rng.choice(positions[:150]))
        elif op < 0.8:
            pos = rng.choice(positions)
            await cursor.delete_batch_indexes(pos, 5, rng.sample(range(5), rng.randint(1, 4)))
        else:
            await cursor.increment_redelivery(rng.choice(positions))
        if rng.random() < 0.1:
            await ml.add(b"more")
    before = (
        cursor.mark_delete_position,
        cursor.individually_deleted_ranges(),
        dict(cursor._state.batch_sets),
        dict(cursor._state.redeliveries),
        cursor.backlog(),
    )
    # crash: the first owner just stops; a new owner recovers (fencing its cursor ledger)
    f2 = ManagedLedgerFactory(server.connect(), bookies.factory, CFG)
    ml2 = await f2.open("t/ns/persistent/rand")
    c2 = ml2.cursors["sub"]
    after = (
        c2.mark_delete_position,
        c2.individually_deleted_ranges(),
        dict(c2._state.batch_sets),
        dict(c2._state.redeliveries),
        c2.backlog(),
    )
    assert after == before
    ml2.check_invariants()
    # the old owner's cursor can no longer persist anything
    unacked = [p for p in positions if not cursor.is_acknowledged(p)]
    if unacked:
        with pytest.raises(LedgerError):
            await cursor.delete(unacked[:1])
    with pytest.raises(LedgerError):
        await cursor._log.write(cursor._state, None)  # type: ignore[union-attr]  # a snapshot switch
    assert c2.individually_deleted_ranges() == before[1]
