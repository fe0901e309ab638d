"""Managed ledger and cursors over fake bookies and the in-memory metadata store."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import struct

import pytest
from support.autojump import AutojumpClock
from support.waiting import wait_for

from magnetar.broker.bookkeeper.errors import TooManyPendingAdds
from magnetar.broker.bookkeeper.metadata import LedgerMetadata
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import (
    EARLIEST,
    LATEST,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    ManagedLedgerFenced,
    ManagedLedgerTerminated,
    Position,
)
from magnetar.broker.ledger.states import ManagedLedgerState
from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage
from magnetar.clock import VirtualClock
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer

FAST = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0, ensemble_size=2, write_quorum=2, ack_quorum=2
)


def factory(
    server: MemoryMetadataServer, bookies: FakeBookieCluster, **cfg: object
) -> ManagedLedgerFactory:
    config = dataclasses.replace(FAST, **cfg)  # type: ignore[arg-type]
    return ManagedLedgerFactory(server.connect(), bookies.factory, config, rng=random.Random(3))


async def test_add_read_and_rollover(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(meta_server, fake_bookies, max_entries_per_ledger=10)
    ml = await f.open("t/ns/persistent/a")
    cursor = await ml.open_cursor("sub", EARLIEST)
    positions = await asyncio.gather(*(ml.add(b"m%d" % i) for i in range(35)))
    assert positions == sorted(positions) and len(set(positions)) == 35
    assert len({p.ledger_id for p in positions}) >= 4  # rolled over every 10 entries
    assert ml.get_last_confirmed() == positions[-1]
    got = await cursor.read_entries(100)
    assert [e.payload for e in got] == [b"m%d" % i for i in range(35)]
    assert [e.position for e in got] == positions
    assert cursor.backlog().entries == 35
    await cursor.mark_delete(positions[19])
    assert cursor.backlog().entries == 15
    await f.close()


async def test_reopen_recovers_and_fences_old_owner(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f1 = factory(meta_server, fake_bookies)
    ml1 = await f1.open("t/ns/persistent/b")
    acked = await asyncio.gather(*(ml1.add(b"x%d" % i) for i in range(20)))
    f2 = factory(meta_server, fake_bookies)
    ml2 = await f2.open("t/ns/persistent/b")
    assert ml2.get_last_confirmed() == acked[-1]
    c = ml2.new_non_durable_cursor(EARLIEST)
    assert [e.payload for e in await c.read_entries(100)] == [b"x%d" % i for i in range(20)]
    with pytest.raises(ManagedLedgerFenced):
        await ml1.add(b"late")
    with pytest.raises(ManagedLedgerFenced):
        await ml1.add(b"later")
    p = await ml2.add(b"new")
    assert p > acked[-1]


async def test_two_writers_racing_exactly_one_survives(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f1, f2 = factory(meta_server, fake_bookies), factory(meta_server, fake_bookies)
    results = await asyncio.gather(
        f1.open("t/ns/persistent/race"), f2.open("t/ns/persistent/race"), return_exceptions=True
    )
    adds = []
    for r in results:
        if isinstance(r, BaseException):
            adds.append(r)
            continue
        try:
            adds.append(await r.add(b"hello"))
        except ManagedLedgerFenced as exc:
            adds.append(exc)
    survivors = [a for a in adds if isinstance(a, Position)]
    assert len(survivors) == 1, adds


async def test_cursor_state_survives_reopen(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f1 = factory(
        meta_server, fake_bookies, max_entries_per_ledger=50, cursor_snapshot_min_bytes=200
    )
    ml = await f1.open("t/ns/persistent/c")
    cursor = await ml.open_cursor("sub", EARLIEST)
    pos = await asyncio.gather(*(ml.add(b"%d" % i) for i in range(200)))
    rng = random.Random(5)
    keep = set(rng.sample(range(200), 30))
    order = [i for i in range(200) if i not in keep]
    rng.shuffle(order)
    for i in range(0, len(order), 7):
        await cursor.delete(pos[j] for j in order[i : i + 7])
    for j in sorted(keep)[:5]:
        await cursor.increment_redelivery(pos[j])
        await cursor.increment_redelivery(pos[j])
    assert await cursor.delete_batch_indexes(pos[min(keep)], 4, [0, 2]) is False
    assert cursor.statistics().snapshots >= 2  # deltas outgrew the snapshot: a new one
    # crash: no close; a new owner opens
    f2 = factory(meta_server, fake_bookies, max_entries_per_ledger=50)
    ml2 = await f2.open("t/ns/persistent/c")
    c2 = await ml2.open_cursor("sub", LATEST)
    remaining = [e.position for e in await c2.read_entries(1000)]
    assert remaining == [pos[j] for j in sorted(keep)]
    for j in sorted(keep)[:5]:
        assert c2.redelivery_count(pos[j]) == 2
    assert c2.redelivery_count(pos[sorted(keep)[6]]) == 0
    assert c2.batch_ack_set(pos[min(keep)]) == (4, 0b101)
    assert c2.backlog().entries == 30
    assert c2.mark_delete_position == Position(
        pos[min(keep)].ledger_id, pos[min(keep)].entry_id - 1
    )


async def test_trimming_respects_slowest_cursor_and_retention(
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
    ml = await f.open("t/ns/persistent/trim")
    slow = await ml.open_cursor("slow", EARLIEST)
    fast = await ml.open_cursor("fast", EARLIEST)
    pos = await asyncio.gather(*(ml.add(b"%d" % i) for i in range(45)))
    await ml.trimming.idle()  # the trims the rollovers started
    first_ledgers = ml.ledgers.ids
    await fast.mark_delete(pos[-1])
    assert await ml.trimming.trim() == []  # the slow cursor holds everything
    await slow.mark_delete(pos[25])
    assert await ml.trimming.trim() == []  # consumed, but retention keeps them for a minute
    clock.advance(61)
    deleted = await ml.trimming.trim()
    assert deleted == first_ledgers[:2]  # ledgers wholly before (l3, 5)
    assert ml.ledgers.ids == first_ledgers[2:]
    for lid in deleted:
        assert await meta_server.connect().get(f"/ledgers/meta/L{lid:020d}") is None
    c = ml.new_non_durable_cursor(EARLIEST)
    got = await c.read_entries(100)
    assert got[0].position == pos[20]


async def test_tailing_reader_is_woken_and_served_from_cache(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(meta_server, fake_bookies)
    ml = await f.open("t/ns/persistent/tail")
    reader = ml.new_non_durable_cursor(LATEST)
    waiter = asyncio.ensure_future(reader.read_entries_or_wait(10, 5.0))
    await asyncio.sleep(0)
    assert not waiter.done()
    p = await ml.add(b"fresh")
    got = await asyncio.wait_for(waiter, 1)
    assert [(e.position, e.payload) for e in got] == [(p, b"fresh")]
    assert ml.statistics().cache.hits >= 1


async def test_session_loss_stops_writes(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    store = meta_server.connect()
    f = ManagedLedgerFactory(store, fake_bookies.factory, FAST)
    ml = await f.open("t/ns/persistent/sess")
    await ml.add(b"a")
    meta_server.expire_session(store.session_id)
    await wait_for(lambda: ml.state is ManagedLedgerState.FENCED, what="the ledger fenced")
    with pytest.raises(ManagedLedgerFenced):
        await ml.add(b"b")


async def test_find_by_publish_time_and_reset(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(
        meta_server,
        fake_bookies,
        max_entries_per_ledger=7,
        retention_time_ms=-1,
        retention_size_bytes=-1,
    )
    ml = await f.open("t/ns/persistent/time")
    pos = [await ml.add(struct.pack(">q", 1000 + 10 * i)) for i in range(30)]
    cursor = await ml.open_cursor("s", EARLIEST)

    def extract(payload: bytes) -> int:
        return int(struct.unpack(">q", payload)[0])

    assert await cursor.find_by_publish_time(1125, extract) == pos[13]
    assert await cursor.find_by_publish_time(0, extract) == pos[0]
    assert await cursor.find_by_publish_time(99999, extract) is None
    await cursor.reset(pos[13])
    assert cursor.mark_delete_position < pos[13] and cursor.backlog().entries == 17
    got = await cursor.read_entries(100)
    assert got[0].position == pos[13] and len(got) == 17
    cursor.rewind()
    assert cursor.read_position == pos[13]
    assert await cursor.reset_to_publish_time(1201, extract) == pos[21]
    assert cursor.backlog().entries == 9
    assert await cursor.reset_to_publish_time(10**9, extract) > pos[-1]
    assert cursor.backlog().entries == 0


async def test_failed_ledger_rolls_over_once_bookies_return_and_keeps_its_unconfirmed_adds(
    meta_server: MemoryMetadataServer,
    fake_bookies: FakeBookieCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Ensemble-change retries, then the rollover's ledger-creation retries, on the factory's
    clock: an AutojumpClock, so minutes of back-off take no real time. The add the failed
    ledger never confirmed waits, and lands in the next ledger ahead of later adds."""
    with caplog.at_level(logging.WARNING, logger="magnetar.broker.ledger.managed_ledger"):
        async with AutojumpClock() as clock:
            await _failed_ledger_rolls_over(meta_server, fake_bookies, clock)
    # back-off doubling to 2 s: 60 s hold about 30 creation retries, all slept on the clock
    assert caplog.text.count("retrying after") >= 20


