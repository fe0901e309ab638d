"""The broker runtime with TLS on: admin REST over HTTPS with and without rights (401/403),
the permission endpoints, HTTP lookup answering the TLS URLs, the certificate reload, and
the TLS protocol setting. Topics are served from memory (no bookies needed here)."""

from __future__ import annotations

import asyncio
import os
import pathlib
import shutil
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from support.security import TlsFiles, TokenKit, issue, make_ca, make_token_kit
from support.waiting import wait_for

from magnetar.broker.config import BrokerConfig
from magnetar.broker.runtime import BrokerRuntime
from magnetar.broker.storage.memory import MemoryStorageFactory
from magnetar.zk.memory import MemoryMetadataServer

pytestmark = pytest.mark.integration


@dataclass
class Secured:
    runtime: BrokerRuntime
    tls: TlsFiles
    kit: TokenKit
    tmp: pathlib.Path

    @property
    def base(self) -> str:
        return f"https://127.0.0.1:{self.runtime.web_port_tls}"

    def ssl_context(self, ca: str | None = None) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=ca or self.tls.ca)

    async def call(
        self,
        method: str,
        path: str,
        role: str | None = None,
        body: Any = None,
        token: str | None = None,
    ) -> tuple[int, Any]:
        headers = {}
        if role is not None:
            headers["Authorization"] = f"Bearer {await asyncio.to_thread(self.kit.token, role)}"
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                method, self.base + path, json=body, headers=headers, ssl=self.ssl_context()
            ) as resp,
        ):
            text = await resp.text()
            try:
                import json

                return resp.status, json.loads(text) if text else None
            except ValueError:
                return resp.status, text


async def _start(tmp: pathlib.Path, **extra: Any) -> Secured:
    ca, ca_path = make_ca(tmp, "server")
    tls = issue(ca, ca_path, tmp, "broker", "localhost", "127.0.0.1")
    kit = await asyncio.to_thread(make_token_kit, tmp)
    config = BrokerConfig(
        broker_service_port=0,
        web_service_port=-1,
        broker_service_port_tls=0,
        web_service_port_tls=0,
        bind_address="127.0.0.1",
        advertised_address="127.0.0.1",
        tls_certificate_file_path=tls.cert,
        tls_key_file_path=tls.key,
        tls_trust_certs_file_path=tls.ca,
        authentication_enabled=True,
        authentication_providers="token",
        token_secret_key=kit.url,
        authorization_enabled=True,
        superuser_roles="admin",
        **extra,
    )
    store = MemoryMetadataServer().connect()
    runtime = BrokerRuntime(config, store, storage=MemoryStorageFactory())
    await runtime.start()
    return Secured(runtime, tls, kit, tmp)


@pytest.fixture
async def secured(tmp_path: pathlib.Path) -> AsyncIterator[Secured]:
    s = await _start(tmp_path)
    try:
        yield s
    finally:
        await s.runtime.close()


async def test_admin_over_https_needs_authentication(secured: Secured) -> None:
    status, body = await secured.call("GET", "/admin/v2/tenants")
    assert (status, body) == (401, {"reason": "Authentication required"})
    status, _ = await secured.call("GET", "/admin/v2/tenants", token="not-a-token")
    assert status == 401
    status, body = await secured.call("GET", "/admin/v2/tenants", role="admin")
    assert status == 200 and "public" in body
    status, _ = await secured.call("GET", "/metrics")  # open, as Pulsar's default
    assert status == 200


async def test_tenant_admin_and_permissions(secured: Secured) -> None:
    tenant = {"adminRoles": ["acme-admin"], "allowedClusters": ["standalone"]}
    assert (await secured.call("PUT", "/admin/v2/tenants/acme", "acme-admin", tenant))[0] == 403
    assert (await secured.call("PUT", "/admin/v2/tenants/acme", "admin", tenant))[0] == 204
    status, body = await secured.call("GET", "/admin/v2/tenants", "acme-admin")
    assert (status, body) == (403, {"reason": "This operation requires super-user access"})
    assert (await secured.call("PUT", "/admin/v2/namespaces/acme/ns", "acme-admin"))[0] == 204
    status, body = await secured.call("PUT", "/admin/v2/namespaces/acme/ns2", "app")
    assert status == 403
    assert body == {"reason": "Don't have permission to administrate resources on this tenant"}
    perms = "/admin/v2/namespaces/acme/ns/permissions"
    assert (await secured.call("POST", perms + "/app", "app", ["produce"]))[0] == 403
    assert (await secured.call("POST", perms + "/app", "acme-admin", ["consume", "produce"]))[
        0
    ] == 204
    assert (await secured.call("POST", perms + "/x", "acme-admin", ["fly"]))[0] == 400
    assert await secured.call("GET", perms, "acme-admin") == (200, {"app": ["consume", "produce"]})
    lookup = "/lookup/v2/topic/persistent/acme/ns/t1"
    status, body = await secured.call("GET", lookup, "app")
    assert status == 200
    assert body["brokerUrlTls"] == secured.runtime.service.namespaces.service_url_tls
    assert body["httpUrlTls"] == secured.base
    assert (await secured.call("GET", lookup, "stranger"))[0] == 403
    assert (await secured.call("DELETE", perms + "/app", "acme-admin"))[0] == 204
    assert await secured.call("GET", perms, "acme-admin") == (200, {})
    assert (await secured.call("GET", lookup, "app"))[0] == 403


