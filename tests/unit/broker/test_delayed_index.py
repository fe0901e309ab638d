"""The delayed-delivery index on a VirtualClock: due order, no early delivery, milliseconds to
two years, a bounded near wheel, sealing and loading ahead of time, dead-run release,
recovery after a crash (memory store and managed ledger over fake bookies)."""

from __future__ import annotations

import gc
import itertools
import random
import tracemalloc
from array import array

import pytest
from support.delayed_model import DelayedHarness

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.delayed import (
    CorruptIndexRecord,
    DelayedDeliveryConfig,
    DelayedDeliveryIndex,
    ManagedLedgerSegmentStore,
    MemorySegmentStore,
    NearWheel,
    Snapshot,
    delayed_index_ledger_name,
)
from magnetar.broker.delayed.codec import ChunkRef, RunRef, decode_chunk, encode_chunk
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory, Position
from magnetar.clock import VirtualClock
from magnetar.zk.memory import MemoryMetadataServer

SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
YEAR = 365 * DAY

SMALL = DelayedDeliveryConfig(
    horizon_ms=10 * SECOND,
    prefetch_ms=5 * SECOND,
    seal_max_entries=64,
    seal_interval_ms=30 * SECOND,
    chunk_records=16,
)


async def memory_index(
    clock: VirtualClock, store: MemorySegmentStore, config: DelayedDeliveryConfig = SMALL
) -> DelayedDeliveryIndex:
    index = DelayedDeliveryIndex(store, clock, config, on_due=lambda: None)
    await index.recover()
    return index


# ------------------------------------------------------------------------------- codec, wheel


def test_chunk_round_trip_and_compactness() -> None:
    rng = random.Random(1)
    at = array("q", sorted(1_700_000_000_000 + rng.randrange(10**9) for _ in range(4096)))
    lid = array("q", [rng.randrange(5, 9) for _ in range(4096)])
    eid = array("q", [rng.randrange(50_000) for _ in range(4096)])
    data = encode_chunk(at, lid, eid)
    assert decode_chunk(data) == (at, lid, eid)
    assert len(data) < 12 * 4096  # far less than 24 bytes a record
    with pytest.raises(CorruptIndexRecord):
        decode_chunk(data[:-5])
    with pytest.raises(CorruptIndexRecord):
        decode_chunk(b"S" + data[1:])


def test_snapshot_round_trip() -> None:
    snap = Snapshot(
        123,
        Position(4, 5),
        (RunRef(2, (ChunkRef(Position(9, 0), 10, 20, 3), ChunkRef(Position(9, 1), 20, 90, 7))),),
        3,
    )
    assert Snapshot.from_bytes(snap.to_bytes()) == snap
    assert Snapshot.from_bytes(Snapshot(1, None).to_bytes()) == Snapshot(1, None)
    with pytest.raises(CorruptIndexRecord):
        Snapshot.from_bytes(b"S{not json")


def test_near_wheel_pops_in_due_order_and_never_early() -> None:
    rng = random.Random(2)
    wheel = NearWheel(slot_ms=100)
    recs = [(rng.randrange(0, 5_000), 1, i) for i in range(2_000)]
    for r in recs:
        wheel.add(*r)
    out = []
    for now in range(0, 5_100, 37):
        got = wheel.pop_due(now, 50)
        assert all(r[0] <= now for r in got)
        out.extend(got)
        if len(got) == 50:  # max_n respected; the rest waits for the next call
            out.extend(wheel.pop_due(now, 10**9))
        # a late insert into the slot being drained keeps the order
        wheel.add(now + 1, 2, now)
        recs.append((now + 1, 2, now))
    out.extend(wheel.pop_due(10**9, 10**9))
    assert out == sorted(recs)
    assert len(wheel) == 0


# ------------------------------------------------------------------------------- ordering


async def test_due_order_no_early_delivery_from_milliseconds_to_two_years() -> None:
    clock = VirtualClock()
    h = DelayedHarness(clock, await memory_index(clock, MemorySegmentStore()), reopen=None)  # type: ignore[arg-type]
    rng = random.Random(3)
    delays = [1, 2, 50, 999, SECOND, 7 * SECOND, MINUTE, HOUR, DAY, 30 * DAY, YEAR, 2 * YEAR]
    for _ in range(40):
        for _ in range(rng.randrange(1, 30)):
            h.publish(rng.choice(delays) + rng.randrange(0, 3))
        h.read()
        await h.run_until(clock.now_ms() + rng.randrange(0, 3 * SECOND))
    assert h.index.size() > 0
    await h.run_until(clock.now_ms() + 2 * YEAR + DAY)
    h.check(max_lateness_ms=0)  # virtual time: exactly on time
    assert h.undelivered() == []
    # pops come out in due order
    dues = [h.due[p] for p, _ in h.deliveries]
    times = [t for _, t in h.deliveries]
    assert times == sorted(times)
    assert sum(1 for a, b in itertools.pairwise(dues) if b < a) == 0
    st = h.index.statistics()
    assert st.pending == 0 and st.seals > 0 and st.chunks_loaded > 0
    h.index.check_invariants()


