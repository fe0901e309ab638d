"""The topic-storage adapter over the managed ledger: replay reads coalesce runs."""

from __future__ import annotations

import random

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.broker.ledger.position import Position
from magnetar.broker.storage.managed_adapter import ManagedLedgerStorage
from magnetar.zk import MemoryMetadataServer

CONFIG = ManagedLedgerConfig(ensemble_size=2, write_quorum=2, ack_quorum=2)


async def test_read_positions_reads_each_run_once_and_skips_acked() -> None:
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=2)
    factory = ManagedLedgerFactory(server.connect(), bookies.factory, CONFIG, rng=random.Random(1))
    storage = ManagedLedgerStorage(factory)
    ledger = await storage.open("public%2Fdefault%2Fpersistent%2Freads")
    positions = await ledger.add_entries([f"e{i}".encode() for i in range(10)])
    cursor = await ledger.open_cursor("sub", initial_earliest=True)
    await cursor.ack([positions[3]])

    calls: list[tuple[int, int, int]] = []
    real_read_range = ledger.ml.read_range

    async def counting(ledger_id: int, first: int, last: int):  # type: ignore[no-untyped-def]
        calls.append((ledger_id, first, last))
        return await real_read_range(ledger_id, first, last)

    ledger.ml.read_range = counting  # type: ignore[method-assign]
    wanted = [positions[i] for i in (1, 2, 3, 4, 7, 8, 9)]
    got = await cursor.read_positions(wanted)

    assert [e.data[-2:] for e in got] == [b"e1", b"e2", b"e4", b"e7", b"e8", b"e9"]
    assert [e.position for e in got] == [positions[i] for i in (1, 2, 4, 7, 8, 9)]
    lid = positions[0].ledger_id
    assert calls == [(lid, 1, 2), (lid, 4, 4), (lid, 7, 9)]
    assert all(isinstance(p, Position) for p in positions)
    await storage.close()
