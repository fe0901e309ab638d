"""Tiered storage in the managed ledger, on fake bookies, an in-memory object store behind a
fault wrapper, and virtual time: how an offload is recorded (and what a crash at each step
leaves), the triggers, the deletion lag, reads from the store (waiting out an outage, refusing
corrupt data), retention and deletion of offloaded objects."""

from __future__ import annotations

import asyncio
import json
import pathlib
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from support.autojump import AutojumpClock
from support.waiting import wait_for

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import (
    EARLIEST,
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
)
from magnetar.broker.ledger.errors import ManagedLedgerFenced
from magnetar.broker.ledger.ledger_list import LedgerList, OffloadContext
from magnetar.broker.ledger.offloading import (
    STORE_READERS_MAX,
    InvalidOffloadPosition,
    OffloadedLedgerCorrupt,
    OffloadedLedgerUnavailable,
    OffloadInProgress,
    OffloadNotConfigured,
    OffloadStatus,
)
from magnetar.broker.ledger.position import Position
from magnetar.broker.offload import (
    FaultInjectingBlobStore,
    OffloadError,
    OffloadPolicies,
    memory_blob_store,
)
from magnetar.broker.offload.keys import parse_key
from magnetar.broker.offload.offloader import OffloaderTuning
from magnetar.broker.offload.registry import OffloaderRegistry
from magnetar.broker.offload.retry import RetryPolicy
from magnetar.broker.offload.store import drain
from magnetar.clock import VirtualClock
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer

NAME = "t/ns/persistent/offloaded"


def policies(**changes: object) -> OffloadPolicies:
    base: dict[str, object] = {
        "driver": "filesystem",
        "file_system_uri": "/offload-unit",
        "read_buffer_size_bytes": 1024,
        "max_block_size_bytes": 4096,
        "deletion_lag_ms": 0,
    }
    base.update(changes)
    return OffloadPolicies(**base)  # type: ignore[arg-type]


@dataclass
class Rig:
    clock: VirtualClock
    store: FaultInjectingBlobStore
    factory: ManagedLedgerFactory
    server: MemoryMetadataServer

    async def open(self, name: str = NAME) -> ManagedLedger:
        return await self.factory.open(name)

    def stored_list(self, name: str = NAME) -> LedgerList:
        return LedgerList.from_bytes(name, self.server.nodes[paths.managed_ledger(name)].value)

    async def objects(self) -> list[str]:
        return sorted(o.key for o in await drain(self.store.list()))


def make_rig(
    server: MemoryMetadataServer,
    bookies: FakeBookieCluster,
    clock: VirtualClock,
    offload: OffloadPolicies,
    store: FaultInjectingBlobStore | None = None,
    **config: object,
) -> Rig:
    """Managed ledgers on ``bookies`` offloading to an in-memory store (``store``: shared
    with another rig, as two brokers share a bucket)."""
    if store is None:
        store = FaultInjectingBlobStore(memory_blob_store(), clock=clock)
    tuning = OffloaderTuning(
        read_retry=RetryPolicy(initial_backoff_ms=100, max_backoff_ms=1_000, deadline_ms=5_000)
    )
    shared = store
    registry = OffloaderRegistry(clock=clock, tuning=tuning, store_factory=lambda _p: shared)
    cfg = ManagedLedgerConfig(
        **{  # type: ignore[arg-type]
            "min_ledger_rollover_time_ms": 0,
            "max_entries_per_ledger": 10,
            "retention_time_ms": -1,
            "retention_size_bytes": -1,
            "offload": offload,
            **config,
        }
    )
    factory = ManagedLedgerFactory(
        server.connect(), bookies.factory, cfg, clock=clock, offloaders=registry
    )
    return Rig(clock, shared, factory, server)


def payload(i: int) -> bytes:
    return b"entry-%05d-" % i + bytes([i % 251]) * (50 + i % 7)


async def fill(ml: ManagedLedger, n: int, start: int = 0) -> list[Position]:
    return [await ml.add(payload(i)) for i in range(start, start + n)]


