"""What a ledger handle needs of the client that made it.

Owns: ``LedgerClientConfig`` (the client's settings) and ``HandleContext`` (metadata store,
settings, clock and bookie registry, and reading a ledger's metadata as stored now), built
once by ``LedgerClient`` and handed to every handle, so handles never reach back into the
client.
Must not know: handles or the client's ledger operations.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker.bookkeeper.metadata import LedgerMetadata
from magnetar.broker.bookkeeper.placement import BookieRegistry
from magnetar.clock import Clock
from magnetar.zk import paths
from magnetar.zk.errors import MetadataError
from magnetar.zk.store import MetadataStore


@dataclass(frozen=True, slots=True)
class LedgerClientConfig:
    ensemble_size: int = 2
    write_quorum: int = 2
    ack_quorum: int = 2
    password: bytes = b""
    add_timeout_ms: int = 3_000
    """A bookie that has not acked the oldest pending add within this is replaced."""
    ensemble_change_timeout_ms: int = 10_000
    """Give up (handle ERRORED) when no ensemble can be formed for this long."""
    max_pending_adds: int = 100_000
    quarantine_ms: int = 30_000
    allow_ensemble_shrink: bool = True
    degraded_retry_ms: int = 2_000
    """While writing under-replicated (no spare bookie), retry the replacement this often."""
    recovery_read_batch: int = 64
    fence_timeout_ms: int = 5_000
    min_num_racks_per_write_quorum: int = 2
    """BookKeeper's ``minNumRacksPerWriteQuorum``: racks each write set should span (when
    bookies announce racks, ``bookieRack``)."""
    enforce_min_num_racks_per_write_quorum: bool = False
    """BookKeeper's ``enforceMinNumRacksPerWriteQuorum``: refuse ensembles that cannot."""


@dataclass(frozen=True, slots=True)
class HandleContext:
    """A ledger client's parts its handles use."""

    store: MetadataStore
    config: LedgerClientConfig
    clock: Clock
    registry: BookieRegistry

    async def reload_metadata(self, ledger_id: int) -> tuple[LedgerMetadata, int] | None:
        """The ledger's metadata and version as stored now, its bookies' addresses learned;
        None when it cannot be read or is gone (a ``read_handle.MetadataReload``)."""
        try:
            got = await self.store.get(paths.ledger_metadata(ledger_id))
        except MetadataError:
            return None
        if got is None:
            return None
        fresh = LedgerMetadata.from_bytes(got.value)
        await self.registry.resolve(fresh.all_bookies)
        return fresh, got.stat.version


__all__ = ["HandleContext", "LedgerClientConfig"]
