"""Packed range reads (``ReadRequest.packed``): the disk engine answers a range in one buffer
from its write cache and from runs of entry-log records (never entry by entry), the same
entries ``read_range`` gives, across flushes, interleaved ledgers, gaps and the byte bound;
``BookieClient.read_packed`` verifies every entry over real gRPC, refuses a corrupt one, and
still reads from a bookie that answers one message per entry (one without packed reads)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from support.bookie_storage import OpenBookie, add_ok, payload_of, req

from magnetar.bookie.api import BookieStorage, EntryRun
from magnetar.bookie.client import BookieClient
from magnetar.bookie.core import Bookie
from magnetar.bookie.errors import CorruptEntry, NoEntry
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.server import BookieServer, BookieService
from magnetar.bookie.testing import MemoryBookieStorage
from magnetar.bookie.wire import parse_packed


async def _packed(bookie: BookieStorage, ledger: int, first: int, last: int, max_bytes: int):  # type: ignore[no-untyped-def]
    parts, count = await bookie.read_packed(ledger, first, last, max_bytes)
    entries = parse_packed(b"".join(parts))
    assert len(entries) == count
    return [(e.ledger_id, e.entry_id, e.lac, e.crc32c, e.payload) for e in entries]


async def _ranged(bookie: BookieStorage, ledger: int, first: int, last: int, max_bytes: int):  # type: ignore[no-untyped-def]
    got = await bookie.read_range(ledger, first, last, max_bytes)
    return [(e.ledger_id, e.entry_id, e.lac, e.crc32c, e.payload) for e in got]


async def test_engine_packed_reads_are_read_range_in_one_buffer(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie()
    # two flushes, ledgers interleaved in each: ledger 1's entries lie in two runs on disk
    await add_ok(bookie, [req(1, e) for e in range(60)] + [req(2, e) for e in range(30)])
    await bookie.checkpoint()
    await add_ok(bookie, [req(2, e) for e in range(30, 40)] + [req(1, e) for e in range(60, 90)])
    await bookie.checkpoint()
    # and some still in the write cache
    await add_ok(bookie, [req(1, e) for e in range(90, 100)])
    for ledger, first, last in [(1, 0, 99), (1, 55, 95), (2, 0, 39), (1, 99, 99), (1, 95, 120)]:
        want = await _ranged(bookie, ledger, first, last, 1 << 20)
        assert await _packed(bookie, ledger, first, last, 1 << 20) == want
    assert [e for _, e, *_ in await _packed(bookie, 1, 95, 120, 1 << 20)] == list(range(95, 100))
    one = len(payload_of(1, 0))
    assert [e for _, e, *_ in await _packed(bookie, 1, 0, 99, 3 * one)] == [0, 1, 2]
    assert [e for _, e, *_ in await _packed(bookie, 1, 0, 99, 1)] == [0]  # at least one
    # a scan neither fills nor uses the read cache (tailing readers keep theirs)
    cache = bookie.storage.read_cache
    cache.clear()
    before = cache.statistics()
    await _packed(bookie, 1, 0, 99, 1 << 20)
    after = cache.statistics()
    assert after.entries == 0 and after.hits == before.hits
    with pytest.raises(NoEntry):
        await bookie.read_packed(1, 100, 110, 1 << 20)


async def test_disk_runs_are_read_a_run_at_a_time(open_bookie: OpenBookie) -> None:
    bookie = await open_bookie()
    await add_ok(bookie, [req(5, e) for e in range(200)])
    await bookie.checkpoint()
    calls = 0
    real = bookie.storage.entry_logger.read_run

    def counted(*args: int) -> tuple[bytes | memoryview, int, int]:
        nonlocal calls
        calls += 1
        return real(*args)

    bookie.storage.entry_logger.read_run = counted  # type: ignore[method-assign]
    got = await _packed(bookie, 5, 0, 199, 1 << 20)
    assert [p for *_, p in got] == [payload_of(5, e) for e in range(200)]
    assert calls == 1


class _OldBookie(BookieService):
    """A bookie that predates packed reads: it ignores the field and answers per entry."""

    async def Read(
        self, request: pb.ReadRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadResponse:
        request.packed = False
        return await super().Read(request, context)


@pytest.fixture(params=["engine", "memory", "old"])
async def client(
    request: pytest.FixtureRequest, open_bookie: OpenBookie
) -> AsyncIterator[tuple[BookieStorage, BookieClient]]:
    storage: BookieStorage = (
        await open_bookie() if request.param == "engine" else MemoryBookieStorage("m")
    )
    service = (_OldBookie if request.param == "old" else BookieService)(storage)
    server = BookieServer(service, "127.0.0.1", 0)
    await server.start()
    c = BookieClient(server.address, timeout_ms=5_000, fast_add=False)
    try:
        yield storage, c
    finally:
        await c.close()
        await server.stop(0)


async def test_client_reads_a_verified_run(client: tuple[BookieStorage, BookieClient]) -> None:
    storage, c = client
    await c.add_batch(3, b"k" * 20, [req(3, e) for e in range(50)])
    if isinstance(storage, Bookie):
        await storage.checkpoint()
    run = await c.read_packed(3, 10, 49)
    assert isinstance(run, EntryRun)
    assert (run.first_entry_id, run.last_entry_id, len(run)) == (10, 49, 40)
    payloads = [run.data[a:b] for a, b in zip(run.starts, run.ends, strict=True)]
    assert payloads == [payload_of(3, e) for e in range(10, 50)]
    single = await c.read_packed(3, 7, 7)
    assert single.data[single.starts[0] : single.ends[0]] == payload_of(3, 7)
    with pytest.raises(NoEntry):
        await c.read_packed(3, 50, 60)


async def test_client_refuses_a_corrupt_entry_of_a_run() -> None:
    storage = MemoryBookieStorage("m")
    server = BookieServer(BookieService(storage), "127.0.0.1", 0)
    await server.start()
    c = BookieClient(server.address, timeout_ms=5_000, fast_add=False)
    try:
        await c.add_batch(9, b"k" * 20, [req(9, e) for e in range(5)])
        ledger = storage._ledgers[9]
        e = ledger.entries[3]
        ledger.entries[3] = type(e)(e.ledger_id, e.entry_id, e.lac, e.crc32c, b"evil")
        with pytest.raises(CorruptEntry, match="9:3"):
            await c.read_packed(9, 0, 4)
        assert len(await c.read_packed(9, 0, 2)) == 3
    finally:
        await c.close()
        await server.stop(0)
