"""Decommissioning and rack-aware placement with real bookie processes and ZooKeeper.

- ``magnetar bookie decommission <id>`` of a live bookie while a managed ledger is written
  (default rollover: the open ledger's writer moves off the draining bookie): no write
  fails, progress is printed, afterwards no ledger references the bookie, nothing is marked
  under-replicated, its cookie and registration are gone (and it does not register again),
  and every entry reads back.
- Racks: bookies announce ``--bookie-rack``; with ``enforce_min_num_racks_per_write_quorum``
  no write quorum sits in one rack, also after a lost bookie is replaced by a worker.
"""

from __future__ import annotations

import asyncio
import os
import sys

from support.ledger_cluster import chroot_url, open_factory, wait_registered
from support.recovery import (
    ledger_client,
    metadata_of,
    verify_every_replica,
    wait_unregistered,
    write_ledgers,
)
from support.waiting import wait_for

from magnetar.broker.bookkeeper.autorecovery import (
    AutoRecoveryConfig,
    ReplicationWorker,
    UnderReplication,
    ledger_client_for,
    recover_bookie,
)
from magnetar.broker.bookkeeper.autorecovery.auditor import all_ledgers
from magnetar.broker.bookkeeper.placement import write_quorum_racks
from magnetar.broker.ledger import EARLIEST
from magnetar.zk import paths
from magnetar.zk.factory import open_metadata_store

FAST = ["--zk-timeout-ms", "4000"]


async def test_decommission_live_bookie_under_write_load(zookeeper_server, bookie_factory) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookies = bookie_factory.start_many(4, metadata=url, extra_args=FAST)
    factory = await open_factory(url, retention_time_ms=-1, retention_size_bytes=-1)
    # default rollover (50,000 entries, 10 minutes at least): the open ledger is not rolled
    # during the test, its writer moves off the draining bookie by an ensemble change
    store = factory.store
    await wait_registered(store, 4)
    ml = await factory.open("t/ns/persistent/decommission")
    acked: dict[object, bytes] = {}
    failures: list[BaseException] = []
    stop = asyncio.Event()

    async def writer() -> None:
        i = 0
        while not stop.is_set():
            batch = [os.urandom(200) + b"%d" % (i + k) for k in range(20)]
            results = await asyncio.gather(
                *(ml.add_nowait(p) for p in batch), return_exceptions=True
            )
            for p, pos in zip(batch, results, strict=True):
                if isinstance(pos, BaseException):
                    failures.append(pos)
                else:
                    acked[pos] = p
            i += 20

    task = asyncio.ensure_future(writer())
    try:
        await wait_for(lambda: len(acked) >= 600, 60)
        current = ml.current
        assert current is not None
        victim_id = current.metadata.last_ensemble[0]  # in the open ledger's ensemble too
        victim = next(b for b in bookies if b.bookie_id == victim_id)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "magnetar.broker.cli",
            "bookie",
            "decommission",
            victim_id,
            "--metadata",
            url,
            "--zk-timeout-ms",
            "4000",
            "--timeout-s",
            "120",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 0, (out.decode(), err.decode())
        lines = out.decode().splitlines()
        assert any("ledgers (" in line for line in lines), lines
        assert lines[-1].startswith(f"{victim_id} decommissioned"), lines
        before = len(acked)
        await wait_for(lambda: len(acked) >= before + 300, 60)  # writes go on without it
    finally:
        stop.set()
        await task
    assert not failures, failures[:3]
    assert await store.exists(paths.bookie_cookie(victim_id)) is None
    assert await store.exists(paths.draining_bookie(victim_id)) is None

    async def unregistered() -> bool:
        return await store.exists(paths.bookie_registration(victim_id)) is None and (
            "decommissioned, not registering" in victim.log_text()
        )

    await wait_for(unregistered, 30, f"{victim_id} decommissioned: {victim.log_tail()}")
    client = ledger_client_for(store, factory_client_factory(), AutoRecoveryConfig())
    referencing = [m.ledger_id async for m in all_ledgers(client) if victim_id in m.all_bookies]
    assert referencing == []
    assert await UnderReplication(store).marked() == []
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
    await client.close()
    await factory.close()
    await store.close()


def factory_client_factory():  # type: ignore[no-untyped-def]
    from support.ledger_cluster import bookie_client_factory

    return bookie_client_factory


async def test_racks_keep_every_write_quorum_in_two_racks(zookeeper_server, bookie_factory) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    racks = ["/dc/r1", "/dc/r1", "/dc/r2", "/dc/r2"]
    bookies = [
        bookie_factory.create(metadata=url, extra_args=[*FAST, "--bookie-rack", rack])
        for rack in racks
    ]
    for b in bookies:
        b.spawn()
    for b in bookies:
        b.wait_healthy()
    rack_of = {b.bookie_id: rack for b, rack in zip(bookies, racks, strict=True)}
    store = await open_metadata_store(url)
    client = ledger_client(store, enforce_min_num_racks_per_write_quorum=True)
    try:
        await wait_registered(store, 4)
        written = await write_ledgers(client, n_ledgers=16, n_entries=10)
        for lid in written:
            ens = (await metadata_of(store, lid)).last_ensemble
            assert write_quorum_racks(ens, rack_of, 2) == 2, ens
        # lose a bookie of rack r1: its replacement must be the other r1 bookie
        victim = bookies[0]
        victim.kill()
        await wait_unregistered(store, victim.bookie_id)
        config = AutoRecoveryConfig(enforce_min_num_racks_per_write_quorum=True)
        worker = ReplicationWorker(
            ledger_client_for(store, factory_client_factory(), config), config
        )
        result = await recover_bookie(worker, victim.bookie_id, timeout_s=90)
        assert result.done
        for lid in written:
            meta = await metadata_of(store, lid)
            for _, ens in meta.ensembles:
                assert victim.bookie_id not in ens
                assert write_quorum_racks(ens, rack_of, 2) == 2, ens
        await verify_every_replica(client, written)
        await worker.ledgers.close()
    finally:
        await client.close()
        await store.close()
