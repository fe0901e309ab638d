"""Managed ledgers on real bookie processes and a real ZooKeeper: rollover and trimming with
bookie GC, cursor persistence across restarts, session loss, racing owners."""

from __future__ import annotations

import asyncio

import pytest
from support.ledger_cluster import (
    TRANSPORTS,
    bookie_client_factory,
    chroot_url,
    fast_add_args,
    open_factory,
    wait_registered,
)
from support.waiting import wait_for

from magnetar.bookie.errors import NoEntry, NoLedger
from magnetar.broker.bookkeeper.metadata import LedgerMetadata
from magnetar.broker.bookkeeper.states import LedgerState
from magnetar.broker.ledger import EARLIEST, ManagedLedgerFenced, Position
from magnetar.zk import paths

FAST = {"min_ledger_rollover_time_ms": 0, "max_entries_per_ledger": 100}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_rollover_trim_and_bookie_gc(zookeeper_server, bookie_factory, transport) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookies = [
        bookie_factory.start(
            metadata=url, extra_args=["--gc-interval-s", "0.3", *fast_add_args(transport)]
        )
        for _ in range(2)
    ]
    factory = await open_factory(
        url, transport=transport, retention_time_ms=0, retention_size_bytes=0, **FAST
    )
    await wait_registered(factory.store, 2)
    ml = await factory.open("t/ns/persistent/trim")
    cursor = await ml.open_cursor("sub", EARLIEST)
    positions = [await ml.add_nowait(b"payload-%d" % i) for i in range(350)]
    assert len({p.ledger_id for p in positions}) == 4  # rolled over every 100 entries
    first_ledger = positions[0].ledger_id
    assert await ml.trimming.trim() == []  # nothing consumed yet
    await cursor.mark_delete(positions[249])
    await wait_for(lambda: first_ledger not in ml.ledgers.ids, 10)
    assert ml.ledgers.ids[0] == positions[250].ledger_id

    # the trim runs once the mark-delete is durable; its ledger deletions follow the
    # ledger list's update
    async def metadata_deleted() -> bool:
        return await factory.store.get(paths.ledger_metadata(first_ledger)) is None

    await wait_for(metadata_deleted, 10, "the trimmed ledger's metadata deleted")
    # bookie GC reclaims the trimmed ledgers' entries
    client = bookie_client_factory(bookies[0].address)
    try:

        async def gone() -> bool:
            try:
                await client.read_entry(first_ledger, 0)
            except (NoLedger, NoEntry):
                return True
            return False

        await wait_for(gone, 20, "bookie GC reclaiming the trimmed ledger", interval_s=0.1)
    finally:
        await client.close()
    got = await cursor.read_entries(1000)
    assert [e.payload for e in got] == [b"payload-%d" % i for i in range(250, 350)]
    await factory.close()
    await factory.store.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_cursor_survives_clean_restart(zookeeper_server, bookie_factory, transport) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    for _ in range(2):
        bookie_factory.start(metadata=url, extra_args=fast_add_args(transport))
    f1 = await open_factory(
        url, transport=transport, retention_time_ms=-1, retention_size_bytes=-1, **FAST
    )
    await wait_registered(f1.store, 2)
    ml = await f1.open("t/ns/persistent/restart")
    cursor = await ml.open_cursor("sub", EARLIEST)
    pos = list(await asyncio.gather(*(ml.add_nowait(b"m%d" % i) for i in range(300))))
    keep = {3, 99, 100, 101, 250, 299}
    await cursor.delete(p for i, p in enumerate(pos) if i not in keep)
    assert await cursor.delete_batch_indexes(pos[250], 3, [1]) is False
    await cursor.increment_redelivery(pos[99])
    await f1.close()
    await f1.store.close()

    f2 = await open_factory(
        url, transport=transport, retention_time_ms=-1, retention_size_bytes=-1, **FAST
    )
    ml2 = await f2.open("t/ns/persistent/restart")
    c2 = ml2.cursors["sub"]
    got = await c2.read_entries(1000)
    assert [e.payload for e in got] == [b"m%d" % i for i in sorted(keep)]
    assert c2.mark_delete_position == Position(pos[3].ledger_id, pos[3].entry_id - 1)
    assert c2.redelivery_count(pos[99]) == 1
    assert c2.batch_ack_set(pos[250]) == (3, 0b010)
    assert c2.backlog().entries == len(keep)
    await f2.close()
    await f2.store.close()


async def test_session_loss_stops_the_owner(zookeeper_server, bookie_factory) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    bookie_factory.start_many(2, metadata=url)
    factory = await open_factory(url, retention_time_ms=-1, retention_size_bytes=-1)
    await wait_registered(factory.store, 2)
    ml = await factory.open("t/ns/persistent/session")
    await ml.add(b"before")
    await factory.store.force_expire()  # type: ignore[attr-defined]
    await wait_for(lambda: ml.state.name == "FENCED", 30)
    with pytest.raises(ManagedLedgerFenced):
        await ml.add(b"after")
    # another owner takes over and sees only what was acknowledged
    f2 = await open_factory(url, retention_time_ms=-1, retention_size_bytes=-1)
    ml2 = await f2.open("t/ns/persistent/session")
    got = await ml2.new_non_durable_cursor(EARLIEST).read_entries(10)
    assert [e.payload for e in got] == [b"before"]
    await f2.close()
    await f2.store.close()
    await factory.store.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_two_owners_racing_exactly_one_survives(
    zookeeper_server, bookie_factory, transport
) -> None:  # type: ignore[no-untyped-def]
    url = chroot_url(zookeeper_server.url)
    for _ in range(2):
        bookie_factory.start(metadata=url, extra_args=fast_add_args(transport))
    f1 = await open_factory(url, transport=transport)
    f2 = await open_factory(url, transport=transport)
    await wait_registered(f1.store, 2)
    name = "t/ns/persistent/race"
    opened = await asyncio.gather(f1.open(name), f2.open(name), return_exceptions=True)
    outcomes: list[object] = []
    for ml in opened:
        if isinstance(ml, BaseException):
            outcomes.append(ml)
            continue
        try:
            outcomes.append(await asyncio.wait_for(ml.add(b"x"), 15))
        except ManagedLedgerFenced as exc:
            outcomes.append(exc)
    winners = [o for o in outcomes if isinstance(o, Position)]
    assert len(winners) == 1, outcomes
    for f in (f1, f2):
        await f.close()
        await f.store.close()


