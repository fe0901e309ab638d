"""A cursor behind the entry cache: its bookie reads are pipelined (``ReadAhead``), bounded
in entries and bytes, and it still reads its backlog in order, acknowledged entries left
out, across ledgers, after seeks and rewinds. Reads in flight are counted by holding the
fake bookies' requests (``hang``), never by timing."""

from __future__ import annotations

import asyncio
import dataclasses
import pathlib
import random
from typing import Any

import pytest
from support.waiting import wait_for

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.config import BrokerConfig
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory, Position
from magnetar.broker.ledger.managed_ledger import ManagedLedger
from magnetar.broker.runtime import managed_ledger_config
from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage
from magnetar.zk.memory import MemoryMetadataServer

# no entry cache: every read goes to the bookies, as for a consumer far behind the cache
NO_CACHE = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0,
    ensemble_size=2,
    write_quorum=2,
    ack_quorum=2,
    entry_cache_bytes=0,
)


def factory(
    server: MemoryMetadataServer, bookies: FakeBookieCluster, **cfg: object
) -> ManagedLedgerFactory:
    config = dataclasses.replace(NO_CACHE, **cfg)  # type: ignore[arg-type]
    return ManagedLedgerFactory(server.connect(), bookies.factory, config, rng=random.Random(5))


def held_reads(bookies: FakeBookieCluster) -> int:
    return sum(len(b._held) for b in bookies.bookies.values())


def hang(bookies: FakeBookieCluster) -> None:
    for b in bookies.bookies.values():
        b.hang()


def resume(bookies: FakeBookieCluster) -> None:
    for b in bookies.bookies.values():
        b.resume()


async def add(ml: ManagedLedger, n: int, size: int = 100) -> list[bytes]:
    payloads = [b"%06d" % i + b"x" * (size - 6) for i in range(n)]
    for i in range(0, n, 100):
        await asyncio.gather(*(ml.add(p) for p in payloads[i : i + 100]))
    return payloads


