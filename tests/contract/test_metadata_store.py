"""The ``MetadataStore`` contract, run against every implementation.

Implementations (``support.metadata_backends``): real ZooKeeper, embedded in-process,
embedded over TCP, memory, and the fault wrapper over memory. Every rule in the
``magnetar.zk.store`` docstring is checked here.
"""

from __future__ import annotations

import asyncio

import pytest
from support.metadata_backends import MetadataBackend
from support.waiting import wait_for

from magnetar.zk.errors import (
    AlreadyExists,
    BadVersion,
    InvalidPath,
    NotEmpty,
    NotFound,
    SessionLost,
    StoreClosed,
)
from magnetar.zk.store import (
    CREATE_ONLY,
    MetadataStore,
    Notification,
    NotificationType,
    SessionEvent,
)


async def test_put_get_and_version_counting(metadata_backend: MetadataBackend) -> None:
    store = await metadata_backend.open()
    created = await store.put("/cfg/a", b"one")
    assert created.path == "/cfg/a"
    assert created.stat.version == 0
    assert not created.stat.ephemeral
    got = await store.get("/cfg/a")
    assert got is not None
    assert got.value == b"one"
    assert got.stat.version == 0
    assert got.stat.created_ms > 0
    updated = await store.put("/cfg/a", b"two")
    assert updated.stat.version == 1
    again = await store.get("/cfg/a")
    assert again is not None
    assert (again.value, again.stat.version) == (b"two", 1)
    assert again.stat.modified_ms >= again.stat.created_ms
    stat = await store.exists("/cfg/a")
    assert stat is not None
    assert stat.version == 1


async def test_missing_nodes(metadata_backend: MetadataBackend) -> None:
    store = await metadata_backend.open()
    assert await store.get("/nope") is None
    assert await store.exists("/nope") is None
    assert await store.children("/nope") == []
    with pytest.raises(NotFound):
        await store.delete("/nope")


async def test_parents_are_created_empty_and_persistent(
    metadata_backend: MetadataBackend,
) -> None:
    store = await metadata_backend.open()
    await store.put("/p/q/r", b"leaf")
    for parent in ("/p", "/p/q"):
        got = await store.get(parent)
        assert got is not None, parent
        assert got.value == b""
        assert not got.stat.ephemeral
    assert await store.children("/p") == ["q"]
    stat = await store.exists("/p/q")
    assert stat is not None
    assert stat.num_children == 1


async def test_create_only(metadata_backend: MetadataBackend) -> None:
    store = await metadata_backend.open()
    first = await store.put("/co/x", b"1", expected_version=CREATE_ONLY)
    assert first.stat.version == 0
    with pytest.raises(AlreadyExists):
        await store.put("/co/x", b"2", expected_version=CREATE_ONLY)
    got = await store.get("/co/x")
    assert got is not None
    assert got.value == b"1"


async def test_compare_and_set(metadata_backend: MetadataBackend) -> None:
    store = await metadata_backend.open()
    await store.put("/cas/x", b"v0")
    result = await store.put("/cas/x", b"v1", expected_version=0)
    assert result.stat.version == 1
    with pytest.raises(BadVersion):
        await store.put("/cas/x", b"stale", expected_version=0)
    got = await store.get("/cas/x")
    assert got is not None
    assert got.value == b"v1"
    with pytest.raises(NotFound):
        await store.put("/cas/missing", b"x", expected_version=3)
    assert await store.exists("/cas/missing") is None


async def test_delete_rules(metadata_backend: MetadataBackend) -> None:
    store = await metadata_backend.open()
    await store.put("/d/parent/child", b"c")
    with pytest.raises(NotEmpty):
        await store.delete("/d/parent")
    await store.put("/d/parent/child", b"c2")  # version 1
    with pytest.raises(BadVersion):
        await store.delete("/d/parent/child", expected_version=0)
    await store.delete("/d/parent/child", expected_version=1)
    assert await store.exists("/d/parent/child") is None
    await store.delete("/d/parent")
    assert await store.children("/d") == []
    await store.put("/d/tree/a/b", b"")
    await store.put("/d/tree/c", b"")
    await store.delete_recursive("/d/tree")
    assert await store.exists("/d/tree") is None
    await store.delete_recursive("/d/absent")  # absent: ignored


