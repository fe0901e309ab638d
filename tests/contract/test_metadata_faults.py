"""The fault-injecting wrapper: each fault kind, over the in-memory store (and the contract
suite in ``test_metadata_store.py`` shows the wrapper is transparent without faults)."""

from __future__ import annotations

import asyncio
import re

import pytest
from support.waiting import wait_for

from magnetar.zk.errors import BadVersion, ConnectionLoss, NotFound, SessionLost
from magnetar.zk.faults import FaultInjectingStore
from magnetar.zk.memory import MemoryMetadataServer
from magnetar.zk.store import Notification, SessionEvent


@pytest.fixture
def server() -> MemoryMetadataServer:
    return MemoryMetadataServer()


async def test_fail_next_by_prefix_once(server: MemoryMetadataServer) -> None:
    store = FaultInjectingStore(server.connect())
    store.fail_next("/ledgers", ConnectionLoss)
    await store.put("/other/x", b"")  # does not match
    await store.put("/ledgersX", b"")  # a prefix of segments, not of characters
    with pytest.raises(ConnectionLoss) as raised:
        await store.put("/ledgers/1", b"a")
    assert raised.value.path == "/ledgers/1"
    assert await store.get("/ledgers/1") is None  # failed before it took effect
    await store.put("/ledgers/1", b"b")  # only the next op failed
    stats = store.statistics()
    assert stats.injected_failures == 1
    assert stats.pending_faults == 0


async def test_fail_by_regex_operation_and_count(server: MemoryMetadataServer) -> None:
    store = FaultInjectingStore(server.connect())
    store.fail_next(re.compile(r"/cursor-\d+$"), BadVersion, operations={"put"}, count=2)
    await store.get("/m/cursor-1")  # get is not in the fault's operations
    for _ in range(2):
        with pytest.raises(BadVersion):
            await store.put("/m/cursor-1", b"")
    await store.put("/m/cursor-1", b"")
    await store.put("/m/cursor-x", b"")


async def test_fail_after_the_op_took_effect(server: MemoryMetadataServer) -> None:
    store = FaultInjectingStore(server.connect())
    store.fail_next("/amb", ConnectionLoss, after=True)
    with pytest.raises(ConnectionLoss):
        await store.put("/amb/x", b"landed")
    got = await store.get("/amb/x")
    assert got is not None
    assert got.value == b"landed"


async def test_error_instance_and_factory(server: MemoryMetadataServer) -> None:
    store = FaultInjectingStore(server.connect())
    store.fail_next("/a", NotFound("custom", path="/a"))
    store.fail_next("/b", lambda path: RuntimeError(f"boom {path}"))
    with pytest.raises(NotFound, match="custom"):
        await store.exists("/a")
    with pytest.raises(RuntimeError, match="boom /b"):
        await store.children("/b")


async def test_latency_delays_every_op(server: MemoryMetadataServer) -> None:
    store = FaultInjectingStore(server.connect())
    task = asyncio.create_task(store.get("/x"))
    await asyncio.sleep(0)  # one loop step: an undelayed memory op is done by now
    assert task.done()
    store.set_latency(0.05)
    task = asyncio.create_task(store.get("/x"))
    await asyncio.sleep(0)
    assert not task.done()
    assert await task is None
    store.set_latency(0)


async def test_drop_session(server: MemoryMetadataServer) -> None:
    store = FaultInjectingStore(server.connect())
    observer = server.connect()
    events: list[SessionEvent] = []
    notes: list[Notification] = []
    store.add_session_listener(events.append)
    store.add_listener(notes.append)
    await store.put("/own/eph", b"", ephemeral=True)
    await store.get("/own/eph")
    await store.drop_session()
    assert events == [SessionEvent.LOST]
    assert await observer.exists("/own/eph") is None  # inner session ended
    with pytest.raises(SessionLost):
        await store.get("/own/eph")
    # barrier: another session's listener sees the change; the dropped one forwards nothing
    seen: list[Notification] = []
    server.connect().add_listener(seen.append)
    await observer.put("/own/other", b"")
    await wait_for(lambda: seen, what="the change notified to a live session")
    assert notes == []  # nothing forwarded after the drop
    assert store.statistics().session_dropped
    await store.close()


async def test_unknown_operation_rejected(server: MemoryMetadataServer) -> None:
    store = FaultInjectingStore(server.connect())
    with pytest.raises(ValueError):
        store.fail_next("/", ConnectionLoss, operations={"frobnicate"})