async def test_add_answers_deliver_now_for_due_and_held_for_future() -> None:
    clock = VirtualClock()
    index = await memory_index(clock, MemorySegmentStore())
    now = clock.now_ms()
    assert index.add(Position(1, 0), 0) is False  # no deliver_at_time
    assert index.add(Position(1, 1), now) is False  # due now
    assert index.add(Position(1, 2), now - 5) is False
    assert index.add(Position(1, 3), now + 1) is True
    assert index.size() == 1
    assert index.next_due_ms() == now + 1
    assert index.pop_due(now, 10) == []
    clock.advance(0.001)
    assert index.pop_due(clock.now_ms(), 10) == [Position(1, 3)]
    assert index.size() == 0


async def test_on_due_fires_at_the_due_time() -> None:
    clock = VirtualClock()
    fired: list[int] = []
    index = DelayedDeliveryIndex(MemorySegmentStore(), clock, SMALL)
    index.on_due = lambda: fired.append(clock.now_ms())
    await index.recover()
    t0 = clock.now_ms()
    index.add(Position(1, 0), t0 + 1_500)
    index.add(Position(1, 1), t0 + 700)
    clock.advance(0.699)
    assert fired == []
    clock.advance(0.001)
    assert fired == [t0 + 700]
    assert index.pop_due(clock.now_ms(), 10) == [Position(1, 1)]
    clock.advance(1.0)
    assert fired == [t0 + 700, t0 + 1_500]


# ------------------------------------------------------------------------------- memory


async def test_a_million_far_future_entries_keep_memory_small() -> None:
    clock = VirtualClock()
    store = MemorySegmentStore()
    index = await memory_index(clock, store, DelayedDeliveryConfig(seal_max_entries=50_000))
    base = clock.now_ms() + DAY
    gc.collect()
    objects_before = len(gc.get_objects())
    add = index.add
    for ledger_id in range(10, 30):
        for entry_id in range(50_000):  # due times scattered over two years
            add(Position(ledger_id, entry_id), base + (entry_id * 7_919_993) % (2 * YEAR))
        await index.wait_idle()  # seals run in the background
    await index.flush()
    gc.collect()
    st = index.statistics()
    assert st.pending == 1_000_000
    assert st.near == 0 and st.unsealed == 0 and st.runs == 20
    assert st.memory_bytes < 256 << 10, st  # descriptors only: far records live on storage
    assert len(gc.get_objects()) - objects_before < 5_000  # no Python object per entry
    assert store.stored_bytes() < 16 << 20  # compact chunks: < 17 bytes a record
    index.check_invariants()