@pytest.mark.parametrize("bad", ["relative", "/trailing/", "/double//slash", ""])
async def test_invalid_paths(metadata_backend: MetadataBackend, bad: str) -> None:
    store = await metadata_backend.open()
    with pytest.raises(InvalidPath):
        await store.put(bad, b"x")
    with pytest.raises(InvalidPath):
        await store.get(bad)


async def test_children_sorted(metadata_backend: MetadataBackend) -> None:
    store = await metadata_backend.open()
    for name in ["delta", "alpha", "charlie", "bravo"]:
        await store.put(f"/kids/{name}", name.encode())
    assert await store.children("/kids") == ["alpha", "bravo", "charlie", "delta"]


async def test_sequential_names(metadata_backend: MetadataBackend) -> None:
    store = await metadata_backend.open()
    other = await metadata_backend.open()
    paths = []
    for i in range(3):
        s = store if i % 2 == 0 else other
        result = await s.put("/seq/item-", str(i).encode(), sequential=True)
        paths.append(result.path)
    suffixes = []
    for path in paths:
        assert path.startswith("/seq/item-")
        suffix = path.removeprefix("/seq/item-")
        assert len(suffix) == 10
        assert suffix.isdigit()
        suffixes.append(int(suffix))
    assert suffixes == sorted(suffixes)
    assert len(set(suffixes)) == 3
    assert await store.children("/seq") == [p.rpartition("/")[2] for p in paths]
    got = await other.get(paths[0])
    assert got is not None
    assert got.value == b"0"


async def test_ephemeral_nodes_belong_to_their_session(
    metadata_backend: MetadataBackend,
) -> None:
    owner = await metadata_backend.open()
    observer = await metadata_backend.open()
    assert owner.session_id != observer.session_id
    result = await owner.put("/eph/node", b"mine", ephemeral=True)
    assert result.stat.ephemeral_owner == owner.session_id
    stat = await observer.exists("/eph/node")
    assert stat is not None
    assert stat.ephemeral
    assert stat.ephemeral_owner == owner.session_id
    with pytest.raises(InvalidPath):
        await owner.put("/eph/node/child", b"")
    seq = await owner.put("/eph/seq-", b"", ephemeral=True, sequential=True)
    await owner.close()
    with pytest.raises(StoreClosed):
        await owner.get("/eph/node")
    assert await observer.exists("/eph/node") is None
    assert await observer.exists(seq.path) is None
    assert await observer.children("/eph") == []


async def test_concurrent_cas_has_exactly_one_winner(
    metadata_backend: MetadataBackend,
) -> None:
    stores = [await metadata_backend.open() for _ in range(3)]
    await stores[0].put("/race/counter", b"0")

    async def attempt(i: int) -> bool:
        try:
            await stores[i % 3].put("/race/counter", str(i).encode(), expected_version=0)
        except BadVersion:
            return False
        return True

    outcomes = await asyncio.gather(*(attempt(i) for i in range(24)))
    assert outcomes.count(True) == 1
    winner = outcomes.index(True)
    got = await stores[1].get("/race/counter")
    assert got is not None
    assert got.value == str(winner).encode()
    assert got.stat.version == 1


async def test_concurrent_create_only_has_exactly_one_winner(
    metadata_backend: MetadataBackend,
) -> None:
    stores = [await metadata_backend.open() for _ in range(3)]

    async def attempt(i: int) -> bool:
        try:
            await stores[i % 3].put(
                "/race/owner", str(i).encode(), expected_version=CREATE_ONLY, ephemeral=True
            )
        except AlreadyExists:
            return False
        return True

    outcomes = await asyncio.gather(*(attempt(i) for i in range(12)))
    assert outcomes.count(True) == 1


