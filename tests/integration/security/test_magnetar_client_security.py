"""``magnetar.client`` against a secured broker: TLS + token produce/consume, a token
refreshed through AUTH_CHALLENGE on the same connection, typed refusals (this client turns the
broker's handshake ERROR into ``AuthenticationError``), and two brokers redirecting lookups
to each other's ``pulsar+ssl://`` URL."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from support.broker import InProcessBroker
from support.security import TlsFiles, TokenKit, issue, make_ca, make_token_kit
from support.waiting import wait_for

from magnetar.broker.security.tokens import create_token
from magnetar.client import (
    AuthenticationError,
    AuthenticationToken,
    AuthorizationError,
    Client,
    InitialPosition,
)
from magnetar.zk.memory import MemoryMetadataServer

pytestmark = pytest.mark.integration


@dataclass
class Env:
    tls: TlsFiles
    kit: TokenKit


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Env:
    tmp = tmp_path_factory.mktemp("mclient")
    ca, ca_path = make_ca(tmp, "ca")
    return Env(issue(ca, ca_path, tmp, "broker", "localhost", "127.0.0.1"), make_token_kit(tmp))


def _secure_config(env: Env) -> dict[str, object]:
    return {
        "broker_service_port_tls": 0,
        "tls_certificate_file_path": env.tls.cert,
        "tls_key_file_path": env.tls.key,
        "authentication_enabled": True,
        "authentication_providers": "token",
        "token_secret_key": env.kit.url,
        "authentication_refresh_check_seconds": 1,
        "authorization_enabled": True,
        "superuser_roles": "admin",
    }


@pytest.fixture(scope="module")
def broker(env: Env) -> Iterator[InProcessBroker]:
    b = InProcessBroker(**_secure_config(env)).start()  # type: ignore[arg-type]
    assert b.service is not None
    authz = b.service.authz
    b.call(lambda: authz.grant_namespace("public", "default", "app", ["produce", "consume"]))
    try:
        yield b
    finally:
        b.stop()


def _client(broker: InProcessBroker, env: Env, token: object) -> Client:
    assert broker.service is not None
    return Client(
        broker.service.namespaces.service_url_tls,
        authentication=AuthenticationToken(token),  # type: ignore[arg-type]
        tls_trust_certs_file_path=env.tls.ca,
        operation_timeout_seconds=10,
    )


async def test_tls_token_roundtrip_and_refresh_on_the_same_connection(
    broker: InProcessBroker, env: Env
) -> None:
    key = env.kit.secret_key_file.read_bytes()
    calls: list[float] = []

    def supplier() -> str:
        calls.append(time.monotonic())
        ttl = 2 if len(calls) == 1 else 3600  # the first token expires almost at once
        return create_token("app", secret_key=key, expires_in_s=ttl)

    service = broker.service
    assert service is not None
    async with _client(broker, env, supplier) as client:
        topic = "persistent://public/default/mclient-refresh"
        consumer = await client.subscribe(topic, "s", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer(topic)
        await producer.send(b"before")
        connections = set(service.connections)
        # answered an AUTH_CHALLENGE with a fresh token
        await wait_for(lambda: len(calls) >= 2, 60, "a token refresh", interval_s=0.1)
        await producer.send(b"after")
        assert connections & set(service.connections)  # the connection survived the refresh
        got = [(await consumer.receive(timeout_millis=10_000)).data() for _ in range(2)]
        assert got == [b"before", b"after"]


async def test_typed_refusals(broker: InProcessBroker, env: Env, tmp_path: pathlib.Path) -> None:
    forged = make_token_kit(tmp_path).token("app")
    async with _client(broker, env, forged) as client:
        with pytest.raises(AuthenticationError):
            await client.create_producer("persistent://public/default/mclient-forged")
    async with _client(broker, env, env.kit.token("stranger")) as client:
        with pytest.raises(AuthorizationError):
            await client.create_producer("persistent://public/default/mclient-stranger")


async def test_lookup_redirects_to_the_owner_tls_url(env: Env) -> None:
    metadata = MemoryMetadataServer()
    config = _secure_config(env)
    first = InProcessBroker(metadata, **config).start()  # type: ignore[arg-type]
    second = InProcessBroker(metadata, **config).start()  # type: ignore[arg-type]
    try:
        assert first.service is not None and second.service is not None
        topic = "persistent://public/default/mclient-redirect"
        owner = first.call(lambda: first.service.namespaces.lookup(topic))  # type: ignore[union-attr]
        got = second.call(lambda: second.service.namespaces.lookup(topic))  # type: ignore[union-attr]
        assert got.redirect and got.broker_url_tls == first.service.namespaces.service_url_tls
        assert owner.broker_url_tls == first.service.namespaces.service_url_tls
        # a client given the second broker follows the redirect over TLS
        async with _client(second, env, env.kit.token("admin")) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"via redirect")
        assert first.service.topics  # served by the owner
    finally:
        second.stop()
        first.stop()


async def test_tls_only_broker(env: Env) -> None:
    """``broker_service_port=-1``: no plain listener; the TLS URL is the broker's identity."""
    config = {**_secure_config(env), "broker_service_port": -1}
    b = InProcessBroker(**config).start()  # type: ignore[arg-type]
    try:
        assert b.service is not None
        assert b.service.namespaces.service_url == b.service.namespaces.service_url_tls
        assert b.service.namespaces.service_url.startswith("pulsar+ssl://")
        async with _client(b, env, env.kit.token("admin")) as client:
            producer = await client.create_producer("persistent://public/default/tls-only")
            await producer.send(b"only tls")
    finally:
        b.stop()
