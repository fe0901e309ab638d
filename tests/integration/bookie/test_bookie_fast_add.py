"""The bookie's fast add port (``bookie/fast_add.py``) against hostile and broken peers, and
the client's fallback to gRPC: bad magic, oversized, empty and garbage frames, an unreadable
``AddBatch`` after a good one, random bytes (seeded), a graceful stop with a batch in flight,
and a fast add port that does not answer (its adds move to gRPC). The peer always gets a
clear error frame and a closed connection, never a crash: the same service keeps serving new
connections."""

from __future__ import annotations

import asyncio
import random
import struct
from collections.abc import AsyncIterator

import crc32c
import pytest
from support.net import free_port

from magnetar.bookie.add_frames import (
    KIND_ADD_RESPONSE,
    KIND_ERROR,
    MAGIC,
    FrameReader,
    encode_request,
)
from magnetar.bookie.api import AddRequest
from magnetar.bookie.client import BookieClient, encode_batch_header
from magnetar.bookie.errors import BookieUnavailable, StatusCode
from magnetar.bookie.fast_add import FastAddServer
from magnetar.bookie.proto import bookie_pb2 as pb
from magnetar.bookie.server import BookieServer, BookieService
from magnetar.bookie.testing import MemoryBookieStorage
from magnetar.bookie.wire import pack_entries

KEY = b"k" * 20


def _batch(batch_id: int, ledger: int, entry: int, payload: bytes = b"x" * 100) -> bytes:
    e = AddRequest(ledger, entry, -1, crc32c.crc32c(payload), payload, KEY, False)
    parts, nbytes = pack_entries(ledger, [e])
    return encode_batch_header(batch_id, KEY, False, nbytes) + b"".join(parts)


@pytest.fixture
async def fast() -> AsyncIterator[tuple[BookieService, FastAddServer, BookieServer]]:
    storage = MemoryBookieStorage("b1", max_entry_bytes=64 * 1024)
    service = BookieService(storage)
    grpc_server = BookieServer(service, "127.0.0.1", 0)
    await grpc_server.start()
    server = FastAddServer(service, "127.0.0.1", 0, max_frame_bytes=1 << 20)
    await server.start()
    try:
        yield service, server, grpc_server
    finally:
        await server.stop(0)
        await grpc_server.stop(0)


async def _exchange(port: int, data: bytes) -> list[tuple[int, bytes]]:
    """Send ``data``, read every frame until the bookie closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    got = b""
    while True:
        chunk = await asyncio.wait_for(reader.read(65536), 30)
        if not chunk:
            break
        got += chunk
    writer.close()
    return FrameReader(expect_magic=False, with_kind=True).frames(got)


def _error(frames: list[tuple[int, bytes]]) -> pb.StatusResponse:
    assert frames and frames[-1][0] == KIND_ERROR, frames
    return pb.StatusResponse.FromString(frames[-1][1])


async def _still_serves(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(MAGIC + encode_request(_batch(7, 99, 0)))
    await writer.drain()
    head = await asyncio.wait_for(reader.readexactly(5), 30)
    (length,) = struct.unpack(">I", head[:4])
    body = await asyncio.wait_for(reader.readexactly(length - 1), 30)
    assert head[4] == KIND_ADD_RESPONSE
    resp = pb.AddResponse.FromString(body)
    assert resp.last_batch_id == 7 and not resp.failures
    writer.close()


async def test_bad_magic_gets_an_error_and_a_closed_connection(fast) -> None:
    _, server, _ = fast
    err = _error(await _exchange(server.port, b"GET / HTTP/1.1\r\n\r\n"))
    assert err.status == StatusCode.BAD_REQUEST and "magic" in err.message
    await _still_serves(server.port)


async def test_oversized_and_empty_frames_are_refused(fast) -> None:
    _, server, _ = fast
    err = _error(await _exchange(server.port, MAGIC + struct.pack(">I", (1 << 20) + 1)))
    assert err.status == StatusCode.BAD_REQUEST and "over the limit" in err.message
    err = _error(await _exchange(server.port, MAGIC + struct.pack(">I", 0)))
    assert "empty frame" in err.message
    await _still_serves(server.port)


async def test_unreadable_batch_after_a_good_one_answers_the_good_one_first(fast) -> None:
    service, server, _ = fast
    frames = await _exchange(
        server.port, MAGIC + encode_request(_batch(1, 5, 0)) + encode_request(b"\xff\xff\xff")
    )
    assert frames[0][0] == KIND_ADD_RESPONSE
    ok = pb.AddResponse.FromString(frames[0][1])
    assert ok.last_batch_id == 1 and not ok.failures
    err = _error(frames)
    assert "malformed AddBatch" in err.message
    assert service.statistics().fast_add_connections_open == 0
    await _still_serves(server.port)


async def test_random_bytes_never_crash_the_bookie(fast) -> None:
    _, server, _ = fast
    rng = random.Random(22)
    for i in range(60):
        n = rng.randrange(1, 300)
        noise = bytes(rng.randrange(256) for _ in range(n))
        data = noise if i % 2 else MAGIC + noise
        frames = await _exchange(server.port, data)
        # (with this seed every input is refused or answered: none waits for more bytes)
        # answers, then at most one error frame, which is the last
        kinds = [k for k, _ in frames]
        assert KIND_ERROR not in kinds[:-1]
    await _still_serves(server.port)


async def test_graceful_stop_answers_batches_in_flight(fast) -> None:
    service, server, _ = fast
    client = BookieClient("127.0.0.1:1", add_address=f"127.0.0.1:{server.port}")
    try:
        futs = [client.add(AddRequest(3, i, -1, crc32c.crc32c(b"p"), b"p", KEY)) for i in range(5)]
        await asyncio.wait_for(asyncio.gather(*futs), 30)
        assert service.statistics().fast_add_batches_received >= 1
        service.begin_shutdown()
        late = client.add(AddRequest(3, 5, -1, crc32c.crc32c(b"p"), b"p", KEY))
        with pytest.raises(Exception) as info:
            await asyncio.wait_for(late, 30)
        assert "ReadOnly" in type(info.value).__name__ or isinstance(info.value, BookieUnavailable)
    finally:
        await client.close()


async def test_unreachable_fast_port_moves_the_adds_to_grpc(fast) -> None:
    """Nothing reached the bookie over the dead port, so the same adds go over gRPC (no
    failure for the ledger to act on) and later streams use gRPC for a while."""
    service, _, grpc_server = fast
    client = BookieClient(grpc_server.address, add_address=f"127.0.0.1:{free_port()}")
    try:
        assert client.add_transport == "tcp"
        first = [
            client.add(AddRequest(4, i, i - 1, crc32c.crc32c(b"p"), b"p", KEY)) for i in range(3)
        ]
        await asyncio.wait_for(asyncio.gather(*first), 30)
        assert client.add_transport == "grpc"
        again = client.add(AddRequest(4, 3, 2, crc32c.crc32c(b"p"), b"p", KEY))
        await asyncio.wait_for(again, 30)
        stats = service.statistics()
        assert stats.add_entries_received == 4 and stats.fast_add_batches_received == 0
        assert client.statistics().fast_add_streams_opened == 1
    finally:
        await client.close()