async def read_all(ml: ManagedLedger) -> list[bytes]:
    cursor = ml.new_non_durable_cursor(EARLIEST)
    out: list[bytes] = []
    while True:
        got = await cursor.read_entries(7)
        if not got:
            return out
        out += [e.payload for e in got]


@pytest.fixture
async def autojump() -> AsyncIterator[AutojumpClock]:
    async with AutojumpClock() as clock:
        yield clock


# -- recording -----------------------------------------------------------------------------


async def test_an_offload_is_recorded_before_it_starts_and_complete_only_after_verification(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, policies(deletion_lag_ms=3_600_000))
    ml = await rig.open()
    await fill(ml, 25)  # ledgers of 10, 10 and the current one
    await wait_for(lambda: len(ml.ledgers.ids) == 3, what="two rollovers")
    first = ml.ledgers.ids[0]
    rig.store.delay_next(re.compile(rf"-ledger-{first}$"), 30.0, operations="put")
    running = asyncio.ensure_future(ml.offloading.offload_prefix(Position(ml.ledgers.ids[2], 0)))
    await wait_for(lambda: rig.store.statistics().injected_delays == 1, what="the upload")
    stored = rig.stored_list().info(first)
    assert stored is not None and stored.offload is not None
    assert not stored.offload.complete and stored.offload.record is None
    attempt = stored.offload.uid
    assert ml.offloading.status().status is OffloadStatus.RUNNING
    assert not ml.offloading.routes_to_store(first)  # nothing of it is read from the store yet
    clock.advance(31)
    first_unoffloaded = await running
    assert first_unoffloaded == Position(ml.ledgers.ids[2], 0)
    for info in rig.stored_list().ledgers[:2]:
        assert info.offload is not None and info.offload.complete
        assert info.offload.record is not None and info.offload.record.ledger_id == info.ledger_id
        assert not info.offload.bookkeeper_deleted  # the deletion lag is an hour
    assert rig.stored_list().info(first).offload.uid == attempt  # type: ignore[union-attr]
    assert rig.stored_list().ledgers[2].offload is None  # the current ledger never moves
    status = ml.offloading.status()
    assert status.status is OffloadStatus.SUCCESS
    assert status.to_json()["firstUnoffloadedMessage"]["ledgerId"] == ml.ledgers.ids[2]
    keys = await rig.objects()
    assert len(keys) == 4 and {parse_key(k).ledger_id for k in keys} == set(ml.ledgers.ids[:2])  # type: ignore[union-attr]
    assert await read_all(ml) == [payload(i) for i in range(25)]
    ml.check_invariants()
    await rig.factory.close()


async def test_a_lost_final_write_leaves_the_ledger_on_bookies_and_an_orphan_the_next_owner_deletes(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """The upload completes and verifies, but the final compare-and-set loses (the metadata
    changed under us: another owner): as after a SIGKILL before the metadata write, the
    stored list names an unfinished attempt whose objects are all there. Nobody reads them;
    the next owner deletes them, clears the context and offloads afresh."""
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, policies())
    ml = await rig.open()
    await fill(ml, 15)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    first = ml.ledgers.ids[0]
    rig.store.delay_next(re.compile(rf"-ledger-{first}-index$"), 10.0, operations="put")
    running = asyncio.ensure_future(ml.offloading.offload_prefix(Position(ml.ledgers.ids[1], 0)))
    await wait_for(lambda: rig.store.statistics().injected_delays == 1, what="the index write")
    path = paths.managed_ledger(NAME)
    node = meta_server.nodes[path]
    await meta_server.connect().put(path, node.value, expected_version=node.version)
    clock.advance(11)
    with pytest.raises(ManagedLedgerFenced):
        await running
    assert ml.offloading.status().status is OffloadStatus.ERROR
    stored = rig.stored_list().info(first)
    assert stored is not None and stored.offload is not None and not stored.offload.complete
    orphan = stored.offload.uid
    assert len(await rig.objects()) == 2  # a whole, verified upload nobody records
    # the next owner never reads it from the store ...
    again = make_rig(meta_server, fake_bookies, clock, policies(), store=rig.store)
    taken = await again.open()
    assert not taken.offloading.routes_to_store(first)
    assert (await read_all(taken))[:15] == [payload(i) for i in range(15)]
    # ... deletes it on its first run (at open) and offloads the ledger afresh when asked
    await taken.offloading.idle()
    assert await rig.objects() == []
    assert taken.ledgers.info(first).offload is None  # type: ignore[union-attr]
    await taken.offloading.offload_prefix(Position(taken.ledgers.ids[-1], 0))
    info = taken.ledgers.info(first)
    assert info is not None and info.offloaded and info.offload is not None
    assert info.offload.uid != orphan
    left = [parse_key(k) for k in await rig.objects()]
    assert {a.attempt for a in left if a is not None and a.ledger_id == first} == {info.offload.uid}
    assert (await read_all(taken))[:15] == [payload(i) for i in range(15)]
    await rig.factory.close()
    await again.factory.close()


