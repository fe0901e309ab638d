"""A graceful close never loses an acknowledgement whose cursor write is in flight.

The fake bookies hold the cursor ledger's add while the factory (managed ledger, cursors,
then the bookie clients) closes; closing a client fails its unanswered adds, as the real
``BookieClient`` does. The acknowledgement must come back after a reopen.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from support.waiting import wait_for

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.zk.memory import MemoryMetadataServer

CONFIG = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0, ensemble_size=2, write_quorum=2, ack_quorum=2
)


def new_factory(server: MemoryMetadataServer, bookies: FakeBookieCluster) -> ManagedLedgerFactory:
    return ManagedLedgerFactory(server.connect(), bookies.factory, CONFIG, rng=random.Random(3))


@pytest.mark.parametrize("write", ["snapshot", "delta"])
async def test_close_waits_for_the_cursor_write_in_flight(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster, write: str
) -> None:
    name = "t/ns/persistent/close-" + write
    f1 = new_factory(meta_server, fake_bookies)
    ml = await f1.open(name)
    cursor = await ml.open_cursor("sub", EARLIEST)
    positions = [await ml.add(b"m%d" % i) for i in range(6)]
    if write == "delta":
        await cursor.delete([positions[0]])  # the cursor ledger exists: next write is a delta
    bookies = list(fake_bookies.bookies.values())
    held_before = sum(len(b._held) for b in bookies)
    for b in bookies:
        b.hang()
    ack = asyncio.ensure_future(cursor.delete([positions[2], positions[3]]))
    # the cursor write is in flight: its add reached both bookies of the write set
    await wait_for(lambda: sum(len(b._held) for b in bookies) >= held_before + 2)
    closing = asyncio.ensure_future(f1.close())
    # without waiting, close() finishes here and the bookie clients fail the held add
    done, _ = await asyncio.wait({closing}, timeout=0.3)
    assert not done, "close() returned while a cursor write was in flight"
    for b in bookies:
        b.resume()
    await asyncio.wait_for(closing, 5)
    await asyncio.wait_for(ack, 5)  # the acknowledgement succeeded
    f2 = new_factory(meta_server, fake_bookies)
    ml2 = await f2.open(name)
    c2 = ml2.cursors["sub"]
    assert c2.is_acknowledged(positions[2]) and c2.is_acknowledged(positions[3])
    assert not c2.is_acknowledged(positions[1])
    assert c2.backlog().entries == 6 - 2 - (write == "delta")
    await f2.close()


async def test_acks_made_while_closing_are_flushed(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    f1 = new_factory(meta_server, fake_bookies)
    ml = await f1.open("t/ns/persistent/close-more")
    cursor = await ml.open_cursor("sub", EARLIEST)
    positions = [await ml.add(b"m%d" % i) for i in range(4)]
    first = asyncio.ensure_future(cursor.delete([positions[0]]))
    closing = asyncio.ensure_future(f1.close())
    await asyncio.sleep(0)  # let close() start (ordering only, not timing)
    second = asyncio.ensure_future(cursor.delete([positions[1]]))
    await asyncio.wait_for(asyncio.gather(first, second, closing), 5)
    f2 = new_factory(meta_server, fake_bookies)
    c2 = (await f2.open("t/ns/persistent/close-more")).cursors["sub"]
    assert c2.mark_delete_position == positions[1]
    await f2.close()
