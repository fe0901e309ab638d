"""SIGKILL a bookie under a streaming writer: writes continue after an ensemble change and
every acknowledged entry reads back byte-for-byte (3 real bookies, E=3 Qw=2 Qa=2), with the
adds over gRPC and over the bookies' fast add ports."""

from __future__ import annotations

import asyncio
import os

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
async def test_sigkill_bookie_mid_stream(zookeeper_server, bookie_factory, transport) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookies = [
        bookie_factory.start(metadata=url, extra_args=fast_add_args(transport)) for _ in range(3)
    ]
    factory = await open_factory(
        url,
        transport=transport,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        add_timeout_ms=1_500,
        min_ledger_rollover_time_ms=0,
        retention_time_ms=-1,
        retention_size_bytes=-1,
    )
    await wait_registered(factory.store, 3)
    ml = await factory.open("t/ns/persistent/chaos-bookie")
    acked: dict[object, bytes] = {}
    stop = asyncio.Event()

    async def writer() -> None:
        i = 0
        while not stop.is_set():
            batch = [os.urandom(64) + b"%d" % (i + k) for k in range(50)]
            futs = [ml.add_nowait(p) for p in batch]
            for p, pos in zip(batch, await asyncio.gather(*futs), strict=True):
                acked[pos] = p
            i += 50

    task = asyncio.ensure_future(writer())
    await wait_for(lambda: len(acked) >= 2_000)
    before = len(acked)
    victim = bookies[1]
    victim.kill()
    handle = ml.current
    assert handle is not None
    await wait_for(lambda: handle.statistics().ensemble_changes >= 1 or ml.current is not handle)
    await wait_for(lambda: len(acked) >= before + 3_000)
    stop.set()
    await task
    assert victim.bookie_id not in ml.current.metadata.last_ensemble  # type: ignore[union-attr]
    reader = ml.new_non_durable_cursor(EARLIEST)
    got = []
    while True:
        batch = await reader.read_entries(1_000)
        if not batch:
            break
        got.extend(batch)
    assert len(got) == len(acked)
    for e in got:
        assert acked[e.position] == e.payload
    await factory.close()
    await factory.store.close()
