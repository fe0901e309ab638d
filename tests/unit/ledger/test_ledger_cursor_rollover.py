"""A cursor's own ledger rolls over (issue 32): after ``cursor_max_entries_per_ledger``
entries or ``cursor_rollover_time_ms`` of age (Pulsar's
``managedLedgerCursorMaxEntriesPerLedger`` / ``managedLedgerCursorRolloverTimeInSeconds``),
at the cursor's next write: a new ledger starts with a snapshot, the znode names it, the old
one is deleted, and a recovery gets exactly the acknowledged state back. On virtual time
(``AutojumpClock``): four hours pass without the test waiting for them."""

from __future__ import annotations

import random

from support.autojump import AutojumpClock

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.config import BrokerConfig
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.broker.runtime import managed_ledger_config
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer

HOUR_S = 3600.0


def _config(**cursor: int) -> ManagedLedgerConfig:
    return ManagedLedgerConfig(retention_time_ms=-1, retention_size_bytes=-1, **cursor)


async def _recovered_acks(server: MemoryMetadataServer, bookies: FakeBookieCluster) -> list:  # type: ignore[type-arg]
    other = ManagedLedgerFactory(server.connect(), bookies.factory, _config())
    ml = await other.open("t/ns/persistent/roll")
    cursor = ml.cursors["sub"]
    acked = (cursor.mark_delete_position, cursor.individually_deleted_ranges())
    await other.close()
    return list(acked)


async def test_a_cursor_ledger_rolls_over_at_the_first_write_after_its_rollover_time() -> None:
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=2)
    async with AutojumpClock() as clock:
        config = _config(cursor_rollover_time_ms=int(4 * HOUR_S * 1000))
        f = ManagedLedgerFactory(
            server.connect(), bookies.factory, config, clock=clock, rng=random.Random(1)
        )
        ml = await f.open("t/ns/persistent/roll")
        log = [await ml.add(b"e%d" % i) for i in range(40)]
        cursor = await ml.open_cursor("sub", EARLIEST)
        await cursor.delete([log[10]])  # the first write: a snapshot in a new ledger
        first = cursor.statistics()
        assert first.snapshots == 1 and first.cursor_ledger_id >= 0

        await clock.sleep(3 * HOUR_S)
        await cursor.delete([log[12]])  # younger than 4 hours: a delta in the same ledger
        assert cursor.statistics().cursor_ledger_id == first.cursor_ledger_id
        assert cursor.statistics().snapshots == 1

        await clock.sleep(1 * HOUR_S)
        await cursor.delete([log[14]])  # 4 hours old: this write starts the next ledger
        rolled = cursor.statistics()
        assert rolled.cursor_ledger_id > first.cursor_ledger_id
        assert rolled.snapshots == 2
        assert await ml.store.get(paths.ledger_metadata(first.cursor_ledger_id)) is None

        await clock.sleep(10 * HOUR_S)  # an idle cursor's ledger does not grow: no rollover
        assert cursor.statistics().cursor_ledger_id == rolled.cursor_ledger_id

        await cursor.mark_delete(log[5])
        expected = [cursor.mark_delete_position, cursor.individually_deleted_ranges()]
        assert cursor.statistics().snapshots == 3  # older than 4 hours again at this write
        await f.close()
        assert await _recovered_acks(server, bookies) == expected


async def test_a_cursor_ledger_rolls_over_after_its_maximum_entries() -> None:
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=2)
    f = ManagedLedgerFactory(
        server.connect(), bookies.factory, _config(cursor_max_entries_per_ledger=4)
    )
    ml = await f.open("t/ns/persistent/roll")
    log = [await ml.add(b"e%d" % i) for i in range(40)]
    cursor = await ml.open_cursor("sub", EARLIEST)
    ledgers: list[int] = []
    for i in range(1, 13):
        await cursor.delete([log[2 * i]])
        ledgers.append(cursor.statistics().cursor_ledger_id)
    # each ledger: one snapshot entry then three deltas; the fifth write starts the next
    assert [len([x for x in ledgers if x == lid]) for lid in dict.fromkeys(ledgers)] == [4, 4, 4]
    assert cursor.statistics().snapshots == 3
    for gone in list(dict.fromkeys(ledgers))[:-1]:
        assert await ml.store.get(paths.ledger_metadata(gone)) is None
    expected = [cursor.mark_delete_position, cursor.individually_deleted_ranges()]
    assert expected[1] == [(log[2 * i], log[2 * i]) for i in range(1, 13)]
    await f.close()
    assert await _recovered_acks(server, bookies) == expected


def test_pulsar_names_set_the_cursor_rollover_limits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "managedLedgerCursorMaxEntriesPerLedger=1234\nmanagedLedgerCursorRolloverTimeInSeconds=600\n"
    )
    config = managed_ledger_config(BrokerConfig.load(conf))
    assert config.cursor_max_entries_per_ledger == 1234
    assert config.cursor_rollover_time_ms == 600_000
    defaults = managed_ledger_config(BrokerConfig())
    assert defaults.cursor_max_entries_per_ledger == 50_000  # Pulsar's defaults
    assert defaults.cursor_rollover_time_ms == 14_400_000
