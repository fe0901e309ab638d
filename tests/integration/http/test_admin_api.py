"""Admin REST API over real HTTP: Pulsar's paths, JSON shapes and error codes.

The topic layer is a small in-memory ``TopicAdmin`` here; the full broker is exercised by
the compat and standalone tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from magnetar.broker.admin.http_api import AdminApi
from magnetar.broker.namespace.resources import ResourceNotFound, Resources, TenantInfo
from magnetar.zk import MemoryMetadataServer


class FakeTopics:
    def __init__(self) -> None:
        self.topics: dict[str, list[str]] = {}

    async def lookup_urls(
        self, topic: str, authoritative: bool = False, listener_name: str = ""
    ) -> tuple[str, str]:
        return "pulsar://localhost:6650", "http://localhost:8080"

    async def list_topics(self, tenant: str, namespace: str, domain: str) -> list[str]:
        prefix = f"{domain}://{tenant}/{namespace}/"
        return [t for t in self.topics if t.startswith(prefix)]

    async def create_topic(self, topic: str) -> None:
        self.topics[topic] = []

    async def delete_topic(self, topic: str, *, force: bool) -> None:
        if topic not in self.topics:
            raise ResourceNotFound("Topic not found")
        del self.topics[topic]

    async def delete_topic_schemas(self, topic: str) -> None:
        pass

    async def list_subscriptions(self, topic: str) -> list[str]:
        if topic not in self.topics:
            raise ResourceNotFound("Topic not found")
        return self.topics[topic]

    async def delete_subscription(self, topic: str, subscription: str, *, force: bool) -> None:
        self.topics[topic].remove(subscription)

    async def topic_stats(self, topic: str) -> dict[str, Any]:
        return {"subscriptions": {s: {"msgBacklog": 0} for s in self.topics[topic]}}

    async def unload_topic(self, topic: str) -> None:
        return None

    def metrics_text(self) -> str:
        return "".join(self.metrics_chunks())

    def metrics_chunks(self) -> list[str]:
        return ["pulsar_topics_count 0\n"]


@pytest.fixture
async def admin() -> AsyncIterator[tuple[str, FakeTopics]]:
    store = MemoryMetadataServer().connect()
    resources = Resources(store, "standalone")
    await resources.ensure_cluster("pulsar://localhost:6650", "http://localhost:8080")
    await resources.create_tenant("public", TenantInfo([], ["standalone"]))
    await resources.create_namespace("public", "default")
    topics = FakeTopics()
    runner = web.AppRunner(
        AdminApi(
            resources, topics, lookups=topics, admin=topics, metrics=topics.metrics_chunks
        ).app()
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", topics
    await runner.cleanup()


async def test_tenants_namespaces_and_topics_round_trip(admin: tuple[str, FakeTopics]) -> None:
    url, topics = admin
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/admin/v2/brokers/health") as r:
            assert r.status == 200 and await r.text() == "ok"
        async with http.get(f"{url}/admin/v2/clusters") as r:
            assert await r.json() == ["standalone"]
        async with http.put(f"{url}/admin/v2/tenants/acme", json={"adminRoles": ["ops"]}) as r:
            assert r.status == 204
        async with http.put(f"{url}/admin/v2/tenants/acme", json={}) as r:
            assert r.status == 409 and "already exists" in (await r.json())["reason"]
        async with http.get(f"{url}/admin/v2/tenants/acme") as r:
            assert await r.json() == {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
        async with http.put(f"{url}/admin/v2/namespaces/acme/orders") as r:
            assert r.status == 204
        async with http.get(f"{url}/admin/v2/namespaces/acme") as r:
            assert await r.json() == ["acme/orders"]
        async with http.get(f"{url}/admin/v2/namespaces/acme/orders/bundles") as r:
            assert (await r.json())["numBundles"] == 4
        base = f"{url}/admin/v2/persistent/acme/orders"
        async with http.put(f"{base}/p/partitions", data="4") as r:
            assert r.status == 204
        async with http.get(f"{base}/p/partitions") as r:
            assert (await r.json())["partitions"] == 4
        async with http.put(f"{base}/p/partitions", data="2") as r:
            assert r.status == 409
        async with http.put(f"{base}/p/partitions", data='"x"') as r:
            assert r.status == 400
        async with http.get(f"{base}/partitioned") as r:
            assert await r.json() == ["persistent://acme/orders/p"]
        async with http.put(f"{base}/plain") as r:
            assert r.status == 204
        assert "persistent://acme/orders/plain" in topics.topics
        async with http.put(f"{base}/plain") as r:
            assert r.status == 409
        async with http.get(base) as r:
            assert await r.json() == ["persistent://acme/orders/plain"]
        async with http.get(f"{url}/admin/v2/namespaces/acme/orders/topics") as r:
            assert await r.json() == ["persistent://acme/orders/plain"]
        async with http.get(f"{base}/plain/subscriptions") as r:
            assert await r.json() == []
        async with http.get(f"{url}/lookup/v2/topic/persistent/acme/orders/plain") as r:
            body = await r.json()
            assert body["brokerUrl"] == "pulsar://localhost:6650" and body["brokerUrlTls"] == ""
        async with http.delete(f"{url}/admin/v2/namespaces/acme/orders") as r:
            assert r.status == 409
        async with http.delete(f"{base}/plain") as r:
            assert r.status == 204
        async with http.delete(f"{base}/p/partitions") as r:
            assert r.status == 204
        async with http.delete(f"{url}/admin/v2/namespaces/acme/orders") as r:
            assert r.status == 204
        async with http.delete(f"{url}/admin/v2/tenants/acme") as r:
            assert r.status == 204
        async with http.get(f"{url}/metrics") as r:
            assert "pulsar_topics_count" in await r.text()


async def test_errors_are_pulsar_shaped(admin: tuple[str, FakeTopics]) -> None:
    url, _ = admin
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{url}/admin/v2/tenants/nope") as r:
            assert r.status == 404 and (await r.json())["reason"] == "Tenant does not exist"
        async with http.put(f"{url}/admin/v2/namespaces/nope/ns") as r:
            assert r.status == 404
        async with http.get(f"{url}/admin/v2/persistent/public/nope") as r:
            assert r.status == 404
        async with http.get(f"{url}/admin/v2/bogus-domain/public/default") as r:
            assert r.status == 404
        async with http.put(f"{url}/admin/v2/tenants/acme", data="{not json") as r:
            assert r.status == 400 and "Invalid JSON" in (await r.json())["reason"]
        async with http.get(f"{url}/admin/v2/persistent/public/default/missing/subscriptions") as r:
            assert r.status == 404