async def test_a_failed_upload_records_nothing_complete_and_the_next_run_cleans_it(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, autojump: AutojumpClock
) -> None:
    rig = make_rig(meta_server, fake_bookies, autojump, policies())
    ml = await rig.open()
    await fill(ml, 15)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    first = ml.ledgers.ids[0]
    rig.store.take_down()
    with pytest.raises(OffloadError):
        await ml.offloading.offload_prefix(Position(ml.ledgers.ids[1], 0))
    status = ml.offloading.status()
    assert status.status is OffloadStatus.ERROR and "the store is down" in status.last_error
    info = ml.ledgers.info(first)
    assert info is not None and not info.offloaded and info.offload is not None
    assert not ml.offloading.routes_to_store(first)
    assert (await read_all(ml))[:15] == [payload(i) for i in range(15)]  # still on bookies
    rig.store.bring_back()
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[1], 0))
    assert ml.ledgers.info(first).offloaded  # type: ignore[union-attr]
    assert len(await rig.objects()) == 2
    await rig.factory.close()


async def test_manual_offload_refuses_what_it_cannot_do(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, OffloadPolicies())
    ml = await rig.open()
    await fill(ml, 12)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    with pytest.raises(OffloadNotConfigured):
        ml.offloading.trigger(Position(ml.ledgers.ids[1], 0))
    ml.offloading.set_policies(policies().resolve())
    with pytest.raises(InvalidOffloadPosition):
        ml.offloading.trigger(Position(ml.ledgers.ids[1] + 100, 0))
    rig.store.delay_next(re.compile(r"-ledger-\d+$"), 5.0, operations="put")
    ml.offloading.trigger(Position(ml.ledgers.ids[1], 0))
    with pytest.raises(OffloadInProgress):
        ml.offloading.trigger(Position(ml.ledgers.ids[1], 0))
    await wait_for(lambda: rig.store.statistics().injected_delays == 1, what="the upload")
    clock.advance(6)
    await ml.offloading.idle()
    assert ml.offloading.status().status is OffloadStatus.SUCCESS
    await rig.factory.close()


# -- triggers ------------------------------------------------------------------------------


async def test_threshold_zero_offloads_each_ledger_as_it_rolls_over(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, policies(threshold_bytes=0))
    ml = await rig.open()
    await fill(ml, 35)
    await wait_for(lambda: len(ml.ledgers.ids) == 4, what="three rollovers")
    await wait_for(
        lambda: all(i.offloaded for i in ml.ledgers.ledgers[:-1]), what="every sealed ledger"
    )
    await ml.offloading.idle()
    # lag 0: the bookie copies went right away
    assert all(i.bookkeeper_deleted for i in ml.ledgers.ledgers[:-1])
    assert ml.offloading.statistics().offloaded_ledgers == 3
    assert await read_all(ml) == [payload(i) for i in range(35)]
    await rig.factory.close()


