"""Seeded random faults under a streaming writer (fake bookies): whatever happens, every
acknowledged entry reads back byte-for-byte, completions arrive in entry order, and a
recovering reader closes the ledger at or after the last acknowledged entry."""

from __future__ import annotations

import asyncio
import random

import pytest
from support.autojump import AutojumpClock
from support.ledger_fakes import make_client

from magnetar.bookie.errors import BookieUnavailable
from magnetar.broker.bookkeeper.errors import LedgerError
from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.zk.memory import MemoryMetadataServer


@pytest.mark.parametrize("seed", [*range(6), 133])
async def test_random_bookie_faults_never_lose_acked_entries(seed: int) -> None:
    async with AutojumpClock() as clock:
        await _random_faults(seed, clock)


async def _random_faults(seed: int, clock: AutojumpClock) -> None:
    rng = random.Random(seed)
    server = MemoryMetadataServer()
    bookies = FakeBookieCluster(server, count=5)
    client = make_client(
        server,
        bookies,
        clock=clock,
        ensemble_size=3,
        write_quorum=rng.choice([2, 3]),
        ack_quorum=2,
        add_timeout_ms=60,
        ensemble_change_timeout_ms=2_000,
        quarantine_ms=200,
    )
    w = await client.create_ledger()
    acked: dict[int, bytes] = {}
    order: list[int] = []
    names = list(bookies.bookies)

    def on_done(payload: bytes, fut: asyncio.Future[int]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            acked[fut.result()] = payload
            order.append(fut.result())

    futures = []
    for step in range(400):
        payload = b"%d-%d" % (seed, step)
        try:
            fut = w.add_nowait(payload)
        except LedgerError:
            break
        fut.add_done_callback(lambda f, p=payload: on_done(p, f))
        futures.append(fut)
        if step % 25 == 24:
            victim = bookies[rng.choice(names)]
            fault = rng.choice(["crash", "hang", "fail", "heal"])
            down = sum(1 for b in bookies.bookies.values() if not b.up or b.hung)
            if fault == "heal" or down >= 2:
                for b in bookies.bookies.values():
                    b.resume()
                    b.fail_adds(None)
                    if not b.up:
                        bookies.restart(b.bookie_id)
            elif fault == "crash":
                bookies.crash(victim.bookie_id, keep_registration=rng.random() < 0.5)
            elif fault == "hang":
                victim.hang()
            else:
                victim.fail_adds(BookieUnavailable("injected"))
        await clock.sleep(0.002)  # the writer's pace, in virtual time: timeouts fire mid-stream
    for b in bookies.bookies.values():
        b.resume()
        b.fail_adds(None)
        if not b.up:
            bookies.restart(b.bookie_id)
    await asyncio.wait(futures, timeout=10)
    assert order == sorted(order)  # completions in entry order
    assert sorted(acked) == list(range(len(acked)))  # dense: no gap before an ack
    assert len(acked) > 0
    w.check_invariants()
    reader = await make_client(server, bookies).open_ledger(w.ledger_id, recovery=True)
    assert reader.last_add_confirmed >= max(acked)
    got = await reader.read(0, max(acked))
    assert [g.payload for g in got] == [acked[i] for i in range(max(acked) + 1)]
