"""``BookieClient.add_batch`` against the gRPC service over an in-memory storage.

One future per batch, batches of one iteration share a message, acks in call order, and a
batch holding a refused entry fails with the refusal that matters (Fenced) while the other
batches of the same message succeed.
"""

from __future__ import annotations

import asyncio

import crc32c
import pytest

from magnetar.bookie.api import AddRequest
from magnetar.bookie.errors import BookieUnavailable, Fenced

KEY = b"k" * 20


def entries(ledger: int, first: int, count: int, *, lac: int = -1) -> list[AddRequest]:
    out = []
    for e in range(first, first + count):
        payload = b"p%d-%d" % (ledger, e)
        out.append(AddRequest(ledger, e, lac, crc32c.crc32c(payload), payload, KEY))
    return out


async def test_batches_share_a_message_and_resolve_in_order(served) -> None:
    _, _, client = served
    order: list[int] = []
    futs = []
    for i in range(10):
        f = client.add_batch(7, KEY, entries(7, i * 50, 50, lac=i * 50 - 1))
        f.add_done_callback(lambda _f, i=i: order.append(i))
        futs.append(f)
    assert await asyncio.gather(*futs) == [None] * 10
    assert order == list(range(10))
    stats = client.statistics()
    assert stats.batches_sent == 1 and stats.entries_sent == 500 and stats.acks_received == 500
    got = await client.read_range(7, 0, 499)
    assert [e.payload for e in got] == [b"p7-%d" % e for e in range(500)]
    assert await client.read_lac(7) == 449  # the lac the last batch carried
    assert await client.add_batch(7, KEY, []) is None


async def test_a_refused_entry_fails_only_its_batch(served) -> None:
    _, _, client = served
    await client.add_batch(8, KEY, entries(8, 0, 3))
    await client.fence(9, KEY)
    ok_before = client.add_batch(8, KEY, entries(8, 3, 5))
    fenced = client.add_batch(9, KEY, entries(9, 0, 4))
    ok_after = client.add_batch(8, KEY, entries(8, 8, 5))
    recovery = client.add_batch(9, KEY, entries(9, 0, 2), recovery=True)
    results = await asyncio.gather(ok_before, fenced, ok_after, recovery, return_exceptions=True)
    assert results[0] is None and results[2] is None and results[3] is None
    assert isinstance(results[1], Fenced)
    assert [e.entry_id for e in await client.read_range(8, 0, 12)] == list(range(13))
    assert [e.entry_id for e in await client.read_range(9, 0, 1)] == [0, 1]


async def test_closing_the_client_fails_queued_batches(served) -> None:
    _, _, client = served
    fut = client.add_batch(10, KEY, entries(10, 0, 3))
    await client.close()
    with pytest.raises(BookieUnavailable):
        await fut
