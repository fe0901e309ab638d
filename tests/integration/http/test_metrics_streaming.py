"""``/metrics`` over many topics does not hold the loop: a request arriving while the text is
being built is answered before the build ends (structure, not timing: the build keeps
producing chunks until that request was served, and fails the test if it never is)."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
from aiohttp import web
from test_admin_api import FakeTopics

from magnetar.broker.admin.http_api import AdminApi
from magnetar.broker.namespace.resources import Resources, TenantInfo
from magnetar.zk import MemoryMetadataServer

CHUNKS_MAX = 200_000


class ManyTopics(FakeTopics):
    def __init__(self) -> None:
        super().__init__()
        self.other_request_served = False
        self.chunks_after_serving = 0
        self.chunks = 0

    async def list_topics(self, tenant: str, namespace: str, domain: str) -> list[str]:
        self.other_request_served = True
        return []

    def metrics_chunks(self) -> Iterator[str]:
        for i in range(CHUNKS_MAX):
            self.chunks += 1
            yield f'pulsar_in_messages_total{{topic="t{i}"}} {i}\n'
            if self.other_request_served:
                self.chunks_after_serving += 1
                if self.chunks_after_serving >= 10:
                    return


async def test_a_request_is_served_while_metrics_are_built() -> None:
    store = MemoryMetadataServer().connect()
    resources = Resources(store, "standalone")
    await resources.ensure_cluster("pulsar://localhost:6650", "http://localhost:8080")
    await resources.create_tenant("public", TenantInfo([], ["standalone"]))
    await resources.create_namespace("public", "default")
    topics = ManyTopics()
    runner = web.AppRunner(
        AdminApi(
            resources,
            topics,
            lookups=topics,
            admin=topics,
            metrics=topics.metrics_chunks,
            metrics_slice_s=0.0,
        ).app()
    )
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            metrics = await http.get(f"{url}/metrics")  # headers: the build has started
            assert metrics.status == 200
            assert metrics.headers["Content-Type"].startswith("text/plain")
            async with http.get(f"{url}/admin/v2/persistent/public/default") as other:
                assert other.status == 200 and await other.json() == []
            text = await metrics.text()
            metrics.release()
        assert topics.other_request_served
        assert topics.chunks < CHUNKS_MAX, "the other request was served during the build"
        lines = text.splitlines()
        assert len(lines) == topics.chunks
        assert lines[0] == 'pulsar_in_messages_total{topic="t0"} 0'
    finally:
        await runner.cleanup()
