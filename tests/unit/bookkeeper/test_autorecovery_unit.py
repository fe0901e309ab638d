"""Auto-recovery over fake bookies and an in-memory metadata store (fast tier): rack-aware
placement, the replication worker (copy, verify, one CAS, locks), the auditor's marks."""

from __future__ import annotations

import asyncio
import itertools
import random

import pytest
from support.autojump import AutojumpClock
from support.ledger_fakes import make_client
from support.waiting import wait_for

from magnetar.broker.bookkeeper.autorecovery import (
    Auditor,
    AutoRecoveryConfig,
    ReplicationWorker,
    UnderReplication,
)
from magnetar.broker.bookkeeper.errors import NotEnoughBookies
from magnetar.broker.bookkeeper.metadata import write_set
from magnetar.broker.bookkeeper.placement import DEFAULT_RACK, RackPolicy, write_quorum_racks
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.zk import paths
from magnetar.zk.memory import MemoryMetadataServer

# -- placement (pure) ----------------------------------------------------------------------

RACKS = {f"b{i}": f"/rack-{i % 3}" for i in range(6)}  # 3 racks, 2 bookies each


@pytest.mark.parametrize(("size", "qw"), [(2, 2), (3, 2), (3, 3), (4, 2), (5, 3)])
def test_rack_aware_ensembles_never_put_a_write_quorum_in_one_rack(size: int, qw: int) -> None:
    policy = RackPolicy(
        min_num_racks_per_write_quorum=2, enforce_min_num_racks_per_write_quorum=True
    )
    rng = random.Random(1)
    for _ in range(200):
        ensemble = policy.choose(sorted(RACKS), RACKS, size, qw, rng)
        assert len(set(ensemble)) == size
        assert write_quorum_racks(ensemble, RACKS, qw) >= 2, ensemble


def test_enforced_rack_minimum_refuses_when_impossible() -> None:
    one_rack = dict.fromkeys(("b0", "b1", "b2"), "/rack-0") | {"b3": "/rack-1"}
    policy = RackPolicy(2, enforce_min_num_racks_per_write_quorum=True)
    with pytest.raises(NotEnoughBookies):
        policy.choose(["b0", "b1", "b2"], one_rack, 2, 2, random.Random(1))
    # not enforced: best effort, still an ensemble
    loose = RackPolicy(2, enforce_min_num_racks_per_write_quorum=False)
    assert len(loose.choose(["b0", "b1", "b2"], one_rack, 2, 2, random.Random(1))) == 2


def test_no_racks_configured_falls_back_to_random_placement() -> None:
    bookies = [f"b{i}" for i in range(5)]
    policy = RackPolicy(2, enforce_min_num_racks_per_write_quorum=True)
    seen = {policy.choose(bookies, {}, 2, 2, random.Random(seed)) for seed in range(30)}
    assert len(seen) > 3  # random among all, and never refused for lack of racks
    assert all(write_quorum_racks(e, {}, 2) == 1 for e in seen)
    assert DEFAULT_RACK == "/default-rack"


def test_replacement_keeps_write_quorums_across_racks() -> None:
    policy = RackPolicy(2, enforce_min_num_racks_per_write_quorum=True)
    for seed in range(50):
        # b0 (rack-0) and b1 (rack-1) ; replacing b1 must not pick b3 (rack-0)
        new = policy.replace(
            ("b0", "b1"), {"b1"}, ["b3", "b2", "b5"], RACKS, 2, rng=random.Random(seed)
        )
        assert new[0] == "b0" and new[1] != "b1"
        assert write_quorum_racks(new, RACKS, 2) == 2, new


# -- worker and auditor over fakes ---------------------------------------------------------


async def _write_ledgers(client, n_ledgers: int, n_entries: int, *, close: bool = True):  # type: ignore[no-untyped-def]
    handles = []
    for _ in range(n_ledgers):
        w = await client.create_ledger(ensemble_size=2, write_quorum=2, ack_quorum=2)
        for i in range(n_entries):
            await w.add(b"payload-%d-%d" % (w.ledger_id, i))
        if close:
            await w.close()
        handles.append(w)
    return handles


