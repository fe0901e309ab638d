"""Disk faults and back-pressure: ENOSPC/fsync errors turn the bookie read-only without losing
acknowledged data; a full write cache throttles and then rejects with TOO_MANY_REQUESTS."""

from __future__ import annotations

import asyncio
import errno

from support.bookie_storage import OpenBookie, add_ok, payload_of, req

from magnetar.bookie.errors import StatusCode
from magnetar.bookie.files import FaultyFileSystem
from magnetar.bookie.testing import submit_requests


async def test_enospc_on_journal_turns_read_only_and_keeps_acked_data(
    open_bookie: OpenBookie,
) -> None:
    fs = FaultyFileSystem()
    bookie = await open_bookie(fs=fs)
    await add_ok(bookie, [req(1, e) for e in range(20)])
    await bookie.checkpoint()
    await add_ok(bookie, [req(1, e) for e in range(20, 30)])  # acked, only in the journal
    assert not bookie.info().read_only
    fs.fail_writes(errno.ENOSPC)
    statuses = await submit_requests(bookie, [req(1, 30), req(1, 31)])
    assert statuses == [StatusCode.READ_ONLY] * 2, "not acknowledged: the write failed"
    assert bookie.info().read_only
    assert bookie.statistics().read_only_reason.startswith("journal I/O error")
    assert await submit_requests(bookie, [req(1, 32)]) == [StatusCode.READ_ONLY]
    # Reads keep working.
    got = await bookie.read_range(1, 0, 29, 1 << 20)
    assert [e.payload for e in got] == [payload_of(1, e) for e in range(30)]
    await bookie.halt()
    fs.fail_writes(None)  # the operator freed space; restart
    bookie = await open_bookie(fs=fs)
    assert not bookie.info().read_only
    got = await bookie.read_range(1, 0, 29, 1 << 20)
    assert [e.entry_id for e in got] == list(range(30)), "nothing acknowledged was lost"


async def test_enospc_during_checkpoint_keeps_entries_readable(open_bookie: OpenBookie) -> None:
    fs = FaultyFileSystem()
    bookie = await open_bookie(fs=fs)
    await add_ok(bookie, [req(1, e) for e in range(10)])
    fs.fail_writes(errno.ENOSPC)
    await bookie.checkpoint()  # the entry-log write fails
    assert bookie.info().read_only
    assert bookie._cache.active and not bookie._cache.flushing  # merged back, not lost
    assert (await bookie.read_entry(1, 9)).payload == payload_of(1, 9)
    await bookie.halt()
    fs.fail_writes(None)
    bookie = await open_bookie(fs=fs)
    assert [e.entry_id for e in await bookie.read_range(1, 0, 9, 1 << 20)] == list(range(10))


async def test_fsync_failure_fails_the_group_and_goes_read_only(open_bookie: OpenBookie) -> None:
    fs = FaultyFileSystem()
    bookie = await open_bookie(fs=fs)
    await add_ok(bookie, [req(1, 0)])
    fs.fail_fsync(errno.EIO)
    assert await submit_requests(bookie, [req(1, 1)]) == [StatusCode.READ_ONLY]
    assert bookie.info().read_only


async def test_low_free_space_turns_read_only_and_back(open_bookie: OpenBookie) -> None:
    fs = FaultyFileSystem()
    bookie = await open_bookie(fs=fs, disk_free_bytes_min=1 << 30)
    fs.free_bytes_override = 1 << 20
    assert bookie.check_disk() is True
    assert bookie.info().read_only and bookie.info().free_disk_bytes == 1 << 20
    assert await submit_requests(bookie, [req(1, 0)]) == [StatusCode.READ_ONLY]
    fs.free_bytes_override = None
    assert bookie.check_disk() is False
    await add_ok(bookie, [req(1, 0)])


async def test_full_write_cache_throttles_then_rejects(open_bookie: OpenBookie) -> None:
    fs = FaultyFileSystem()
    bookie = await open_bookie(
        fs=fs, entry_size_max=2048, write_cache_bytes_max=16 * 1024, max_throttle_ms=300
    )
    half = bookie._cache.half_bytes_max
    payload = b"p" * 1000
    entry = 0

    def batch() -> list:  # type: ignore[type-arg]
        nonlocal entry
        out = [req(1, e, payload) for e in range(entry, entry + 4)]
        entry += 4
        return out

    while bookie._cache.active_bytes < half:
        await add_ok(bookie, batch())
    fs.hold_fsync()  # the flush that the next add triggers cannot finish
    first = asyncio.ensure_future(submit_requests(bookie, batch()))  # swaps; accepted
    assert bookie._cache.flushing
    more = []
    while bookie._cache.active_bytes < half:
        more.append(asyncio.ensure_future(submit_requests(bookie, batch())))
    throttled = asyncio.ensure_future(submit_requests(bookie, batch()))
    assert await asyncio.wait_for(throttled, 5) == [StatusCode.TOO_MANY_REQUESTS] * 4
    assert bookie.statistics().rejected_too_many == 1
    fs.release_fsync()
    assert await asyncio.wait_for(first, 5) == [0] * 4
    assert await asyncio.wait_for(asyncio.gather(*more), 5) == [[0] * 4] * len(more)
    # Once the flush completes, adds are accepted again (after waiting for the next flush).
    assert await asyncio.wait_for(submit_requests(bookie, batch()), 5) == [0] * 4
