"""Which bookies exist and how to reach them: registration, placement, client pool.

Owns: reading the registered writable bookies (children of ``zk.paths.AVAILABLE_BOOKIES``,
whose value is JSON carrying the bookie's address, or the address itself), choosing
ensembles at random among healthy ones, a short quarantine of bookies that just failed (a
SIGKILLed bookie's ephemeral registration lingers until its session expires), and one
``BookieClientAPI`` per address, made by the injected factory.
Must not know: ledgers' contents, gRPC.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from magnetar.bookie.api import BookieClientAPI
from magnetar.broker.ledger.errors import NotEnoughBookies
from magnetar.zk import paths
from magnetar.zk.clock import Clock
from magnetar.zk.store import MetadataStore

if TYPE_CHECKING:
    from magnetar.bookie.client import AddEntryLike

log = logging.getLogger(__name__)


class LedgerBookieClient(BookieClientAPI, Protocol):
    """``BookieClientAPI`` plus the batch add the write path uses (``BookieClient``,
    ``testing.FakeBookieClient``): one future for many entries of one ledger."""

    def add_batch(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[AddEntryLike],
        *,
        recovery: bool = False,
    ) -> asyncio.Future[None]: ...


BookieClientFactory = Callable[[str], LedgerBookieClient]
"""Makes a client for one bookie, given its address (``host:port``)."""


def parse_registration(bookie_id: str, value: bytes) -> str:
    """The address announced in a registration node (JSON or plain text), else the id."""
    if value:
        try:
            doc = json.loads(value)
        except ValueError:
            text = value.decode(errors="replace").strip()
            return text or bookie_id
        if isinstance(doc, dict):
            for key in ("address", "grpc_address", "endpoint", "rpc_address"):
                if isinstance(doc.get(key), str):
                    return str(doc[key])
        elif isinstance(doc, str):
            return doc
    return bookie_id


class BookieRegistry:
    """Registered bookies, their addresses, health and clients."""

    def __init__(
        self,
        store: MetadataStore,
        client_factory: BookieClientFactory,
        clock: Clock,
        *,
        quarantine_ms: int = 30_000,
        rng: random.Random | None = None,
    ) -> None:
        self._store = store
        self._factory = client_factory
        self._clock = clock
        self._quarantine_ms = quarantine_ms
        self._rng = rng or random.Random()
        self._addresses: dict[str, str] = {}
        self._clients: dict[str, LedgerBookieClient] = {}
        self._quarantined_until: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"<BookieRegistry known={sorted(self._addresses)} clients={len(self._clients)}>"

    async def available(self) -> list[str]:
        """Writable registered bookies (refreshing their addresses)."""
        names = [n for n in await self._store.children(paths.AVAILABLE_BOOKIES) if n != "readonly"]
        for name in names:
            if name not in self._addresses:
                got = await self._store.get(paths.bookie_registration(name))
                if got is not None:
                    self._addresses[name] = parse_registration(name, got.value)
        return names

    async def resolve(self, bookie_ids: Iterable[str]) -> None:
        """Learn the addresses of bookies named in ledger metadata (registered or not)."""
        for bookie_id in bookie_ids:
            if bookie_id in self._addresses:
                continue
            got = await self._store.get(paths.bookie_registration(bookie_id))
            self._addresses[bookie_id] = (
                bookie_id if got is None else parse_registration(bookie_id, got.value)
            )

    def client(self, bookie_id: str) -> LedgerBookieClient:
        client = self._clients.get(bookie_id)
        if client is None:
            address = self._addresses.get(bookie_id, bookie_id)
            client = self._factory(address)
            self._clients[bookie_id] = client
        return client

    def quarantine(self, bookie_id: str) -> None:
        self._quarantined_until[bookie_id] = self._clock.monotonic_ms() + self._quarantine_ms

    def is_quarantined(self, bookie_id: str) -> bool:
        until = self._quarantined_until.get(bookie_id)
        if until is None:
            return False
        if self._clock.monotonic_ms() >= until:
            del self._quarantined_until[bookie_id]
            return False
        return True

    async def healthy(self, exclude: Iterable[str] = ()) -> list[str]:
        excluded = set(exclude)
        return [
            b for b in await self.available() if b not in excluded and not self.is_quarantined(b)
        ]

    async def choose_ensemble(self, size: int, exclude: Iterable[str] = ()) -> tuple[str, ...]:
        candidates = await self.healthy(exclude)
        if len(candidates) < size:
            raise NotEnoughBookies(f"need {size} bookies, {len(candidates)} healthy: {candidates}")
        return tuple(self._rng.sample(sorted(candidates), size))

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            try:
                await client.close()
            except Exception:  # closing a dead client must not stop closing the others
                log.debug("closing bookie client failed", exc_info=True)


__all__ = [
    "BookieClientFactory",
    "BookieRegistry",
    "LedgerBookieClient",
    "parse_registration",
]
