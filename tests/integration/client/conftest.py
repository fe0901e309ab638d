"""Fixtures of the client integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from support.broker import InProcessBroker
from support.client_fake_broker import FakeBroker

from magnetar.client import Client


@pytest.fixture
async def fake_broker() -> AsyncIterator[FakeBroker]:
    broker = await FakeBroker().start()
    try:
        yield broker
    finally:
        await broker.close()


@pytest.fixture
def broker() -> Iterator[InProcessBroker]:
    """An in-process broker per test (a module may override it with a wider scope)."""
    b = InProcessBroker().start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
async def client(broker: InProcessBroker) -> AsyncIterator[Client]:
    """Our asyncio client on ``broker``."""
    c = Client(broker.service_url, operation_timeout_seconds=5)
    try:
        yield c
    finally:
        await c.close()
