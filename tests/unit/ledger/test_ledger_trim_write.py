"""A trim's list write: what a failure or a cancellation leaves behind.

A trim removes ledgers from the in-memory list and stores it. When that write fails without
fencing (the store lost its connection), the ledgers go back into the list: a later write of
the list (a rollover's) must not drop them with no log and no metadata deletion. When the
trim's caller is cancelled after the write was sent, the deletion still completes: the list
stored without a ledger always ends with that ledger's metadata deleted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

import pytest

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import ManagedLedger, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.zk import paths
from magnetar.zk.errors import ConnectionLoss
from magnetar.zk.memory import MemoryMetadataServer

CONFIG = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0,
    ensemble_size=2,
    write_quorum=2,
    ack_quorum=2,
    retention_time_ms=0,
    retention_size_bytes=0,
)


async def _with_a_trimmable_ledger(
    server: MemoryMetadataServer, bookies: FakeBookieCluster, name: str
) -> tuple[ManagedLedgerFactory, ManagedLedger, int]:
    first = ManagedLedgerFactory(
        server.connect(), bookies.factory, dataclasses.replace(CONFIG), rng=random.Random(1)
    )
    ml = await first.open(name)
    await ml.add(b"m")
    await first.close()
    again = ManagedLedgerFactory(
        server.connect(), bookies.factory, dataclasses.replace(CONFIG), rng=random.Random(2)
    )
    ml = await again.open(name)  # no cursor: the first ledger is trimmable
    return again, ml, ml.ledgers.ids[0]


async def test_a_failed_list_write_keeps_the_ledgers_listed(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, monkeypatch: Any
) -> None:
    factory, ml, old = await _with_a_trimmable_ledger(meta_server, fake_bookies, "t/ns/p/fail")
    real_put = ml.store.put

    async def lost(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionLoss("the store went away")

    monkeypatch.setattr(ml.store, "put", lost)
    with pytest.raises(ConnectionLoss):
        await ml.trimming.trim()
    assert old in ml.ledgers.ids
    monkeypatch.setattr(ml.store, "put", real_put)
    await ml.write_info()  # a later write of the list (as a rollover's) keeps it
    assert await ml.store.exists(paths.ledger_metadata(old)) is not None
    assert await ml.trimming.trim() == [old]
    assert await ml.store.exists(paths.ledger_metadata(old)) is None
    await factory.close()


async def test_a_cancelled_trim_still_deletes_what_its_stored_list_dropped(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, monkeypatch: Any
) -> None:
    factory, ml, old = await _with_a_trimmable_ledger(meta_server, fake_bookies, "t/ns/p/cxl")
    real_put = ml.store.put
    sent = asyncio.Event()
    release = asyncio.Event()

    async def slow(*args: Any, **kwargs: Any) -> Any:
        sent.set()
        await release.wait()
        return await real_put(*args, **kwargs)

    monkeypatch.setattr(ml.store, "put", slow)
    trim = asyncio.ensure_future(ml.trimming.trim())
    await sent.wait()
    trim.cancel()
    with pytest.raises(asyncio.CancelledError):
        await trim
    release.set()
    for _ in range(200):  # the shielded deletion finishes on its own
        if await ml.store.exists(paths.ledger_metadata(old)) is None:
            break
        await asyncio.sleep(0)
    assert await ml.store.exists(paths.ledger_metadata(old)) is None
    assert old not in ml.ledgers.ids
    await factory.close()