async def test_traced_memory_does_not_grow_with_far_future_entries() -> None:
    clock = VirtualClock()
    store = MemorySegmentStore()
    config = DelayedDeliveryConfig(seal_max_entries=10_000)
    index = await memory_index(clock, store, config)
    base = clock.now_ms() + DAY
    positions = [Position(1, i) for i in range(50_000)]
    dues = [base + (i * 7919) % (2 * YEAR) for i in range(50_000)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for pos, due in zip(positions, dues, strict=True):
            index.add(pos, due)
        await index.flush()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert index.size() == 50_000
    # 50,000 records in memory would be >= 1.2 MB even as packed arrays
    assert grown - store.stored_bytes() < 512 << 10, (grown, store.stored_bytes())


async def test_near_wheel_is_bounded_and_still_delivers_everything() -> None:
    clock = VirtualClock()
    config = DelayedDeliveryConfig(
        horizon_ms=MINUTE,
        prefetch_ms=10 * SECOND,
        seal_max_entries=500,
        chunk_records=100,
        near_max_entries=300,
    )
    h = DelayedHarness(clock, await memory_index(clock, MemorySegmentStore(), config), None)  # type: ignore[arg-type]
    for i in range(3_000):
        h.publish(HOUR + i * 10)  # 3,000 entries due within 30 s
    h.read()
    await h.index.flush()
    biggest = 0
    while h.index.size():
        nd = h.index.next_due_ms()
        assert nd is not None
        clock.advance(max(0, nd - clock.now_ms()) / 1000.0)
        await h.index.wait_idle()
        biggest = max(biggest, h.index.statistics().near)
        h.pop()
        h.index.check_invariants()
    # soft bound: a chunk's worth over the limit at most
    assert biggest <= config.near_max_entries + config.chunk_records
    h.check(max_lateness_ms=0)
    assert h.undelivered() == []


# ------------------------------------------------------------------------------- segments


async def test_sealed_chunks_load_ahead_of_their_due_time_and_dead_runs_are_released() -> None:
    clock = VirtualClock()
    store = MemorySegmentStore()
    index = await memory_index(clock, store)
    t0 = clock.now_ms()
    for i in range(64):  # reaches seal_max_entries: sealed into 4 chunks of 16
        index.add(Position(3, i), t0 + HOUR + i * SECOND)
    await index.wait_idle()
    st = index.statistics()
    assert st.seals == 1 and st.chunks == 4 and st.near == 0 and st.chunks_loaded == 0
    assert st.pending == 64
    # not read until prefetch + horizon before the first record
    clock.advance((HOUR - SMALL.horizon_ms - SMALL.prefetch_ms - SECOND) / 1000)
    await index.wait_idle()
    assert index.statistics().chunks_loaded == 0
    clock.advance(2.0)
    await index.wait_idle()
    assert index.statistics().chunks_loaded == 1  # the first chunk only
    # records enter the near wheel before they are due
    clock.advance((SMALL.prefetch_ms + 1) / 1000)
    await index.wait_idle()
    assert index.statistics().near > 0
    assert index.pop_due(clock.now_ms(), 100) == []
    got: list[Position] = []
    while len(got) < 64:
        nd = index.next_due_ms()
        assert nd is not None
        clock.advance(max(0, nd - clock.now_ms()) / 1000)
        await index.wait_idle()
        popped = index.pop_due(clock.now_ms(), 100)
        assert all(t0 + HOUR + p.entry_id * SECOND <= clock.now_ms() for p in popped)
        got.extend(popped)
    assert got == [Position(3, i) for i in range(64)]
    assert index.statistics().chunks_loaded == 4
    # once every record is due the run is dropped and its chunks released
    clock.advance(2.0)
    await index.wait_idle()
    assert index.statistics().runs == 0
    assert len(store.records) == 1  # the latest snapshot only


async def test_on_acked_entries_are_not_handed_out() -> None:
    clock = VirtualClock()
    index = await memory_index(clock, MemorySegmentStore())
    t0 = clock.now_ms()
    for i in range(5):
        index.add(Position(1, i), t0 + SECOND)
    index.on_acked([Position(1, 1), Position(1, 3)])
    clock.advance(1.0)
    assert index.pop_due(clock.now_ms(), 10) == [Position(1, 0), Position(1, 2), Position(1, 4)]


async def test_clear_forgets_everything_and_releases_storage() -> None:
    clock = VirtualClock()
    store = MemorySegmentStore()
    index = await memory_index(clock, store)
    t0 = clock.now_ms()
    for i in range(200):
        index.add(Position(1, i), t0 + DAY + i)
    await index.flush()
    assert len(store.records) > 5
    await index.clear()
    assert index.size() == 0 and len(store.records) == 1
    # re-read after a seek: the same positions are held again
    assert index.add(Position(1, 0), t0 + DAY) is True
    clock.advance(DAY / 1000)
    assert index.pop_due(clock.now_ms(), 10) == [Position(1, 0)]


# ------------------------------------------------------------------------------- recovery


async def test_a_replayed_delivered_entry_is_never_swallowed() -> None:
    """Redelivery (nack, consumer gone) replays a delivered delayed entry through ``add``."""
    clock = VirtualClock()
    index = await memory_index(clock, MemorySegmentStore())
    t0 = clock.now_ms()
    for i in range(100):
        assert index.add(Position(1, i), t0 + MINUTE + i) is True
    await index.flush()  # sealed: positions <= scanned_through
    clock.advance(MINUTE / 1000 + 0.05)
    await index.wait_idle()
    got = index.pop_due(clock.now_ms(), 30)
    assert got == [Position(1, i) for i in range(30)]
    # replays of delivered entries: dispatch again, do not hold
    assert not any(index.add(p, t0 + MINUTE + p.entry_id) for p in got)
    # an entry due but not popped yet, read again: dispatched now and not popped later
    assert index.add(Position(1, 40), t0 + MINUTE + 40) is False
    rest = index.pop_due(clock.now_ms(), 1_000)
    assert rest == [Position(1, i) for i in range(30, 51) if i != 40]
    # a future entry read again stays held
    assert index.add(Position(1, 99), t0 + MINUTE + 99) is True


async def test_clean_restart_keeps_every_pending_entry() -> None:
    clock = VirtualClock()
    store = MemorySegmentStore()
    index = await memory_index(clock, store)
    t0 = clock.now_ms()
    for i in range(100):
        index.add(Position(1, i), t0 + (i + 1) * MINUTE)
    await index.close()
    index2 = await memory_index(clock, store)
    assert index2.size() == 100
    # the topic re-read after a restart: sealed entries stay held, not dispatched
    assert all(index2.add(Position(1, i), t0 + (i + 1) * MINUTE) for i in range(100))
    assert index2.size() == 100


@pytest.mark.parametrize("seed", [5, 6, 7])
async def test_random_crashes_lose_nothing_deliver_nothing_early_or_twice(seed: int) -> None:
    clock = VirtualClock()
    store = MemorySegmentStore()

    async def reopen() -> DelayedDeliveryIndex:
        return await memory_index(clock, store)

    h = DelayedHarness(clock, await reopen(), reopen)
    rng = random.Random(seed)
    delays = [0, 1, 30, SECOND, 9 * SECOND, 40 * SECOND, 3 * MINUTE, HOUR, 40 * DAY, 2 * YEAR]
    crashes = 0
    for step in range(120):
        for _ in range(rng.randrange(0, 25)):
            h.publish(rng.choice(delays) + rng.randrange(0, 500))
        h.read()
        r = rng.random()
        if r < 0.08:
            await h.crash_and_recover(rng.choice([0, 0, 700, 3 * SECOND]))
            crashes += 1
            h.read()
        elif r < 0.15:
            await h.index.flush()
        await h.run_until(clock.now_ms() + rng.choice([0, 5, 700, 4 * SECOND, 2 * MINUTE]))
        h.index.check_invariants()
        if step % 40 == 39:
            await h.run_until(clock.now_ms() + rng.choice([HOUR, 41 * DAY]))
    await h.run_until(clock.now_ms() + 2 * YEAR + DAY)
    h.check(max_lateness_ms=3 * SECOND)  # late only by a downtime, never early
    assert crashes >= 3
    assert h.undelivered() == []
    assert h.index.size() == 0


# ------------------------------------------------------------------------------- managed ledger


def _factory(server: MemoryMetadataServer, bookies: FakeBookieCluster) -> ManagedLedgerFactory:
    config = ManagedLedgerConfig(
        min_ledger_rollover_time_ms=0,
        max_entries_per_ledger=20,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
    )
    return ManagedLedgerFactory(server.connect(), bookies.factory, config, rng=random.Random(3))


async def test_crash_recovery_over_a_managed_ledger_on_fake_bookies(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    clock = VirtualClock()
    name = delayed_index_ledger_name("t/ns/persistent/topic", "sub")
    assert name == "t/ns/persistent/topic/sub/__delayed_index"
    factories: list[ManagedLedgerFactory] = []

    async def reopen() -> DelayedDeliveryIndex:
        factories.append(_factory(meta_server, fake_bookies))  # a new broker: fences the old
        index = DelayedDeliveryIndex(
            ManagedLedgerSegmentStore(factories[-1], name), clock, SMALL, on_due=lambda: None
        )
        await index.recover()
        return index

    h = DelayedHarness(clock, await reopen(), reopen)
    rng = random.Random(8)
    for _ in range(300):
        h.publish(rng.choice([0, 20, 3 * SECOND, 2 * MINUTE, DAY, YEAR]) + rng.randrange(100))
    h.read()
    await h.index.wait_idle()
    await h.run_until(clock.now_ms() + 30 * SECOND)
    for _ in range(30):  # not sealed yet when the broker dies
        h.publish(rng.choice([5 * SECOND, 3 * MINUTE, DAY]))
    h.read()
    assert h.index.statistics().unsealed > 0
    await h.crash_and_recover()
    assert h.index.statistics().runs > 0
    h.read()
    await h.run_until(clock.now_ms() + YEAR + DAY)
    h.check(max_lateness_ms=0)
    assert h.undelivered() == []
    # dead records are acknowledged on the index ledger's cursor: its ledgers get trimmed
    store = h.index.store
    assert isinstance(store, ManagedLedgerSegmentStore)
    assert len(store.stored_positions()) == 1  # the latest snapshot
    await h.index.close()
    await factories[-1].close()  # the first broker "crashed": nothing of it is closed
