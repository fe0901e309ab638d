"""Ledger writer, reader and recovery over fake bookies (fault injection)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from support.autojump import AutojumpClock
from support.ledger_fakes import make_client
from support.waiting import wait_for

from magnetar.bookie.errors import BookieUnavailable
from magnetar.broker.bookkeeper.errors import (
    LedgerFenced,
    NotEnoughBookies,
    ReadBeyondLastConfirmed,
)
from magnetar.broker.bookkeeper.metadata import write_set
from magnetar.broker.bookkeeper.states import HandleState, LedgerState
from magnetar.broker.bookkeeper.testing import FakeBookieCluster
from magnetar.zk.memory import MemoryMetadataServer


async def test_striped_write_and_read(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    client = make_client(meta_server, fake_bookies, ensemble_size=3, write_quorum=2, ack_quorum=2)
    w = await client.create_ledger()
    ids = await asyncio.gather(*(w.add(f"m{i}".encode()) for i in range(30)))
    assert ids == list(range(30))
    assert w.last_add_confirmed == 29
    w.check_invariants()
    ens = w.metadata.last_ensemble
    for e in range(30):
        holders = {
            b for b, bk in fake_bookies.bookies.items() if e in bk.entries.get(w.ledger_id, {})
        }
        assert holders == set(write_set(ens, 2, e))
    got = await w.read(0, 29)
    assert [g.payload for g in got] == [f"m{i}".encode() for i in range(30)]
    await w.close()
    meta, _ = await client.read_metadata(w.ledger_id)
    assert meta.state is LedgerState.CLOSED and meta.last_entry_id == 29
    assert meta.length == sum(len(f"m{i}") for i in range(30))
    r = await make_client(meta_server, fake_bookies).open_ledger(w.ledger_id)
    assert [g.payload for g in await r.read(0, 29)] == [g.payload for g in got]


async def test_reads_past_lac_are_impossible(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    client = make_client(meta_server, fake_bookies)
    w = await client.create_ledger()
    await w.add(b"a")
    with pytest.raises(ReadBeyondLastConfirmed):
        await w.read(0, 1)
    # a non-owner reader only sees what the bookies learned as LAC (piggybacked on adds)
    await w.add(b"b")
    r = await make_client(meta_server, fake_bookies).open_ledger(w.ledger_id, recovery=False)
    assert r.last_add_confirmed == 0
    with pytest.raises(ReadBeyondLastConfirmed):
        await r.read(1, 1)


async def test_crashed_bookie_is_replaced_and_writes_continue(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    fake_bookies.add_bookie("127.0.0.1:3190")
    client = make_client(meta_server, fake_bookies, ensemble_size=3, write_quorum=2, ack_quorum=2)
    w = await client.create_ledger()
    first = await asyncio.gather(*(w.add(b"x%d" % i) for i in range(50)))
    victim = w.metadata.last_ensemble[0]
    futs = [w.add_nowait(b"y%d" % i) for i in range(25)]
    fake_bookies.crash(victim)  # the first 25 reached it; the rest will not
    futs += [w.add_nowait(b"y%d" % i) for i in range(25, 50)]
    rest = await asyncio.gather(*futs)
    assert rest == list(range(50, 100)) and first == list(range(50))
    assert len(w.metadata.ensembles) == 2
    assert victim not in w.metadata.last_ensemble
    w.check_invariants()
    got = await w.read(0, 99)
    assert [g.payload for g in got] == [b"x%d" % i for i in range(50)] + [
        b"y%d" % i for i in range(50)
    ]
    # metadata in the store has the ensemble change too (CAS'd)
    meta, _ = await client.read_metadata(w.ledger_id)
    assert meta.ensembles == w.metadata.ensembles


async def test_ensemble_shrinks_when_no_spare_bookie(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    client = make_client(meta_server, fake_bookies, ensemble_size=3, write_quorum=2, ack_quorum=2)
    w = await client.create_ledger()
    await asyncio.gather(*(w.add(b"%d" % i) for i in range(10)))
    victim = w.metadata.last_ensemble[1]
    fake_bookies.crash(victim, keep_registration=True)  # SIGKILL: registration lingers
    ids = await asyncio.gather(*(w.add(b"%d" % i) for i in range(10, 40)))
    assert ids == list(range(10, 40))
    assert len(w.metadata.last_ensemble) == 2 and victim not in w.metadata.last_ensemble
    assert [g.payload for g in await w.read(0, 39)] == [b"%d" % i for i in range(40)]


async def test_hung_bookie_is_replaced_after_add_timeout(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    async with AutojumpClock() as clock:
        client = make_client(meta_server, fake_bookies, clock=clock, add_timeout_ms=1000)
        w = await client.create_ledger()
        await w.add(b"a")
        victim = w.metadata.last_ensemble[0]
        fake_bookies[victim].hang()
        t0 = clock.monotonic_ms()
        fut = w.add_nowait(b"b")
        await clock.sleep(0.9)  # virtual time moves only once everything else has run
        assert not fut.done()  # Qa=2 and one bookie hangs: the add waits...
        assert await asyncio.wait_for(fut, 30) == 1  # ...only for the add timeout
        assert clock.monotonic_ms() - t0 >= 1000
        assert victim not in w.metadata.last_ensemble
        fake_bookies[victim].resume()


async def test_bookie_error_then_not_enough_bookies_fails_adds(
    meta_server: MemoryMetadataServer,
    fake_bookies: FakeBookieCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The ensemble change retries with back-off on the client's clock until its timeout
    (virtual time here: the 200 s of retries take no real time)."""
    async with AutojumpClock() as clock:
        client = make_client(
            meta_server,
            fake_bookies,
            clock=clock,
            ensemble_size=3,
            write_quorum=3,
            ack_quorum=3,
            ensemble_change_timeout_ms=200_000,
        )
        w = await client.create_ledger()
        await w.add(b"a")
        fake_bookies[w.metadata.last_ensemble[0]].fail_adds(BookieUnavailable("disk gone"))
        t0 = clock.monotonic_ms()
        with (
            caplog.at_level(logging.INFO, logger="magnetar.broker.bookkeeper.write_handle"),
            pytest.raises(NotEnoughBookies, match="ensemble change impossible"),
        ):
            await asyncio.wait_for(w.add(b"b"), 30)
        assert clock.monotonic_ms() - t0 >= 200_000  # retried until the timeout
        # with back-off doubling to 1 s, 200 s hold about 200 retries: all slept on the clock
        assert caplog.text.count("ensemble change retry") >= 150
        assert w.state is HandleState.ERRORED


