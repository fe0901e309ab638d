"""Fixtures of the client integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from support.client_fake_broker import FakeBroker


@pytest.fixture
async def fake_broker() -> AsyncIterator[FakeBroker]:
    broker = await FakeBroker().start()
    try:
        yield broker
    finally:
        await broker.close()
