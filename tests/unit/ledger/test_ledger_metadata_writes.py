"""A managed ledger's metadata writes survive what happens around them.

- A caller cancelled while its write is in flight (a connection closed during a topic-epoch
  store): the write still lands and the owner learns its new version, so its next write does
  not lose the CAS and fence a live owner ("metadata changed by another owner").
- A list whose last ledger has no metadata (an opener stopped between deleting an empty last
  ledger and rewriting the list): the next opener takes that ledger as empty instead of
  failing every open of the topic for good.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.broker.ledger import EARLIEST, ManagedLedgerConfig, ManagedLedgerFactory
from magnetar.zk.memory import MemoryMetadataServer

FAST = ManagedLedgerConfig(
    min_ledger_rollover_time_ms=0, ensemble_size=2, write_quorum=2, ack_quorum=2
)


def factory(
    server: MemoryMetadataServer, bookies: FakeBookieCluster, seed: int
) -> ManagedLedgerFactory:
    return ManagedLedgerFactory(
        server.connect(), bookies.factory, dataclasses.replace(FAST), rng=random.Random(seed)
    )


async def test_a_caller_cancelled_mid_write_does_not_fence_its_owner(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    ml = await factory(meta_server, fake_bookies, 1).open("t/ns/persistent/cancelled")
    store: Any = ml.store
    real_put = store.put
    landed = asyncio.Event()
    answer = asyncio.Event()

    async def put_then_hold(*args: Any, **kwargs: Any) -> Any:
        result = await real_put(*args, **kwargs)  # the write lands...
        landed.set()
        await answer.wait()  # ...but its answer is late
        return result

    store.put = put_then_hold
    caller = asyncio.ensure_future(ml.set_property("pulsar.topic.epoch", "0"))
    await landed.wait()
    caller.cancel()
    answer.set()
    await asyncio.gather(caller, return_exceptions=True)
    store.put = real_put
    await ml.set_property("pulsar.topic.epoch", "1")  # lost its CAS (fenced) before the fix
    assert ml.properties["pulsar.topic.epoch"] == "1"
    assert (await ml.add(b"still served")).entry_id == 0


async def test_a_listed_last_ledger_without_metadata_is_taken_as_empty(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    name = "t/ns/persistent/half-opened"
    first = await factory(meta_server, fake_bookies, 1).open(name)
    kept = await first.add(b"kept")
    second_factory = factory(meta_server, fake_bookies, 2)
    second = await second_factory.open(name)  # lists a new, empty ledger, then stops
    empty = second.ledger_sizes()[-1][0]
    await second_factory.ledger_client.delete_ledger(empty)  # gone while still listed
    third = await factory(meta_server, fake_bookies, 3).open(name)  # LedgerNotFound before
    cursor = await third.open_cursor("sub", EARLIEST)
    assert [e.payload for e in await cursor.read_entries(10)] == [b"kept"]
    assert empty != kept.ledger_id
    assert (await third.add(b"new")).ledger_id > empty
