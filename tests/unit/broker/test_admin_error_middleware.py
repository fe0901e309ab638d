"""The admin API's error middleware: a metadata store that is unreachable for now answers
503 with a reason (the caller retries), a bug 500; neither takes the server down."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from magnetar.broker.admin.http_api import _errors
from magnetar.zk.errors import ConnectionLoss


async def _lost(request: web.Request) -> web.StreamResponse:
    raise ConnectionLoss("not connected to ZooKeeper (session suspended)")


async def _bug(request: web.Request) -> web.StreamResponse:
    raise ValueError("a bug")


async def test_a_lost_metadata_connection_is_503_and_a_bug_500() -> None:
    app = web.Application(middlewares=[_errors])
    app.router.add_get("/lost", _lost)
    app.router.add_get("/bug", _bug)
    async with TestClient(TestServer(app)) as client:
        lost = await client.get("/lost")
        assert lost.status == 503
        assert "retry" in (await lost.json())["reason"]
        bug = await client.get("/bug")
        assert bug.status == 500
        assert (await bug.json())["reason"] == "ValueError: a bug"