async def test_a_bookie_restarted_on_another_fast_add_port_gets_fast_adds_again(  # type: ignore[no-untyped-def]
    zookeeper_server, bookie_factory
) -> None:
    """The broker follows a bookie's new fast add port after a restart (registrations are
    read again once they changed), instead of adding over gRPC until the broker restarts."""
    url = chroot_url(zookeeper_server.url)
    bookies = [
        bookie_factory.start(metadata=url, extra_args=fast_add_args("tcp")) for _ in range(2)
    ]
    factory = await open_factory(url, transport="tcp", **FAST)
    await wait_registered(factory.store, 2)
    ml = await factory.open("t/ns/persistent/new-port")
    cursor = await ml.open_cursor("sub", EARLIEST)  # keeps every entry to read back
    first = [await ml.add_nowait(b"a%d" % i) for i in range(50)]
    registry = factory.ledger_client.registry
    moved = bookies[0]
    old_fast = registry.add_address(moved.address)
    client = registry.client(moved.address)
    assert client.statistics().fast_add_streams_opened >= 1  # type: ignore[attr-defined]

    moved.stop()
    new_port = fast_add_args("tcp")
    moved.extra_args = [a for a in moved.extra_args if a not in fast_add_args_of(moved)] + new_port
    moved.start()
    await wait_registered(factory.store, 2)
    # adds go on (they wait for the bookie, then new ledgers are made on both bookies)
    rest = list(await asyncio.gather(*(ml.add_nowait(b"b%d" % i) for i in range(250))))
    new_fast = f"127.0.0.1:{new_port[1]}"
    assert registry.add_address(moved.address) == new_fast != old_fast
    assert client._add_address == new_fast  # type: ignore[attr-defined]

    async def fast_again() -> bool:
        await ml.add_nowait(b"c")
        return client.add_transport == "tcp" and client.statistics().fast_add_streams_opened >= 2  # type: ignore[attr-defined]

    await wait_for(fast_again, 30, "adds over the new fast add port")
    got = await cursor.read_entries(400)
    assert [e.position for e in got][: len(first) + len(rest)] == first + rest
    await factory.close()
    await factory.store.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_adds_a_failed_ledger_never_confirmed_land_once_in_the_next_ledger(  # type: ignore[no-untyped-def]
    zookeeper_server, bookie_factory, transport
) -> None:
    """A bookie that stops answering with adds in flight and no spare to replace it: the
    ledger fails after the ensemble change timeout, is closed at its last confirmed entry,
    and the adds it never confirmed wait for the next ledger instead of failing (Pulsar's
    managed ledger re-sends them so). The bookie that did store them in the old ledger does
    not make them appear twice: a new owner reads each exactly once. The paused bookie, back,
    joins the next ledger's ensemble although still quarantined (it answers its health check)."""
    url = chroot_url(zookeeper_server.url)
    bookies = [
        bookie_factory.start(metadata=url, extra_args=fast_add_args(transport)) for _ in range(2)
    ]
    # the paused bookie is quarantined for 10 minutes: the next ledger gets it back by its
    # answering the health check, not by the quarantine running out
    config = {"add_timeout_ms": 500, "ensemble_change_timeout_ms": 1_500, "quarantine_ms": 600_000}
    factory = await open_factory(url, transport=transport, **config)
    await wait_registered(factory.store, 2)
    ml = await factory.open("t/ns/persistent/failed-ledger")
    await ml.open_cursor("sub", EARLIEST)  # keeps every ledger
    first = await ml.add(b"a")
    old = ml.current
    assert old is not None
    bookies[0].pause()  # stops answering: its adds time out, no spare bookie exists
    try:
        moved = [ml.add_nowait(b"p%d" % i) for i in range(20)]
        await wait_for(lambda: old.is_closed, 60, "the failed ledger closed at its LAC")
        assert not any(f.done() for f in moved)
    finally:
        bookies[0].resume()
    got = await asyncio.wait_for(asyncio.gather(*moved), 120)
    assert [p.entry_id for p in got] == list(range(got[0].entry_id, got[0].entry_id + 20))
    assert got[0].ledger_id > first.ledger_id
    meta = await factory.store.get(paths.ledger_metadata(first.ledger_id))
    assert meta is not None
    closed = LedgerMetadata.from_bytes(meta.value)
    assert closed.state is LedgerState.CLOSED and closed.last_entry_id == first.entry_id
    await factory.close()
    await factory.store.close()

    second = await open_factory(url, transport=transport)
    ml2 = await second.open("t/ns/persistent/failed-ledger")
    cursor = ml2.new_non_durable_cursor(EARLIEST)
    entries = await cursor.read_entries(100)
    assert [e.payload for e in entries] == [b"a"] + [b"p%d" % i for i in range(20)]
    await cursor.close()
    await second.close()
    await second.store.close()


def fast_add_args_of(bookie) -> list[str]:  # type: ignore[no-untyped-def]
    args = bookie.extra_args
    i = args.index("--fast-add-port")
    return args[i : i + 2]
