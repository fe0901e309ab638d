"""Fixtures of the bookie service tests in this folder.

``served``: an in-memory bookie storage behind a real ``BookieServer`` on a free 127.0.0.1
port, and a ``BookieClient`` connected to it (closed and stopped at teardown). A module that
needs another shape defines its own ``served``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from magnetar.bookie.client import BookieClient
from magnetar.bookie.server import BookieServer, BookieService
from magnetar.bookie.testing import MemoryBookieStorage


@pytest.fixture
async def served() -> AsyncIterator[tuple[MemoryBookieStorage, BookieServer, BookieClient]]:
    storage = MemoryBookieStorage("b1", max_entry_bytes=64 * 1024)
    service = BookieService(storage, max_entry_bytes=64 * 1024)
    server = BookieServer(service, "127.0.0.1", 0)
    await server.start()
    client = BookieClient(server.address, timeout_ms=5_000)
    try:
        yield storage, server, client
    finally:
        await client.close()
        await server.stop(0)
