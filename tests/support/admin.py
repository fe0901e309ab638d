"""The admin REST API of an in-process broker for tests, and a deadline-bounded wait.

Owns: ``Admin`` (serves ``AdminApi`` of an ``InProcessBroker`` on a free 127.0.0.1 port, on
the broker's loop; JSON requests with status codes) and its ``admin`` fixture (over the
requesting module's ``broker`` fixture) and ``http`` (one JSON request to any base URL).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from magnetar.broker.admin.http_api import AdminApi
from support.broker import InProcessBroker


def http(
    base: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """One JSON request; (status, decoded body or None), HTTP errors included."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers or {})
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None


class Admin:
    """The in-process broker's admin REST API on a free port."""

    def __init__(self, broker: InProcessBroker) -> None:
        self.broker = broker
        service = broker.service
        assert service is not None

        async def start() -> tuple[web.AppRunner, int]:
            api = AdminApi.of_service(service)
            runner = web.AppRunner(api.app())
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            return runner, runner.addresses[0][1]

        self.runner, port = broker.call(start)
        self.url = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.broker.call(self.runner.cleanup)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http(self.url, method, path, body)

    def post(self, path: str, body: Any) -> None:
        status, got = self.request("POST", path, body)
        assert status == 204, (status, got)

    def get(self, path: str) -> Any:
        status, got = self.request("GET", path)
        assert status == 200, (status, got)
        return got


@pytest.fixture
def admin(broker: InProcessBroker) -> Iterator[Admin]:
    """The admin API of the test module's ``broker`` fixture."""
    a = Admin(broker)
    try:
        yield a
    finally:
        a.close()
