"""Storing a topic's recovery points in its managed ledger's properties, one write at a time.

Owns: ``RecoverySnapshots``: takes a snapshot (``take``) and stores it encoded under one
property of the ledger, one write at a time (a request made while one is running is folded
into one more write after it, which takes the state of then); ``soon()`` from the publish
path (a failure is logged: the next write covers it, and a load reads a little more),
``now()`` where the caller must know it is stored. What a snapshot holds and when one is due
is the caller's: the inbound replication links' (``inbound_snapshots``) and deduplication's
(``producer.DEDUP_SNAPSHOTS``) recovery points share this writer; both are
``sequence_snapshots.SequenceSnapshot``s.
Must not know: the wire, how the topic publishes, what the snapshots mean.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from magnetar.broker.storage.contract import TopicLedger

log = logging.getLogger(__name__)

T = TypeVar("T")


class RecoverySnapshots(Generic[T]):
    def __init__(
        self,
        ledger: TopicLedger,
        prop: str,
        *,
        take: Callable[[], T],
        encode: Callable[[T], str | None],
        stored: Callable[[T], None] | None = None,
        what: str,
    ) -> None:
        """``encode`` returning None skips that write (the stored snapshot stays)."""
        self._ledger = ledger
        self._prop = prop
        self._take = take
        self._encode = encode
        self._stored = stored
        self._what = what
        self._task: asyncio.Future[None] | None = None
        self._again = False
        self.written = 0

    def __repr__(self) -> str:
        return f"<RecoverySnapshots {self._ledger.name} {self._prop} written={self.written}>"

    async def _write(self) -> None:
        while True:
            self._again = False
            snap = self._take()
            raw = self._encode(snap)
            if raw is not None:
                await self._ledger.set_property(self._prop, raw)
                if self._stored is not None:
                    self._stored(snap)
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
            log.warning("%s: %s not stored: %s", self._ledger.name, self._what, exc)

    async def now(self) -> None:
        """Store the recovery point now; raises when it cannot be stored."""
        running = self._task
        if running is not None and not running.done():
            await asyncio.wait([running])
        self._task = asyncio.ensure_future(self._write())
        self._task.add_done_callback(self._logged)
        await asyncio.shield(self._task)


__all__ = ["RecoverySnapshots"]
