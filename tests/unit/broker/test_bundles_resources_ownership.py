"""Bundles (pure), admin resources and ownership over the in-memory metadata store."""

from __future__ import annotations

import pytest
from support.waiting import wait_for

from magnetar.broker.namespace.bundles import BundleRange, NamespaceBundles, topic_hash
from magnetar.broker.namespace.ownership import NamespaceBundle, OwnerInfo, OwnershipCache
from magnetar.broker.namespace.resources import (
    PreconditionFailed,
    ResourceConflict,
    ResourceNotFound,
    Resources,
    TenantInfo,
)
from magnetar.zk import MemoryMetadataServer


def test_default_bundles_cover_hash_space_and_find_is_consistent() -> None:
    bundles = NamespaceBundles.default(4)
    assert [r.name for r in bundles.ranges] == [
        "0x00000000_0x40000000",
        "0x40000000_0x80000000",
        "0x80000000_0xc0000000",
        "0xc0000000_0xffffffff",
    ]
    for i in range(200):
        topic = f"persistent://public/default/t{i}"
        found = bundles.find(topic)
        assert found.contains(topic_hash(topic))
        assert sum(r.contains(topic_hash(topic)) for r in bundles.ranges) == 1


def test_last_bundle_includes_upper_bound_and_split_halves() -> None:
    bundles = NamespaceBundles.default(2)
    last = bundles.ranges[-1]
    assert last.contains(0xFFFFFFFF)
    split = bundles.split(bundles.ranges[0])
    assert len(split.ranges) == 3
    assert split.ranges[0] == BundleRange(0, 0x40000000)
    assert BundleRange.parse(split.ranges[1].name) == split.ranges[1]
    with pytest.raises(ValueError):
        bundles.split(BundleRange(0, 5))
    with pytest.raises(ValueError):
        NamespaceBundles((0, 10, 10, 0xFFFFFFFF))


async def test_tenant_namespace_partitioned_lifecycle() -> None:
    store = MemoryMetadataServer().connect()
    res = Resources(store, "standalone")
    await res.create_tenant("acme", TenantInfo([], ["standalone"]))
    with pytest.raises(ResourceConflict):
        await res.create_tenant("acme", TenantInfo())
    with pytest.raises(PreconditionFailed):
        await res.create_tenant("bad/name", TenantInfo())
    await res.create_namespace("acme", "orders")
    assert await res.list_namespaces("acme") == ["acme/orders"]
    assert len((await res.bundles("acme", "orders")).ranges) == 4
    with pytest.raises(ResourceConflict):
        await res.delete_tenant("acme")
    await res.create_partitioned("acme", "orders", "persistent", "t", 4)
    assert await res.get_partitions("acme", "orders", "persistent", "t") == 4
    assert await res.get_partitions("acme", "orders", "persistent", "other") == 0
    with pytest.raises(ResourceConflict):
        await res.create_partitioned("acme", "orders", "persistent", "t", 2)
    with pytest.raises(ResourceConflict):
        await res.delete_namespace("acme", "orders")
    await res.update_partitions("acme", "orders", "persistent", "t", 6)
    assert await res.list_partitioned("acme", "orders", "persistent") == [
        "persistent://acme/orders/t"
    ]
    await res.delete_partitioned("acme", "orders", "persistent", "t")
    policies = await res.update_policies("acme", "orders", {"message_ttl_in_seconds": 60})
    assert policies["message_ttl_in_seconds"] == 60
    await res.delete_namespace("acme", "orders")
    await res.delete_tenant("acme")
    with pytest.raises(ResourceNotFound):
        await res.get_tenant("acme")


async def test_ownership_is_exclusive_and_lost_with_the_session() -> None:
    server = MemoryMetadataServer()
    a_store, b_store = server.connect(), server.connect()
    a = OwnershipCache(a_store, OwnerInfo("pulsar://a:6650", "http://a:8080"))
    b = OwnershipCache(b_store, OwnerInfo("pulsar://b:6650", "http://b:8080"))
    bundle = NamespaceBundle("public", "default", NamespaceBundles.default().ranges[0])
    assert await a.try_acquire(bundle) == a.me
    assert await b.try_acquire(bundle) == a.me
    assert a.is_owned(bundle) and not b.is_owned(bundle)
    lost: list[list[NamespaceBundle]] = []
    a.add_lost_listener(lost.append)
    server.expire_session(a_store.session_id)
    await wait_for(lambda: lost, what="the lost-ownership listener")
    assert lost == [[bundle]]
    assert not a.is_owned(bundle)
    assert await b.try_acquire(bundle) == b.me
    await b.release(bundle)
    assert await b_store.exists(bundle.path) is None
