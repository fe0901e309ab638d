"""A cursor's ledger rolls over on real bookie processes and a real ZooKeeper (issue 32):
every ``cursor_max_entries_per_ledger`` entries and once ``cursor_rollover_time_ms`` old
(the managed ledger's clock is virtual: four hours pass at once), the znode names the new
ledger, the old ledger's metadata is deleted and bookie GC reclaims it, and an owner that
crashes (never closes) is succeeded by one that recovers exactly the acknowledged state."""

from __future__ import annotations

from support.ledger_cluster import bookie_client_factory, chroot_url, wait_registered
from support.waiting import wait_for

from magnetar.bookie.errors import NoEntry, NoLedger
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.clock import VirtualClock
from magnetar.zk import paths
from magnetar.zk.factory import open_metadata_store

CONFIG = ManagedLedgerConfig(
    retention_time_ms=-1,
    retention_size_bytes=-1,
    cursor_max_entries_per_ledger=3,
    cursor_rollover_time_ms=4 * 3_600_000,
)


async def test_a_cursor_ledger_rolls_over_on_real_bookies(zookeeper_server, bookie_factory) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookies = [
        bookie_factory.start(metadata=url, extra_args=["--gc-interval-s", "0.3"]) for _ in range(2)
    ]
    clock = VirtualClock()
    f1 = ManagedLedgerFactory(
        await open_metadata_store(url), bookie_client_factory, CONFIG, clock=clock
    )
    await wait_registered(f1.store, 2)
    ml = await f1.open("t/ns/persistent/cursor-roll")
    log = [await ml.add(b"m%d" % i) for i in range(30)]
    cursor = await ml.open_cursor("sub", EARLIEST)

    seen: list[int] = []
    for i in range(7):  # a snapshot and two deltas per ledger: three ledgers
        await cursor.delete([log[3 * i]])
        seen.append(cursor.statistics().cursor_ledger_id)
    ledgers = list(dict.fromkeys(seen))
    assert [seen.count(lid) for lid in ledgers] == [3, 3, 1]
    await cursor.delete([log[22]])  # a delta: the third ledger is young
    assert cursor.statistics().cursor_ledger_id == ledgers[-1]
    clock.advance(4 * 3600)
    await cursor.delete([log[23]])  # four hours old: a fourth ledger
    last = cursor.statistics().cursor_ledger_id
    assert last not in ledgers
    for gone in ledgers:  # the znode names the last ledger; the others are deleted
        assert await f1.store.get(paths.ledger_metadata(gone)) is None
    info = await f1.store.get(paths.managed_cursor(ml.name, "sub"))
    assert info is not None and b'"cursor_ledger": %d' % last in info.value

    client = bookie_client_factory(bookies[0].address)
    try:

        async def reclaimed() -> bool:
            try:
                await client.read_entry(ledgers[0], 0)
            except (NoLedger, NoEntry):
                return True
            return False

        await wait_for(reclaimed, 20, "bookie GC reclaiming a rolled-over cursor ledger")
    finally:
        await client.close()

    expected = (cursor.mark_delete_position, cursor.individually_deleted_ranges())
    # the owner crashes: no close; a new owner fences and recovers the cursor ledger
    f2 = ManagedLedgerFactory(await open_metadata_store(url), bookie_client_factory, CONFIG)
    ml2 = await f2.open("t/ns/persistent/cursor-roll")
    c2 = ml2.cursors["sub"]
    assert (c2.mark_delete_position, c2.individually_deleted_ranges()) == expected
    got = await c2.read_entries(100)
    acked = {log[3 * i] for i in range(7)} | {log[22], log[23]}
    assert [e.position for e in got] == [p for p in log if p not in acked]
    await f2.close()
    await f2.store.close()
    await f1.ledger_client.close()  # the crashed owner's bookie clients
    await f1.store.close()
