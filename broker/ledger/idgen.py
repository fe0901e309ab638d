"""Ledger id allocation.

Owns: minting cluster-unique ledger ids. Uses BookKeeper's trick: create an
EPHEMERAL_SEQUENTIAL node under ``zk.paths.LEDGER_IDGEN``; its sequence number is the id;
delete the node. (To be replaced by ``zk.recipes.IdAllocator`` for 64-bit ids.)
Invariant: ids are unique; creation of the ledger node is create-only as a second guard.
Must not know: ledgers.
"""

from __future__ import annotations

from magnetar.zk import paths
from magnetar.zk.errors import NotFound
from magnetar.zk.store import MetadataStore


class LedgerIdAllocator:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def next_id(self) -> int:
        created = await self._store.put(
            f"{paths.LEDGER_IDGEN}/ID-", b"", ephemeral=True, sequential=True
        )
        try:
            await self._store.delete(created.path)
        except NotFound:
            pass
        return int(created.path.rsplit("-", 1)[1])


__all__ = ["LedgerIdAllocator"]
