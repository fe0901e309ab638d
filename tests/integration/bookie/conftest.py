"""Fixtures of the bookie service tests in this folder.

``served``: an in-memory bookie storage behind a real ``BookieServer`` on a free 127.0.0.1
port, and a ``BookieClient`` connected to it (closed and stopped at teardown), once per Add
transport: "grpc" (the gRPC ``Add`` stream) and "tcp" (the fast add port, ``FastAddServer``,
beside the same service; the test fails if adds did not travel over it). A module that needs
another shape defines its own ``served``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from magnetar.bookie.client import BookieClient
from magnetar.bookie.fast_add import FastAddServer
from magnetar.bookie.server import BookieServer, BookieService
from magnetar.bookie.testing import MemoryBookieStorage


@pytest.fixture(params=["grpc", "tcp"])
async def served(
    request: pytest.FixtureRequest,
) -> AsyncIterator[tuple[MemoryBookieStorage, BookieServer, BookieClient]]:
    storage = MemoryBookieStorage("b1", max_entry_bytes=64 * 1024)
    service = BookieService(storage)
    server = BookieServer(service, "127.0.0.1", 0)
    await server.start()
    fast: FastAddServer | None = None
    add_address = None
    if request.param == "tcp":
        fast = FastAddServer(service, "127.0.0.1", 0)
        await fast.start()
        add_address = f"127.0.0.1:{fast.port}"
    client = BookieClient(server.address, timeout_ms=5_000, add_address=add_address)
    try:
        yield storage, server, client
        stats = service.statistics()
        if fast is not None:
            # every batch the bookie took came over the fast transport
            assert stats.fast_add_batches_received == stats.add_batches_received
        else:
            assert stats.fast_add_batches_received == 0
    finally:
        await client.close()
        if fast is not None:
            await fast.stop(0)
        await server.stop(0)
