"""The bookie storage engine on a real disk: adds, reads, validation, fencing, LAC, restarts."""

from __future__ import annotations

import asyncio
import pathlib

import crc32c
import pytest
from support.bookie_storage import KEY, OpenBookie, add_ok, payload_of, req

from magnetar.bookie.errors import CorruptEntry, NoEntry, NoLedger, StatusCode, Unauthorized
from magnetar.bookie.files import FaultyFileSystem
from magnetar.bookie.journal import list_journal_ids
from magnetar.bookie.testing import submit_requests
from magnetar.bookie.wire import ENTRY_HEADER, MalformedBatch


async def test_add_then_read_from_cache_and_from_disk(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie()
    await add_ok(bookie, [req(1, e) for e in range(10)] + [req(2, e) for e in range(5)])
    e = await bookie.read_entry(1, 3)
    assert (e.ledger_id, e.entry_id, e.lac, e.payload) == (1, 3, 2, payload_of(1, 3))
    assert (await bookie.read_entry(1, -1)).entry_id == 9
    await bookie.checkpoint()
    assert not bookie._cache.active and not bookie._cache.flushing  # now served from disk
    e = await bookie.read_entry(2, 4)
    assert e.payload == payload_of(2, 4)
    assert (await bookie.read_entry(2, -1)).entry_id == 4
    assert bookie.read_lac(1) == 8


async def test_checkpoint_starts_entry_log_writeback_per_chunk(open_bookie: OpenBookie) -> None:
    # The flush asks the kernel to write each entry-log chunk as it goes (so a journal sync
    # never waits behind megabytes of log); durability still comes from the fdatasync.
    fs = FaultyFileSystem()
    bookie = await open_bookie(fs=fs)
    await add_ok(bookie, [req(1, e) for e in range(50)])
    assert not any(p.endswith(".log") for p in fs.writeback_paths), "no flush yet"
    await bookie.checkpoint()
    logs = {p: n for p, n in fs.writeback_paths.items() if p.endswith(".log")}
    assert logs, f"no entry-log writeback started: {fs.writeback_paths}"
    assert not any(p.endswith(".txn") for p in fs.writeback_paths), "journal is only synced"
    await bookie.halt()
    bookie = await open_bookie(fs=fs)
    got = await bookie.read_range(1, 0, 49, 1 << 20)
    assert [e.payload for e in got] == [payload_of(1, e) for e in range(50)]


async def test_missing_ledger_and_entry(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie()
    with pytest.raises(NoLedger):
        await bookie.read_entry(42, 0)
    with pytest.raises(NoLedger):
        bookie.read_lac(42)
    await add_ok(bookie, [req(1, 0)])
    with pytest.raises(NoEntry):
        await bookie.read_entry(1, 1)
    await bookie.checkpoint()
    with pytest.raises(NoEntry):
        await bookie.read_entry(1, 1)
    with pytest.raises(NoEntry):
        await bookie.read_range(1, 5, 9, 1 << 20)


async def test_validation_per_request(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie(entry_size_max=4096)
    await add_ok(bookie, [req(1, 0)])
    statuses = await submit_requests(
        bookie,
        [
            req(1, 1),
            req(1, 2, key=b"wrong"),
            req(1, 3, b"x" * 5000),
            req(1, 4, crc=12345),
            req(1, 5),
        ],
    )
    assert statuses == [
        0,
        StatusCode.UNAUTHORIZED,
        StatusCode.ENTRY_TOO_LARGE,
        StatusCode.CORRUPT,
        0,
    ]
    for bad in (2, 3, 4):
        with pytest.raises(NoEntry):
            await bookie.read_entry(1, bad)
    assert (await bookie.read_entry(1, 5)).payload == payload_of(1, 5)


async def test_read_range_and_read_ahead(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie(readahead_entries=50)
    await add_ok(bookie, [req(1, e) for e in range(100)] + [req(2, e) for e in range(100)])
    await bookie.checkpoint()
    rc = bookie.storage.read_cache
    rc.clear()
    entries = await bookie.read_range(1, 10, 19, 1 << 20)
    assert [e.entry_id for e in entries] == list(range(10, 20))
    assert [e.payload for e in entries] == [payload_of(1, i) for i in range(10, 20)]
    # The disk miss on entry 10 read ahead the following entries of ledger 1 only.
    stats = rc.statistics()
    assert stats.entries >= 40
    assert rc.get(1, 40) is not None and rc.get(2, 0) is None
    limited = await bookie.read_range(1, 0, 99, max_bytes=3 * len(payload_of(1, 0)))
    assert [e.entry_id for e in limited] == [0, 1, 2]
    gap = await bookie.read_range(1, 95, 120, 1 << 20)
    assert [e.entry_id for e in gap] == list(range(95, 100))


async def test_long_poll_wakes_on_add_and_on_explicit_lac(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie()
    await add_ok(bookie, [req(1, 0, lac=-1)])
    waiter = asyncio.create_task(bookie.wait_for_lac(1, -1, timeout_ms=10_000))
    await add_ok(bookie, [req(1, 1, lac=0)])
    assert await asyncio.wait_for(waiter, 5) == 0
    waiter = asyncio.create_task(bookie.wait_for_lac(1, 0, timeout_ms=10_000))
    await asyncio.sleep(0)
    assert not waiter.done()
    await bookie.write_lac(1, KEY, 1)
    assert await asyncio.wait_for(waiter, 5) == 1
    # Timeout: returns the current LAC.
    assert await bookie.wait_for_lac(1, 1, timeout_ms=20) == 1


async def test_fencing_durable_across_restart(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie()
    await add_ok(bookie, [req(1, e) for e in range(5)])
    with pytest.raises(Unauthorized):
        await bookie.fence(1, b"wrong")
    assert await bookie.fence(1, KEY) == 4
    statuses = await submit_requests(bookie, [req(1, 5)])
    assert statuses == [StatusCode.FENCED]
    await add_ok(bookie, [req(1, 5, recovery=True)])  # recovery adds pass the fence
    # Fencing a ledger never seen creates it fenced: a late writer is refused.
    assert await bookie.fence(9, KEY) == -1
    assert await submit_requests(bookie, [req(9, 0)]) == [StatusCode.FENCED]
    await bookie.halt()  # crash: the fence bits exist only in the journal
    bookie = await open_bookie()
    assert await submit_requests(bookie, [req(1, 6)]) == [StatusCode.FENCED]
    assert await submit_requests(bookie, [req(9, 0)]) == [StatusCode.FENCED]
    assert (await bookie.read_entry(1, 5)).payload == payload_of(1, 5)
    await bookie.close()  # graceful: the fence bits now live in the ledger table
    bookie = await open_bookie()
    assert await submit_requests(bookie, [req(1, 7)]) == [StatusCode.FENCED]


async def test_fence_returns_only_after_its_journal_sync(open_bookie: OpenBookie) -> None:
    fs = FaultyFileSystem()
    bookie = await open_bookie(fs=fs)
    await add_ok(bookie, [req(1, 0)])
    fs.hold_fsync()
    fence = asyncio.create_task(bookie.fence(1, KEY))
    assert await asyncio.to_thread(fs.fsync_waiting.wait, 5)
    await asyncio.sleep(0)
    assert not fence.done(), "fence answered before its record was durable"
    fs.release_fsync()
    assert await asyncio.wait_for(fence, 5) == 0


async def test_add_acknowledged_only_after_fsync(open_bookie: OpenBookie) -> None:
    fs = FaultyFileSystem()
    bookie = await open_bookie(fs=fs)
    fs.hold_fsync()
    fut = submit_requests(bookie, [req(1, 0), req(1, 1)])
    assert await asyncio.to_thread(fs.fsync_waiting.wait, 5)
    await asyncio.sleep(0)
    assert not asyncio.ensure_future(fut).done()
    fs.release_fsync()
    assert await asyncio.wait_for(fut, 5) == [0, 0]


async def test_crash_replay_restores_acknowledged_entries(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie()
    await add_ok(bookie, [req(1, e) for e in range(50)])
    await bookie.write_lac(1, KEY, 48)
    await bookie.halt()  # no checkpoint: everything is only in the journal
    bookie = await open_bookie()
    assert bookie.statistics().replayed_records >= 2
    assert [e.entry_id for e in await bookie.read_range(1, 0, 49, 1 << 20)] == list(range(50))
    assert bookie.read_lac(1) == 48
    with pytest.raises(Unauthorized):
        await bookie.fence(1, b"other key")  # master key restored from the journal


async def test_checkpoint_trims_journals_and_restart_replays_both_sources(
    open_bookie: OpenBookie, tmp_path: pathlib.Path
) -> None:
    bookie = await open_bookie(journal_file_size_max=2048)
    for b in range(10):
        await add_ok(bookie, [req(1, b * 10 + e) for e in range(10)])
    jdir = str(tmp_path / "journal")
    before = list_journal_ids(bookie.fs, jdir)
    assert len(before) >= 3
    await bookie.checkpoint()
    after = list_journal_ids(bookie.fs, jdir)
    assert min(after) > min(before) and len(after) < len(before)
    await add_ok(bookie, [req(1, e) for e in range(100, 130)])  # only in the journal
    await bookie.halt()
    bookie = await open_bookie(journal_file_size_max=2048)
    got = await bookie.read_range(1, 0, 129, 1 << 20)
    assert [e.entry_id for e in got] == list(range(130))
    assert all(e.payload == payload_of(1, e.entry_id) for e in got)


def damage_file(path: pathlib.Path, damage: str) -> None:
    """Simulate a crash mid-write (truncate) or bit rot (flip) in the file's last record
    (which ends where the journal's preallocated zeros start)."""
    size = len(path.read_bytes().rstrip(b"\0"))
    with path.open("r+b") as f:
        if damage == "truncate":
            f.truncate(size - 100)
        else:
            f.seek(size - 100)
            f.write(b"\x00\xff\x00")


@pytest.mark.parametrize("damage", ["truncate", "flip"])
async def test_torn_journal_tail_on_restart(
    open_bookie: OpenBookie, tmp_path: pathlib.Path, damage: str
) -> None:
    bookie = await open_bookie()
    await add_ok(bookie, [req(1, e) for e in range(10)])
    await add_ok(bookie, [req(1, e, b"Z" * 2000) for e in range(10, 20)])  # the last record
    await bookie.halt()
    jdir = tmp_path / "journal"
    last = max(list_journal_ids(bookie.fs, str(jdir)))
    path = jdir / f"{last:016x}.txn"
    damage_file(path, damage)
    bookie = await open_bookie()
    assert bookie.statistics().replay_corrupt_tails == 1
    assert [e.entry_id for e in await bookie.read_range(1, 0, 9, 1 << 20)] == list(range(10))
    for e in (10, 15, 19):
        with pytest.raises(NoEntry):
            await bookie.read_entry(1, e)  # never served from the damaged record


def packed_of(rows: list[tuple[int, int, bytes]], crc: int | None = None) -> bytes:
    return b"".join(
        ENTRY_HEADER.pack(lid, eid, -1, crc32c.crc32c(p) if crc is None else crc, len(p)) + p
        for lid, eid, p in rows
    )


async def test_submit_packed_validates_per_entry_and_reports_count_and_bytes(
    open_bookie: OpenBookie,
) -> None:
    bookie = await open_bookie(entry_size_max=4096)
    p = [payload_of(6, e) for e in range(4)]
    packed = packed_of([(6, 0, p[0]), (6, -2, p[1]), (-1, 1, p[2]), (6, 1, p[3])])
    packed += packed_of([(6, 2, b"bad crc")], crc=1) + packed_of([(6, 3, b"z" * 5000)])
    fut, count, size = bookie.submit_packed(packed, KEY)
    assert count == 6
    assert await fut == [
        0,
        StatusCode.BAD_REQUEST,
        StatusCode.BAD_REQUEST,
        0,
        StatusCode.CORRUPT,
        StatusCode.ENTRY_TOO_LARGE,
    ]
    assert size == 2 * 32 + len(p[0]) + len(p[3])  # accepted only
    assert [e.entry_id for e in await bookie.read_range(6, 0, 9, 1 << 20)] == [0, 1]
    # a wrong key refuses the ledger's entries; recovery adds pass a fence
    fut, _, _ = bookie.submit_packed(packed_of([(6, 4, b"k")]), b"other")
    assert await fut == [StatusCode.UNAUTHORIZED]
    await bookie.fence(6, KEY)
    fut, _, _ = bookie.submit_packed(packed_of([(6, 4, b"r")]), KEY)
    assert await fut == [StatusCode.FENCED]
    fut, _, _ = bookie.submit_packed(packed_of([(6, 4, b"r")]), KEY, recovery=True)
    assert await fut == [0]


@pytest.mark.parametrize(
    "damage",
    ["empty", "truncated header", "payload past the end", "huge length"],
)
async def test_malformed_packed_batch_is_refused_whole_and_changes_nothing(
    open_bookie: OpenBookie, tmp_path: pathlib.Path, damage: str
) -> None:
    bookie = await open_bookie()
    await add_ok(bookie, [req(1, 0)])
    good = packed_of([(1, 1, b"one"), (9, 0, b"new ledger")])
    bad = {
        "empty": b"",
        "truncated header": good + b"\x00" * 20,
        "payload past the end": good[:-1],
        "huge length": good + ENTRY_HEADER.pack(1, 2, -1, 0, 0xFFFFFFFF) + b"x" * 100,
    }[damage]
    appended = bookie.journal.statistics().appended_bytes
    with pytest.raises(MalformedBatch):
        bookie.submit_packed(bad, KEY)
    assert bookie.journal.statistics().appended_bytes == appended  # nothing journaled
    with pytest.raises(NoLedger):
        bookie.read_lac(9)  # no ledger state created
    with pytest.raises(NoEntry):
        await bookie.read_entry(1, 1)
    fut, count, _ = bookie.submit_packed(good, KEY)  # the bookie goes on
    assert count == 2 and await fut == [0, 0]
    await bookie.halt()
    bookie = await open_bookie()  # and replays it
    assert (await bookie.read_entry(9, 0)).payload == b"new ledger"


async def test_corrupt_entry_log_record_is_never_served(
    open_bookie: OpenBookie, tmp_path: pathlib.Path
) -> None:
    bookie = await open_bookie(readahead_entries=0)
    await add_ok(bookie, [req(1, e, bytes([e]) * 500) for e in range(3)])
    await bookie.checkpoint()
    (log,) = sorted((tmp_path / "ledgers").glob("*.log"))
    with log.open("r+b") as f:  # flip one payload byte of entry 1
        f.seek(16 + (32 + 500) + 32 + 100)
        f.write(b"\xee")
    bookie.storage.read_cache.clear()
    assert (await bookie.read_entry(1, 0)).payload == bytes([0]) * 500
    with pytest.raises(CorruptEntry):
        await bookie.read_entry(1, 1)
    assert (await bookie.read_entry(1, 2)).payload == bytes([2]) * 500


async def test_checkpoint_syncs_the_entry_log_in_steps(
    open_bookie: OpenBookie, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush fdatasyncs the entry log every few MB, not once for the whole half (one huge
    fdatasync stalls every journal fdatasync, hence every ack, behind it)."""
    from magnetar.bookie import ledger_storage

    fs = FaultyFileSystem()
    bookie = await open_bookie(fs=fs)
    big = b"z" * (256 * 1024)

    async def add_then_checkpoint_syncs(ledger: int) -> int:
        await add_ok(bookie, [req(ledger, e, big) for e in range(40)])  # 10 MB
        before = fs.fsync_count
        await bookie.checkpoint()
        return fs.fsync_count - before

    monkeypatch.setattr(ledger_storage, "_SYNC_EVERY_BYTES", 1 << 40)
    once = await add_then_checkpoint_syncs(1)
    monkeypatch.undo()
    stepped = await add_then_checkpoint_syncs(2)
    assert stepped >= once + 2, (once, stepped)
    assert (await bookie.read_entry(2, 39)).payload == big


async def test_flush_of_mixed_sizes_across_log_rolls_reads_back(open_bookie: OpenBookie) -> None:
    """Flush computes locations a slice at a time; rolls fall back to entry by entry."""
    import random

    rng = random.Random(7)
    bookie = await open_bookie(entry_log_size_max=200 * 1024)
    want: dict[tuple[int, int], bytes] = {}
    for ledger in (3, 1, 2):
        reqs = []
        for e in range(300):
            p = rng.randbytes(rng.choice((1, 50, 1000, 3000, 9000)))
            want[ledger, e] = p
            reqs.append(req(ledger, e, p))
        await add_ok(bookie, reqs)
    await bookie.checkpoint()
    assert len(bookie.storage.entry_logger.log_ids()) > 5  # it rolled many times
    for (ledger, e), p in want.items():
        assert (await bookie.read_entry(ledger, e)).payload == p, (ledger, e)
