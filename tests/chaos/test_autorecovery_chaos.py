"""Auto-recovery with real bookie processes and a real ZooKeeper.

- 4 bookies run as ``magnetar bookie`` (each with its auto-recovery daemon, the default),
  E=Qw=Qa=2, many ledgers: SIGKILL one bookie and wipe its disk -> every ledger is fully
  replicated again (metadata checked, every entry read from each replica and compared); the
  bookie restarted on its empty disk is refused by its cookie; then SIGKILL a second bookie
  -> every acknowledged entry is still readable.
- A replication worker (``magnetar autorecovery``) SIGKILLed mid-copy: no ledger is left
  half-swapped, two other workers finish, never holding one ledger at the same time.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys

from support.ledger_cluster import chroot_url, wait_registered
from support.recovery import (
    ledger_client,
    metadata_of,
    read_back,
    verify_every_replica,
    wait_unreferenced,
    write_ledgers,
)
from support.waiting import wait_for

from magnetar.broker.bookkeeper.autorecovery import (
    AutoRecoveryConfig,
    ReplicationWorker,
    UnderReplication,
    ledger_client_for,
)
from magnetar.broker.bookkeeper.autorecovery.auditor import mark_ledgers_of
from magnetar.zk import paths
from magnetar.zk.factory import open_metadata_store

FAST = ["--zk-timeout-ms", "4000"]
DAEMON = [*FAST, "--lost-bookie-recovery-delay-s", "0"]


async def test_lost_bookie_is_healed_then_a_second_loss_loses_nothing(
    zookeeper_server, bookie_factory
) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookies = bookie_factory.start_many(4, metadata=url, cli=True, extra_args=DAEMON)
    store = await open_metadata_store(url)
    client = ledger_client(store)
    try:
        await wait_registered(store, 4)
        written = await write_ledgers(client, n_ledgers=100, n_entries=100, size=256)
        by_id = {b.bookie_id: b for b in bookies}
        counts = dict.fromkeys(by_id, 0)
        for lid in written:
            for b in (await metadata_of(store, lid)).all_bookies:
                counts[b] += 1
        victim = by_id[max(counts, key=lambda b: counts[b])]
        hit = [
            lid
            for lid in written
            if victim.bookie_id in (await metadata_of(store, lid)).all_bookies
        ]
        assert hit
        victim.kill()
        shutil.rmtree(victim.data_dir)
        await wait_unreferenced(store, written, {victim.bookie_id}, timeout_s=120)
        for lid in written:
            meta = await metadata_of(store, lid)
            assert all(len(ens) == 2 and victim.bookie_id not in ens for _, ens in meta.ensembles)
        assert await verify_every_replica(client, written) == 2 * 100 * 100
        marks = UnderReplication(store)
        await wait_for(lambda: _no_marks(marks))

        # the bookie comes back on its wiped disk: its cookie refuses it
        victim.spawn()
        assert victim.wait_exit(60) == 2
        assert "cookie" in victim.log_text()

        # one more loss: every acknowledged entry is still readable
        second = next(b for b in bookies if b is not victim)
        second.kill()
        reader = ledger_client(await open_metadata_store(url))
        try:
            await read_back(reader, written)
        finally:
            await reader.close()
            await reader.store.close()
    finally:
        await client.close()
        await store.close()


async def _no_marks(marks: UnderReplication) -> bool:
    return await marks.marked() == []


async def test_worker_killed_mid_copy_leaves_no_half_swap_and_others_finish(
    zookeeper_server, bookie_factory
) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookies = bookie_factory.start_many(4, metadata=url, extra_args=FAST)
    store = await open_metadata_store(url)
    client = ledger_client(store)
    proc: subprocess.Popen[bytes] | None = None
    stores = []
    try:
        await wait_registered(store, 4)
        written = await write_ledgers(client, n_ledgers=12, n_entries=40, size=2048)
        before = {lid: (await metadata_of(store, lid)).ensembles for lid in written}
        victim = bookies[0]
        victim.kill()
        await wait_for(lambda: _unregistered(store, victim.bookie_id))
        marks = UnderReplication(store)
        marked = await mark_ledgers_of(client, marks, {victim.bookie_id}, "test")
        assert marked
        # a slow worker (a few KB/s): it holds a ledger's lock while copying
        proc = subprocess.Popen(  # noqa: ASYNC220 (returns at once)
            [
                sys.executable,
                "-m",
                "magnetar.broker.cli",
                "autorecovery",
                "--metadata",
                url,
                "--node-id",
                "doomed",
                "--zk-timeout-ms",
                "4000",
                "--replication-rate-by-bytes",
                "8000",
                "--rereplication-entry-batch-size",
                "2",
                "--log-level",
                "WARNING",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        await wait_for(lambda: _some_lock(store, marked), timeout_s=60)
        proc.kill()
        proc.wait(10)
        # nothing half-swapped: each ledger is untouched or fully repaired
        for lid in written:
            ensembles = (await metadata_of(store, lid)).ensembles
            assert ensembles == before[lid] or victim.bookie_id not in {
                b for _, e in ensembles for b in e
            }, (lid, before[lid], ensembles)
        # two workers (own sessions) finish once the dead worker's lock expires
        config = AutoRecoveryConfig(rereplication_entry_batch_size=5)
        workers = []
        for i in range(2):
            s = await open_metadata_store(url)
            stores.append(s)
            workers.append(
                ReplicationWorker(
                    ledger_client_for(s, _factory(), config), config, worker_id=f"w{i}"
                )
            )

        async def drain(worker: ReplicationWorker) -> None:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 90
            while await marks.marked():
                worker.retry_deferred()
                await worker.run_once()
                assert loop.time() < deadline, "workers did not finish"
                await asyncio.sleep(0.1)

        await asyncio.gather(*(drain(w) for w in workers))
        await wait_unreferenced(store, written, {victim.bookie_id}, timeout_s=10)
        assert await verify_every_replica(client, written) == 2 * 12 * 40
        # the locks kept the workers apart: no ledger repaired by both at overlapping times
        a, b = (list(w.stats.history) for w in workers)
        for lid_a, start_a, end_a in a:
            for lid_b, start_b, end_b in b:
                assert lid_a != lid_b or end_a <= start_b or end_b <= start_a
        assert sum(w.stats.ledgers_repaired for w in workers) >= 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for w in stores:
            await w.close()
        await client.close()
        await store.close()


def _factory():  # type: ignore[no-untyped-def]
    from support.ledger_cluster import bookie_client_factory

    return bookie_client_factory


async def _unregistered(store, bookie_id: str) -> bool:  # type: ignore[no-untyped-def]
    return await store.exists(paths.bookie_registration(bookie_id)) is None


async def _some_lock(store, ledger_ids) -> bool:  # type: ignore[no-untyped-def]
    return bool(await store.children(paths.REPLICATION_LOCKS))


async def test_periodic_check_refills_a_bookie_that_came_back_empty(
    zookeeper_server, bookie_factory
) -> None:  # type: ignore[no-untyped-def]
    """A bookie whose disk was wiped AND whose cookie was deleted by hand starts as a new,
    empty bookie under its old id: only the periodic check can notice; its entries are
    copied back onto it (no ensemble change)."""
    url = chroot_url(zookeeper_server.url)
    args = [
        *FAST,
        "--lost-bookie-recovery-delay-s",
        "3600",
        "--auditor-periodic-check-interval-s",
        "2",
    ]
    bookies = bookie_factory.start_many(3, metadata=url, cli=True, extra_args=args)
    store = await open_metadata_store(url)
    client = ledger_client(store)
    try:
        await wait_registered(store, 3)
        written = await write_ledgers(client, n_ledgers=12, n_entries=30)
        before = {lid: (await metadata_of(store, lid)).ensembles for lid in written}
        victim = bookies[0]
        victim.kill()
        shutil.rmtree(victim.data_dir)
        await store.delete(paths.bookie_cookie(victim.bookie_id))
        victim.start()

        async def refilled() -> bool:
            try:
                await verify_every_replica(client, written)
            except AssertionError:
                return False
            except Exception:  # the bookie answers NoLedger/NoEntry until refilled
                return False
            return True

        await wait_for(refilled, timeout_s=90)
        for lid in written:  # refilled in place: the ensembles did not change
            assert (await metadata_of(store, lid)).ensembles == before[lid]
    finally:
        await client.close()
        await store.close()