def _assert_fully_replicated(meta, bookies: FakeBookieCluster, dead: set[str]) -> None:  # type: ignore[no-untyped-def]
    assert not (meta.all_bookies & dead), meta.ensembles
    for index, (first, ensemble) in enumerate(meta.ensembles):
        last = meta.fragment_last_entry(index)
        for e in range(first, (last if last is not None else first - 1) + 1):
            for b in write_set(ensemble, meta.write_quorum, e):
                assert e in bookies[b].entries.get(meta.ledger_id, {}), (meta.ledger_id, e, b)


async def test_worker_copies_then_swaps_and_unmarks(meta_server: MemoryMetadataServer) -> None:
    bookies = FakeBookieCluster(meta_server, count=4)
    client = make_client(meta_server, bookies)
    handles = await _write_ledgers(client, 6, 25)
    victim = next(iter(handles[0].metadata.last_ensemble))
    bookies.crash(victim)
    marks = UnderReplication(client.store)
    for h in handles:
        await marks.mark(h.ledger_id, {victim}, "test", 0)
    worker = ReplicationWorker(
        make_client(meta_server, bookies), AutoRecoveryConfig(rereplication_entry_batch_size=4)
    )
    assert await worker.run_once() == 6
    assert await marks.marked() == []
    for h in handles:
        meta, _ = await client.read_metadata(h.ledger_id)
        _assert_fully_replicated(meta, bookies, {victim})
        # bytes equal to what was written (read back from each replica)
        for e in range(25):
            for b in meta.ensemble_for(e):
                assert (
                    bookies[b]
                    .entries[h.ledger_id][e]
                    .payload.endswith(b"payload-%d-%d" % (h.ledger_id, e))
                )
    assert worker.stats.entries_copied == sum(
        25 for h in handles if victim in h.metadata.all_bookies
    )


async def test_open_ledger_last_fragment_is_left_to_its_writer(
    meta_server: MemoryMetadataServer,
) -> None:
    bookies = FakeBookieCluster(meta_server, count=4)
    client = make_client(meta_server, bookies)
    (w,) = await _write_ledgers(client, 1, 10, close=False)
    victim = w.metadata.last_ensemble[0]
    bookies.unregister(victim)  # gone from the registry, the writer has not noticed yet
    marks = UnderReplication(client.store)
    await marks.mark(w.ledger_id, {victim}, "test", client.clock.now_ms())
    worker = ReplicationWorker(make_client(meta_server, bookies))
    assert await worker.replicate(w.ledger_id) == "deferred"
    meta, _ = await client.read_metadata(w.ledger_id)
    assert meta.ensembles == w.metadata.ensembles  # untouched: the writer's fragment
    assert await marks.marked() == [w.ledger_id]
    await w.close()  # the writer closes: now the worker may repair it
    worker.retry_deferred()
    assert await worker.replicate(w.ledger_id) == "repaired"
    meta, _ = await client.read_metadata(w.ledger_id)
    assert meta.state is LedgerState.CLOSED
    _assert_fully_replicated(meta, bookies, {victim})


async def test_open_ledger_is_fenced_after_the_grace_period(
    meta_server: MemoryMetadataServer,
) -> None:
    bookies = FakeBookieCluster(meta_server, count=4)
    client = make_client(meta_server, bookies)
    (w,) = await _write_ledgers(client, 1, 10, close=False)
    victim = w.metadata.last_ensemble[0]
    bookies.crash(victim)
    await UnderReplication(client.store).mark(w.ledger_id, {victim}, "test", 0)
    worker = ReplicationWorker(
        make_client(meta_server, bookies),
        AutoRecoveryConfig(open_ledger_rereplication_grace_period_ms=0),
    )
    assert await worker.replicate(w.ledger_id) == "repaired"
    meta, _ = await client.read_metadata(w.ledger_id)
    assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 9
    _assert_fully_replicated(meta, bookies, {victim})


