"""Helpers for the auto-recovery tiers: write many ledgers to real bookies, wait until no
ledger references given bookies, and verify every replica entry by entry."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable

from magnetar.broker.bookkeeper import LedgerClient, LedgerClientConfig
from magnetar.broker.bookkeeper.entry import unframe
from magnetar.broker.bookkeeper.metadata import LedgerMetadata, write_set
from magnetar.zk import paths
from magnetar.zk.store import MetadataStore
from support.ledger_cluster import bookie_client_factory
from support.waiting import wait_for


def ledger_client(store: MetadataStore, **config: object) -> LedgerClient:
    cfg = LedgerClientConfig(**{"ensemble_size": 2, "write_quorum": 2, "ack_quorum": 2, **config})  # type: ignore[arg-type]
    return LedgerClient(store, bookie_client_factory, cfg)


async def write_ledgers(
    client: LedgerClient, n_ledgers: int, n_entries: int, size: int = 256, parallel: int = 8
) -> dict[int, list[bytes]]:
    """``n_ledgers`` closed ledgers of ``n_entries`` random entries; returns what was acked."""
    written: dict[int, list[bytes]] = {}
    sem = asyncio.Semaphore(parallel)

    async def one() -> None:
        async with sem:
            w = await client.create_ledger()
            payloads = [os.urandom(size) for _ in range(n_entries)]
            await asyncio.gather(*(w.add_nowait(p) for p in payloads))
            await w.close()
            written[w.ledger_id] = payloads

    await asyncio.gather(*(one() for _ in range(n_ledgers)))
    return written


async def metadata_of(store: MetadataStore, ledger_id: int) -> LedgerMetadata:
    got = await store.get(paths.ledger_metadata(ledger_id))
    assert got is not None, ledger_id
    return LedgerMetadata.from_bytes(got.value)


async def referencing(
    store: MetadataStore, ledger_ids: Iterable[int], bookies: set[str]
) -> list[int]:
    return [lid for lid in ledger_ids if (await metadata_of(store, lid)).all_bookies & bookies]


async def wait_unreferenced(
    store: MetadataStore, ledger_ids: Iterable[int], bookies: set[str], timeout_s: float = 120.0
) -> None:
    ids = list(ledger_ids)

    async def unreferenced() -> bool:
        return not await referencing(store, ids, bookies)

    await wait_for(unreferenced, timeout_s, f"no ledger referencing {bookies}", interval_s=0.2)


async def verify_every_replica(client: LedgerClient, written: dict[int, list[bytes]]) -> int:
    """Read every entry from every bookie that should hold it; compare to what was written.
    Returns the number of replica reads."""
    reads = 0
    for ledger_id, payloads in written.items():
        meta = await metadata_of(client.store, ledger_id)
        assert meta.last_entry_id == len(payloads) - 1
        await client.registry.resolve(meta.all_bookies)
        for index, (first, ensemble) in enumerate(meta.ensembles):
            last = meta.fragment_last_entry(index)
            assert last is not None
            for bookie in ensemble:
                held = [
                    e
                    for e in range(first, last + 1)
                    if bookie in write_set(ensemble, meta.write_quorum, e)
                ]
                if not held:
                    continue
                bk = client.registry.client(bookie)
                if len(ensemble) == meta.write_quorum:
                    got = await bk.read_range(ledger_id, held[0], held[-1])
                else:  # striped: the bookie holds every n-th entry
                    got = [await bk.read_entry(ledger_id, e) for e in held]
                assert [g.entry_id for g in got] == held, (ledger_id, bookie)
                for entry in got:
                    assert unframe(entry).payload == payloads[entry.entry_id], (
                        ledger_id,
                        entry.entry_id,
                        bookie,
                    )
                    reads += 1
    return reads


async def read_back(client: LedgerClient, written: dict[int, list[bytes]]) -> None:
    """Every acknowledged entry read through the ledger client (any replica)."""
    for ledger_id, payloads in written.items():
        handle = await client.open_ledger(ledger_id, recovery=False)
        got = await handle.read(0, len(payloads) - 1)
        assert [g.payload for g in got] == payloads, ledger_id


async def wait_unregistered(store: MetadataStore, bookie_id: str, timeout_s: float = 60.0) -> None:
    """Until the bookie's registration node is gone (its session expired)."""

    async def gone() -> bool:
        return await store.exists(paths.bookie_registration(bookie_id)) is None

    await wait_for(gone, timeout_s, f"{bookie_id} unregistered", interval_s=0.1)
