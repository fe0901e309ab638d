"""Real-cluster helpers for the ledger integration and chaos tiers.

A unique ZooKeeper chroot per test (on the session ZooKeeper), N real bookie processes
registered in it, and ``ManagedLedgerFactory`` / ``LedgerClient`` over real ``BookieClient``s.
"""

from __future__ import annotations

import uuid

from magnetar.bookie.client import BookieClient
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.zk import paths
from magnetar.zk.factory import open_metadata_store
from magnetar.zk.store import MetadataStore
from support.waiting import wait_for

__all__ = ["bookie_client_factory", "chroot_url", "open_factory", "wait_registered"]


def chroot_url(zk_url: str) -> str:
    return f"{zk_url}/ledger-{uuid.uuid4().hex[:12]}"


def bookie_client_factory(address: str) -> BookieClient:
    return BookieClient(address, timeout_ms=5_000, add_timeout_ms=10_000)


async def wait_registered(store: MetadataStore, count: int, timeout_s: float = 30.0) -> list[str]:
    async def registered() -> list[str]:
        names = [n for n in await store.children(paths.AVAILABLE_BOOKIES) if n != "readonly"]
        return names if len(names) >= count else []

    return await wait_for(registered, timeout_s, f"{count} bookies registered")


async def open_factory(url: str, **config: object) -> ManagedLedgerFactory:
    store = await open_metadata_store(url)
    return ManagedLedgerFactory(store, bookie_client_factory, ManagedLedgerConfig(**config))  # type: ignore[arg-type]
