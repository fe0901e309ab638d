"""Reads and uploads over an in-memory store with injected faults, on virtual time.

Proves: a reader waits for an unavailable store (backing off on the injected clock) and
resumes without skipping; a read that outlasts its deadline fails retriably; a damaged
transfer is fetched again, a damaged object raises ``OffloadCorrupt``; read-ahead stays within
its bound and is dropped on a jump; the index cache is bounded; an upload whose read-back does
not verify, or whose reply is lost, is never reported complete and leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest
from support.autojump import AutojumpClock
from support.waiting import wait_for

from magnetar.broker.offload import (
    BlobStoreOffloader,
    FaultInjectingBlobStore,
    ObjectNotFound,
    OffloadCorrupt,
    OffloaderTuning,
    RetryPolicy,
    SourceMismatch,
    StoreUnavailable,
    memory_blob_store,
)
from magnetar.broker.offload.store import drain
from magnetar.broker.offload.testing import MemoryLedgerSource, payloads_of
from magnetar.clock import Clock

BLOCK = 4096


def _offloader(
    store: FaultInjectingBlobStore, clock: Clock | None = None, **tuning: object
) -> BlobStoreOffloader:
    return BlobStoreOffloader(
        store,
        driver="memory",
        driver_metadata={"bucket": "m"},
        block_bytes=BLOCK,
        part_bytes=5 << 20,
        tuning=OffloaderTuning(**tuning),  # type: ignore[arg-type]
        clock=clock,
        rng=random.Random(1),
    )


async def test_the_reader_waits_for_the_store_and_resumes() -> None:
    async with AutojumpClock() as clock:
        store = FaultInjectingBlobStore(memory_blob_store(), clock=clock)
        patient = RetryPolicy(initial_backoff_ms=100, max_backoff_ms=5000, deadline_ms=86_400_000)
        off = _offloader(store, clock, read_retry=patient)
        source = MemoryLedgerSource(1, payloads_of([500] * 300))
        handle = await off.open(await off.offload(source, uuid.uuid4(), {}))
        store.take_down()
        task = asyncio.ensure_future(handle.read(100, 200))
        await wait_for(lambda: off.statistics().read_retries >= 5, 10, "retries")
        assert not task.done()
        store.bring_back()
        got = await task
    assert [e.entry_id for e in got] == list(range(100, 201))
    assert [e.payload for e in got] == source.payloads[100:201]


async def test_a_read_past_its_deadline_fails_retriably_and_a_later_one_succeeds() -> None:
    async with AutojumpClock() as clock:
        store = FaultInjectingBlobStore(memory_blob_store(), clock=clock)
        policy = RetryPolicy(initial_backoff_ms=100, max_backoff_ms=1000, deadline_ms=10_000)
        off = _offloader(store, clock, read_retry=policy)
        source = MemoryLedgerSource(2, payloads_of([500] * 50))
        handle = await off.open(await off.offload(source, uuid.uuid4(), {}))
        store.take_down()
        start = clock.monotonic_ms()
        with pytest.raises(StoreUnavailable) as raised:
            await handle.read(0, 10)
        assert raised.value.retriable
        assert 5_000 <= clock.monotonic_ms() - start <= 10_000
        store.bring_back()
        assert [e.payload for e in await handle.read(0, 10)] == source.payloads[:11]


async def test_a_missing_object_is_not_retried() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    off = _offloader(store)
    done = await off.offload(MemoryLedgerSource(3, payloads_of([10] * 5)), uuid.uuid4(), {})
    handle = await off.open(done)
    await store.inner.delete(done.data_key)
    with pytest.raises(ObjectNotFound):
        await handle.read(0, 4)
    assert off.statistics().read_retries == 0


async def test_a_damaged_transfer_is_fetched_again_a_damaged_object_is_an_error() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    off = _offloader(store)
    source = MemoryLedgerSource(4, payloads_of([300] * 60))
    done = await off.offload(source, uuid.uuid4(), {})
    handle = await off.open(done)
    store.corrupt_next(done.data_key, operations="get_range")
    assert [e.payload for e in await handle.read(0, 5)] == source.payloads[:6]
    assert off.statistics().corrupt_reads == 1
    block = handle.index.blocks[2]
    store.corrupt_next(done.data_key, at=block.offset + block.length - 1, count=2)
    with pytest.raises(OffloadCorrupt):
        await handle.read(block.first_entry_id, block.first_entry_id)
    assert off.statistics().corrupt_reads == 3


async def test_read_ahead_is_bounded_and_dropped_on_a_jump() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    off = _offloader(store, read_ahead_bytes_max=3 * BLOCK)
    source = MemoryLedgerSource(5, payloads_of([200] * 2000))
    handle = await off.open(await off.offload(source, uuid.uuid4(), {}))
    for first in range(0, 1000, 25):
        assert [e.payload for e in await handle.read(first, first + 24)] == source.payloads[
            first : first + 25
        ]
        handle.check_invariants()
        assert handle.statistics().buffered_bytes <= 3 * BLOCK + BLOCK
    # a block counts as buffered from its request on, as fetched once it arrived: wait for both
    await wait_for(
        lambda: (
            handle.statistics().buffered_blocks >= 2
            and off.statistics().blocks_fetched > handle.index.block_of(999) + 1
        ),
        10,
        "read-ahead",
    )
    assert [e.payload for e in await handle.read(1900, 1900)] == [source.payloads[1900]]
    # a jump drops the read-ahead; only the block holding 1900 stays (not consumed to its end)
    assert handle.statistics().buffered_blocks == 1
    assert (
        handle.statistics().buffered_bytes
        == handle.index.blocks[handle.index.block_of(1900)].length
    )
    handle.check_invariants()
    await handle.close()
    assert off.statistics().read_ahead_bytes == 0


async def test_the_index_cache_is_bounded_by_entries_and_bytes() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    off = _offloader(store, index_cache_entries_max=2)
    done = [
        await off.offload(MemoryLedgerSource(10 + i, payloads_of([100] * 50)), uuid.uuid4(), {})
        for i in range(4)
    ]
    assert off.statistics().index_cache_entries == 2
    for d in done[2:]:
        await off.open(d)
    assert off.statistics().index_cache_hits == 2 and off.statistics().index_cache_misses == 0
    await off.open(done[0])
    assert off.statistics().index_cache_misses == 1 and off.statistics().index_cache_entries == 2
    tiny = _offloader(store, index_cache_bytes_max=10)
    await tiny.open(done[1])
    assert tiny.statistics().index_cache_entries == 0 and tiny.statistics().index_cache_bytes == 0
    await off.delete(done[0])
    assert off.statistics().index_cache_entries == 1


@pytest.mark.parametrize("which", ["data", "index"])
async def test_an_upload_whose_read_back_does_not_verify_is_not_complete(which: str) -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    off = _offloader(store)
    attempt = uuid.uuid4()
    key = f"{attempt}-ledger-6" + ("-index" if which == "index" else "")
    store.corrupt_next(key, operations="stream" if which == "data" else "get")
    with pytest.raises(OffloadCorrupt):
        await off.offload(MemoryLedgerSource(6, payloads_of([100] * 300)), attempt, {})
    assert await drain(store.list()) == []
    assert off.statistics().offloads_failed == 1 and off.statistics().offloads_completed == 0


async def test_a_lost_reply_to_the_index_write_is_a_failure_with_nothing_left() -> None:
    store = FaultInjectingBlobStore(memory_blob_store())
    off = _offloader(store)
    store.fail_next("", StoreUnavailable, operations="put", after=True, count=2)
    with pytest.raises(StoreUnavailable):
        await off.offload(MemoryLedgerSource(7, payloads_of([100] * 30)), uuid.uuid4(), {})
    assert await drain(store.list()) == []


async def test_a_source_that_does_not_add_up_is_refused() -> None:
    class Short(MemoryLedgerSource):
        @property
        def length(self) -> int:
            return super().length + 1

    off = _offloader(FaultInjectingBlobStore(memory_blob_store()))
    with pytest.raises(SourceMismatch):
        await off.offload(Short(8, payloads_of([10] * 10)), uuid.uuid4(), {})
    assert await drain(off.store.list()) == []


async def test_the_source_is_read_ahead_by_prefetch_rounds() -> None:
    """With the store's upload stalled, the uploader has read ``prefetch_rounds`` batches
    beyond the one being packed, and no more (the bookie reads overlap the upload, bounded)."""
    store = FaultInjectingBlobStore(memory_blob_store())
    gate = asyncio.Event()

    class Gated(MemoryLedgerSource):
        async def read(self, first: int, last: int) -> list:  # type: ignore[type-arg]
            got = await super().read(first, last)
            if self.reads >= 2:
                await gate.wait()
            return got

    for rounds, expected in ((1, 2), (3, 2)):
        gate.clear()
        off = BlobStoreOffloader(
            store,
            driver="memory",
            driver_metadata={},
            block_bytes=BLOCK,
            part_bytes=5 << 20,
            prefetch_rounds=rounds,
        )
        source = Gated(9, payloads_of([10] * 1000))
        task = asyncio.ensure_future(off.offload(source, uuid.uuid4(), {}))
        await wait_for(lambda s=source, e=expected: s.reads >= e, 10, "source reads")
        assert source.reads == expected
        gate.set()
        await task


async def test_concurrent_reads_of_one_handle_never_cancel_each_other() -> None:
    """A cursor's read-ahead reads one ledger in several chunks at once: a read that looks
    like a jump to the handle must not drop (cancel) the blocks another read waits for, and
    a read-ahead budget lent to prefetched blocks all comes back."""

    class Budget:
        def __init__(self) -> None:
            self.held = 0

        def available(self) -> int:
            return (1 << 30) - self.held

        def take(self, nbytes: int) -> None:
            self.held += nbytes

        def give_back(self, nbytes: int) -> None:
            self.held -= nbytes

    async with AutojumpClock() as clock:
        store = FaultInjectingBlobStore(memory_blob_store(), clock=clock)
        off = _offloader(store, clock, read_ahead_bytes_max=64 * BLOCK)
        source = MemoryLedgerSource(9, payloads_of([700] * 400))
        budget = Budget()
        handle = await off.open(await off.offload(source, uuid.uuid4(), {}), read_budget=budget)
        await handle.read(0, 9)
        store.delay_next("", 0.5, operations="get_range", count=1000)
        ranges = [(10, 59), (60, 109), (200, 249), (110, 159), (300, 399), (160, 199)]
        got = await asyncio.gather(*(handle.read(a, b) for a, b in ranges))
        for (a, b), entries in zip(ranges, got, strict=True):
            assert [e.payload for e in entries] == source.payloads[a : b + 1]
        handle.check_invariants()
        await handle.close()
        assert budget.held == 0
