"""Retention time counts from a ledger's close, not its creation (as Pulsar): a ledger
written for a long time is kept for the whole retention period after its last entry."""

from __future__ import annotations

from support.waiting import wait_for

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.clock import VirtualClock
from magnetar.zk.memory import MemoryMetadataServer


async def test_retention_time_counts_from_the_ledger_close(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    cfg = ManagedLedgerConfig(
        min_ledger_rollover_time_ms=0,
        max_entries_per_ledger=10,
        retention_time_ms=60_000,
        retention_size_bytes=-1,
    )
    f = ManagedLedgerFactory(meta_server.connect(), fake_bookies.factory, cfg, clock=clock)
    ml = await f.open("t/ns/persistent/retention-close")
    cursor = await ml.open_cursor("sub", EARLIEST)
    first = [await ml.add(b"%d" % i) for i in range(5)]
    clock.advance(120)  # the first ledger is written for two minutes
    rest = [await ml.add(b"%d" % i) for i in range(5, 11)]  # rolls over at 10 entries
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="the rollover to a second ledger")
    await cursor.mark_delete(rest[-2])  # everything of the first ledger consumed
    clock.advance(30)  # created 150 s ago, closed 30 s ago: still within retention
    assert await ml.trimming.trim() == []
    clock.advance(31)
    assert await ml.trimming.trim() == [first[0].ledger_id]
