"""The auditor: finds under-replicated ledgers and marks them (one elected per cluster).

Owns, while this process leads the election at ``zk.paths.AUDITOR_ELECTION`` (the election
itself is ``daemon.py``'s):
- the lost-bookie watch: a bookie referenced by ledgers (or seen registered) that is not
  registered is pending; once pending for ``lost_bookie_recovery_delay_s`` (at once when a
  second bookie goes missing meanwhile) every ledger with it in an ensemble is marked;
- the periodic bookie check (``auditor_periodic_bookie_check_interval_s``): every ledger's
  ensembles against the registered, non-draining bookies, marked at once;
- the periodic check (``auditor_periodic_check_interval_s``): every closed ledger's fragments
  probed on their registered bookies (``checker.probe_faults``); a bookie that came back
  without its data (its cookie deleted by hand) is caught here.
Invariant: the auditor only marks; it never changes ledger metadata or bookies.
Must not know: how ledgers are repaired.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass

from magnetar.broker.bookkeeper.autorecovery.checker import (
    ClusterView,
    metadata_faults,
    probe_faults,
)
from magnetar.broker.bookkeeper.autorecovery.config import AutoRecoveryConfig
from magnetar.broker.bookkeeper.autorecovery.layout import UnderReplication
from magnetar.broker.bookkeeper.client import LedgerClient
from magnetar.broker.bookkeeper.metadata import LedgerMetadata
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.zk import paths
from magnetar.zk.errors import MetadataError
from magnetar.zk.store import Notification

log = logging.getLogger(__name__)

TICK_S = 1.0
"""How often the auditor compares registrations (also woken by registration changes)."""


@dataclass(slots=True)
class AuditorStatistics:
    lost_bookie_audits: int = 0
    bookie_checks: int = 0
    periodic_checks: int = 0
    ledgers_marked: int = 0


async def all_ledgers(ledgers: LedgerClient) -> AsyncIterator[LedgerMetadata]:
    """Every ledger's metadata (ledgers deleted meanwhile are skipped)."""
    for name in await ledgers.store.children(paths.LEDGER_META_ROOT):
        ledger_id = paths.ledger_id_of(name)
        if ledger_id is None:
            continue
        got = await ledgers.store.get(paths.ledger_metadata(ledger_id))
        if got is not None:
            yield LedgerMetadata.from_bytes(got.value)


async def mark_ledgers_of(
    ledgers: LedgerClient, marks: UnderReplication, bookies: set[str], reason: str
) -> list[int]:
    """Mark every ledger with one of ``bookies`` in an ensemble; returns their ids."""
    marked: list[int] = []
    for meta in [m async for m in all_ledgers(ledgers)]:
        hit = meta.all_bookies & bookies
        if hit:
            await marks.mark(meta.ledger_id, hit, reason, ledgers.clock.now_ms())
            marked.append(meta.ledger_id)
    return marked


