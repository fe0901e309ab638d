"""Reaching the bookies that hold a ledger's entries, for reads.

Owns: ``BookieReplicas`` (what the read path needs of the bookies: a client per bookie id,
and which replicas to ask last), ``ReadSuspects`` (the memory of recent read failures that
orders replicas, BookKeeper's reordered read sequence) and ``BookiePool``, the replicas of a
reader without a metadata store: one client per bookie, made by the given factory at the
address the caller names (the bookie id by default), closed with the pool.
``placement.BookieRegistry`` is the other ``BookieReplicas``: it learns addresses from the
bookies' registrations in the metadata store.
Must not know: ledger metadata, handles, managed ledgers, the metadata store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Protocol

from magnetar.bookie.api import BookieClientAPI
from magnetar.clock import Clock, SystemClock

log = logging.getLogger(__name__)

READ_SUSPECT_MS = 30_000
"""How long reads ask a bookie last after a read of its failed or timed out."""


class BookieReplicas(Protocol):
    """The bookies as the read path sees them."""

    def client(self, bookie_id: str) -> BookieClientAPI:
        """The client of bookie ``bookie_id`` (made on first use, then kept)."""
        ...

    def read_last(self, bookie_id: str) -> bool:
        """Whether reads should ask this bookie after the others."""
        ...

    def read_failed(self, bookie_id: str) -> None:
        """A read of this bookie failed or timed out."""
        ...


class ReadSuspects:
    """Bookies whose reads failed recently: asked last for ``READ_SUSPECT_MS``."""

    def __init__(self, clock: Clock, suspect_ms: int = READ_SUSPECT_MS) -> None:
        self._clock = clock
        self._suspect_ms = suspect_ms
        self._until: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"<ReadSuspects {sorted(self._until)}>"

    def failed(self, bookie_id: str) -> None:
        self._until[bookie_id] = self._clock.monotonic_ms() + self._suspect_ms

    def suspect(self, bookie_id: str) -> bool:
        until = self._until.get(bookie_id)
        if until is None:
            return False
        if self._clock.monotonic_ms() < until:
            return True
        del self._until[bookie_id]
        return False


BookieReaderFactory = Callable[[str], BookieClientAPI]
"""Makes a client for one bookie, given its address (``host:port``)."""


class BookiePool:
    """``BookieReplicas`` without a metadata store: a reader (a Spark executor, an
    offloader) that got a ledger's metadata elsewhere reaches its bookies directly.
    ``addresses`` maps bookie ids to ``host:port`` where they differ (a bookie registered
    under an id of its own); an id not in it is used as the address. Owns the clients it
    made: ``close`` (or ``async with``) closes them."""

    def __init__(
        self,
        client_factory: BookieReaderFactory,
        addresses: Mapping[str, str] | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._factory = client_factory
        self._addresses = dict(addresses or {})
        self._suspects = ReadSuspects(clock if clock is not None else SystemClock())
        self._clients: dict[str, BookieClientAPI] = {}

    def __repr__(self) -> str:
        return f"<BookiePool clients={sorted(self._clients)}>"

    def client(self, bookie_id: str) -> BookieClientAPI:
        client = self._clients.get(bookie_id)
        if client is None:
            client = self._clients[bookie_id] = self._factory(
                self._addresses.get(bookie_id, bookie_id)
            )
        return client

    def read_last(self, bookie_id: str) -> bool:
        return self._suspects.suspect(bookie_id)

    def read_failed(self, bookie_id: str) -> None:
        self._suspects.failed(bookie_id)

    async def close(self) -> None:
        clients, self._clients = self._clients, {}
        for client in clients.values():
            try:
                await client.close()
            except Exception:  # closing a dead client must not stop closing the others
                log.debug("closing bookie client failed", exc_info=True)

    async def __aenter__(self) -> BookiePool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


__all__ = [
    "READ_SUSPECT_MS",
    "BookiePool",
    "BookieReaderFactory",
    "BookieReplicas",
    "ReadSuspects",
]
