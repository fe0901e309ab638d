"""Malformed and partly bad packed ``AddBatch`` messages over a real gRPC stream, against the
disk engine and the in-memory storage: a malformed ``packed`` buffer fails that batch whole
(``BAD_REQUEST``, nothing of it stored), bad entries fail alone, the stream and the bookie go
on, and ``BookieClient`` turns each answer into its typed error."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import crc32c
import grpc
import pytest
from support.bookie_storage import KEY, OpenBookie

from magnetar.bookie.api import BookieStorage
from magnetar.bookie.client import BookieClient, encode_batch_header
from magnetar.bookie.errors import BadRequest, CorruptEntry, StatusCode
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.server import BookieServer, BookieService
from magnetar.bookie.testing import MemoryBookieStorage

HEADER = struct.Struct(">qqqII")


def packed_of(rows: list[tuple[int, int, bytes]], crc: int | None = None) -> bytes:
    return b"".join(
        HEADER.pack(lid, eid, eid - 1, crc32c.crc32c(p) if crc is None else crc, len(p)) + p
        for lid, eid, p in rows
    )


Served = tuple[BookieStorage, BookieServer]


@pytest.fixture(params=["engine", "memory"])
async def served(request: pytest.FixtureRequest, open_bookie: OpenBookie) -> AsyncIterator[Served]:
    storage: BookieStorage
    if request.param == "engine":
        storage = await open_bookie()
    else:
        storage = MemoryBookieStorage("m")
    server = BookieServer(BookieService(storage), "127.0.0.1", 0)
    await server.start()
    try:
        yield storage, server
    finally:
        await server.stop(0)


async def _exchange(address: str, batches: list[bytes]) -> list[pb.AddResponse]:
    """Send raw AddBatch wire bytes on one Add stream; collect responses until all acked."""
    async with grpc.aio.insecure_channel(address) as channel:
        call = channel.stream_stream(
            "/magnetar.bookie.v1.Bookie/Add",
            request_serializer=None,
            response_deserializer=pb.AddResponse.FromString,
        )()
        for data in batches:
            await call.write(data)
        out: list[pb.AddResponse] = []
        last = 0
        while last < len(batches):
            resp = await asyncio.wait_for(call.read(), 10)
            assert resp is not grpc.aio.EOF
            out.append(resp)
            last = resp.last_batch_id
        await call.done_writing()
        return out


def _batch(batch_id: int, packed: bytes, key: bytes = KEY) -> bytes:
    return encode_batch_header(batch_id, key, False, len(packed)) + packed


async def test_malformed_batches_fail_whole_and_the_stream_goes_on(served: Served) -> None:
    storage, server = served
    good1 = packed_of([(3, 0, b"a"), (3, 1, b"b")])
    truncated = packed_of([(3, 2, b"c")]) + b"\x00" * 20
    past_end = packed_of([(3, 2, b"cccc")])[:-2]
    huge = HEADER.pack(3, 2, 1, 0, 0xFFFFFFFF) + b"x" * 64
    mixed = packed_of([(3, 2, b"c")]) + packed_of([(3, 3, b"d")], crc=7) + packed_of([(3, -4, b"")])
    batches = [
        _batch(1, good1),
        _batch(2, truncated),
        _batch(3, b""),
        _batch(4, past_end),
        _batch(5, huge),
        _batch(6, mixed),
        _batch(7, packed_of([(3, 4, b"e")])),
    ]
    responses = await _exchange(server.address, batches)
    failures = {
        (f.batch_id, f.index if not f.whole_batch else None): f.status
        for r in responses
        for f in r.failures
    }
    assert failures == {
        (2, None): StatusCode.BAD_REQUEST,
        (3, None): StatusCode.BAD_REQUEST,
        (4, None): StatusCode.BAD_REQUEST,
        (5, None): StatusCode.BAD_REQUEST,
        (6, 1): StatusCode.CORRUPT,
        (6, 2): StatusCode.BAD_REQUEST,
    }
    # every acked entry is there; nothing of a malformed batch is
    got = [e.payload for e in await storage.read_range(3, 0, 10, 1 << 20)]
    assert got == [b"a", b"b", b"c"]
    assert (await storage.read_entry(3, 4)).payload == b"e"
    assert storage.read_lac(3) == 3


async def test_client_maps_whole_batch_and_entry_failures_to_typed_errors(
    served: Served,
) -> None:
    _, server = served
    client = BookieClient(server.address, timeout_ms=5_000)
    try:
        # A hand-made malformed chunk through the client's own stream (no public API builds
        # one): its message fails whole with BadRequest; adds before and after it on the same
        # stream succeed.
        await client.add_batch(4, KEY, [_Entry(0, b"x")])
        with pytest.raises(BadRequest, match="malformed"):
            await client._enqueue([b"\x00" * 20], 20, 1, KEY, False)
        after = client.add_batch(4, KEY, [_Entry(1, b"y")])
        corrupt = client.add_batch(4, KEY, [_Entry(2, b"z", crc=5)])
        results = await asyncio.gather(after, corrupt, return_exceptions=True)
        assert results[0] is None
        assert isinstance(results[1], CorruptEntry)
        assert (await client.read_entry(4, 1)).payload == b"y"
        assert client.statistics().stream_failures == 0
    finally:
        await client.close()


class _Entry:
    def __init__(self, entry_id: int, payload: bytes, crc: int | None = None) -> None:
        self.entry_id = entry_id
        self.lac = entry_id - 1
        self.payload = payload
        self.crc32c = crc32c.crc32c(payload) if crc is None else crc


async def test_unreadable_message_ends_the_stream_after_answering_earlier_batches(
    served: Served,
) -> None:
    storage, server = served
    async with grpc.aio.insecure_channel(server.address) as channel:
        call = channel.stream_stream(
            "/magnetar.bookie.v1.Bookie/Add",
            request_serializer=None,
            response_deserializer=pb.AddResponse.FromString,
        )()
        await call.write(_batch(1, packed_of([(8, 0, b"kept")])))
        await call.write(b"\x22\x7f" + b"short")  # packed's length runs past the message
        responses = []
        with pytest.raises(grpc.aio.AioRpcError) as info:
            while True:
                resp = await asyncio.wait_for(call.read(), 10)
                if resp is grpc.aio.EOF:
                    break
                responses.append(resp)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert [(r.first_batch_id, r.last_batch_id, list(r.failures)) for r in responses] == [
        (1, 1, [])
    ]
    assert (await storage.read_entry(8, 0)).payload == b"kept"
    client = BookieClient(server.address, timeout_ms=5_000)  # the bookie serves on
    try:
        await client.add_batch(8, KEY, [_Entry(1, b"next")])
        assert (await client.read_entry(8, 1)).payload == b"next"
    finally:
        await client.close()