async def _failed_ledger_rolls_over(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, clock: AutojumpClock
) -> None:
    config = dataclasses.replace(
        FAST,
        ensemble_change_timeout_ms=100_000,
        add_timeout_ms=10_000,
        retention_time_ms=-1,
        retention_size_bytes=-1,
    )
    f = ManagedLedgerFactory(
        meta_server.connect(), fake_bookies.factory, config, rng=random.Random(3), clock=clock
    )
    ml = await f.open("t/ns/persistent/fail")
    first = await ml.add(b"a")
    victims = [b for b in fake_bookies.bookies if b not in ml.current.metadata.last_ensemble]  # type: ignore[union-attr]
    for b in victims:
        fake_bookies.crash(b)  # no spare bookie left
    fake_bookies.crash(ml.current.metadata.last_ensemble[0])  # type: ignore[union-attr]
    t0 = clock.monotonic_ms()
    old = ml.current
    assert old is not None
    unconfirmed = ml.add_nowait(b"unconfirmed")
    # the ensemble change retries until its timeout, then the ledger fails: the add is not
    # failed but handed back to the managed ledger, and the ledger is closed at its LAC
    await wait_for(lambda: old.is_closed, 30, "the failed ledger closed")
    assert clock.monotonic_ms() - t0 >= 100_000
    got = await ml.store.get(paths.ledger_metadata(old.ledger_id))
    assert got is not None
    closed = LedgerMetadata.from_bytes(got.value)
    assert closed.state is LedgerState.CLOSED and closed.last_entry_id == first.entry_id
    queued = ml.add_nowait(b"b")  # queued while the managed ledger rolls over
    await clock.sleep(60)  # the rollover's ledger creation retries while no bookie is up
    assert not unconfirmed.done() and not queued.done()
    for b in list(fake_bookies.bookies):
        fake_bookies.restart(b)
    second = await asyncio.wait_for(queued, 30)
    moved = await asyncio.wait_for(unconfirmed, 30)
    assert first.ledger_id < moved.ledger_id == second.ledger_id
    # what /metrics shows (magnetar_ml_ledgers_given_up_total, magnetar_ml_adds_moved_total)
    assert ManagedLedgerStorage(f).failure_statistics() == (1, 1)
    assert moved.entry_id + 1 == second.entry_id
    reader = ml.new_non_durable_cursor(EARLIEST)
    assert [e.payload for e in await reader.read_entries(10)] == [b"a", b"unconfirmed", b"b"]
    await reader.close()
    assert ml.cursors.readers == []


