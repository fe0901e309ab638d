"""SIGSTOP a bookie under a streaming writer (a hang, not a crash): the writer replaces it
after its add timeout and keeps going; nothing acknowledged is lost (3 real bookies,
E=2 Qw=2 Qa=2, so a spare exists), over both Add transports."""

from __future__ import annotations

import asyncio

import pytest
from support.ledger_cluster import (
    TRANSPORTS,
    chroot_url,
    fast_add_args,
    open_factory,
    wait_registered,
)
from support.waiting import wait_for

from magnetar.broker.ledger import EARLIEST


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_frozen_bookie_is_replaced(zookeeper_server, bookie_factory, transport) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookies = [
        bookie_factory.start(metadata=url, extra_args=fast_add_args(transport)) for _ in range(3)
    ]
    factory = await open_factory(
        url,
        transport=transport,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
        add_timeout_ms=500,
        retention_time_ms=-1,
        retention_size_bytes=-1,
    )
    await wait_registered(factory.store, 3)
    ml = await factory.open("t/ns/persistent/freeze")
    acked: dict[object, bytes] = {}
    stop = asyncio.Event()

    async def writer() -> None:
        i = 0
        while not stop.is_set():
            batch = [b"frozen-%d" % (i + k) for k in range(20)]
            positions = await asyncio.gather(*(ml.add_nowait(p) for p in batch))
            acked.update(zip(positions, batch, strict=True))
            i += 20

    task = asyncio.ensure_future(writer())
    await wait_for(lambda: len(acked) >= 500)
    handle = ml.current
    assert handle is not None
    by_id = {b.bookie_id: b for b in bookies}
    frozen = by_id[handle.metadata.last_ensemble[0]]
    frozen.pause()
    try:
        before = len(acked)
        # the hung bookie is replaced after the add timeout, then adds flow again
        await wait_for(lambda: len(acked) >= before + 1_000, 30)
        assert frozen.bookie_id not in handle.metadata.last_ensemble
    finally:
        stop.set()
        frozen.resume()
    await task
    reader = ml.new_non_durable_cursor(EARLIEST)
    got = []
    while batch := await reader.read_entries(1_000):
        got.extend(batch)
    assert {e.position: e.payload for e in got} == acked
    await factory.close()
    await factory.store.close()