async def test_session_expiry_removes_ephemerals_and_reports_lost(
    metadata_backend: MetadataBackend,
) -> None:
    doomed = await metadata_backend.open()
    survivor = await metadata_backend.open()
    events: list[SessionEvent] = []
    doomed.add_session_listener(events.append)
    await doomed.put("/exp/ephemeral", b"x", ephemeral=True)
    await doomed.put("/exp/persistent", b"y")
    assert await survivor.exists("/exp/ephemeral") is not None

    await metadata_backend.expire(doomed)

    await wait_for(lambda: SessionEvent.LOST in events, what="LOST not reported")
    assert events[-1] is SessionEvent.LOST
    assert await survivor.exists("/exp/ephemeral") is None
    assert await survivor.exists("/exp/persistent") is not None
    with pytest.raises(SessionLost):
        await doomed.get("/exp/persistent")
    with pytest.raises(SessionLost):
        await doomed.put("/exp/other", b"")


async def test_notifications_across_sessions(metadata_backend: MetadataBackend) -> None:
    writer = await metadata_backend.open()
    watcher = await metadata_backend.open()
    seen: list[Notification] = []
    watcher.add_listener(seen.append)
    await writer.put("/w/data", b"0")
    await writer.put("/w/dir/first", b"")

    assert await watcher.get("/w/data") is not None
    assert await watcher.children("/w/dir") == ["first"]
    assert await watcher.exists("/w/later") is None

    def saw(kind: NotificationType, path: str) -> bool:
        return Notification(kind, path) in seen

    await writer.put("/w/data", b"1")
    await wait_for(lambda: saw(NotificationType.MODIFIED, "/w/data"), what="MODIFIED")
    # Watches are re-armed: a second change is seen too.
    count = sum(1 for n in seen if n == Notification(NotificationType.MODIFIED, "/w/data"))
    await writer.put("/w/data", b"2")
    await wait_for(
        lambda: seen.count(Notification(NotificationType.MODIFIED, "/w/data")) > count,
        what="second MODIFIED (watch re-armed)",
    )
    await writer.put("/w/dir/second", b"")
    await wait_for(lambda: saw(NotificationType.CHILDREN_CHANGED, "/w/dir"), what="CHILD")
    await writer.put("/w/later", b"")
    await wait_for(lambda: saw(NotificationType.CREATED, "/w/later"), what="CREATED")
    await writer.delete("/w/data")
    await wait_for(lambda: saw(NotificationType.DELETED, "/w/data"), what="DELETED")


async def test_listener_removal(metadata_backend: MetadataBackend) -> None:
    writer = await metadata_backend.open()
    watcher = await metadata_backend.open()
    removed: list[Notification] = []
    kept: list[Notification] = []
    watcher.add_listener(removed.append)
    watcher.add_listener(kept.append)
    watcher.remove_listener(removed.append)
    await writer.put("/rm/x", b"0")
    await watcher.get("/rm/x")
    await writer.put("/rm/x", b"1")
    await wait_for(lambda: bool(kept), what="notification")
    assert removed == []


async def test_close_is_idempotent_and_final(metadata_backend: MetadataBackend) -> None:
    store: MetadataStore = await metadata_backend.open()
    await store.put("/closing/x", b"")
    await store.close()
    await store.close()
    with pytest.raises(StoreClosed):
        await store.put("/closing/y", b"")
    other = await metadata_backend.open()
    assert await other.exists("/closing/x") is not None


async def test_pipelined_requests_of_one_session_apply_in_order(
    metadata_backend: MetadataBackend,
) -> None:
    store = await metadata_backend.open()
    await store.put("/fifo/x", b"0")
    # Issued together, without awaiting each other: each CAS only succeeds if every earlier
    # request of this session was applied first (ZooKeeper's FIFO client order).
    results = await asyncio.gather(
        *(store.put("/fifo/x", str(v + 1).encode(), expected_version=v) for v in range(20))
    )
    assert [r.stat.version for r in results] == list(range(1, 21))
    got = await store.get("/fifo/x")
    assert got is not None
    assert got.value == b"20"
