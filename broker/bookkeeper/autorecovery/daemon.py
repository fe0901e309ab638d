"""The auto-recovery daemon: one per bookie (``autoRecoveryDaemonEnabled``) or standalone
(``magnetar autorecovery``).

Owns: joining the auditor election (``zk.paths.AUDITOR_ELECTION``, the zk recipes' leader
election): the leader runs the ``Auditor``; every daemon runs a ``ReplicationWorker``. Its
own ``LedgerClient`` (placement, bookie clients, fencing) over the injected store and bookie
client factory.
Must not know: topics; bookie internals (it reaches bookies only through their clients).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from magnetar.broker.bookkeeper.autorecovery.auditor import Auditor
from magnetar.broker.bookkeeper.autorecovery.config import AutoRecoveryConfig
from magnetar.broker.bookkeeper.autorecovery.worker import ReplicationWorker
from magnetar.broker.bookkeeper.client import LedgerClient
from magnetar.broker.bookkeeper.context import LedgerClientConfig
from magnetar.broker.bookkeeper.placement import BookieClientFactory
from magnetar.clock import Clock
from magnetar.zk import paths
from magnetar.zk.recipes import LeaderElection
from magnetar.zk.store import MetadataStore

log = logging.getLogger(__name__)


def ledger_client_for(
    store: MetadataStore,
    client_factory: BookieClientFactory,
    config: AutoRecoveryConfig,
    clock: Clock | None = None,
) -> LedgerClient:
    """The ledger client auto-recovery works through (rack settings from ``config``)."""
    return LedgerClient(
        store,
        client_factory,
        LedgerClientConfig(
            min_num_racks_per_write_quorum=config.min_num_racks_per_write_quorum,
            enforce_min_num_racks_per_write_quorum=config.enforce_min_num_racks_per_write_quorum,
            quarantine_ms=0,
        ),
        clock=clock,
    )


class AutoRecovery:
    """Auditor election plus a replication worker."""

    def __init__(
        self,
        store: MetadataStore,
        client_factory: BookieClientFactory,
        config: AutoRecoveryConfig | None = None,
        *,
        node_id: str,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or AutoRecoveryConfig()
        self.node_id = node_id
        self.ledgers = ledger_client_for(store, client_factory, self.config, clock)
        self.store = store
        self.worker = ReplicationWorker(self.ledgers, self.config, worker_id=node_id)
        self.auditor: Auditor | None = None
        self._election = LeaderElection(
            store, paths.AUDITOR_ELECTION, node_id.encode(), on_change=self._on_leader
        )
        self._stop = asyncio.Event()
        self._worker_task: asyncio.Task[None] | None = None
        self._auditor_task: asyncio.Task[None] | None = None
        self._auditor_stop = asyncio.Event()
        self._auditor_tasks: set[asyncio.Task[None]] = set()
        """Every auditor run not finished yet (a resigned one may still be winding down)."""

    def __repr__(self) -> str:
        return f"<AutoRecovery {self.node_id} auditor={self.is_auditor} {self.worker!r}>"

    @property
    def is_auditor(self) -> bool:
        return self._auditor_task is not None and not self._auditor_task.done()

    async def start(self) -> None:
        self._worker_task = asyncio.create_task(
            self.worker.run(self._stop), name="replication-worker"
        )
        await self._election.start()
        log.info("auto-recovery started node=%s config=%s", self.node_id, self.config)

    def _on_leader(self, leader: bool) -> None:
        if leader and not self.is_auditor:
            self.auditor = Auditor(self.ledgers, self.config)
            self._auditor_stop = asyncio.Event()
            self._auditor_task = asyncio.create_task(
                self.auditor.run(self._auditor_stop), name="auditor"
            )
            self._auditor_tasks.add(self._auditor_task)
            self._auditor_task.add_done_callback(self._auditor_tasks.discard)
            log.info("auto-recovery %s is the auditor", self.node_id)
        elif not leader and self._auditor_task is not None:
            self._auditor_stop.set()
            self._auditor_task = None
            log.info("auto-recovery %s is no longer the auditor", self.node_id)

    async def stop(self) -> None:
        self._stop.set()
        self._auditor_stop.set()
        await self._election.resign()
        tasks = [t for t in (self._worker_task, *self._auditor_tasks) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.ledgers.close()


__all__ = ["AutoRecovery", "ledger_client_for"]