async def test_two_workers_never_hold_one_ledger(meta_server: MemoryMetadataServer) -> None:
    bookies = FakeBookieCluster(meta_server, count=4)
    client = make_client(meta_server, bookies)
    (w,) = await _write_ledgers(client, 1, 5)
    victim = w.metadata.last_ensemble[0]
    bookies.crash(victim)
    await UnderReplication(client.store).mark(w.ledger_id, {victim}, "test", 0)
    holder = UnderReplication(meta_server.connect()).lock(w.ledger_id, "other-worker")
    await holder.acquire()
    worker = ReplicationWorker(make_client(meta_server, bookies))
    assert await worker.replicate(w.ledger_id) == "busy"
    meta, _ = await client.read_metadata(w.ledger_id)
    assert victim in meta.all_bookies
    await holder.release()
    assert await worker.replicate(w.ledger_id) == "repaired"


async def test_wiped_bookie_is_refilled_in_place(meta_server: MemoryMetadataServer) -> None:
    bookies = FakeBookieCluster(meta_server, count=3)
    client = make_client(meta_server, bookies)
    (w,) = await _write_ledgers(client, 1, 12)
    victim = w.metadata.last_ensemble[1]
    bookies[victim].delete_ledger(w.ledger_id)  # registered, but its data is gone
    auditor = Auditor(make_client(meta_server, bookies), AutoRecoveryConfig())
    assert await auditor.periodic_check() == 1
    worker = ReplicationWorker(make_client(meta_server, bookies))
    assert await worker.run_once() == 1
    meta, _ = await client.read_metadata(w.ledger_id)
    assert meta.ensembles == w.metadata.ensembles  # same bookie, refilled
    assert sorted(bookies[victim].entries[w.ledger_id]) == list(range(12))


async def test_auditor_marks_ledgers_of_a_lost_bookie_after_the_delay(
    meta_server: MemoryMetadataServer,
) -> None:
    bookies = FakeBookieCluster(meta_server, count=4)
    client = make_client(meta_server, bookies)
    handles = await _write_ledgers(client, 5, 2)
    victim = handles[0].metadata.last_ensemble[0]
    expected = sorted(h.ledger_id for h in handles if victim in h.metadata.all_bookies)
    delayed = Auditor(
        make_client(meta_server, bookies), AutoRecoveryConfig(lost_bookie_recovery_delay_s=3600)
    )
    await delayed._start()
    bookies.crash(victim)
    await delayed.check_lost_bookies()
    marks = UnderReplication(client.store)
    assert await marks.marked() == []  # within lostBookieRecoveryDelay
    prompt = Auditor(
        make_client(meta_server, bookies), AutoRecoveryConfig(lost_bookie_recovery_delay_s=0)
    )
    await prompt._start()
    await prompt.check_lost_bookies()
    assert await marks.marked() == expected
    mark = await marks.get(expected[0])
    assert mark is not None and mark.bookies == (victim,)


async def test_draining_bookie_is_never_chosen(meta_server: MemoryMetadataServer) -> None:
    bookies = FakeBookieCluster(meta_server, count=3)
    client = make_client(meta_server, bookies)
    drained = sorted(bookies.bookies)[0]
    await UnderReplication(client.store).drain(drained)
    for _ in range(20):
        ensemble = await client.registry.choose_ensemble(2)
        assert drained not in ensemble
    assert await client.store.exists(paths.draining_bookie(drained)) is not None


# -- settings ------------------------------------------------------------------------------


def test_bookie_config_carries_every_auto_recovery_setting_with_the_same_default() -> None:
    import dataclasses

    from magnetar.bookie.main import BookieConfig

    bookie = {f.name: f.default for f in dataclasses.fields(BookieConfig)}
    for f in dataclasses.fields(AutoRecoveryConfig):
        assert f.name in bookie, f.name
        assert bookie[f.name] == f.default, f.name
    assert AutoRecoveryConfig.from_object(BookieConfig(lost_bookie_recovery_delay_s=0)) == (
        AutoRecoveryConfig(lost_bookie_recovery_delay_s=0)
    )


