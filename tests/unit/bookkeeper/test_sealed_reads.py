"""Reading a sealed ledger without a metadata store (``open_sealed_ledger``): from its
metadata alone (as an API hands it out) and a ``BookiePool``, never fencing, checksums
verified, replicas falling back; a ledger that is not closed is refused."""

from __future__ import annotations

import asyncio
import json

import pytest
from support.ledger_fakes import make_client

from magnetar.bookie.api import BookieClientAPI
from magnetar.broker.bookkeeper import (
    BookieFailure,
    BookiePool,
    BookieReadHandle,
    EntryCorrupt,
    LedgerMetadata,
    LedgerNotSealed,
    ReadBeyondLastConfirmed,
    ReadHandle,
    WriteHandle,
    open_sealed_ledger,
)
from magnetar.broker.bookkeeper.metadata import write_set
from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.zk.memory import MemoryMetadataServer


async def _sealed(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, count: int, **config: int
) -> LedgerMetadata:
    client = make_client(meta_server, fake_bookies, **config)
    w = await client.create_ledger()
    await asyncio.gather(*(w.add(b"e%d" % i) for i in range(count)))
    await w.close()
    meta, _ = await client.read_metadata(w.ledger_id)
    # as a REST API would hand it out: the stored document, through JSON
    return LedgerMetadata.from_dict(json.loads(json.dumps(meta.to_dict())))


async def test_a_sealed_ledger_reads_back_from_its_metadata_alone(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    meta = await _sealed(meta_server, fake_bookies, 40, ensemble_size=3, write_quorum=2)
    asked: list[str] = []

    def factory(address: str) -> BookieClientAPI:
        asked.append(address)
        return fake_bookies.factory(address)

    async with BookiePool(factory) as bookies:
        handle: ReadHandle = open_sealed_ledger(meta, bookies)
        assert handle.is_closed and handle.ledger_id == meta.ledger_id
        assert handle.last_add_confirmed == 39 and handle.length == meta.length
        got = await handle.read(0, 39)
        assert [e.payload for e in got] == [b"e%d" % i for i in range(40)]
        assert [e.entry_id for e in got] == list(range(40))
        assert got[-1].cumulative_length == meta.length
        with pytest.raises(ReadBeyondLastConfirmed):
            await handle.read(39, 40)
    assert sorted(set(asked)) == sorted(meta.all_bookies)
    assert all(not bk.fenced for bk in fake_bookies.bookies.values()), "a sealed read fences"


async def test_replicas_fall_back_and_corruption_is_caught(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    meta = await _sealed(meta_server, fake_bookies, 5, ensemble_size=2, write_quorum=2)
    a, b = meta.last_ensemble
    fake_bookies[a].corrupt(meta.ledger_id, 3)
    async with BookiePool(fake_bookies.factory) as bookies:
        handle = open_sealed_ledger(meta, bookies)
        assert [e.payload for e in await handle.read(0, 4)] == [b"e%d" % i for i in range(5)]
        fake_bookies[b].corrupt(meta.ledger_id, 3)
        with pytest.raises(EntryCorrupt):
            await handle.read(3, 3)
        fake_bookies.crash(a)
        fake_bookies.crash(b)
        with pytest.raises(BookieFailure):
            await handle.read(0, 0)  # no store to reload from: the failure is the answer


@pytest.mark.parametrize(("ensemble", "quorum"), [(2, 2), (3, 2)], ids=["ranges", "striped"])
async def test_runs_hold_what_read_gives(
    meta_server: MemoryMetadataServer,
    fake_bookies: FakeBookieCluster,
    ensemble: int,
    quorum: int,
) -> None:
    """``read_runs``: the same entries as ``read`` in buffers (packed range reads where every
    bookie holds the fragment, one entry per read where it is striped), a corrupt replica
    skipped as ``read`` skips it."""
    meta = await _sealed(meta_server, fake_bookies, 30, ensemble_size=ensemble, write_quorum=quorum)
    fake_bookies[write_set(meta.last_ensemble, quorum, 7)[0]].corrupt(meta.ledger_id, 7)
    async with BookiePool(fake_bookies.factory) as bookies:
        handle = open_sealed_ledger(meta, bookies)
        runs = await handle.read_runs(3, 29)
        assert [e for run in runs for e in run.entries()] == await handle.read(3, 29)
        assert [p for run in runs for p in run.payloads()] == [b"e%d" % i for i in range(3, 30)]
        assert runs[0].first_entry_id == 3 and runs[-1].last_entry_id == 29
        with pytest.raises(ReadBeyondLastConfirmed):
            await handle.read_runs(0, 30)


async def test_bookie_ids_map_to_the_addresses_given(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    meta = await _sealed(meta_server, fake_bookies, 3, ensemble_size=2, write_quorum=2)
    renamed = {b: f"host-of-{b}:3181" for b in meta.all_bookies}
    asked: list[str] = []

    def factory(address: str) -> BookieClientAPI:
        asked.append(address)
        return fake_bookies.factory(address.removeprefix("host-of-").removesuffix(":3181"))

    async with BookiePool(factory, renamed) as bookies:
        got = await open_sealed_ledger(meta, bookies).read(0, 2)
    assert [e.payload for e in got] == [b"e0", b"e1", b"e2"]
    assert asked and set(asked) <= set(renamed.values())


async def test_a_ledger_that_is_not_closed_is_refused(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    client = make_client(meta_server, fake_bookies)
    w = await client.create_ledger()
    await w.add(b"open")
    async with BookiePool(fake_bookies.factory) as bookies:
        with pytest.raises(LedgerNotSealed):
            open_sealed_ledger(w.metadata, bookies)
    await w.close()


async def test_bookie_handles_satisfy_the_read_contract(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    client = make_client(meta_server, fake_bookies)
    w = await client.create_ledger()
    await w.add(b"x")
    await w.add(b"y")  # a reader that is not the writer learns the LAC from later adds
    readers: list[ReadHandle] = [w, await client.open_ledger(w.ledger_id, recovery=False)]
    for reader in readers:
        assert [e.payload for e in await reader.read(0, 0)] == [b"x"]
    assert isinstance(readers[1], BookieReadHandle) and isinstance(w, WriteHandle)
    await w.close()


def test_metadata_documents_round_trip() -> None:
    meta = LedgerMetadata.from_dict(
        {
            "format": 1,
            "ledger_id": 9,
            "ensemble_size": 3,
            "write_quorum": 2,
            "ack_quorum": 2,
            "state": "CLOSED",
            "last_entry_id": 41,
            "length": 999,
            "ensembles": [[0, ["a:1", "b:1", "c:1"]], [20, ["a:1", "d:1", "c:1"]]],
            "master_key": "00ff",
            "ctime_ms": 5,
            "custom": {"managed-ledger": "t"},
            "digest": "CRC32C",
        }
    )
    assert LedgerMetadata.from_bytes(meta.to_bytes()) == meta
    assert LedgerMetadata.from_dict(meta.to_dict()) == meta
    assert meta.ensemble_for(25) == ("a:1", "d:1", "c:1")
    with pytest.raises(ValueError):
        LedgerMetadata.from_dict({**meta.to_dict(), "format": 2})