async def test_threshold_in_bytes_keeps_the_newest_bytes_on_bookies(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, policies())
    ml = await rig.open()
    await fill(ml, 45)
    await wait_for(lambda: len(ml.ledgers.ids) == 5, what="four rollovers")
    sizes = [size for _, _, size in ml.ledgers.sizes()]
    # keep the current ledger and the newest two sealed ones: the older two move
    keep = sum(sizes[-3:])
    ml.offloading.set_policies(policies(threshold_bytes=keep).resolve())
    await wait_for(lambda: not ml.offloading.running, what="the automatic run")
    await ml.offloading.idle()
    assert [i.offloaded for i in ml.ledgers.ledgers] == [True, True, False, False, False]
    await rig.factory.close()


async def test_threshold_in_seconds_moves_ledgers_closed_long_enough_ago(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(
        meta_server,
        fake_bookies,
        clock,
        policies(threshold_seconds=600),
        rollover_check_interval_ms=60_000,
    )
    ml = await rig.open()
    await fill(ml, 11)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    await ml.offloading.idle()
    assert not ml.ledgers.ledgers[0].offloaded
    clock.advance(540)  # the periodic check runs every minute: 9 minutes: not yet
    await ml.offloading.idle()
    assert not ml.ledgers.ledgers[0].offloaded
    clock.advance(120)
    await wait_for(lambda: ml.ledgers.ledgers[0].offloaded, what="the age trigger")
    await rig.factory.close()


# -- the deletion lag ------------------------------------------------------------------------


async def test_the_bookie_copy_is_deleted_after_the_deletion_lag_only(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, policies(deletion_lag_ms=60_000))
    ml = await rig.open()
    await fill(ml, 12)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    first = ml.ledgers.ids[0]
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[1], 0))
    assert meta_server.nodes.get(paths.ledger_metadata(first)) is not None
    clock.advance(59)
    await ml.offloading.idle()
    assert meta_server.nodes.get(paths.ledger_metadata(first)) is not None
    assert not ml.ledgers.info(first).bookkeeper_deleted  # type: ignore[union-attr]
    clock.advance(2)  # the timer armed for the lag fires
    await wait_for(lambda: ml.ledgers.info(first).bookkeeper_deleted, what="the deletion")  # type: ignore[union-attr]
    await ml.offloading.idle()
    assert meta_server.nodes.get(paths.ledger_metadata(first)) is None
    stored = rig.stored_list().info(first)
    assert stored is not None and stored.bookkeeper_deleted
    assert (await read_all(ml))[:12] == [payload(i) for i in range(12)]
    await rig.factory.close()


async def test_bookkeeper_first_reads_bookies_until_their_copy_is_deleted(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(
        meta_server,
        fake_bookies,
        clock,
        policies(deletion_lag_ms=60_000, read_priority="bookkeeper-first"),
    )
    ml = await rig.open()
    await fill(ml, 12)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    first = ml.ledgers.ids[0]
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[1], 0))
    assert not ml.offloading.routes_to_store(first)
    assert (await read_all(ml))[:12] == [payload(i) for i in range(12)]
    assert ml.offloading.statistics().store_reads == 0
    clock.advance(61)
    await wait_for(lambda: ml.offloading.routes_to_store(first), what="the bookie copy deleted")
    ml.reads.cache.evict_ledger(first)
    assert (await read_all(ml))[:12] == [payload(i) for i in range(12)]
    assert ml.offloading.statistics().store_reads > 0
    await rig.factory.close()


async def test_a_bookie_copy_deleted_by_a_crashed_run_before_it_was_recorded_is_read_from_store(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(
        meta_server,
        fake_bookies,
        clock,
        policies(deletion_lag_ms=3_600_000, read_priority="bookkeeper-first"),
    )
    ml = await rig.open()
    await fill(ml, 12)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    first = ml.ledgers.ids[0]
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[1], 0))
    await rig.factory.close()
    # the ledger's metadata deleted, the flag never written (the owner died in between)
    await meta_server.connect().delete(paths.ledger_metadata(first))
    again = make_rig(
        meta_server,
        fake_bookies,
        clock,
        policies(deletion_lag_ms=3_600_000, read_priority="bookkeeper-first"),
        store=rig.store,
    )
    ml2 = await again.open()
    ml2.reads.cache.evict_ledger(first)
    assert (await read_all(ml2))[:12] == [payload(i) for i in range(12)]
    assert ml2.offloading.statistics().store_reads > 0
    await again.factory.close()