async def test_close_does_not_wait_for_bookies_that_never_return(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """Every bookie is gone: the current ledger fails and the rollover retries its ledger
    creation. A close (an unload, a shutdown) makes it give up at its next retry: close
    returns, and the add it held fails instead of waiting forever."""
    async with AutojumpClock() as clock:
        config = dataclasses.replace(
            FAST, ensemble_change_timeout_ms=1_000, add_timeout_ms=500, quarantine_ms=0
        )
        f = ManagedLedgerFactory(
            meta_server.connect(), fake_bookies.factory, config, rng=random.Random(4), clock=clock
        )
        ml = await f.open("t/ns/persistent/close-without-bookies")
        await ml.add(b"a")
        old = ml.current
        assert old is not None
        for b in list(fake_bookies.bookies):
            fake_bookies.crash(b)
        held = ml.add_nowait(b"held")
        await wait_for(lambda: old.is_closed, 30, "the failed ledger closed")
        await clock.sleep(10)  # the rollover retries its ledger creation meanwhile
        assert not held.done()
        await asyncio.wait_for(ml.close(), 30)
        with pytest.raises(Exception, match="bookies"):
            await held
        assert ml.state is ManagedLedgerState.CLOSED


async def test_concurrent_opens_in_one_factory_share_one_managed_ledger(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(meta_server, fake_bookies)
    a, b = await asyncio.gather(f.open("t/ns/persistent/same"), f.open("t/ns/persistent/same"))
    assert a is b
    assert (await a.add(b"x")).entry_id == 0
    stats = a.statistics()
    assert stats.ledgers == 1 and stats.entries == 1 and stats.state == "LedgerOpened"


async def test_terminate_stops_adds_and_survives_reopen(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(meta_server, fake_bookies, retention_time_ms=-1, retention_size_bytes=-1)
    ml = await f.open("t/ns/persistent/term")
    last = [await ml.add(b"%d" % i) for i in range(3)][-1]
    assert await ml.terminate() == last
    with pytest.raises(ManagedLedgerTerminated):
        await ml.add(b"no")
    ml.check_invariants()
    ml2 = await factory(meta_server, fake_bookies).open("t/ns/persistent/term")
    assert ml2.is_terminated and ml2.get_last_confirmed() == last
    with pytest.raises(ManagedLedgerTerminated):
        ml2.add_nowait(b"no")
    got = await ml2.new_non_durable_cursor(EARLIEST).read_entries(10)
    assert [e.payload for e in got] == [b"0", b"1", b"2"]


async def test_truncate_deletes_every_earlier_ledger_whatever_retention_and_cursors(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(
        meta_server,
        fake_bookies,
        max_entries_per_ledger=4,
        retention_time_ms=-1,
        retention_size_bytes=-1,
    )  # retention: keep everything
    ml = await f.open("t/ns/persistent/trunc")
    slow = await ml.open_cursor("slow", EARLIEST)  # has consumed nothing
    await asyncio.gather(*(ml.add(b"%d" % i) for i in range(10)))
    before = ml.ledgers.ids
    assert len(before) >= 2
    gone = await ml.truncate()
    assert gone == sorted(before)  # the rollover left none of them current
    assert ml.ledgers.ids and not set(ml.ledgers.ids) & set(before)
    assert slow.backlog().entries == 0
    ml.check_invariants()
    store = meta_server.connect()
    for ledger_id in gone:  # the ledgers themselves are deleted, not only forgotten
        assert await store.get(paths.ledger_metadata(ledger_id)) is None
    pos = await ml.add(b"after")
    got = await ml.new_non_durable_cursor(EARLIEST).read_entries(10)
    assert [e.payload for e in got] == [b"after"]
    assert (await slow.read_entries(10))[0].position == pos
    await ml.close()
    ml2 = await factory(meta_server, fake_bookies).open("t/ns/persistent/trunc")
    assert not set(ml2.ledgers.ids) & set(before)  # the metadata says so durably


async def test_cache_is_evicted_behind_every_reader(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(meta_server, fake_bookies)
    ml = await f.open("t/ns/persistent/cache")
    a = await ml.open_cursor("a", LATEST)
    b = ml.new_non_durable_cursor(LATEST)
    await asyncio.gather(*(ml.add(b"x" * 100) for _ in range(10)))
    assert ml.statistics().cache.entries == 10
    await a.read_entries(10)
    assert ml.statistics().cache.entries == 10  # b has not read yet
    await b.read_entries(6)
    assert ml.statistics().cache.entries == 4
    ml.check_invariants()


def watch_order(futures: list[asyncio.Future[Position]], violations: list[int]) -> None:
    """On each add's completion, every earlier add's future must already be done: a caller
    with many adds may await only the last one, then read the others' results."""

    def check(index: int, _: asyncio.Future[Position]) -> None:
        if not all(f.done() for f in futures[:index]):
            violations.append(index)

    for i, fut in enumerate(futures):
        fut.add_done_callback(lambda f, i=i: check(i, f))


async def test_an_add_completes_only_after_every_earlier_add_across_rollovers(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(meta_server, fake_bookies, max_entries_per_ledger=7)
    ml = await f.open("t/ns/persistent/order")
    rng = random.Random(5)
    futures: list[asyncio.Future[Position]] = []
    for i in range(120):
        futures.append(ml.add_nowait(b"m%d" % i))  # some queue while the ledger rolls over
        if rng.random() < 0.2:
            await asyncio.sleep(0)
    violations: list[int] = []
    watch_order(futures, violations)
    positions = await asyncio.wait_for(asyncio.gather(*futures), 10)
    assert violations == []
    assert positions == sorted(positions) and len({p.ledger_id for p in positions}) > 10
    await f.close()


async def test_an_add_completes_only_after_every_earlier_add_when_a_ledger_fails_and_its_adds_move(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(
        meta_server,
        fake_bookies,
        ensemble_change_timeout_ms=100,
        add_timeout_ms=100,
        retention_time_ms=-1,
        retention_size_bytes=-1,
    )
    ml = await f.open("t/ns/persistent/order-fail")
    await ml.add(b"a")
    ensemble = ml.current.metadata.last_ensemble  # type: ignore[union-attr]
    for b in [b for b in fake_bookies.bookies if b not in ensemble]:
        fake_bookies.crash(b)  # no spare bookie left
    old = ml.current
    assert old is not None
    fake_bookies.crash(ensemble[0])  # the current ledger fails: its pending adds move on
    unconfirmed = [ml.add_nowait(b"x%d" % i) for i in range(5)]
    await wait_for(lambda: old.is_closed, 10, "the failed ledger closed at its LAC")
    later = [ml.add_nowait(b"y%d" % i) for i in range(5)]  # queued for the next ledger
    violations: list[int] = []
    watch_order([*unconfirmed, *later], violations)
    for b in list(fake_bookies.bookies):
        fake_bookies.restart(b)
    done = await asyncio.wait_for(asyncio.gather(*unconfirmed, *later), 10)
    assert len(done) == 10 and violations == []
    assert len({p.ledger_id for p in done}) == 1 and done[0].ledger_id > old.ledger_id
    reader = ml.new_non_durable_cursor(EARLIEST)
    got = [e.payload for e in await reader.read_entries(20)]
    assert got == [b"a"] + [b"x%d" % i for i in range(5)] + [b"y%d" % i for i in range(5)]
    await reader.close()
    await f.close()


async def test_trim_requested_during_a_trim_runs_again_after_it(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """A trigger (an ack, a rollover) that arrives while a trim runs is not dropped: that trim
    may have read the cursors before the ack moved them."""
    f = factory(meta_server, fake_bookies)
    ml = await f.open("t/ns/persistent/trim-again")
    await ml.add(b"x")
    started: list[int] = []
    gate = asyncio.Event()

    async def gated_trim() -> list[int]:
        started.append(1)
        await gate.wait()
        return []

    ml.trimming.trim = gated_trim  # type: ignore[method-assign]
    ml.trimming.trim_soon()
    await wait_for(lambda: started, what="the first trim started")
    assert started == [1]
    ml.trimming.trim_soon()  # during the running trim
    ml.trimming.trim_soon()  # coalesced with the previous trigger
    assert started == [1]
    gate.set()
    await wait_for(
        lambda: len(started) == 2 and not ml.trimming.running,
        what="the coalesced trim done",
    )
    assert started == [1, 1]  # exactly one more trim
    await f.close()


async def test_add_many_nowait_sends_the_run_before_returning(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """A run of adds (the publish path's batch) reaches the bookies in the call itself, not in
    a later loop callback, and completes in order with consecutive positions."""
    f = factory(meta_server, fake_bookies)
    ml = await f.open("t/ns/persistent/many")
    await ml.add(b"first")  # the ledger is open
    before = sum(b.adds_received for b in fake_bookies.bookies.values())
    futures = ml.add_many_nowait([b"a", b"b", b"c"])
    # E = Qw = 2: each add went to two bookies, synchronously
    assert sum(b.adds_received for b in fake_bookies.bookies.values()) - before == 6
    positions = [await fut for fut in futures]
    assert [p.entry_id for p in positions] == [1, 2, 3]
    c = ml.new_non_durable_cursor(EARLIEST)
    assert [e.payload for e in await c.read_entries(10)] == [b"first", b"a", b"b", b"c"]
    await f.close()


async def test_a_batch_of_adds_is_taken_whole_or_refused_whole(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """``add_many_nowait`` (one SEND batch of a topic) with no room for all of it refuses all
    of it: none is stored while the caller reports the batch failed."""
    f = factory(meta_server, fake_bookies, max_pending_adds=10, add_timeout_ms=60_000)
    ml = await f.open("t/ns/persistent/whole")
    for b in fake_bookies.bookies.values():
        b.hang()  # adds stay pending
    first = ml.add_many_nowait([b"a%d" % i for i in range(8)])
    with pytest.raises(TooManyPendingAdds):
        ml.add_many_nowait([b"b%d" % i for i in range(5)])
    for b in fake_bookies.bookies.values():
        b.resume()
    await asyncio.gather(*first)
    cursor = ml.new_non_durable_cursor(EARLIEST)
    got = [e.payload for e in await cursor.read_entries(20)]
    assert got == [b"a%d" % i for i in range(8)]
    await cursor.close()
    await f.close()
