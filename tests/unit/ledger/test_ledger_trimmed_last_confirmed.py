"""After every entry was trimmed, the last confirmed position is the current ledger's start.

A reader's ``has_message_available`` compares the broker's last message id with what it has
read: pointing at a trimmed entry made it say yes for a message nobody can read.
"""

from __future__ import annotations

import dataclasses
import random

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import (
    EARLIEST,
    LATEST,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
)
from magnetar.zk.memory import MemoryMetadataServer

CONFIG = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0,
    ensemble_size=2,
    write_quorum=2,
    ack_quorum=2,
    retention_time_ms=0,
    retention_size_bytes=0,
)


def factory(server: MemoryMetadataServer, bookies: FakeBookieCluster) -> ManagedLedgerFactory:
    config = dataclasses.replace(CONFIG)
    return ManagedLedgerFactory(server.connect(), bookies.factory, config, rng=random.Random(1))


async def test_trim_of_every_entry_moves_last_confirmed_to_the_current_ledger(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    name = "t/ns/persistent/trimmed"
    first = factory(meta_server, fake_bookies)
    ml = await first.open(name)
    for i in range(5):
        await ml.add(b"m%d" % i)
    await first.close()
    restarted = factory(meta_server, fake_bookies)  # no subscription, after a restart
    ml = await restarted.open(name)
    old = ml.get_last_confirmed()
    assert old.entry_id == 4
    assert await ml.trimming.trim() == [old.ledger_id]
    current = ml.ledgers.ids[-1]
    assert ml.get_last_confirmed() == Position(current, -1)
    reader = ml.new_non_durable_cursor(EARLIEST)
    assert not reader.has_more_entries()
    assert await reader.read_entries(10) == []
    tail = await ml.open_cursor("late", LATEST)
    assert tail.mark_delete_position == Position(current, -1)
    pos = await ml.add(b"next")
    assert pos == Position(current, 0)
    assert [e.payload for e in await reader.read_entries(10)] == [b"next"]
    assert tail.backlog().entries == 1
    ml.check_invariants()
    await restarted.close()