# -- reads ---------------------------------------------------------------------------------


async def test_a_store_outage_makes_readers_wait_never_skip(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, autojump: AutojumpClock
) -> None:
    rig = make_rig(meta_server, fake_bookies, autojump, policies(), read_ahead_entries=0)
    ml = await rig.open()
    await fill(ml, 25)
    await wait_for(lambda: len(ml.ledgers.ids) == 3, what="two rollovers")
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[2], 0))
    assert all(i.bookkeeper_deleted for i in ml.ledgers.ledgers[:2])
    for lid in ml.ledgers.ids[:2]:
        ml.reads.cache.evict_ledger(lid)
    cursor = await ml.open_cursor("sub", EARLIEST)
    got = [e.payload for e in await cursor.read_entries(5)]
    rig.store.take_down()
    # past the read's retry deadline (5 s here): a retriable error, the cursor did not move
    before = cursor.read_position
    with pytest.raises(OffloadedLedgerUnavailable) as failed:
        await cursor.read_entries(100)
    assert failed.value.retriable
    assert cursor.read_position == before
    # within the deadline the read just waits for the store to come back
    reading = asyncio.ensure_future(cursor.read_entries(100))
    await autojump.sleep(2.0)
    assert not reading.done()
    rig.store.bring_back()
    got += [e.payload for e in await reading]
    while rest := await cursor.read_entries(100):
        got += [e.payload for e in rest]
    assert got == [payload(i) for i in range(25)]
    assert ml.offloading.statistics().store_read_errors >= 1
    await rig.factory.close()


async def test_corrupt_offloaded_data_is_an_error_never_wrong_bytes(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, policies())
    ml = await rig.open()
    await fill(ml, 12)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    first = ml.ledgers.ids[0]
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[1], 0))
    ml.reads.cache.evict_ledger(first)
    rig.store.corrupt_next(re.compile(rf"-ledger-{first}$"), at=200, count=2)
    with pytest.raises(OffloadedLedgerCorrupt, match="does not verify"):
        await ml.read_range(first, 0, 9)
    # a transfer damaged once is fetched again and verifies
    rig.store.corrupt_next(re.compile(rf"-ledger-{first}$"), at=200, count=1)
    assert [e.payload for e in await ml.read_range(first, 0, 9)] == [payload(i) for i in range(10)]
    await rig.factory.close()


async def test_sequential_store_reads_draw_their_read_ahead_from_the_broker_budget(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, policies(), max_entries_per_ledger=200)
    ml = await rig.open()
    await fill(ml, 210)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    first = ml.ledgers.ids[0]
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[1], 0))
    ml.reads.cache.evict_ledger(first)
    budget = rig.factory.read_ahead_budget
    await ml.read_range(first, 0, 9)
    await ml.read_range(first, 10, 19)  # sequential: blocks ahead are fetched
    assert budget.held > 0
    ml.offloading.forget(first)
    assert budget.held == 0
    await rig.factory.close()


# -- retention and deletion -----------------------------------------------------------------


async def test_retention_and_topic_deletion_delete_the_offloaded_objects(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, policies(), retention_time_ms=0)
    ml = await rig.open()
    cursor = await ml.open_cursor("sub", EARLIEST)
    positions = await fill(ml, 25)
    await wait_for(lambda: len(ml.ledgers.ids) == 3, what="two rollovers")
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[2], 0))
    assert len(await rig.objects()) == 4
    await cursor.mark_delete(positions[9])  # the first ledger consumed
    await ml.trimming.trim()
    await ml.trimming.idle()
    remaining = {parse_key(k).ledger_id for k in await rig.objects()}  # type: ignore[union-attr]
    assert remaining == {ml.ledgers.ids[0]}
    await ml.delete()
    assert await rig.objects() == []
    await rig.factory.close()


