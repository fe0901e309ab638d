"""Fast-tier helpers for the ledger layer: an in-memory metadata server and fake bookies.

Import the fixtures into a test module (``from support.ledger_fakes import ...``).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from magnetar.broker.bookkeeper import LedgerClient, LedgerClientConfig
from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.clock import Clock
from magnetar.zk.memory import MemoryMetadataServer


@pytest.fixture
def meta_server() -> MemoryMetadataServer:
    return MemoryMetadataServer()


@pytest.fixture
def fake_bookies(meta_server: MemoryMetadataServer) -> FakeBookieCluster:
    return FakeBookieCluster(meta_server, count=3)


def make_client(
    server: MemoryMetadataServer,
    bookies: FakeBookieCluster,
    *,
    clock: Clock | None = None,
    **config: Any,
) -> LedgerClient:
    return LedgerClient(
        server.connect(),
        bookies.factory,
        LedgerClientConfig(**config),
        clock=clock,
        rng=random.Random(7),
    )
