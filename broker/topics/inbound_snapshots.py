"""Storing the recovery point of a topic's inbound replication links.

Owns: ``InboundSnapshots``: writes ``InboundLinks.snapshot`` at the topic's last reported
position into the managed ledger's property ``pulsar.repl.inbound``, one write at a time (a
request made while one is running is folded into one more write after it, which takes the
state of then). ``soon()`` from the publish path (a failure is logged: the next write
covers it, and a load reads a little more), ``now()`` where the caller must know it is
stored (a new link's first producer is ready only once it is: a failure refuses that
producer, which tries again).
Invariant: a stored snapshot never claims more than the completions reported up to its
position (``reported`` is the position of the last one).
Must not know: the wire, how the topic publishes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.contract import TopicLedger
from magnetar.broker.topics.inbound_links import SNAPSHOT_PROPERTY, InboundLinks

log = logging.getLogger(__name__)

NOTHING_YET = Position(-1, -1)
"""The position of a snapshot taken before anything was stored: a load reads everything."""


class InboundSnapshots:
    def __init__(
        self, ledger: TopicLedger, links: InboundLinks, reported: Callable[[], Position | None]
    ) -> None:
        self._ledger = ledger
        self._links = links
        self._reported = reported
        self._task: asyncio.Future[None] | None = None
        self._again = False
        self.written = 0

    def __repr__(self) -> str:
        return f"<InboundSnapshots {self._ledger.name} written={self.written}>"

    async def _write(self) -> None:
        while True:
            self._again = False
            snap = self._links.snapshot(self._reported() or NOTHING_YET)
            await self._ledger.set_property(SNAPSHOT_PROPERTY, snap.to_property())
            self._links.snapshot_stored(snap)
            self.written += 1
            if not self._again:
                return

    def soon(self) -> None:
        """Store the recovery point in the background."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.ensure_future(self._write())
        self._task.add_done_callback(self._logged)

    def _logged(self, task: asyncio.Future[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.warning("%s: replication links' snapshot not stored: %s", self._ledger.name, exc)

    async def now(self) -> None:
        """Store the recovery point now; raises when it cannot be stored."""
        running = self._task
        if running is not None and not running.done():
            await asyncio.wait([running])
        self._task = asyncio.ensure_future(self._write())
        self._task.add_done_callback(self._logged)
        await asyncio.shield(self._task)


__all__ = ["NOTHING_YET", "InboundSnapshots"]