async def test_offload_contexts_round_trip_through_the_stored_list() -> None:
    ctx = OffloadContext(uuid.uuid4(), timestamp_ms=5, driver_name="S3", driver_metadata={"a": "b"})
    doc = json.loads(json.dumps(ctx.to_json()))
    assert OffloadContext.from_json(doc) == ctx
    with pytest.raises(ValueError):
        OffloadContext(uuid.uuid4(), complete=True)
    lst = LedgerList.from_bytes("x", b'{"ledgers":[{"id":1,"entries":2,"size":3,"ts":4}]}')
    assert lst.ledgers[0].offload is None


async def test_store_readers_are_bounded_and_a_closed_one_reopens(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    rig = make_rig(meta_server, fake_bookies, clock, policies(), max_entries_per_ledger=3)
    ml = await rig.open()
    await fill(ml, 3 * (STORE_READERS_MAX + 3) + 1)
    await wait_for(lambda: len(ml.ledgers.ids) == STORE_READERS_MAX + 4, what="rollovers")
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[-1], 0))
    sealed = ml.ledgers.ids[:-1]
    first = await ml.offloading.reader(sealed[0])  # handed out, not read yet
    for lid in sealed:
        ml.reads.cache.evict_ledger(lid)
        await ml.read_range(lid, 0, 2)
    assert first.released  # closed as least recently used
    got = await first.read(0, 2)  # ... and reopened by its next read
    assert [e.payload for e in got] == [payload(i) for i in range(3)]
    ml.check_invariants()
    await rig.factory.close()


async def test_ledgers_offloaded_before_the_policies_changed_are_read_from_where_they_went(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, tmp_path: pathlib.Path
) -> None:
    """One offloader per store location: a record names its driver and location, so a
    namespace that moves its offload directory (or bucket) still reads what went before."""
    clock = VirtualClock()
    cfg = ManagedLedgerConfig(
        min_ledger_rollover_time_ms=0,
        max_entries_per_ledger=10,
        retention_time_ms=-1,
        retention_size_bytes=-1,
    )
    factory = ManagedLedgerFactory(
        meta_server.connect(),
        fake_bookies.factory,
        cfg,
        clock=clock,
        offloaders=OffloaderRegistry(clock=clock),
    )
    ml = await factory.open(NAME)
    old = policies(file_system_uri=f"file://{tmp_path / 'old'}").resolve()
    new = policies(file_system_uri=f"file://{tmp_path / 'new'}").resolve()
    ml.offloading.set_policies(old)
    await fill(ml, 12)
    await wait_for(lambda: len(ml.ledgers.ids) == 2, what="a rollover")
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[1], 0))
    ml.offloading.set_policies(new)
    await fill(ml, 10, start=12)
    await wait_for(lambda: len(ml.ledgers.ids) == 3, what="a rollover")
    await ml.offloading.offload_prefix(Position(ml.ledgers.ids[2], 0))
    assert len(list((tmp_path / "old").iterdir())) == 2
    assert len(list((tmp_path / "new").iterdir())) == 2
    for lid in ml.ledgers.ids[:2]:
        ml.reads.cache.evict_ledger(lid)
    assert await read_all(ml) == [payload(i) for i in range(22)]
    assert len(factory.offloaders) == 2
    await factory.close()


async def test_a_failed_automatic_offload_is_tried_again_after_its_back_off_by_itself(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, autojump: AutojumpClock
) -> None:
    """No rollover and no periodic check comes (the check interval is a day): the back-off
    timer alone resumes the offload once the store answers again."""
    rig = make_rig(
        meta_server,
        fake_bookies,
        autojump,
        policies(threshold_bytes=0),
        rollover_check_interval_ms=86_400_000,
    )
    ml = await rig.open()
    rig.store.take_down()
    await fill(ml, 12)
    await wait_for(lambda: ml.offloading.statistics().offloads_failed >= 1, what="a failure")
    assert not ml.ledgers.ledgers[0].offloaded
    rig.store.bring_back()
    await wait_for(lambda: ml.ledgers.ledgers[0].offloaded, what="the retried offload")
    await ml.offloading.idle()
    assert ml.ledgers.ledgers[0].bookkeeper_deleted
    await rig.factory.close()
