"""An in-process broker on a background thread (its own event loop), for tests that drive it
with blocking clients such as the official ``pulsar`` package.

``InProcessBroker(**config_overrides).start()`` binds a free port on 127.0.0.1 with in-memory
metadata and storage (or the ones given); ``stop()`` closes it. ``call(coro_fn)`` runs a
coroutine on the broker's loop and returns its result. Fixture: ``magnetar_broker``.

Real storage: ``InProcessBroker(metadata_url=zk_url, managed_ledger={"ensemble_size": 1, ...})``
opens the metadata store at ``metadata_url`` and serves topics from managed ledgers on the
bookies registered there (``ManagedLedgerStorage``). A second ``InProcessBroker`` on the same
URL after ``stop()`` is a broker restart.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.protocol.listener import BinaryListener
from magnetar.broker.runtime import BrokerServiceRunner
from magnetar.broker.service import BrokerService
from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.clock import Clock, SystemClock
from magnetar.zk.memory import MemoryMetadataServer


class _WallTimeOf(SystemClock):
    """The managed ledgers' clock beside a test's clock: wall time (ledger close times,
    retention) from ``clock``, so a test moving it ages ledgers; timeouts, retries and timers
    real, so storage never waits for a test to move time."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    def now_ms(self) -> int:
        return self._clock.now_ms()


class InProcessBroker:
    def __init__(
        self,
        metadata: MemoryMetadataServer | None = None,
        storage: Any = None,
        *,
        metadata_url: str | None = None,
        managed_ledger: dict[str, Any] | None = None,
        clock: Any = None,
        **config: Any,
    ):
        self.metadata = metadata or MemoryMetadataServer()
        self.metadata_url = metadata_url
        self.managed_ledger = managed_ledger
        self.storage = storage
        self.clock = clock  # a magnetar.clock.Clock for the broker's timers (policies)
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
        self.runner: BrokerServiceRunner | None = None
        self.listener: BinaryListener | None = None

    @property
    def service_url(self) -> str:
        assert self.service is not None
        return self.service.namespaces.service_url

    @property
    def port(self) -> int:
        assert self.service is not None
        return self.service.namespaces.port

    def call(self, fn: Callable[[], Coroutine[Any, Any, Any]], timeout: float = 10) -> Any:
        return asyncio.run_coroutine_threadsafe(fn(), self.loop).result(timeout)

    def start(self) -> InProcessBroker:
        self.thread.start()

        async def boot() -> BrokerService:
            if self.metadata_url is not None:
                from magnetar.zk.factory import open_metadata_store

                store = await open_metadata_store(self.metadata_url)
            else:
                store = self.metadata.connect()
            if self.storage is None:
                if self.managed_ledger is not None:
                    from magnetar.bookie.client import BookieClient
                    from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
                    from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage

                    def bookie(address: str) -> BookieClient:
                        return BookieClient(address, timeout_ms=5_000, add_timeout_ms=10_000)

                    factory = ManagedLedgerFactory(
                        store,
                        bookie,
                        ManagedLedgerConfig(**self.managed_ledger),
                        clock=None if self.clock is None else _WallTimeOf(self.clock),
                    )
                    self.storage = ManagedLedgerStorage(factory)
                else:
                    self.storage = MemoryStorageFactory()
            service = BrokerService(self.config, store, self.storage, clock=self.clock)
            self.listener = BinaryListener(service)
            self.runner = BrokerServiceRunner(service)
            await self.listener.start()
            await self.runner.start()
            return service

        self.service = self.call(boot)
        return self

    def stop(self) -> None:
        if self.service is not None:
            service = self.service
            runner = self.runner
            listener = self.listener
            storage = self.storage

            async def down() -> None:
                assert runner is not None
                await runner.close()
                await listener.close()
                if hasattr(storage, "close"):
                    await storage.close()
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