class Auditor:
    """Runs while leading; ``run(stop)`` returns when ``stop`` is set."""

    def __init__(self, ledgers: LedgerClient, config: AutoRecoveryConfig) -> None:
        self.ledgers = ledgers
        self.store = ledgers.store
        self.config = config
        self.clock = ledgers.clock
        self.marks = UnderReplication(self.store)
        self.stats = AuditorStatistics()
        self._pending: dict[str, float] = {}
        """Missing bookie -> monotonic ms when first seen missing."""
        self._audited: set[str] = set()
        self._known: set[str] = set()
        self._wake = asyncio.Event()

    def __repr__(self) -> str:
        return f"<Auditor pending={sorted(self._pending)} audited={sorted(self._audited)}>"

    def _on_notification(self, notification: Notification) -> None:
        if notification.path.startswith(paths.AVAILABLE_BOOKIES):
            self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        self.store.add_listener(self._on_notification)
        try:
            await self._start()
            now = self.clock.monotonic_ms()
            next_bookie_check = now + self.config.auditor_periodic_bookie_check_interval_s * 1000
            next_check = now + self.config.auditor_periodic_check_interval_s * 1000
            while not stop.is_set():
                try:
                    await self.check_lost_bookies()
                    now = self.clock.monotonic_ms()
                    if (
                        self.config.auditor_periodic_bookie_check_interval_s
                        and now >= next_bookie_check
                    ):
                        await self.bookie_check()
                        next_bookie_check = (
                            now + self.config.auditor_periodic_bookie_check_interval_s * 1000
                        )
                    if self.config.auditor_periodic_check_interval_s and now >= next_check:
                        await self.periodic_check()
                        next_check = now + self.config.auditor_periodic_check_interval_s * 1000
                except MetadataError as exc:
                    log.warning("auditor: metadata error %r", exc)
                self._wake.clear()
                waiter = asyncio.ensure_future(self._wake.wait())
                stopper = asyncio.ensure_future(stop.wait())
                try:
                    await asyncio.wait(
                        {waiter, stopper}, timeout=TICK_S, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    waiter.cancel()
                    stopper.cancel()
        finally:
            self.store.remove_listener(self._on_notification)

    async def _start(self) -> None:
        """Bookies referenced by ledgers start as known (a bookie that died while no auditor
        ran is pending from now)."""
        async for meta in all_ledgers(self.ledgers):
            self._known |= meta.all_bookies
        log.info("auditor started; %d bookies referenced by ledgers", len(self._known))

    async def check_lost_bookies(self) -> None:
        view = await ClusterView.read(self.store)  # (re)arms the watch on registrations
        self._known |= view.registered
        now = self.clock.monotonic_ms()
        for bookie in sorted(self._known):
            if bookie in view.registered:
                self._pending.pop(bookie, None)
                self._audited.discard(bookie)
            elif bookie not in self._pending and bookie not in self._audited:
                log.info("auditor: bookie %s is not registered", bookie)
                self._pending[bookie] = now
        if not self._pending:
            return
        delay_ms = self.config.lost_bookie_recovery_delay_s * 1000
        due = {b for b, since in self._pending.items() if now - since >= delay_ms}
        if len(self._pending) > 1:
            due = set(self._pending)  # a second failure: audit every pending bookie now
        if due:
            self.stats.lost_bookie_audits += 1
            marked = await mark_ledgers_of(self.ledgers, self.marks, due, "lost bookie")
            self.stats.ledgers_marked += len(marked)
            log.info("auditor: bookies %s lost; %d ledgers marked", sorted(due), len(marked))
            for b in due:
                self._pending.pop(b, None)
                self._audited.add(b)

    async def bookie_check(self) -> int:
        """Mark every ledger referencing an unregistered or draining bookie."""
        self.stats.bookie_checks += 1
        view = await ClusterView.read(self.store)
        count = 0
        async for meta in all_ledgers(self.ledgers):
            faults = metadata_faults(meta, view)
            if faults:
                await self.marks.mark(
                    meta.ledger_id, {f.bookie for f in faults}, "bookie check", self.clock.now_ms()
                )
                count += 1
        self.stats.ledgers_marked += count
        return count

    async def periodic_check(self) -> int:
        """Probe every closed ledger's fragments on their bookies; mark what is missing."""
        self.stats.periodic_checks += 1
        view = await ClusterView.read(self.store)
        count = 0
        async for meta in all_ledgers(self.ledgers):
            if meta.state is not LedgerState.CLOSED:
                continue
            await self.ledgers.registry.resolve(meta.all_bookies)
            faults = metadata_faults(meta, view)
            faults += await probe_faults(meta, view, self.ledgers.registry.client)
            if faults:
                await self.marks.mark(
                    meta.ledger_id,
                    {f.bookie for f in faults},
                    "periodic check",
                    self.clock.now_ms(),
                )
                count += 1
        self.stats.ledgers_marked += count
        log.info("auditor: periodic check marked %d ledgers", count)
        return count


__all__ = ["Auditor", "AuditorStatistics", "all_ledgers", "mark_ledgers_of"]
