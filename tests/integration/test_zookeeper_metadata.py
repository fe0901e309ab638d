"""The ZooKeeper store against a real ZooKeeper that is stopped, restarted and unreachable."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

import pytest
from kazoo.client import KazooClient
from support.waiting import wait_for
from support.zookeeper import ZooKeeperServer, free_port

from magnetar.zk import open_metadata_store
from magnetar.zk.errors import ConnectionLoss
from magnetar.zk.recipes import LeaderElection, OwnershipLock
from magnetar.zk.store import Notification, NotificationType, SessionEvent
from magnetar.zk.zookeeper import ZooKeeperMetadataStore, parse_connect_string

# The restart tests give the session a minute: ZooKeeper restores sessions from its log
# with a fresh timeout, but a loaded 2-core machine once kept a restarted server from
# answering a reconnect for over 15 s, and the session expired on it (a CI run).
RESTART_SESSION_MS = 60_000


def test_parse_connect_string() -> None:
    assert parse_connect_string("zk://a:1,b:2/x/y") == ("a:1,b:2", "/x/y")
    assert parse_connect_string("zk://a:1") == ("a:1", "")
    assert parse_connect_string("a:1/") == ("a:1", "")
    with pytest.raises(ValueError):
        parse_connect_string("zk:///chroot")


async def test_server_restart_suspends_then_reconnects_same_session(
    zookeeper_server_factory: Callable[..., ZooKeeperServer],
) -> None:
    server = zookeeper_server_factory(max_session_timeout_ms=RESTART_SESSION_MS)
    store = await ZooKeeperMetadataStore.connect(
        server.url, session_timeout_ms=RESTART_SESSION_MS, operation_timeout_ms=5_000
    )
    writer = await ZooKeeperMetadataStore.connect(server.url, session_timeout_ms=RESTART_SESSION_MS)
    try:
        events: list[SessionEvent] = []
        seen: list[Notification] = []
        store.add_session_listener(events.append)
        store.add_listener(seen.append)
        await store.put("/restart/data", b"kept")
        await store.put("/restart/mine", b"", ephemeral=True)
        session_id = store.session_id
        assert await store.get("/restart/data") is not None  # sets a watch

        await asyncio.to_thread(server.stop)
        await wait_for(lambda: SessionEvent.SUSPENDED in events, what="SUSPENDED")
        assert not store.connected
        with pytest.raises(ConnectionLoss) as raised:
            await store.get("/restart/data")
        assert raised.value.retriable
        with pytest.raises(ConnectionLoss):
            await store.put("/restart/during-outage", b"")

        await asyncio.to_thread(server.start)
        # A bound, not a wait: a loaded 2-core machine took over 20 s to restart the JVM and
        # let kazoo back in (seen with two CPU hogs beside the suite).
        assert store.session_timeout_ms == RESTART_SESSION_MS
        await wait_for(
            lambda: SessionEvent.RECONNECTED in events, timeout_s=120, what="RECONNECTED"
        )
        assert SessionEvent.LOST not in events
        assert store.session_id == session_id
        got = await store.get("/restart/data")
        assert got is not None
        assert got.value == b"kept"
        stat = await store.exists("/restart/mine")
        assert stat is not None  # the session survived, so did its ephemeral node
        assert stat.ephemeral_owner == session_id
        assert await store.exists("/restart/during-outage") is None

        # Watches were re-armed after the reconnect.
        await wait_for(lambda: writer.connected, timeout_s=120, what="writer reconnected")
        await writer.put("/restart/data", b"changed")
        await wait_for(
            lambda: Notification(NotificationType.MODIFIED, "/restart/data") in seen,
            what="notification after reconnect",
        )
    finally:
        await store.close()
        await writer.close()


async def test_recipes_ride_out_a_server_restart(
    zookeeper_server_factory: Callable[..., ZooKeeperServer],
) -> None:
    server = zookeeper_server_factory(max_session_timeout_ms=RESTART_SESSION_MS)
    store = await ZooKeeperMetadataStore.connect(server.url, session_timeout_ms=RESTART_SESSION_MS)
    leadership: list[bool] = []
    lost: list[bool] = []
    election = LeaderElection(store, "/leader", b"me", on_change=leadership.append)
    lock = OwnershipLock(store, "/bundle", b"me", on_lost=lambda: lost.append(True))
    try:
        await election.start()
        await election.wait_for_leadership(10)
        await lock.acquire()

        await asyncio.to_thread(server.stop)
        await wait_for(lambda: not election.is_leader, what="leader steps down on SUSPENDED")
        await asyncio.to_thread(server.start)
        await election.wait_for_leadership(120)
        assert leadership == [True, False, True]
        assert lock.is_held
        assert lost == []
        stat = await store.exists("/bundle")
        assert stat is not None
        assert stat.ephemeral_owner == store.session_id
    finally:
        await lock.release()
        await election.resign()
        await store.close()


async def test_expired_session_is_not_silently_replaced(
    zookeeper_server: ZooKeeperServer,
) -> None:
    url = f"{zookeeper_server.url}/exp-{uuid.uuid4().hex[:8]}"
    store = await ZooKeeperMetadataStore.connect(url, session_timeout_ms=4_000)
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    old_session = store.session_id
    await store.force_expire()
    await wait_for(lambda: SessionEvent.LOST in events, what="LOST")
    # kazoo would open a new session on its own; the store must not (owners reopen).
    await wait_for(lambda: store._client is not None and not store._client.connected)
    assert store.session_id == old_session
    assert events.count(SessionEvent.LOST) == 1
    assert SessionEvent.RECONNECTED not in events
    await store.close()


async def test_chroot_is_created_and_isolates(zookeeper_server: ZooKeeperServer) -> None:
    root = f"/iso-{uuid.uuid4().hex[:8]}"
    a = await open_metadata_store(f"{zookeeper_server.url}{root}/a", session_timeout_ms=4_000)
    b = await open_metadata_store(f"{zookeeper_server.url}{root}/b", session_timeout_ms=4_000)
    top = await open_metadata_store(zookeeper_server.url, session_timeout_ms=4_000)
    try:
        await a.put("/x", b"in-a")
        assert await b.get("/x") is None
        got = await top.get(f"{root}/a/x")
        assert got is not None
        assert got.value == b"in-a"
        assert await top.children(root) == ["a", "b"]
    finally:
        for store in (a, b, top):
            await store.close()


async def test_unreachable_server_fails_with_connection_loss() -> None:
    port = free_port()  # nothing listens there
    with pytest.raises(ConnectionLoss):
        await ZooKeeperMetadataStore.connect(
            f"zk://127.0.0.1:{port}", session_timeout_ms=2_000, connect_timeout_ms=1_000
        )


async def test_a_cancelled_connect_stops_its_client_at_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # SIGTERM to a broker still waiting for ZooKeeper cancels this connect; the client must
    # stop then, not when the connect timeout ends, or the process cannot exit until it does.
    from magnetar.zk import zookeeper

    stopped: list[object] = []
    real_stop = zookeeper._stop_quietly

    def recording_stop(client: KazooClient) -> None:
        real_stop(client)
        stopped.append(client)

    monkeypatch.setattr(zookeeper, "_stop_quietly", recording_stop)
    caplog.set_level(logging.WARNING, logger="kazoo.client")
    task = asyncio.create_task(
        ZooKeeperMetadataStore.connect(f"zk://127.0.0.1:{free_port()}", connect_timeout_ms=600_000)
    )
    await wait_for(lambda: "Connection refused" in caplog.text, what="a refused attempt")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_for(lambda: stopped, timeout_s=30, what="the client stopped")