async def test_subscription_and_topic_permission_endpoints(secured: Secured) -> None:
    ns = "/admin/v2/namespaces/public/default/permissions"
    assert (await secured.call("POST", ns + "/subscription/s1", "admin", ["r1", "r2"]))[0] == 204
    assert await secured.call("GET", ns + "/subscription", "admin") == (
        200,
        {"s1": ["r1", "r2"]},
    )
    assert (await secured.call("DELETE", ns + "/s1/r1", "admin"))[0] == 204
    assert await secured.call("GET", ns + "/subscription", "admin") == (200, {"s1": ["r2"]})
    topic = "/admin/v2/persistent/public/default/t/permissions"
    assert (await secured.call("POST", topic + "/w", "admin", ["produce"]))[0] == 204
    assert await secured.call("GET", topic, "admin") == (200, {"w": ["produce"]})
    assert (await secured.call("DELETE", topic + "/w", "admin"))[0] == 204
    assert await secured.call("GET", topic, "admin") == (200, {})


async def test_wrong_ca_is_refused_by_https(secured: Secured) -> None:
    _, other = make_ca(secured.tmp, "other")
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        async with (
            aiohttp.ClientSession() as session,
            session.get(secured.base + "/metrics", ssl=secured.ssl_context(other)),
        ):
            pass


async def _handshake(port: int, ca: str, **kw: Any) -> bool:
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False
    for key, value in kw.items():
        setattr(ctx, key, value)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=ctx), 10)
    except (ssl.SSLError, OSError):
        return False
    writer.close()
    return True


async def test_certificate_files_are_reloaded(tmp_path: pathlib.Path) -> None:
    s = await _start(tmp_path, tls_cert_refresh_check_duration_sec=1)
    try:
        port = s.runtime.service.namespaces.port_tls
        assert await _handshake(port, s.tls.ca)
        new_ca, new_ca_path = make_ca(tmp_path, "rotated")
        fresh = issue(new_ca, new_ca_path, tmp_path, "fresh", "localhost", "127.0.0.1")
        assert not await _handshake(port, new_ca_path)
        for src, dst in ((fresh.cert, s.tls.cert), (fresh.key, s.tls.key)):
            shutil.copyfile(src, dst + ".tmp")
            os.replace(dst + ".tmp", dst)  # as a certificate manager renews: atomically
        await wait_for(
            lambda: _handshake(port, new_ca_path), 60, "the new certificate served", interval_s=0.2
        )
        assert s.runtime.service.tls is not None and s.runtime.service.tls.reloads >= 1
        assert not await _handshake(port, s.tls.ca)  # the old certificate is gone
    finally:
        await s.runtime.close()


async def test_tls_protocols_setting(tmp_path: pathlib.Path) -> None:
    s = await _start(tmp_path, tls_protocols="TLSv1.3")
    try:
        port = s.runtime.service.namespaces.port_tls
        assert await _handshake(port, s.tls.ca)
        assert not await _handshake(port, s.tls.ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    finally:
        await s.runtime.close()


async def test_default_is_tls12_or_newer(secured: Secured) -> None:
    port = secured.runtime.service.namespaces.port_tls
    assert await _handshake(port, secured.tls.ca, maximum_version=ssl.TLSVersion.TLSv1_2)
    assert secured.runtime.service.tls is not None
    assert secured.runtime.service.tls.front.minimum_version == ssl.TLSVersion.TLSv1_2


async def test_official_client_with_an_https_service_url(secured: Secured) -> None:
    """HTTP lookup over HTTPS with a token (partitioned metadata and lookup need only a
    produce/consume grant), then the binary connection to the TLS URL the lookup answers."""
    import pulsar

    authz = secured.runtime.service.authz
    await authz.grant_namespace("public", "default", "app", ["produce", "consume"])
    token = await asyncio.to_thread(secured.kit.token, "app")
    stranger = await asyncio.to_thread(secured.kit.token, "stranger")

    def roundtrip(tok: str) -> bytes:
        client = pulsar.Client(
            secured.base,
            authentication=pulsar.AuthenticationToken(tok),
            tls_trust_certs_file_path=secured.tls.ca,
            operation_timeout_seconds=10,
            log_conf_file_path=None,
        )
        try:
            topic = "persistent://public/default/https-lookup"
            consumer = client.subscribe(topic, "s")
            client.create_producer(topic).send(b"via https lookup")
            return bytes(consumer.receive(timeout_millis=10_000).data())
        finally:
            client.close()

    assert await asyncio.to_thread(roundtrip, token) == b"via https lookup"
    with pytest.raises(pulsar.PulsarException):
        await asyncio.to_thread(roundtrip, stranger)