async def test_reads_fall_back_to_other_replicas(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    client = make_client(meta_server, fake_bookies, ensemble_size=2, write_quorum=2, ack_quorum=2)
    w = await client.create_ledger()
    await asyncio.gather(*(w.add(b"p%d" % i) for i in range(5)))
    a, _ = w.metadata.last_ensemble
    fake_bookies[a].corrupt(w.ledger_id, 2)
    got = await w.read(0, 4)
    assert [g.payload for g in got] == [b"p%d" % i for i in range(5)]
    fake_bookies.crash(a)
    got = await w.read(0, 4)
    assert [g.payload for g in got] == [b"p%d" % i for i in range(5)]


async def test_recovery_fences_old_writer_and_keeps_every_acked_entry(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    old = make_client(meta_server, fake_bookies, ensemble_size=3, write_quorum=2, ack_quorum=2)
    w = await old.create_ledger()
    await asyncio.gather(*(w.add(b"e%d" % i) for i in range(20)))
    new = make_client(meta_server, fake_bookies)
    r = await new.open_ledger(w.ledger_id, recovery=True)
    assert r.is_closed and r.last_add_confirmed == 19
    assert [g.payload for g in await r.read(0, 19)] == [b"e%d" % i for i in range(20)]
    with pytest.raises(LedgerFenced):
        await w.add(b"late")
    assert w.state is HandleState.FENCED
    with pytest.raises(LedgerFenced):
        w.add_nowait(b"later")
    # a second recovery is a no-op on a closed ledger
    r2 = await make_client(meta_server, fake_bookies).open_ledger(w.ledger_id)
    assert r2.last_add_confirmed == 19 and r2.length == r.length


async def test_recovery_keeps_entries_that_reached_one_replica_and_drops_lost_ones(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    old = make_client(meta_server, fake_bookies, ensemble_size=2, write_quorum=2, ack_quorum=2)
    w = await old.create_ledger()
    await asyncio.gather(*(w.add(b"k%d" % i) for i in range(10)))
    a, b = w.metadata.last_ensemble
    fake_bookies[b].hang()  # entry 10 reaches only bookie a: never acknowledged
    fut = w.add_nowait(b"k10")
    await wait_for(lambda: 10 in fake_bookies[a].entries[w.ledger_id])
    assert not fut.done()
    fake_bookies[b].resume()
    fake_bookies[b].entries[w.ledger_id].pop(10, None)  # as if the send to b was lost
    # (acks of entry 10 from b may have arrived; the point is that recovery must decide)
    r = await make_client(meta_server, fake_bookies).open_ledger(w.ledger_id)
    # found on one replica: may have been acked -> recovered and re-replicated to both
    assert r.last_add_confirmed == 10
    assert 10 in fake_bookies[b].entries[w.ledger_id]
    assert [g.payload for g in await r.read(0, 10)][-1] == b"k10"


async def test_recovery_truncates_entries_present_nowhere(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    old = make_client(
        meta_server,
        fake_bookies,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=2,
        add_timeout_ms=100,
    )
    w = await old.create_ledger()
    await asyncio.gather(*(w.add(b"k%d" % i) for i in range(5)))
    for bk in fake_bookies.bookies.values():
        bk.drop_adds()
    fut = w.add_nowait(b"never")
    # the add is sent with the others of its loop iteration: wait until both bookies lost it
    await wait_for(
        lambda: sum(bk.adds_dropped for bk in fake_bookies.bookies.values()) >= 2,
        what="both bookies dropped the add",
    )
    for bk in fake_bookies.bookies.values():
        bk.drop_adds(False)
    r = await make_client(meta_server, fake_bookies).open_ledger(w.ledger_id)
    assert r.last_add_confirmed == 4
    # the old writer times out on its add, tries an ensemble change, and finds it was fenced
    with pytest.raises(LedgerFenced):
        await asyncio.wait_for(fut, 5)


async def test_deposed_writer_cannot_change_ensemble(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    fake_bookies.add_bookie("127.0.0.1:3199")
    old = make_client(meta_server, fake_bookies, ensemble_size=3, write_quorum=2, ack_quorum=2)
    w = await old.create_ledger()
    await w.add(b"a")
    await make_client(meta_server, fake_bookies).open_ledger(w.ledger_id)
    fake_bookies.crash(w.metadata.last_ensemble[0])
    with pytest.raises(LedgerFenced):
        await w.add(b"b")


async def test_long_poll_for_lac(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    client = make_client(meta_server, fake_bookies)
    w = await client.create_ledger()
    await w.add(b"a")
    waiter = asyncio.ensure_future(w.wait_for_lac(0, 5000))
    await asyncio.sleep(0)
    assert not waiter.done()
    await w.add(b"b")
    assert await asyncio.wait_for(waiter, 1) == 1


async def test_non_owner_reader_long_polls_the_bookies_for_lac(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    w = await make_client(meta_server, fake_bookies).create_ledger()
    await w.add(b"a")
    reader = await make_client(meta_server, fake_bookies).open_ledger(w.ledger_id, recovery=False)
    assert reader.last_add_confirmed == -1  # entry 0's LAC reaches bookies with entry 1
    waiter = asyncio.ensure_future(reader.wait_for_lac(-1, 5000))
    await asyncio.sleep(0)
    assert not waiter.done()
    await w.add(b"b")  # carries LAC 0
    assert await asyncio.wait_for(waiter, 1) == 0
    assert [e.payload for e in await reader.read(0, 0)] == [b"a"]
    with pytest.raises(ReadBeyondLastConfirmed):
        await reader.read(1, 1)


async def test_recovery_does_not_wait_for_a_hung_bookie_once_write_sets_are_covered(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    old = make_client(meta_server, fake_bookies, ensemble_size=3, write_quorum=3, ack_quorum=2)
    w = await old.create_ledger()
    await asyncio.gather(*(w.add(b"h%d" % i) for i in range(10)))
    frozen = fake_bookies[w.metadata.last_ensemble[2]]
    frozen.hang()  # SIGSTOP: answers nothing
    new = make_client(meta_server, fake_bookies, fence_timeout_ms=60_000)
    r = await asyncio.wait_for(new.open_ledger(w.ledger_id), 5)
    assert r.last_add_confirmed == 9
    frozen.resume()
    with pytest.raises(LedgerFenced):
        await w.add(b"late")


async def test_no_stall_while_qa_healthy_bookies_remain_then_full_replication_resumes(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    client = make_client(
        meta_server,
        fake_bookies,
        ensemble_size=3,
        write_quorum=3,
        ack_quorum=2,
        ensemble_change_timeout_ms=60_000,
        add_timeout_ms=100,
        degraded_retry_ms=50,
        quarantine_ms=60_000,
    )
    w = await client.create_ledger()
    await w.add(b"a")
    victim = w.metadata.last_ensemble[0]
    fake_bookies.crash(victim, keep_registration=True)  # no spare, cannot shrink below Qw
    # Qa=2 healthy bookies remain in every write set: adds keep completing
    ids = await asyncio.wait_for(asyncio.gather(*(w.add(b"%d" % i) for i in range(20))), 2)
    assert ids == list(range(1, 21))
    assert victim in w.metadata.last_ensemble  # still under-replicated
    spare = fake_bookies.add_bookie("127.0.0.1:3300")
    await wait_for(lambda: victim not in w.metadata.last_ensemble)
    await w.add(b"after")
    assert w.last_add_confirmed in spare.entries[w.ledger_id]
    assert [g.payload for g in await w.read(0, 21)][-1] == b"after"


async def test_completions_split_over_loop_callbacks_stay_in_order(
    meta_server: MemoryMetadataServer,
    fake_bookies: FakeBookieCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from magnetar.broker.bookkeeper import write_handle as handle_module

    monkeypatch.setattr(handle_module, "COMPLETIONS_PER_STEP", 3)
    client = make_client(meta_server, fake_bookies, ensemble_size=2, write_quorum=2, ack_quorum=2)
    w = await client.create_ledger()
    completed: list[int] = []
    lacs: list[int] = []
    w.add_lac_listener(lacs.append)
    futures = [w.add_nowait(b"m%d" % i) for i in range(20)]
    for fut in futures:
        fut.add_done_callback(lambda f: completed.append(f.result()))
    assert await asyncio.gather(*futures) == list(range(20))
    assert completed == list(range(20))
    # one LAC step per callback of at most 3 completions, each step after the previous
    assert lacs == sorted(lacs) and lacs[-1] == 19 and len(lacs) >= 7
    assert all(b - a <= 3 for a, b in zip([-1, *lacs], lacs, strict=False))
    w.check_invariants()
    await w.close()
    meta, _ = await client.read_metadata(w.ledger_id)
    assert meta.last_entry_id == 19 and meta.length == sum(len(b"m%d" % i) for i in range(20))


async def test_abort_is_not_logged_as_a_warning(
    meta_server: MemoryMetadataServer,
    fake_bookies: FakeBookieCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An abort is the owner's decision (a topic unloads, a ledger is refused): pending adds
    fail with LedgerClosed, and nothing alarming is logged."""
    client = make_client(meta_server, fake_bookies, ensemble_size=2, write_quorum=2, ack_quorum=2)
    w = await client.create_ledger()
    await w.add(b"a")
    with caplog.at_level("DEBUG", logger="magnetar.broker.bookkeeper"):
        await w.abort()
    assert [r for r in caplog.records if r.levelno >= 30] == []
    assert any("aborted" in r.getMessage() for r in caplog.records)


async def test_reads_ask_a_replica_whose_read_failed_last(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """A replica that failed a read (down, or timed out) is asked after the others for a
    while, as BookKeeper reorders reads by bookie health: a frozen replica costs one read
    timeout, not one per read. Placement is not affected by it."""
    client = make_client(meta_server, fake_bookies, ensemble_size=2, write_quorum=2, ack_quorum=2)
    w = await client.create_ledger()
    await asyncio.gather(*(w.add(b"e%d" % i) for i in range(10)))
    await w.close()
    first, second = w.metadata.last_ensemble
    asked: list[str] = []
    for bookie in (first, second):
        replica = client.registry.client(bookie)
        inner = replica.read_range

        async def counted(*args: object, _b: str = bookie, _inner: object = inner) -> object:
            asked.append(_b)
            return await _inner(*args)  # type: ignore[operator]

        replica.read_range = counted  # type: ignore[method-assign]
    fake_bookies.crash(first)
    assert [e.payload for e in await w.read(0, 4)] == [b"e%d" % i for i in range(5)]
    assert asked == [first, second]  # the first replica failed: the second answered
    assert [e.payload for e in await w.read(5, 9)] == [b"e%d" % i for i in range(5, 10)]
    assert asked == [first, second, second]  # not the failed replica first again
    assert not client.registry.is_quarantined(first)  # placement still sees it


async def test_a_quarantined_bookie_that_answers_again_joins_new_ensembles(
    meta_server: MemoryMetadataServer, fake_bookies: FakeBookieCluster
) -> None:
    """With too few other bookies for an ensemble, a quarantined bookie is health-checked:
    one that answers is out of quarantine and used at once (a bookie back from a blip need
    not wait out its quarantine for new ledgers); one still down is not chosen."""
    n = len(fake_bookies.bookies)
    client = make_client(
        meta_server,
        fake_bookies,
        ensemble_size=n,
        write_quorum=n,
        ack_quorum=n,
        quarantine_ms=60_000,
    )
    victim = sorted(fake_bookies.bookies)[0]
    client.registry.quarantine(victim)  # e.g. an add timed out: it is up again
    w = await client.create_ledger()
    assert victim in w.metadata.last_ensemble and not client.registry.is_quarantined(victim)
    fake_bookies.crash(victim, keep_registration=True)  # down, its registration lingering
    client.registry.quarantine(victim)
    with pytest.raises(NotEnoughBookies):
        await client.create_ledger()
    assert client.registry.is_quarantined(victim)
    fake_bookies.restart(victim)
    w = await client.create_ledger()  # at once, not after the 60 s quarantine
    assert victim in w.metadata.last_ensemble
