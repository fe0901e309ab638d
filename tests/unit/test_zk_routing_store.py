"""``RoutingMetadataStore``: each path in the store that owns it (``/admin`` in the
configuration store but ``/admin/local-policies``; everything else local), the root listed
from both, the local store's session as the session, and a lost configuration session
reopened while the local one keeps serving."""

from __future__ import annotations

import pytest
from support.autojump import AutojumpClock
from support.waiting import wait_for

from magnetar.zk.errors import ConnectionLoss, StoreClosed
from magnetar.zk.memory import MemoryMetadataServer
from magnetar.zk.routing import DEFAULT_ROUTER, RoutingMetadataStore
from magnetar.zk.store import MetadataStore, Notification, NotificationType, SessionEvent


def _pair() -> tuple[MemoryMetadataServer, MemoryMetadataServer]:
    return MemoryMetadataServer(), MemoryMetadataServer(first_session_id=500)


@pytest.mark.parametrize(
    ("path", "configuration"),
    [
        ("/admin", True),
        ("/admin/clusters/east", True),
        ("/admin/policies/t/ns", True),
        ("/admin/partitioned-topics/t/ns/persistent/x", True),
        ("/admin/topic-policies/t/ns/persistent/x", True),
        ("/admin/local-policies/t/ns", False),
        ("/administrator", False),
        ("/managed-ledgers/t/ns/persistent/x", False),
        ("/namespace/t/ns/0x00000000_0xffffffff", False),
        ("/ledgers/available/b1", False),
        ("/loadbalance/brokers/b", False),
        ("/", False),
    ],
)
def test_the_routing_rule(path: str, configuration: bool) -> None:
    assert DEFAULT_ROUTER.is_configuration(path) is configuration


async def test_paths_land_in_their_store() -> None:
    local, config = _pair()
    store = RoutingMetadataStore(local.connect(), config.connect())
    await store.put("/admin/policies/acme", b"{}")
    await store.put("/admin/local-policies/acme/ns", b"local")
    await store.put("/managed-ledgers/acme/ns/persistent/t", b"ml")
    assert "/admin/policies/acme" in config.nodes and "/admin/policies/acme" not in local.nodes
    assert "/admin/local-policies/acme/ns" in local.nodes
    assert "/admin/local-policies/acme/ns" not in config.nodes
    assert "/managed-ledgers/acme/ns/persistent/t" in local.nodes
    got = await store.get("/admin/policies/acme")
    assert got is not None and got.value == b"{}"
    assert await store.children("/admin") == ["policies"]  # the configuration store's view
    assert await store.children("/") == ["admin", "managed-ledgers"]  # both stores
    await store.delete_recursive("/admin/policies")
    assert "/admin/policies" not in config.nodes
    await store.close()


async def test_two_clusters_share_the_configuration_and_nothing_else() -> None:
    config = MemoryMetadataServer(first_session_id=500)
    east = RoutingMetadataStore(MemoryMetadataServer().connect(), config.connect())
    west = RoutingMetadataStore(MemoryMetadataServer().connect(), config.connect())
    await east.put("/admin/clusters/east", b"e")
    await east.put("/namespace/t/ns/b", b"owner", ephemeral=True)
    assert await west.exists("/admin/clusters/east") is not None
    assert await west.exists("/namespace/t/ns/b") is None
    seen: list[Notification] = []
    west.add_listener(seen.append)
    assert await west.get("/admin/clusters/east") is not None  # watch it
    await east.put("/admin/clusters/east", b"e2")
    await wait_for(
        lambda: Notification(NotificationType.MODIFIED, "/admin/clusters/east") in seen,
        what="the change seen through the other cluster's store",
    )
    await east.close()
    await west.close()


async def test_the_session_is_the_local_one() -> None:
    local, config = _pair()
    store = RoutingMetadataStore(local.connect(), config.connect())
    events: list[SessionEvent] = []
    store.add_session_listener(events.append)
    assert store.session_id == store.local.session_id
    put = await store.put("/namespace/t/ns/b", b"", ephemeral=True)
    assert put.stat.ephemeral_owner == store.session_id
    local.expire_session(store.session_id)
    await wait_for(lambda: SessionEvent.LOST in events, what="LOST of the local session")
    await store.close()


async def test_a_lost_configuration_session_is_reopened() -> None:
    async with AutojumpClock() as clock:
        local, config = _pair()
        opened: list[MetadataStore] = []
        failures = [2]  # the service refuses the first two attempts

        async def reopen() -> MetadataStore:
            if failures[0]:
                failures[0] -= 1
                raise ConnectionLoss("not yet")
            s = config.connect()
            opened.append(s)
            return s

        first = config.connect()
        store = RoutingMetadataStore(
            local.connect(), first, reopen_configuration=reopen, clock=clock
        )
        events: list[SessionEvent] = []
        store.add_session_listener(events.append)
        await store.put("/admin/policies/t", b"1")
        config.expire_session(first.session_id)
        with pytest.raises(ConnectionLoss):  # retriable: the admin API answers 503
            await store.get("/admin/policies/t")
        assert await store.get("/loadbalance/x") is None  # the local store still serves
        assert not store.connected
        await wait_for(lambda: store.configuration_sessions == 2, what="the reopen")
        got = await store.get("/admin/policies/t")
        assert got is not None and got.value == b"1"
        assert store.connected
        assert events == []  # the broker's session (the local one) never changed
        await store.close()
        assert opened and opened[0].session_id not in config.live_sessions


async def test_close_closes_both() -> None:
    local, config = _pair()
    store = RoutingMetadataStore(local.connect(), config.connect())
    await store.close()
    await store.close()
    assert local.live_sessions == set() and config.live_sessions == set()
    with pytest.raises(StoreClosed):
        await store.get("/admin/x")
