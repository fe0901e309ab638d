"""Offload flow permits (``managedLedgerOffloadFlowPermitsPerSecond``): a broker's offloads
read the bookies at most at the configured rate, all of them together; unlimited by default.
On virtual time: the test reads how long the pacing made the offload wait, never the wall."""

from __future__ import annotations

import asyncio
import uuid

from support.autojump import AutojumpClock

from magnetar.broker.bookkeeper.entry import LedgerEntry
from magnetar.broker.config import BrokerConfig
from magnetar.broker.offload.flow import BURST_SECONDS, FlowPermits
from magnetar.broker.offload.offloader import BlobStoreOffloader, OffloaderTuning
from magnetar.broker.offload.store import memory_blob_store
from magnetar.broker.offload.testing import MemoryLedgerSource, payloads_of
from magnetar.broker.offload.upload import (
    ENTRIES_PER_READ,
    READ_BYTES,
    UploadPlan,
    entries_per_read,
    upload_ledger,
)
from magnetar.broker.runtime import offloader_tuning

MIB = 1 << 20


async def test_reads_beyond_the_burst_wait_for_the_rate() -> None:
    async with AutojumpClock() as clock:
        flow = FlowPermits(MIB, clock)
        start = clock.monotonic_ms()
        for _ in range(5):
            await flow.pace(MIB)
        # 5 MiB at 1 MiB/s, the first second's worth free
        assert clock.monotonic_ms() - start == (5 - BURST_SECONDS) * 1000


async def test_an_idle_broker_gets_one_burst_not_its_whole_idle_time() -> None:
    async with AutojumpClock() as clock:
        flow = FlowPermits(MIB, clock)
        await flow.pace(MIB)
        await clock.sleep(60)
        start = clock.monotonic_ms()
        for _ in range(3):
            await flow.pace(MIB)
        assert clock.monotonic_ms() - start == (3 - BURST_SECONDS) * 1000


async def test_unlimited_never_waits() -> None:
    async with AutojumpClock() as clock:
        flow = FlowPermits(-1, clock)
        start = clock.monotonic_ms()
        for _ in range(100):
            await flow.pace(64 * MIB)
        assert clock.monotonic_ms() == start and not flow.limited


def _offloader(flow: FlowPermits) -> BlobStoreOffloader:
    return BlobStoreOffloader(
        memory_blob_store(),
        driver="memory",
        driver_metadata={},
        block_bytes=256 << 10,
        part_bytes=5 * MIB,
        tuning=OffloaderTuning(flow=flow),
    )


async def test_offloads_together_read_at_the_brokers_rate() -> None:
    async with AutojumpClock() as clock:
        flow = FlowPermits(MIB, clock)
        sources = [MemoryLedgerSource(i, payloads_of([10_000] * 300, seed=i)) for i in (1, 2)]
        start = clock.monotonic_ms()
        await asyncio.gather(*(_offloader(flow).offload(s, uuid.uuid4(), {}) for s in sources))
        total = sum(s.length - 8 * 300 for s in sources)  # payload bytes (no frame headers)
        elapsed_s = (clock.monotonic_ms() - start) / 1000
        # two offloads of ~2.9 MB each at 1 MiB/s together: ~5.7 s less the burst
        assert elapsed_s >= total / MIB - BURST_SECONDS - 0.1, (elapsed_s, total)


def test_the_setting_reaches_every_offloader_of_the_broker() -> None:
    tuning = offloader_tuning(BrokerConfig(managed_ledger_offload_flow_permits_per_second=123))
    assert tuning.flow.bytes_per_second == 123
    assert not offloader_tuning(BrokerConfig()).flow.limited


class _CountingSource(MemoryLedgerSource):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sizes: list[int] = []

    async def read(self, first_entry_id: int, last_entry_id: int) -> list[LedgerEntry]:
        self.sizes.append(last_entry_id - first_entry_id + 1)
        return await super().read(first_entry_id, last_entry_id)


async def test_large_entries_are_read_a_few_at_a_time() -> None:
    """One source read is decoded and checksummed on the loop in one piece: a ledger of
    128 KB batches is read about 1 MiB at a time (8 entries), small entries 100 at a time."""
    large = _CountingSource(1, payloads_of([128 << 10] * 40))
    small = _CountingSource(2, payloads_of([100] * 250))
    for source in (large, small):
        await _offloader(FlowPermits(-1)).offload(source, uuid.uuid4(), {})
    assert max(large.sizes) <= READ_BYTES // (128 << 10)
    assert sum(large.sizes) == 40
    assert max(small.sizes) == ENTRIES_PER_READ and sum(small.sizes) == 250
    assert entries_per_read(10 << 20, 1) == 1  # an entry over READ_BYTES: one at a time


async def test_the_plan_can_read_more_small_entries_a_time() -> None:
    """The offload worker's plan: 1 MiB of 1 KB entries in one read, not 100 of them (its
    reads are background reads, whose cost on the bookie is mostly per call)."""
    from magnetar.broker.offload.worker import WORKER_READ_BYTES, WORKER_READ_ENTRIES_MAX

    small = _CountingSource(3, payloads_of([1024] * 3000))
    plan = UploadPlan(
        block_bytes=1 << 20,
        part_bytes=64 << 20,
        read_bytes=WORKER_READ_BYTES,
        read_entries_max=WORKER_READ_ENTRIES_MAX,
    )
    await upload_ledger(
        memory_blob_store(), small, data_key="d", index_key="i", extra={}, plan=plan
    )
    assert max(small.sizes) == WORKER_READ_BYTES // 1024
    assert sum(small.sizes) == 3000
    assert entries_per_read(1024 * 3000, 3000, WORKER_READ_BYTES) == ENTRIES_PER_READ
