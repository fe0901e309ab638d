"""Recipes (leader election, ownership lock, id allocation) over real ZooKeeper, the embedded
store over TCP, and memory."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import pytest
from support.metadata_backends import MetadataBackend
from support.waiting import wait_for

from magnetar.zk import paths
from magnetar.zk.errors import AlreadyExists, LockBusy, MetadataError
from magnetar.zk.recipes import IdAllocator, LeaderElection, OwnershipLock
from magnetar.zk.store import MetadataStore

RECIPE_BACKENDS = ("zookeeper", "embedded-remote", "memory")


@pytest.fixture(params=RECIPE_BACKENDS)
def backend(
    request: pytest.FixtureRequest,
    metadata_backend_factory: Callable[[str], MetadataBackend],
) -> MetadataBackend:
    return metadata_backend_factory(request.param)


async def test_two_contenders_one_leader_and_failover_on_close(backend: MetadataBackend) -> None:
    s1, s2 = await backend.open(), await backend.open()
    changes: list[tuple[str, bool]] = []
    e1 = LeaderElection(s1, "/election", b"one", on_change=lambda b: changes.append(("one", b)))
    e2 = LeaderElection(s2, "/election", b"two", on_change=lambda b: changes.append(("two", b)))
    await e1.start()
    await e1.wait_for_leadership(10)
    await e2.start()
    await wait_for(lambda: e2.node is not None)
    assert e1.is_leader
    assert not e2.is_leader
    with pytest.raises(TimeoutError):
        await e2.wait_for_leadership(0.2)
    assert await e2.leader_value() == b"one"

    await e1.resign()
    await e2.wait_for_leadership(10)
    assert e2.is_leader
    assert not e1.is_leader
    assert await e1.leader_value() == b"two"
    assert changes == [("one", True), ("one", False), ("two", True)]
    await e2.close()


async def test_leader_failover_on_session_expiry(backend: MetadataBackend) -> None:
    s1, s2 = await backend.open(), await backend.open()
    e1 = LeaderElection(s1, paths.LOADBALANCE_LEADER, b"broker-1")
    e2 = LeaderElection(s2, paths.LOADBALANCE_LEADER, b"broker-2")
    await e1.start()
    await e1.wait_for_leadership(10)
    await e2.start()
    await backend.expire(s1)
    await e2.wait_for_leadership(15)
    await wait_for(lambda: not e1.is_leader, what="expired leader steps down")
    assert await e2.leader_value() == b"broker-2"
    await e2.resign()


async def test_a_deposed_leader_follows(backend: MetadataBackend) -> None:
    """Another process deletes the leader's node (a follower deposing a leader it found
    unresponsive): the next contender leads, and the old leader, alive after all, follows
    instead of leading too."""
    s1, s2 = await backend.open(), await backend.open()
    e1 = LeaderElection(s1, "/deposed", b"one")
    e2 = LeaderElection(s2, "/deposed", b"two")
    await e1.start()
    await e1.wait_for_leadership(10)
    await e2.start()
    current = await e2.current_leader()
    assert current is not None and current[1] == b"one"
    await s2.delete(current[0], expected_version=current[2])
    await e2.wait_for_leadership(10)
    await wait_for(lambda: not e1.is_leader, what="the deposed leader follows")
    await wait_for(lambda: e1.node is not None and e1.node != current[0])
    assert await e1.leader_value() == b"two"
    await e1.resign()
    await e2.resign()


async def test_only_the_predecessor_matters(backend: MetadataBackend) -> None:
    stores = [await backend.open() for _ in range(3)]
    elections = [LeaderElection(s, "/el3", str(i).encode()) for i, s in enumerate(stores)]
    for election in elections:
        await election.start()
    await elections[0].wait_for_leadership(10)
    await elections[1].resign()  # the middle one leaves: nobody new leads
    assert elections[0].is_leader
    assert not elections[2].is_leader
    await elections[0].resign()
    await elections[2].wait_for_leadership(10)
    assert [e.is_leader for e in elections] == [False, False, True]
    await elections[2].resign()


async def test_ownership_lock_is_exclusive(backend: MetadataBackend) -> None:
    s1, s2 = await backend.open(), await backend.open()
    path = paths.bundle_ownership("public", "default", "0x00000000_0x40000000")
    lock1 = OwnershipLock(s1, path, b"broker-1")
    lock2 = OwnershipLock(s2, path, b"broker-2")
    await lock1.acquire()
    assert lock1.is_held
    with pytest.raises(LockBusy) as raised:
        await lock2.acquire()
    assert isinstance(raised.value, AlreadyExists)
    assert raised.value.owner_value == b"broker-1"
    assert not lock2.is_held
    await lock1.acquire()  # re-acquiring our own lock is fine
    await lock1.release()
    assert not lock1.is_held
    await lock2.acquire()
    got = await s1.get(path)
    assert got is not None
    assert got.value == b"broker-2"
    assert got.stat.ephemeral_owner == s2.session_id
    await lock2.release()
    assert await s1.exists(path) is None


async def test_ownership_lost_with_session_and_recreated_if_deleted(
    backend: MetadataBackend,
) -> None:
    s1, s2 = await backend.open(), await backend.open()
    lost: list[str] = []
    lock1 = OwnershipLock(s1, "/own/topic", b"one", on_lost=lambda: lost.append("one"))
    await lock1.acquire()

    # Someone deletes our node behind our back: the lock puts it back.
    await s2.delete("/own/topic")
    await wait_for(lambda: _owned_by(s2, "/own/topic", s1.session_id), what="re-created")
    assert lock1.is_held

    await backend.expire(s1)
    await wait_for(lambda: lost == ["one"], timeout_s=15, what="on_lost")
    assert not lock1.is_held
    lock2 = OwnershipLock(s2, "/own/topic", b"two")
    await wait_for(lambda: _absent(s2, "/own/topic"), what="ephemeral gone")
    await lock2.acquire()
    assert lock2.is_held
    await lock2.release()


async def _owned_by(store: MetadataStore, path: str, session_id: int) -> bool:
    stat = await store.exists(path)
    return stat is not None and stat.ephemeral_owner == session_id


async def _absent(store: MetadataStore, path: str) -> bool:
    return await store.exists(path) is None


async def test_id_allocator_unique_across_stores(backend: MetadataBackend) -> None:
    stores = [await backend.open() for _ in range(4)]
    allocators = [IdAllocator(s, block_size=7) for s in stores]

    async def take(allocator: IdAllocator, n: int) -> list[int]:
        return [await allocator.next_id() for _ in range(n)]

    results = await asyncio.gather(
        *(take(a, 40) for a in allocators), *(take(a, 10) for a in allocators)
    )
    ids = [i for chunk in results for i in chunk]
    assert len(ids) == 200
    assert len(set(ids)) == 200
    assert min(ids) >= 0
    assert all(0 <= i < 2**63 for i in ids)
    assert sum(a.statistics().blocks_claimed for a in allocators) >= 200 // 7
    got = await stores[0].get(paths.LEDGER_IDGEN)
    assert got is not None
    assert int(got.value) >= max(ids) + 1
    # A fresh allocator (a restarted process) continues after every claimed block.
    fresh = IdAllocator(await backend.open(), block_size=7)
    assert await fresh.next_id() > max(ids)


async def test_id_allocator_min_id_orders_ids_across_allocators(backend: MetadataBackend) -> None:
    """A managed ledger moving between brokers asks each one's allocator for an id above its
    last ledger: every id it gets is larger than the one before, although each allocator
    still holds an older block."""
    allocators = [IdAllocator(await backend.open(), block_size=100) for _ in range(3)]
    for a in allocators:
        await a.next_id()  # each holds a block now: [0,100), [100,200), [200,300)
    rng = random.Random(5)
    last = -1
    owned: list[int] = []
    for _ in range(60):
        allocator = rng.choice(allocators)
        for _ in range(rng.randrange(3)):  # other ledgers created meanwhile on that broker
            await allocator.next_id()
        got = await allocator.next_id(last)
        assert got > last
        last = got
        owned.append(got)
    assert owned == sorted(set(owned))


async def test_id_allocator_min_id_above_the_counter(backend: MetadataBackend) -> None:
    store = await backend.open()
    allocator = IdAllocator(store, block_size=10)
    assert await allocator.next_id() == 0
    # an id above everything the counter handed out (a counter reset, or an id from elsewhere)
    assert await allocator.next_id(min_id=1234) == 1235
    assert await allocator.next_id() == 1236
    got = await store.get(paths.LEDGER_IDGEN)
    assert got is not None and int(got.value) == 1245
    other = IdAllocator(await backend.open(), block_size=10)
    assert await other.next_id() == 1245  # the counter stays above every id returned
    with pytest.raises(MetadataError):
        await allocator.next_id(min_id=IdAllocator.ID_MAX)


async def test_id_allocator_min_id_concurrent_takers_stay_unique(
    backend: MetadataBackend,
) -> None:
    allocator = IdAllocator(await backend.open(), block_size=5)
    floors = [i * 3 for i in range(40)]
    got = await asyncio.gather(*(allocator.next_id(f) for f in floors))
    assert all(g > f for g, f in zip(got, floors, strict=True))
    assert len(set(got)) == len(got)
