"""Operator actions: ``magnetar bookie recover <id>`` and ``magnetar bookie decommission <id>``.

Owns:
- ``recover_bookie``: a dead bookie (not registered): every ledger referencing it is marked
  at once (no ``lost_bookie_recovery_delay_s``) and repaired, by this process's own worker and
  by any running daemons, until no ledger references it;
- ``decommission_bookie``: a live bookie: marked draining (never chosen for new ensembles),
  its ledgers marked and repaired (it is still a valid source), then its cookie and its
  registration are deleted (the bookie sees its cookie gone and never registers again) and
  the draining marker removed.
Both report ``Progress`` after every round and give up after ``timeout_s``. An open ledger's
last fragment on the bookie is waited for (its writer rolls over or the grace period fences).
Must not know: topics, how the CLI prints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.broker.bookkeeper.autorecovery.auditor import all_ledgers, mark_ledgers_of
from magnetar.broker.bookkeeper.autorecovery.layout import UnderReplication
from magnetar.broker.bookkeeper.autorecovery.worker import ReplicationWorker
from magnetar.broker.bookkeeper.errors import LedgerError
from magnetar.zk import paths
from magnetar.zk.errors import NotFound

ROUND_INTERVAL_S = 1.0


class BookieActionError(LedgerError):
    """The operator action cannot be done (bookie alive for recover, unknown bookie, ...)."""


@dataclass(frozen=True, slots=True)
class Progress:
    bookie_id: str
    ledgers_total: int
    ledgers_remaining: int
    entries_copied: int
    bytes_copied: int
    elapsed_s: float

    @property
    def done(self) -> bool:
        return self.ledgers_remaining == 0

    def line(self) -> str:
        pct = (
            100.0
            if not self.ledgers_total
            else (100.0 * (self.ledgers_total - self.ledgers_remaining) / self.ledgers_total)
        )
        return (
            f"{self.bookie_id}: {self.ledgers_total - self.ledgers_remaining}/"
            f"{self.ledgers_total} ledgers ({pct:.0f}%), {self.entries_copied} entries / "
            f"{self.bytes_copied} bytes copied, {self.elapsed_s:.1f}s"
        )


async def ledgers_referencing(worker: ReplicationWorker, bookie_id: str) -> list[int]:
    return [m.ledger_id async for m in all_ledgers(worker.ledgers) if bookie_id in m.all_bookies]


async def _drive(
    worker: ReplicationWorker,
    bookie_id: str,
    reason: str,
    progress: Callable[[Progress], None] | None,
    timeout_s: float,
) -> Progress:
    clock = worker.clock
    start = clock.monotonic_ms()
    marks = UnderReplication(worker.store)
    total = len(await mark_ledgers_of(worker.ledgers, marks, {bookie_id}, reason))
    while True:
        await worker.run_once()
        remaining = await ledgers_referencing(worker, bookie_id)
        # ledgers created or changed meanwhile (a writer's ensemble still had it) get marked too
        for ledger_id in remaining:
            await marks.mark(ledger_id, {bookie_id}, reason, clock.now_ms())
        elapsed = (clock.monotonic_ms() - start) / 1000
        state = Progress(
            bookie_id,
            max(total, len(remaining)),
            len(remaining),
            worker.stats.entries_copied,
            worker.stats.bytes_copied,
            elapsed,
        )
        if progress is not None:
            progress(state)
        if state.done:
            return state
        if elapsed > timeout_s:
            raise BookieActionError(
                f"{bookie_id}: {len(remaining)} ledgers still reference it after {timeout_s}s: "
                f"{remaining[:20]}"
            )
        worker.retry_deferred()
        await clock.sleep(ROUND_INTERVAL_S)


async def recover_bookie(
    worker: ReplicationWorker,
    bookie_id: str,
    *,
    progress: Callable[[Progress], None] | None = None,
    timeout_s: float = 3600.0,
) -> Progress:
    store = worker.store
    if await store.exists(paths.bookie_registration(bookie_id)) is not None:
        raise BookieActionError(
            f"bookie {bookie_id} is registered (alive): use `magnetar bookie decommission`"
        )
    return await _drive(worker, bookie_id, "recover", progress, timeout_s)


async def decommission_bookie(
    worker: ReplicationWorker,
    bookie_id: str,
    *,
    progress: Callable[[Progress], None] | None = None,
    timeout_s: float = 3600.0,
) -> Progress:
    store = worker.store
    marks = UnderReplication(store)
    if await store.exists(paths.bookie_cookie(bookie_id)) is None:
        raise BookieActionError(f"bookie {bookie_id} has no cookie: unknown or decommissioned")
    await marks.drain(bookie_id)
    result = await _drive(worker, bookie_id, "decommission", progress, timeout_s)
    with contextlib.suppress(NotFound):
        await store.delete(paths.bookie_cookie(bookie_id))
    for path in (
        paths.bookie_registration(bookie_id),
        paths.readonly_bookie_registration(bookie_id),
    ):
        with contextlib.suppress(NotFound):
            await store.delete(path)
    await marks.undrain(bookie_id)
    return result


__all__ = [
    "BookieActionError",
    "Progress",
    "decommission_bookie",
    "ledgers_referencing",
    "recover_bookie",
]