@pytest.mark.parametrize(
    "bad",
    [
        {"rereplication_entry_batch_size": 0},
        {"lost_bookie_recovery_delay_s": -1},
        {"replication_rate_by_bytes": 0},
    ],
)
def test_bad_settings_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        AutoRecoveryConfig(**bad)


async def test_throttle_holds_the_byte_rate() -> None:
    from magnetar.broker.bookkeeper.autorecovery import ByteThrottle

    async with AutojumpClock() as clock:
        throttle = ByteThrottle(1000, clock)
        t0 = clock.monotonic_ms()

        async def run() -> None:
            for _ in range(5):
                await throttle.consume(1000)

        task = asyncio.ensure_future(run())
        await clock.sleep(0.999)  # virtual time moves only when everything else waits
        assert not task.done()  # 1 s of tokens spent, the 2nd second's bytes wait
        await asyncio.wait_for(task, 30)
        assert clock.monotonic_ms() - t0 == pytest.approx(4000)  # 5 KB at 1 KB/s
        assert throttle.waited_s == pytest.approx(4.0)
        assert ByteThrottle(-1, clock).unlimited


@pytest.mark.parametrize("which", ["bookie", "periodic"])
async def test_auditor_periodic_checks_run_at_their_interval(
    meta_server: MemoryMetadataServer, which: str
) -> None:
    bookies = FakeBookieCluster(meta_server, count=3)
    client = make_client(meta_server, bookies)
    (w,) = await _write_ledgers(client, 1, 4)
    victim = w.metadata.last_ensemble[0]
    if which == "bookie":
        # unregistered while no auditor watched: only the bookie check finds it at once
        bookies.unregister(victim)
        config = AutoRecoveryConfig(
            lost_bookie_recovery_delay_s=3600, auditor_periodic_bookie_check_interval_s=1
        )
    else:
        bookies[victim].delete_ledger(w.ledger_id)
        config = AutoRecoveryConfig(auditor_periodic_check_interval_s=1)
    auditor = Auditor(make_client(meta_server, bookies), config)
    stop = asyncio.Event()
    task = asyncio.ensure_future(auditor.run(stop))
    marks = UnderReplication(client.store)

    async def marked() -> bool:
        return await marks.marked() == [w.ledger_id]

    await wait_for(marked, 30, f"ledger {w.ledger_id} marked under-replicated")
    stop.set()
    await task
    assert (
        auditor.stats.bookie_checks if which == "bookie" else auditor.stats.periodic_checks
    ) >= 1


async def test_open_reader_follows_the_repaired_ensemble(meta_server: MemoryMetadataServer) -> None:
    """A reader opened before the repair still reads after both original replicas are gone
    (it re-reads the metadata when no replica of its stale ensemble answers)."""
    bookies = FakeBookieCluster(meta_server, count=4)
    client = make_client(meta_server, bookies)
    (w,) = await _write_ledgers(client, 1, 8)
    reader = await make_client(meta_server, bookies).open_ledger(w.ledger_id)
    first, second = w.metadata.last_ensemble
    bookies.crash(first)
    await UnderReplication(client.store).mark(w.ledger_id, {first}, "test", 0)
    assert await ReplicationWorker(make_client(meta_server, bookies)).run_once() == 1
    bookies.crash(second)  # both bookies the reader knows of are gone now
    got = await reader.read(0, 7)
    assert [g.payload for g in got] == [b"payload-%d-%d" % (w.ledger_id, i) for i in range(8)]


async def test_one_auditor_is_elected_and_another_takes_over(
    meta_server: MemoryMetadataServer,
) -> None:
    from magnetar.broker.bookkeeper.autorecovery import AutoRecovery

    bookies = FakeBookieCluster(meta_server, count=3)
    daemons = [
        AutoRecovery(meta_server.connect(), bookies.factory, AutoRecoveryConfig(), node_id=f"n{i}")
        for i in range(3)
    ]
    for d in daemons:
        await d.start()
    await wait_for(lambda: sum(d.is_auditor for d in daemons) == 1, 30, "one auditor")
    leader = next(d for d in daemons if d.is_auditor)
    await leader.stop()
    rest = [d for d in daemons if d is not leader]
    await wait_for(lambda: sum(d.is_auditor for d in rest) == 1, 30, "another auditor")
    for d in rest:
        await d.stop()
    assert not any(d.is_auditor for d in daemons)


