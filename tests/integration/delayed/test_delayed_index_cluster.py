"""The delayed-delivery index on real bookie processes and a real ZooKeeper: a broker crash
(no flush) plus a restart of every bookie, then a new owner recovers the index from its
managed ledger; every pending entry is delivered once, none early; dead records are trimmed.
Time of the index is virtual (the ledger layer uses real time)."""

from __future__ import annotations

import random

from support.delayed_model import DelayedHarness
from support.ledger_cluster import chroot_url, open_factory, wait_registered

from magnetar.broker.delayed import (
    DelayedDeliveryConfig,
    DelayedDeliveryIndex,
    ManagedLedgerSegmentStore,
    delayed_index_ledger_name,
)
from magnetar.broker.ledger import ManagedLedgerFactory, Position
from magnetar.clock import VirtualClock

SECOND = 1_000
MINUTE = 60 * SECOND
DAY = 24 * 60 * MINUTE
YEAR = 365 * DAY

CONFIG = DelayedDeliveryConfig(
    horizon_ms=10 * SECOND,
    prefetch_ms=5 * SECOND,
    seal_max_entries=200,
    seal_interval_ms=30 * SECOND,
    chunk_records=32,
)


async def test_index_survives_broker_crash_and_bookie_restart(
    zookeeper_server, bookie_factory
) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookies = bookie_factory.start_many(2, metadata=url)
    cfg = {"min_ledger_rollover_time_ms": 0, "max_entries_per_ledger": 40}
    factories: list[ManagedLedgerFactory] = [await open_factory(url, **cfg)]
    await wait_registered(factories[0].store, 2)
    clock = VirtualClock()
    name = delayed_index_ledger_name("t/ns/persistent/delayed", "sub")

    async def open_index() -> DelayedDeliveryIndex:
        index = DelayedDeliveryIndex(
            ManagedLedgerSegmentStore(factories[-1], name), clock, CONFIG, on_due=lambda: None
        )
        await index.recover()
        return index

    async def reopen() -> DelayedDeliveryIndex:
        # a new broker process: its own metadata session; opening the ledger fences the old
        factories.append(await open_factory(url, **cfg))
        return await open_index()

    h = DelayedHarness(clock, await open_index(), reopen)
    rng = random.Random(11)
    delays = [0, 40, 2 * SECOND, 30 * SECOND, 5 * MINUTE, DAY, 90 * DAY, 2 * YEAR]
    for _ in range(1_500):
        h.publish(rng.choice(delays) + rng.randrange(1_000))
    h.read()
    await h.index.flush()
    await h.run_until(clock.now_ms() + MINUTE)
    for _ in range(150):  # still unsealed when the broker dies
        h.publish(rng.choice(delays[2:]) + rng.randrange(1_000))
    h.read()
    sealed_runs = h.index.statistics().runs
    assert sealed_runs > 3 and h.index.statistics().unsealed == 150
    pending_before = h.index.size()

    h.index.abandon()  # crash: no flush, no close
    for b in bookies:
        b.restart()  # the index's records must come back from disk
    await h.crash_and_recover()
    assert h.index.statistics().runs == sealed_runs
    h.read()  # the re-read of unacknowledged entries re-adds the lost tail
    assert h.index.size() == pending_before
    await h.run_until(clock.now_ms() + 2 * YEAR + DAY)
    h.check(max_lateness_ms=0)
    assert h.undelivered() == []
    store = h.index.store
    assert isinstance(store, ManagedLedgerSegmentStore)
    assert len(store.stored_positions()) == 1  # dead chunks acknowledged: only the snapshot
    await h.index.close()
    await factories[-1].close()
    for f in factories:
        await f.store.close()


async def test_clean_close_and_reopen_keeps_far_future_entries(
    zookeeper_server, bookie_factory
) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookie_factory.start_many(2, metadata=url)
    f1 = await open_factory(url)
    await wait_registered(f1.store, 2)
    clock = VirtualClock()
    name = delayed_index_ledger_name("t/ns/persistent/clean", "sub")
    index = DelayedDeliveryIndex(ManagedLedgerSegmentStore(f1, name), clock, CONFIG)
    await index.recover()
    t0 = clock.now_ms()
    entries = {Position(5, i): t0 + (i + 1) * DAY for i in range(500)}
    assert all(index.add(p, at) for p, at in entries.items())
    await index.close()
    await f1.close()
    await f1.store.close()

    f2 = await open_factory(url)
    index2 = DelayedDeliveryIndex(ManagedLedgerSegmentStore(f2, name), clock, CONFIG)
    await index2.recover()
    assert index2.size() == 500
    assert all(index2.add(p, at) for p, at in entries.items())  # re-read: still held
    clock.advance(10 * DAY / 1000)
    await index2.wait_idle()  # chunks read from the bookies as they come due
    got = index2.pop_due(clock.now_ms(), 100)
    assert got == [Position(5, i) for i in range(10)]
    assert index2.size() == 490
    await index2.close()
    await f2.close()
    await f2.store.close()
