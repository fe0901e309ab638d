"""Real-cluster helpers for the ledger integration and chaos tiers.

A unique ZooKeeper chroot per test (on the session ZooKeeper), N real bookie processes
registered in it, and ``ManagedLedgerFactory`` / ``LedgerClient`` over real ``BookieClient``s.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

from magnetar.bookie.client import BookieClient
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.zk import paths
from magnetar.zk.factory import open_metadata_store
from magnetar.zk.store import MetadataStore


def chroot_url(zk_url: str) -> str:
    return f"{zk_url}/ledger-{uuid.uuid4().hex[:12]}"


def bookie_client_factory(address: str) -> BookieClient:
    return BookieClient(address, timeout_ms=5_000, add_timeout_ms=10_000)


async def wait_registered(store: MetadataStore, count: int, timeout_s: float = 30.0) -> list[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        names = [n for n in await store.children(paths.AVAILABLE_BOOKIES) if n != "readonly"]
        if len(names) >= count:
            return names
        if loop.time() > deadline:
            raise AssertionError(f"only {names} registered")
        await asyncio.sleep(0.05)


async def wait_for(pred: Callable[[], bool], timeout_s: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


async def open_factory(url: str, **config: object) -> ManagedLedgerFactory:
    store = await open_metadata_store(url)
    return ManagedLedgerFactory(store, bookie_client_factory, ManagedLedgerConfig(**config))  # type: ignore[arg-type]