async def test_backlog_behind_the_cache_is_read_in_order_with_reads_pipelined(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(meta_server, fake_bookies, max_entries_per_ledger=300, read_ahead_entries=1000)
    ml = await f.open("t/ns/persistent/behind")
    cursor = await ml.open_cursor("sub", EARLIEST)
    payloads = await add(ml, 1000)
    assert len(ml.ledgers.ids) >= 4  # the backlog spans ledgers
    acked = await ml.new_non_durable_cursor(EARLIEST).read_entries(1000)
    await cursor.delete([acked[5].position, acked[299].position, acked[300].position])
    got: list[bytes] = []
    reads = 0
    while True:
        batch = await cursor.read_entries(100)
        if not batch:
            break
        reads += 1
        assert len(batch) <= 100
        got.extend(e.payload for e in batch)
    expected = [p for i, p in enumerate(payloads) if i not in (5, 299, 300)]
    assert got == expected
    stats = cursor.read_ahead_statistics()
    assert stats is not None
    assert stats.max_reads_in_flight > 1  # the next reads were under way while one was used
    assert stats.chunks_dropped == 0
    assert stats.entries_read == 1000  # each entry read from the bookies once
    cursor._read_ahead.check_invariants()
    await f.close()


async def test_read_ahead_entries_bounds_the_reads_in_flight(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    for setting, in_flight in ((0, 1), (400, 4)):
        f = factory(meta_server, fake_bookies, read_ahead_entries=setting)
        ml = await f.open(f"t/ns/persistent/window-{setting}")
        cursor = await ml.open_cursor("sub", EARLIEST)
        await add(ml, 1000)
        hang(fake_bookies)
        task = asyncio.ensure_future(cursor.read_entries(100))
        await wait_for(
            lambda n=in_flight: held_reads(fake_bookies) >= n,  # type: ignore[misc]
            30,
            "reads held",
        )
        stats = cursor.read_ahead_statistics()
        if setting == 0:
            assert stats is None  # one read at a time, as before
        else:
            assert stats is not None and stats.in_flight == in_flight == stats.reads_issued
        resume(fake_bookies)
        got = await task
        assert [e.position.entry_id for e in got] == list(range(100))
        assert held_reads(fake_bookies) == 0
        await f.close()


async def test_read_ahead_bytes_bounds_the_reads_in_flight(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    # the 100 entries asked for are always read; ahead of them, the byte bound: room for
    # another 100 (two reads), or for nothing (one read)
    for room_entries, in_flight in ((0, 1), (100, 2)):
        f = factory(meta_server, fake_bookies, read_ahead_entries=1000, read_ahead_bytes=1 << 30)
        ml = await f.open(f"t/ns/persistent/bytes-{room_entries}")
        cursor = await ml.open_cursor("sub", EARLIEST)
        await add(ml, 1000)
        (_, entries, size), *_ = ml.ledger_sizes()
        avg = size // entries
        ml.config = dataclasses.replace(ml.config, read_ahead_bytes=(100 + room_entries) * avg)
        hang(fake_bookies)
        task = asyncio.ensure_future(cursor.read_entries(100))
        await wait_for(lambda: held_reads(fake_bookies) >= 1, 30, "a read held")
        stats = cursor.read_ahead_statistics()
        assert stats is not None and stats.in_flight == in_flight, stats
        resume(fake_bookies)
        assert len(await task) == 100
        await f.close()


async def test_seek_and_rewind_behind_the_cache_read_the_right_entries(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(meta_server, fake_bookies, read_ahead_entries=500)
    ml = await f.open("t/ns/persistent/seek")
    cursor = await ml.open_cursor("sub", EARLIEST)
    await add(ml, 600)
    first = await cursor.read_entries(100)
    assert [e.position.entry_id for e in first] == list(range(100))
    lid = first[0].position.ledger_id
    # an unsent tail is put back (the dispatcher's seek): read again from the chunk held
    cursor.seek(first[60].position)
    again = await cursor.read_entries(100)
    assert [e.position.entry_id for e in again][:40] == list(range(60, 100))
    assert cursor.read_ahead_statistics().chunks_dropped == 0  # type: ignore[union-attr]
    # a seek far ahead and a rewind drop the window and start again where asked
    cursor.seek(type(first[0].position)(lid, 450))
    ahead = await cursor.read_entries(10)
    assert [e.position.entry_id for e in ahead] == list(range(450, 460))
    cursor.rewind()
    back = await cursor.read_entries(10)
    assert [e.position.entry_id for e in back] == list(range(10))
    assert cursor.read_ahead_statistics().chunks_dropped > 0  # type: ignore[union-attr]
    await f.close()


async def test_a_failed_read_ahead_fails_the_read_and_the_next_read_starts_again(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f = factory(meta_server, fake_bookies, read_ahead_entries=400)
    ml = await f.open("t/ns/persistent/fail")
    cursor = await ml.open_cursor("sub", EARLIEST)
    await add(ml, 400)
    for b in fake_bookies.bookies.values():
        b.crash()
    try:
        await cursor.read_entries(100)
    except Exception:
        pass
    else:  # pragma: no cover - the read must fail
        raise AssertionError("read from crashed bookies succeeded")
    for b in fake_bookies.bookies.values():
        b.restart()
    got = await cursor.read_entries(100)
    assert [e.position.entry_id for e in got] == list(range(100))
    await f.close()


def test_broker_settings_reach_the_read_ahead(tmp_path: pathlib.Path) -> None:
    cfg = managed_ledger_config(
        BrokerConfig.load(
            managed_ledger_read_ahead_entries=123,
            managed_ledger_read_ahead_max_size_bytes=4567,
            managed_ledger_read_ahead_total_max_size_bytes=89_000,
        )
    )
    assert (cfg.read_ahead_entries, cfg.read_ahead_bytes) == (123, 4567)
    assert cfg.read_ahead_total_bytes == 89_000
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "managedLedgerReadAheadEntries=7\nmanagedLedgerReadAheadMaxSizeBytes=8\n"
        "managedLedgerReadAheadTotalMaxSizeBytes=9\n"
    )
    via_alias = BrokerConfig.load(conf)
    assert via_alias.managed_ledger_read_ahead_entries == 7
    assert via_alias.managed_ledger_read_ahead_max_size_bytes == 8
    assert via_alias.managed_ledger_read_ahead_total_max_size_bytes == 9


async def test_the_broker_wide_budget_bounds_what_all_cursors_read_ahead(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """Backlogged cursors of different topics share one budget, with room here for one chunk
    ahead: the first cursor's read-ahead takes it, the second reads only what it asks for;
    once their windows are gone, a third cursor reads ahead again."""
    f = factory(meta_server, fake_bookies, read_ahead_entries=1000, read_ahead_bytes=1 << 30)
    mls = [await f.open(f"t/ns/persistent/budget-{i}") for i in range(3)]
    cursors = [await ml.open_cursor("sub", EARLIEST) for ml in mls]
    for ml in mls:
        await add(ml, 1000)
    (_, entries, size), *_ = mls[0].ledger_sizes()
    avg = size // entries
    # room for the first read (100 entries, always issued) and one more chunk of 100
    f.read_ahead_budget.capacity = 200 * avg

    async def in_flight_of_a_read(i: int, held_before: int) -> tuple[int, asyncio.Future[Any]]:
        task = asyncio.ensure_future(cursors[i].read_entries(100))
        await wait_for(
            lambda: held_reads(fake_bookies) > held_before, 30, f"cursor {i}'s reads held"
        )
        stats = cursors[i].read_ahead_statistics()
        assert stats is not None
        return stats.in_flight, task

    hang(fake_bookies)
    first, task0 = await in_flight_of_a_read(0, 0)
    assert first == 2, "the asked-for read and one chunk ahead"
    second, task1 = await in_flight_of_a_read(1, held_reads(fake_bookies))
    assert second == 1, "the budget is spent: only what it asks for"
    assert f.read_ahead_budget.refused >= 1
    # what /metrics shows (magnetar_ml_read_ahead_*)
    mem = ManagedLedgerStorage(f).memory_statistics()
    assert mem.read_ahead_max_bytes == 200 * avg and mem.read_ahead_held_bytes >= 200 * avg
    assert mem.read_ahead_refused == f.read_ahead_budget.refused
    resume(fake_bookies)
    assert [len(await task0), len(await task1)] == [100, 100]
    await mls[0].close()
    await mls[1].close()
    assert f.read_ahead_budget.held == 0, "closed windows gave their bytes back"
    hang(fake_bookies)
    third, task2 = await in_flight_of_a_read(2, 0)
    assert third == 2, "room again: a chunk read ahead"
    resume(fake_bookies)
    assert len(await task2) == 100
    await f.close()
    assert f.read_ahead_budget.held == 0


async def test_a_zero_total_budget_turns_read_ahead_off(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """``managed_ledger_read_ahead_total_max_size_bytes`` = 0: a backlogged cursor reads only
    what it asks for (one read in flight), as documented."""
    f = factory(
        meta_server,
        fake_bookies,
        read_ahead_entries=1000,
        read_ahead_bytes=1 << 30,
        read_ahead_total_bytes=0,
    )
    ml = await f.open("t/ns/persistent/no-read-ahead")
    cursor = await ml.open_cursor("sub", EARLIEST)
    await add(ml, 1000)
    hang(fake_bookies)
    task = asyncio.ensure_future(cursor.read_entries(100))
    await wait_for(lambda: held_reads(fake_bookies) > 0, 30, "the read held")
    stats = cursor.read_ahead_statistics()
    assert stats is not None and stats.in_flight == 1
    assert f.read_ahead_budget.refused >= 1
    resume(fake_bookies)
    assert len(await task) == 100
    await f.close()


@pytest.mark.parametrize("seed", range(12))
async def test_random_reads_seeks_and_acks_behind_the_cache_match_a_model(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, seed: int
) -> None:
    """Random reads, seeks (back inside the last read and anywhere), rewinds, individual and
    cumulative acks and appends, all behind the cache: every read returns the first
    unacknowledged entries from the read position, and the position never skips one."""
    rng = random.Random(seed)
    f = factory(
        meta_server,
        fake_bookies,
        max_entries_per_ledger=37,
        read_ahead_entries=rng.choice((20, 64, 300)),
        read_ahead_bytes=rng.choice((500, 1 << 20)),
        read_ahead_total_bytes=rng.choice((300, 1 << 20)),
    )
    ml = await f.open(f"t/ns/persistent/random-{seed}")
    cursor = await ml.open_cursor("sub", EARLIEST)
    log: list[Position] = []  # every entry's position, in log order

    async def append(n: int) -> None:
        for _ in range(n):
            log.append(await ml.add(b"%d" % len(log)))

    await append(150)
    last_read: list[Position] = []
    for _ in range(200):
        op = rng.random()
        if op < 0.45:
            n = rng.randrange(1, 60)
            start = cursor.read_position
            got = await cursor.read_entries(n)
            unacked = [p for p in log if p >= start and not cursor.is_acknowledged(p)]
            assert [e.position for e in got] == unacked[:n]
            assert [e.payload for e in got] == [b"%d" % log.index(e.position) for e in got]
            if got:  # nothing unacknowledged skipped past the last entry returned
                assert all(
                    cursor.is_acknowledged(p)
                    for p in log
                    if got[-1].position < p < cursor.read_position
                )
            last_read = [e.position for e in got]
        elif op < 0.55 and last_read:
            cursor.seek(rng.choice(last_read))  # an unsent tail put back
        elif op < 0.62:
            cursor.seek(rng.choice(log))
        elif op < 0.68:
            cursor.rewind()
        elif op < 0.83 and last_read:
            await cursor.delete(rng.sample(last_read, k=rng.randrange(1, len(last_read) + 1)))
        elif op < 0.88:
            await cursor.mark_delete(rng.choice(log))
        else:
            await append(rng.randrange(1, 40))
        ra = cursor._read_ahead
        if ra is not None:
            ra.check_invariants()
            # one cursor: the broker-wide budget holds exactly what its window reserved
            assert f.read_ahead_budget.held == sum(c.reserved for c in ra._chunks)
    await f.close()
    assert f.read_ahead_budget.held == 0, "every chunk's bytes went back to the budget"


async def test_a_read_whose_window_was_dropped_meanwhile_reads_again() -> None:
    """Two reads of one read-ahead at once (not what a dispatcher does, but possible): the
    second moves the window; the first, woken, starts again at its own position."""
    from magnetar.broker.ledger.read_ahead import ReadAhead
    from magnetar.broker.ledger.reads import ManagedEntry

    gate = asyncio.Event()

    async def read_range(ledger_id: int, first: int, last: int) -> list[ManagedEntry]:
        await gate.wait()
        return [ManagedEntry(Position(ledger_id, e), b"%d" % e) for e in range(first, last + 1)]

    def next_range(pos: Position, n: int) -> tuple[int, int, int] | None:
        return None if pos.entry_id >= 1000 else (0, pos.entry_id, min(999, pos.entry_id + n - 1))

    ra: ReadAhead[ManagedEntry] = ReadAhead(
        read_range, next_range, lambda _: 10, max_entries=200, max_bytes=1 << 20
    )
    first = asyncio.ensure_future(ra.read(Position(0, 0), 10))
    await wait_for(lambda: ra.statistics().in_flight > 0, 30, "first read issued")
    second = asyncio.ensure_future(ra.read(Position(0, 500), 10))
    await wait_for(lambda: ra.statistics().chunks_dropped > 0, 30, "window moved")
    gate.set()
    got_second = await second
    got_first = await first
    assert [e.position.entry_id for e in got_second] == list(range(500, 510))
    assert [e.position.entry_id for e in got_first] == list(range(10))
    ra.check_invariants()
    ra.close()
