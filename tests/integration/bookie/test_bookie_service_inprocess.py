"""The gRPC service and ``BookieClient`` against an in-memory storage, in one process.

Fast checks of the wire contract (batching, ordered acks, status translation, checksums,
long poll, stream failure); the same behaviour over real bookie processes on disk is proved
in ``test_bookie_process.py`` and ``tests/chaos/test_bookie_crash.py``.
"""

from __future__ import annotations

import asyncio

import crc32c
import grpc
import pytest
from support.waiting import wait_for

from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import BookieClient
from magnetar.bookie.errors import (
    BadRequest,
    BookieUnavailable,
    CorruptEntry,
    EntryTooLarge,
    Fenced,
    NoEntry,
    NoLedger,
    ReadOnly,
    Unauthorized,
)
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.proto import bookie_pb2_grpc as pb_grpc
from magnetar.bookie.server import BookieServer, BookieService
from magnetar.bookie.testing import MemoryBookieStorage

KEY = b"k" * 20


def req(
    ledger: int,
    entry: int,
    payload: bytes,
    *,
    key: bytes = KEY,
    lac: int = -1,
    recovery: bool = False,
) -> AddRequest:
    return AddRequest(ledger, entry, lac, crc32c.crc32c(payload), payload, key, recovery)


async def test_adds_in_one_iteration_travel_in_one_batch_and_ack_in_order(served) -> None:
    _storage, _, client = served
    order: list[int] = []
    futs = []
    for i in range(500):
        f = client.add(req(1, i, b"x%d" % i, lac=i - 1))
        f.add_done_callback(lambda _f, i=i: order.append(i))
        futs.append(f)
    await asyncio.gather(*futs)
    assert order == list(range(500))
    stats = client.statistics()
    assert stats.batches_sent == 1 and stats.entries_sent == 500
    entries = await client.read_range(1, 0, 499)
    assert [e.payload for e in entries] == [b"x%d" % i for i in range(500)]
    assert await client.read_lac(1) == 498
    assert (await client.read_entry(1, -1)).entry_id == 499


async def test_typed_errors_per_entry_in_one_batch(served) -> None:
    _storage, _, client = served
    await client.add(req(7, 0, b"a"))
    bad_crc = AddRequest(7, 1, -1, 123, b"b", KEY)
    futs = [
        client.add(req(7, 2, b"c")),
        client.add(req(7, 3, b"d", key=b"other")),
        client.add(req(7, 4, b"z" * (64 * 1024 + 1))),
        client.add(req(-1, 0, b"e")),
        client.add(bad_crc),
    ]
    results = await asyncio.gather(*futs, return_exceptions=True)
    assert results[0] is None
    assert isinstance(results[1], Unauthorized)
    assert isinstance(results[2], EntryTooLarge)
    assert isinstance(results[3], BadRequest)
    assert isinstance(results[4], CorruptEntry)
    with pytest.raises(NoLedger):
        await client.read_entry(99, 0)
    with pytest.raises(NoEntry):
        await client.read_entry(7, 1)
    with pytest.raises(BadRequest):
        await client.read_entry(-5, 0)


async def test_fence_then_old_writer_fails_and_recovery_add_works(served) -> None:
    _, _, client = served
    await asyncio.gather(*(client.add(req(3, i, b"p")) for i in range(3)))
    assert await client.fence(3, KEY) == 2
    with pytest.raises(Fenced):
        await client.add(req(3, 3, b"late"))
    await client.add(req(3, 3, b"recovered", recovery=True))
    assert (await client.read_entry(3, 3)).payload == b"recovered"
    with pytest.raises(Unauthorized):
        await client.fence(3, b"wrong")


async def test_long_poll_returns_new_lac_and_next_entry(served) -> None:
    _, _, client = served
    await client.add(req(5, 0, b"zero"))
    poll = asyncio.ensure_future(client.long_poll(5, -1, 5_000))
    await client.add(req(5, 1, b"one", lac=0))
    lac, entry = await poll
    assert lac == 0 and entry is not None and entry.payload == b"zero"
    # Times out with the old LAC when nothing moves.
    assert await client.wait_for_lac(5, 0, 50) == 0
    await client.write_lac(5, KEY, 1)
    assert await client.read_lac(5) == 1


async def test_read_only_bookie_refuses_adds_but_serves_reads(served) -> None:
    storage, _, client = served
    await client.add(req(8, 0, b"kept"))
    storage.read_only = True
    with pytest.raises(ReadOnly) as info:
        await client.add(req(8, 1, b"refused"))
    assert info.value.retriable
    assert (await client.read_entry(8, 0)).payload == b"kept"
    assert (await client.info()).read_only


async def test_corrupt_entry_served_is_detected_by_client(served) -> None:
    storage, _, client = served
    await client.add(req(9, 0, b"good"))
    ledger = storage._ledgers[9]
    e = ledger.entries[0]
    ledger.entries[0] = type(e)(e.ledger_id, e.entry_id, e.lac, e.crc32c, b"evil")
    with pytest.raises(CorruptEntry):
        await client.read_entry(9, 0)


async def test_stream_failure_fails_pending_adds_and_next_add_reconnects() -> None:
    storage = MemoryBookieStorage("b1")
    server = BookieServer(BookieService(storage), "127.0.0.1", 0)
    await server.start()
    port = server.port
    client = BookieClient(server.address, timeout_ms=2_000)
    try:
        await client.add(req(1, 0, b"a"))
        await server.stop(0)
        with pytest.raises(BookieUnavailable):
            await client.add(req(1, 1, b"b"))
        server = BookieServer(BookieService(storage), "127.0.0.1", port)
        await server.start()

        async def added() -> bool:
            await client.add(req(1, 1, b"b"))
            return True

        await wait_for(added, 30, "the client reconnected", ignore=(BookieUnavailable,))
        assert client.statistics().streams_opened >= 2
        assert (await client.read_entry(1, 1)).payload == b"b"
    finally:
        await client.close()
        await server.stop(0)


async def test_malformed_and_invalid_requests_get_status_not_crash(served) -> None:
    _, server, client = served
    async with grpc.aio.insecure_channel(server.address) as channel:
        # Raw bytes that are not a valid AddBatch protobuf.
        raw = channel.stream_stream(
            "/magnetar.bookie.v1.Bookie/Add",
            request_serializer=lambda b: b,
            response_deserializer=pb.AddResponse.FromString,
        )
        call = raw()
        await call.write(b"\xff\xff\xff\xff\x0f garbage")
        try:
            first = await call.read()
        except grpc.aio.AioRpcError:
            first = None
        assert first is None or first is grpc.aio.EOF  # stream refused, nothing acked
        stub = pb_grpc.BookieStub(channel)
        resp = await stub.Read(pb.ReadRequest(ledger_id=1, first_entry_id=-7))
        assert resp.status == 404
        resp = await stub.Read(pb.ReadRequest(ledger_id=1, first_entry_id=-1, last_entry_id=5))
        assert resp.status == 404
        resp = await stub.WriteLac(pb.WriteLacRequest(ledger_id=1, master_key=KEY, lac=-9))
        assert resp.status == 404
        resp = await stub.Fence(pb.FenceRequest(ledger_id=-1))
        assert resp.status == 404
    assert await client.health()
    await client.add(req(1, 0, b"still fine"))
