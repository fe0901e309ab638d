"""Real-cluster helpers for the ledger integration and chaos tiers.

A unique ZooKeeper chroot per test (on the session ZooKeeper), N real bookie processes
registered in it, and ``ManagedLedgerFactory`` / ``LedgerClient`` over real ``BookieClient``s.
``TRANSPORTS`` parametrizes a test over the Add transports: "grpc" (the gRPC ``Add`` stream)
and "tcp" (each bookie's fast add port: start them with ``fast_add_args()``, open the factory
with ``transport="tcp"``; its clients then add over the port each bookie announces).
"""

from __future__ import annotations

import uuid

from magnetar.bookie.client import BookieClient
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.zk import paths
from magnetar.zk.factory import open_metadata_store
from magnetar.zk.store import MetadataStore
from support.net import free_port
from support.waiting import wait_for

__all__ = [
    "TRANSPORTS",
    "bookie_client_factory",
    "chroot_url",
    "fast_add_args",
    "open_factory",
    "wait_registered",
]

TRANSPORTS = ("grpc", "tcp")


def chroot_url(zk_url: str) -> str:
    return f"{zk_url}/ledger-{uuid.uuid4().hex[:12]}"


def bookie_client_factory(address: str) -> BookieClient:
    return BookieClient(address, timeout_ms=5_000, add_timeout_ms=10_000)


async def wait_registered(store: MetadataStore, count: int, timeout_s: float = 30.0) -> list[str]:
    async def registered() -> list[str]:
        names = [n for n in await store.children(paths.AVAILABLE_BOOKIES) if n != "readonly"]
        return names if len(names) >= count else []

    return await wait_for(registered, timeout_s, f"{count} bookies registered")


def fast_add_args(transport: str) -> list[str]:
    """Bookie arguments for ``transport``: a fast add port of its own for "tcp"."""
    return ["--fast-add-port", str(free_port())] if transport == "tcp" else []


async def open_factory(
    url: str, *, transport: str = "grpc", **config: object
) -> ManagedLedgerFactory:
    store = await open_metadata_store(url)
    made: list[ManagedLedgerFactory] = []

    def client_factory(address: str) -> BookieClient:
        add_address = None
        if transport == "tcp":
            add_address = made[0].ledger_client.registry.add_address(address)
            assert add_address is not None, f"bookie {address} announces no fast add port"
        return BookieClient(
            address, timeout_ms=5_000, add_timeout_ms=10_000, add_address=add_address
        )

    factory = ManagedLedgerFactory(store, client_factory, ManagedLedgerConfig(**config))  # type: ignore[arg-type]
    made.append(factory)
    return factory