async def test_writer_moves_its_open_fragment_off_a_draining_bookie(
    meta_server: MemoryMetadataServer,
) -> None:
    bookies = FakeBookieCluster(meta_server, count=3)
    client = make_client(meta_server, bookies, add_timeout_ms=200)
    w = await client.create_ledger(ensemble_size=2, write_quorum=2, ack_quorum=2)
    for i in range(5):
        await w.add(b"%d" % i)
    drained = w.metadata.last_ensemble[0]
    await UnderReplication(meta_server.connect()).drain(drained)
    payloads = (b"%d" % i for i in itertools.count(5))

    async def moved() -> bool:
        if drained not in w.metadata.last_ensemble:
            return True
        await w.add(next(payloads))  # writes keep succeeding meanwhile
        return False

    await wait_for(moved, 30, "the writer off the draining bookie")
    await w.add(b"after")
    assert drained in w.metadata.all_bookies  # its old fragment: the workers' job
    assert w.statistics().ensemble_changes == 1
    await w.close()


def test_underreplication_paths_follow_bookkeepers_layout() -> None:
    assert paths.underreplicated_ledger(0x1234_5678_9ABC_DEF0) == (
        "/ledgers/underreplication/ledgers/1234/5678/9abc/def0/urL1311768467463790320"
    )
    assert paths.underreplicated_ledger_id_of("urL42") == 42
    assert paths.underreplicated_ledger_id_of("L42") is None
    assert paths.replication_lock(7) == "/ledgers/underreplication/locks/urL7"


async def test_marks_merge_and_unmark_cleans_the_hex_levels(
    meta_server: MemoryMetadataServer,
) -> None:
    store = meta_server.connect()
    marks = UnderReplication(store)
    assert await marks.mark(5, {"a"}, "lost bookie", 1)
    assert not await marks.mark(5, {"b"}, "periodic check", 2)
    mark = await marks.get(5)
    assert mark is not None and mark.bookies == ("a", "b") and mark.marked_ms == 1
    assert await marks.mark(70_000, {"a"}, "x", 3)
    assert await marks.marked() == [5, 70_000]
    await marks.unmark(5)
    await marks.unmark(70_000)
    assert await marks.marked() == []
    assert await store.children(paths.UNDERREPLICATED_LEDGERS) == []


async def test_a_ledger_deleted_while_it_is_repaired_is_dropped_never_retried(
    meta_server: MemoryMetadataServer,
) -> None:
    """Tiered storage deletes an offloaded ledger's bookie copy (its metadata) whenever the
    deletion lag ends, and retention deletes ledgers too: a worker copying such a ledger
    stops with no error and no retry, and the mark goes; one marked but already deleted is
    never even read."""
    bookies = FakeBookieCluster(meta_server, count=4)
    client = make_client(meta_server, bookies)
    first, second = await _write_ledgers(client, 2, 12)
    victim = first.metadata.last_ensemble[0]
    bookies.crash(victim)
    marks = UnderReplication(client.store)
    for h in (first, second):
        await marks.mark(h.ledger_id, {victim}, "test", 0)
    worker = ReplicationWorker(
        make_client(meta_server, bookies), AutoRecoveryConfig(rereplication_entry_batch_size=4)
    )

    class DeletesMidCopy:
        """The throttle a copy waits on after each batch: the ledger goes meanwhile."""

        async def consume(self, nbytes: int) -> None:
            await client.delete_ledger(first.ledger_id)

    worker.throttle = DeletesMidCopy()  # type: ignore[assignment]
    assert await worker.replicate(first.ledger_id) == "gone"
    await client.delete_ledger(second.ledger_id)  # deleted before any worker looked
    copied = worker.stats.entries_copied
    assert await worker.replicate(second.ledger_id) == "gone"
    assert worker.stats.entries_copied == copied
    assert await marks.marked() == []
    assert worker.stats.failures == 0 and worker.stats.ledgers_gone == 2
