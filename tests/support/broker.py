"""An in-process broker on a background thread (its own event loop), for tests that drive it
with blocking clients such as the official ``pulsar`` package.

``InProcessBroker(config_overrides).start()`` binds a free port on 127.0.0.1 with in-memory
metadata and storage (or the ones given); ``stop()`` closes it. ``call(coro_fn)`` runs a
coroutine on the broker's loop and returns its result. Fixture: ``magnetar_broker``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import BrokerService
from magnetar.broker.storage import MemoryStorageFactory
from magnetar.zk.memory import MemoryMetadataServer


class InProcessBroker:
    def __init__(
        self, metadata: MemoryMetadataServer | None = None, storage: Any = None, **config: Any
    ):
        self.metadata = metadata or MemoryMetadataServer()
        self.storage = storage or MemoryStorageFactory()
        defaults = {
            "broker_service_port": 0,
            "bind_address": "127.0.0.1",
            "advertised_address": "127.0.0.1",
        }
        defaults.update(config)
        self.config = BrokerConfig(**defaults)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="broker", daemon=True)
        self.service: BrokerService | None = None

    @property
    def service_url(self) -> str:
        assert self.service is not None
        return self.service.service_url

    @property
    def port(self) -> int:
        assert self.service is not None
        return self.service.port

    def call(self, fn: Callable[[], Coroutine[Any, Any, Any]], timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout)

    def start(self) -> InProcessBroker:
        self.thread.start()

        async def boot() -> BrokerService:
            store = self.metadata.connect()
            service = BrokerService(self.config, store, self.storage)
            await service.start()
            return service

        self.service = self.call(boot)
        return self

    def stop(self) -> None:
        if self.service is not None:
            service = self.service

            async def down() -> None:
                await service.close()
                await service.store.close()

            try:
                self.call(down)
            except Exception:
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def magnetar_broker() -> Iterator[InProcessBroker]:
    broker = InProcessBroker().start()
    try:
        yield broker
    finally:
        broker.stop()
