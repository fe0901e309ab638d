"""An acknowledgement's return means durable, even when it changes nothing new.

The broker answers ACK_RESPONSE (a client's ack receipt) when ``ManagedCursor.delete`` /
``mark_delete`` (or the topic cursor's ``ack_batch_index``) return. An ack repeated while
the first one's cursor write is in flight changes no state: it must still wait for that
write, or a receipt would precede durability (and a broker killed then would redeliver a
message whose ack was confirmed).
"""

from __future__ import annotations

import asyncio
import random

import pytest
from support.waiting import wait_for

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.broker.storage.managed_adapter import ManagedCursorAdapter, ManagedLedgerAdapter
from magnetar.zk.memory import MemoryMetadataServer

CONFIG = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0, ensemble_size=2, write_quorum=2, ack_quorum=2
)


def new_factory(server: MemoryMetadataServer, bookies: FakeBookieCluster) -> ManagedLedgerFactory:
    return ManagedLedgerFactory(server.connect(), bookies.factory, CONFIG, rng=random.Random(5))


@pytest.mark.parametrize("how", ["individual", "cumulative", "batch-index"])
async def test_a_repeated_ack_returns_only_when_the_first_is_durable(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, how: str
) -> None:
    f1 = new_factory(meta_server, fake_bookies)
    ml = await f1.open("t/ns/persistent/receipt-" + how)
    cursor = await ml.open_cursor("sub", EARLIEST)
    positions = [await ml.add(b"m%d" % i) for i in range(4)]
    await cursor.delete([positions[3]])  # the cursor ledger exists
    bookies = list(fake_bookies.bookies.values())
    held_before = sum(len(b._held) for b in bookies)
    for b in bookies:
        b.hang()

    topic_cursor = ManagedCursorAdapter(ManagedLedgerAdapter(ml), cursor)

    def ack() -> asyncio.Future[object]:
        if how == "individual":
            return asyncio.ensure_future(cursor.delete([positions[1]]))
        if how == "batch-index":  # every message of a 2-message batch: the whole entry
            return asyncio.ensure_future(topic_cursor.ack_batch_index(positions[1], [0], 2))
        return asyncio.ensure_future(cursor.mark_delete(positions[1]))

    first = ack()
    await wait_for(lambda: sum(len(b._held) for b in bookies) >= held_before + 2)
    second = ack()  # the same ack again: nothing new to write
    done, _ = await asyncio.wait({second}, timeout=0.3)
    assert not done, "a repeated ack returned while the write holding it was in flight"
    for b in bookies:
        b.resume()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    await f1.close()
    f2 = new_factory(meta_server, fake_bookies)
    c2 = (await f2.open("t/ns/persistent/receipt-" + how)).cursors["sub"]
    assert c2.is_acknowledged(positions[1])
    await f2.close()
